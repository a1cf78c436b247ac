//! `fedctl`: join and unjoin member clusters of a Meridian federation, run it locally, show
//! where a federated object runs, and plan placements offline.

#[global_allocator]
static ALLOCATOR: meridian_alloc::Allocator = meridian_alloc::Allocator;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod backup;
mod etcd;
mod join;
mod kubeutil;
mod lbagents;
mod members;
mod plan;
mod status;
mod up;
mod whatif;

/// Meridian's command-line tool.
#[derive(Parser, Debug)]
#[command(name = "fedctl", version)]
struct Cli {
    /// Kubeconfig holding the federation and member contexts (default: $KUBECONFIG, merged).
    #[arg(long, global = true, env = "FEDCTL_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The federation's context (default: the current context).
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Join a member cluster: least-privilege credentials in it, a Cluster in the federation.
    Join {
        /// Name of the cluster in the federation.
        name: String,
        /// The member's context in the kubeconfig (default: the cluster name).
        #[arg(long)]
        cluster_context: Option<String>,
        /// Region of the cluster.
        #[arg(long)]
        region: Option<String>,
        /// Zone of the cluster.
        #[arg(long)]
        zone: Option<String>,
        /// Labels of the Cluster object, k=v (repeatable or comma-separated).
        #[arg(long, value_delimiter = ',')]
        labels: Vec<String>,
        /// A custom resource group (a CRD's spec.group, e.g. monitoring.coreos.com) whose
        /// objects Meridian may write in the member, so policies can propagate them
        /// (repeatable or comma-separated; run join again to change the list).
        #[arg(long = "custom-resource-group", value_delimiter = ',')]
        custom_resource_groups: Vec<String>,
        /// Print what would be created, create nothing.
        #[arg(long)]
        dry_run: bool,
        /// How long to wait for the cluster to be Ready (0 to not wait).
        #[arg(long, default_value = "120")]
        wait_seconds: u64,
    },
    /// Remove a member: its credentials there and its Secret and Cluster here.
    Unjoin {
        /// Name of the cluster in the federation.
        name: String,
        /// The member's context (default: the cluster name).
        #[arg(long)]
        cluster_context: Option<String>,
    },
    /// Run the whole federation locally: API server, a simulated fleet (joined), controllers
    /// and scheduler, until Ctrl-C.
    Up {
        /// Simulated member clusters.
        #[arg(long, default_value_t = 3)]
        clusters: u32,
        /// Nodes per simulated cluster.
        #[arg(long, default_value_t = 3)]
        nodes: u32,
        /// Regions the clusters are spread over (comma-separated).
        #[arg(long, default_value = "eu-west,us-east")]
        regions: String,
        /// Directory for state, credentials, kubeconfigs and logs (kept across restarts).
        #[arg(long, default_value = "meridian-data")]
        data_dir: PathBuf,
        /// Port of the federation API server (0 picks a free one); with `--storage etcd` the
        /// second replica serves on the next port.
        #[arg(long, default_value_t = 6443)]
        port: u16,
        /// `embedded` (one API server) or `etcd` (a local 3-member etcd in the data directory
        /// and two API server replicas on it).
        #[arg(long, value_enum, default_value = "embedded")]
        storage: UpStorage,
        /// The etcd binary for `--storage etcd` (default: next to fedctl, else on PATH;
        /// tools/install-etcd.sh installs one).
        #[arg(long, env = "ETCD")]
        etcd_binary: Option<PathBuf>,
        /// A custom resource group (a CRD's spec.group) every simulated cluster is joined
        /// with, as `fedctl join --custom-resource-group` (repeatable or comma-separated).
        #[arg(long = "custom-resource-group", value_delimiter = ',')]
        custom_resource_groups: Vec<String>,
    },
    /// Write every object of the federation's store to a file (the embedded store of a
    /// stopped API server, or etcd), in the order of their writes.
    Backup {
        /// The backup file to write.
        #[arg(short = 'o', long = "output")]
        file: PathBuf,
        #[command(flatten)]
        store: backup::StoreArgs,
    },
    /// Restore a backup into an empty store (the whole file is checked first: a damaged one
    /// writes nothing). Objects get new resourceVersions in the same order.
    Restore {
        /// The backup file to read.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        #[command(flatten)]
        store: backup::StoreArgs,
    },
    /// Copy the embedded store of a stopped API server (--data-dir) into an empty etcd,
    /// keeping every object and the order of their writes.
    Migrate {
        /// The backend to move to.
        #[arg(long, value_enum)]
        to: MigrateTo,
        /// The API server's --data-dir (`fedctl up`: `<its data dir>/federation`).
        #[arg(long)]
        data_dir: PathBuf,
        #[command(flatten)]
        etcd: backup::EtcdArgs,
    },
    /// Where a federated Deployment, ReplicaSet, StatefulSet, Job or Service runs: one row
    /// per member cluster from its Placement (e.g. `fedctl status deploy/web -n shop`).
    Status {
        /// `<kind>/<name>` with kind deploy|deployment, rs|replicaset, sts|statefulset, job or
        /// svc|service (or the
        /// kind alone, with the name as the next argument).
        target: String,
        /// The name, when `target` is only the kind.
        name: Option<String>,
        /// Namespace (default: the context's namespace, else `default`).
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: status::Format,
    },
    /// Offline what-if: decide placements for objects in YAML files, without a server.
    Plan {
        /// YAML files with Clusters (with status), workloads, policies and Placements
        /// (`-` reads stdin); see docs/plan.md.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        /// Treat this cluster as failed beyond its toleration (repeatable or comma-separated).
        #[arg(long, value_delimiter = ',')]
        without: Vec<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: whatif::Format,
    },
}

/// `fedctl migrate --to`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum MigrateTo {
    Etcd,
}

/// `fedctl up --storage`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum UpStorage {
    Embedded,
    Etcd,
}

fn parse_labels(list: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut bad = Vec::new();
    for l in list.iter().filter(|l| !l.is_empty()) {
        match l.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                out.insert(k.to_string(), v.to_string());
            }
            _ => bad.push(l.clone()),
        }
    }
    if !bad.is_empty() {
        anyhow::bail!("labels must be key=value: {}", bad.join(", "));
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    meridian_alloc::disable_huge_pages();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Cmd::Plan {
        files,
        without,
        output,
    } = &cli.command
    {
        // Planning reads only files: no kubeconfig needed.
        print!("{}", whatif::run(files, without, *output)?);
        return Ok(());
    }
    if let Cmd::Up {
        clusters,
        nodes,
        regions,
        data_dir,
        port,
        storage,
        etcd_binary,
        custom_resource_groups,
    } = &cli.command
    {
        let o = up::UpOptions {
            data_dir: data_dir.clone(),
            clusters: *clusters,
            nodes: *nodes,
            regions: regions.clone(),
            port: *port,
            storage: match storage {
                UpStorage::Embedded => up::Storage::Embedded,
                UpStorage::Etcd => up::Storage::Etcd {
                    binary: etcd_binary.clone(),
                },
            },
            custom_groups: custom_resource_groups.clone(),
        };
        return up::up(&o).await;
    }
    match &cli.command {
        Cmd::Backup { file, store } => {
            let done = backup::backup(store, file).await?;
            println!(
                "backed up {} objects at revision {} to {}",
                done.keys,
                done.revision,
                file.display()
            );
            return Ok(());
        }
        Cmd::Restore { file, store } => {
            let done = backup::restore(store, file).await?;
            println!("restored {} objects; {}", done.keys, backup::RELIST_NOTE);
            return Ok(());
        }
        Cmd::Migrate {
            to: MigrateTo::Etcd,
            data_dir,
            etcd,
        } => {
            let done = backup::migrate(data_dir, etcd).await?;
            println!(
                "migrated {} objects to etcd; start the API server with --storage-backend etcd --etcd-servers {} --etcd-prefix {}. {}",
                done.keys,
                etcd.etcd_servers.join(","),
                etcd.etcd_prefix,
                backup::RELIST_NOTE
            );
            return Ok(());
        }
        _ => {}
    }
    let kc = kubeutil::load_kubeconfig(cli.kubeconfig.as_deref())?;
    match cli.command {
        Cmd::Join {
            name,
            cluster_context,
            region,
            zone,
            labels,
            custom_resource_groups,
            dry_run,
            wait_seconds,
        } => {
            let o = join::JoinOptions {
                cluster_context: cluster_context.unwrap_or_else(|| name.clone()),
                name,
                federation_context: cli.context,
                region,
                zone,
                labels: parse_labels(&labels)?,
                custom_groups: custom_resource_groups,
                dry_run,
                wait: Duration::from_secs(wait_seconds),
            };
            join::join(&kc, &o).await
        }
        Cmd::Unjoin {
            name,
            cluster_context,
        } => {
            let o = join::UnjoinOptions {
                cluster_context: cluster_context.unwrap_or_else(|| name.clone()),
                name,
                federation_context: cli.context,
            };
            join::unjoin(&kc, &o).await
        }
        Cmd::Status {
            target,
            name,
            namespace,
            output,
        } => {
            let (kind, name) = status::parse_target(&target, name.as_deref())?;
            let t = kubeutil::target(&kc, cli.context.as_deref()).await?;
            let ns = namespace.unwrap_or_else(|| t.client.default_namespace().to_string());
            print!(
                "{}",
                status::run(&t.client, kind, &ns, &name, output).await?
            );
            Ok(())
        }
        Cmd::Plan { .. }
        | Cmd::Up { .. }
        | Cmd::Backup { .. }
        | Cmd::Restore { .. }
        | Cmd::Migrate { .. } => Ok(()),
    }
}

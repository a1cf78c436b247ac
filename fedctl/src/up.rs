//! `fedctl up`: the whole federation on one machine — the API server (embedded store, or two
//! replicas on a local 3-member etcd), a simulated member fleet (pods answering HTTP on
//! loopback addresses), the controllers, the scheduler and an lb-agent per simulated cluster,
//! with every simulated cluster joined — as child processes of the sibling binaries, until
//! Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_yaml_ng::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::join::{self, JoinOptions};
use crate::lbagents;

/// Options of `fedctl up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Where federation state, credentials and kubeconfigs live (kept across restarts).
    pub data_dir: PathBuf,
    /// Simulated member clusters.
    pub clusters: u32,
    /// Nodes per simulated cluster.
    pub nodes: u32,
    /// Regions the simulated clusters are spread over.
    pub regions: String,
    /// Port of the federation API server (0 picks one).
    pub port: u16,
    /// What the API server stores its objects in.
    pub storage: Storage,
    /// Custom resource groups Meridian may write in every simulated cluster (passed to
    /// each join).
    pub custom_groups: Vec<String>,
}

/// The federation's storage under `fedctl up`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// The embedded store, one API server.
    Embedded,
    /// A local 3-member etcd and two API server replicas on it.
    Etcd {
        /// The etcd binary, when given (else found next to fedctl or on `PATH`).
        binary: Option<PathBuf>,
    },
}

/// The second API server replica's context in the kubeconfig (the first is `meridian`).
pub const SECOND_REPLICA_CONTEXT: &str = "meridian-b";

/// The DNS zone the local lb-agents answer for.
pub const DNS_ZONE: &str = "global.meridian.test";

/// A sibling binary of this fedctl (they are built and installed together).
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating fedctl")?;
    let p = exe.parent().map(|d| d.join(name)).unwrap_or_default();
    if p.exists() {
        Ok(p)
    } else {
        anyhow::bail!(
            "{} not found next to fedctl: build the workspace binaries (cargo build --release --workspace --bins)",
            p.display()
        )
    }
}

/// Spawns a component and returns once it printed a line starting with `ready` (its other
/// output goes to a log file in the data directory).
async fn spawn(
    name: &str,
    log_name: &str,
    args: &[String],
    ready: &str,
    log_dir: &Path,
) -> anyhow::Result<(Child, Vec<String>)> {
    let log_path = log_dir.join(format!("{log_name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut child = Command::new(sibling(name)?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await? {
            let done = line.starts_with(ready);
            seen.push(line);
            if done {
                return Ok::<_, std::io::Error>(true);
            }
        }
        Ok(false)
    };
    match tokio::time::timeout(Duration::from_secs(60), read).await {
        Ok(Ok(true)) => {}
        _ => anyhow::bail!("{name} did not start; see {}", log_path.display()),
    }
    // Keep draining so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, seen))
}

fn read_kubeconfig(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_yaml_ng::from_str(&text)?)
}

/// A kubeconfig whose one cluster, context and user are named after `name`: the API server
/// names them all after `meridian`, and a second replica's must not collide with the first's.
fn rename_kubeconfig(mut kc: Value, from: &str, name: &str) -> Value {
    let rename = |v: &mut Value| {
        if let Some(s) = v.as_str()
            && let Some(rest) = s.strip_prefix(from)
        {
            *v = Value::String(format!("{name}{rest}"));
        }
    };
    for list in ["clusters", "contexts", "users"] {
        if let Some(Value::Sequence(items)) = kc.get_mut(list) {
            for item in items {
                if let Some(n) = item.get_mut("name") {
                    rename(n);
                }
                if let Some(context) = item.get_mut("context") {
                    for field in ["cluster", "user"] {
                        if let Some(v) = context.get_mut(field) {
                            rename(v);
                        }
                    }
                }
            }
        }
    }
    if let Some(current) = kc.get_mut("current-context") {
        rename(current);
    }
    kc
}

/// Merges kubeconfigs: clusters, contexts and users of all; the first one's current context.
fn merge_kubeconfigs(configs: Vec<Value>) -> anyhow::Result<String> {
    let mut merged: Option<Value> = None;
    for v in configs {
        match &mut merged {
            None => merged = Some(v),
            Some(m) => {
                for list in ["clusters", "contexts", "users"] {
                    if let (Some(Value::Sequence(dst)), Some(Value::Sequence(src))) =
                        (m.get_mut(list).cloned(), v.get(list))
                    {
                        let mut dst = dst;
                        dst.extend(src.iter().cloned());
                        m[list] = Value::Sequence(dst);
                    }
                }
            }
        }
    }
    Ok(serde_yaml_ng::to_string(&merged.context("no kubeconfig")?)?)
}

/// Runs everything until Ctrl-C or SIGTERM.
pub async fn up(o: &UpOptions) -> anyhow::Result<()> {
    lbagents::check_fleet_size(o.clusters)?;
    std::fs::create_dir_all(&o.data_dir)?;
    let data = std::fs::canonicalize(&o.data_dir)?;
    let logs = data.join("logs");
    std::fs::create_dir_all(&logs)?;
    // etcd first: both API server replicas need it to start.
    let etcd = match &o.storage {
        Storage::Embedded => None,
        Storage::Etcd { binary } => {
            let binary = crate::etcd::binary(binary.as_deref())?;
            Some(crate::etcd::start(&data.join("etcd"), binary).await?)
        }
    };
    let first = ApiServerArgs {
        data_dir: data.join("federation"),
        port: o.port,
        etcd_servers: etcd.as_ref().map(|e| e.endpoints().join(",")),
        shared_credentials: None,
    };
    let (apiserver, fed_kc) = spawn_apiserver("federation-apiserver", &first, &logs).await?;
    let mut kubeconfigs = vec![read_kubeconfig(&fed_kc)?];
    // The second replica reads the first one's CA and admin token and generates nothing: a
    // client holding the first one's kubeconfig can use either.
    let second = match &first.etcd_servers {
        None => None,
        Some(servers) => {
            let args = ApiServerArgs {
                data_dir: data.join("federation-b"),
                port: if o.port == 0 {
                    0
                } else {
                    o.port.saturating_add(1)
                },
                etcd_servers: Some(servers.clone()),
                shared_credentials: Some(first.data_dir.join("pki")),
            };
            let (child, kc) = spawn_apiserver("federation-apiserver-b", &args, &logs).await?;
            kubeconfigs.push(rename_kubeconfig(
                read_kubeconfig(&kc)?,
                "meridian",
                SECOND_REPLICA_CONTEXT,
            ));
            Some(child)
        }
    };
    let sim_kc = data.join("sim.kubeconfig");
    let (sim, _) = spawn(
        "cluster-sim",
        "cluster-sim",
        &[
            format!("--clusters={}", o.clusters),
            format!("--nodes={}", o.nodes),
            format!("--regions={}", o.regions),
            format!("--kubeconfig-out={}", sim_kc.display()),
            "--pod-network=loopback".into(),
            "--serve-pods".into(),
            "--lb-pool=127.0.1.{n}".into(),
        ],
        "admin API:",
        &logs,
    )
    .await?;
    let kubeconfig = data.join("kubeconfig");
    kubeconfigs.push(read_kubeconfig(&sim_kc)?);
    federation_write(&kubeconfig, &merge_kubeconfigs(kubeconfigs)?)?;
    // Each component as its own least-privilege user: the API server wrote their
    // kubeconfigs beside the admin's.
    let component_arg = |component: &str| {
        format!(
            "--kubeconfig={}",
            fed_kc
                .with_file_name(format!("{component}.kubeconfig"))
                .display()
        )
    };
    // One replica of each: no Lease to take, so a restart after an unclean stop does not
    // wait for the previous run's Lease to expire.
    let no_election = "--leader-elect=false".to_string();
    let controllers = spawn_quiet(
        "fed-controllers",
        &[
            component_arg("fed-controllers"),
            "--metrics-bind-address=off".into(),
            format!("--dns-zone={DNS_ZONE}"),
            no_election.clone(),
        ],
        &logs,
        "fed-controllers",
    )?;
    let scheduler = spawn_quiet(
        "fed-scheduler",
        &[
            component_arg("fed-scheduler"),
            "--metrics-bind-address=off".into(),
            no_election,
        ],
        &logs,
        "fed-scheduler",
    )?;
    let kc = crate::kubeutil::load_kubeconfig(Some(&kubeconfig))?;
    for i in 1..=o.clusters {
        let name = format!("sim-{i}");
        let opts = JoinOptions {
            name: name.clone(),
            cluster_context: name.clone(),
            federation_context: Some("meridian".into()),
            region: None,
            zone: None,
            labels: Default::default(),
            custom_groups: o.custom_groups.clone(),
            dry_run: false,
            wait: Duration::from_secs(60),
        };
        join::join(&kc, &opts)
            .await
            .with_context(|| format!("joining {name}"))?;
    }
    let mut agents = Vec::new();
    for n in 1..=o.clusters {
        let member = crate::kubeutil::target(&kc, Some(&format!("sim-{n}"))).await?;
        lbagents::ensure_service(&member.client, n).await?;
        agents.push(spawn_quiet(
            "lb-agent",
            &lbagents::args(n, &sim_kc),
            &logs,
            &format!("lb-agent-sim-{n}"),
        )?);
    }
    println!();
    println!(
        "Meridian is up: federation + {} simulated clusters (logs in {}).",
        o.clusters,
        logs.display()
    );
    if let Some(etcd) = &etcd {
        println!(
            "Storage: a 3-member etcd at {} (data in {}); two API server replicas on it, contexts meridian and {SECOND_REPLICA_CONTEXT}.",
            etcd.endpoints().join(","),
            data.join("etcd").display()
        );
    }
    println!("export KUBECONFIG={}", kubeconfig.display());
    println!(
        "Contexts: meridian (the federation, current), sim-1 ... sim-{}. Ctrl-C stops everything.",
        o.clusters
    );
    println!(
        "lb-agents: sim-n at {}..{} (HTTP :{}, HTTPS by SNI :{}, DNS :{}; dedicated Service addresses from 127.2.<n>.0/24); a federated Service answers as <svc>.<ns>.{}",
        lbagents::address(1),
        lbagents::address(o.clusters),
        lbagents::HTTP_PORT,
        lbagents::HTTPS_PORT,
        lbagents::DNS_PORT,
        DNS_ZONE
    );
    wait_for_signal().await;
    println!("stopping");
    let mut children: Vec<Child> = agents;
    children.extend([scheduler, controllers, sim]);
    children.extend(second);
    children.push(apiserver);
    // Ctrl-C on a terminal reaches the children too: give them a moment to exit on their own,
    // then stop the rest (the API server's store is crash-safe either way).
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        futures::future::join_all(children.iter_mut().map(Child::wait)),
    )
    .await;
    for c in &mut children {
        let _ = c.kill().await;
    }
    // The API servers are gone: now etcd, cleanly (its members would survive a kill too).
    if let Some(etcd) = etcd {
        let killed = etcd.stop(Duration::from_secs(10)).await;
        if killed > 0 {
            eprintln!("{killed} etcd member(s) did not stop within 10 s and were killed");
        }
    }
    Ok(())
}

/// How one API server replica runs.
struct ApiServerArgs {
    data_dir: PathBuf,
    port: u16,
    /// etcd's client URLs; `None`: the embedded store.
    etcd_servers: Option<String>,
    /// The first replica's credentials directory, read and never written.
    shared_credentials: Option<PathBuf>,
}

impl ApiServerArgs {
    fn flags(&self) -> Vec<String> {
        let mut flags = vec![
            format!("--secure-port={}", self.port),
            format!("--data-dir={}", self.data_dir.display()),
        ];
        if let Some(servers) = &self.etcd_servers {
            flags.push("--storage-backend=etcd".into());
            flags.push(format!("--etcd-servers={servers}"));
        }
        if let Some(dir) = &self.shared_credentials {
            flags.push(format!("--credentials-dir={}", dir.display()));
            flags.push("--generate-credentials=false".into());
        }
        flags
    }
}

/// Starts an API server replica (logging to `<log_name>.log`); returns it with the path of
/// the admin kubeconfig it wrote.
async fn spawn_apiserver(
    log_name: &str,
    args: &ApiServerArgs,
    logs: &Path,
) -> anyhow::Result<(Child, PathBuf)> {
    let (child, banner) = spawn(
        "federation-apiserver",
        log_name,
        &args.flags(),
        "export KUBECONFIG=",
        logs,
    )
    .await?;
    let kubeconfig = banner
        .last()
        .map(|l| PathBuf::from(l.trim_start_matches("export KUBECONFIG=")))
        .unwrap_or_default();
    Ok((child, kubeconfig))
}

fn spawn_quiet(name: &str, args: &[String], logs: &Path, log_name: &str) -> anyhow::Result<Child> {
    let log = std::fs::File::create(logs.join(format!("{log_name}.log")))?;
    // Logs go to stdout (tracing's default) and panics to stderr: both into the log file.
    Command::new(sibling(name)?)
        .args(args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))
}

fn federation_write(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

async fn wait_for_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_replica_gets_its_own_names_in_the_merged_kubeconfig() {
        let replica = |server: &str| -> Value {
            serde_yaml_ng::from_str(&format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: meridian\n  cluster:\n    server: {server}\ncontexts:\n- name: meridian\n  context:\n    cluster: meridian\n    user: meridian-admin\ncurrent-context: meridian\nusers:\n- name: meridian-admin\n  user:\n    token: t\n"
            ))
            .unwrap()
        };
        let b = rename_kubeconfig(replica("https://b"), "meridian", SECOND_REPLICA_CONTEXT);
        let merged: Value =
            serde_yaml_ng::from_str(&merge_kubeconfigs(vec![replica("https://a"), b]).unwrap())
                .unwrap();
        let names = |list: &str| -> Vec<String> {
            merged[list]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names("clusters"), ["meridian", "meridian-b"]);
        assert_eq!(names("users"), ["meridian-admin", "meridian-b-admin"]);
        assert_eq!(names("contexts"), ["meridian", "meridian-b"]);
        assert_eq!(merged["contexts"][1]["context"]["cluster"], "meridian-b");
        assert_eq!(merged["contexts"][1]["context"]["user"], "meridian-b-admin");
        assert_eq!(merged["clusters"][1]["cluster"]["server"], "https://b");
        assert_eq!(merged["current-context"], "meridian");
    }
}

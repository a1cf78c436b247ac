//! The `cluster-sim` command: run a fleet (from flags or a fleet file), or `ctl` a running one.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::admin::AdminState;
use crate::fleet::{ClusterSpec, FleetFile, parse_duration};
use crate::runtime::Fleet;

/// A fleet of simulated Kubernetes clusters in one process.
#[derive(Parser, Debug)]
#[command(name = "cluster-sim", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Fault injection and inspection of a running fleet.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Fleet options.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of a fleet run.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of clusters (named sim-1, sim-2, ...), unless --fleet is given.
    #[arg(long, default_value_t = 3)]
    pub clusters: u32,
    /// Nodes per cluster.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// CPU per node.
    #[arg(long, default_value = "8")]
    pub node_cpu: String,
    /// Memory per node.
    #[arg(long, default_value = "32Gi")]
    pub node_memory: String,
    /// Pods per node.
    #[arg(long, default_value_t = 110)]
    pub node_pods: u32,
    /// Regions, assigned to clusters in turn; zones are `<region>-a`, `<region>-b`, ...
    #[arg(long, value_delimiter = ',', default_value = "region-1")]
    pub regions: Vec<String>,
    /// Delay from a pod's binding to it being Ready.
    #[arg(long, default_value = "1s")]
    pub ready_delay: String,
    /// A YAML fleet file describing clusters individually (overrides the flags above).
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    /// Where to write the kubeconfig with one context per cluster.
    #[arg(long, default_value = "sim.kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// Address the clusters and the admin API listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Port of the admin API (0 picks one; `ctl` finds it through <kubeconfig-out>.admin.json).
    #[arg(long, default_value_t = 0)]
    pub admin_port: u16,
}

/// `cluster-sim ctl` commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Inspect or change a running fleet.
    Ctl(CtlArgs),
}

/// Arguments of `ctl`.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The fleet's kubeconfig (its admin state file sits beside it).
    #[arg(long, default_value = "sim.kubeconfig", global = true)]
    pub kubeconfig: PathBuf,
    /// The action.
    #[command(subcommand)]
    pub action: CtlAction,
}

/// What `ctl` does.
#[derive(Subcommand, Debug)]
pub enum CtlAction {
    /// List clusters with their addresses and faults.
    List,
    /// Refuse connections.
    Down {
        /// Cluster name.
        cluster: String,
    },
    /// Heal every fault.
    Up {
        /// Cluster name.
        cluster: String,
    },
    /// Accept connections but never answer.
    Partition {
        /// Cluster name.
        cluster: String,
    },
    /// Add latency to every request.
    Slow {
        /// Cluster name.
        cluster: String,
        /// Latency, e.g. 2s or 300ms.
        #[arg(long, default_value = "1s")]
        latency: String,
    },
    /// Go down and up alternately.
    Flap {
        /// Cluster name.
        cluster: String,
        /// How long each phase lasts.
        #[arg(long, default_value = "2s")]
        period: String,
    },
    /// Set a node's Ready condition.
    NodeReady {
        /// Cluster name.
        cluster: String,
        /// Node name.
        node: String,
        /// true or false.
        #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
        ready: bool,
    },
    /// Change a node's capacity.
    NodeCapacity {
        /// Cluster name.
        cluster: String,
        /// Node name.
        node: String,
        /// New CPU.
        #[arg(long)]
        cpu: Option<String>,
        /// New memory.
        #[arg(long)]
        memory: Option<String>,
    },
}

/// The state file that sits beside a kubeconfig.
pub fn state_path(kubeconfig: &std::path::Path) -> PathBuf {
    let mut p = kubeconfig.as_os_str().to_owned();
    p.push(".admin.json");
    PathBuf::from(p)
}

/// The fleet the flags describe.
pub fn fleet_from_flags(a: &RunArgs) -> anyhow::Result<FleetFile> {
    if let Some(f) = &a.fleet {
        return Ok(FleetFile::load(f)?);
    }
    parse_duration(&a.ready_delay)?;
    let regions: Vec<String> = a
        .regions
        .iter()
        .filter(|r| !r.is_empty())
        .cloned()
        .collect();
    let regions = if regions.is_empty() {
        vec!["region-1".to_string()]
    } else {
        regions
    };
    let clusters = (0..a.clusters)
        .map(|i| {
            let region = regions[i as usize % regions.len()].clone();
            let zone_letter = (b'a' + ((i as usize / regions.len()) % 26) as u8) as char;
            ClusterSpec {
                name: format!("sim-{}", i + 1),
                zone: format!("{region}-{zone_letter}"),
                region,
                nodes: a.nodes,
                node_cpu: a.node_cpu.clone(),
                node_memory: a.node_memory.clone(),
                node_pods: a.node_pods,
                labels: Default::default(),
                taints: Vec::new(),
                kubernetes_version: "v1.34.2".into(),
                // Loopback addresses: reachable here, and nothing else listens on them.
                lb_pool: vec![format!("127.200.{}.0/24", i % 256)],
                ready_delay: Some(a.ready_delay.clone()),
            }
        })
        .collect();
    let f = FleetFile { clusters };
    f.validate()?;
    Ok(f)
}

/// Runs a fleet until Ctrl-C or SIGTERM.
pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let spec = fleet_from_flags(&a)?;
    let fleet = Arc::new(Fleet::start(&spec, a.bind_address).await?);
    fleet.write_kubeconfig(&a.kubeconfig_out)?;
    // The admin API has its own CA and token, written beside the kubeconfig for `ctl`.
    let ca = federation_apiserver::pki::Authority::generate()?;
    let serving = ca.serving_cert(&[a.bind_address.to_string()])?;
    let tls = federation_apiserver::server::tls_config(&serving.cert_pem, &serving.key_pem, None)?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::new(a.bind_address, a.admin_port)).await?;
    let bytes: [u8; 24] = rand::random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let state = AdminState {
        url: format!("https://{}", listener.local_addr()?),
        token: token.clone(),
        ca_pem: ca.cert_pem.clone(),
    };
    federation_apiserver::pki::write_private(
        &state_path(&a.kubeconfig_out),
        &serde_json::to_string_pretty(&state)?,
    )?;
    tokio::spawn(crate::admin::serve(listener, tls, fleet.clone(), token));
    println!(
        "cluster-sim: {} clusters ready; kubeconfig: {}",
        fleet.clusters.len(),
        a.kubeconfig_out.display()
    );
    for c in &fleet.clusters {
        println!(
            "  {:<12} {}  region={} zone={} nodes={}",
            c.spec.name,
            c.server_url(),
            c.spec.region,
            c.spec.zone,
            c.spec.nodes
        );
    }
    println!("admin API: {}", state.url);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    fleet.stop();
    Ok(())
}

/// Runs one `ctl` command against a running fleet.
pub async fn ctl(c: CtlArgs) -> anyhow::Result<()> {
    let path = state_path(&c.kubeconfig);
    let state: AdminState =
        serde_json::from_str(&std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!(
                "reading {}: {e} (is cluster-sim running with --kubeconfig-out {}?)",
                path.display(),
                c.kubeconfig.display()
            )
        })?)?;
    let ms = |s: &str| parse_duration(s).map(|d| d.as_millis() as u64);
    let (method, path, body) = match &c.action {
        CtlAction::List => ("GET", "/clusters".to_string(), serde_json::Value::Null),
        CtlAction::Down { cluster } => (
            "POST",
            format!("/clusters/{cluster}/fault"),
            serde_json::json!({"action": "down"}),
        ),
        CtlAction::Up { cluster } => (
            "POST",
            format!("/clusters/{cluster}/fault"),
            serde_json::json!({"action": "up"}),
        ),
        CtlAction::Partition { cluster } => (
            "POST",
            format!("/clusters/{cluster}/fault"),
            serde_json::json!({"action": "partition"}),
        ),
        CtlAction::Slow { cluster, latency } => (
            "POST",
            format!("/clusters/{cluster}/fault"),
            serde_json::json!({"action": "slow", "latencyMs": ms(latency)?}),
        ),
        CtlAction::Flap { cluster, period } => (
            "POST",
            format!("/clusters/{cluster}/fault"),
            serde_json::json!({"action": "flap", "periodMs": ms(period)?}),
        ),
        CtlAction::NodeReady {
            cluster,
            node,
            ready,
        } => (
            "POST",
            format!("/clusters/{cluster}/nodes/{node}"),
            serde_json::json!({"ready": ready}),
        ),
        CtlAction::NodeCapacity {
            cluster,
            node,
            cpu,
            memory,
        } => (
            "POST",
            format!("/clusters/{cluster}/nodes/{node}"),
            serde_json::json!({"cpu": cpu, "memory": memory}),
        ),
    };
    let (code, v) = crate::admin::request(&state, method, &path, body).await?;
    if code != 200 {
        anyhow::bail!(
            "{}",
            v.get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("request failed")
        );
    }
    match &c.action {
        CtlAction::List => {
            println!(
                "{:<12} {:<28} {:<12} {:<14} {:>5}  FAULT",
                "NAME", "SERVER", "REGION", "ZONE", "NODES"
            );
            for cl in v["clusters"].as_array().into_iter().flatten() {
                println!(
                    "{:<12} {:<28} {:<12} {:<14} {:>5}  {}",
                    cl["name"].as_str().unwrap_or(""),
                    cl["server"].as_str().unwrap_or(""),
                    cl["region"].as_str().unwrap_or(""),
                    cl["zone"].as_str().unwrap_or(""),
                    cl["nodes"],
                    cl["fault"]["fault"].as_str().unwrap_or("")
                );
            }
        }
        _ => println!("{}", v),
    }
    Ok(())
}

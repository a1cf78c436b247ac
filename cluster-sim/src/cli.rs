//! The `cluster-sim` command: run a fleet (from flags or a fleet file), or `ctl` a running one.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::admin::AdminState;
use crate::fleet::{ClusterSpec, FleetFile, Runtime, parse_duration};
use crate::podnet::PodNetwork;
use crate::runtime::Fleet;

/// A fleet of simulated Kubernetes clusters in one process.
#[derive(Parser, Debug)]
#[command(
    name = "cluster-sim",
    version,
    args_conflicts_with_subcommands = true,
    after_long_help = FLEET_HELP
)]
pub struct Cli {
    /// Fault injection and inspection of a running fleet.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Fleet options.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The fleet file format and the address plan, shown by `--help`.
const FLEET_HELP: &str = "\
FLEET FILE (--fleet):
  podNetwork: loopback        # overlay (default) or loopback; --pod-network overrides
  servePods: true             # needs podNetwork: loopback unless every cluster is
                              # runtime: runc; --serve-pods turns it on
  jobPodDuration: 1s          # how long Job pods run; --job-pod-duration overrides
  clusters:
  - name: eu-1                # cluster and kubeconfig context name (DNS label)
    region: eu-west           # topology labels of its nodes
    zone: eu-west-a
    nodes: 3                  # default 3
    nodeCpu: \"8\"              # default 8
    nodeMemory: 32Gi          # default 32Gi
    nodePods: 110             # default 110
    labels: {tier: gold}      # on every node
    taints: [{key: gpu, value: \"\", effect: NoSchedule}]
    kubernetesVersion: v1.34.2
    lbPool: [127.0.1.1]       # LoadBalancer addresses (Services, and the one Ingress
                              # address): IPv4 addresses or a.b.c.d/nn ranges
    readyDelay: 500ms         # binding to Ready
    runtime: runc             # sim (default) or runc: run pods for real (see RUNC RUNTIME)
  imageDir: target/images     # images.json + oci/ (tools/build-images.sh); --image-dir
  stateDir: /tmp/cluster-sim  # runc's unpacked images, pod bundles, volumes, logs; --state-dir

POD NETWORK:
  overlay   pods get 10.244.<node>.<2-254> (the same ranges in every cluster; not reachable).
  loopback  pods get 127.<10 + cluster index>.<node>.<2-254>: unique in the fleet and
            reachable on this host (Linux routes all of 127.0.0.0/8 to lo). Limits: 190
            clusters, 256 nodes per cluster, 253 pods per node (nodePods at most 253);
            fleets past them are rejected. Never pods: 127.0.0.0-127.9.255.255, which
            holds 127.0.0.1 (API servers, admin API) and 127.0.1.0/24 (lb-agents, e.g.
            --lb-pool 127.0.1.{n}), and 127.200.0.0-127.255.255.255 (default lbPools).
            lbPool addresses may not lie in the pod range 127.10.0.0-127.199.255.255.

SERVING PODS (--serve-pods):
  Every Running and Ready pod listens on <podIP>:<containerPort> for each TCP container
  port and answers any HTTP/1.1 request (keep-alive) with 200, headers x-sim-cluster,
  x-sim-namespace, x-sim-pod and x-sim-request (\"<METHOD> <path>\"), and the body
  \"<cluster> <namespace>/<pod>\\n\". A pod listens before the API reports it Ready and stops
  (dropping its connections) when it stops being Ready or Running or is deleted. While its
  cluster is down, flapping down or partitioned no pod listens; under `slow` every response
  waits the latency. `ctl pod-fail` makes one pod answer a status or refuse connections.
  Ports below 1024 need root (or net.ipv4.ip_unprivileged_port_start).
  In a runtime: runc cluster, a pod whose images are not all in images.json is simulated
  this way (instead of ErrImagePull) at its sandbox pod IP (100.(65+cluster).<node>.x),
  which cluster-sim gives to the host as a /32 on its bridge while the pod serves: the
  cluster's runc pods (e.g. an lb-agent) and the host reach it.

RUNC RUNTIME (runtime: runc; root and imageDir needed):
  A pod whose images are all in images.json runs each container with runc: images unpacked
  once per digest with umoci; command/args with $(VAR) expansion; env with the downward API
  (metadata.name/namespace/uid, spec.nodeName, status.podIP/hostIP), secretKeyRef,
  configMapKeyRef, KUBERNETES_SERVICE_HOST/PORT (this cluster's API server) and
  <NAME>_SERVICE_HOST/PORT of the namespace's Services; runAsUser/runAsGroup,
  readOnlyRootFilesystem, workingDir; secret, configMap, downwardAPI, projected (service
  account token, kube-root-ca.crt), emptyDir and persistentVolumeClaim (a host directory
  that outlives the pod) volumes; startup/readiness/liveness probes (httpGet over HTTP or
  unverified HTTPS, tcpSocket, exec); restartPolicy with CrashLoopBackOff back-off; logs
  through `kubectl logs` (container, tailLines, previous); deletion with SIGTERM, the
  grace period, SIGKILL. An image that is not there: ErrImagePull, ImagePullBackOff
  (with --serve-pods the pod is simulated and serves instead, see above).
  Each pod has its own network namespace on a bridge cluster-sim owns (pod IPs in
  100.(65+cluster).0.0/16, ClusterIPs in its .254.0/24; API servers on 100.64.0.1).
  Cluster DNS on 100.(65+cluster).255.10:53 (UDP and TCP): <svc>.<ns>.svc.cluster.local
  (ClusterIP, headless endpoints and their hostnames, ExternalName CNAME), SRV for named
  ports; other names NXDOMAIN (no upstream). resolv.conf per dnsPolicy (ClusterFirst:
  search <ns>.svc.cluster.local svc.cluster.local cluster.local, ndots:5; dnsConfig merged).
  Differences from a kubelet: no cgroups, no limits;
  no init, ephemeral or sidecar containers, lifecycle hooks, grpc probes or envFrom.
  Containers are named msim-<pid>-...: removed on exit, and a crashed run's at next start.
  Full list: docs/runc.md.

LOAD BALANCERS:
  A LoadBalancer Service gets spec.loadBalancerIP when that address is in the cluster's
  pool and free; otherwise the first free pool address no other Service asks for. A Service
  asking for an address another Service holds stays pending (Warning event
  LoadBalancerIPInUse) until it is released.
";

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
    /// How long a Job's pod (any pod with restartPolicy Never or OnFailure) runs before it
    /// exits: Succeeded, or Failed while its Job is switched to fail (`ctl job-fail`).
    /// Default 1s, or the fleet file's jobPodDuration.
    #[arg(long)]
    pub job_pod_duration: Option<String>,
    /// Load-balancer pool of each cluster built from flags: addresses or ranges, where
    /// `{i}` is the cluster's index from 0 (modulo 256) and `{n}` its number from 1
    /// (e.g. `127.0.1.{n}`).
    /// With --fleet, given to the clusters whose lbPool is empty. Default `127.200.{i}.0/24`.
    #[arg(long, value_delimiter = ',')]
    pub lb_pool: Option<Vec<String>>,
    /// How pods are addressed (default overlay, or the fleet file's podNetwork).
    #[arg(long, value_enum)]
    pub pod_network: Option<PodNetwork>,
    /// Ready pods answer HTTP on their TCP container ports (needs --pod-network loopback
    /// unless every cluster is runc, whose simulated pods serve at sandbox addresses).
    #[arg(long)]
    pub serve_pods: bool,
    /// What runs the pods of the clusters built from flags: `sim` (default) or `runc`
    /// (needs --pod-network loopback and --image-dir; see RUNC RUNTIME below). A fleet
    /// file says it per cluster (`runtime: runc`).
    #[arg(long, value_enum, default_value_t = Runtime::Sim)]
    pub runtime: Runtime,
    /// Directory with images.json and the OCI layout (tools/build-images.sh --out) that
    /// `runtime: runc` clusters run images from (overrides the fleet file's imageDir).
    #[arg(long)]
    pub image_dir: Option<PathBuf>,
    /// Where `runtime: runc` clusters keep unpacked images, pod bundles, volumes and logs
    /// (overrides the fleet file's stateDir; default <temp dir>/cluster-sim).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Serve each cluster's API and storage only: no simulated controllers, scheduler or
    /// kubelets (written objects stay as written; for benchmarking API clients).
    #[arg(long)]
    pub api_only: bool,
    /// A YAML fleet file describing clusters individually (overrides the cluster flags above;
    /// see the format below).
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
    /// Logging.
    #[command(flatten)]
    pub log: meridian_runtime::telemetry::LogArgs,
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
    /// Make a pod's server fail (with --serve-pods), or heal it.
    #[command(group(clap::ArgGroup::new("mode").required(true).args(["status", "refuse", "clear"])))]
    PodFail {
        /// Cluster name.
        cluster: String,
        /// The pod, as namespace/name.
        pod: String,
        /// Answer every request with this HTTP status.
        #[arg(long, value_parser = clap::value_parser!(u16).range(100..=599))]
        status: Option<u16>,
        /// Close the pod's listeners: connections are refused while it stays Ready.
        #[arg(long)]
        refuse: bool,
        /// Answer normally again.
        #[arg(long)]
        clear: bool,
    },
    /// Make a Job's pods fail, or (with --clear) succeed again: its running pods and those
    /// it creates next exit 1 when they finish, until backoffLimit fails the Job.
    JobFail {
        /// Cluster name.
        cluster: String,
        /// The Job, as namespace/name.
        job: String,
        /// Let the Job's pods succeed again.
        #[arg(long)]
        clear: bool,
    },
    /// Force an HPA's recommendation (a stand-in for its metrics), or (with --clear) let it
    /// recommend its target's own count again; the HPA clamps it into its min and max and
    /// scales its target to it.
    HpaDesired {
        /// Cluster name.
        cluster: String,
        /// The HPA, as namespace/name.
        hpa: String,
        /// The recommended replicas.
        #[arg(required_unless_present = "clear")]
        replicas: Option<u32>,
        /// Drop the forced recommendation.
        #[arg(long, conflicts_with = "replicas")]
        clear: bool,
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
    let mut f = match &a.fleet {
        Some(path) => FleetFile::load_unchecked(path)?,
        None => clusters_from_flags(a)?,
    };
    if let Some(net) = a.pod_network {
        f.pod_network = net;
    }
    f.serve_pods |= a.serve_pods;
    if let Some(d) = &a.job_pod_duration {
        f.job_pod_duration = Some(d.clone());
    }
    f.api_only |= a.api_only;
    if let Some(d) = &a.image_dir {
        f.image_dir = Some(d.clone());
    }
    if let Some(d) = &a.state_dir {
        f.state_dir = Some(d.clone());
    }
    let patterns: Vec<String> = match &a.lb_pool {
        Some(p) => p.clone(),
        None if a.fleet.is_none() => vec!["127.200.{i}.0/24".to_string()],
        None => Vec::new(),
    };
    if !patterns.is_empty() {
        for (i, c) in f.clusters.iter_mut().enumerate() {
            if c.lb_pool.is_empty() {
                c.lb_pool = patterns
                    .iter()
                    .map(|p| {
                        p.replace("{i}", &(i % 256).to_string())
                            .replace("{n}", &(i + 1).to_string())
                    })
                    .collect();
            }
        }
    }
    f.validate()?;
    Ok(f)
}

/// The clusters the per-cluster flags describe.
fn clusters_from_flags(a: &RunArgs) -> anyhow::Result<FleetFile> {
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
                // Filled in from --lb-pool.
                lb_pool: Vec::new(),
                ready_delay: Some(a.ready_delay.clone()),
                runtime: a.runtime,
            }
        })
        .collect();
    Ok(FleetFile::new(clusters))
}

/// Runs a fleet until Ctrl-C or SIGTERM.
pub async fn run(a: RunArgs) -> anyhow::Result<()> {
    let shutdown = meridian_runtime::shutdown::Shutdown::on_signals()?;
    let spec = fleet_from_flags(&a)?;
    let fleet = Arc::new(Fleet::start(&spec, a.bind_address).await?);
    fleet.write_kubeconfig(&a.kubeconfig_out)?;
    // The admin API has its own CA and token, written beside the kubeconfig for `ctl`.
    let ca = meridian_apiserver::pki::Authority::generate()?;
    let serving = ca.serving_cert(&[a.bind_address.to_string()])?;
    let tls = meridian_apiserver::server::tls_config(&serving.cert_pem, &serving.key_pem, None)?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::new(a.bind_address, a.admin_port)).await?;
    let bytes: [u8; 24] = rand::random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let state = AdminState {
        url: format!("https://{}", listener.local_addr()?),
        token: token.clone(),
        ca_pem: ca.cert_pem.clone(),
    };
    meridian_apiserver::pki::write_private(
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
            "  {:<12} {}  region={} zone={} nodes={} lbPool={}",
            c.spec.name,
            c.server_url(),
            c.spec.region,
            c.spec.zone,
            c.spec.nodes,
            c.spec.lb_pool.join(",")
        );
    }
    let pods = spec.pod_options();
    println!(
        "pod network: {:?}{}",
        pods.network,
        if pods.serve {
            "; Ready pods answer on their container ports"
        } else {
            ""
        }
    );
    println!("admin API: {}", state.url);
    shutdown.triggered().await;
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
        CtlAction::PodFail {
            cluster,
            pod,
            status,
            refuse,
            clear: _,
        } => {
            let Some((ns, name)) = pod.split_once('/') else {
                anyhow::bail!("pod {pod:?}: use namespace/name");
            };
            let fail = match (status, refuse) {
                (Some(code), _) => serde_json::json!({"status": code}),
                (None, true) => serde_json::json!({"refuse": true}),
                (None, false) => serde_json::json!({}),
            };
            (
                "POST",
                format!("/clusters/{cluster}/pods/{ns}/{name}/fail"),
                fail,
            )
        }
        CtlAction::JobFail {
            cluster,
            job,
            clear,
        } => {
            let Some((ns, name)) = job.split_once('/') else {
                anyhow::bail!("job {job:?}: use namespace/name");
            };
            (
                "POST",
                format!("/clusters/{cluster}/jobs/{ns}/{name}/fail"),
                serde_json::json!({"fail": !clear}),
            )
        }
        CtlAction::HpaDesired {
            cluster,
            hpa,
            replicas,
            clear: _,
        } => {
            let Some((ns, name)) = hpa.split_once('/') else {
                anyhow::bail!("hpa {hpa:?}: use namespace/name");
            };
            (
                "POST",
                format!("/clusters/{cluster}/hpas/{ns}/{name}/desired"),
                serde_json::json!({"replicas": replicas}),
            )
        }
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

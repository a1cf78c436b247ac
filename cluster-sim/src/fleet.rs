//! The fleet description: clusters with their region, zone, nodes, labels, taints, version and
//! load-balancer pool, and the fleet's pod network — from command-line flags or a YAML fleet
//! file.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use serde::Deserialize;

use crate::podnet::{
    LOOPBACK_MAX_CLUSTERS, LOOPBACK_MAX_NODES, LOOPBACK_POD_RANGE, MAX_PODS_PER_NODE, PodNetwork,
    SANDBOX_MAX_CLUSTERS, SANDBOX_MAX_NODES,
};

/// Errors reading or checking a fleet.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The fleet file could not be read.
    #[error("reading fleet file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The fleet file is not valid YAML of the expected shape.
    #[error("fleet file {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A value is out of range or malformed.
    #[error("fleet: {0}")]
    Invalid(String),
}

/// A node taint.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// One simulated cluster.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Cluster (and kubeconfig context) name.
    pub name: String,
    /// Region label of its nodes.
    #[serde(default)]
    pub region: String,
    /// Zone label of its nodes.
    #[serde(default)]
    pub zone: String,
    /// Number of nodes.
    #[serde(default = "default_nodes")]
    pub nodes: u32,
    /// CPU of each node (quantity).
    #[serde(default = "default_cpu")]
    pub node_cpu: String,
    /// Memory of each node (quantity).
    #[serde(default = "default_memory")]
    pub node_memory: String,
    /// Pods each node accepts.
    #[serde(default = "default_pods")]
    pub node_pods: u32,
    /// Labels on every node (and reported for the cluster).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints on every node.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Kubernetes version the cluster reports.
    #[serde(default = "default_version")]
    pub kubernetes_version: String,
    /// Load-balancer addresses: single IPv4 addresses or `a.b.c.d/nn` ranges.
    #[serde(default)]
    pub lb_pool: Vec<String>,
    /// Delay from a pod's binding to it being Ready, e.g. `500ms` or `2s`.
    #[serde(default)]
    pub ready_delay: Option<String>,
    /// What runs its pods: simulated containers (default) or runc.
    #[serde(default)]
    pub runtime: Runtime,
}

/// What runs a cluster's pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "camelCase")]
pub enum Runtime {
    /// Simulated: pods turn Running and Ready after `readyDelay`, nothing runs.
    #[default]
    Sim,
    /// Pods whose images are in the image directory run as runc containers (the
    /// `runc` module; docs/runc.md).
    Runc,
}

fn default_nodes() -> u32 {
    3
}
fn default_cpu() -> String {
    "8".into()
}
fn default_memory() -> String {
    "32Gi".into()
}
fn default_pods() -> u32 {
    110
}
fn default_version() -> String {
    "v1.34.2".into()
}

/// A whole fleet file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetFile {
    /// The clusters.
    pub clusters: Vec<ClusterSpec>,
    /// How pods are addressed: `overlay` (default) or `loopback`.
    #[serde(default)]
    pub pod_network: PodNetwork,
    /// Ready pods answer HTTP on their TCP container ports (needs `podNetwork: loopback`
    /// unless every cluster is `runtime: runc`, whose simulated pods' sandbox addresses the
    /// host is given).
    #[serde(default)]
    pub serve_pods: bool,
    /// Clusters serve their API and storage only: no simulated controllers, scheduler or
    /// kubelets, so written objects stay as written (for measuring API clients alone).
    #[serde(default)]
    pub api_only: bool,
    /// How long a Job's pod (any run-to-completion pod) runs before it exits, e.g. `1s`
    /// (default [`DEFAULT_JOB_POD_DURATION`]).
    #[serde(default)]
    pub job_pod_duration: Option<String>,
    /// Where `runtime: runc` clusters find `images.json` and the OCI layout
    /// (`tools/build-images.sh --out`).
    #[serde(default)]
    pub image_dir: Option<std::path::PathBuf>,
    /// Where `runtime: runc` clusters keep unpacked images, pod bundles, volumes and logs.
    #[serde(default)]
    pub state_dir: Option<std::path::PathBuf>,
}

/// How long a run-to-completion pod runs unless the fleet says otherwise.
pub const DEFAULT_JOB_POD_DURATION: Duration = Duration::from_secs(1);

/// The fleet-wide pod and loop settings every cluster gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodOptions {
    /// How pods are addressed.
    pub network: PodNetwork,
    /// Whether Ready pods listen on their container ports.
    pub serve: bool,
    /// Whether the simulated control loops are off (see [`FleetFile::api_only`]).
    pub api_only: bool,
    /// How long run-to-completion pods run (see [`FleetFile::job_pod_duration`]).
    pub job_pod_duration: Duration,
}

impl Default for PodOptions {
    fn default() -> Self {
        Self {
            network: PodNetwork::default(),
            serve: false,
            api_only: false,
            job_pod_duration: DEFAULT_JOB_POD_DURATION,
        }
    }
}

/// Parses `500ms`, `2s`, `1m` or a bare number of seconds, up to a day.
pub fn parse_duration(s: &str) -> Result<Duration, FleetError> {
    let bad = || FleetError::Invalid(format!("invalid duration {s:?}: use e.g. 500ms, 2s or 1m"));
    meridian_runtime::flags::parse_duration(s)
        .ok()
        .filter(|d| *d <= Duration::from_secs(86_400))
        .ok_or_else(bad)
}

/// Expands the pool entries into addresses, in order.
pub fn expand_pool(entries: &[String]) -> Result<Vec<Ipv4Addr>, FleetError> {
    let mut out = Vec::new();
    for e in entries {
        match e.split_once('/') {
            Some((ip, bits)) => {
                let ip: Ipv4Addr = ip.parse().map_err(|_| {
                    FleetError::Invalid(format!("lbPool entry {e:?} is not an IPv4 range"))
                })?;
                let bits: u32 = bits
                    .parse()
                    .ok()
                    .filter(|b| (16..=32).contains(b))
                    .ok_or_else(|| {
                        FleetError::Invalid(format!("lbPool range {e:?} must be /16 to /32"))
                    })?;
                let base = u32::from(ip) & (u32::MAX << (32 - bits));
                let size = 1u32 << (32 - bits);
                // Skip the network and broadcast addresses of ranges that have them.
                let (first, last) = if size > 2 { (1, size - 1) } else { (0, size) };
                out.extend((first..last).map(|i| Ipv4Addr::from(base + i)));
            }
            None => out.push(e.parse().map_err(|_| {
                FleetError::Invalid(format!("lbPool entry {e:?} is not an IPv4 address"))
            })?),
        }
    }
    Ok(out)
}

impl FleetFile {
    /// A fleet of these clusters with the default (overlay, not serving) pod network.
    pub fn new(clusters: Vec<ClusterSpec>) -> Self {
        Self {
            clusters,
            pod_network: PodNetwork::Overlay,
            serve_pods: false,
            api_only: false,
            job_pod_duration: None,
            image_dir: None,
            state_dir: None,
        }
    }

    /// The runc runtime's directories, when a cluster runs pods with runc (checked by
    /// `validate`: `imageDir` is then set).
    pub fn runc_config(&self) -> Option<crate::runc::RuncConfig> {
        let image_dir = self.image_dir.clone()?;
        Some(crate::runc::RuncConfig {
            state_dir: self
                .state_dir
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("cluster-sim")),
            image_dir,
        })
    }

    /// The pod settings of every cluster.
    pub fn pod_options(&self) -> PodOptions {
        PodOptions {
            network: self.pod_network,
            serve: self.serve_pods,
            api_only: self.api_only,
            // Checked by `validate`.
            job_pod_duration: self
                .job_pod_duration
                .as_deref()
                .and_then(|d| parse_duration(d).ok())
                .unwrap_or(DEFAULT_JOB_POD_DURATION),
        }
    }

    /// Reads and checks a fleet file.
    pub fn load(path: &std::path::Path) -> Result<Self, FleetError> {
        let f = Self::load_unchecked(path)?;
        f.validate()?;
        Ok(f)
    }

    /// Reads a fleet file without checking it (for callers that amend it first).
    pub fn load_unchecked(path: &std::path::Path) -> Result<Self, FleetError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| FleetError::Read {
            path: p.clone(),
            source,
        })?;
        serde_yaml_ng::from_str(&text).map_err(|source| FleetError::Parse { path: p, source })
    }

    /// Checks every cluster, reporting all problems at once.
    pub fn validate(&self) -> Result<(), FleetError> {
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        if self.clusters.is_empty() {
            problems.push("the fleet has no clusters".to_string());
        }
        if let Some(d) = &self.job_pod_duration
            && let Err(e) = parse_duration(d)
        {
            problems.push(format!("jobPodDuration: {e}"));
        }
        for c in &self.clusters {
            if apimachinery::validation::dns1123_label(&c.name).is_err() {
                problems.push(format!("cluster name {:?} must be a DNS label", c.name));
            }
            if !seen.insert(c.name.clone()) {
                problems.push(format!("cluster {:?} appears twice", c.name));
            }
            for (what, q) in [("nodeCpu", &c.node_cpu), ("nodeMemory", &c.node_memory)] {
                if apimachinery::quantity::parse_quantity(q).is_err() {
                    problems.push(format!(
                        "cluster {:?}: {what} {q:?} is not a quantity",
                        c.name
                    ));
                }
            }
            if let Some(d) = &c.ready_delay
                && let Err(e) = parse_duration(d)
            {
                problems.push(format!("cluster {:?}: readyDelay: {e}", c.name));
            }
            if let Err(e) = expand_pool(&c.lb_pool) {
                problems.push(format!("cluster {:?}: {e}", c.name));
            }
            for t in &c.taints {
                if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
                    problems.push(format!("cluster {:?}: taint effect {:?} is not NoSchedule, PreferNoSchedule or NoExecute", c.name, t.effect));
                }
            }
        }
        self.check_pod_network(&mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(FleetError::Invalid(problems.join("; ")))
        }
    }

    /// The limits of the loopback pod network (see [`crate::podnet`]) and what serving pods
    /// needs.
    fn check_pod_network(&self, problems: &mut Vec<String>) {
        // Runc clusters' serving pods take sandbox addresses the host is given (see
        // `crate::podnet`); simulated clusters' can only bind loopback ones.
        let simulated = self.clusters.iter().find(|c| c.runtime == Runtime::Sim);
        if let Some(c) = simulated.filter(|_| self.serve_pods)
            && self.pod_network != PodNetwork::Loopback
        {
            problems.push(format!(
                "servePods needs podNetwork: loopback (--pod-network loopback) when a cluster is simulated (cluster {:?}): overlay pod addresses cannot be bound on this host",
                c.name
            ));
        }
        let runc = self.clusters.iter().any(|c| c.runtime == Runtime::Runc);
        // Runc clusters use the sandbox scheme whatever `podNetwork` says.
        for (i, c) in self.clusters.iter().enumerate() {
            if c.runtime != Runtime::Runc {
                continue;
            }
            if i as u32 >= SANDBOX_MAX_CLUSTERS {
                problems.push(format!(
                    "cluster {:?}: runtime: runc clusters must be among the fleet's first {SANDBOX_MAX_CLUSTERS} (one 100.64.0.0/10 /16 each); it is number {}",
                    c.name, i + 1
                ));
            }
            if c.nodes > SANDBOX_MAX_NODES {
                problems.push(format!(
                    "cluster {:?}: a runtime: runc cluster has at most {SANDBOX_MAX_NODES} nodes (one /24 each); it has {}",
                    c.name, c.nodes
                ));
            }
        }
        if runc && self.image_dir.is_none() {
            problems.push("runtime: runc needs imageDir (--image-dir): where images.json and the OCI layout are".to_string());
        }
        if runc && self.api_only {
            problems.push(
                "runtime: runc needs the simulated loops, which apiOnly (--api-only) turns off"
                    .to_string(),
            );
        }
        if self.serve_pods && self.api_only {
            problems.push(
                "servePods needs the simulated loops, which apiOnly (--api-only) turns off: no pod would ever run"
                    .to_string(),
            );
        }
        if self.pod_network != PodNetwork::Loopback {
            return;
        }
        let n = self.clusters.len();
        if n > LOOPBACK_MAX_CLUSTERS as usize {
            problems.push(format!(
                "the loopback pod network holds at most {LOOPBACK_MAX_CLUSTERS} clusters (127.10.0.0 to 127.199.255.255, one /16 each); the fleet has {n}"
            ));
        }
        for c in &self.clusters {
            if c.nodes > LOOPBACK_MAX_NODES {
                problems.push(format!(
                    "cluster {:?}: the loopback pod network holds at most {LOOPBACK_MAX_NODES} nodes per cluster (one /24 each); it has {}",
                    c.name, c.nodes
                ));
            }
            if c.node_pods > MAX_PODS_PER_NODE {
                problems.push(format!(
                    "cluster {:?}: nodePods {} exceeds the {MAX_PODS_PER_NODE} pod addresses a node's /24 has",
                    c.name, c.node_pods
                ));
            }
            let clash = expand_pool(&c.lb_pool)
                .unwrap_or_default()
                .into_iter()
                .find(|ip| self.pod_network.reserves(*ip));
            if let Some(ip) = clash {
                problems.push(format!(
                    "cluster {:?}: lbPool address {ip} lies in the loopback pod range {} to {}",
                    c.name, LOOPBACK_POD_RANGE.0, LOOPBACK_POD_RANGE.1
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_file_with_defaults() {
        let f: FleetFile = serde_yaml_ng::from_str(
            "clusters:\n- name: a\n  region: eu-west\n  zone: eu-west-1a\n  nodes: 5\n  lbPool: [10.1.0.0/30, 192.0.2.7]\n  taints: [{key: gpu, effect: NoSchedule}]\n- name: b\n",
        )
        .unwrap();
        f.validate().unwrap();
        assert_eq!(f.clusters[1].nodes, 3);
        assert_eq!(f.clusters[1].node_memory, "32Gi");
        let pool = expand_pool(&f.clusters[0].lb_pool).unwrap();
        assert_eq!(pool.len(), 3);
        assert_eq!(pool[0].to_string(), "10.1.0.1");
    }

    #[test]
    fn every_problem_is_reported() {
        let f: FleetFile = serde_yaml_ng::from_str(
            "clusters:\n- name: A_bad\n  nodeCpu: lots\n- name: b\n  readyDelay: soon\n- name: b\n",
        )
        .unwrap();
        let e = f.validate().unwrap_err().to_string();
        assert!(
            e.contains("DNS label")
                && e.contains("nodeCpu")
                && e.contains("readyDelay")
                && e.contains("twice"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(
            serde_yaml_ng::from_str::<FleetFile>("clusters:\n- name: a\n  nodez: 3\n").is_err()
        );
    }

    #[test]
    fn loopback_fleet_with_lb_agent_pools() {
        let f: FleetFile = serde_yaml_ng::from_str(
            "podNetwork: loopback\nservePods: true\nclusters:\n- name: a\n  lbPool: [127.0.1.1]\n- name: b\n  lbPool: [127.0.1.2]\n",
        )
        .unwrap();
        f.validate().unwrap();
        assert_eq!(
            f.pod_options(),
            PodOptions {
                network: PodNetwork::Loopback,
                serve: true,
                api_only: false,
                job_pod_duration: DEFAULT_JOB_POD_DURATION,
            }
        );
        let plain: FleetFile = serde_yaml_ng::from_str("clusters:\n- name: a\n").unwrap();
        assert_eq!(plain.pod_options(), PodOptions::default());
    }

    #[test]
    fn loopback_limits_are_enforced() {
        let spec = |name: &str| -> ClusterSpec {
            serde_yaml_ng::from_str(&format!("name: {name}")).unwrap()
        };
        let mut f = FleetFile::new(
            (0..=LOOPBACK_MAX_CLUSTERS)
                .map(|i| spec(&format!("c{i}")))
                .collect(),
        );
        // The overlay network has no such limit.
        f.validate().unwrap();
        f.pod_network = PodNetwork::Loopback;
        f.clusters[0].nodes = LOOPBACK_MAX_NODES + 1;
        f.clusters[1].node_pods = MAX_PODS_PER_NODE + 1;
        f.clusters[2].lb_pool = vec!["127.10.0.0/30".into()];
        let e = f.validate().unwrap_err().to_string();
        for want in [
            "at most 190 clusters",
            "the fleet has 191",
            "at most 256 nodes per cluster",
            "nodePods 254 exceeds the 253",
            "it has 257",
            "lbPool address 127.10.0.1 lies in the loopback pod range",
        ] {
            assert!(e.contains(want), "{want:?} missing from: {e}");
        }
        let mut serving = FleetFile::new(vec![spec("a")]);
        serving.serve_pods = true;
        let e = serving.validate().unwrap_err().to_string();
        assert!(e.contains("servePods needs podNetwork: loopback"), "{e}");
        serving.pod_network = PodNetwork::Loopback;
        serving.validate().unwrap();
        serving.api_only = true;
        let e = serving.validate().unwrap_err().to_string();
        assert!(e.contains("servePods needs the simulated loops"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("2d").is_err());
        assert!(parse_duration("25h").is_err(), "longer than a day");
    }

    #[test]
    fn runc_clusters_need_an_image_dir_and_a_sandbox_network() {
        let mut f: FleetFile =
            serde_yaml_ng::from_str("clusters:\n- name: a\n  runtime: runc\n- name: b\n").unwrap();
        assert_eq!(f.clusters[0].runtime, Runtime::Runc);
        assert_eq!(f.clusters[1].runtime, Runtime::Sim);
        let e = f.validate().unwrap_err().to_string();
        assert!(e.contains("runtime: runc needs imageDir"), "{e}");
        assert!(!e.contains("podNetwork"), "any pod network will do: {e}");
        assert_eq!(f.runc_config(), None);
        f.clusters[0].nodes = SANDBOX_MAX_NODES + 1;
        let e = f.validate().unwrap_err().to_string();
        assert!(e.contains("at most 252 nodes"), "{e}");
        f.clusters[0].nodes = 1;
        let mut late = f.clone();
        late.image_dir = Some("/images".into());
        for i in 0..SANDBOX_MAX_CLUSTERS {
            let mut c = late.clusters[1].clone();
            c.name = format!("s{i}");
            late.clusters.insert(0, c);
        }
        let e = late.validate().unwrap_err().to_string();
        assert!(e.contains("first 63"), "{e}");
        f.image_dir = Some("/images".into());
        f.state_dir = Some("/state".into());
        f.validate().unwrap();
        // Serving pods: a simulated cluster needs loopback addresses, runc clusters do not.
        let mut serving = f.clone();
        serving.serve_pods = true;
        let e = serving.validate().unwrap_err().to_string();
        assert!(
            e.contains("servePods needs podNetwork: loopback")
                && e.contains("when a cluster is simulated (cluster \"b\")"),
            "{e}"
        );
        serving.clusters[1].runtime = Runtime::Runc;
        serving.validate().unwrap();
        serving.pod_network = PodNetwork::Loopback;
        serving.validate().unwrap();
        serving.api_only = true;
        let e = serving.validate().unwrap_err().to_string();
        assert!(e.contains("servePods needs the simulated loops"), "{e}");
        assert_eq!(
            f.runc_config(),
            Some(crate::runc::RuncConfig {
                image_dir: "/images".into(),
                state_dir: "/state".into()
            })
        );
    }
}

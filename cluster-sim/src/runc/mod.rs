//! The runc runtime of the clusters a fleet marks `runtime: runc`: their kubelet runs each
//! pod whose images are all in the image directory (`tools/build-images.sh` output) as real
//! processes, one runc container per container, all of a pod's in the pod's own network
//! namespace that holds its pod IP ([`net`]; addresses in [`crate::podnet`]).
//!
//! Pure parts: [`spec`] (environment, `$(VAR)` expansion, bundle `config.json`),
//! [`policy`] (probes, restart back-off), [`volumes`] (what each volume holds),
//! [`hosts`] (a pod's `/etc/hosts`), [`resolv`] (its `/etc/resolv.conf` from `dnsPolicy`).
//! I/O: [`images`] (umoci unpack cache), [`pod`] (one supervisor task per pod), [`probe`],
//! [`logs`] (`pods/log`), [`services`] (the Services and EndpointSlices the next two follow),
//! [`proxy`] (Services' ClusterIPs and load-balancer addresses to their ready endpoints),
//! [`dns`] (the cluster DNS: Service names, answered by a pure function over the same
//! listing), [`claims`] (claims reported `Bound`: their data is a host directory).
//!
//! Containers are named `<prefix><pid>-...` (see [`CONTAINER_PREFIX`]) so that the leftovers
//! of a run that crashed are found and removed when the next one starts; on a clean exit
//! every container is killed and deleted.

pub(crate) mod api_access;
pub(crate) mod claims;
pub(crate) mod command;
pub(crate) mod dns;
pub(crate) mod hosts;
pub(crate) mod images;
pub mod logs;
pub(crate) mod net;
pub(crate) mod pod;
pub(crate) mod policy;
pub(crate) mod probe;
pub(crate) mod proxy;
pub(crate) mod resolv;
pub(crate) mod services;
pub(crate) mod spec;
pub(crate) mod volumes;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::controllers::util::lock;
use crate::podnet::SandboxNet;

/// Every container id cluster-sim creates starts with this, then its process id and `-`.
pub const CONTAINER_PREFIX: &str = "msim-";

/// Errors of the runc runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuncError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A program failed.
    #[error("{command} exited with {status}: {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: i32,
        /// What it wrote on stderr.
        stderr: String,
    },
    /// The image directory or an image is unreadable.
    #[error("image: {0}")]
    Image(String),
}

impl RuncError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        RuncError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Where the runtime finds images and keeps its state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuncConfig {
    /// `images.json` and the OCI layout `oci/` (`tools/build-images.sh --out`).
    pub image_dir: PathBuf,
    /// Unpacked images (`images/`), pods' volumes, bundles and logs (`pods/`), claims'
    /// data (`volumes/`).
    pub state_dir: PathBuf,
}

/// A supervised pod.
struct Supervised {
    uid: String,
    task: tokio::task::JoinHandle<()>,
}

/// The runc runtime of one cluster.
pub struct Runc {
    pub(crate) config: RuncConfig,
    pub(crate) images: Arc<images::Images>,
    /// `msim-<pid>-<cluster index>-`.
    pub(crate) prefix: String,
    /// This process's pod directories for this cluster: `<state>/pods/<pid>-<index>`.
    pub(crate) pods_dir: PathBuf,
    /// The cluster's API server, for `KUBERNETES_SERVICE_*` (set once it listens).
    pub(crate) api: Mutex<Option<SocketAddr>>,
    pods: Mutex<HashMap<String, Supervised>>,
    /// Container ids currently created, for clean-up at exit.
    pub(crate) live: Mutex<HashSet<String>>,
    /// Log directories by pod key (`namespace/name`).
    pub(crate) log_dirs: Mutex<HashMap<String, PathBuf>>,
    /// The pods' addresses (`None` past the sandbox scheme's clusters, which the fleet's
    /// validation rules out).
    pub(crate) net: Option<SandboxNet>,
}

impl Runc {
    /// The runtime of the cluster with fleet index `index`.
    pub fn new(config: RuncConfig, index: u32) -> Self {
        let images = images::Images::new(config.image_dir.clone(), config.state_dir.join("images"));
        let pid = std::process::id();
        Self {
            prefix: format!("{CONTAINER_PREFIX}{pid}-{index}-"),
            pods_dir: config.state_dir.join("pods").join(format!("{pid}-{index}")),
            images: Arc::new(images),
            config,
            api: Mutex::new(None),
            pods: Mutex::default(),
            live: Mutex::default(),
            log_dirs: Mutex::default(),
            net: SandboxNet::of(index),
        }
    }

    /// Sets the address containers reach the cluster's API server at.
    pub fn set_api_server(&self, addr: SocketAddr) {
        *lock(&self.api) = Some(addr);
    }

    /// Whether the pod `key` with `uid` is supervised; a supervisor of an older pod of the
    /// same name that is still stopping counts as busy (`Some(false)`).
    pub(crate) fn supervises(&self, key: &str, uid: &str) -> Option<bool> {
        let mut pods = lock(&self.pods);
        let s = pods.get(key)?;
        if s.task.is_finished() {
            pods.remove(key);
            return None;
        }
        Some(s.uid == uid)
    }

    /// Starts supervising a pod (its task runs until the pod is gone and its containers
    /// are removed).
    pub(crate) fn supervise(&self, key: &str, uid: &str, task: tokio::task::JoinHandle<()>) {
        lock(&self.pods).insert(
            key.to_string(),
            Supervised {
                uid: uid.to_string(),
                task,
            },
        );
    }

    /// Kills and deletes every container of this runtime (at exit: no grace period).
    pub fn shut_down(&self) {
        for task in lock(&self.pods).drain().map(|(_, s)| s.task) {
            task.abort();
        }
        let ids: Vec<String> = lock(&self.live).drain().collect();
        for id in ids {
            command::run_blocking("runc", &["kill", &id, "KILL"]);
            command::run_blocking("runc", &["delete", "--force", &id]);
        }
        net::remove_own_netns(&self.prefix);
        if let Err(e) = std::fs::remove_dir_all(&self.pods_dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.pods_dir.display(), error = %e, "cannot remove the pods' directories");
        }
    }
}

/// Whether `pid` is another process that still runs.
fn other_live_process(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes containers left by cluster-sim processes that no longer run (a crash, a
/// `kill -9`): ids `msim-<pid>-...` whose process is gone, their pod directories
/// (`<state_dir>/pods/<pid>-<index>`), network namespaces and devices ([`net`]).
pub fn remove_leftovers(state_dir: &Path) {
    net::remove_leftovers(|pid| !other_live_process(pid));
    for entry in std::fs::read_dir(state_dir.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !other_live_process(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let Ok(out) = std::process::Command::new("runc")
        .args(["list", "--quiet"])
        .output()
    else {
        return;
    };
    for id in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(pid) = id
            .strip_prefix(CONTAINER_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if other_live_process(pid) {
            continue;
        }
        tracing::info!(
            container = id,
            "removing a container a previous run left behind"
        );
        command::run_blocking("runc", &["kill", id, "KILL"]);
        command::run_blocking("runc", &["delete", "--force", id]);
    }
}

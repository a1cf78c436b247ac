//! A running fleet: every simulated cluster, the kubeconfig that reaches them, and lookup by
//! name for fault injection.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use tokio::sync::watch;

use crate::cluster::{Shared, SimCluster};
use crate::fleet::{FleetFile, Runtime};
use crate::podnet::{SANDBOX_HOST, SandboxNet};

/// All clusters of one `cluster-sim` process.
pub struct Fleet {
    /// In fleet order.
    pub clusters: Vec<Arc<SimCluster>>,
    shutdown: watch::Sender<bool>,
    /// Whether this process's pod bridge exists (runc clusters): removed at stop.
    bridge: bool,
}

impl Fleet {
    /// Starts every cluster of `fleet` on `bind_ip`, each on its own free port.
    pub async fn start(fleet: &FleetFile, bind_ip: IpAddr) -> anyhow::Result<Self> {
        fleet.validate()?;
        let (shutdown, rx) = watch::channel(false);
        let shared = Shared::build();
        let runc = fleet.runc_config();
        let sandbox = runc.is_some() && fleet.clusters.iter().any(|c| c.runtime == Runtime::Runc);
        // Built first so that a failure below still removes the bridge (on drop).
        let mut started = Self {
            clusters: Vec::with_capacity(fleet.clusters.len()),
            shutdown,
            bridge: false,
        };
        let mut bind_ip = bind_ip;
        if let Some(r) = runc.as_ref().filter(|_| sandbox) {
            crate::runc::remove_leftovers(&r.state_dir);
            crate::runc::net::create_bridge().await?;
            started.bridge = true;
            for (i, spec) in fleet.clusters.iter().enumerate() {
                if spec.runtime == Runtime::Runc
                    && let Some(net) = SandboxNet::of(i as u32)
                {
                    crate::runc::net::add_cluster(net).await?;
                }
            }
            // Pods in their own network namespaces cannot reach the host's loopback: the API
            // servers listen where they can (and the kubeconfig says so).
            if bind_ip.is_loopback() {
                bind_ip = IpAddr::V4(SANDBOX_HOST);
            }
        }
        for (i, spec) in fleet.clusters.iter().enumerate() {
            let c = SimCluster::start(
                spec.clone(),
                i as u32,
                fleet.pod_options(),
                runc.clone().filter(|_| spec.runtime == Runtime::Runc),
                SocketAddr::new(bind_ip, 0),
                &shared,
                rx.clone(),
            )
            .await?;
            started.clusters.push(c);
        }
        Ok(started)
    }

    /// A cluster by name.
    pub fn get(&self, name: &str) -> Option<&Arc<SimCluster>> {
        self.clusters.iter().find(|c| c.spec.name == name)
    }

    /// A kubeconfig with one context per cluster (named after it); the first is current.
    pub fn kubeconfig(&self) -> String {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut clusters = String::new();
        let mut contexts = String::new();
        let mut users = String::new();
        for c in &self.clusters {
            let n = &c.spec.name;
            clusters.push_str(&format!(
                "- name: {n}\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n",
                c.server_url(),
                b64(&c.ca_pem)
            ));
            contexts.push_str(&format!(
                "- name: {n}\n  context:\n    cluster: {n}\n    user: {n}-admin\n"
            ));
            users.push_str(&format!(
                "- name: {n}-admin\n  user:\n    token: {}\n",
                c.admin_token
            ));
        }
        let current = self
            .clusters
            .first()
            .map(|c| c.spec.name.as_str())
            .unwrap_or("");
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n{clusters}contexts:\n{contexts}current-context: {current}\nusers:\n{users}"
        )
    }

    /// Writes the kubeconfig (owner-only permissions).
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        meridian_apiserver::pki::write_private(path, &self.kubeconfig())?;
        Ok(())
    }

    /// Stops every cluster's listener and connections, and every pod server.
    pub fn stop(&self) {
        let _ = self.shutdown.send(true);
        for c in &self.clusters {
            if let Some(rt) = &c.sim.containers {
                rt.shut_down();
            }
            if let Some(rt) = &c.sim.runc {
                rt.shut_down();
            }
        }
        if self.bridge {
            crate::runc::net::remove_bridge();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop();
    }
}

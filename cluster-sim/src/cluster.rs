//! One simulated cluster: an in-memory API server (the `meridian-apiserver` engine with the
//! member kinds, RBAC and service-account tokens) on its own loopback port, its simulated
//! control loops, and the fault switch its listener obeys.

use std::net::SocketAddr;
use std::sync::Arc;

use meridian_apiserver::api::ApiServer;
use meridian_apiserver::auth::{TokenAuthenticator, UserInfo};
use meridian_apiserver::cache::TextForm;
use meridian_apiserver::engine::Engine;
use meridian_apiserver::pki::Authority;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::controllers;
use crate::faults::{Fault, Faults};
use crate::fleet::{ClusterSpec, PodOptions, expand_pool, parse_duration};
use crate::podnet::{PodNetwork, SandboxNet};

/// Watch-cache history per resource in a simulated cluster (smaller than a real server's:
/// a fleet holds hundreds of these).
const SIM_WATCH_HISTORY: usize = 1_000;

/// What every cluster of a fleet shares: the kinds and their schema documents.
#[derive(Clone)]
pub struct Shared {
    /// The member kinds.
    pub registry: meridian_apiserver::registry::Registry,
    /// Their OpenAPI documents and definitions.
    pub schemas: meridian_apiserver::server::Schemas,
}

impl Shared {
    /// Builds the member kinds and their documents once.
    pub fn build() -> Self {
        let registry = crate::kinds::member_registry();
        let schemas = meridian_apiserver::server::Schemas::build(&registry);
        Self { registry, schemas }
    }
}

/// A running simulated cluster.
pub struct SimCluster {
    /// Its description.
    pub spec: ClusterSpec,
    /// Position in the fleet (0-based), used for address ranges.
    pub index: u32,
    /// The API engine.
    pub engine: Arc<Engine>,
    /// Where it listens (kept across down/up).
    pub addr: SocketAddr,
    /// Its CA certificate, PEM.
    pub ca_pem: String,
    /// The admin bearer token (group `system:masters`).
    pub admin_token: String,
    /// Its fault switch.
    pub faults: Faults,
    /// The simulated control loops' context.
    pub sim: Arc<controllers::Sim>,
    /// Whether the API listener is open (it follows the fault switch asynchronously).
    listening: watch::Sender<bool>,
}

fn random_token() -> String {
    let bytes: [u8; 24] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Binds with SO_REUSEADDR so a cluster brought back up gets its old port again.
fn bind_reuse(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

impl SimCluster {
    /// Builds the cluster, creates its namespaces and nodes, starts its loops and listener.
    pub async fn start(
        spec: ClusterSpec,
        index: u32,
        pods: PodOptions,
        runc: Option<crate::runc::RuncConfig>,
        bind: SocketAddr,
        shared: &Shared,
        shutdown: watch::Receiver<bool>,
    ) -> anyhow::Result<Arc<Self>> {
        // The cache follows the store closely; a short store history is enough to bridge it.
        let store = Arc::new(meridian_store::MemoryStore::with_history_capacity(1_000));
        let engine = meridian_apiserver::server::build_engine_with(
            shared.registry.clone(),
            store,
            SIM_WATCH_HISTORY,
            // A fleet of simulated members shares the machine's cores with the control
            // plane under test; their memory is not what is measured.
            TextForm::Plain,
            &shared.schemas,
        )
        .await?;
        meridian_apiserver::system_namespaces::ensure(&engine).await?;
        meridian_apiserver::bootstrap_policy::ensure(&engine).await?;
        let ca = Authority::generate()?;
        // Pods of runc clusters reach the API servers at the sandbox host address.
        let serving = ca.serving_cert(&[bind.ip().to_string()])?;
        let admin_token = random_token();
        let mut tokens = TokenAuthenticator::default();
        tokens.add(
            admin_token.clone(),
            UserInfo {
                name: "admin".into(),
                uid: "admin".into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
        );
        let listener = bind_reuse(bind)?;
        let addr = listener.local_addr()?;
        let ready_delay = match &spec.ready_delay {
            Some(d) => parse_duration(d)?,
            None => std::time::Duration::ZERO,
        };
        // A runc cluster's default pool is in its own host-owned range, reachable from its
        // pods as well as from the host.
        let lb_pool = match SandboxNet::of(index) {
            Some(net) if runc.is_some() && spec.lb_pool.is_empty() => vec![net.lb_pool()],
            _ => spec.lb_pool.clone(),
        };
        let sim = controllers::Sim::new(
            engine.clone(),
            controllers::ClusterConfig {
                name: spec.name.clone(),
                index,
                ready_delay,
                lb_pool: expand_pool(&lb_pool)?.into_iter().map(Into::into).collect(),
                ca_pem: ca.cert_pem.clone(),
                pod_network: if runc.is_some() {
                    PodNetwork::Sandbox
                } else {
                    pods.network
                },
                serve_pods: pods.serve,
                job_pod_duration: pods.job_pod_duration,
                runc,
            },
        )?;
        if let Some(rt) = &sim.runc {
            rt.set_api_server(addr);
        }
        let api = Arc::new(ApiServer {
            engine: engine.clone(),
            tokens,
            token_sources: vec![Arc::new(SimTokens(sim.clone()))],
            authorizer: Arc::new(meridian_apiserver::rbac::RbacAuthorizer::new(
                engine.cache.clone(),
            )),
            metrics: Arc::default(),
            advertise: addr.to_string(),
            max_body: meridian_apiserver::api::DEFAULT_MAX_BODY,
            version: spec.kubernetes_version.clone(),
        });
        controllers::create_nodes(&sim, &node_specs(&spec)).await?;
        if !pods.api_only {
            controllers::ensure_ingress_class(&sim).await?;
            controllers::start(sim.clone());
        }
        let tls =
            meridian_apiserver::server::tls_config(&serving.cert_pem, &serving.key_pem, None)?;
        let cluster = Arc::new(Self {
            spec,
            index,
            engine,
            addr,
            ca_pem: ca.cert_pem.clone(),
            admin_token,
            faults: sim.faults.clone(),
            sim,
            listening: watch::channel(true).0,
        });
        tokio::spawn(
            cluster
                .clone()
                .run_listener(listener, TlsAcceptor::from(tls), api, shutdown),
        );
        Ok(cluster)
    }

    /// `https://127.0.0.1:PORT`.
    pub fn server_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Waits (at most a few seconds) until the API listener and the pod servers obey the
    /// current fault, so whoever switched it finds connections refused (or accepted) at once.
    /// A flapping fault changes on its own timer and is not waited for.
    pub async fn fault_settled(&self) {
        let fault = self.faults.current();
        if matches!(fault, Fault::Flapping { .. }) {
            return;
        }
        let down = fault == Fault::Down;
        let suspended = down || fault == Fault::Partitioned;
        let mut api = self.listening.subscribe();
        let settled = async {
            let _ = api.wait_for(|open| *open != down).await;
            if let Some(rt) = &self.sim.containers {
                rt.suspension_applied(suspended).await;
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(5), settled)
            .await
            .is_err()
        {
            tracing::warn!(cluster = %self.spec.name, ?fault, "the fault took long to apply");
        }
    }

    async fn run_listener(
        self: Arc<Self>,
        first: TcpListener,
        acceptor: TlsAcceptor,
        api: Arc<ApiServer>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut listener = Some(first);
        let mut changes = self.faults.subscribe();
        // Bumped whenever the cluster goes down: connections of older generations die.
        let (generation, _) = watch::channel(0u64);
        loop {
            let (down, next) = self.faults.down_now();
            if down {
                if listener.take().is_some() {
                    generation.send_modify(|g| *g += 1);
                    self.listening.send_replace(false);
                    tracing::info!(cluster = %self.spec.name, "down: refusing connections");
                }
            } else if listener.is_none() {
                match bind_reuse(self.addr) {
                    Ok(l) => {
                        tracing::info!(cluster = %self.spec.name, "up: listening again");
                        listener = Some(l);
                        self.listening.send_replace(true);
                    }
                    Err(e) => {
                        tracing::warn!(cluster = %self.spec.name, error = %e, "rebinding failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
            let wake = async move {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let accept = async {
                match &listener {
                    Some(l) => l.accept().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                    generation.send_modify(|g| *g += 1);
                    return;
                }
                _ = changes.changed() => continue,
                _ = wake => continue,
                r = accept => match r {
                    Ok((tcp, peer)) => self.clone().connection(tcp, peer, acceptor.clone(), api.clone(), generation.subscribe(), shutdown.clone()),
                    Err(e) => tracing::debug!(error = %e, "accept failed"),
                },
            }
        }
    }

    fn connection(
        self: Arc<Self>,
        tcp: tokio::net::TcpStream,
        peer: SocketAddr,
        acceptor: TlsAcceptor,
        api: Arc<ApiServer>,
        mut generation: watch::Receiver<u64>,
        shutdown: watch::Receiver<bool>,
    ) {
        let born = *generation.borrow();
        tokio::spawn(async move {
            let work = async {
                if self.faults.current() == Fault::Partitioned {
                    // Hold the socket open and silent until the partition heals, then drop it.
                    let mut changes = self.faults.subscribe();
                    let _ = changes.wait_for(|(f, _)| *f != Fault::Partitioned).await;
                    drop(tcp);
                    return;
                }
                let Some((tls, user)) =
                    meridian_apiserver::server::handshake(&acceptor, tcp, peer).await
                else {
                    return;
                };
                let faults = self.faults.clone();
                let runc = self.sim.runc.clone();
                meridian_apiserver::server::serve_connection(
                    tls,
                    move |req| {
                        let api = api.clone();
                        let user = user.clone();
                        let faults = faults.clone();
                        let runc = runc.clone();
                        async move {
                            gate(&faults).await;
                            // The engine has no pods/log: the runc runtime serves it.
                            if let Some(rt) = &runc
                                && req.method() == http::Method::GET
                                && let Some((ns, name)) =
                                    crate::runc::logs::log_target(req.uri().path())
                            {
                                return crate::runc::logs::serve(
                                    rt,
                                    &api,
                                    req.headers(),
                                    user,
                                    ns,
                                    name,
                                    req.uri().query().unwrap_or(""),
                                );
                            }
                            api.handle(req, user).await
                        }
                    },
                    shutdown,
                )
                .await;
            };
            tokio::select! {
                _ = work => {}
                // The cluster went down: drop the connection abruptly, as a dead host would.
                _ = generation.wait_for(|g| *g != born) => {}
            }
        });
    }
}

/// Service-account tokens the simulated token controller issued, as a token source.
struct SimTokens(Arc<controllers::Sim>);

impl meridian_apiserver::auth::TokenSource for SimTokens {
    fn authenticate(&self, token: &str) -> Option<UserInfo> {
        controllers::authenticate_token(&self.0, token).map(|id| UserInfo {
            name: id.username,
            uid: id.uid,
            groups: id.groups,
        })
    }
}

/// Applies the current fault to one request: waits out a partition, adds latency.
async fn gate(faults: &Faults) {
    loop {
        let (delay, hang) = faults.request_gate();
        if hang {
            let mut changes = faults.subscribe();
            let _ = changes.wait_for(|(f, _)| *f != Fault::Partitioned).await;
            continue;
        }
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        return;
    }
}

/// The nodes of a cluster spec, named `{cluster}-node-{i}`.
pub fn node_specs(spec: &ClusterSpec) -> Vec<controllers::NodeSpec> {
    (0..spec.nodes)
        .map(|i| {
            let mut n = controllers::NodeSpec::new(
                format!("{}-node-{i}", spec.name),
                spec.node_cpu.clone(),
                spec.node_memory.clone(),
            );
            n.labels = spec.labels.clone();
            n.region = (!spec.region.is_empty()).then(|| spec.region.clone());
            n.zone = (!spec.zone.is_empty()).then(|| spec.zone.clone());
            n.pods = spec.node_pods;
            n.kubelet_version = spec.kubernetes_version.clone();
            n.taints = spec
                .taints
                .iter()
                .map(|t| controllers::Taint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect();
            n
        })
        .collect()
}

//! The routing core: turns each [`Inputs`] snapshot into a routing table, opens and closes
//! listen ports and dedicated addresses (TCP and UDP), drains removed backends, and runs the
//! listeners (HTTP, HTTPS by SNI, peer) and health checks. It takes its inputs from a watch
//! channel, so tests drive it without a cluster.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Semaphore;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::{Backend, OutlierSettings, now_ms};
use crate::health::HealthSettings;
use crate::inputs::Inputs;
use crate::metrics::Metrics;
use crate::serving::{self, Serving, ServingView};
use crate::table::{self, PortRoute, Proto, Registry, Table};

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// This member cluster's name.
    pub cluster: String,
    /// Address every listener binds.
    pub bind: IpAddr,
    /// HTTP listener port (0: any).
    pub http_port: u16,
    /// HTTPS (TLS by SNI) listener port (0: any).
    pub https_port: u16,
    /// Peer listener port, TCP and UDP (0: any).
    pub peer_port: u16,
    /// Active health checks.
    pub health: HealthSettings,
    /// Passive outlier ejection.
    pub outlier: OutlierSettings,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// How long removed backends may finish in-flight work.
    pub drain_timeout: Duration,
    /// Retries of an idempotent HTTP request that failed after it was sent.
    pub retries: u32,
    /// Limits on what clients may send and hold open.
    pub limits: Limits,
    /// UDP flows.
    pub udp: crate::udp::UdpSettings,
}

/// Limits on client connections and HTTP/1 request heads.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Largest request head (request line and headers), bytes; more is answered 431.
    pub max_head: usize,
    /// Most header fields in a request; more is answered 431.
    pub max_headers: usize,
    /// Longest request line, bytes; more is answered 414.
    pub max_request_line: usize,
    /// A client connection with no request under way for this long is closed.
    pub idle_timeout: Duration,
    /// Time a client has to send a whole request head once it started one (408 after).
    pub head_timeout: Duration,
    /// Most client connections open at once on the HTTP, HTTPS and listen ports together;
    /// further ones are closed at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head: 64 * 1024,
            max_headers: 100,
            max_request_line: 8 * 1024,
            idle_timeout: Duration::from_secs(60),
            head_timeout: Duration::from_secs(10),
            max_connections: 16_384,
        }
    }
}

impl Settings {
    /// Defaults for `cluster` on `bind`, ephemeral ports.
    pub fn new(cluster: &str, bind: IpAddr) -> Self {
        Self {
            cluster: cluster.to_string(),
            bind,
            http_port: 0,
            https_port: 0,
            peer_port: 0,
            health: HealthSettings::default(),
            outlier: OutlierSettings::default(),
            connect_timeout: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            retries: 2,
            limits: Limits::default(),
            udp: crate::udp::UdpSettings::default(),
        }
    }
}

/// Readiness as `/readyz` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// A valid configuration is in force and local endpoints are listed.
    pub ready: bool,
    /// Why not, or a warning (rejected newer configuration) while ready.
    pub message: Option<String>,
}

/// What the listeners, proxies and health checks share.
pub struct Shared {
    /// Settings.
    pub settings: Settings,
    /// The current routing table.
    pub table: watch::Receiver<Arc<Table>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Serving snapshot for DNS.
    pub serving_tx: watch::Sender<Arc<Serving>>,
    /// HTTP/1.1 + h2c server settings.
    pub http_server: auto::Builder<TokioExecutor>,
    /// Client connections that may still open ([`Limits::max_connections`]).
    pub connections: Arc<Semaphore>,
}

/// A running agent; its tasks stop when it is dropped.
pub struct Agent {
    /// Where the HTTP listener is.
    pub http_addr: SocketAddr,
    /// Where the HTTPS (SNI) listener is.
    pub https_addr: SocketAddr,
    /// Where the peer listener is.
    pub peer_addr: SocketAddr,
    /// Which clusters serve which Services (for DNS).
    pub serving: ServingView,
    /// Readiness.
    pub status: watch::Receiver<Status>,
    /// The current table (for inspection).
    pub table: watch::Receiver<Arc<Table>>,
    /// Client connection slots left (for inspection).
    pub connections: Arc<Semaphore>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Agent {
    /// Binds the HTTP and peer listeners and starts everything.
    pub async fn start(
        settings: Settings,
        inputs: watch::Receiver<Inputs>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        let http = TcpListener::bind((settings.bind, settings.http_port)).await?;
        let https = TcpListener::bind((settings.bind, settings.https_port)).await?;
        let peer = TcpListener::bind((settings.bind, settings.peer_port)).await?;
        let (http_addr, https_addr, peer_addr) =
            (http.local_addr()?, https.local_addr()?, peer.local_addr()?);
        // Datagrams for this cluster's UDP endpoints come on the peer port too.
        let peer_udp = UdpSocket::bind(peer_addr).await?;
        let (table_tx, table_rx) = watch::channel(Arc::new(Table::default()));
        let (serving_tx, serving_rx) = watch::channel(Arc::new(Serving::default()));
        let (status_tx, status_rx) = watch::channel(Status {
            ready: false,
            message: Some("no configuration yet".into()),
        });
        let shared = Arc::new(Shared {
            table: table_rx.clone(),
            metrics,
            serving_tx,
            http_server: auto::Builder::new(TokioExecutor::new()),
            connections: Arc::new(Semaphore::new(settings_limits_connections(&settings))),
            settings,
        });
        let connections = shared.connections.clone();
        let tasks = vec![
            tokio::spawn(accept_loop(http, shared.clone(), Listener::Http)),
            tokio::spawn(accept_loop(https, shared.clone(), Listener::Https)),
            tokio::spawn(accept_loop(peer, shared.clone(), Listener::Peer)),
            tokio::spawn(crate::udp::serve(
                peer_udp,
                shared.clone(),
                crate::udp::Source::Peer,
            )),
            tokio::spawn(crate::health::run(shared.clone())),
            tokio::spawn(route(shared, inputs, table_tx, status_tx)),
        ];
        tracing::info!(%http_addr, %https_addr, %peer_addr, "lb-agent listening");
        Ok(Self {
            http_addr,
            https_addr,
            peer_addr,
            serving: ServingView(serving_rx),
            status: status_rx,
            table: table_rx,
            connections,
            tasks,
        })
    }
}

fn settings_limits_connections(settings: &Settings) -> usize {
    settings
        .limits
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS)
}

/// Where a listen socket is, as the table knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BindKey {
    /// A listen port on the agent's address.
    Listen(u16),
    /// A dedicated address with the Service's own port.
    Dedicated(SocketAddr),
}

impl Table {
    /// The route bound at `key`.
    pub fn route_for_bind(&self, key: BindKey) -> Option<&Arc<PortRoute>> {
        match key {
            BindKey::Listen(p) => self.listen.get(&p),
            BindKey::Dedicated(a) => self.dedicated.get(&a),
        }
    }
}

#[derive(Clone, Copy)]
enum Listener {
    Http,
    Https,
    Peer,
    Port(BindKey),
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, kind: Listener) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(error) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        if let Listener::Peer = kind {
            tokio::spawn(crate::peer::serve(stream, shared));
            continue;
        }
        // Client connections count against the limit for as long as they stay open.
        let Ok(permit) = shared.connections.clone().try_acquire_owned() else {
            shared.metrics.connections_refused.inc();
            drop(stream);
            continue;
        };
        match kind {
            Listener::Http => {
                tokio::spawn(async move {
                    crate::h1::serve(stream, shared, None).await;
                    drop(permit);
                });
            }
            Listener::Https => {
                tokio::spawn(async move {
                    crate::tcp::serve_tls(stream, shared).await;
                    drop(permit);
                });
            }
            Listener::Peer => {}
            Listener::Port(key) => {
                let route = shared.table.borrow().route_for_bind(key).cloned();
                match route {
                    Some(r) if r.proto.is_stream() => {
                        tokio::spawn(async move {
                            crate::tcp::serve(stream, shared, r, false, &[]).await;
                            drop(permit);
                        });
                    }
                    Some(r) if r.proto.is_http() => {
                        tokio::spawn(async move {
                            crate::h1::serve(stream, shared, Some(key)).await;
                            drop(permit);
                        });
                    }
                    _ => drop(stream),
                }
            }
        }
    }
}

/// The sockets for listen ports and dedicated addresses currently open, by where they are
/// bound and whether they are UDP.
#[derive(Default)]
struct ListenPorts(HashMap<(BindKey, bool), JoinHandle<()>>);

impl ListenPorts {
    async fn reconcile(&mut self, table: &Table, shared: &Arc<Shared>) {
        let mut wanted: HashMap<(BindKey, bool), SocketAddr> = HashMap::new();
        for (port, r) in &table.listen {
            wanted.insert(
                (BindKey::Listen(*port), r.proto == Proto::Udp),
                SocketAddr::new(shared.settings.bind, *port),
            );
        }
        for (addr, r) in &table.dedicated {
            wanted.insert((BindKey::Dedicated(*addr), r.proto == Proto::Udp), *addr);
        }
        self.0.retain(|key, task| {
            let keep = wanted.contains_key(key);
            if !keep {
                tracing::info!(bind = ?key.0, udp = key.1, "closing listen socket");
                task.abort();
            }
            keep
        });
        for (key, addr) in wanted {
            if self.0.contains_key(&key) {
                continue;
            }
            let (bind, udp) = key;
            let opened = if udp {
                UdpSocket::bind(addr).await.map(|s| {
                    tokio::spawn(crate::udp::serve(
                        s,
                        shared.clone(),
                        crate::udp::Source::Bind(bind),
                    ))
                })
            } else {
                TcpListener::bind(addr)
                    .await
                    .map(|l| tokio::spawn(accept_loop(l, shared.clone(), Listener::Port(bind))))
            };
            match opened {
                Ok(task) => {
                    tracing::info!(%addr, udp, "opened listen socket");
                    self.0.insert(key, task);
                }
                Err(error) => {
                    // Retried at the next configuration change.
                    shared.metrics.listen_errors.inc();
                    tracing::warn!(%addr, udp, %error, "cannot open listen socket");
                }
            }
        }
    }
}

impl Drop for ListenPorts {
    fn drop(&mut self) {
        for t in self.0.values() {
            t.abort();
        }
    }
}

/// Stops new traffic to a removed backend, waits for in-flight work up to the drain
/// timeout, then closes what is left.
async fn drain(backend: Arc<Backend>, timeout: Duration) {
    backend.set_draining();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut poll = tokio::time::interval(Duration::from_millis(50));
    while backend.active() > 0 && tokio::time::Instant::now() < deadline {
        poll.tick().await;
    }
    if backend.active() > 0 {
        tracing::info!(backend = %backend.label(), active = backend.active(), "drain timeout; closing");
    }
    backend.kill();
}

async fn route(
    shared: Arc<Shared>,
    mut inputs: watch::Receiver<Inputs>,
    table_tx: watch::Sender<Arc<Table>>,
    status_tx: watch::Sender<Status>,
) {
    let mut registry = Registry::default();
    let mut ports = ListenPorts::default();
    let mut reported_error: Option<String> = None;
    loop {
        let current = inputs.borrow_and_update().clone();
        let (table, removed) = table::build(
            &current,
            &mut registry,
            &shared.metrics,
            shared.settings.health.peer_fresh(),
        );
        let table = Arc::new(table);
        // Listen ports first: once the table is visible its ports accept connections.
        ports.reconcile(&table, &shared).await;
        table_tx.send_replace(table.clone());
        for b in removed {
            shared.metrics.remove_upstream(b.label());
            tokio::spawn(drain(b, shared.settings.drain_timeout));
        }
        if let Some(e) = &current.config_error
            && reported_error.as_ref() != Some(e)
        {
            shared.metrics.config_errors.inc();
            tracing::warn!(error = %e, "configuration rejected; keeping the last good one");
        }
        reported_error = current.config_error.clone();
        status_tx.send_replace(status_of(&current));
        serving::publish(&shared.serving_tx, serving::compute(&table, now_ms()));
        if inputs.changed().await.is_err() {
            // The source is gone: keep serving the last table.
            std::future::pending::<()>().await;
        }
    }
}

fn status_of(inputs: &Inputs) -> Status {
    match (&inputs.config, &inputs.config_error) {
        (None, Some(e)) => Status {
            ready: false,
            message: Some(format!("no valid configuration: {e}")),
        },
        (None, None) => Status {
            ready: false,
            message: Some("no configuration yet".into()),
        },
        (Some(_), _) if !inputs.synced => Status {
            ready: false,
            message: Some("local endpoints not listed yet".into()),
        },
        (Some(_), e) => Status {
            ready: true,
            message: e
                .as_ref()
                .map(|e| format!("serving the last good configuration; latest rejected: {e}")),
        },
    }
}

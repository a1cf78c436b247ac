//! The routing core: turns each [`Inputs`] snapshot into a routing table, opens and closes
//! listen ports, drains removed backends, and runs the listeners and health checks. It
//! takes its inputs from a watch channel, so tests drive it without a cluster.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backend::{Backend, OutlierSettings, now_ms};
use crate::health::HealthSettings;
use crate::inputs::Inputs;
use crate::metrics::Metrics;
use crate::serving::{self, Serving, ServingView};
use crate::table::{self, Proto, Registry, Table};

/// How the agent runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// This member cluster's name.
    pub cluster: String,
    /// Address every listener binds.
    pub bind: IpAddr,
    /// HTTP listener port (0: any).
    pub http_port: u16,
    /// Peer listener port (0: any).
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
}

impl Settings {
    /// Defaults for `cluster` on `bind`, ephemeral ports.
    pub fn new(cluster: &str, bind: IpAddr) -> Self {
        Self {
            cluster: cluster.to_string(),
            bind,
            http_port: 0,
            peer_port: 0,
            health: HealthSettings::default(),
            outlier: OutlierSettings::default(),
            connect_timeout: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            retries: 2,
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
}

/// A running agent; its tasks stop when it is dropped.
pub struct Agent {
    /// Where the HTTP listener is.
    pub http_addr: SocketAddr,
    /// Where the peer listener is.
    pub peer_addr: SocketAddr,
    /// Which clusters serve which Services (for DNS).
    pub serving: ServingView,
    /// Readiness.
    pub status: watch::Receiver<Status>,
    /// The current table (for inspection).
    pub table: watch::Receiver<Arc<Table>>,
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
        let peer = TcpListener::bind((settings.bind, settings.peer_port)).await?;
        let (http_addr, peer_addr) = (http.local_addr()?, peer.local_addr()?);
        let (table_tx, table_rx) = watch::channel(Arc::new(Table::default()));
        let (serving_tx, serving_rx) = watch::channel(Arc::new(Serving::default()));
        let (status_tx, status_rx) = watch::channel(Status {
            ready: false,
            message: Some("no configuration yet".into()),
        });
        let shared = Arc::new(Shared {
            settings,
            table: table_rx.clone(),
            metrics,
            serving_tx,
            http_server: auto::Builder::new(TokioExecutor::new()),
        });
        let tasks = vec![
            tokio::spawn(accept_loop(http, shared.clone(), Listener::Http)),
            tokio::spawn(accept_loop(peer, shared.clone(), Listener::Peer)),
            tokio::spawn(crate::health::run(shared.clone())),
            tokio::spawn(route(shared, inputs, table_tx, status_tx)),
        ];
        tracing::info!(%http_addr, %peer_addr, "lb-agent listening");
        Ok(Self {
            http_addr,
            peer_addr,
            serving: ServingView(serving_rx),
            status: status_rx,
            table: table_rx,
            tasks,
        })
    }
}

#[derive(Clone, Copy)]
enum Listener {
    Http,
    Peer,
    Port(u16),
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
        match kind {
            Listener::Http => {
                tokio::spawn(crate::h1::serve(stream, shared, None));
            }
            Listener::Peer => {
                tokio::spawn(crate::peer::serve(stream, shared));
            }
            Listener::Port(port) => {
                let route = shared.table.borrow().listen.get(&port).cloned();
                match route {
                    Some(r) if r.proto == Proto::Tcp => {
                        tokio::spawn(async move {
                            crate::tcp::serve(stream, shared, r, false, &[]).await
                        });
                    }
                    Some(_) => {
                        tokio::spawn(crate::h1::serve(stream, shared, Some(port)));
                    }
                    None => drop(stream),
                }
            }
        }
    }
}

/// The listen ports currently open.
#[derive(Default)]
struct ListenPorts(HashMap<u16, JoinHandle<()>>);

impl ListenPorts {
    async fn reconcile(&mut self, table: &Table, shared: &Arc<Shared>) {
        self.0.retain(|port, task| {
            let keep = table.listen.contains_key(port);
            if !keep {
                tracing::info!(port, "closing listen port");
                task.abort();
            }
            keep
        });
        for port in table.listen.keys() {
            if self.0.contains_key(port) {
                continue;
            }
            match TcpListener::bind((shared.settings.bind, *port)).await {
                Ok(l) => {
                    tracing::info!(port, "opened listen port");
                    let task = tokio::spawn(accept_loop(l, shared.clone(), Listener::Port(*port)));
                    self.0.insert(*port, task);
                }
                Err(error) => {
                    // Retried at the next configuration change.
                    shared.metrics.listen_errors.inc();
                    tracing::warn!(port, %error, "cannot open listen port");
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

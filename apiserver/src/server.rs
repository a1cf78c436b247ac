//! Serving: TLS (rustls) over TCP with HTTP/1.1 and HTTP/2, per-connection client
//! certificate identity, and assembly of an engine + cache + controllers over a store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use meridian_runtime::batched_writes::BatchedWrites;
use meridian_store::Storage;
use rustls::ServerConfig as TlsConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::{ApiServer, DEFAULT_MAX_BODY};
use crate::auth::TokenAuthenticator;
use crate::cache::{Cache, TextForm};
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::openapi::OpenApi;
use crate::registry::Registry;

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors building TLS or the engine.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Certificates or keys could not be parsed or used.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The store could not be read at start.
    #[error("loading the store: {0}")]
    Store(#[from] meridian_store::StoreError),
    /// Binding the listener failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// Address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Parses PEM certificates.
pub fn parse_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, ServeError> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServeError::Tls(format!("certificate PEM: {e}")))
}

/// Parses one PEM private key.
pub fn parse_key(pem: &str) -> Result<PrivateKeyDer<'static>, ServeError> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .map_err(|e| ServeError::Tls(format!("private key PEM: {e}")))?
        .ok_or_else(|| ServeError::Tls("no private key in PEM".into()))
}

/// A rustls server config: serving cert/key, optional client CA (client certs optional, so
/// bearer tokens still work), ALPN h2 and http/1.1.
pub fn tls_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca_pem: Option<&str>,
) -> Result<Arc<TlsConfig>, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = TlsConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    let builder = match client_ca_pem {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in parse_certs(ca)? {
                roots
                    .add(c)
                    .map_err(|e| ServeError::Tls(format!("client CA: {e}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| ServeError::Tls(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(parse_certs(cert_pem)?, parse_key(key_pem)?)
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The schema documents of one registry: built once, shared by every server using it
/// (a simulated fleet runs hundreds of servers with the same kinds).
#[derive(Clone)]
pub struct Schemas {
    /// OpenAPI v2/v3 documents.
    pub openapi: Arc<OpenApi>,
    /// Definitions for strategic merge patch and field validation.
    pub definitions: Arc<apimachinery::schema::Definitions>,
}

impl Schemas {
    /// Builds the documents of `registry`.
    pub fn build(registry: &Registry) -> Self {
        let openapi = Arc::new(OpenApi::build(registry));
        let definitions = Arc::new(apimachinery::schema::Definitions::new(
            openapi.definitions().clone(),
        ));
        Self {
            openapi,
            definitions,
        }
    }
}

/// Builds the engine over a store: loads the cache, starts the in-server controllers.
pub async fn build_engine(
    registry: Registry,
    store: Arc<dyn Storage>,
    watch_history: usize,
) -> Result<Arc<Engine>, ServeError> {
    let schemas = Schemas::build(&registry);
    build_engine_with(registry, store, watch_history, TextForm::Packed, &schemas).await
}

/// Builds the engine with schema documents built earlier, its cache holding objects in
/// `form`.
pub async fn build_engine_with(
    registry: Registry,
    store: Arc<dyn Storage>,
    watch_history: usize,
    form: TextForm,
    schemas: &Schemas,
) -> Result<Arc<Engine>, ServeError> {
    // Custom kinds stored earlier are served before their objects load; their
    // documents then differ from the shared ones.
    let custom = crate::crd::controller::with_stored(registry.clone(), store.as_ref()).await?;
    let (registry, schemas) = if custom.all().len() == registry.all().len() {
        (registry, schemas.clone())
    } else {
        let built = Schemas::build(&custom);
        (custom, built)
    };
    // Watchers may fall behind by a burst as large as the history they could resume from.
    let broadcast = watch_history.clamp(64, crate::cache::BROADCAST_CAPACITY);
    let cache = Cache::start(
        registry.clone(),
        store.clone(),
        crate::cache::HistoryBounds::new(watch_history),
        broadcast,
        form,
    )
    .await?;
    let engine = Arc::new(Engine::new(store, cache, schemas));
    tokio::spawn(crate::gc::run(engine.clone()));
    tokio::spawn(crate::crd::run(engine.clone()));
    Ok(engine)
}

/// Assembles the request handler, authorizing with RBAC over the engine's cache.
pub fn api_server(
    engine: Arc<Engine>,
    tokens: TokenAuthenticator,
    advertise: String,
    metrics: Arc<Metrics>,
) -> Arc<ApiServer> {
    let authorizer = Arc::new(crate::rbac::RbacAuthorizer::new(engine.cache.clone()));
    Arc::new(ApiServer {
        engine,
        tokens,
        token_sources: Vec::new(),
        authorizer,
        metrics,
        advertise,
        max_body: DEFAULT_MAX_BODY,
        version: "v1.34.0-meridian".into(),
    })
}

/// Binds a listener.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<TlsConfig>,
    api: Arc<ApiServer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
        };
        let acceptor = acceptor.clone();
        let api = api.clone();
        let conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let Some((tls, user)) = handshake(&acceptor, tcp, peer).await else {
                return;
            };
            serve_connection(
                tls,
                move |req| {
                    let api = api.clone();
                    let user = user.clone();
                    async move { api.handle(req, user).await }
                },
                conn_shutdown,
            )
            .await;
        });
    }
}

/// A client's TLS connection. Its records leave in batches: a response and the watch events
/// it caused, or the events of several watches, share one send (see [`BatchedWrites`]).
pub type ServerStream = tokio_rustls::server::TlsStream<BatchedWrites<tokio::net::TcpStream>>;

/// Completes a TLS handshake (bounded in time) and reads the client certificate identity.
pub async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
) -> Option<(ServerStream, Option<crate::auth::UserInfo>)> {
    let _ = tcp.set_nodelay(true);
    let accept = acceptor.accept(BatchedWrites::new(tcp));
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return None;
        }
    };
    let user = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| crate::auth::identity_from_cert(c));
    Some((tls, user))
}

/// Serves HTTP/1.1 or HTTP/2 on one TLS connection until it ends or `shutdown` turns true.
pub async fn serve_connection<F, Fut>(
    tls: ServerStream,
    handler: F,
    mut shutdown: watch::Receiver<bool>,
) where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<crate::api::Body>> + Send + 'static,
{
    let svc = service_fn(move |req| {
        // Boxed once here: hyper moves the service future into the task it spawns per
        // request, and a whole request's state is kilobytes to copy at every move.
        let fut = Box::pin(handler(req));
        async move { Ok::<_, std::convert::Infallible>(fut.await) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(4096)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let conn = builder.serve_connection(TokioIo::new(tls), svc);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
    }
}

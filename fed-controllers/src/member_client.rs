//! Kube clients for member clusters that cost one multiplexed connection per member.
//!
//! kube's stock client keeps an HTTP/1 pool: every concurrent request or open watch holds
//! its own TLS connection, with its own rustls state and a read buffer that grows with the
//! largest response it ever read (an initial LIST). A member task runs a probe, a node
//! watch and a pod watch at once, so that is three or more connections per member, which
//! dominated the controller's memory at fleet scale. Here every request to a member rides
//! one HTTP/2 connection (ALPN `h2`; members that only speak HTTP/1.1 still work, on the
//! ordinary pool), and one rustls configuration is shared by every member trusting the
//! same CA bundle.
//!
//! [`federation_client`] does the same for the federation API, where every member task's
//! status writes and Events would otherwise grow kube's pool to a connection per
//! concurrent request.
//!
//! TLS to members is always verified against `spec.caBundle` and only it. Session resumption is off:
//! a member connection is made once and lives long, so a ticket cache would only cost
//! memory.
//!
//! ```no_run
//! # async fn f(fed: kube::Client, spec: fed_api::ClusterSpec) -> anyhow::Result<()> {
//! use fed_controllers::member_client::{Limits, MemberClients};
//! let clients = MemberClients::new(Limits::default());
//! let client = clients.connect(&fed, &spec).await?; // a kube::Client; clone it freely
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use fed_api::ClusterSpec;
use http::header::{AUTHORIZATION, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use meridian_runtime::leader::{ElectionMetrics, Gate};
use rustls::ClientConfig;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::sync::OnceCell;
use tokio_rustls::client::TlsStream;
use tower_service::Service as _;

use crate::credentials::{self, CredentialsError};
use meridian_runtime::batched_writes::BatchedWrites;

/// Connection tunables shared by every member client of a [`MemberClients`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// TCP connect plus TLS handshake.
    pub connect_timeout: Duration,
    /// An HTTP/2 PING is sent after this long without traffic from the member...
    pub keep_alive_interval: Duration,
    /// ...and the connection is closed (the next request reconnects) when the PING is not
    /// answered within this. Catches connections whose peer vanished without a reset.
    pub keep_alive_timeout: Duration,
    /// HTTP/2 flow-control window of one stream: the most a member may send on one
    /// request before we read it. Bounds what a fast member can make us buffer.
    pub stream_window: u32,
    /// HTTP/2 flow-control window of the whole connection.
    pub connection_window: u32,
}

impl Limits {
    /// Limits for the federation connection: it carries every watch and write of every
    /// controller, so its windows are wide — a small connection window would let one
    /// watch whose consumer is busy stall all the others (HTTP/2 flow control is shared).
    pub fn federation() -> Self {
        Limits {
            stream_window: 16 * 1024 * 1024,
            connection_window: 1024 * 1024 * 1024,
            ..Limits::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: Duration::from_secs(3),
            keep_alive_interval: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(10),
            stream_window: 256 * 1024,
            connection_window: 1024 * 1024,
        }
    }
}

/// Builds member clients; keep one per process and share it: clients for the same
/// endpoint, CA and token share one connection (whichever controller asked for them), and
/// members with the same CA share one TLS configuration. Every client it hands out
/// writes through its leader-election gate: a replica that does not lead writes nothing
/// to any member.
pub struct MemberClients {
    limits: Limits,
    gate: Gate,
    /// TLS configurations by the DER of their trust anchors. Weak: a configuration lives
    /// as long as some member client uses it.
    tls: Mutex<HashMap<Vec<u8>, Weak<ClientConfig>>>,
    /// Live transports by endpoint (several when CA or token differ), to hand out again.
    transports: Mutex<HashMap<String, Vec<Weak<Inner>>>>,
}

impl std::fmt::Debug for MemberClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClients")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl MemberClients {
    /// A builder with these limits, for a process without leader election.
    pub fn new(limits: Limits) -> Arc<Self> {
        Self::gated(limits, Gate::unelected(ElectionMetrics::default()))
    }

    /// A builder whose clients' writes pass `gate`.
    pub fn gated(limits: Limits, gate: Gate) -> Arc<Self> {
        Arc::new(MemberClients {
            limits,
            gate,
            tls: Mutex::new(HashMap::new()),
            transports: Mutex::new(HashMap::new()),
        })
    }

    /// The limits every client gets.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Reads the member's token from the Secret in `spec.secretRef` (bounded by
    /// `federation_timeout`) and builds its client.
    pub async fn connect(
        &self,
        fed: &kube::Client,
        spec: &ClusterSpec,
        federation_timeout: Duration,
    ) -> Result<kube::Client, CredentialsError> {
        let token = credentials::load_token(fed, spec, federation_timeout).await?;
        self.client(spec, &token)
    }

    /// A client for the member at `spec.apiEndpoint`, trusting `spec.caBundle` only and
    /// authenticating with `token`. Nothing is dialled until the first request. Clones
    /// of the returned client, and every client this builder hands out for the same
    /// endpoint, CA and token while one is alive, share one connection.
    pub fn client(
        &self,
        spec: &ClusterSpec,
        token: &str,
    ) -> Result<kube::Client, CredentialsError> {
        let invalid = || CredentialsError::InvalidEndpoint {
            endpoint: spec.api_endpoint.clone(),
        };
        let uri: Uri = spec.api_endpoint.parse().map_err(|_| invalid())?;
        let (Some(authority), Some("https")) = (uri.authority().cloned(), uri.scheme_str()) else {
            return Err(invalid());
        };
        let server_name = server_name(authority.host()).ok_or_else(invalid)?;
        let ca = credentials::ca_certificates(
            spec.ca_bundle
                .as_deref()
                .ok_or(CredentialsError::MissingCaBundle)?,
        )?;
        let tls = self.tls_config(ca)?;
        let mut bearer = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| CredentialsError::InvalidToken)?;
        bearer.set_sensitive(true);
        let mut transports = meridian_runtime::sync::lock(&self.transports);
        let live = transports.entry(spec.api_endpoint.clone()).or_default();
        live.retain(|w| w.strong_count() > 0);
        let same = |t: &Arc<Inner>| {
            Arc::ptr_eq(&t.connector.tls, &tls) && t.bearer.as_ref() == Some(&bearer)
        };
        if let Some(inner) = live.iter().filter_map(Weak::upgrade).find(same) {
            return Ok(self.kube_client(inner));
        }
        let inner = Arc::new(Inner::new(
            &self.limits,
            tls,
            server_name,
            &uri,
            authority,
            Some(bearer),
        ));
        live.push(Arc::downgrade(&inner));
        transports.retain(|_, v| v.iter().any(|w| w.strong_count() > 0));
        Ok(self.kube_client(inner))
    }

    fn kube_client(&self, inner: Arc<Inner>) -> kube::Client {
        use tower_layer::Layer as _;
        kube::Client::new(self.gate.layer("member").layer(Transport(inner)), "default")
    }

    /// The shared TLS configuration trusting exactly `ca`.
    fn tls_config(&self, ca: Vec<Vec<u8>>) -> Result<Arc<ClientConfig>, CredentialsError> {
        let key: Vec<u8> = ca.iter().flat_map(|c| c.iter().copied()).collect();
        let mut cache = meridian_runtime::sync::lock(&self.tls);
        if let Some(cfg) = cache.get(&key).and_then(Weak::upgrade) {
            return Ok(cfg);
        }
        let mut roots = rustls::RootCertStore::empty();
        for der in ca {
            roots
                .add(CertificateDer::from(der))
                .map_err(|e| CredentialsError::InvalidCaBundle(e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CredentialsError::InvalidCaBundle(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        cfg.resumption = rustls::client::Resumption::disabled();
        let cfg = Arc::new(cfg);
        cache.retain(|_, w| w.strong_count() > 0);
        cache.insert(key, Arc::downgrade(&cfg));
        Ok(cfg)
    }
}

/// A client for the federation API from a kubeconfig-derived configuration, sending
/// everything (every member task's status writes and Events, the controllers' watches)
/// over one HTTP/2 connection instead of a pool that grows to one connection per
/// concurrent request. TLS and credentials come from the configuration as kube would use
/// them (CA, client certificate, token, token file or exec plugin). Configurations this
/// transport does not cover — plain http, an HTTP proxy, impersonation or extra headers —
/// get kube's stock client.
pub fn federation_client(
    config: kube::Config,
    limits: Limits,
) -> Result<kube::Client, kube::Error> {
    use kube::client::ConfigExt as _;
    use tower_layer::Layer as _;
    let uri = config.cluster_url.clone();
    let name = config
        .tls_server_name
        .clone()
        .or_else(|| uri.host().map(str::to_string));
    let (Some(authority), Some("https"), Some(server_name)) = (
        uri.authority().cloned(),
        uri.scheme_str(),
        name.as_deref().and_then(server_name),
    ) else {
        return kube::Client::try_from(config);
    };
    let a = &config.auth_info;
    let impersonating = a.impersonate.is_some()
        || a.impersonate_uid.is_some()
        || a.impersonate_groups.is_some()
        || a.impersonate_user_extra.is_some();
    if config.proxy_url.is_some() || !config.headers.is_empty() || impersonating {
        return kube::Client::try_from(config);
    }
    let mut tls = config.rustls_client_config()?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut limits = limits;
    if let Some(t) = config.connect_timeout {
        limits.connect_timeout = t;
    }
    let inner = Inner::new(&limits, Arc::new(tls), server_name, &uri, authority, None);
    let transport = Transport(Arc::new(inner));
    let namespace = config.default_namespace.clone();
    Ok(match config.auth_layer()? {
        Some(auth) => kube::Client::new(auth.layer(transport), namespace),
        None => kube::Client::new(transport, namespace),
    })
}

/// The TLS name to verify: the endpoint's DNS name or IP address.
fn server_name(host: &str) -> Option<ServerName<'static>> {
    ServerName::try_from(host.trim_matches(['[', ']']).to_string()).ok()
}

/// Dials one member: TCP, then TLS offering `h2` first.
#[derive(Clone)]
struct Connector {
    tls: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    host: Arc<str>,
    port: u16,
    timeout: Duration,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = MemberStream;
    type Error = BoxError;
    type Future = BoxFuture<MemberStream>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        // The destination is always this member's endpoint; the URI adds nothing.
        let c = self.clone();
        Box::pin(async move {
            let dial = async {
                let tcp = TcpStream::connect((&*c.host, c.port)).await?;
                // Requests are small and latency-sensitive (probes).
                tcp.set_nodelay(true)?;
                tokio_rustls::TlsConnector::from(c.tls.clone())
                    .connect(c.server_name.clone(), BatchedWrites::new(tcp))
                    .await
            };
            match tokio::time::timeout(c.timeout, dial).await {
                Ok(Ok(tls)) => Ok(MemberStream(TokioIo::new(tls))),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connect timed out after {:?}", c.timeout),
                )) as BoxError),
            }
        })
    }
}

/// A TLS connection to a member, telling the pool whether it speaks HTTP/2. Its TLS
/// records leave in batches: see [`BatchedWrites`].
struct MemberStream(TokioIo<TlsStream<BatchedWrites<TcpStream>>>);

impl Connection for MemberStream {
    fn connected(&self) -> Connected {
        let h2 = self.0.inner().get_ref().1.alpn_protocol() == Some(b"h2");
        if h2 {
            Connected::new().negotiated_h2()
        } else {
            Connected::new()
        }
    }
}

impl hyper::rt::Read for MemberStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for MemberStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}

/// What a member's endpoint speaks, learnt by dialling it once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Http2,
    Http1,
}

/// kube's requests carry only a path; this points them at the member, adds the token and
/// sends them over HTTP/2 when the member negotiates it.
#[derive(Clone)]
struct Transport(Arc<Inner>);

/// One member connection's state, shared by every client using it.
struct Inner {
    http2: HttpClient<Connector, kube::client::Body>,
    http1: HttpClient<Connector, kube::client::Body>,
    /// Set by the first successful dial; until then every request first dials.
    protocol: OnceCell<Protocol>,
    connector: Connector,
    scheme: Scheme,
    authority: Authority,
    /// Path prefix of the endpoint (an API server behind a path-routing proxy).
    prefix: String,
    /// `Authorization` of every request, unless a layer above adds its own.
    bearer: Option<HeaderValue>,
}

impl Inner {
    fn new(
        l: &Limits,
        tls: Arc<ClientConfig>,
        server_name: ServerName<'static>,
        uri: &Uri,
        authority: Authority,
        bearer: Option<HeaderValue>,
    ) -> Self {
        let connector = Connector {
            tls,
            server_name,
            port: authority.port_u16().unwrap_or(443),
            host: Arc::from(authority.host().trim_matches(['[', ']'])),
            timeout: l.connect_timeout,
        };
        let mut builder = HttpClient::builder(TokioExecutor::new());
        builder
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            // An idle connection (watches ended, no request for a while) is closed rather
            // than kept forever.
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1)
            .http2_initial_stream_window_size(l.stream_window)
            .http2_initial_connection_window_size(l.connection_window)
            .http2_keep_alive_interval(l.keep_alive_interval)
            .http2_keep_alive_timeout(l.keep_alive_timeout)
            .http2_keep_alive_while_idle(false);
        let http1 = builder.build(connector.clone());
        // HTTP/2 only: concurrent requests wait for the one connection being made instead
        // of each dialling its own (which, with ALPN deciding per connection, they would).
        let http2 = builder.http2_only(true).build(connector.clone());
        Inner {
            http2,
            http1,
            protocol: OnceCell::new(),
            connector,
            scheme: Scheme::HTTPS,
            authority,
            prefix: uri.path().trim_end_matches('/').to_string(),
            bearer,
        }
    }

    /// Dials the member once and reads what ALPN settled on (the connection is dropped:
    /// one extra handshake per client, against a connection per request otherwise).
    async fn protocol(&self) -> Result<Protocol, BoxError> {
        let p = self
            .protocol
            .get_or_try_init(|| async {
                let stream = self.connector.clone().call(Uri::default()).await?;
                Ok::<_, BoxError>(if stream.connected().is_negotiated_h2() {
                    Protocol::Http2
                } else {
                    Protocol::Http1
                })
            })
            .await?;
        Ok(*p)
    }
}

impl tower_service::Service<Request<kube::client::Body>> for Transport {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<Response<Incoming>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<kube::client::Body>) -> Self::Future {
        let t = &self.0;
        let target = req.uri().path_and_query().map_or("/", PathAndQuery::as_str);
        let uri = Uri::builder()
            .scheme(t.scheme.clone())
            .authority(t.authority.clone())
            .path_and_query(format!("{}{target}", t.prefix))
            .build();
        let uri = match uri {
            Ok(u) => u,
            Err(e) => return Box::pin(async move { Err(e.into()) }),
        };
        *req.uri_mut() = uri;
        if let Some(bearer) = &t.bearer {
            req.headers_mut().insert(AUTHORIZATION, bearer.clone());
        }
        let this = t.clone();
        Box::pin(async move {
            let fut = match this.protocol().await? {
                Protocol::Http2 => this.http2.request(req),
                Protocol::Http1 => this.http1.request(req),
            };
            fut.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use meridian_apiserver::pki::Authority;

    fn spec(ca_pem: &str) -> ClusterSpec {
        ClusterSpec {
            api_endpoint: "https://127.0.0.1:6443".into(),
            ca_bundle: Some(base64::engine::general_purpose::STANDARD.encode(ca_pem)),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn members_with_one_ca_share_one_tls_config() {
        let clients = MemberClients::new(Limits::default());
        let (a, b) = (
            Authority::generate().expect("CA"),
            Authority::generate().expect("CA"),
        );
        // Different tokens: two transports, one TLS configuration.
        let c1 = clients.client(&spec(&a.cert_pem), "t1").expect("client");
        let c2 = clients.client(&spec(&a.cert_pem), "t2").expect("client");
        let c3 = clients.client(&spec(&b.cert_pem), "t1").expect("client");
        let live = |clients: &MemberClients| {
            let cache = clients.tls.lock().expect("lock");
            cache.values().map(Weak::strong_count).collect::<Vec<_>>()
        };
        let mut counts = live(&clients);
        counts.sort();
        // Each client holds its config (in every clone of its connector).
        assert_eq!(counts.len(), 2, "{counts:?}");
        assert!(counts[1] > counts[0], "{counts:?}");
        drop((c1, c2, c3));
        // Each client's request queue task lets go of its transport once it notices.
        let released = tokio::time::timeout(Duration::from_secs(5), async {
            while !live(&clients).iter().all(|&n| n == 0) {
                tokio::task::yield_now().await;
            }
        });
        assert!(released.await.is_ok(), "configs outlive their clients");
    }

    #[tokio::test]
    async fn bad_ca_bundle_and_token_are_config_errors() {
        let clients = MemberClients::new(Limits::default());
        let garbage = base64::engine::general_purpose::STANDARD
            .encode("-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n");
        let mut s = spec("");
        s.ca_bundle = Some(garbage);
        assert!(matches!(
            clients.client(&s, "t"),
            Err(CredentialsError::InvalidCaBundle(_))
        ));
        s.ca_bundle = None;
        assert!(matches!(
            clients.client(&s, "t"),
            Err(CredentialsError::MissingCaBundle)
        ));
        let ca = Authority::generate().expect("CA");
        assert!(matches!(
            clients.client(&spec(&ca.cert_pem), "t\nx"),
            Err(CredentialsError::InvalidToken)
        ));
    }

    #[test]
    fn server_names() {
        assert!(matches!(
            server_name("127.0.0.1"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("api.example.com"),
            Some(ServerName::DnsName(_))
        ));
    }
}

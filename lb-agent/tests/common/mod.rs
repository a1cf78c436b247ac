//! Test fixtures: small HTTP and TCP backends on loopback, agents driven through their
//! input channel, a plain HTTP client and condition waits.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use fed_api::lbconfig::{LbCluster, LbConfig, LbPort, LbService};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lb_agent::inputs::LocalEndpoints;
use lb_agent::metrics::Metrics;
use lb_agent::{Agent, Inputs, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// Waits until `cond` holds, polling, or panics after `secs`.
pub async fn wait_for<F, Fut>(what: &str, secs: u64, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if cond().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback HTTP/1.1 backend answering `<name>` with what it saw in headers.
pub struct HttpBackend {
    pub addr: SocketAddr,
    pub name: String,
    pub hits: Arc<AtomicUsize>,
    /// Answer 500 while set.
    pub fail: Arc<AtomicBool>,
    /// `/slow` waits for this.
    pub release: Arc<Notify>,
    stop: watch::Sender<bool>,
}

impl HttpBackend {
    pub async fn start(ip: &str, name: &str) -> Self {
        let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = watch::channel(false);
        let hits = Arc::new(AtomicUsize::new(0));
        let fail = Arc::new(AtomicBool::new(false));
        let release = Arc::new(Notify::new());
        let (h, f, r, n) = (
            hits.clone(),
            fail.clone(),
            release.clone(),
            name.to_string(),
        );
        tokio::spawn(async move {
            let mut stopped = stop_rx.clone();
            loop {
                let conn = tokio::select! {
                    c = listener.accept() => c,
                    _ = stopped.wait_for(|s| *s) => return,
                };
                let Ok((stream, _)) = conn else { continue };
                let (h, f, r, n) = (h.clone(), f.clone(), r.clone(), n.clone());
                let mut stopped = stop_rx.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                        let (h, f, r, n) = (h.clone(), f.clone(), r.clone(), n.clone());
                        async move {
                            h.fetch_add(1, Ordering::SeqCst);
                            if req.uri().path() == "/slow" {
                                r.notified().await;
                            }
                            let seen = |k: &str| {
                                req.headers()
                                    .get(k)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("")
                                    .to_string()
                            };
                            let status = if f.load(Ordering::SeqCst) { 500 } else { 200 };
                            let resp = http::Response::builder()
                                .status(status)
                                .header("x-seen-host", seen("host"))
                                .header("x-seen-forwarded-by", seen("x-meridian-forwarded-by"))
                                .body(Full::new(Bytes::from(n)))
                                .unwrap();
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped.wait_for(|s| *s) => {}
                    }
                });
            }
        });
        Self {
            addr,
            name: name.to_string(),
            hits,
            fail,
            release,
            stop,
        }
    }

    /// Closes the listener and every connection, as a dying pod would.
    pub fn kill(&self) {
        self.stop.send_replace(true);
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A loopback TCP backend: answers `<name>\n` then echoes.
pub async fn tcp_backend(ip: &str, name: &str) -> SocketAddr {
    let listener = TcpListener::bind((ip.parse::<IpAddr>().unwrap(), 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let name = name.to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let name = name.clone();
            tokio::spawn(async move {
                let _ = s.write_all(format!("{name}\n").as_bytes()).await;
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Connects, sends `msg`, half-closes and reads everything back.
pub async fn tcp_roundtrip(addr: SocketAddr, msg: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(msg.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// A response as the tests look at it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub seen_host: String,
    pub seen_forwarded_by: String,
}

/// One request on a fresh connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, String> {
    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = send
        .send_request(b.body(Empty::<Bytes>::new()).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let h = |k: &str| {
        resp.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (seen_host, seen_forwarded_by) = (h("x-seen-host"), h("x-seen-forwarded-by"));
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Reply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        seen_host,
        seen_forwarded_by,
    })
}

/// GET with a Host.
pub async fn get(addr: SocketAddr, host: &str) -> Result<Reply, String> {
    request(addr, "GET", host, "/", &[]).await
}

/// An agent and the channel that feeds it.
pub struct TestAgent {
    pub agent: Agent,
    pub inputs: watch::Sender<Inputs>,
    pub metrics: Arc<Metrics>,
    pub name: String,
}

impl TestAgent {
    pub async fn start(name: &str, ip: &str) -> Self {
        Self::start_with(name, ip, |_| {}).await
    }

    pub async fn start_with(name: &str, ip: &str, tune: impl FnOnce(&mut Settings)) -> Self {
        let mut settings = Settings::new(name, ip.parse().unwrap());
        // Quick checks keep the tests short; defaults are exercised by the benchmark.
        settings.health.interval = Duration::from_millis(200);
        settings.health.timeout = Duration::from_millis(150);
        settings.drain_timeout = Duration::from_secs(10);
        tune(&mut settings);
        let (tx, rx) = watch::channel(Inputs::default());
        let metrics = Arc::new(Metrics::default());
        let agent = Agent::start(settings, rx, metrics.clone()).await.unwrap();
        Self {
            agent,
            inputs: tx,
            metrics,
            name: name.to_string(),
        }
    }

    pub fn cluster(&self) -> LbCluster {
        LbCluster {
            name: self.name.clone(),
            region: String::new(),
            zone: String::new(),
            address: self.agent.http_addr.ip().to_string(),
            http_port: self.agent.http_addr.port(),
            peer_port: self.agent.peer_addr.port(),
            dns_port: 0,
            ready: true,
        }
    }

    /// Feeds a configuration and local endpoints, then waits until the table has them.
    pub async fn feed(&self, config: LbConfig, local: LocalEndpoints) {
        self.feed_with_tls(config, local, Default::default()).await;
    }

    /// Like [`TestAgent::feed`], with local TLS Secrets.
    pub async fn feed_with_tls(
        &self,
        config: LbConfig,
        local: LocalEndpoints,
        tls: lb_agent::inputs::TlsSecrets,
    ) {
        let config = Arc::new(config);
        self.inputs.send_replace(Inputs {
            config: Some(config.clone()),
            config_error: None,
            local: Arc::new(local),
            synced: true,
            tls: Arc::new(tls),
        });
        let mut table = self.agent.table.clone();
        tokio::time::timeout(
            Duration::from_secs(10),
            table.wait_for(|t| t.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, &config))),
        )
        .await
        .expect("table rebuilt")
        .expect("agent running");
    }
}

/// A TCP port that a moment ago was free on every loopback address, for a listen port:
/// other test binaries and other checkouts' runs start agents on the same addresses, so a
/// fixed listen port collides; the OS hands out one nobody holds.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

pub fn port(name: &str, protocol: &str, port: u16, listen_port: u16) -> LbPort {
    LbPort {
        name: name.into(),
        port,
        protocol: protocol.into(),
        listen_port,
    }
}

pub fn service(ns: &str, name: &str, ports: Vec<LbPort>, backends: &[(&str, u32)]) -> LbService {
    LbService {
        namespace: ns.into(),
        name: name.into(),
        ports,
        backends: backends
            .iter()
            .map(|(c, n)| (c.to_string(), *n))
            .collect::<BTreeMap<_, _>>(),
        ..Default::default()
    }
}

pub fn config(me: &str, clusters: Vec<LbCluster>, services: Vec<LbService>) -> LbConfig {
    LbConfig {
        dns_zone: "global.test".into(),
        cluster: me.into(),
        ttl_seconds: 5,
        clusters,
        services,
        client_subnets: vec![],
    }
}

pub fn local(entries: &[(&str, &str, &str, Vec<SocketAddr>)]) -> LocalEndpoints {
    entries
        .iter()
        .map(|(ns, svc, port, addrs)| {
            (
                (ns.to_string(), svc.to_string(), port.to_string()),
                addrs.iter().copied().collect(),
            )
        })
        .collect()
}

/// A self-signed certificate for `names`, and the rustls server config serving it.
pub fn tls_server_config(
    names: &[&str],
) -> (
    Arc<rustls::ServerConfig>,
    rustls::pki_types::CertificateDer<'static>,
) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.self_signed(&key).unwrap();
    let der = cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("private key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der.clone()], key_der)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (Arc::new(config), der)
}

/// A loopback TLS backend for `names`: after the handshake it says `<name>\n`, then echoes.
/// Returns its address and certificate (for clients to trust).
pub async fn tls_backend(
    name: &str,
    names: &[&str],
) -> (
    SocketAddr,
    rustls::pki_types::CertificateDer<'static>,
    watch::Sender<bool>,
) {
    let (config, cert) = tls_server_config(names);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let name = name.to_string();
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut stopped = stop_rx.clone();
        loop {
            let conn = tokio::select! {
                c = listener.accept() => c,
                _ = stopped.wait_for(|s| *s) => return,
            };
            let Ok((s, _)) = conn else { continue };
            let (acceptor, name) = (acceptor.clone(), name.clone());
            let mut stopped = stop_rx.clone();
            tokio::spawn(async move {
                let serve = async {
                    let Ok(mut tls) = acceptor.accept(s).await else {
                        return;
                    };
                    let _ = tls.write_all(format!("{name}\n").as_bytes()).await;
                    let _ = tls.flush().await;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = tls.read(&mut buf).await {
                        if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let _ = tls.flush().await;
                    }
                };
                tokio::select! {
                    _ = serve => {}
                    _ = stopped.wait_for(|s| *s) => {}
                }
            });
        }
    });
    (addr, cert, stop)
}

/// A TLS client trusting `certs`, for server name `name`.
pub fn tls_connector(
    certs: &[rustls::pki_types::CertificateDer<'static>],
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Connects through `addr` with SNI `name`, reads the backend's first line, echoes `msg`.
pub async fn tls_roundtrip(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    name: &str,
    msg: &str,
) -> Result<(String, String), String> {
    let s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut tls = connector
        .connect(server, s)
        .await
        .map_err(|e| e.to_string())?;
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while first.last() != Some(&b'\n') {
        let n = tls.read(&mut byte).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before the greeting".into());
        }
        first.push(byte[0]);
    }
    tls.write_all(msg.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    tls.flush().await.map_err(|e| e.to_string())?;
    let mut echo = vec![0u8; msg.len()];
    tls.read_exact(&mut echo).await.map_err(|e| e.to_string())?;
    Ok((
        String::from_utf8_lossy(&first).trim_end().to_string(),
        String::from_utf8_lossy(&echo).into_owned(),
    ))
}

/// A loopback UDP echo backend answering `<name>:<datagram>`; stops when the sender is
/// dropped or set.
pub async fn udp_backend(name: &str) -> (SocketAddr, watch::Sender<bool>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let (stop, mut stop_rx) = watch::channel(false);
    let name = name.to_string();
    tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        loop {
            let (n, peer) = tokio::select! {
                // Stop first: a datagram that arrives after the stop must go unanswered.
                biased;
                _ = stop_rx.wait_for(|s| *s) => return,
                r = socket.recv_from(&mut buf) => match r { Ok(x) => x, Err(_) => continue },
            };
            let mut out = format!("{name}:").into_bytes();
            out.extend_from_slice(&buf[..n]);
            let _ = socket.send_to(&out, peer).await;
        }
    });
    (addr, stop)
}

/// One datagram to `addr` from a fresh socket; the answer, or `None` after `wait`.
pub async fn udp_ask(
    socket: &tokio::net::UdpSocket,
    addr: SocketAddr,
    msg: &str,
    wait: Duration,
) -> Option<String> {
    socket.send_to(msg.as_bytes(), addr).await.ok()?;
    let mut buf = [0u8; 2048];
    match tokio::time::timeout(wait, socket.recv_from(&mut buf)).await {
        Ok(Ok((n, _))) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        _ => None,
    }
}

//! The stream figures of proxy_bench: TLS passed through by SNI (lb-agent's HTTPS listener
//! against nginx `stream` with `ssl_preread`) and WebSocket message relay (lb-agent's lean
//! HTTP/1 tunnel against nginx's `proxy_pass` with `Upgrade`), each measured like the HTTP
//! figure: closed-loop peak, then open loop at half the lb-agent peak, against the backend
//! reached directly, in interleaved slices.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::{HOST, Proc, free_port, quantiles, spawn_agent_with, stream_nginx, upgrade_nginx};

/// What one exchange is.
#[derive(Clone)]
pub enum Kind {
    /// An HTTP/1.1 request on a kept-alive TLS connection.
    TlsKeepAlive(TlsConnector),
    /// A new TCP connection, TLS handshake and one request.
    TlsNew(TlsConnector),
    /// A 64-byte WebSocket message echoed through an open tunnel.
    WebSocket,
}

const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
const MESSAGE: [u8; 64] = [0x42; 64];

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

enum Conn {
    Tls(Box<Tls>),
    Plain(TcpStream),
    /// TlsNew: nothing kept between exchanges.
    None,
}

/// Answers each request head on `s` with [`RESPONSE`].
async fn serve_http<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    loop {
        let n = s.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        while let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
            s.write_all(RESPONSE).await?;
            s.flush().await?;
            buf.copy_within(end + 4..len, 0);
            len -= end + 4;
        }
    }
}

/// A TLS backend (its own certificate) answering HTTP/1.1 keep-alive requests.
async fn tls_backend() -> (SocketAddr, rustls::pki_types::CertificateDer<'static>) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec![HOST.to_string()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let der = cert.der().clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der"),
        )
        .expect("server config");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = s.set_nodelay(true);
                if let Ok(tls) = acceptor.accept(s).await {
                    let _ = serve_http(tls).await;
                }
            });
        }
    });
    (addr, der)
}

/// A backend that switches every request to a byte echo after `101`.
async fn ws_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = s.set_nodelay(true);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                if s
                    .write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

impl Kind {
    async fn connect(&self, addr: SocketAddr) -> std::io::Result<Conn> {
        match self {
            Kind::TlsKeepAlive(c) => Ok(Conn::Tls(Box::new(tls_connect(c, addr).await?))),
            Kind::TlsNew(_) => Ok(Conn::None),
            Kind::WebSocket => {
                let mut s = TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                s.write_all(
                    format!(
                        "GET /ws HTTP/1.1\r\nhost: {HOST}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .await?;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut byte).await? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    head.push(byte[0]);
                }
                if !head.starts_with(b"HTTP/1.1 101") {
                    return Err(std::io::Error::other(
                        String::from_utf8_lossy(&head).into_owned(),
                    ));
                }
                Ok(Conn::Plain(s))
            }
        }
    }

    async fn exchange(&self, conn: &mut Conn, addr: SocketAddr) -> std::io::Result<()> {
        match (self, conn) {
            (Kind::TlsKeepAlive(_), Conn::Tls(s)) => request(&mut **s).await,
            (Kind::TlsNew(c), _) => {
                let mut s = tls_connect(c, addr).await?;
                request(&mut s).await
            }
            (Kind::WebSocket, Conn::Plain(s)) => {
                s.write_all(&MESSAGE).await?;
                let mut back = [0u8; 64];
                s.read_exact(&mut back).await?;
                Ok(())
            }
            _ => Err(std::io::Error::other("mismatched connection")),
        }
    }
}

async fn tls_connect(c: &TlsConnector, addr: SocketAddr) -> std::io::Result<Tls> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name =
        rustls::pki_types::ServerName::try_from(HOST.to_string()).map_err(std::io::Error::other)?;
    c.connect(name, tcp).await
}

async fn request<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> std::io::Result<()> {
    s.write_all(format!("GET / HTTP/1.1\r\nhost: {HOST}\r\n\r\n").as_bytes())
        .await?;
    s.flush().await?;
    let mut got = Vec::with_capacity(RESPONSE.len());
    let mut buf = [0u8; 256];
    while got.len() < RESPONSE.len() {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// Closed loop: `conns` clients each doing the next exchange on the previous one's end.
async fn peak(
    kind: &Kind,
    addr: SocketAddr,
    conns: u64,
    warm_up: Duration,
    secs: f64,
) -> (u64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (done, measuring, stop, kind) =
            (done.clone(), measuring.clone(), stop.clone(), kind.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = kind.connect(addr).await.expect("connect");
            while !stop.load(Ordering::Relaxed) {
                kind.exchange(&mut c, addr).await.expect("exchange");
                if measuring.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(warm_up).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let n = done.load(Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    (n, elapsed)
}

/// Open loop at `rate` exchanges/s over `conns` clients; latencies in µs.
async fn paced(kind: &Kind, addr: SocketAddr, conns: u64, rate: f64, secs: f64) -> Vec<f64> {
    let per_conn = Duration::from_secs_f64(conns as f64 / rate);
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let end = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..conns {
        let kind = kind.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = kind.connect(addr).await.expect("connect");
            let mut lat = Vec::new();
            let mut next = start + per_conn.mul_f64(i as f64 / conns as f64);
            while next < end {
                tokio::time::sleep_until(next).await;
                let sent = Instant::now();
                kind.exchange(&mut c, addr).await.expect("exchange");
                lat.push(sent.elapsed().as_secs_f64() * 1e6);
                next += per_conn;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    all
}

/// Measures `kind` on the three targets (direct, lb-agent, nginx) and prints the figures.
async fn compare(
    title: &str,
    unit: &str,
    kind: &Kind,
    targets: &[(&str, SocketAddr); 3],
    conns: u64,
    secs: u64,
    slices: u64,
) {
    let slice = secs as f64 / slices as f64;
    println!(
        "{title}: closed loop, {conns} clients, {secs} s per target in {slices} interleaved slices"
    );
    let mut done = [(0u64, 0f64); 3];
    for round in 0..slices {
        for k in 0..3 {
            let i = (k + round as usize) % 3;
            let warm_up = Duration::from_millis(if round == 0 { 1000 } else { 200 });
            let (count, elapsed) = peak(kind, targets[i].1, conns, warm_up, slice).await;
            done[i].0 += count;
            done[i].1 += elapsed;
        }
    }
    let peaks: Vec<f64> = done.iter().map(|(c, s)| *c as f64 / s).collect();
    for (i, (name, _)) in targets.iter().enumerate() {
        println!("  {name:<9} peak {:>9.0} {unit}/s", peaks[i]);
    }
    println!("  lb-agent / nginx = {:.2}", peaks[1] / peaks[2]);
    let rate = peaks[1] / 2.0;
    println!("  open loop at {rate:.0} {unit}/s (half the lb-agent peak):");
    let mut latencies: [Vec<f64>; 3] = Default::default();
    for round in 0..slices {
        for k in 0..3 {
            let i = (k + round as usize) % 3;
            latencies[i].extend(paced(kind, targets[i].1, conns, rate, slice).await);
        }
    }
    let mut direct = (0.0, 0.0);
    for (i, (name, _)) in targets.iter().enumerate() {
        let (p50, p99) = quantiles(std::mem::take(&mut latencies[i]));
        if i == 0 {
            direct = (p50, p99);
            println!("  {name:<9} p50 {p50:>7.0} µs  p99 {p99:>7.0} µs");
        } else {
            println!(
                "  {name:<9} p50 {p50:>7.0} µs  p99 {p99:>7.0} µs  added: p50 {:>6.0} µs, p99 {:>6.0} µs",
                p50 - direct.0,
                p99 - direct.1
            );
        }
    }
}

/// TLS passthrough by SNI and WebSocket relay, lb-agent on core 1 against nginx on core 1.
pub async fn run(bin: &std::path::Path, dir: &std::path::Path, conns: u64, secs: u64, slices: u64) {
    let (tls_be, cert) = tls_backend().await;
    let ws_be = ws_backend().await;
    let ip = "127.0.0.32";
    let (http, https, peer) = (free_port(ip), free_port(ip), free_port(ip));
    let cfg = serde_json::json!({
        "config": {
            "dnsZone": "global.test", "cluster": "a",
            "clusters": [{"name": "a", "address": ip, "httpPort": http, "peerPort": peer, "dnsPort": 0, "ready": true}],
            "services": [{"namespace": "shop", "name": "web",
                "ports": [
                    {"name": "https", "port": 443, "protocol": "tls", "listenPort": free_port("127.0.0.1")},
                    {"name": "http", "port": 80, "protocol": "http", "listenPort": free_port("127.0.0.1")}
                ],
                "backends": {"a": 1}}]
        },
        "endpoints": {"shop/web/https": [tls_be], "shop/web/http": [ws_be]}
    });
    let inputs = dir.join("streams.json");
    std::fs::write(&inputs, cfg.to_string()).expect("write inputs");
    let _agent = spawn_agent_with(
        bin,
        &inputs,
        "a",
        ip,
        http,
        peer,
        &["--https-port", &https.to_string()],
        Some("1"),
    );
    let (tls_port, ws_port) = (free_port("127.0.0.1"), free_port("127.0.0.1"));
    let _tls_nginx: Proc = stream_nginx(&dir.join("nginx-tls"), tls_port, tls_be);
    let _ws_nginx: Proc = upgrade_nginx(&dir.join("nginx-ws"), ws_port, ws_be);

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(client));
    let tls_targets = [
        ("direct", tls_be),
        ("lb-agent", SocketAddr::new(ip.parse().expect("ip"), https)),
        ("nginx", SocketAddr::from(([127, 0, 0, 1], tls_port))),
    ];
    // Wait until both proxies pass TLS through.
    let keep = Kind::TlsKeepAlive(connector.clone());
    for (name, addr) in &tls_targets {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(mut c) = keep.connect(*addr).await
                && keep.exchange(&mut c, *addr).await.is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} does not pass TLS through"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    compare(
        "TLS passthrough by SNI, requests on kept-alive TLS connections",
        "req",
        &keep,
        &tls_targets,
        conns,
        secs,
        slices,
    )
    .await;
    compare(
        "TLS passthrough by SNI, a new connection (TCP + TLS handshake + one request) each",
        "conn",
        &Kind::TlsNew(connector),
        &tls_targets,
        (conns / 4).max(1),
        secs,
        slices,
    )
    .await;
    let ws_targets = [
        ("direct", ws_be),
        ("lb-agent", SocketAddr::new(ip.parse().expect("ip"), http)),
        ("nginx", SocketAddr::from(([127, 0, 0, 1], ws_port))),
    ];
    for (name, addr) in &ws_targets {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Kind::WebSocket.connect(*addr).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "{name} does not tunnel WebSocket"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    compare(
        "WebSocket relay, 64-byte messages echoed over open tunnels",
        "msg",
        &Kind::WebSocket,
        &ws_targets,
        conns,
        secs,
        slices,
    )
    .await;
}

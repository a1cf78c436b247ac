//! The lean HTTP/1.x path on sockets: body framing both ways (chunked with trailers, to
//! EOF, HEAD, big bodies), keep-alive and `Connection: close` on both sides, HTTP/1.0,
//! pipelining, a pooled upstream connection dropped by the backend, malformed framing,
//! Upgrade forwarded on the lean path, and the hand-over to hyper for `Expect` and the h2c
//! preface.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb_agent::h1::chunked::Chunked;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOST: &str = "web.shop.global.test";

/// Fails the test instead of hanging when the proxy stops answering.
async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("answered in time")
}

/// A hyper backend echoing request bodies. `/stream` answers the body in 64 KiB frames
/// without a length (chunked); anything else answers it with a length, plus what it saw:
/// `x-seen-te`, `x-seen-trailer` (the `x-t` trailer), `x-seen-upgrade`, `x-seen-expect`.
async fn echo_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: http::Request<Incoming>| async move {
                    let seen = |k: &str| {
                        req.headers()
                            .get(k)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_string()
                    };
                    let (te, upgrade, expect) =
                        (seen("transfer-encoding"), seen("upgrade"), seen("expect"));
                    let stream = req.uri().path() == "/stream";
                    let collected = req.into_body().collect().await.unwrap();
                    let trailer = collected
                        .trailers()
                        .and_then(|t| t.get("x-t"))
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    let body = collected.to_bytes();
                    let resp = http::Response::builder()
                        .header("x-seen-te", te)
                        .header("x-seen-trailer", trailer)
                        .header("x-seen-upgrade", upgrade)
                        .header("x-seen-expect", expect);
                    let resp = if stream {
                        let frames: Vec<Result<Frame<Bytes>, Infallible>> = body
                            .chunks(64 * 1024)
                            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                            .collect();
                        resp.body(StreamBody::new(futures::stream::iter(frames)).boxed())
                    } else {
                        resp.body(Full::new(body).boxed())
                    };
                    Ok::<_, Infallible>(resp.unwrap())
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

/// A raw backend answering by path; counts the connections that carried requests.
/// `/chunked`: a chunked body with a trailer, written in pieces; `/early`: 413 without
/// reading the request body, which it never reads; `/eof`: a body without
/// length, then close; `/close`: `Connection: close`, then close; `/once`: answers the
/// first request of a connection and closes the connection, unanswered, at the next one
/// (an upstream whose idle timeout raced the request); anything else: the path as body.
async fn script_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let count = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let mut answered = 0;
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    if answered == 0 {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    answered += 1;
                    let mut words = head.split(' ');
                    let method = words.next().unwrap_or("").to_string();
                    let path = words.next().unwrap_or("").to_string();
                    let pieces: Vec<Vec<u8>> = match path.as_str() {
                        "/chunked" => [
                            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
                            "lo\r\n6\r\n world\r",
                            "\n0\r\nx-trailer: t\r\n",
                            "\r\n",
                        ]
                        .iter()
                        .map(|p| p.as_bytes().to_vec())
                        .collect(),
                        "/eof" => vec![b"HTTP/1.1 200 OK\r\n\r\nuntil close".to_vec()],
                        "/close" => vec![
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                                .to_vec(),
                        ],
                        "/once" if answered > 1 => return,
                        "/early" => vec![
                            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!"
                                .to_vec(),
                        ],
                        _ if method == "HEAD" => {
                            vec![b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n".to_vec()]
                        }
                        _ => vec![
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{path}",
                                path.len()
                            )
                            .into_bytes(),
                        ],
                    };
                    for p in pieces {
                        if s.write_all(&p).await.is_err() {
                            return;
                        }
                        let _ = s.flush().await;
                    }
                    if path == "/eof" || path == "/close" {
                        return;
                    }
                    if path == "/early" {
                        return std::future::pending().await;
                    }
                }
            });
        }
    });
    (addr, conns)
}

/// An agent on `ip` whose `shop/web` has the one local endpoint `backend`.
async fn agent(ip: &str, listen: u16, backend: SocketAddr) -> TestAgent {
    let a = TestAgent::start("a", ip).await;
    a.feed(
        config(
            "a",
            vec![a.cluster()],
            vec![service(
                "shop",
                "web",
                vec![port("http", "http", 80, listen)],
                &[("a", 1)],
            )],
        ),
        local(&[("shop", "web", "http", vec![backend])]),
    )
    .await;
    a
}

/// A client writing raw bytes and reading responses as they come.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

/// One response: its head (lower-cased) and its body bytes as framed on the wire.
#[derive(Debug)]
struct RawResponse {
    head: String,
    body: Vec<u8>,
}

impl RawResponse {
    fn status(&self) -> u16 {
        self.head[9..12].parse().unwrap()
    }

    fn has(&self, header_line: &str) -> bool {
        self.head.lines().any(|l| l == header_line)
    }
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Self {
        Self {
            s: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.unwrap();
    }

    /// Reads more; false at end of stream.
    async fn more(&mut self) -> bool {
        let mut chunk = vec![0u8; 65536];
        match self.s.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Reads one response; `to_head` when it answers a HEAD request.
    async fn response(&mut self, to_head: bool) -> RawResponse {
        within(async {
            let end = loop {
                if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end;
                }
                assert!(self.more().await, "closed before a response head");
            };
            let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
            self.buf.drain(..end + 4);
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map(|v| v.parse::<usize>().unwrap());
            let n = if to_head {
                0
            } else if head.lines().any(|l| l == "transfer-encoding: chunked") {
                let mut c = Chunked::default();
                let mut used = 0;
                loop {
                    used += c.feed(&self.buf[used..], |_| {}).unwrap();
                    if c.done() {
                        break used;
                    }
                    assert!(self.more().await, "closed inside a chunked body");
                }
            } else if let Some(n) = length {
                while self.buf.len() < n {
                    assert!(self.more().await, "closed inside a body");
                }
                n
            } else {
                while self.more().await {}
                self.buf.len()
            };
            let body = self.buf.drain(..n).collect();
            RawResponse { head, body }
        })
        .await
    }

    /// Whether the proxy closed the connection (rather than sending more).
    async fn closed(&mut self) -> bool {
        within(self.more()).await.then_some(()).is_none() && self.buf.is_empty()
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: {HOST}\r\n\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_request_and_response_bodies() {
    let echo = echo_backend().await;
    let a = agent("127.0.21.1", 32100, echo).await;
    let mut c = Raw::connect(a.agent.http_addr).await;
    // A chunked request with a trailer, split at awkward places.
    c.send(
        format!(
            "POST /echo HTTP/1.1\r\nhost: {HOST}\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel"
        )
        .as_bytes(),
    )
    .await;
    for piece in [
        "lo\r",
        "\n6;x=y\r\n world\r\n",
        "0\r\nx-t: tr",
        "ailer\r\n\r\n",
    ] {
        c.send(piece.as_bytes()).await;
    }
    let r = c.response(false).await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(r.body, b"hello world");
    assert!(r.has("x-seen-te: chunked"), "{r:?}");
    assert!(
        r.has("x-seen-trailer: trailer"),
        "trailers are relayed: {r:?}"
    );
    // The connection's framing stayed right: the next request on it is answered.
    c.send(b"POST /echo HTTP/1.1\r\nhost: web.shop\r\ncontent-length: 3\r\n\r\nabc")
        .await;
    assert_eq!(c.response(false).await.body, b"abc");

    // A chunked response with a trailer, relayed as it came.
    let (script, _) = script_backend().await;
    let b = agent("127.0.21.2", 32101, script).await;
    let mut c = Raw::connect(b.agent.http_addr).await;
    c.send(&get("/chunked")).await;
    let r = c.response(false).await;
    assert!(r.has("transfer-encoding: chunked"), "{r:?}");
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "5\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n"
    );
    c.send(&get("/next")).await;
    assert_eq!(c.response(false).await.body, b"/next");

    // An HTTP/1.0 client cannot read chunks: it gets the payload and a close.
    let mut c = Raw::connect(b.agent.http_addr).await;
    c.send(
        format!("GET /chunked HTTP/1.0\r\nhost: {HOST}\r\nconnection: keep-alive\r\n\r\n")
            .as_bytes(),
    )
    .await;
    let r = c.response(false).await;
    assert!(
        r.has("connection: close") && !r.head.contains("transfer-encoding"),
        "{r:?}"
    );
    assert_eq!(r.body, b"hello world");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_to_eof_head_and_connection_close() {
    let (script, conns) = script_backend().await;
    let a = agent("127.0.22.1", 32200, script).await;
    let addr = a.agent.http_addr;

    // A response without length is read to its end, then the client connection closes.
    let mut c = Raw::connect(addr).await;
    c.send(&get("/eof")).await;
    let r = c.response(false).await;
    assert_eq!(r.body, b"until close");
    assert!(r.has("connection: close"), "{r:?}");
    assert!(c.closed().await);

    // HEAD: the length of the GET, no body; the next answer follows at once.
    let mut c = Raw::connect(addr).await;
    c.send(format!("HEAD /x HTTP/1.1\r\nhost: {HOST}\r\n\r\n").as_bytes())
        .await;
    let r = c.response(true).await;
    assert!(r.has("content-length: 11"), "{r:?}");
    c.send(&get("/after-head")).await;
    assert_eq!(c.response(false).await.body, b"/after-head");

    // The upstream's close ends that upstream connection, not the client's.
    let before = conns.load(Ordering::SeqCst);
    c.send(&get("/close")).await;
    let r = c.response(false).await;
    assert_eq!(r.body, b"ok");
    assert!(!r.has("connection: close"), "{r:?}");
    c.send(&get("/again")).await;
    assert_eq!(c.response(false).await.body, b"/again");
    assert_eq!(
        conns.load(Ordering::SeqCst),
        before + 1,
        "a new upstream connection after the close"
    );

    // The client's close: answered, then closed.
    c.send(format!("GET /bye HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n\r\n").as_bytes())
        .await;
    let r = c.response(false).await;
    assert_eq!(r.body, b"/bye");
    assert!(r.has("connection: close"), "{r:?}");
    assert!(c.closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_clients_and_pipelining() {
    let (script, conns) = script_backend().await;
    let a = agent("127.0.23.1", 32300, script).await;
    let addr = a.agent.http_addr;

    let mut c = Raw::connect(addr).await;
    c.send(format!("GET /old HTTP/1.0\r\nhost: {HOST}\r\n\r\n").as_bytes())
        .await;
    assert_eq!(c.response(false).await.body, b"/old");
    assert!(c.closed().await, "HTTP/1.0 closes unless asked otherwise");

    let mut c = Raw::connect(addr).await;
    for path in ["/k1", "/k2"] {
        c.send(
            format!("GET {path} HTTP/1.0\r\nhost: {HOST}\r\nconnection: keep-alive\r\n\r\n")
                .as_bytes(),
        )
        .await;
        let r = c.response(false).await;
        assert_eq!(r.body, path.as_bytes());
        assert!(r.has("connection: keep-alive"), "{r:?}");
    }

    // Three requests in one write, a HEAD among them: three answers in order.
    let mut c = Raw::connect(addr).await;
    let mut batch = get("/p1");
    batch.extend_from_slice(format!("HEAD /p2 HTTP/1.1\r\nhost: {HOST}\r\n\r\n").as_bytes());
    batch.extend_from_slice(&get("/p3"));
    c.send(&batch).await;
    assert_eq!(c.response(false).await.body, b"/p1");
    assert!(c.response(true).await.has("content-length: 11"));
    assert_eq!(c.response(false).await.body, b"/p3");
    assert!(
        conns.load(Ordering::SeqCst) <= 2,
        "sequential requests reuse pooled upstream connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_bodies_both_ways() {
    let echo = echo_backend().await;
    let a = agent("127.0.24.1", 32400, echo).await;
    let s = TcpStream::connect(a.agent.http_addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
        .await
        .unwrap();
    tokio::spawn(conn);
    let big: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let big = Bytes::from(big);
    // With a length, answered with a length.
    let req = http::Request::post("/echo")
        .header("host", HOST)
        .body(Full::new(big.clone()).boxed())
        .unwrap();
    let resp = within(send.send_request(req)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = within(resp.into_body().collect()).await.unwrap().to_bytes();
    assert!(body == big, "length-delimited body came back whole");
    // Chunked (no length) both ways.
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = big
        .chunks(100_000)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let req = http::Request::post("/stream")
        .header("host", HOST)
        .body(StreamBody::new(futures::stream::iter(frames)).boxed())
        .unwrap();
    send.ready().await.unwrap();
    let resp = within(send.send_request(req)).await.unwrap();
    assert_eq!(resp.headers()["x-seen-te"], "chunked");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    let body = within(resp.into_body().collect()).await.unwrap().to_bytes();
    assert!(body == big, "chunked body came back whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connection_dropped_by_the_backend_is_retried() {
    let (script, conns) = script_backend().await;
    let a = agent("127.0.25.1", 32500, script).await;
    let mut c = Raw::connect(a.agent.http_addr).await;
    for i in 0..10 {
        c.send(&get("/once")).await;
        let r = c.response(false).await;
        assert_eq!(r.status(), 200, "request {i}: {r:?}");
        assert_eq!(r.body, b"/once");
    }
    // The first request opened a connection; each later one found its pooled connection
    // dropped and went again on a new one.
    assert_eq!(conns.load(Ordering::SeqCst), 10);
    let text = lb_agent::metrics::Metrics::encode_text(&a.metrics);
    assert!(
        text.contains(r#"meridian_lb_errors_total{namespace="shop",service="web"} 0"#),
        "{text}"
    );
    assert!(
        text.contains("meridian_lb_ejections_total 0"),
        "a dropped idle connection is not the backend's failure: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_is_relayed_and_the_rest_of_the_body_dropped() {
    let (script, _) = script_backend().await;
    let a = agent("127.0.28.1", 32800, script).await;
    let s = TcpStream::connect(a.agent.http_addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let size = 8 * 1024 * 1024;
    let writer = tokio::spawn(async move {
        let head = format!("PUT /early HTTP/1.1\r\nhost: {HOST}\r\ncontent-length: {size}\r\n\r\n");
        wr.write_all(head.as_bytes()).await?;
        let block = vec![b'x'; 64 * 1024];
        for _ in 0..size / block.len() {
            wr.write_all(&block).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut got = Vec::new();
    within(rd.read_to_end(&mut got)).await.unwrap();
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 413"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nbig!"), "{text}");
    // The proxy discarded the body for a while, then closed: the writer ends either way.
    let _ = within(writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_framing_is_refused() {
    let (script, conns) = script_backend().await;
    let a = agent("127.0.26.1", 32600, script).await;
    let mut c = Raw::connect(a.agent.http_addr).await;
    c.send(
        format!(
            "POST / HTTP/1.1\r\nhost: {HOST}\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    let r = c.response(false).await;
    assert_eq!(r.status(), 400, "{r:?}");
    assert!(c.closed().await);
    let mut c = Raw::connect(a.agent.http_addr).await;
    c.send(b"GET / HTTP/1.1\r\nbad header\r\n\r\n").await;
    assert_eq!(c.response(false).await.status(), 400);
    assert!(c.closed().await);
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "nothing reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_stays_lean_while_expect_and_h2c_preface_go_to_hyper() {
    let echo = echo_backend().await;
    let a = agent("127.0.27.1", 32700, echo).await;
    let addr = a.agent.http_addr;
    // An upgrade the upstream declines is an ordinary exchange, and the connection carries
    // on.
    let mut c = Raw::connect(addr).await;
    c.send(format!("GET /echo HTTP/1.1\r\nhost: {HOST}\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n").as_bytes())
        .await;
    let r = c.response(false).await;
    assert_eq!(r.status(), 200, "{r:?}");
    assert!(
        r.has("x-seen-upgrade: websocket"),
        "Upgrade is forwarded: {r:?}"
    );
    c.send(&get("/echo")).await;
    assert_eq!(c.response(false).await.status(), 200);

    let mut c = Raw::connect(addr).await;
    c.send(format!("PUT /echo HTTP/1.1\r\nhost: {HOST}\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n").as_bytes())
        .await;
    let interim = c.response(true).await;
    assert_eq!(interim.status(), 100, "{interim:?}");
    c.send(b"hi").await;
    let r = c.response(false).await;
    assert_eq!((r.status(), r.body.as_slice()), (200, &b"hi"[..]), "{r:?}");

    // Prior-knowledge h2c on the Host listener, to an HTTP/1.1 upstream.
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post(format!("http://{HOST}/echo"))
        .body(Full::new(Bytes::from_static(b"over h2")))
        .unwrap();
    let resp = within(send.send_request(req)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = within(resp.into_body().collect()).await.unwrap().to_bytes();
    assert_eq!(&body[..], b"over h2");
}

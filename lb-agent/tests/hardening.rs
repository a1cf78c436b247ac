//! What the edge refuses, on sockets: every request-smuggling class answered 400 and the
//! connection closed with nothing reaching a backend, the head limits (431, 414), slow
//! and idle clients, the connection cap, and the outlier-ejection cap.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOST: &str = "web.shop.global.test";

/// A backend that counts the request heads it received (health checks only connect) and
/// answers every request 200.
async fn counting_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let c = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let c = c.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut len = 0;
                loop {
                    let Ok(n) = s.read(&mut buf[len..]).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    len += n;
                    while let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
                        c.fetch_add(1, Ordering::SeqCst);
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                        buf.copy_within(end + 4..len, 0);
                        len -= end + 4;
                    }
                }
            });
        }
    });
    (addr, conns)
}

async fn agent_with(
    ip: &str,
    listen: u16,
    backends: Vec<SocketAddr>,
    tune: impl FnOnce(&mut lb_agent::Settings),
) -> TestAgent {
    let a = TestAgent::start_with("a", ip, tune).await;
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
        local(&[("shop", "web", "http", backends)]),
    )
    .await;
    a
}

/// Sends `bytes` and reads until the agent closes (or 10 s): what came back, and whether
/// the connection was closed by the agent.
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .unwrap_or(false);
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_smuggling_class_is_answered_400_and_closed() {
    let (be, conns) = counting_backend().await;
    let a = agent_with("127.0.46.1", 33700, vec![be], |_| {}).await;
    let h = format!("host: {HOST}\r\n");
    let cases = [
        (
            "CL.TE",
            format!(
                "POST / HTTP/1.1\r\n{h}content-length: 6\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nG"
            ),
        ),
        (
            "TE.CL",
            format!(
                "POST / HTTP/1.1\r\n{h}transfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n"
            ),
        ),
        (
            "TE.TE obfuscated",
            format!(
                "POST / HTTP/1.1\r\n{h}transfer-encoding: chunked\r\ntransfer-encoding: x\r\n\r\n0\r\n\r\n"
            ),
        ),
        (
            "TE list",
            format!("POST / HTTP/1.1\r\n{h}transfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "TE on HTTP/1.0",
            format!("POST / HTTP/1.0\r\n{h}transfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "duplicated Content-Length",
            format!("POST / HTTP/1.1\r\n{h}content-length: 3\r\ncontent-length: 3\r\n\r\nabc"),
        ),
        (
            "conflicting Content-Length",
            format!("POST / HTTP/1.1\r\n{h}content-length: 3\r\ncontent-length: 30\r\n\r\nabc"),
        ),
        (
            "Content-Length list",
            format!("POST / HTTP/1.1\r\n{h}content-length: 3, 3\r\n\r\nabc"),
        ),
        (
            "signed Content-Length",
            format!("POST / HTTP/1.1\r\n{h}content-length: +3\r\n\r\nabc"),
        ),
        (
            "obs-fold",
            format!("GET / HTTP/1.1\r\n{h}x-a: 1\r\n folded: yes\r\n\r\n"),
        ),
        (
            "folded Transfer-Encoding",
            format!("POST / HTTP/1.1\r\n{h}transfer-encoding:\r\n chunked\r\n\r\n0\r\n\r\n"),
        ),
        (
            "space before colon",
            format!("POST / HTTP/1.1\r\n{h}transfer-encoding : chunked\r\n\r\n0\r\n\r\n"),
        ),
        ("bare LF in head", format!("GET / HTTP/1.1\n{h}\r\n")),
        (
            "bare LF header end",
            format!("GET / HTTP/1.1\r\nhost: {HOST}\nx: y\r\n\r\n"),
        ),
        (
            "bare LF in chunk size",
            format!("POST / HTTP/1.1\r\n{h}transfer-encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n"),
        ),
        (
            "bad chunk size",
            format!(
                "POST / HTTP/1.1\r\n{h}transfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
            ),
        ),
        ("two Hosts", format!("GET / HTTP/1.1\r\n{h}{h}\r\n")),
        (
            "NUL in a value",
            format!("GET / HTTP/1.1\r\n{h}x: a\0b\r\n\r\n"),
        ),
    ];
    for (class, raw) in &cases {
        let (out, closed) = exchange(a.agent.http_addr, raw.as_bytes()).await;
        assert!(out.starts_with("HTTP/1.1 400 "), "{class}: {out:?}");
        assert_eq!(
            out.matches("HTTP/1.1").count(),
            1,
            "{class}: one answer only: {out:?}"
        );
        assert!(closed, "{class}: the connection is closed");
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        0,
        "nothing reached the backend"
    );
    let refused = lb_agent::metrics::Metrics::encode_text(&a.metrics);
    assert!(
        refused.contains("meridian_lb_http_refused_total 18"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_over_the_limits_are_refused() {
    let (be, conns) = counting_backend().await;
    let a = agent_with("127.0.47.1", 33800, vec![be], |s| {
        s.limits.max_head = 4096;
        s.limits.max_headers = 10;
        s.limits.max_request_line = 256;
    })
    .await;
    let line = format!("GET /{} HTTP/1.1\r\nhost: {HOST}\r\n\r\n", "a".repeat(300));
    let (out, closed) = exchange(a.agent.http_addr, line.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 414 "), "{out}");
    assert!(closed);
    let many: String = (0..11).map(|i| format!("x-{i}: v\r\n")).collect();
    let (out, closed) = exchange(
        a.agent.http_addr,
        format!("GET / HTTP/1.1\r\nhost: {HOST}\r\n{many}\r\n").as_bytes(),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    assert!(closed);
    let big = format!(
        "GET / HTTP/1.1\r\nhost: {HOST}\r\nx: {}\r\n\r\n",
        "b".repeat(5000)
    );
    let (out, _) = exchange(a.agent.http_addr, big.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    // Within the limits all is well.
    let ok = format!("GET / HTTP/1.1\r\nhost: {HOST}\r\nconnection: close\r\n\r\n");
    let (out, _) = exchange(a.agent.http_addr, ok.as_bytes()).await;
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    assert_eq!(conns.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_idle_clients_and_too_many_connections_are_closed() {
    let (be, _) = counting_backend().await;
    let a = agent_with("127.0.48.1", 33900, vec![be], |s| {
        s.limits.head_timeout = Duration::from_secs(1);
        s.limits.idle_timeout = Duration::from_millis(300);
        s.limits.max_connections = 3;
    })
    .await;
    // Half a head, then nothing: 408 and closed.
    let started = std::time::Instant::now();
    let (out, closed) = exchange(a.agent.http_addr, b"GET / HTTP/1.1\r\nhost: we").await;
    assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
    assert!(closed && started.elapsed() < Duration::from_secs(5));
    // A keep-alive connection idle after its answer is closed without a word.
    let ok = format!("GET / HTTP/1.1\r\nhost: {HOST}\r\n\r\n");
    let (out, closed) = exchange(a.agent.http_addr, ok.as_bytes()).await;
    assert!(
        out.starts_with("HTTP/1.1 200 ") && out.ends_with("ok"),
        "{out}"
    );
    assert!(closed);
    // Three open connections hold every slot: the fourth is closed at once.
    let slots = a.agent.connections.clone();
    wait_for("the closed connections' slots back", 10, || {
        let slots = slots.clone();
        async move { slots.available_permits() == 3 }
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(a.agent.http_addr).await.unwrap();
        // Keep each one busy (a head under way) so the idle timeout does not free it yet.
        s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    wait_for("three connections held", 10, || {
        let slots = slots.clone();
        async move { slots.available_permits() == 0 }
    })
    .await;
    let (out, closed) = exchange(a.agent.http_addr, ok.as_bytes()).await;
    assert!(out.is_empty() && closed, "{out}");
    let text = lb_agent::metrics::Metrics::encode_text(&a.metrics);
    assert!(
        text.contains("meridian_lb_connections_refused_total 1"),
        "{text}"
    );
    // Once they are gone (408 after the head timeout), connections are taken again.
    drop(held);
    wait_for("a slot free again", 10, || {
        let addr = a.agent.http_addr;
        let ok = ok.clone();
        async move {
            exchange(addr, ok.as_bytes())
                .await
                .0
                .starts_with("HTTP/1.1 200")
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outlier_ejection_never_takes_out_more_than_the_cap() {
    let mut backends = Vec::new();
    for i in 0..4 {
        backends.push(HttpBackend::start("127.0.0.1", &format!("a-{i}")).await);
    }
    for b in &backends {
        b.fail.store(true, Ordering::SeqCst);
    }
    let a = agent_with(
        "127.0.49.1",
        34000,
        backends.iter().map(|b| b.addr).collect(),
        |s| {
            s.outlier.consecutive = 2;
            s.outlier.base_ejection = Duration::from_secs(60);
            s.outlier.max_ejection_percent = 50;
        },
    )
    .await;
    // Every backend answers 500: each would be ejected, but at most half of them are,
    // and the rest keep serving (their answers reach the client).
    for _ in 0..60 {
        let r = get(a.agent.http_addr, HOST).await.unwrap();
        assert_eq!(r.status, 500, "{r:?}");
    }
    let table = a.agent.table.borrow().clone();
    let ejected = table.listen[&34000]
        .local
        .iter()
        .filter(|b| b.is_ejected())
        .count();
    assert_eq!(ejected, 2);
    let text = lb_agent::metrics::Metrics::encode_text(&a.metrics);
    assert!(text.contains("meridian_lb_ejections_total 2"), "{text}");
}

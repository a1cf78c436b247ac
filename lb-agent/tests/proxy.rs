//! End-to-end behaviour of agents on loopback: Host routing, local-first balancing, remote
//! fallback through a second agent, TCP through listen ports and the peer protocol, loop
//! prevention, failover without failed requests, draining and outlier ejection.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;

const HOST: &str = "web.shop.global.test";

fn http_port(listen: u16) -> Vec<fed_api::lbconfig::LbPort> {
    vec![port("http", "http", 80, listen)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_routing_to_local_backends() {
    let b1 = HttpBackend::start("127.0.0.1", "a-1").await;
    let b2 = HttpBackend::start("127.0.0.1", "a-2").await;
    let a = TestAgent::start("a", "127.0.11.1").await;
    a.feed(
        config(
            "a",
            vec![a.cluster()],
            vec![
                service("shop", "web", http_port(31100), &[("a", 2)]),
                service("shop", "empty", http_port(31101), &[]),
            ],
        ),
        local(&[("shop", "web", "http", vec![b1.addr, b2.addr])]),
    )
    .await;
    let addr = a.agent.http_addr;
    for host in [
        HOST,
        "web.shop.global.test:8080",
        "Web.Shop",
        "web.shop.svc",
        "web.shop.svc.cluster.local",
    ] {
        let r = get(addr, host).await.unwrap();
        assert_eq!(r.status, 200, "{host}: {r:?}");
        assert!(r.body.starts_with("a-"), "{host}: {r:?}");
        assert_eq!(
            r.seen_host, host,
            "the client's Host reaches local endpoints"
        );
    }
    assert!(
        b1.hits() > 0 && b2.hits() > 0,
        "both endpoints get requests"
    );
    assert_eq!(
        get(addr, "nope.shop.global.test").await.unwrap().status,
        404
    );
    assert_eq!(get(addr, "empty.shop").await.unwrap().status, 503);
    // The listen port routes without a Host.
    let via_port = std::net::SocketAddr::new(addr.ip(), 31100);
    let r = get(via_port, "anything").await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let text = lb_agent::metrics::Metrics::encode_text(&a.metrics);
    assert!(
        text.contains(r#"meridian_lb_requests_total{namespace="shop",service="web"} 6"#),
        "{text}"
    );
    assert!(
        text.contains(r#"meridian_lb_errors_total{namespace="shop",service="empty"} 1"#),
        "{text}"
    );
}

/// Two clusters: `a` on 127.0.12.1 and `b` on 127.0.12.2, one web endpoint each.
async fn two_clusters(net: u8, listen: u16) -> (TestAgent, TestAgent, HttpBackend, HttpBackend) {
    let ba = HttpBackend::start("127.0.0.1", "a-1").await;
    let bb = HttpBackend::start("127.0.0.1", "b-1").await;
    let a = TestAgent::start("a", &format!("127.0.{net}.1")).await;
    let b = TestAgent::start("b", &format!("127.0.{net}.2")).await;
    let svc = service("shop", "web", http_port(listen), &[("a", 1), ("b", 1)]);
    let clusters = vec![a.cluster(), b.cluster()];
    a.feed(
        config("a", clusters.clone(), vec![svc.clone()]),
        local(&[("shop", "web", "http", vec![ba.addr])]),
    )
    .await;
    b.feed(
        config("b", clusters, vec![svc]),
        local(&[("shop", "web", "http", vec![bb.addr])]),
    )
    .await;
    (a, b, ba, bb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_first_then_remote_through_the_other_agent() {
    let (a, b, ba, bb) = two_clusters(12, 31200).await;
    // Both serve according to a's view once health checks ran.
    let view = a.agent.serving.clone();
    wait_for("a sees b serving", 10, || {
        let v = view.clone();
        async move { v.serves("b", "shop", "web") && v.serves("a", "shop", "web") }
    })
    .await;
    for _ in 0..20 {
        let r = get(a.agent.http_addr, HOST).await.unwrap();
        assert_eq!(r.body, "a-1");
    }
    assert_eq!(bb.hits(), 0, "local endpoints are preferred");
    let mut changes = view.subscribe();
    changes.borrow_and_update();
    ba.kill();
    // The very next request already succeeds: the connect failure is retried on b.
    let r = get(a.agent.http_addr, HOST).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, "b-1");
    assert_eq!(r.seen_host, HOST, "remote agents get the global name");
    assert_eq!(r.seen_forwarded_by, "a");
    // Active checks take a's dead endpoint out of the serving view, with a notification.
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        changes.wait_for(|s| !s.serves("a", "shop", "web")),
    )
    .await
    .expect("serving view updated")
    .unwrap();
    assert!(view.serves("b", "shop", "web"));
    // A dead remote agent leaves the view too.
    drop(b);
    wait_for("b out of a's view", 10, || {
        let v = view.clone();
        async move { !v.serves("b", "shop", "web") }
    })
    .await;
    assert_eq!(get(a.agent.http_addr, HOST).await.unwrap().status, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_requests_are_not_forwarded_again() {
    let ba = HttpBackend::start("127.0.0.1", "a-1").await;
    let a = TestAgent::start("a", "127.0.13.1").await;
    let b = TestAgent::start("b", "127.0.13.2").await;
    let svc = service("shop", "web", http_port(31300), &[("a", 1)]);
    let clusters = vec![a.cluster(), b.cluster()];
    a.feed(
        config("a", clusters.clone(), vec![svc.clone()]),
        local(&[("shop", "web", "http", vec![ba.addr])]),
    )
    .await;
    b.feed(config("b", clusters, vec![svc]), local(&[])).await;
    // b has no endpoints: a plain request goes to a.
    let r = get(b.agent.http_addr, HOST).await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "a-1"));
    let before = ba.hits();
    // One that another agent already forwarded stays local, and b has nothing local.
    let r = request(
        b.agent.http_addr,
        "GET",
        HOST,
        "/",
        &[("x-meridian-forwarded-by", "c")],
    )
    .await
    .unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(ba.hits(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_through_listen_port_locally_and_through_the_peer() {
    let echo_b = tcp_backend("127.0.0.1", "b-db").await;
    let echo_a = tcp_backend("127.0.0.1", "a-db").await;
    let a = TestAgent::start("a", "127.0.14.1").await;
    let b = TestAgent::start("b", "127.0.14.2").await;
    let listen = free_port();
    let svc = service(
        "shop",
        "db",
        vec![port("pg", "tcp", 5432, listen)],
        &[("b", 1)],
    );
    let clusters = vec![a.cluster(), b.cluster()];
    a.feed(config("a", clusters.clone(), vec![svc.clone()]), local(&[]))
        .await;
    b.feed(
        config("b", clusters.clone(), vec![svc.clone()]),
        local(&[("shop", "db", "pg", vec![echo_b])]),
    )
    .await;
    let a_port = std::net::SocketAddr::new(a.agent.http_addr.ip(), listen);
    // b must have told a (HEALTH) that it has endpoints before a can send streams to it.
    let view = a.agent.serving.clone();
    wait_for("a sees b serving", 10, || {
        let v = view.clone();
        async move { v.serves("b", "shop", "db") }
    })
    .await;
    // a has no local endpoint: the stream goes through b's peer port.
    let out = tcp_roundtrip(a_port, "hello").await;
    assert_eq!(out, "b-db\nhello");
    // Straight to b's peer port with the preamble.
    let out = tcp_roundtrip(b.agent.peer_addr, "MERIDIAN/1 TCP shop db 5432 a\nping").await;
    assert_eq!(out, "b-db\nping");
    let health = tcp_roundtrip(b.agent.peer_addr, "MERIDIAN/1 HEALTH a\n").await;
    assert_eq!(health, "OK shop/db=1\n");
    // With a local endpoint, a keeps the stream local.
    a.feed(
        config("a", clusters, vec![svc]),
        local(&[("shop", "db", "pg", vec![echo_a])]),
    )
    .await;
    assert_eq!(tcp_roundtrip(a_port, "x").await, "a-db\nx");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_without_failed_idempotent_requests() {
    let a1 = HttpBackend::start("127.0.0.1", "a-1").await;
    let a2 = HttpBackend::start("127.0.0.1", "a-2").await;
    let bb = HttpBackend::start("127.0.0.1", "b-1").await;
    // This test is about retries, not active checks: under heavy load on a shared machine a
    // slow HEALTH answer must not take b out.
    let lenient = |s: &mut lb_agent::Settings| {
        s.health.timeout = std::time::Duration::from_secs(2);
        s.health.unhealthy_threshold = 10;
    };
    let a = TestAgent::start_with("a", "127.0.15.1", lenient).await;
    let b = TestAgent::start_with("b", "127.0.15.2", lenient).await;
    let svc = service("shop", "web", http_port(31500), &[("a", 2), ("b", 1)]);
    let clusters = vec![a.cluster(), b.cluster()];
    a.feed(
        config("a", clusters.clone(), vec![svc.clone()]),
        local(&[("shop", "web", "http", vec![a1.addr, a2.addr])]),
    )
    .await;
    b.feed(
        config("b", clusters, vec![svc]),
        local(&[("shop", "web", "http", vec![bb.addr])]),
    )
    .await;
    // b must have told a (HEALTH) that it has endpoints before a can fail over to it.
    let view = a.agent.serving.clone();
    wait_for("a sees b serving", 10, || {
        let v = view.clone();
        async move { v.serves("b", "shop", "web") }
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let from_b = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..4 {
        let (stop, ok, failed, from_b) = (stop.clone(), ok.clone(), failed.clone(), from_b.clone());
        let addr = a.agent.http_addr;
        let method = ["GET", "HEAD", "PUT", "DELETE"][i];
        let table = a.agent.table.clone();
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match request(addr, method, HOST, "/", &[]).await {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::SeqCst);
                        if r.body == "b-1" || (method == "HEAD" && r.seen_forwarded_by == "a") {
                            from_b.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    other => {
                        if failed.fetch_add(1, Ordering::SeqCst) < 3 {
                            let t = table.borrow().clone();
                            let remote = &t.listen[&31500].remote[0];
                            eprintln!(
                                "{method} failed: {other:?}; remote {:?} ejected {} weight {:?}",
                                remote.backend,
                                remote.backend.is_ejected(),
                                remote.weight
                            );
                        }
                    }
                }
            }
        }));
    }
    wait_for("traffic flowing", 10, || {
        let ok = ok.clone();
        async move { ok.load(Ordering::SeqCst) > 50 }
    })
    .await;
    assert_eq!(from_b.load(Ordering::SeqCst), 0);
    a1.kill();
    a2.kill();
    wait_for("remote serving for a while", 20, || {
        let f = from_b.clone();
        async move { f.load(Ordering::SeqCst) > 200 }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "failed requests during failover"
    );
    assert!(bb.hits() > 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_endpoint_drains() {
    let slow = HttpBackend::start("127.0.0.1", "a-old").await;
    let fresh = HttpBackend::start("127.0.0.1", "a-new").await;
    let a = TestAgent::start("a", "127.0.16.1").await;
    let svc = service("shop", "web", http_port(31600), &[("a", 1)]);
    let cfg = config("a", vec![a.cluster()], vec![svc]);
    a.feed(
        cfg.clone(),
        local(&[("shop", "web", "http", vec![slow.addr])]),
    )
    .await;
    let addr = a.agent.http_addr;
    let in_flight = tokio::spawn(async move { request(addr, "GET", HOST, "/slow", &[]).await });
    wait_for("slow request reached the backend", 10, || {
        let h = slow.hits.clone();
        async move { h.load(Ordering::SeqCst) == 1 }
    })
    .await;
    // The endpoint leaves; the new one takes every new request.
    a.feed(cfg, local(&[("shop", "web", "http", vec![fresh.addr])]))
        .await;
    for _ in 0..5 {
        assert_eq!(get(addr, HOST).await.unwrap().body, "a-new");
    }
    assert_eq!(slow.hits(), 1);
    // The in-flight request still completes.
    slow.release.notify_one();
    let r = in_flight.await.unwrap().unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "a-old"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_5xx_eject_a_backend() {
    let bad = HttpBackend::start("127.0.0.1", "bad").await;
    let good = HttpBackend::start("127.0.0.1", "good").await;
    bad.fail.store(true, Ordering::SeqCst);
    let a = TestAgent::start_with("a", "127.0.17.1", |s| {
        s.outlier.consecutive = 3;
        s.outlier.base_ejection = std::time::Duration::from_secs(600);
    })
    .await;
    let svc = service("shop", "web", http_port(31700), &[("a", 2)]);
    a.feed(
        config("a", vec![a.cluster()], vec![svc]),
        local(&[("shop", "web", "http", vec![bad.addr, good.addr])]),
    )
    .await;
    let mut errors = 0;
    for _ in 0..40 {
        if get(a.agent.http_addr, HOST).await.unwrap().status == 500 {
            errors += 1;
        }
    }
    assert_eq!(
        errors, 3,
        "the bad backend is ejected after 3 errors in a row"
    );
    assert_eq!(bad.hits(), 3);
    let text = lb_agent::metrics::Metrics::encode_text(&a.metrics);
    assert!(text.contains("meridian_lb_ejections_total 1"), "{text}");
}

/// A raw HTTP/1.1 backend answering `ok` to every request head; counts the connections
/// that carried requests (health checks only connect) and, while `close_after` is set,
/// closes each connection after answering (as an upstream's idle timeout would, without
/// announcing it), counting those closes in the returned watch.
async fn counting_backend(
    close_after: Arc<AtomicBool>,
) -> (
    std::net::SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::watch::Receiver<usize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let (closes, closed) = tokio::sync::watch::channel(0usize);
    let closes = Arc::new(closes);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (close_after, count, closes) = (close_after.clone(), count.clone(), closes.clone());
            tokio::spawn(async move {
                let mut first = true;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        if std::mem::take(&mut first) {
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(answer).await.is_err() {
                            return;
                        }
                        if close_after.load(Ordering::SeqCst) {
                            drop(s);
                            closes.send_modify(|n| *n += 1);
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted, closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_and_closed_ones_skipped() {
    let close_after = Arc::new(AtomicBool::new(false));
    let (backend, accepted, mut closed) = counting_backend(close_after.clone()).await;
    let a = TestAgent::start("a", "127.0.18.1").await;
    a.feed(
        config(
            "a",
            vec![a.cluster()],
            vec![service("shop", "web", http_port(31800), &[("a", 1)])],
        ),
        local(&[("shop", "web", "http", vec![backend])]),
    )
    .await;
    let stream = tokio::net::TcpStream::connect(a.agent.http_addr)
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut call = async |method: &str| {
        let req = http::Request::builder()
            .method(method)
            .uri("/")
            .header("host", HOST)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        // Our side of the connection turns idle in its own task after the last answer.
        send.ready().await.unwrap();
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    for _ in 0..5 {
        assert_eq!(call("GET").await, (200, "ok".to_string()));
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "sequential requests share one pooled upstream connection"
    );
    // The upstream now closes every connection after answering: a POST (never retried once
    // sent) must not be written to a connection it already closed.
    close_after.store(true, Ordering::SeqCst);
    for i in 1..=4 {
        assert_eq!(call("POST").await, (200, "ok".to_string()));
        // The next POST is sent only once the upstream has really closed this one's
        // connection: that close is what the agent must notice.
        closed.wait_for(|n| *n >= i).await.unwrap();
    }
    // The first POST still went on the open connection; each later one needed a new one.
    assert_eq!(accepted.load(Ordering::SeqCst), 4);
}

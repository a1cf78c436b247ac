//! Every protocol through agents on loopback: TLS routed by SNI and passed through (local
//! first, remote agents over the peer port, failover when a cluster loses its endpoints),
//! WebSocket tunnels (also across clusters, surviving the endpoint's draining), UDP flows,
//! an HTTP client that never fails while the only remote cluster it used loses its
//! backends, traffic policies in proxy choices, a dedicated address, and TLS terminated
//! with a Service's own certificate.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use fed_api::lbconfig::{LbService, PolicyKind, TrafficPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NAME: &str = "web.shop.global.test";

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("done in time")
}

/// Agents for clusters `names` on `127.0.<net>.<i+1>`, all with the same Services; the
/// local endpoints of each are given per cluster.
async fn fleet(
    net: u8,
    names: &[&str],
    services: Vec<LbService>,
    locals: Vec<LocalEndpoints>,
) -> Vec<TestAgent> {
    let mut agents = Vec::new();
    for (i, n) in names.iter().enumerate() {
        agents.push(TestAgent::start(n, &format!("127.0.{net}.{}", i + 1)).await);
    }
    let clusters: Vec<_> = agents.iter().map(TestAgent::cluster).collect();
    for (a, l) in agents.iter().zip(locals) {
        a.feed(config(&a.name, clusters.clone(), services.clone()), l)
            .await;
    }
    agents
}

/// Waits until `agent` counts `cluster` as serving `ns/svc` (its HEALTH answers arrived).
async fn sees(agent: &TestAgent, cluster: &str, svc: &str, yes: bool) {
    let view = agent.agent.serving.clone();
    let (cluster, svc) = (cluster.to_string(), svc.to_string());
    wait_for(
        &format!("{} sees {cluster} serving={yes}", agent.name),
        15,
        || {
            let v = view.clone();
            let (c, s) = (cluster.clone(), svc.clone());
            async move { v.serves(&c, "shop", &s) == yes }
        },
    )
    .await;
}

use lb_agent::inputs::LocalEndpoints;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_routed_by_sni_and_passed_through_local_first_then_remote() {
    let names = [NAME, "web.shop", "web.shop.svc.cluster.local"];
    let (a_tls, a_cert, _a_stop) = tls_backend("a-tls", &names).await;
    let (b_tls, b_cert, b_stop) = tls_backend("b-tls", &names).await;
    let svc = service(
        "shop",
        "web",
        vec![port("https", "tls", 443, 33100)],
        &[("a", 1), ("b", 1)],
    );
    let agents = fleet(
        40,
        &["a", "b", "c"],
        vec![svc],
        vec![
            local(&[("shop", "web", "https", vec![a_tls])]),
            local(&[("shop", "web", "https", vec![b_tls])]),
            local(&[]),
        ],
    )
    .await;
    let (a, b, c) = (&agents[0], &agents[1], &agents[2]);
    // The client checks the backends' own certificates: nothing terminated TLS on the way.
    let client = tls_connector(&[a_cert, b_cert]);
    let (hello, echo) = within(tls_roundtrip(&client, a.agent.https_addr, NAME, "ping"))
        .await
        .unwrap();
    assert_eq!((hello.as_str(), echo.as_str()), ("a-tls", "ping"));
    // Any of the names, any case; and the listen port, which needs no SNI routing.
    for name in ["WEB.shop", "web.shop.svc.cluster.local"] {
        let (hello, _) = within(tls_roundtrip(&client, b.agent.https_addr, name, "x"))
            .await
            .unwrap();
        assert_eq!(hello, "b-tls", "{name}");
    }
    let listen = SocketAddr::new(a.agent.http_addr.ip(), 33100);
    assert_eq!(
        within(tls_roundtrip(&client, listen, NAME, "y"))
            .await
            .unwrap()
            .0,
        "a-tls"
    );
    // c has no endpoint: its streams go through the peer port of a or b.
    sees(c, "a", "web", true).await;
    sees(c, "b", "web", true).await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let (hello, echo) = within(tls_roundtrip(&client, c.agent.https_addr, NAME, "z"))
            .await
            .unwrap();
        assert_eq!(echo, "z");
        seen.insert(hello);
    }
    assert_eq!(seen, ["a-tls".to_string(), "b-tls".to_string()].into());
    // An unknown name gets an unrecognized_name alert.
    let err = within(tls_roundtrip(
        &client,
        c.agent.https_addr,
        "nope.shop.global.test",
        "x",
    ))
    .await
    .unwrap_err();
    assert!(
        err.to_lowercase().contains("unrecognised") || err.to_lowercase().contains("unrecognized"),
        "{err}"
    );
    // b's endpoint dies: b's agent answers ERR at once, and c's next streams all go to a.
    b_stop.send_replace(true);
    for i in 0..20 {
        let (hello, _) = within(tls_roundtrip(&client, c.agent.https_addr, NAME, "w"))
            .await
            .unwrap_or_else(|e| panic!("stream {i} after b's endpoint died: {e}"));
        assert_eq!(hello, "a-tls");
    }
}

/// A backend that switches every request to a byte echo after `101`, saying its name
/// first; plain requests get `200 <name>`.
async fn ws_backend(name: &str) -> (SocketAddr, tokio::sync::watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let name = name.to_string();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut stopped = stop_rx.clone();
        loop {
            let conn = tokio::select! {
                c = listener.accept() => c,
                _ = stopped.wait_for(|s| *s) => return,
            };
            let Ok((mut s, _)) = conn else { continue };
            let name = name.clone();
            let mut stopped = stop_rx.clone();
            tokio::spawn(async move {
                let serve = async {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    if !text.contains("upgrade: websocket") {
                        let body = format!("{name}\n");
                        let _ = s
                            .write_all(
                                format!(
                                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                                    body.len()
                                )
                                .as_bytes(),
                            )
                            .await;
                        return;
                    }
                    let _ = s
                        .write_all(
                            format!(
                                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n{name}\n"
                            )
                            .as_bytes(),
                        )
                        .await;
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                };
                tokio::select! {
                    _ = serve => {}
                    _ = stopped.wait_for(|s| *s) => {}
                }
            });
        }
    });
    (addr, stop)
}

/// Sends a WebSocket upgrade for `host` to `addr`; returns the stream after the `101` and
/// the backend's greeting line.
async fn upgrade(addr: SocketAddr, host: &str) -> Result<(TcpStream, String), String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    s.write_all(
        format!(
            "GET /chat HTTP/1.1\r\nhost: {host}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    // The head, then the greeting line the backend sends first.
    let mut head_end = None;
    while head_end.is_none_or(|e| !(got.len() > e && got.ends_with(b"\n"))) {
        let n = s.read(&mut byte).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("closed: {}", String::from_utf8_lossy(&got)));
        }
        got.push(byte[0]);
        if head_end.is_none() && got.ends_with(b"\r\n\r\n") {
            head_end = Some(got.len());
            if !got.starts_with(b"HTTP/1.1 101") {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    if !text.starts_with("HTTP/1.1 101") {
        return Err(text);
    }
    let greeting = text
        .rsplit("\r\n\r\n")
        .next()
        .unwrap_or("")
        .trim_end()
        .to_string();
    Ok((s, greeting))
}

async fn echo(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).await.unwrap();
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_tunnels_locally_and_across_clusters_and_survive_draining() {
    let (a_ws, _a_stop) = ws_backend("a-ws").await;
    let (a_ws2, _a2_stop) = ws_backend("a-ws2").await;
    let svc = service(
        "shop",
        "web",
        vec![port("http", "http", 80, 33200)],
        &[("a", 1)],
    );
    let agents = fleet(
        41,
        &["a", "b"],
        vec![svc.clone()],
        vec![local(&[("shop", "web", "http", vec![a_ws])]), local(&[])],
    )
    .await;
    let (a, b) = (&agents[0], &agents[1]);
    let (mut s, hello) = within(upgrade(a.agent.http_addr, NAME)).await.unwrap();
    assert_eq!(hello, "a-ws");
    assert_eq!(within(echo(&mut s, b"frame-1")).await, b"frame-1");
    // Through b, which has no endpoint: b's agent tunnels to a's, which tunnels to the pod.
    sees(b, "a", "web", true).await;
    let (mut t, hello) = within(upgrade(b.agent.http_addr, NAME)).await.unwrap();
    assert_eq!(hello, "a-ws");
    assert_eq!(
        within(echo(&mut t, &[0x81, 0x02, b'h', b'i'])).await,
        [0x81, 0x02, b'h', b'i']
    );
    // The endpoint leaves a's configuration: open tunnels keep going (draining), new ones
    // go to the new endpoint.
    let clusters = vec![a.cluster(), b.cluster()];
    a.feed(
        config("a", clusters, vec![svc]),
        local(&[("shop", "web", "http", vec![a_ws2])]),
    )
    .await;
    let (_u, hello) = within(upgrade(b.agent.http_addr, NAME)).await.unwrap();
    assert_eq!(hello, "a-ws2");
    for i in 0..5 {
        let msg = format!("still-{i}");
        assert_eq!(within(echo(&mut s, msg.as_bytes())).await, msg.as_bytes());
        assert_eq!(within(echo(&mut t, msg.as_bytes())).await, msg.as_bytes());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_flows_local_first_then_remote_and_fail_over() {
    let (a_udp, _a_stop) = udp_backend("a").await;
    let (b_udp, b_stop) = udp_backend("b").await;
    let svc = service(
        "shop",
        "dns",
        vec![port("dns", "udp", 53, 33300)],
        &[("a", 1), ("b", 1)],
    );
    let agents = fleet(
        42,
        &["a", "b", "c"],
        vec![svc],
        vec![
            local(&[("shop", "dns", "dns", vec![a_udp])]),
            local(&[("shop", "dns", "dns", vec![b_udp])]),
            local(&[]),
        ],
    )
    .await;
    let (a, c) = (&agents[0], &agents[2]);
    let wait = Duration::from_millis(500);
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let via_a = SocketAddr::new(a.agent.http_addr.ip(), 33300);
    // Local first, and a flow stays on its backend.
    for i in 0..5 {
        let msg = format!("q{i}");
        assert_eq!(
            udp_ask(&client, via_a, &msg, wait).await.as_deref(),
            Some(format!("a:{msg}").as_str())
        );
    }
    // c has no endpoint: datagrams go to a remote agent's peer port, answers come back.
    sees(c, "a", "dns", true).await;
    sees(c, "b", "dns", true).await;
    let via_c = SocketAddr::new(c.agent.http_addr.ip(), 33300);
    let mut from = std::collections::BTreeSet::new();
    for _ in 0..8 {
        let fresh = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let got = udp_ask(&fresh, via_c, "hi", wait).await.expect("an answer");
        from.insert(got);
    }
    assert_eq!(from, ["a:hi".to_string(), "b:hi".to_string()].into());
    // b's endpoint stops: every client that retries (as resolvers do) is answered by a
    // within 3 s.
    b_stop.send_replace(true);
    let mut flows = Vec::new();
    for _ in 0..4 {
        flows.push(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    let started = tokio::time::Instant::now();
    for (i, f) in flows.iter().enumerate() {
        let mut answer = None;
        while answer.is_none() && started.elapsed() < Duration::from_secs(6) {
            answer = udp_ask(f, via_c, "again", Duration::from_millis(300)).await;
        }
        assert_eq!(answer.as_deref(), Some("a:again"), "flow {i}");
    }
    // The remote agent says UNSERVED at once: well within the resolver's retries.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "re-established in {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_cluster_losing_its_backends_costs_no_request() {
    let ba = HttpBackend::start("127.0.0.1", "a-1").await;
    let bb = HttpBackend::start("127.0.0.1", "b-1").await;
    let svc = service(
        "shop",
        "web",
        vec![port("http", "http", 80, 33400)],
        &[("a", 1), ("b", 1)],
    );
    let agents = fleet(
        43,
        &["a", "b", "c"],
        vec![svc],
        vec![
            local(&[("shop", "web", "http", vec![ba.addr])]),
            local(&[("shop", "web", "http", vec![bb.addr])]),
            local(&[]),
        ],
    )
    .await;
    let c = &agents[2];
    sees(c, "a", "web", true).await;
    sees(c, "b", "web", true).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for method in ["GET", "DELETE"] {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        let addr = c.agent.http_addr;
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match request(addr, method, NAME, "/", &[]).await {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        eprintln!("{method} failed: {other:?}");
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    wait_for("traffic flowing", 10, || {
        let ok = ok.clone();
        async move { ok.load(Ordering::SeqCst) > 40 }
    })
    .await;
    // a's only endpoint dies; a's agent still runs and answers "unserved" until its checks
    // and c's catch up.
    ba.kill();
    let before = bb.hits();
    wait_for("b carrying the load", 20, || {
        let h = bb.hits.clone();
        async move { h.load(Ordering::SeqCst) > before + 150 }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "of {}",
        ok.load(Ordering::SeqCst)
    );
}

fn policy(kind: PolicyKind, order: &[&str], weights: &[(&str, u32)]) -> TrafficPolicy {
    TrafficPolicy {
        kind,
        order: order.iter().map(|s| s.to_string()).collect(),
        weights: weights
            .iter()
            .map(|(c, w)| (c.to_string(), *w))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// GETs through `addr`: how many each backend answered.
async fn split(addr: SocketAddr, n: usize) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let r = request(addr, "GET", NAME, "/", &[]).await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        *out.entry(r.body).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_steer_proxy_choices() {
    let ba = HttpBackend::start("127.0.0.1", "a-1").await;
    let bb = HttpBackend::start("127.0.0.1", "b-1").await;
    let bc = HttpBackend::start("127.0.0.1", "c-1").await;
    let mut svc = service(
        "shop",
        "web",
        vec![port("http", "http", 80, 33500)],
        &[("a", 1), ("b", 1), ("c", 1)],
    );
    svc.policy = policy(PolicyKind::Weighted, &[], &[("a", 1), ("b", 3)]);
    let locals = || {
        vec![
            local(&[("shop", "web", "http", vec![ba.addr])]),
            local(&[("shop", "web", "http", vec![bb.addr])]),
            local(&[("shop", "web", "http", vec![bc.addr])]),
        ]
    };
    let agents = fleet(44, &["a", "b", "c"], vec![svc.clone()], locals()).await;
    let c = &agents[2];
    sees(c, "a", "web", true).await;
    sees(c, "b", "web", true).await;
    // weighted: c keeps none of its own traffic (no weight), a gets 1/4, b 3/4.
    let got = split(c.agent.http_addr, 200).await;
    assert_eq!(got.get("c-1"), None, "{got:?}");
    assert!((40..=60).contains(&got["a-1"]), "{got:?}");
    assert!((140..=160).contains(&got["b-1"]), "{got:?}");
    // failover: b first even from c, which has its own endpoint; then a; c last.
    svc.policy = policy(PolicyKind::Failover, &["b", "a"], &[]);
    let clusters: Vec<_> = agents.iter().map(TestAgent::cluster).collect();
    for (agent, l) in agents.iter().zip(locals()) {
        agent
            .feed(config(&agent.name, clusters.clone(), vec![svc.clone()]), l)
            .await;
    }
    assert_eq!(
        split(c.agent.http_addr, 20).await,
        [("b-1".to_string(), 20)].into()
    );
    bb.kill();
    // The next request already goes to a (b's agent answers unserved), never to c.
    let got = split(c.agent.http_addr, 20).await;
    assert_eq!(got, [("a-1".to_string(), 20)].into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dedicated_address_serves_the_service_port() {
    let be = HttpBackend::start("127.0.0.1", "a-1").await;
    let (db, _db_stop) = udp_backend("a-db").await;
    let mut svc = service(
        "shop",
        "web",
        vec![
            port("http", "http", 8088, 33600),
            port("db", "udp", 8089, 33601),
        ],
        &[("a", 1)],
    );
    svc.addresses = [("a".to_string(), "127.0.45.77".to_string())].into();
    let a = TestAgent::start("a", "127.0.45.1").await;
    a.feed(
        config("a", vec![a.cluster()], vec![svc]),
        local(&[
            ("shop", "web", "http", vec![be.addr]),
            ("shop", "web", "db", vec![db]),
        ]),
    )
    .await;
    let dedicated: SocketAddr = "127.0.45.77:8088".parse().unwrap();
    wait_for("dedicated address answering", 10, || async move {
        get(dedicated, "anything")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    assert_eq!(get(dedicated, "x").await.unwrap().body, "a-1");
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let got = udp_ask(
        &client,
        "127.0.45.77:8089".parse().unwrap(),
        "q",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(got.as_deref(), Some("a-db:q"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_terminated_with_the_services_certificate_and_routed_by_host() {
    let be = HttpBackend::start("127.0.0.1", "a-1").await;
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![NAME.to_string(), "web.shop".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let pair = lb_agent::inputs::TlsPair {
        cert_pem: cert.pem().into_bytes(),
        key_pem: key.serialize_pem().into_bytes(),
    };
    let mut svc = service(
        "shop",
        "web",
        vec![port("http", "http", 80, 33800)],
        &[("a", 1)],
    );
    svc.tls_secret = Some("web-tls".into());
    let mut api = service(
        "shop",
        "api",
        vec![port("http", "http", 80, 33801)],
        &[("a", 1)],
    );
    api.tls_secret = Some("missing".into());
    let a = TestAgent::start("a", "127.0.50.1").await;
    a.feed_with_tls(
        config("a", vec![a.cluster()], vec![svc, api]),
        local(&[
            ("shop", "web", "http", vec![be.addr]),
            ("shop", "api", "http", vec![be.addr]),
        ]),
        [(("shop".to_string(), "web-tls".to_string()), pair)].into(),
    )
    .await;
    // The client checks the Service's certificate: the agent holds it now.
    let connector = tls_connector(&[cert.der().clone()]);
    let tcp = TcpStream::connect(a.agent.https_addr).await.unwrap();
    let server = rustls::pki_types::ServerName::try_from(NAME).unwrap();
    let tls = within(connector.connect(server, tcp)).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    for _ in 0..3 {
        let req = http::Request::get("/")
            .header("host", NAME)
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        // The previous exchange may still be settling on the connection.
        within(send.ready()).await.unwrap();
        let resp = within(send.send_request(req)).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["x-seen-host"],
            NAME,
            "routed by Host inside TLS"
        );
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"a-1");
    }
    // A Service whose Secret is missing: an alert, nothing reaches its backends.
    let before = be.hits();
    let tcp = TcpStream::connect(a.agent.https_addr).await.unwrap();
    let server = rustls::pki_types::ServerName::try_from("api.shop.global.test").unwrap();
    let err = within(connector.connect(server, tcp)).await.unwrap_err();
    assert!(err.to_string().to_lowercase().contains("internal"), "{err}");
    assert_eq!(be.hits(), before);
}

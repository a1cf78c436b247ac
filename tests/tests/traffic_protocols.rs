//! Every protocol through the lb-agents of `fedctl up --clusters 3` with
//! `examples/protocols.yaml` (replicas in sim-1 and sim-2, none in sim-3): HTTPS passed
//! through by SNI, WebSocket, gRPC-style streams (h2c, and h2 in TLS) and UDP, each through
//! sim-3 (remote only) and local first through the others; SRV records with the listen ports; then sim-1
//! fails under load through sim-3 — no HTTP request, TLS connection or UDP exchange fails,
//! and a broken WebSocket is open again within 3 s.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meridian_e2e::dns::lookup_a;
use meridian_e2e::http;
use meridian_e2e::wire::{WebSocket, lookup_srv, udp_ask};
use meridian_e2e::{Up, lb_agent, poll_until};

const NAME: &str = "multi.shop.global.meridian.test";

fn tls_config() -> Arc<rustls::ClientConfig> {
    Arc::new(meridian_e2e::wire::any_cert_tls_config(&[]))
}

/// A listen port allocated to a Service port (federation ConfigMap `meridian-lb-ports`).
fn listen_port(up: &Up, port: &str) -> u16 {
    let out = up.kubectl(&[
        "get",
        "configmap",
        "meridian-lb-ports",
        "-n",
        "meridian-system",
        "-o",
        &format!("jsonpath={{.data.shop\\.multi\\.{port}}}"),
    ]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("listen port of {port}: {out:?}"))
}

/// The first line of the pod's UDP echo: `<cluster> <ns>/<pod>`.
fn udp_cluster(answer: &[u8]) -> String {
    let text = String::from_utf8_lossy(answer);
    text.split_whitespace().next().unwrap_or("?").to_string()
}

/// Lines of `/stream?n=<n>` over h2c (prior knowledge) through `addr`.
fn h2c_stream(addr: SocketAddr, n: u32) -> Vec<String> {
    block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        h2_stream(tcp, n).await
    })
}

/// Lines of `/stream?n=<n>` over HTTP/2 in TLS (ALPN h2, as gRPC clients ask) through
/// `addr` with SNI [`NAME`]: the lb-agent passes the stream through to a pod, which
/// terminates TLS.
fn h2_tls_stream(config: &Arc<rustls::ClientConfig>, addr: SocketAddr, n: u32) -> Vec<String> {
    let mut config = (**config).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from(NAME).unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        h2_stream(tls, n).await
    })
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn h2_stream<IO>(io: IO, n: u32) -> Vec<String>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = ::http::Request::get(format!("http://{NAME}/stream?n={n}&ms=20"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut text = Vec::new();
    use http_body_util::BodyExt as _;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            text.extend_from_slice(&data);
        }
    }
    String::from_utf8_lossy(&text)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn every_protocol_through_every_lb_agent_and_across_a_cluster_failure() {
    let up = Up::start(3);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/protocols.yaml");
    up.kubectl(&["apply", "-f", example]);
    up.kubectl(&[
        "rollout",
        "status",
        "deploy/multi",
        "-n",
        "shop",
        "--timeout=120s",
    ]);
    let tls = tls_config();

    // HTTPS by SNI: through sim-3 (no replica) to sim-1 or sim-2, passed through (the pods
    // terminate TLS: x-sim-tls), local first through the others.
    poll_until(Duration::from_secs(60), "HTTPS through sim-3", || {
        http::tls_get(&tls, lb_agent(3, 8443), NAME)
            .ok()
            .filter(|r| r.status == 200)
    });
    // Both backend clusters, once sim-3's agent has heard (HEALTH) that both have endpoints.
    poll_until(
        Duration::from_secs(60),
        "HTTPS through sim-3 to both",
        || {
            let seen: BTreeSet<String> = (0..20)
                .map(|_| {
                    let r = http::tls_get(&tls, lb_agent(3, 8443), NAME).unwrap();
                    assert_eq!(
                        (r.status, r.header("x-sim-tls")),
                        (200, Some("true")),
                        "{r:?}"
                    );
                    r.sim_cluster()
                })
                .collect();
            (seen == ["sim-1".to_string(), "sim-2".to_string()].into()).then_some(())
        },
    );
    for n in [1u8, 2] {
        let want = format!("sim-{n}");
        poll_until(Duration::from_secs(30), "local HTTPS", || {
            http::tls_get(&tls, lb_agent(n, 8443), "multi.shop.svc.cluster.local")
                .ok()
                .filter(|r| r.sim_cluster() == want)
        });
        for _ in 0..10 {
            let r = http::tls_get(&tls, lb_agent(n, 8443), NAME).unwrap();
            assert_eq!(r.sim_cluster(), want, "local first through sim-{n}");
        }
    }

    // SRV: the listen ports, nearest agent first (sim-3 asks: it has no replica, so the
    // agents of sim-1 and sim-2 in name order).
    let (https_port, dns_port, grpc_port) = (
        listen_port(&up, "https"),
        listen_port(&up, "dns"),
        listen_port(&up, "grpc"),
    );
    for (name, port) in [
        (format!("_https._tcp.{NAME}."), https_port),
        (format!("_443._tcp.{NAME}."), https_port),
        (format!("_dns._udp.{NAME}."), dns_port),
    ] {
        let srv = poll_until(Duration::from_secs(30), "SRV records", || {
            lookup_srv(lb_agent(3, 5353), &name)
                .ok()
                .filter(|s| s.len() == 2)
        });
        assert!(srv.iter().all(|s| s.port == port), "{name}: {srv:?}");
        let targets: Vec<&str> = srv.iter().map(|s| s.target.as_str()).collect();
        assert_eq!(
            targets,
            [format!("sim-1.{NAME}."), format!("sim-2.{NAME}.")],
            "{name}"
        );
    }
    let srv = lookup_srv(lb_agent(1, 5353), &format!("_dns._udp.{NAME}.")).unwrap();
    assert_eq!(
        srv[0].target,
        format!("sim-1.{NAME}."),
        "sim-1's agent answers itself first"
    );
    assert!(srv[0].priority < srv[1].priority, "{srv:?}");
    // The SRV port works: TLS at sim-3's listen port, and UDP.
    let r = http::tls_get(&tls, lb_agent(3, https_port), NAME).unwrap();
    assert_eq!(r.header("x-sim-tls"), Some("true"));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let answer = poll_until(Duration::from_secs(30), "UDP through sim-3", || {
        udp_ask(
            &socket,
            lb_agent(3, dns_port),
            b"q",
            Duration::from_millis(500),
        )
        .ok()
    });
    assert!(
        ["sim-1", "sim-2"].contains(&udp_cluster(&answer).as_str()),
        "{answer:?}"
    );
    assert!(answer.ends_with(b"\nq"));
    for _ in 0..5 {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let a = udp_ask(&s, lb_agent(1, dns_port), b"x", Duration::from_secs(2)).unwrap();
        assert_eq!(udp_cluster(&a), "sim-1", "UDP local first");
    }

    // WebSocket through sim-3, and local first through sim-2.
    let mut ws = poll_until(Duration::from_secs(30), "WebSocket through sim-3", || {
        WebSocket::connect(lb_agent(3, 8080), NAME, Duration::from_secs(5)).ok()
    });
    assert!(
        ws.greeting.starts_with("sim-1 ") || ws.greeting.starts_with("sim-2 "),
        "{}",
        ws.greeting
    );
    assert_eq!(ws.echo("hello").unwrap(), "hello");
    let ws2 = WebSocket::connect(lb_agent(2, 8080), NAME, Duration::from_secs(5)).unwrap();
    assert!(ws2.greeting.starts_with("sim-2 "), "{}", ws2.greeting);

    // gRPC-style streams through sim-3: h2c at the grpc port's listen port, and h2 in TLS
    // passed through by SNI.
    for lines in [
        h2c_stream(lb_agent(3, grpc_port), 5),
        h2_tls_stream(&tls, lb_agent(3, 8443), 5),
    ] {
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(
            lines[0].starts_with("sim-1 ") || lines[0].starts_with("sim-2 "),
            "{lines:?}"
        );
    }

    // sim-1 fails while clients keep going through sim-3 (no replica of its own).
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    // HTTP, TLS and UDP exchanges, and TLS streams re-established after a break.
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
    let mut load = Vec::new();
    {
        let (stop, failures, counts) = (stop.clone(), failures.clone(), counts.clone());
        load.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match http::get(lb_agent(3, 8080), NAME, "/") {
                    Ok(r) if r.status == 200 => {
                        counts[0].fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.lock().unwrap().push(format!("HTTP: {other:?}")),
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }));
    }
    {
        let (stop, failures, counts, tls) =
            (stop.clone(), failures.clone(), counts.clone(), tls.clone());
        load.push(std::thread::spawn(move || {
            // Each exchange a new TLS connection. One that was open on a pod of sim-1 when
            // it went down breaks (nothing can carry a TLS stream elsewhere): it must be
            // open again, through sim-2, within 3 s.
            let mut broken_since: Option<(Instant, String)> = None;
            while !stop.load(Ordering::Relaxed) {
                match http::tls_get(&tls, lb_agent(3, 8443), NAME) {
                    Ok(r) if r.status == 200 => {
                        counts[1].fetch_add(1, Ordering::Relaxed);
                        if let Some((t, first)) = broken_since.take() {
                            counts[3].fetch_add(1, Ordering::Relaxed);
                            if t.elapsed() > Duration::from_secs(3) {
                                failures
                                    .lock()
                                    .unwrap()
                                    .push(format!("TLS broken for {:?}: {first}", t.elapsed()));
                            }
                        }
                    }
                    other => {
                        broken_since.get_or_insert_with(|| (Instant::now(), format!("{other:?}")));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if let Some((t, first)) = broken_since {
                failures
                    .lock()
                    .unwrap()
                    .push(format!("TLS still broken after {:?}: {first}", t.elapsed()));
            }
        }));
    }
    {
        let (stop, failures, counts) = (stop.clone(), failures.clone(), counts.clone());
        load.push(std::thread::spawn(move || {
            // A resolver-like client: one socket, each question retried every 300 ms until
            // answered; an exchange fails only if it takes over 3 s.
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let q = format!("q{i}");
                let started = Instant::now();
                let mut answered = false;
                while started.elapsed() < Duration::from_secs(3) {
                    let asked = udp_ask(
                        &socket,
                        lb_agent(3, dns_port),
                        q.as_bytes(),
                        Duration::from_millis(300),
                    );
                    if asked.is_ok_and(|a| a.ends_with(q.as_bytes())) {
                        answered = true;
                        break;
                    }
                }
                if answered {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                } else {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("UDP {q} unanswered for 3 s"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }));
    }
    // A WebSocket on sim-1 through sim-3: when it breaks, it is open again within 3 s.
    let ws_gap = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            // One on a pod of sim-1, the cluster about to fail.
            let mut ws = (0..50)
                .filter_map(|_| {
                    WebSocket::connect(lb_agent(3, 8080), NAME, Duration::from_secs(5)).ok()
                })
                .find(|w| w.greeting.starts_with("sim-1 "));
            assert!(ws.is_some(), "no WebSocket reached sim-1");
            let mut broken_at: Option<Instant> = None;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let ok = ws
                    .as_mut()
                    .is_some_and(|w| w.echo(&format!("m{i}")).is_ok_and(|e| e == format!("m{i}")));
                if ok {
                    if let Some(t) = broken_at.take() {
                        longest = longest.max(t.elapsed());
                    }
                } else {
                    broken_at.get_or_insert_with(Instant::now);
                    ws = WebSocket::connect(lb_agent(3, 8080), NAME, Duration::from_secs(2)).ok();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (longest, broken_at.map(|t| t.elapsed()))
        })
    };
    poll_until(Duration::from_secs(30), "load flowing", || {
        counts[..3]
            .iter()
            .all(|c| c.load(Ordering::Relaxed) > 10)
            .then_some(())
    });
    drop(ws);
    up.ctl(&["down", "sim-1"]);
    // The whole detection window (health checks, HEALTH answers) passes under load.
    poll_until(Duration::from_secs(15), "DNS to drop sim-1", || {
        lookup_a(lb_agent(3, 5353), &format!("{NAME}."))
            .ok()
            .filter(|a| a.addresses == ["127.0.1.2"])
    });
    let before: Vec<u64> = counts[..3]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .collect();
    poll_until(
        Duration::from_secs(30),
        "traffic through sim-2 only",
        || {
            (counts
                .iter()
                .zip(&before)
                .all(|(c, b)| c.load(Ordering::Relaxed) > b + 30))
            .then_some(())
        },
    );
    let r = http::tls_get(&tls, lb_agent(3, 8443), NAME).unwrap();
    assert_eq!(r.sim_cluster(), "sim-2");
    up.ctl(&["up", "sim-1"]);
    poll_until(Duration::from_secs(30), "DNS to answer sim-1 again", || {
        lookup_a(lb_agent(3, 5353), &format!("{NAME}."))
            .ok()
            .filter(|a| a.addresses.len() == 2)
    });
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.join().unwrap();
    }
    let (longest, still_broken) = ws_gap.join().unwrap();
    eprintln!(
        "through sim-3 across sim-1's failure: HTTP {} TLS {} ({} re-established) UDP {} exchanges; WebSocket down for at most {longest:?}",
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
        counts[3].load(Ordering::Relaxed),
        counts[2].load(Ordering::Relaxed)
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures of {:?} exchanges: {:?}",
        failures.len(),
        counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect::<Vec<_>>(),
        &failures[..failures.len().min(5)]
    );
    assert!(
        still_broken.is_none(),
        "the WebSocket was still broken at the end"
    );
    assert!(
        longest <= Duration::from_secs(3),
        "WebSocket broken for {longest:?}"
    );
    drop(ws2);
}

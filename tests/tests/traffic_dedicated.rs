//! Dedicated per-Service addresses on `fedctl up --clusters 3` with `examples/protocols.yaml`
//! (replicas in sim-1 and sim-2, none in sim-3): the Service opts in by annotation, gets one
//! address of each lb-agent's pool (`127.2.<n>.0/24`), and a client that knows only the name
//! and the Service's own ports — a plain A lookup, no SRV — reaches it over HTTP, TLS and
//! UDP, local first, and keeps reaching it through the same address when that cluster's
//! backends go down. A Service a pool cannot serve says so in its `DedicatedAddressAllocated`
//! condition until an address is freed. Opting out frees the addresses and DNS answers the
//! agents again.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use meridian_e2e::http;
use meridian_e2e::wire::{lookup_a_for, lookup_srv, udp_ask};
use meridian_e2e::{Up, lb_agent, poll_until};

const NAME: &str = "multi.shop.global.meridian.test";

/// The A records `via`'s agent answers for the Service (no client subnet).
fn a_records(via: u8) -> Vec<String> {
    lookup_a_for(lb_agent(via, 5353), &format!("{NAME}."), None, 7).unwrap_or_default()
}

/// The Service's allocations in the federation's `meridian-lb-addresses`, as
/// `<cluster>=<address>`.
fn allocated(up: &Up) -> Vec<String> {
    ["sim-1", "sim-2", "sim-3"]
        .iter()
        .filter_map(|c| {
            let out = up.kubectl(&[
                "get",
                "configmap",
                "meridian-lb-addresses",
                "-n",
                "meridian-system",
                "--ignore-not-found",
                "-o",
                &format!("jsonpath={{.data.shop\\.multi\\.{c}}}"),
            ]);
            let out = out.trim();
            (!out.is_empty()).then(|| format!("{c}={out}"))
        })
        .collect()
}

/// The `DedicatedAddressAllocated` condition of Service `name` in `shop` as `(status,
/// reason, message)`; `None` when it has none.
fn address_condition(up: &Up, name: &str) -> Option<(String, String, String)> {
    let svc: serde_json::Value =
        serde_json::from_str(&up.kubectl(&["get", "svc", name, "-n", "shop", "-o", "json"]))
            .unwrap();
    let conditions = svc.pointer("/status/conditions")?.as_array()?;
    let c = conditions
        .iter()
        .find(|c| c["type"] == "DedicatedAddressAllocated")?;
    let text = |f: &str| c[f].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// `GET /` with the Service's name at `addr`, a new connection each time.
fn get(addr: SocketAddr) -> std::io::Result<http::Response> {
    http::get(addr, NAME, "/")
}

/// `GET /` over TLS with SNI `NAME` at `addr`.
fn tls_get(config: &Arc<rustls::ClientConfig>, addr: SocketAddr) -> std::io::Result<String> {
    let r = http::tls_get(config, addr, NAME)?;
    if r.header("x-sim-tls") != Some("true") {
        return Err(std::io::Error::other("not answered over TLS by a pod"));
    }
    Ok(r.sim_cluster())
}

fn at(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

#[test]
fn a_dedicated_address_serves_the_services_own_ports_and_fails_over() {
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
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut last = a_records(3);
        last.sort();
        if last == ["127.0.1.1", "127.0.1.2"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for both clusters in DNS; sim-3's agent answers {last:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    up.kubectl(&[
        "annotate",
        "svc/multi",
        "-n",
        "shop",
        "federation.meridian.dev/dedicated-address=true",
    ]);
    // One address per cluster, the first of each pool (every cluster's agent serves it,
    // sim-3's too: its clients reach the Service through it).
    poll_until(Duration::from_secs(30), "addresses allocated", || {
        (allocated(&up) == ["sim-1=127.2.1.1", "sim-2=127.2.2.1", "sim-3=127.2.3.1"]).then_some(())
    });
    // A plain A lookup answers the dedicated addresses of the serving clusters, nearest
    // first: sim-1's agent puts its own first; sim-3 has no replica.
    poll_until(
        Duration::from_secs(30),
        "DNS to answer the addresses",
        || {
            (a_records(1) == ["127.2.1.1", "127.2.2.1"]
                && a_records(2) == ["127.2.2.1", "127.2.1.1"]
                && a_records(3).len() == 2)
                .then_some(())
        },
    );
    // `kubectl get svc` shows them as the Service's external addresses.
    poll_until(
        Duration::from_secs(30),
        "the addresses in the status",
        || {
            let ips = up.kubectl(&[
                "get",
                "svc/multi",
                "-n",
                "shop",
                "-o",
                "jsonpath={.status.loadBalancer.ingress[*].ip}",
            ]);
            (ips.trim() == "127.2.1.1 127.2.2.1").then_some(())
        },
    );
    // The Service says so itself: every cluster with a pool gave it an address.
    let (status, reason, message) = poll_until(
        Duration::from_secs(30),
        "the condition to say the addresses are allocated",
        || address_condition(&up, "multi").filter(|c| c.0 == "True"),
    );
    assert_eq!(reason, "Allocated");
    assert_eq!(
        message, "sim-1: 127.2.1.1, sim-2: 127.2.2.1, sim-3: 127.2.3.1",
        "{status}"
    );

    // SRV keeps working: each serving cluster's target now resolves to its dedicated
    // address, where the Service's own port answers.
    let srv = lookup_srv(lb_agent(3, 5353), &format!("_dns._udp.{NAME}.")).unwrap();
    assert_eq!(srv.len(), 2, "{srv:?}");
    assert!(srv.iter().all(|s| s.port == 53), "{srv:?}");
    let target = lookup_a_for(lb_agent(3, 5353), &srv[0].target, None, 9).unwrap();
    assert_eq!(target, ["127.2.1.1"], "{srv:?}");

    // The Service's own ports at the first address DNS gives, as a client that knows only
    // `multi.shop.global.meridian.test:80` (and :443, :53/UDP) would use them.
    let first = a_records(1)[0].clone();
    let r = poll_until(Duration::from_secs(30), "HTTP at the dedicated :80", || {
        get(at(&first, 80)).ok().filter(|r| r.status == 200)
    });
    assert_eq!(r.sim_cluster(), "sim-1", "local first: {r:?}");
    let tls = Arc::new(meridian_e2e::wire::any_cert_tls_config(&[]));
    assert_eq!(tls_get(&tls, at(&first, 443)).unwrap(), "sim-1");
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let answer = udp_ask(&socket, at(&first, 53), b"q", Duration::from_secs(2)).unwrap();
    assert!(answer.starts_with(b"sim-1 "), "{answer:?}");
    assert!(answer.ends_with(b"\nq"));
    // sim-3's address (no replica there) reaches the others.
    for _ in 0..5 {
        let r = get(at("127.2.3.1", 80)).unwrap();
        assert!(
            ["sim-1", "sim-2"].contains(&r.sim_cluster().as_str()),
            "{r:?}"
        );
    }

    // sim-1's backends go down while a client keeps using sim-1's dedicated address.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let from_sim2 = Arc::new(AtomicU64::new(0));
    let client = {
        let (stop, ok, from_sim2, first) =
            (stop.clone(), ok.clone(), from_sim2.clone(), first.clone());
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match get(at(&first, 80)) {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        if r.sim_cluster() == "sim-2" {
                            from_sim2.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    other => failures.push(format!("{other:?}")),
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            failures
        })
    };
    poll_until(Duration::from_secs(10), "load flowing", || {
        (ok.load(Ordering::Relaxed) > 10).then_some(())
    });
    up.ctl(&["down", "sim-1"]);
    poll_until(
        Duration::from_secs(30),
        "sim-1's address to be served by sim-2",
        || (from_sim2.load(Ordering::Relaxed) > 30).then_some(()),
    );
    // DNS drops sim-1; a new client goes to sim-2's address.
    poll_until(Duration::from_secs(30), "DNS to drop sim-1", || {
        (a_records(3) == ["127.2.2.1"]).then_some(())
    });
    let r = get(at("127.2.2.1", 80)).unwrap();
    assert_eq!(r.sim_cluster(), "sim-2");
    assert_eq!(tls_get(&tls, at("127.2.1.1", 443)).unwrap(), "sim-2");
    stop.store(true, Ordering::Relaxed);
    let failures = client.join().unwrap();
    eprintln!(
        "through sim-1's dedicated address across its backends' failure: {} requests, {} from sim-2, {} failed",
        ok.load(Ordering::Relaxed),
        from_sim2.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failed requests: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    up.ctl(&["up", "sim-1"]);

    // A full pool shows on the object, not only in an Event: sim-3's pool shrinks to the
    // one address `multi` holds there, and a second Service opts in.
    up.kubectl(&[
        "--context",
        "sim-3",
        "annotate",
        "--overwrite",
        "svc/meridian-lb-agent",
        "-n",
        "meridian-system",
        "federation.meridian.dev/address-pool=127.2.3.1",
    ]);
    up.kubectl(&[
        "create",
        "service",
        "clusterip",
        "spare",
        "-n",
        "shop",
        "--tcp=80:8080",
    ]);
    up.kubectl(&[
        "annotate",
        "svc/spare",
        "-n",
        "shop",
        "federation.meridian.dev/dedicated-address=true",
    ]);
    let (_, reason, message) = poll_until(
        Duration::from_secs(30),
        "spare's condition to say sim-3's pool is full",
        || address_condition(&up, "spare").filter(|c| c.0 == "False"),
    );
    assert_eq!(reason, "AddressPoolExhausted", "{message}");
    assert!(
        message.contains("sim-3: no free address") && !message.contains("sim-1:"),
        "the message names the cluster without an address, and only it: {message}"
    );
    let transition = |name: &str| {
        up.kubectl(&[
            "get",
            "svc",
            name,
            "-n",
            "shop",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"DedicatedAddressAllocated\")].lastTransitionTime}",
        ])
    };
    let full_since = transition("spare");
    assert!(!full_since.is_empty());
    assert_eq!(
        address_condition(&up, "multi").map(|c| c.0).as_deref(),
        Some("True"),
        "the Service holding the address keeps it"
    );

    // Opting out frees the addresses; DNS answers the agents again and the address closes.
    up.kubectl(&[
        "annotate",
        "svc/multi",
        "-n",
        "shop",
        "federation.meridian.dev/dedicated-address-",
    ]);
    poll_until(Duration::from_secs(30), "addresses released", || {
        allocated(&up).is_empty().then_some(())
    });
    // The freed address goes to the Service that waited for it, and its condition turns
    // True (a new transition); the Service that opted out carries no condition any more.
    let (_, reason, message) = poll_until(
        Duration::from_secs(30),
        "spare's condition to turn True once sim-3's address is freed",
        || address_condition(&up, "spare").filter(|c| c.0 == "True"),
    );
    assert_eq!(reason, "Allocated");
    assert!(message.contains("sim-3: 127.2.3.1"), "{message}");
    assert!(transition("spare") >= full_since);
    poll_until(
        Duration::from_secs(30),
        "multi's condition to go with its opt-in",
        || address_condition(&up, "multi").is_none().then_some(()),
    );
    poll_until(Duration::from_secs(60), "DNS to answer the agents", || {
        (a_records(1) == ["127.0.1.1", "127.0.1.2"]).then_some(())
    });
    poll_until(
        Duration::from_secs(30),
        "the dedicated port to close",
        || {
            TcpStream::connect_timeout(&at("127.2.1.1", 80), Duration::from_secs(1))
                .is_err()
                .then_some(())
        },
    );
}

//! Cross-cluster traffic as a user meets it: `fedctl up --clusters 3`, the example web app
//! (replicas in sim-1 and sim-2 only, a Service on port 80), then HTTP through every
//! cluster's lb-agent, DNS answers from the lb-agents, Meridian's EndpointSlices in the
//! members, `fedctl status svc/web`, and a cluster failure and recovery under load.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use meridian_e2e::Up;
use meridian_e2e::dns::lookup_a;
use meridian_e2e::http::{self, Response};

const HOST: &str = "web.shop.global.meridian.test";

fn agent_http(n: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 1, n], 8080))
}

fn agent_dns(n: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 1, n], 5353))
}

/// Polls `f` until it returns `Some`, failing with `what` after `limit`.
fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn served_by(r: &Response) -> String {
    r.header("x-sim-cluster").unwrap_or("?").to_string()
}

/// `n` GETs through an lb-agent: the clusters that answered (all must be 200).
fn clusters_answering(agent: SocketAddr, host: &str, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|_| {
            let r = http::get(agent, host, "/").expect("request through the lb-agent");
            assert_eq!(r.status, 200, "{r:?}");
            served_by(&r)
        })
        .collect()
}

/// Addresses in a member's Meridian EndpointSlice for web.
fn remote_agents_in(up: &Up, cluster: &str) -> Option<Vec<String>> {
    let out = up.run(
        "kubectl",
        &[
            "--context",
            cluster,
            "get",
            "endpointslice",
            "web-meridian",
            "-n",
            "shop",
            "-o",
            "jsonpath={.endpoints[*].addresses[0]}",
        ],
    );
    out.status.success().then(|| {
        let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        v.sort();
        v
    })
}

#[test]
fn a_federated_service_answers_through_every_lb_agent_and_survives_a_cluster_failure() {
    let up = Up::start(3);
    up.apply_example();

    // sim-3 runs no replica: its lb-agent sends the request to sim-1's or sim-2's.
    wait_for(
        Duration::from_secs(60),
        "web through sim-3's lb-agent",
        || {
            http::get(agent_http(3), HOST, "/")
                .ok()
                .filter(|r| r.status == 200)
        },
    );
    let seen = clusters_answering(agent_http(3), HOST, 40);
    assert!(
        !seen.is_empty() && seen.is_subset(&["sim-1".into(), "sim-2".into()].into()),
        "{seen:?}"
    );
    // Local endpoints first, whatever name the client used.
    for (n, host) in [
        (1, HOST),
        (2, "web.shop.svc.cluster.local:80"),
        (2, "web.shop"),
    ] {
        wait_for(Duration::from_secs(30), "local endpoints", || {
            http::get(agent_http(n), host, "/")
                .ok()
                .filter(|r| r.status == 200 && served_by(r) == format!("sim-{n}"))
        });
        let seen = clusters_answering(agent_http(n), host, 20);
        assert_eq!(seen, [format!("sim-{n}")].into(), "via sim-{n} as {host}");
    }
    // An unknown name is not routed.
    let r = http::get(agent_http(1), "nope.shop.global.meridian.test", "/").unwrap();
    assert_eq!(r.status, 404, "{r:?}");

    // DNS: every lb-agent answers with the clusters that have ready backends, its own first.
    let name = format!("{HOST}.");
    let a = lookup_a(agent_dns(3), &name).unwrap();
    assert!(a.authoritative, "{a:?}");
    let mut addrs = a.addresses.clone();
    addrs.sort();
    assert_eq!(addrs, ["127.0.1.1", "127.0.1.2"], "{a:?}");
    assert_eq!(
        lookup_a(agent_dns(1), &name).unwrap().addresses[0],
        "127.0.1.1"
    );
    assert_eq!(
        lookup_a(agent_dns(2), &name).unwrap().addresses[0],
        "127.0.1.2"
    );
    let missing = lookup_a(agent_dns(2), "nope.shop.global.meridian.test.").unwrap();
    assert_eq!(
        missing.rcode.to_string(),
        "Non-Existent Domain",
        "{missing:?}"
    );

    // Members list exactly the other backend cluster's lb-agent.
    wait_for(Duration::from_secs(30), "Meridian's EndpointSlices", || {
        (remote_agents_in(&up, "sim-1") == Some(vec!["127.0.1.2".into()])
            && remote_agents_in(&up, "sim-2") == Some(vec!["127.0.1.1".into()]))
        .then_some(())
    });

    let status = up.ok("fedctl", &["status", "svc/web", "-n", "shop"]);
    for c in ["sim-1", "sim-2"] {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with(c) && l.contains("127.0.1.")),
            "{status}"
        );
    }

    // sim-1 fails while a client keeps sending GETs through sim-3's lb-agent: none fails,
    // traffic shifts to sim-2 and DNS stops answering sim-1's address.
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let last = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let load = {
        let (stop, sent, failed, last) = (stop.clone(), sent.clone(), failed.clone(), last.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                sent.fetch_add(1, Ordering::Relaxed);
                match http::get(agent_http(3), HOST, "/") {
                    Ok(r) if r.status == 200 => {
                        let mut l = last.lock().unwrap();
                        l.push(served_by(&r));
                        let excess = l.len().saturating_sub(20);
                        l.drain(..excess);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("failed request: {other:?}");
                    }
                }
            }
        })
    };
    up.ctl(&["down", "sim-1"]);
    wait_for(Duration::from_secs(10), "DNS to drop sim-1", || {
        lookup_a(agent_dns(3), &name)
            .ok()
            .filter(|a| a.addresses == ["127.0.1.2"])
    });
    let before = sent.load(Ordering::Relaxed);
    wait_for(Duration::from_secs(10), "traffic to shift to sim-2", || {
        let l = last.lock().unwrap();
        (sent.load(Ordering::Relaxed) > before + 20 && l.iter().all(|c| c == "sim-2")).then_some(())
    });
    up.ctl(&["up", "sim-1"]);
    wait_for(Duration::from_secs(30), "DNS to answer sim-1 again", || {
        lookup_a(agent_dns(3), &name)
            .ok()
            .filter(|a| a.addresses.len() == 2)
    });
    wait_for(
        Duration::from_secs(60),
        "sim-2's EndpointSlice to list sim-1 again",
        || (remote_agents_in(&up, "sim-2") == Some(vec!["127.0.1.1".into()])).then_some(()),
    );
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "failed of {} GETs during the failure and recovery",
        sent.load(Ordering::Relaxed)
    );
}

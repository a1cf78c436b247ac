//! Cross-cluster traffic as a user meets it: `fedctl up --clusters 3`, the example web app
//! (replicas in sim-1 and sim-2 only, a Service on port 80), then HTTP through every
//! cluster's lb-agent, DNS answers from the lb-agents, Meridian's EndpointSlices in the
//! members, `fedctl status svc/web`, and a cluster failure and recovery under load.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use meridian_e2e::dns::lookup_a;
use meridian_e2e::http;
use meridian_e2e::{Up, lb_agent, poll_until};

const HOST: &str = "web.shop.global.meridian.test";

/// `n` GETs through an lb-agent: the clusters that answered (all must be 200).
fn clusters_answering(agent: SocketAddr, host: &str, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|_| {
            let r = http::get(agent, host, "/").expect("request through the lb-agent");
            assert_eq!(r.status, 200, "{r:?}");
            r.sim_cluster()
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
    poll_until(
        Duration::from_secs(60),
        "web through sim-3's lb-agent",
        || {
            http::get(lb_agent(3, 8080), HOST, "/")
                .ok()
                .filter(|r| r.status == 200)
        },
    );
    let seen = clusters_answering(lb_agent(3, 8080), HOST, 40);
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
        poll_until(Duration::from_secs(30), "local endpoints", || {
            http::get(lb_agent(n, 8080), host, "/")
                .ok()
                .filter(|r| r.status == 200 && r.sim_cluster() == format!("sim-{n}"))
        });
        let seen = clusters_answering(lb_agent(n, 8080), host, 20);
        assert_eq!(seen, [format!("sim-{n}")].into(), "via sim-{n} as {host}");
    }
    // An unknown name is not routed.
    let r = http::get(lb_agent(1, 8080), "nope.shop.global.meridian.test", "/").unwrap();
    assert_eq!(r.status, 404, "{r:?}");

    // DNS: every lb-agent answers with the clusters that have ready backends, its own first.
    let name = format!("{HOST}.");
    let a = lookup_a(lb_agent(3, 5353), &name).unwrap();
    assert!(a.authoritative, "{a:?}");
    let mut addrs = a.addresses.clone();
    addrs.sort();
    assert_eq!(addrs, ["127.0.1.1", "127.0.1.2"], "{a:?}");
    assert_eq!(
        lookup_a(lb_agent(1, 5353), &name).unwrap().addresses[0],
        "127.0.1.1"
    );
    assert_eq!(
        lookup_a(lb_agent(2, 5353), &name).unwrap().addresses[0],
        "127.0.1.2"
    );
    let missing = lookup_a(lb_agent(2, 5353), "nope.shop.global.meridian.test.").unwrap();
    assert_eq!(
        missing.rcode.to_string(),
        "Non-Existent Domain",
        "{missing:?}"
    );

    // Members list exactly the other backend cluster's lb-agent.
    poll_until(Duration::from_secs(30), "Meridian's EndpointSlices", || {
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
                match http::get(lb_agent(3, 8080), HOST, "/") {
                    Ok(r) if r.status == 200 => {
                        let mut l = last.lock().unwrap();
                        l.push(r.sim_cluster());
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
    poll_until(Duration::from_secs(10), "DNS to drop sim-1", || {
        lookup_a(lb_agent(3, 5353), &name)
            .ok()
            .filter(|a| a.addresses == ["127.0.1.2"])
    });
    let before = sent.load(Ordering::Relaxed);
    poll_until(Duration::from_secs(10), "traffic to shift to sim-2", || {
        let l = last.lock().unwrap();
        (sent.load(Ordering::Relaxed) > before + 20 && l.iter().all(|c| c == "sim-2")).then_some(())
    });
    up.ctl(&["up", "sim-1"]);
    poll_until(Duration::from_secs(30), "DNS to answer sim-1 again", || {
        lookup_a(lb_agent(3, 5353), &name)
            .ok()
            .filter(|a| a.addresses.len() == 2)
    });
    poll_until(
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

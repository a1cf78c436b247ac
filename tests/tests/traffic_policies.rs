//! Traffic policies as a user sets them on `fedctl up --clusters 3` with `examples/web.yaml`
//! (replicas in sim-1 and sim-2): annotations on the federated Service change what every
//! lb-agent answers in DNS and where it sends requests — failover to an ordered list,
//! weighted shares, geo by the client's subnet (from `meridian-client-subnets`, through EDNS
//! Client Subnet), and back to nearest.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use meridian_e2e::http;
use meridian_e2e::wire::lookup_a_for;
use meridian_e2e::{Up, lb_agent, poll_until, poll_until_or};

const NAME: &str = "web.shop.global.meridian.test";

/// Who answered `n` GETs through `agent`'s lb-agent (all must be 200).
fn split(via: u8, n: usize) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let r = http::get(lb_agent(via, 8080), NAME, "/").expect("request");
        assert_eq!(r.status, 200, "{r:?}");
        *out.entry(r.header("x-sim-cluster").unwrap_or("?").to_string())
            .or_insert(0) += 1;
    }
    out
}

fn annotate(up: &Up, pairs: &[&str]) {
    let mut args = vec!["annotate", "--overwrite", "svc/web", "-n", "shop"];
    args.extend_from_slice(pairs);
    up.kubectl(&args);
}

fn a_records(via: u8, subnet: Option<&str>, id: u16) -> Vec<String> {
    let subnet = subnet.map(|s| {
        let (ip, bits) = s.split_once('/').unwrap();
        (ip.parse().unwrap(), bits.parse().unwrap())
    });
    lookup_a_for(lb_agent(via, 5353), &format!("{NAME}."), subnet, id).unwrap_or_default()
}

#[test]
fn traffic_policies_change_dns_answers_and_proxy_choices() {
    let up = Up::start(3);
    up.apply_example();
    let both = vec!["127.0.1.1".to_string(), "127.0.1.2".to_string()];
    let mut last = Vec::new();
    let answered = poll_until_or(Duration::from_secs(60), || {
        last = a_records(3, None, 1);
        last.sort();
        (last == both).then_some(())
    });
    assert!(
        answered.is_some(),
        "timed out waiting for both clusters in DNS; sim-3's agent answers {last:?}"
    );

    // failover: sim-2 first, then sim-1 — even sim-1's own agent sends its traffic there.
    annotate(
        &up,
        &[
            "federation.meridian.dev/traffic-policy=failover",
            "federation.meridian.dev/failover-order=sim-2,sim-1",
        ],
    );
    poll_until(Duration::from_secs(30), "DNS to answer only sim-2", || {
        [1, 2, 3]
            .iter()
            .all(|n| a_records(*n, None, 7) == ["127.0.1.2"])
            .then_some(())
    });
    poll_until(
        Duration::from_secs(30),
        "sim-1's agent to send to sim-2",
        || (split(1, 10) == BTreeMap::from([("sim-2".to_string(), 10)])).then_some(()),
    );
    assert_eq!(split(3, 20), BTreeMap::from([("sim-2".to_string(), 20)]));

    // weighted 1:3: first DNS answers and requests through sim-3 split about 1:3.
    annotate(
        &up,
        &[
            "federation.meridian.dev/traffic-policy=weighted",
            "federation.meridian.dev/weights=sim-1=1,sim-2=3",
        ],
    );
    poll_until(Duration::from_secs(30), "weighted answers", || {
        let mut first = BTreeMap::<String, usize>::new();
        for id in 0..200u16 {
            let a = a_records(3, None, id.wrapping_mul(331));
            *first.entry(a.first()?.clone()).or_insert(0) += 1;
        }
        let (one, two) = (
            first.get("127.0.1.1").copied()?,
            first.get("127.0.1.2").copied()?,
        );
        ((35..=65).contains(&one) && (135..=165).contains(&two)).then_some(())
    });
    let got = poll_until(Duration::from_secs(30), "weighted requests", || {
        let got = split(3, 200);
        let one = got.get("sim-1").copied().unwrap_or(0);
        (30..=70).contains(&one).then_some(got)
    });
    assert_eq!(got.values().sum::<usize>(), 200, "{got:?}");

    // geo: sim-1 in eu, sim-2 in us; clients by subnet from the federation's ConfigMap.
    for (c, region) in [("sim-1", "eu"), ("sim-2", "us"), ("sim-3", "asia")] {
        up.kubectl(&[
            "patch",
            "cluster",
            c,
            "--type=merge",
            "-p",
            &format!("{{\"spec\":{{\"region\":\"{region}\"}}}}"),
        ]);
    }
    up.kubectl(&[
        "create",
        "configmap",
        "meridian-client-subnets",
        "-n",
        "meridian-system",
        "--from-literal=eu-office=10.1.0.0/16 eu",
        "--from-literal=us-office=10.2.0.0/16 us",
    ]);
    annotate(&up, &["federation.meridian.dev/traffic-policy=geo"]);
    poll_until(
        Duration::from_secs(60),
        "geo answers by client subnet",
        || {
            (a_records(3, Some("10.1.2.0/24"), 3) == ["127.0.1.1"]
                && a_records(3, Some("10.2.9.0/24"), 4) == ["127.0.1.2"])
            .then_some(())
        },
    );
    // A client no subnet covers is placed at the answering agent: sim-3 (asia) has no
    // replica, so both; sim-1's agent answers itself.
    let mut anywhere = a_records(3, Some("192.0.2.0/24"), 5);
    anywhere.sort();
    assert_eq!(anywhere, both);
    poll_until(Duration::from_secs(30), "sim-1's agent on geo", || {
        (a_records(1, None, 6) == ["127.0.1.1"]).then_some(())
    });

    // Back to nearest: every serving cluster, the asker's own first.
    annotate(&up, &["federation.meridian.dev/traffic-policy-"]);
    poll_until(Duration::from_secs(30), "nearest answers again", || {
        (a_records(2, None, 8) == ["127.0.1.2", "127.0.1.1"]).then_some(())
    });
    assert_eq!(split(1, 10), BTreeMap::from([("sim-1".to_string(), 10)]));
}

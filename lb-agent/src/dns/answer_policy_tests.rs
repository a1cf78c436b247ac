//! SRV records, dedicated addresses and traffic policies in answers, read back with
//! hickory-proto.

use std::net::IpAddr;

use fed_api::lbconfig::{LbConfig, LbPort, PolicyKind, TrafficPolicy};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use super::*;
use crate::dns::testutil::config;
use crate::dns::view::config_serves;

const ZONE: &str = "global.meridian.test.";
const UDP: Transport = Transport::Udp { max_payload: 1232 };
/// No subnet covers it: answers are ordered for this agent's cluster (us-1, us-east1-a).
const NOWHERE: &str = "192.0.2.1";

/// The test federation with `prod/web` serving on two ports and `policy`.
fn cfg_with(policy: TrafficPolicy) -> LbConfig {
    let mut cfg = config();
    let web = &mut cfg.services[0];
    web.ports = vec![
        LbPort {
            name: "http".into(),
            port: 80,
            protocol: "http".into(),
            listen_port: 30080,
        },
        LbPort {
            name: "dns".into(),
            port: 53,
            protocol: "udp".into(),
            listen_port: 30053,
        },
    ];
    web.policy = policy;
    cfg
}

fn view_of(cfg: &LbConfig) -> DnsView {
    DnsView::from_config(cfg, config_serves(cfg)).unwrap()
}

fn ask_id(view: &DnsView, name: &str, rtype: RecordType, client: &str, id: u16) -> Message {
    let mut m = Message::query();
    m.metadata.id = id;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    let q = m.to_vec().unwrap();
    let mut out = Vec::new();
    answer(view, &q, client.parse::<IpAddr>().unwrap(), UDP, &mut out).expect("answered");
    Message::from_vec(&out).expect("well formed")
}

fn ask(view: &DnsView, name: &str, rtype: RecordType, client: &str) -> Message {
    ask_id(view, name, rtype, client, 0xBEEF)
}

fn addresses(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter(|r| r.record_type() == RecordType::A)
        .map(|r| r.data.to_string())
        .collect()
}

fn srvs(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| match &r.data {
            // Targets point into the question, so they come in its case.
            RData::SRV(s) => s.to_string().to_ascii_lowercase(),
            other => panic!("not SRV: {other:?}"),
        })
        .collect()
}

#[test]
fn srv_records_give_the_listen_port_and_agents_nearest_first() {
    let v = view_of(&cfg_with(TrafficPolicy::default()));
    for name in [
        format!("_http._tcp.web.prod.{ZONE}"),
        format!("_80._tcp.web.prod.{ZONE}"),
        format!("_HTTP._TCP.Web.Prod.{ZONE}"),
    ] {
        let m = ask(&v, &name, RecordType::SRV, NOWHERE);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{name}");
        assert!(m.metadata.authoritative);
        // web serves in us-1 (this cluster), us-2 (same region), eu-1 (elsewhere).
        assert_eq!(
            srvs(&m),
            [
                format!("0 0 30080 us-1.web.prod.{ZONE}"),
                format!("2 0 30080 us-2.web.prod.{ZONE}"),
                format!("3 0 30080 eu-1.web.prod.{ZONE}"),
            ],
            "{name}"
        );
        let glue: Vec<String> = m
            .additionals
            .iter()
            .map(|r| format!("{} {}", r.name, r.data).to_ascii_lowercase())
            .collect();
        assert_eq!(
            glue,
            [
                format!("us-1.web.prod.{ZONE} 127.0.1.1"),
                format!("us-2.web.prod.{ZONE} 127.0.1.2"),
                format!("eu-1.web.prod.{ZONE} 127.0.1.4"),
            ]
        );
    }
    // A client in eu-west (no zone): eu-1 first, at the same-region rank.
    let m = ask(
        &v,
        &format!("_dns._udp.web.prod.{ZONE}"),
        RecordType::SRV,
        "10.9.0.1",
    );
    assert_eq!(srvs(&m)[0], format!("2 0 30053 eu-1.web.prod.{ZONE}"));
    // A port under the other protocol, or that does not exist: NXDOMAIN.
    for missing in ["_http._udp", "_dns._tcp", "_443._tcp", "_x._sctp"] {
        let m = ask(
            &v,
            &format!("{missing}.web.prod.{ZONE}"),
            RecordType::SRV,
            NOWHERE,
        );
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NXDomain,
            "{missing}"
        );
    }
    // The protocol level exists without data; other types at an SRV name are NODATA.
    let m = ask(
        &v,
        &format!("_tcp.web.prod.{ZONE}"),
        RecordType::SRV,
        NOWHERE,
    );
    assert_eq!(
        (m.metadata.response_code, m.answers.len()),
        (ResponseCode::NoError, 0)
    );
    let m = ask(
        &v,
        &format!("_http._tcp.web.prod.{ZONE}"),
        RecordType::A,
        NOWHERE,
    );
    assert_eq!(
        (m.metadata.response_code, m.answers.len()),
        (ResponseCode::NoError, 0)
    );
    assert_eq!(m.authorities.len(), 1, "SOA for negative caching");
}

#[test]
fn target_hosts_and_dedicated_addresses() {
    let mut cfg = cfg_with(TrafficPolicy::default());
    let m = ask(
        &view_of(&cfg),
        &format!("us-3.web.prod.{ZONE}"),
        RecordType::A,
        NOWHERE,
    );
    assert_eq!(
        addresses(&m),
        ["127.0.1.3"],
        "any cluster's agent, serving or not"
    );
    let m = ask(
        &view_of(&cfg),
        &format!("nope.web.prod.{ZONE}"),
        RecordType::A,
        NOWHERE,
    );
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    // us-2 gives web a dedicated address: answered for web instead of its agent, and SRV
    // records there carry the Service's own port.
    cfg.services[0].addresses = [("us-2".to_string(), "127.0.9.2".to_string())].into();
    let v = view_of(&cfg);
    assert_eq!(
        addresses(&ask(
            &v,
            &format!("web.prod.{ZONE}"),
            RecordType::A,
            NOWHERE
        )),
        ["127.0.1.1", "127.0.9.2", "127.0.1.4"]
    );
    let m = ask(
        &v,
        &format!("_http._tcp.web.prod.{ZONE}"),
        RecordType::SRV,
        NOWHERE,
    );
    assert_eq!(srvs(&m)[1], format!("2 0 80 us-2.web.prod.{ZONE}"));
    assert_eq!(
        addresses(&ask(
            &v,
            &format!("us-2.web.prod.{ZONE}"),
            RecordType::A,
            NOWHERE
        )),
        ["127.0.9.2"]
    );
    cfg.services[0].addresses = [("us-2".to_string(), "::1".to_string())].into();
    let err = DnsView::from_config(&cfg, config_serves(&cfg)).unwrap_err();
    assert!(
        err.to_string().contains("services[0].addresses.us-2"),
        "{err}"
    );
}

fn policy(kind: PolicyKind, order: &[&str], weights: &[(&str, u32)]) -> TrafficPolicy {
    TrafficPolicy {
        kind,
        order: order.iter().map(|s| s.to_string()).collect(),
        weights: weights.iter().map(|(c, w)| (c.to_string(), *w)).collect(),
    }
}

#[test]
fn failover_answers_the_first_group_of_its_order_that_serves() {
    let cfg = cfg_with(policy(PolicyKind::Failover, &["eu-west", "us-2"], &[]));
    let v = view_of(&cfg);
    let global = format!("web.prod.{ZONE}");
    // Whoever asks: eu-1 (region eu-west) only.
    for client in [NOWHERE, "10.2.1.1", "10.9.0.1"] {
        assert_eq!(
            addresses(&ask(&v, &global, RecordType::A, client)),
            ["127.0.1.4"]
        );
    }
    // eu-1 stops serving: us-2, the next in the order.
    let v = DnsView::from_config(&cfg, |c, _, s| s == "web" && c != "eu-1").unwrap();
    assert_eq!(
        addresses(&ask(&v, &global, RecordType::A, NOWHERE)),
        ["127.0.1.2"]
    );
    let m = ask(
        &v,
        &format!("_http._tcp.web.prod.{ZONE}"),
        RecordType::SRV,
        NOWHERE,
    );
    assert_eq!(srvs(&m), [format!("0 0 30080 us-2.web.prod.{ZONE}")]);
    // Then the clusters the order does not name.
    let v = DnsView::from_config(&cfg, |c, _, s| s == "web" && c == "us-1").unwrap();
    assert_eq!(
        addresses(&ask(&v, &global, RecordType::A, NOWHERE)),
        ["127.0.1.1"]
    );
}

#[test]
fn geo_answers_only_the_clusters_nearest_to_the_client() {
    let v = view_of(&cfg_with(policy(PolicyKind::Geo, &[], &[])));
    let global = format!("web.prod.{ZONE}");
    // This agent's cluster, a client in us-east1-b (us-2), one in eu-west (eu-1).
    assert_eq!(
        addresses(&ask(&v, &global, RecordType::A, NOWHERE)),
        ["127.0.1.1"]
    );
    assert_eq!(
        addresses(&ask(&v, &global, RecordType::A, "10.2.1.1")),
        ["127.0.1.2"]
    );
    assert_eq!(
        addresses(&ask(&v, &global, RecordType::A, "10.9.0.1")),
        ["127.0.1.4"]
    );
    // us-east without a zone: both us-east clusters that serve.
    assert_eq!(
        addresses(&ask(&v, &global, RecordType::A, "10.2.7.7")),
        ["127.0.1.1", "127.0.1.2"]
    );
}

#[test]
fn weighted_answers_choose_the_first_by_share() {
    let v = view_of(&cfg_with(policy(
        PolicyKind::Weighted,
        &[],
        &[("us-1", 1), ("eu-1", 3)],
    )));
    let global = format!("web.prod.{ZONE}");
    let mut first = std::collections::BTreeMap::new();
    for id in 0..400u16 {
        let m = ask_id(&v, &global, RecordType::A, NOWHERE, id.wrapping_mul(7919));
        let got = addresses(&m);
        // us-2 serves but has no weight: not answered while a weighted cluster serves.
        assert_eq!(got.len(), 2, "{got:?}");
        *first.entry(got[0].clone()).or_insert(0) += 1;
    }
    assert!((80..=120).contains(&first["127.0.1.1"]), "{first:?}");
    assert!((280..=320).contains(&first["127.0.1.4"]), "{first:?}");
    let m = ask(
        &v,
        &format!("_http._tcp.web.prod.{ZONE}"),
        RecordType::SRV,
        NOWHERE,
    );
    let mut got = srvs(&m);
    got.sort();
    assert_eq!(
        got,
        [
            format!("0 1 30080 us-1.web.prod.{ZONE}"),
            format!("0 3 30080 eu-1.web.prod.{ZONE}")
        ]
    );
    // The same query always gets the same answer (a pure function of the query).
    let a = addresses(&ask_id(&v, &global, RecordType::A, NOWHERE, 42));
    assert_eq!(
        a,
        addresses(&ask_id(&v, &global, RecordType::A, NOWHERE, 42))
    );
}

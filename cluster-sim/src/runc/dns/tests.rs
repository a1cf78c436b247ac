//! Table tests of the cluster DNS's answers, read back with hickory-proto, and a fuzz test
//! of its query handling.

use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::answer::MAX_UDP_PAYLOAD;
use super::*;
use crate::controllers::endpoints::SERVICE_NAME_LABEL;

fn zone() -> Zone {
    let services = vec![
        json!({"metadata": {"namespace": "shop", "name": "web"},
            "spec": {"clusterIP": "100.65.254.3", "ports": [
                {"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"},
                {"port": 9000}]}}),
        json!({"metadata": {"namespace": "shop", "name": "db"},
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}),
        json!({"metadata": {"namespace": "shop", "name": "empty"},
            "spec": {"clusterIP": "None"}}),
        json!({"metadata": {"namespace": "shop", "name": "ext"},
            "spec": {"type": "ExternalName", "externalName": "Mail.Example.org"}}),
        json!({"metadata": {"namespace": "shop", "name": "alias"},
            "spec": {"type": "ExternalName", "externalName": "web.shop.svc.cluster.local"}}),
        json!({"metadata": {"namespace": "shop", "name": "pending"}, "spec": {}}),
    ];
    let slices = vec![
        json!({"metadata": {"namespace": "shop", "labels": {SERVICE_NAME_LABEL: "db"}},
            "ports": [{"name": "pg", "port": 5433, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["100.65.0.7"], "hostname": "db-1", "conditions": {"ready": true}},
                {"addresses": ["100.65.0.6"], "hostname": "db-0"},
                {"addresses": ["100.65.0.9"], "conditions": {"ready": false}},
                {"addresses": ["100.65.0.8"]}]}),
        // Another namespace's slice for a Service of the same name is not db's.
        json!({"metadata": {"namespace": "other", "labels": {SERVICE_NAME_LABEL: "db"}},
            "ports": [{"name": "pg", "port": 1}],
            "endpoints": [{"addresses": ["100.65.0.99"]}]}),
    ];
    Zone::build(&services, &slices, 7)
}

fn query(name: &str, rtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 0x4242;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

fn ask_over(z: &Zone, name: &str, rtype: RecordType, transport: Transport) -> Message {
    let mut out = Vec::new();
    answer(z, &query(name, rtype, None), transport, &mut out).unwrap();
    Message::from_vec(&out).unwrap()
}

fn ask(z: &Zone, name: &str, rtype: RecordType) -> Message {
    ask_over(z, name, rtype, UDP)
}

/// The answer section as `type data` strings, in order.
fn answers(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| format!("{} {}", r.record_type(), r.data))
        .collect()
}

fn soa_in_authority(m: &Message) -> bool {
    m.authorities.len() == 1 && m.authorities[0].record_type() == RecordType::SOA
}

#[test]
fn answers_follow_the_kubernetes_dns_specification() {
    use RecordType::{A, AAAA, CNAME, SRV, TXT};
    let z = zone();
    let cases: Vec<(&str, RecordType, ResponseCode, Vec<&str>)> = vec![
        // A ClusterIP Service, in any case.
        (
            "web.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec!["A 100.65.254.3"],
        ),
        (
            "WEB.Shop.SVC.cluster.LOCAL.",
            A,
            ResponseCode::NoError,
            vec!["A 100.65.254.3"],
        ),
        // Named ports, TCP and UDP; the unnamed one has none.
        (
            "_http._tcp.web.shop.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            vec!["SRV 0 100 80 web.shop.svc.cluster.local."],
        ),
        (
            "_dns._udp.web.shop.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            vec!["SRV 0 100 53 web.shop.svc.cluster.local."],
        ),
        (
            "_http._udp.web.shop.svc.cluster.local.",
            SRV,
            ResponseCode::NXDomain,
            vec![],
        ),
        // Headless: the ready endpoints, each by its hostname or dashed address.
        (
            "db.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec!["A 100.65.0.6", "A 100.65.0.7", "A 100.65.0.8"],
        ),
        (
            "db-1.db.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec!["A 100.65.0.7"],
        ),
        (
            "100-65-0-8.db.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec!["A 100.65.0.8"],
        ),
        (
            "100-65-0-9.db.shop.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            vec![],
        ),
        (
            "_pg._tcp.db.shop.svc.cluster.local.",
            SRV,
            ResponseCode::NoError,
            vec![
                "SRV 0 33 5433 db-0.db.shop.svc.cluster.local.",
                "SRV 0 33 5433 db-1.db.shop.svc.cluster.local.",
                "SRV 0 33 5433 100-65-0-8.db.shop.svc.cluster.local.",
            ],
        ),
        // ExternalName: a CNAME, followed when it stays in the domain.
        (
            "ext.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec!["CNAME mail.example.org."],
        ),
        (
            "ext.shop.svc.cluster.local.",
            CNAME,
            ResponseCode::NoError,
            vec!["CNAME mail.example.org."],
        ),
        (
            "alias.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec!["CNAME web.shop.svc.cluster.local.", "A 100.65.254.3"],
        ),
        // NODATA: existing names, other types; empty non-terminals; a headless Service
        // without endpoints.
        (
            "web.shop.svc.cluster.local.",
            AAAA,
            ResponseCode::NoError,
            vec![],
        ),
        (
            "web.shop.svc.cluster.local.",
            TXT,
            ResponseCode::NoError,
            vec![],
        ),
        ("shop.svc.cluster.local.", A, ResponseCode::NoError, vec![]),
        ("svc.cluster.local.", A, ResponseCode::NoError, vec![]),
        (
            "empty.shop.svc.cluster.local.",
            A,
            ResponseCode::NoError,
            vec![],
        ),
        // NXDOMAIN in the domain: unknown names, a Service without a ClusterIP yet,
        // another namespace, the search-path forms of a short name.
        (
            "nope.shop.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            vec![],
        ),
        (
            "pending.shop.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            vec![],
        ),
        (
            "web.other.svc.cluster.local.",
            A,
            ResponseCode::NXDomain,
            vec![],
        ),
        ("web.svc.cluster.local.", A, ResponseCode::NXDomain, vec![]),
        ("web.cluster.local.", A, ResponseCode::NXDomain, vec![]),
    ];
    for (name, rtype, rcode, want) in cases {
        let m = ask(&z, name, rtype);
        let what = format!("{name} {rtype}");
        assert_eq!(m.metadata.id, 0x4242, "{what}");
        assert_eq!(m.metadata.response_code, rcode, "{what}");
        assert!(m.metadata.authoritative, "{what}");
        assert!(m.metadata.recursion_desired, "{what}: RD is copied");
        assert_eq!(answers(&m), want, "{what}");
        assert_eq!(m.queries.len(), 1, "{what}");
        if want.is_empty() {
            assert!(soa_in_authority(&m), "{what}: SOA in authority");
        }
    }
}

#[test]
fn srv_answers_carry_their_targets_addresses() {
    let m = ask(
        &zone(),
        "_pg._tcp.db.shop.svc.cluster.local.",
        RecordType::SRV,
    );
    let extra: Vec<String> = m
        .additionals
        .iter()
        .map(|r| format!("{} {}", r.name, r.data))
        .collect();
    assert_eq!(
        extra,
        [
            "db-0.db.shop.svc.cluster.local. 100.65.0.6",
            "db-1.db.shop.svc.cluster.local. 100.65.0.7",
            "100-65-0-8.db.shop.svc.cluster.local. 100.65.0.8",
        ]
    );
}

#[test]
fn names_outside_the_domain_are_nxdomain_not_refused() {
    let z = zone();
    for name in [
        "example.org.",
        "web.shop.svc.",
        "cluster.local.example.org.",
        "xcluster.local.",
    ] {
        let m = ask(&z, name, RecordType::A);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain, "{name}");
        assert!(!m.metadata.authoritative, "{name}");
        assert!(m.answers.is_empty() && m.authorities.is_empty(), "{name}");
    }
}

#[test]
fn the_apex_has_an_soa() {
    let empty = Zone::build(&[], &[], 1);
    let m = ask(&empty, "cluster.local.", RecordType::SOA);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(m.answers.len(), 1);
    let m = ask(&zone(), "cluster.local.", RecordType::SOA);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    let RData::SOA(soa) = &m.answers[0].data else {
        panic!("not an SOA: {:?}", m.answers)
    };
    assert_eq!(soa.serial, 7);
    assert_eq!(soa.minimum, 5);
    assert_eq!(soa.mname.to_string(), "ns.dns.cluster.local.");
}

/// A headless Service with many ready endpoints: its A answer does not fit 512 bytes.
fn big_zone() -> Zone {
    let endpoints: Vec<Value> = (0..60)
        .map(|i| json!({"addresses": [format!("100.65.1.{i}")]}))
        .collect();
    Zone::build(
        &[
            json!({"metadata": {"namespace": "shop", "name": "many"}, "spec": {"clusterIP": "None"}}),
        ],
        &[
            json!({"metadata": {"namespace": "shop", "labels": {SERVICE_NAME_LABEL: "many"}},
            "ports": [], "endpoints": endpoints}),
        ],
        1,
    )
}

#[test]
fn udp_answers_over_the_payload_limit_are_truncated() {
    let z = big_zone();
    let name = "many.shop.svc.cluster.local.";
    // 60 records of 16 bytes: over 512, under the EDNS limit, whole over TCP.
    let udp = ask(&z, name, RecordType::A);
    assert!(udp.metadata.truncation);
    assert!(udp.answers.is_empty());
    let tcp = ask_over(&z, name, RecordType::A, Transport::Tcp);
    assert!(!tcp.metadata.truncation);
    assert_eq!(tcp.answers.len(), 60);
    let mut out = Vec::new();
    answer(&z, &query(name, RecordType::A, Some(4096)), UDP, &mut out).unwrap();
    assert!(out.len() <= usize::from(MAX_UDP_PAYLOAD));
    let edns = Message::from_vec(&out).unwrap();
    assert!(!edns.metadata.truncation);
    assert_eq!(edns.answers.len(), 60);
    assert_eq!(edns.edns.unwrap().max_payload(), MAX_UDP_PAYLOAD);
}

#[test]
fn malformed_and_unusual_queries() {
    let z = zone();
    let mut out = Vec::new();
    // Too short, or a response: no reply at all.
    assert!(answer(&z, &[0; 5], UDP, &mut out).is_none());
    let mut response = query("web.shop.svc.cluster.local.", RecordType::A, None);
    response[2] |= 0x80;
    assert!(answer(&z, &response, UDP, &mut out).is_none());
    // A cut question: FORMERR with the ID.
    let q = query("web.shop.svc.cluster.local.", RecordType::A, None);
    answer(&z, &q[..20], UDP, &mut out).unwrap();
    let m = Message::from_vec(&out).unwrap();
    assert_eq!(
        (m.metadata.id, m.metadata.response_code),
        (0x4242, ResponseCode::FormErr)
    );
    // Zone transfers are refused.
    let m = ask(&z, "cluster.local.", RecordType::AXFR);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
}

proptest! {
    /// Any query hickory builds, and bytes mutated from it, get a response hickory reads
    /// with the same ID (or, for what is not a query, none).
    #[test]
    fn every_response_is_well_formed(
        name in prop_oneof![
            Just("web.shop.svc.cluster.local."),
            Just("_http._tcp.web.shop.svc.cluster.local."),
            Just("_pg._tcp.db.shop.svc.cluster.local."),
            Just("db.shop.svc.cluster.local."),
            Just("alias.shop.svc.cluster.local."),
            Just("ext.shop.svc.cluster.local."),
            Just("cluster.local."),
            Just("nope.cluster.local."),
            Just("example.org."),
        ],
        rtype in prop_oneof![
            Just(RecordType::A), Just(RecordType::AAAA), Just(RecordType::SRV),
            Just(RecordType::CNAME), Just(RecordType::SOA), Just(RecordType::ANY),
        ],
        edns in prop::option::of(512u16..4096),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        tcp in any::<bool>(),
    ) {
        let z = zone();
        let transport = if tcp { Transport::Tcp } else { UDP };
        let q = query(name, rtype, edns);
        let mut out = Vec::new();
        let answered = answer(&z, &q, transport, &mut out).unwrap();
        let m = Message::from_vec(&out).unwrap();
        prop_assert_eq!(m.metadata.id, 0x4242);
        prop_assert_eq!(m.answers.len(), usize::from(answered.answers));
        prop_assert_eq!(&m.queries, &Message::from_vec(&q).unwrap().queries);
        let mut mutated = q.clone();
        for (at, byte) in edits {
            let at = at % mutated.len();
            mutated[at] = byte;
        }
        if answer(&z, &mutated, transport, &mut out).is_some() {
            let m = Message::from_vec(&out);
            prop_assert!(m.is_ok(), "{:?} -> {:?}", mutated, m);
            prop_assert_eq!(&out[..2], &mutated[..2]);
        }
    }
}

//! Rule-by-rule tests of `answer`, reading responses back with hickory-proto.

use std::net::IpAddr;

use fed_api::lbconfig::{LbCluster, LbConfig};
use hickory_proto::op::{Edns as HEdns, Message, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{DNSClass, Name, RecordType};

use super::*;
use crate::dns::testutil::config;
use crate::dns::view::config_serves;
use crate::dns::wire::{put_label, put16};

const ZONE: &str = "global.meridian.test.";
const UDP: Transport = Transport::Udp { max_payload: 1232 };
/// A client no subnet covers: answers are ordered for this agent's cluster (us-1).
const NOWHERE: &str = "192.0.2.1";

fn view() -> DnsView {
    let cfg = config();
    DnsView::from_config(&cfg, config_serves(&cfg)).unwrap()
}

fn view_serving(clusters: &[&str]) -> DnsView {
    DnsView::from_config(&config(), |c, _, s| s == "web" && clusters.contains(&c)).unwrap()
}

fn query_bytes(name: &str, rtype: RecordType, edns: Option<u16>) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = 0xBEEF;
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    if let Some(size) = edns {
        let mut e = HEdns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m.to_vec().unwrap()
}

/// A raw query, for what a well-behaved encoder would not produce.
fn raw_query(flags: u16, qdcount: u16, labels: &[&[u8]], qtype: u16, qclass: u16) -> Vec<u8> {
    let mut q = Vec::new();
    put16(&mut q, 0x4242);
    put16(&mut q, flags);
    put16(&mut q, qdcount);
    q.extend_from_slice(&[0; 6]);
    for l in labels {
        put_label(&mut q, l);
    }
    q.push(0);
    put16(&mut q, qtype);
    put16(&mut q, qclass);
    q
}

struct Reply {
    msg: Message,
    answered: Answered,
}

impl Reply {
    fn rcode(&self) -> ResponseCode {
        self.msg.metadata.response_code
    }

    fn section(records: &[hickory_proto::rr::Record]) -> Vec<String> {
        records
            .iter()
            .map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data))
            .collect()
    }

    fn answers(&self) -> Vec<String> {
        Self::section(&self.msg.answers)
    }

    fn authorities(&self) -> Vec<String> {
        Self::section(&self.msg.authorities)
    }

    fn additionals(&self) -> Vec<String> {
        Self::section(&self.msg.additionals)
    }

    fn addresses(&self) -> Vec<String> {
        self.msg
            .answers
            .iter()
            .filter(|r| r.record_type() == RecordType::A)
            .map(|r| r.data.to_string())
            .collect()
    }
}

fn ask_raw(view: &DnsView, query: &[u8], client: &str, transport: Transport) -> Reply {
    let mut out = Vec::new();
    let answered = answer(
        view,
        query,
        client.parse::<IpAddr>().unwrap(),
        transport,
        &mut out,
    )
    .expect("a response");
    let msg = Message::from_vec(&out).expect("a well-formed response");
    assert_eq!(msg.metadata.id, u16::from_be_bytes([query[0], query[1]]));
    assert_eq!(answered.answers as usize, msg.answers.len());
    Reply { msg, answered }
}

fn ask(view: &DnsView, name: &str, rtype: RecordType, client: &str) -> Reply {
    ask_raw(view, &query_bytes(name, rtype, None), client, UDP)
}

fn soa_line(view: &DnsView) -> String {
    format!(
        "{ZONE} 30 SOA ns-us-1.{ZONE} hostmaster.{ZONE} {} 3600 600 86400 30",
        view.serial()
    )
}

#[test]
fn global_name_answers_serving_clusters_nearest_to_this_cluster() {
    let v = view();
    let r = ask(&v, "web.prod.global.meridian.test.", RecordType::A, NOWHERE);
    assert_eq!(r.rcode(), ResponseCode::NoError);
    let h = &r.msg.metadata;
    assert!(h.authoritative && h.recursion_desired && !h.truncation && !h.recursion_available);
    assert_eq!(
        r.answers(),
        [
            format!("web.prod.{ZONE} 30 A 127.0.1.1"),
            format!("web.prod.{ZONE} 30 A 127.0.1.2"),
            format!("web.prod.{ZONE} 30 A 127.0.1.4"),
        ]
    );
    assert!(r.authorities().is_empty() && r.additionals().is_empty());
    assert_eq!(
        r.msg.queries[0].name().to_string(),
        format!("web.prod.{ZONE}")
    );
    assert_eq!(
        r.answered,
        Answered {
            rcode: Rcode::NoError,
            qtype: 1,
            answers: 3,
            truncated: false
        }
    );
}

#[test]
fn client_subnets_order_answers_for_the_asker() {
    let v = DnsView::from_config(&config(), |_, _, _| true).unwrap();
    let order =
        |client| ask(&v, "web.prod.global.meridian.test.", RecordType::A, client).addresses();
    // This cluster (us-1, us-east1-a): itself, its zone (us-3), its region (us-2), eu-1.
    assert_eq!(
        order(NOWHERE),
        ["127.0.1.1", "127.0.1.3", "127.0.1.2", "127.0.1.4"]
    );
    // 10.2.1.0/24 is us-east1-b (longer than 10.2.0.0/16): us-2 first.
    assert_eq!(
        order("10.2.1.9"),
        ["127.0.1.2", "127.0.1.1", "127.0.1.3", "127.0.1.4"]
    );
    // 10.2.0.0/16 is us-east without a zone: the region by name, then the rest.
    assert_eq!(
        order("10.2.7.7"),
        ["127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4"]
    );
    assert_eq!(
        order("10.9.0.1"),
        ["127.0.1.4", "127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
    assert_eq!(
        order("fd00::5"),
        ["127.0.1.4", "127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
}

#[test]
fn names_are_case_insensitive_and_the_question_is_echoed_as_asked() {
    let v = view();
    let r = ask(&v, "WEB.Prod.GLOBAL.meridian.TEST.", RecordType::A, NOWHERE);
    assert_eq!(r.rcode(), ResponseCode::NoError);
    assert_eq!(r.addresses().len(), 3);
    // hickory compares names case-insensitively; check the bytes.
    let q = query_bytes("WEB.Prod.GLOBAL.meridian.TEST.", RecordType::A, None);
    let mut out = Vec::new();
    answer(&v, &q, NOWHERE.parse().unwrap(), UDP, &mut out).unwrap();
    assert_eq!(&out[12..q.len()], &q[12..]);
}

#[test]
fn region_and_zone_names_answer_their_clusters() {
    let v = DnsView::from_config(&config(), |_, _, _| true).unwrap();
    let a = |name: &str| ask(&v, name, RecordType::A, NOWHERE).answers();
    assert_eq!(
        a("web.prod.us-east.global.meridian.test."),
        [
            format!("web.prod.us-east.{ZONE} 30 A 127.0.1.1"),
            format!("web.prod.us-east.{ZONE} 30 A 127.0.1.3"),
            format!("web.prod.us-east.{ZONE} 30 A 127.0.1.2"),
        ]
    );
    assert_eq!(
        a("web.prod.eu-west.global.meridian.test."),
        [format!("web.prod.eu-west.{ZONE} 30 A 127.0.1.4")]
    );
    assert_eq!(
        a("web.prod.us-east1-a.us-east.global.meridian.test."),
        [
            format!("web.prod.us-east1-a.us-east.{ZONE} 30 A 127.0.1.1"),
            format!("web.prod.us-east1-a.us-east.{ZONE} 30 A 127.0.1.3"),
        ]
    );
    assert_eq!(
        a("web.prod.us-east1-b.us-east.global.meridian.test."),
        [format!("web.prod.us-east1-b.us-east.{ZONE} 30 A 127.0.1.2")]
    );
}

#[test]
fn empty_zone_is_a_cname_to_its_region() {
    let v = view_serving(&["us-2", "eu-1"]);
    let r = ask(
        &v,
        "web.prod.us-east1-a.us-east.global.meridian.test.",
        RecordType::A,
        NOWHERE,
    );
    assert_eq!(r.rcode(), ResponseCode::NoError);
    assert_eq!(
        r.answers(),
        [
            format!("web.prod.us-east1-a.us-east.{ZONE} 30 CNAME web.prod.us-east.{ZONE}"),
            format!("web.prod.us-east.{ZONE} 30 A 127.0.1.2"),
        ]
    );
}

#[test]
fn empty_zone_and_region_chain_to_the_global_name() {
    let v = view_serving(&["eu-1"]);
    let zone_name = "web.prod.us-east1-a.us-east.global.meridian.test.";
    let r = ask(&v, zone_name, RecordType::A, NOWHERE);
    assert_eq!(
        r.answers(),
        [
            format!("web.prod.us-east1-a.us-east.{ZONE} 30 CNAME web.prod.us-east.{ZONE}"),
            format!("web.prod.us-east.{ZONE} 30 CNAME web.prod.{ZONE}"),
            format!("web.prod.{ZONE} 30 A 127.0.1.4"),
        ]
    );
    let r = ask(
        &v,
        "web.prod.us-east.global.meridian.test.",
        RecordType::A,
        NOWHERE,
    );
    assert_eq!(
        r.answers(),
        [
            format!("web.prod.us-east.{ZONE} 30 CNAME web.prod.{ZONE}"),
            format!("web.prod.{ZONE} 30 A 127.0.1.4"),
        ]
    );
    // A CNAME question gets the CNAME itself, not the chain.
    let r = ask(&v, zone_name, RecordType::CNAME, NOWHERE);
    assert_eq!(
        r.answers(),
        [format!(
            "web.prod.us-east1-a.us-east.{ZONE} 30 CNAME web.prod.us-east.{ZONE}"
        )]
    );
    // Other types follow the chain and end in NODATA.
    let r = ask(&v, zone_name, RecordType::AAAA, NOWHERE);
    assert_eq!(r.rcode(), ResponseCode::NoError);
    assert_eq!(r.answers().len(), 2);
    assert_eq!(r.authorities(), [soa_line(&v)]);
}

#[test]
fn a_chain_with_no_serving_cluster_ends_in_nodata() {
    let v = view_serving(&[]);
    let r = ask(
        &v,
        "web.prod.eu-west1-a.eu-west.global.meridian.test.",
        RecordType::A,
        NOWHERE,
    );
    assert_eq!(r.rcode(), ResponseCode::NoError);
    assert_eq!(
        r.answers(),
        [
            format!("web.prod.eu-west1-a.eu-west.{ZONE} 30 CNAME web.prod.eu-west.{ZONE}"),
            format!("web.prod.eu-west.{ZONE} 30 CNAME web.prod.{ZONE}"),
        ]
    );
    assert_eq!(r.authorities(), [soa_line(&v)]);
}

#[test]
fn missing_names_are_nxdomain_with_the_soa() {
    let v = view();
    for name in [
        "nope.prod.global.meridian.test.",
        "web.staging.global.meridian.test.",
        "web.prod.mars.global.meridian.test.",
        "web.prod.us-east1-a.eu-west.global.meridian.test.",
        "x.web.prod.global.meridian.test.",
        "a.b.c.d.e.f.global.meridian.test.",
        "ns-mars.global.meridian.test.",
    ] {
        let r = ask(&v, name, RecordType::A, NOWHERE);
        assert_eq!(r.rcode(), ResponseCode::NXDomain, "{name}");
        assert!(r.msg.metadata.authoritative, "{name}");
        assert!(r.answers().is_empty(), "{name}");
        assert_eq!(r.authorities(), [soa_line(&v)], "{name}");
        assert_eq!(r.answered.rcode, Rcode::NxDomain);
    }
}

#[test]
fn existing_names_without_data_are_nodata_with_the_soa() {
    let v = view();
    for (name, rtype) in [
        ("web.prod.global.meridian.test.", RecordType::AAAA),
        ("web.prod.global.meridian.test.", RecordType::TXT),
        ("web.prod.global.meridian.test.", RecordType::CNAME),
        // A Service with no serving cluster.
        ("api.prod.global.meridian.test.", RecordType::A),
        // Levels between the apex and the Service names.
        ("prod.global.meridian.test.", RecordType::A),
        ("us-east.global.meridian.test.", RecordType::A),
        ("us-east1-a.us-east.global.meridian.test.", RecordType::A),
        (
            "prod.us-east1-a.us-east.global.meridian.test.",
            RecordType::A,
        ),
        ("ns-eu-1.global.meridian.test.", RecordType::AAAA),
        ("global.meridian.test.", RecordType::A),
        ("global.meridian.test.", RecordType::MX),
    ] {
        let r = ask(&v, name, rtype, NOWHERE);
        assert_eq!(r.rcode(), ResponseCode::NoError, "{name} {rtype}");
        assert!(r.answers().is_empty(), "{name} {rtype}");
        assert_eq!(r.authorities(), [soa_line(&v)], "{name} {rtype}");
    }
}

#[test]
fn apex_has_soa_and_ns_with_glue() {
    let v = view();
    // Names in the records point into the question, so they come back as the client
    // spelled them.
    let r = ask(&v, "GLOBAL.meridian.test.", RecordType::SOA, NOWHERE);
    assert_eq!(r.answers()[0], soa_line(&v).replace("global.", "GLOBAL."));
    assert_eq!(r.answers().len(), 1);
    assert!(r.authorities().is_empty());

    let r = ask(&v, "global.meridian.test.", RecordType::NS, NOWHERE);
    let ns = ["eu-1", "us-1", "us-2", "us-3"];
    assert_eq!(
        r.answers(),
        ns.map(|c| format!("{ZONE} 30 NS ns-{c}.{ZONE}"))
    );
    assert_eq!(
        r.additionals(),
        [("eu-1", 4), ("us-1", 1), ("us-2", 2), ("us-3", 3)]
            .map(|(c, n)| format!("ns-{c}.{ZONE} 30 A 127.0.1.{n}"))
    );

    let r = ask(&v, "global.meridian.test.", RecordType::ANY, NOWHERE);
    assert_eq!(r.answers().len(), 5);
    assert_eq!(r.answers()[0], soa_line(&v));
    assert_eq!(r.additionals().len(), 4);
}

#[test]
fn name_server_hosts_answer_their_agent() {
    let v = view();
    let r = ask(&v, "ns-eu-1.global.meridian.test.", RecordType::A, NOWHERE);
    assert_eq!(r.answers(), [format!("ns-eu-1.{ZONE} 30 A 127.0.1.4")]);
    // Name servers answer whether or not the cluster is Ready: delegation stays stable.
    let mut cfg = config();
    cfg.clusters[3].ready = false;
    let v = DnsView::from_config(&cfg, config_serves(&cfg)).unwrap();
    let r = ask(&v, "ns-eu-1.global.meridian.test.", RecordType::A, NOWHERE);
    assert_eq!(r.addresses(), ["127.0.1.4"]);
}

#[test]
fn names_outside_the_zone_are_refused() {
    let v = view();
    for name in [
        "example.com.",
        "meridian.test.",
        "web.prod.global.meridian.test.example.",
    ] {
        let r = ask(&v, name, RecordType::A, NOWHERE);
        assert_eq!(r.rcode(), ResponseCode::Refused, "{name}");
        assert!(!r.msg.metadata.authoritative);
        assert!(r.answers().is_empty() && r.authorities().is_empty());
    }
    // The zone's bytes at the end of a label are not the zone: "x\x06global.meridian.test".
    let q = raw_query(0x0100, 1, &[b"x\x06global", b"meridian", b"test"], 1, 1);
    assert_eq!(ask_raw(&v, &q, NOWHERE, UDP).rcode(), ResponseCode::Refused);
    // Other classes and zone transfers.
    let q = raw_query(0x0100, 1, &[b"global", b"meridian", b"test"], 1, 3);
    assert_eq!(ask_raw(&v, &q, NOWHERE, UDP).rcode(), ResponseCode::Refused);
    let q = raw_query(0x0100, 1, &[b"global", b"meridian", b"test"], 252, 1);
    assert_eq!(ask_raw(&v, &q, NOWHERE, UDP).rcode(), ResponseCode::Refused);
    // Class ANY is answered like IN.
    let q = raw_query(0x0100, 1, &[b"global", b"meridian", b"test"], 6, 255);
    let r = ask_raw(&v, &q, NOWHERE, UDP);
    assert_eq!(r.rcode(), ResponseCode::NoError);
    assert_eq!(r.answers(), [soa_line(&v)]);
}

#[test]
fn malformed_queries_get_formerr_with_their_id() {
    let v = view();
    let good = raw_query(0x0100, 1, &[b"global", b"meridian", b"test"], 6, 1);
    let mut cases = vec![
        raw_query(0x0100, 0, &[], 1, 1)[..12].to_vec(),
        raw_query(0x0100, 2, &[b"global", b"meridian", b"test"], 6, 1),
        good[..good.len() - 1].to_vec(),
        // Question type OPT.
        raw_query(0x0100, 1, &[b"global", b"meridian", b"test"], 41, 1),
    ];
    // A label longer than 63 bytes.
    let mut long = raw_query(0x0100, 1, &[], 1, 1);
    long.splice(12..12, [64].into_iter().chain([b'a'; 64]));
    cases.push(long);
    // A compression pointer in the question name.
    let mut pointer = good.clone();
    pointer[12] = 0xC0;
    cases.push(pointer);
    // An additional record claimed but missing.
    let mut missing = good.clone();
    missing[11] = 1;
    cases.push(missing);
    for q in cases {
        let r = ask_raw(&v, &q, NOWHERE, UDP);
        assert_eq!(r.rcode(), ResponseCode::FormErr, "{q:?}");
        assert_eq!(r.answered.rcode, Rcode::FormErr);
        assert!(r.answers().is_empty());
    }
}

#[test]
fn other_opcodes_are_not_implemented() {
    let v = view();
    for opcode in [1u16, 2, 4, 5] {
        let q = raw_query(opcode << 11, 1, &[b"global", b"meridian", b"test"], 6, 1);
        let r = ask_raw(&v, &q, NOWHERE, UDP);
        assert_eq!(r.rcode(), ResponseCode::NotImp, "opcode {opcode}");
        assert_eq!(u8::from(r.msg.metadata.op_code), opcode as u8);
    }
}

#[test]
fn responses_and_runts_are_not_answered() {
    let v = view();
    let mut out = vec![1, 2, 3];
    let mut response = query_bytes("global.meridian.test.", RecordType::SOA, None);
    response[2] |= 0x80;
    for msg in [&response[..], &[0u8; 11][..], &[][..]] {
        assert_eq!(
            answer(&v, msg, NOWHERE.parse().unwrap(), UDP, &mut out),
            None
        );
        assert!(out.is_empty());
    }
}

#[test]
fn edns_is_echoed_and_unknown_versions_get_badvers() {
    let v = view();
    let r = ask_raw(
        &v,
        &query_bytes("web.prod.global.meridian.test.", RecordType::A, Some(4096)),
        NOWHERE,
        Transport::Udp { max_payload: 1400 },
    );
    let edns = r.msg.edns.as_ref().expect("an OPT record");
    assert_eq!(edns.max_payload(), 1400);
    assert_eq!(r.addresses().len(), 3);
    // No OPT in, no OPT out.
    let r = ask(&v, "web.prod.global.meridian.test.", RecordType::A, NOWHERE);
    assert!(r.msg.edns.is_none());

    let mut m = Message::from_vec(&query_bytes(
        "global.meridian.test.",
        RecordType::SOA,
        Some(1232),
    ))
    .unwrap();
    m.edns.as_mut().unwrap().set_version(1);
    let r = ask_raw(&v, &m.to_vec().unwrap(), NOWHERE, UDP);
    assert_eq!(r.answered.rcode, Rcode::BadVers);
    // 16 is both BADVERS and BADSIG to hickory.
    assert_eq!(u16::from(r.rcode()), 16);
    assert!(r.answers().is_empty());
}

#[test]
fn edns_client_subnet_stands_for_the_client() {
    let v = DnsView::from_config(&config(), |_, _, _| true).unwrap();
    let ask_ecs = |name: &str, subnet: &str, prefix: u8| {
        let mut m = Message::from_vec(&query_bytes(name, RecordType::A, Some(1232))).unwrap();
        let option = ClientSubnet::new(subnet.parse().unwrap(), prefix, 0);
        m.edns
            .as_mut()
            .unwrap()
            .options_mut()
            .insert(EdnsOption::Subnet(option));
        // The resolver itself sits in us-east1-b.
        ask_raw(&v, &m.to_vec().unwrap(), "10.2.1.1", UDP)
    };
    let scope = |r: &Reply| match r.msg.edns.as_ref().unwrap().option(EdnsCode::Subnet) {
        Some(EdnsOption::Subnet(s)) => (s.addr().to_string(), s.scope_prefix()),
        other => panic!("no client subnet echoed: {other:?}"),
    };
    // A client in eu-west behind the resolver: eu-1 first; the answer holds for its /24.
    let r = ask_ecs("web.prod.global.meridian.test.", "10.9.3.0", 24);
    assert_eq!(
        r.addresses(),
        ["127.0.1.4", "127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
    assert_eq!(scope(&r), ("10.9.3.0".to_string(), 24));
    // Prefix 0: the client stays anonymous, the resolver's address decides.
    let r = ask_ecs("web.prod.global.meridian.test.", "0.0.0.0", 0);
    assert_eq!(
        r.addresses(),
        ["127.0.1.2", "127.0.1.1", "127.0.1.3", "127.0.1.4"]
    );
    assert_eq!(scope(&r).1, 0);
    // Answers that do not depend on the client carry scope 0.
    let r = ask_ecs("web.prod.eu-west.global.meridian.test.", "10.9.3.0", 24);
    assert_eq!(r.addresses(), ["127.0.1.4"]);
    assert_eq!(scope(&r).1, 0);
    let r = ask_ecs("nope.prod.global.meridian.test.", "10.9.3.0", 24);
    assert_eq!(r.rcode(), ResponseCode::NXDomain);
    assert_eq!(scope(&r).1, 0);
}

/// `n` clusters named c000.., all Ready and serving `prod/web`, plus a client subnet.
fn big_view(n: usize) -> DnsView {
    let mut cfg: LbConfig = config();
    cfg.clusters = (0..n)
        .map(|i| LbCluster {
            name: format!("c{i:03}"),
            region: format!("r{}", i % 4),
            zone: format!("z{}", i % 8),
            address: format!("10.0.{}.{}", i / 250, 1 + i % 250),
            http_port: 1,
            peer_port: 2,
            dns_port: 3,
            ready: true,
        })
        .collect();
    DnsView::from_config(&cfg, |_, _, s| s == "web").unwrap()
}

#[test]
fn answers_too_large_for_the_client_are_truncated() {
    let name = "web.prod.global.meridian.test.";
    // 40 A records need ~680 bytes: over 512 without EDNS, fine with it.
    let v = big_view(40);
    let plain = ask(&v, name, RecordType::A, NOWHERE);
    assert!(plain.msg.metadata.truncation);
    assert!(plain.answers().is_empty());
    assert_eq!(plain.msg.queries.len(), 1);
    assert!(plain.answered.truncated);
    let edns = ask_raw(
        &v,
        &query_bytes(name, RecordType::A, Some(1232)),
        NOWHERE,
        UDP,
    );
    assert!(!edns.msg.metadata.truncation);
    assert_eq!(edns.answers().len(), 40);

    // 100 records: the client offers 4096 but this server sends at most 1232.
    let v = big_view(100);
    let q = query_bytes(name, RecordType::A, Some(4096));
    let r = ask_raw(&v, &q, NOWHERE, UDP);
    assert!(r.msg.metadata.truncation);
    assert!(r.msg.edns.is_some(), "OPT survives truncation");
    let r = ask_raw(&v, &q, NOWHERE, Transport::Udp { max_payload: 4096 });
    assert_eq!(r.answers().len(), 100);
    // A client offering less than 512 still gets 512.
    let r = ask_raw(
        &v,
        &query_bytes(name, RecordType::A, Some(100)),
        NOWHERE,
        UDP,
    );
    assert!(r.msg.metadata.truncation);
    // Over TCP everything fits.
    let r = ask_raw(
        &v,
        &query_bytes(name, RecordType::A, None),
        NOWHERE,
        Transport::Tcp,
    );
    assert!(!r.msg.metadata.truncation);
    assert_eq!(r.answers().len(), 100);
    // NS with glue at the apex too.
    let r = ask(&v, "global.meridian.test.", RecordType::NS, NOWHERE);
    assert!(r.msg.metadata.truncation && r.answers().is_empty() && r.additionals().is_empty());
    let r = ask_raw(
        &v,
        &query_bytes("global.meridian.test.", RecordType::NS, None),
        NOWHERE,
        Transport::Tcp,
    );
    assert_eq!((r.answers().len(), r.additionals().len()), (100, 100));
}

#[test]
fn the_output_buffer_is_reused() {
    let v = view();
    let mut out = Vec::new();
    let client: IpAddr = NOWHERE.parse().unwrap();
    let ns = query_bytes("global.meridian.test.", RecordType::NS, None);
    let a = query_bytes("ns-us-2.global.meridian.test.", RecordType::A, None);
    answer(&v, &ns, client, UDP, &mut out).unwrap();
    let capacity = out.capacity();
    answer(&v, &a, client, UDP, &mut out).unwrap();
    let m = Message::from_vec(&out).unwrap();
    assert_eq!(m.answers.len(), 1);
    assert_eq!(m.answers[0].data.to_string(), "127.0.1.2");
    assert_eq!(out.capacity(), capacity);
    assert_eq!(m.queries[0].query_class(), DNSClass::IN);
}

proptest::proptest! {
    /// Whatever arrives, the responder does not panic, and what it sends is a well-formed
    /// message with the query's ID: checked on random bytes and on valid queries with
    /// bytes overwritten.
    #[test]
    fn any_input_gets_a_well_formed_response_or_none(
        random in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        edits in proptest::collection::vec((0usize..200, proptest::num::u8::ANY), 0..6),
        edns in proptest::bool::ANY,
    ) {
        let v = view();
        let mut mutated = query_bytes(
            "web.prod.us-east1-a.us-east.global.meridian.test.",
            RecordType::A,
            edns.then_some(1232),
        );
        for (at, byte) in edits {
            let at = at % mutated.len();
            mutated[at] = byte;
        }
        let mut out = Vec::new();
        for q in [&random, &mutated] {
            match answer(&v, q, NOWHERE.parse().unwrap(), UDP, &mut out) {
                None => proptest::prop_assert!(out.is_empty()),
                Some(_) => {
                    let m = Message::from_vec(&out);
                    proptest::prop_assert!(m.is_ok(), "{q:?} -> {out:?}: {m:?}");
                    proptest::prop_assert_eq!(&out[..2], &q[..2]);
                    proptest::prop_assert!(out.len() <= 1232);
                }
            }
        }
    }
}

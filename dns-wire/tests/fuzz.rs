//! Differential fuzzing of the query side of the codec against hickory-proto (proptest, 256
//! cases by default; set `PROPTEST_CASES` to run longer): every query hickory builds (names
//! of any case, record types, EDNS with Client Subnet) reads back as the same ID, question
//! and EDNS payload, and bytes mutated from them never panic the parser.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use meridian_dns_wire::{Header, Question, display_name, parse_edns};
use proptest::prelude::*;

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("api.default.svc.cluster.local.".to_string()),
        Just("API.Default.SVC.cluster.local.".to_string()),
        Just("_https._tcp.api.default.svc.cluster.local.".to_string()),
        Just("web.shop.global.test.".to_string()),
        Just("example.org.".to_string()),
        "([a-zA-Z0-9_][a-zA-Z0-9_-]{0,19}\\.){1,6}".prop_map(|s| s),
    ]
}

fn rtype() -> impl Strategy<Value = RecordType> {
    prop_oneof![
        Just(RecordType::A),
        Just(RecordType::AAAA),
        Just(RecordType::SRV),
        Just(RecordType::SOA),
        Just(RecordType::PTR),
        Just(RecordType::CNAME),
        Just(RecordType::ANY),
        Just(RecordType::TXT),
    ]
}

fn query() -> impl Strategy<Value = (Vec<u8>, String, u16, Option<u16>)> {
    (
        any::<u16>(),
        name(),
        rtype(),
        prop::option::of((512u16..4096, prop::option::of((any::<[u8; 4]>(), 0u8..=32)))),
    )
        .prop_map(|(id, name, rtype, edns)| {
            let mut m = Message::query();
            m.metadata.id = id;
            m.add_query(Query::query(Name::from_ascii(&name).unwrap(), rtype));
            if let Some((size, ecs)) = edns {
                let mut e = Edns::new();
                e.set_max_payload(size);
                if let Some((addr, prefix)) = ecs {
                    // Bits past the prefix zero, as RFC 7871 requires (else FORMERR).
                    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                    let addr = u32::from_be_bytes(addr) & mask;
                    e.options_mut().insert(EdnsOption::Subnet(ClientSubnet::new(
                        IpAddr::from(addr.to_be_bytes()),
                        prefix,
                        0,
                    )));
                }
                m.set_edns(e);
            }
            (
                m.to_vec().unwrap(),
                name,
                u16::from(rtype),
                edns.map(|e| e.0),
            )
        })
}

proptest! {
    #[test]
    fn hickory_queries_read_back_the_same(
        (bytes, name, qtype, payload) in query(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
    ) {
        let header = Header::parse(&bytes).unwrap();
        prop_assert_eq!(header.id, u16::from_be_bytes([bytes[0], bytes[1]]));
        prop_assert_eq!(header.qdcount, 1);
        let question = Question::parse(&bytes).unwrap();
        prop_assert_eq!(display_name(question.name.wire()), name.to_ascii_lowercase());
        prop_assert_eq!(question.qtype, qtype);
        prop_assert_eq!(question.qclass, 1);
        let edns = parse_edns(&bytes, &header, question.end).unwrap();
        prop_assert_eq!(edns.map(|e| e.udp_payload), payload.map(|p| p.max(512)));
        // Mutated: whatever is read, never a panic, and a name stays within its limits.
        let mut mutated = bytes.clone();
        for (at, byte) in edits {
            let at = at % mutated.len();
            mutated[at] = byte;
        }
        if let Ok(h) = Header::parse(&mutated)
            && let Ok(q) = Question::parse(&mutated)
        {
            prop_assert!(q.name.wire().len() < meridian_dns_wire::MAX_NAME_LEN);
            let _ = parse_edns(&mutated, &h, q.end);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(h) = Header::parse(&bytes)
            && let Ok(q) = Question::parse(&bytes)
        {
            let _ = parse_edns(&bytes, &h, q.end);
        }
    }
}

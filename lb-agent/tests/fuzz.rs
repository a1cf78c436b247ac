//! Differential fuzzing of the two parsers that read untrusted bytes at the edge of every
//! cluster, under stable `cargo nextest` (proptest, 256 cases each by default; set
//! `PROPTEST_CASES` to run longer):
//!
//! - the lean HTTP/1 request parser against hyper's server: whatever request the proxy
//!   accepts, hyper accepts too and reads the same method, target and body (so no bytes
//!   can mean one request to the proxy and another upstream), and the head the proxy sends
//!   upstream parses back to the same request; generated from a grammar of the
//!   smuggling-prone pieces (framing headers, folds, bare LF, odd spacing) plus mutations;
//! - the DNS responder against hickory-proto: random queries hickory builds (names in and
//!   out of the zone, record types, EDNS with Client Subnet) and bytes mutated from them
//!   always get a response hickory reads, with the query's ID and question.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::IpAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use lb_agent::h1::chunked::Chunked;
use lb_agent::h1::codec::{Framing, HeadLimits, Parsed, RequestHead, parse_request};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What hyper's server made of some bytes: the first request it handed to its service.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    method: String,
    target: String,
    body: Vec<u8>,
}

/// Feeds `bytes` to a hyper HTTP/1 server and returns the first request it served, if any
/// (None when it refused them).
fn hyper_reads(bytes: &[u8]) -> Option<Seen> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Seen>(4);
        let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let tx = tx.clone();
            async move {
                let method = req.method().to_string();
                let target = req.uri().to_string();
                let body = req
                    .into_body()
                    .collect()
                    .await
                    .map(|b| b.to_bytes().to_vec());
                if let Ok(body) = body {
                    let _ = tx.try_send(Seen {
                        method,
                        target,
                        body,
                    });
                }
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        });
        // Half-close: the request is served although the client stopped writing.
        let conn = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(hyper_util::rt::TokioIo::new(server), svc);
        let drive = tokio::spawn(conn);
        let _ = client.write_all(bytes).await;
        let _ = client.shutdown().await;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            client.read_to_end(&mut sink),
        )
        .await;
        drive.abort();
        rx.try_recv().ok()
    })
}

/// What the proxy makes of the same bytes: the request it would forward, its body read by
/// its own framing, and the head it writes upstream. `None` when it refuses them or hands
/// them to hyper (which then reads them itself).
fn proxy_reads(bytes: &[u8]) -> Option<(Seen, Vec<u8>)> {
    let mut head = RequestHead::default();
    match parse_request(bytes, &mut head, &HeadLimits::default()) {
        Ok(Parsed::Complete) => {}
        _ => return None,
    }
    let rest = &bytes[head.len..];
    let body = match head.framing {
        Framing::Empty => Vec::new(),
        Framing::Length(n) => {
            let n = usize::try_from(n).ok()?;
            // Incomplete: the proxy would wait; hyper sees the stream end early.
            rest.get(..n)?.to_vec()
        }
        Framing::Chunked => {
            let mut c = Chunked::default();
            let mut payload = Vec::new();
            c.feed(rest, |d| payload.extend_from_slice(d)).ok()?;
            if !c.done() {
                return None;
            }
            payload
        }
        Framing::ToEof => return None,
    };
    let line_end = head.upstream.iter().position(|b| *b == b' ')?;
    let method = String::from_utf8_lossy(&head.upstream[..line_end]).into_owned();
    let after = &head.upstream[line_end + 1..];
    let target_end = after.iter().position(|b| *b == b' ')?;
    let target = String::from_utf8_lossy(&after[..target_end]).into_owned();
    let mut upstream = Vec::new();
    lb_agent::h1::codec::write_upstream_head(&mut upstream, &head, Some(b"upstream.test"), None);
    Some((
        Seen {
            method,
            target,
            body,
        },
        upstream,
    ))
}

/// Pieces of request heads that parsers have disagreed on.
fn header_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Host: web.shop".to_string()),
        Just("host: web.shop".to_string()),
        Just("Content-Length: 5".to_string()),
        Just("Content-Length: 0".to_string()),
        Just("Content-Length:5".to_string()),
        Just("Content-Length: 5 ".to_string()),
        Just("Content-Length: 05".to_string()),
        Just("Content-Length: +5".to_string()),
        Just("Content-Length: 5, 5".to_string()),
        Just("Content-Length: -1".to_string()),
        Just("Content-Length: 99999999999999999999".to_string()),
        Just("Content-Length : 5".to_string()),
        Just("Transfer-Encoding: chunked".to_string()),
        Just("Transfer-Encoding: Chunked".to_string()),
        Just("Transfer-Encoding: chunked, gzip".to_string()),
        Just("Transfer-Encoding: gzip, chunked".to_string()),
        Just("Transfer-Encoding:\tchunked".to_string()),
        Just("Transfer-Encoding: xchunked".to_string()),
        Just("Transfer-Encoding : chunked".to_string()),
        Just(" Transfer-Encoding: chunked".to_string()),
        Just("Transfer-Encoding:\r\n chunked".to_string()),
        Just("X-Folded: a\r\n b".to_string()),
        Just("Connection: close".to_string()),
        Just("Connection: keep-alive, x-drop".to_string()),
        Just("X-Drop: 1".to_string()),
        Just("Upgrade: websocket".to_string()),
        Just("Connection: upgrade".to_string()),
        Just("Expect: 100-continue".to_string()),
        Just("X-Meridian-Forwarded-By: b".to_string()),
        "[a-zA-Z-]{1,12}: [ -~]{0,20}".prop_map(|s| s),
    ]
}

fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"5\r\nhello\r\n0\r\n\r\n".to_vec()),
        Just(b"5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n".to_vec()),
        Just(b"0\r\n\r\n".to_vec()),
        Just(b"5\nhello\r\n0\r\n\r\n".to_vec()),
        Just(b"5\r\nhello\n0\r\n\r\n".to_vec()),
        Just(b"+5\r\nhello\r\n0\r\n\r\n".to_vec()),
        Just(b"5 \r\nhello\r\n0\r\n\r\n".to_vec()),
        Just(b"fffffffffffffffff\r\n".to_vec()),
        Just(b"3\r\nabcdef\r\n0\r\n\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

/// A request: line, headers, terminators (mostly CRLF), body, plus a few byte edits.
fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just("GET"),
            Just("POST"),
            Just("PUT"),
            Just("HEAD"),
            Just("DELETE"),
            Just("G\x01T")
        ],
        prop_oneof![
            Just("/"),
            Just("/a?b=c"),
            Just("http://web.shop/p"),
            Just("*"),
            Just("/sp ace"),
            Just("/a#frag"),
            Just("nope")
        ],
        prop_oneof![
            Just("HTTP/1.1"),
            Just("HTTP/1.0"),
            Just("HTTP/1.2"),
            Just("http/1.1")
        ],
        proptest::collection::vec((header_line(), prop::bool::weighted(0.05)), 0..6),
        prop::bool::weighted(0.05),
        chunked_body(),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
    )
        .prop_map(
            |(method, target, version, headers, bare_end, body, edits)| {
                let mut out = format!("{method} {target} {version}\r\n").into_bytes();
                for (h, bare) in headers {
                    out.extend_from_slice(h.as_bytes());
                    out.extend_from_slice(if bare { b"\n" } else { b"\r\n" });
                }
                out.extend_from_slice(if bare_end { b"\n" } else { b"\r\n" });
                out.extend_from_slice(&body);
                for (at, byte) in edits {
                    let at = at % out.len();
                    out[at] = byte;
                }
                out
            },
        )
}

proptest! {
    #[test]
    fn what_the_proxy_accepts_hyper_reads_the_same(bytes in request()) {
        if let Some((ours, upstream)) = proxy_reads(&bytes) {
            let theirs = hyper_reads(&bytes);
            prop_assert!(theirs.is_some(), "hyper refused what the proxy accepted: {:?}", String::from_utf8_lossy(&bytes));
            let theirs = theirs.unwrap();
            prop_assert_eq!(&ours.method, &theirs.method);
            prop_assert_eq!(&ours.body, &theirs.body, "{:?}", String::from_utf8_lossy(&bytes));
            // hyper keeps an absolute-form target; the proxy sends its origin form.
            prop_assert!(theirs.target.ends_with(&ours.target) || ours.target == "/" , "{} vs {}", theirs.target, ours.target);
            // The head the proxy writes upstream, with the same body, is read back as the
            // same request by the proxy and by hyper: its rewrite adds no ambiguity.
            let mut again = upstream.clone();
            let mut head = RequestHead::default();
            prop_assert_eq!(parse_request(&upstream, &mut head, &HeadLimits::default()), Ok(Parsed::Complete));
            again.extend_from_slice(&bytes[proxy_head_len(&bytes)..]);
            let (reread, _) = proxy_reads(&again).expect("the upstream head parses");
            prop_assert_eq!(&reread, &ours);
            prop_assert_eq!(hyper_reads(&again), Some(ours));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_parser(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut head = RequestHead::default();
        let _ = parse_request(&bytes, &mut head, &HeadLimits::default());
        let mut c = Chunked::default();
        let _ = c.feed(&bytes, |_| {});
    }
}

fn proxy_head_len(bytes: &[u8]) -> usize {
    let mut head = RequestHead::default();
    let _ = parse_request(bytes, &mut head, &HeadLimits::default());
    head.len
}

mod dns {
    use super::*;
    use fed_api::lbconfig::{ClientSubnet, LbCluster, LbConfig, LbPort, LbService};
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::rdata::opt::{ClientSubnet as Ecs, EdnsOption};
    use hickory_proto::rr::{Name, RecordType};
    use lb_agent::dns::{DnsView, Transport, answer, config_serves};

    fn view() -> DnsView {
        let cluster = |n: &str, r: &str, z: &str, a: &str| LbCluster {
            name: n.into(),
            region: r.into(),
            zone: z.into(),
            address: a.into(),
            http_port: 8080,
            peer_port: 8081,
            dns_port: 5353,
            ready: true,
        };
        let cfg = LbConfig {
            dns_zone: "global.test".into(),
            cluster: "a".into(),
            ttl_seconds: 5,
            clusters: vec![
                cluster("a", "eu", "eu-1", "127.0.1.1"),
                cluster("b", "eu", "eu-2", "127.0.1.2"),
                cluster("c", "us", "us-1", "127.0.1.3"),
            ],
            services: vec![LbService {
                namespace: "shop".into(),
                name: "web".into(),
                ports: vec![LbPort {
                    name: "http".into(),
                    port: 80,
                    protocol: "http".into(),
                    listen_port: 30080,
                }],
                backends: [("a".to_string(), 1), ("c".to_string(), 2)].into(),
                ..Default::default()
            }],
            client_subnets: vec![ClientSubnet {
                cidr: "10.0.0.0/8".into(),
                region: "us".into(),
                zone: String::new(),
            }],
        };
        DnsView::from_config(&cfg, config_serves(&cfg)).unwrap()
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("web.shop.global.test."),
            Just("WEB.shop.eu.global.test."),
            Just("web.shop.eu-2.eu.global.test."),
            Just("_http._tcp.web.shop.global.test."),
            Just("_80._tcp.web.shop.global.test."),
            Just("_tcp.web.shop.global.test."),
            Just("c.web.shop.global.test."),
            Just("ns-b.global.test."),
            Just("global.test."),
            Just("shop.global.test."),
            Just("nope.global.test."),
            Just("example.org."),
        ]
        .prop_map(str::to_string)
    }

    fn rtype() -> impl Strategy<Value = RecordType> {
        prop_oneof![
            Just(RecordType::A),
            Just(RecordType::AAAA),
            Just(RecordType::SRV),
            Just(RecordType::SOA),
            Just(RecordType::NS),
            Just(RecordType::CNAME),
            Just(RecordType::ANY),
            Just(RecordType::TXT),
            Just(RecordType::AXFR),
        ]
    }

    fn query() -> impl Strategy<Value = Vec<u8>> {
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
                        let ip = IpAddr::from(addr);
                        e.options_mut()
                            .insert(EdnsOption::Subnet(Ecs::new(ip, prefix, 0)));
                    }
                    m.set_edns(e);
                }
                m.to_vec().unwrap()
            })
    }

    proptest! {
        #[test]
        fn hickory_reads_every_response_with_the_query_id_and_question(
            q in query(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            tcp in any::<bool>(),
        ) {
            let v = view();
            let transport = if tcp { Transport::Tcp } else { Transport::Udp { max_payload: 1232 } };
            let mut out = Vec::new();
            let asked = Message::from_vec(&q).unwrap();
            let answered = answer(&v, &q, "192.0.2.1".parse().unwrap(), transport, &mut out);
            prop_assert!(answered.is_some());
            let m = Message::from_vec(&out);
            prop_assert!(m.is_ok(), "{:?}", m);
            let m = m.unwrap();
            prop_assert_eq!(m.metadata.id, asked.metadata.id);
            prop_assert_eq!(&m.queries, &asked.queries);
            prop_assert_eq!(m.answers.len(), usize::from(answered.unwrap().answers));
            // Mutated: never a panic, and what is sent is well formed with the same ID.
            let mut mutated = q.clone();
            for (at, byte) in edits {
                let at = at % mutated.len();
                mutated[at] = byte;
            }
            if answer(&v, &mutated, "192.0.2.1".parse().unwrap(), transport, &mut out).is_some() {
                let m = Message::from_vec(&out);
                prop_assert!(m.is_ok(), "{:?} -> {:?}", mutated, m);
                prop_assert_eq!(&out[..2], &mutated[..2]);
            }
        }
    }
}

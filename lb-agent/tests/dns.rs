//! The DNS responder over real UDP and TCP sockets on loopback, read with hickory-proto:
//! nearest-first ordering by client subnet, region/zone names and their CNAME fallback,
//! NXDOMAIN vs NODATA, the apex, truncation and TCP retry, and views published while
//! serving.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fed_api::lbconfig::{ClientSubnet, LbCluster, LbConfig, LbService};
use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use lb_agent::dns::{
    DnsMetrics, DnsView, Rcode, ServeOptions, config_serves, serve_tcp, serve_udp,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

const ZONE: &str = "global.meridian.test.";
/// Every network wait is bounded by this, so a broken server fails the test instead of
/// hanging it.
const DEADLINE: Duration = Duration::from_secs(10);

fn cluster(name: &str, region: &str, zone: &str, address: &str) -> LbCluster {
    LbCluster {
        name: name.into(),
        region: region.into(),
        zone: zone.into(),
        address: address.into(),
        http_port: 8080,
        peer_port: 8081,
        dns_port: 5353,
        ready: true,
    }
}

/// This agent is us-1 (us-east1-a). Clients from 127.0.2.0/24 are in eu-west, from
/// 127.0.3.0/24 in us-east1-b; 127.0.0.1 is covered by no subnet.
fn config() -> LbConfig {
    LbConfig {
        dns_zone: "Global.Meridian.Test".into(),
        cluster: "us-1".into(),
        ttl_seconds: 5,
        clusters: vec![
            cluster("us-1", "us-east", "us-east1-a", "127.0.1.1"),
            cluster("us-2", "us-east", "us-east1-b", "127.0.1.2"),
            cluster("eu-1", "eu-west", "eu-west1-a", "127.0.1.3"),
            cluster("eu-2", "eu-west", "eu-west1-a", "127.0.1.4"),
        ],
        services: vec![
            LbService {
                namespace: "shop".into(),
                name: "cart".into(),
                ports: vec![],
                backends: [("us-1", 1), ("us-2", 1), ("eu-1", 2), ("eu-2", 0)]
                    .map(|(c, n)| (c.to_string(), n))
                    .into(),
                ..Default::default()
            },
            LbService {
                namespace: "shop".into(),
                name: "idle".into(),
                ports: vec![],
                backends: Default::default(),
                ..Default::default()
            },
        ],
        client_subnets: vec![
            ClientSubnet {
                cidr: "127.0.2.0/24".into(),
                region: "eu-west".into(),
                zone: String::new(),
            },
            ClientSubnet {
                cidr: "127.0.3.0/24".into(),
                region: "us-east".into(),
                zone: "us-east1-b".into(),
            },
        ],
    }
}

/// A responder on loopback, and the handle that publishes new views to it.
struct Server {
    udp: SocketAddr,
    tcp: SocketAddr,
    publish: watch::Sender<Arc<DnsView>>,
    metrics: DnsMetrics,
}

async fn start(view: DnsView, options: ServeOptions) -> Server {
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (udp_addr, tcp_addr) = (udp.local_addr().unwrap(), tcp.local_addr().unwrap());
    let (publish, rx) = watch::channel(Arc::new(view));
    let metrics = DnsMetrics::new();
    tokio::spawn(serve_udp(udp, rx.clone(), metrics.clone(), options.clone()));
    tokio::spawn(serve_tcp(tcp, rx, metrics.clone(), options));
    Server {
        udp: udp_addr,
        tcp: tcp_addr,
        publish,
        metrics,
    }
}

fn query(name: &str, rtype: RecordType, edns: Option<u16>) -> Message {
    let mut m = Message::query();
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m
}

/// Sends `q` over UDP from `from` (any 127/8 address works on loopback) and reads the
/// response with the same ID.
async fn udp(server: SocketAddr, from: &str, q: &Message) -> Message {
    let from: IpAddr = from.parse().unwrap();
    let socket = UdpSocket::bind((from, 0)).await.unwrap();
    socket.send_to(&q.to_vec().unwrap(), server).await.unwrap();
    let mut buf = vec![0; 65_535];
    let (len, peer) = tokio::time::timeout(DEADLINE, socket.recv_from(&mut buf))
        .await
        .expect("a UDP response before the deadline")
        .unwrap();
    assert_eq!(peer, server);
    let m = Message::from_vec(&buf[..len]).unwrap();
    assert_eq!(m.metadata.id, q.metadata.id);
    m
}

/// Sends every query on one TCP connection before reading any response (pipelining)
/// and returns the responses in order.
async fn tcp(server: &Server, queries: &[Message]) -> Vec<Message> {
    let mut stream = TcpStream::connect(server.tcp).await.unwrap();
    let mut out = Vec::new();
    for q in queries {
        let bytes = q.to_vec().unwrap();
        out.extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    stream.write_all(&out).await.unwrap();
    let mut responses = Vec::new();
    for q in queries {
        let read = async {
            let len = stream.read_u16().await?;
            let mut buf = vec![0; usize::from(len)];
            stream.read_exact(&mut buf).await?;
            std::io::Result::Ok(buf)
        };
        let buf = tokio::time::timeout(DEADLINE, read)
            .await
            .expect("a TCP response before the deadline")
            .unwrap();
        let m = Message::from_vec(&buf).unwrap();
        assert_eq!(m.metadata.id, q.metadata.id);
        responses.push(m);
    }
    responses
}

fn lines(records: &[hickory_proto::rr::Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data))
        .collect()
}

fn addresses(m: &Message) -> Vec<String> {
    m.answers
        .iter()
        .filter(|r| r.record_type() == RecordType::A)
        .map(|r| r.data.to_string())
        .collect()
}

fn default_view() -> DnsView {
    let cfg = config();
    DnsView::from_config(&cfg, config_serves(&cfg)).unwrap()
}

#[tokio::test]
async fn answers_are_ordered_by_the_askers_subnet() {
    let s = start(default_view(), ServeOptions::default()).await;
    let q = query("cart.shop.global.meridian.test.", RecordType::A, None);
    // No subnet: this agent's cluster, then its region, then the rest (eu-2 has no backends).
    let m = udp(s.udp, "127.0.0.1", &q).await;
    assert!(m.metadata.authoritative);
    assert_eq!(addresses(&m), ["127.0.1.1", "127.0.1.2", "127.0.1.3"]);
    assert!(m.answers.iter().all(|r| r.ttl == 5));
    assert_eq!(
        addresses(&udp(s.udp, "127.0.2.9", &q).await),
        ["127.0.1.3", "127.0.1.1", "127.0.1.2"]
    );
    assert_eq!(
        addresses(&udp(s.udp, "127.0.3.9", &q).await),
        ["127.0.1.2", "127.0.1.1", "127.0.1.3"]
    );
    // Same answer over TCP, and the client address counts there too.
    let over_tcp = tcp(&s, &[q]).await;
    assert_eq!(
        addresses(&over_tcp[0]),
        ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
    assert_eq!(s.metrics.responses(Rcode::NoError, "A"), 4);
}

#[tokio::test]
async fn region_and_zone_names_with_cname_fallback() {
    let s = start(default_view(), ServeOptions::default()).await;
    let a = |name: &'static str| {
        let s = &s;
        async move { udp(s.udp, "127.0.0.1", &query(name, RecordType::A, None)).await }
    };
    let m = a("cart.shop.eu-west.global.meridian.test.").await;
    assert_eq!(addresses(&m), ["127.0.1.3"]);
    let m = a("cart.shop.us-east1-b.us-east.global.meridian.test.").await;
    assert_eq!(addresses(&m), ["127.0.1.2"]);
    // Nothing serves cart from eu-west1-a other than eu-1; stop eu-1 and the zone and
    // the region are CNAMEs down to the global name.
    let cfg = config();
    let view = DnsView::from_config(&cfg, |c, ns, svc| {
        c != "eu-1" && config_serves(&cfg)(c, ns, svc)
    })
    .unwrap();
    s.publish.send(Arc::new(view)).unwrap();
    let m = a("cart.shop.eu-west1-a.eu-west.global.meridian.test.").await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(
        lines(&m.answers),
        [
            format!("cart.shop.eu-west1-a.eu-west.{ZONE} 5 CNAME cart.shop.eu-west.{ZONE}"),
            format!("cart.shop.eu-west.{ZONE} 5 CNAME cart.shop.{ZONE}"),
            format!("cart.shop.{ZONE} 5 A 127.0.1.1"),
            format!("cart.shop.{ZONE} 5 A 127.0.1.2"),
        ]
    );
}

#[tokio::test]
async fn nxdomain_and_nodata_carry_the_soa() {
    let s = start(default_view(), ServeOptions::default()).await;
    let cases = [
        (
            "nope.shop.global.meridian.test.",
            RecordType::A,
            ResponseCode::NXDomain,
        ),
        (
            "cart.shop.mars.global.meridian.test.",
            RecordType::A,
            ResponseCode::NXDomain,
        ),
        (
            "cart.shop.global.meridian.test.",
            RecordType::AAAA,
            ResponseCode::NoError,
        ),
        (
            "cart.shop.global.meridian.test.",
            RecordType::TXT,
            ResponseCode::NoError,
        ),
        (
            "idle.shop.global.meridian.test.",
            RecordType::A,
            ResponseCode::NoError,
        ),
        (
            "shop.global.meridian.test.",
            RecordType::A,
            ResponseCode::NoError,
        ),
    ];
    for (name, rtype, rcode) in cases {
        let m = udp(s.udp, "127.0.0.1", &query(name, rtype, None)).await;
        assert_eq!(m.metadata.response_code, rcode, "{name} {rtype}");
        assert!(m.answers.is_empty(), "{name} {rtype}");
        assert_eq!(m.authorities.len(), 1, "{name} {rtype}");
        assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
        assert_eq!(m.authorities[0].name.to_string(), ZONE);
    }
    let m = udp(
        s.udp,
        "127.0.0.1",
        &query("example.org.", RecordType::A, None),
    )
    .await;
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    assert_eq!(s.metrics.responses(Rcode::NxDomain, "A"), 2);
    assert_eq!(s.metrics.responses(Rcode::Refused, "A"), 1);
}

#[tokio::test]
async fn apex_soa_ns_and_glue() {
    let view = default_view();
    let serial = view.serial();
    let s = start(view, ServeOptions::default()).await;
    let m = udp(s.udp, "127.0.0.1", &query(ZONE, RecordType::SOA, None)).await;
    assert_eq!(
        lines(&m.answers),
        [format!(
            "{ZONE} 5 SOA ns-us-1.{ZONE} hostmaster.{ZONE} {serial} 3600 600 86400 5"
        )]
    );
    let m = udp(s.udp, "127.0.0.1", &query(ZONE, RecordType::NS, Some(1232))).await;
    assert_eq!(
        lines(&m.answers),
        ["eu-1", "eu-2", "us-1", "us-2"].map(|c| format!("{ZONE} 5 NS ns-{c}.{ZONE}"))
    );
    assert_eq!(
        lines(&m.additionals),
        [("eu-1", 3), ("eu-2", 4), ("us-1", 1), ("us-2", 2)]
            .map(|(c, n)| format!("ns-{c}.{ZONE} 5 A 127.0.1.{n}"))
    );
    let m = udp(
        s.udp,
        "127.0.0.1",
        &query("ns-us-2.global.meridian.test.", RecordType::A, None),
    )
    .await;
    assert_eq!(addresses(&m), ["127.0.1.2"]);
}

#[tokio::test]
async fn truncated_udp_answers_are_complete_over_tcp() {
    // 50 serving clusters: 50 A records do not fit in 512 bytes.
    let mut cfg = config();
    cfg.clusters = (0..50)
        .map(|i| cluster(&format!("c{i:02}"), "r", "z", &format!("127.0.5.{}", i + 1)))
        .collect();
    let view = DnsView::from_config(&cfg, |_, _, svc| svc == "cart").unwrap();
    let s = start(view, ServeOptions::default()).await;
    let q = query("cart.shop.global.meridian.test.", RecordType::A, None);
    let m = udp(s.udp, "127.0.0.1", &q).await;
    assert!(m.metadata.truncation);
    assert!(m.answers.is_empty());
    assert_eq!(s.metrics.truncated_total(), 1);
    // With EDNS0 and 1232 bytes it fits.
    let m = udp(
        s.udp,
        "127.0.0.1",
        &query("cart.shop.global.meridian.test.", RecordType::A, Some(1232)),
    )
    .await;
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 50);
    // The retry over TCP, pipelined with two more queries on the same connection.
    let responses = tcp(
        &s,
        &[
            q,
            query(ZONE, RecordType::NS, None),
            query("nope.shop.global.meridian.test.", RecordType::A, None),
        ],
    )
    .await;
    assert!(!responses[0].metadata.truncation);
    assert_eq!(addresses(&responses[0]).len(), 50);
    assert_eq!(
        (responses[1].answers.len(), responses[1].additionals.len()),
        (50, 50)
    );
    assert_eq!(responses[2].metadata.response_code, ResponseCode::NXDomain);
}

#[tokio::test]
async fn published_views_change_answers_while_serving() {
    let cfg = config();
    let s = start(default_view(), ServeOptions::default()).await;
    let q = query("cart.shop.global.meridian.test.", RecordType::A, None);
    // A TCP connection opened before the change sees it too.
    let mut conn = TcpStream::connect(s.tcp).await.unwrap();
    let ask_tcp = async |conn: &mut TcpStream| {
        let bytes = q.to_vec().unwrap();
        conn.write_all(&(bytes.len() as u16).to_be_bytes())
            .await
            .unwrap();
        conn.write_all(&bytes).await.unwrap();
        let len = tokio::time::timeout(DEADLINE, conn.read_u16())
            .await
            .unwrap()
            .unwrap();
        let mut buf = vec![0; usize::from(len)];
        conn.read_exact(&mut buf).await.unwrap();
        addresses(&Message::from_vec(&buf).unwrap())
    };
    assert_eq!(
        ask_tcp(&mut conn).await,
        ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
    let before = default_view().serial();

    // us-1 stops serving cart (its health checks fail): gone from every answer.
    let without = DnsView::from_config(&cfg, |c, ns, svc| {
        c != "us-1" && config_serves(&cfg)(c, ns, svc)
    })
    .unwrap();
    assert_ne!(without.serial(), before);
    s.publish.send(Arc::new(without)).unwrap();
    assert_eq!(
        addresses(&udp(s.udp, "127.0.0.1", &q).await),
        ["127.0.1.2", "127.0.1.3"]
    );
    assert_eq!(ask_tcp(&mut conn).await, ["127.0.1.2", "127.0.1.3"]);
    let zone_a = query(
        "cart.shop.us-east1-a.us-east.global.meridian.test.",
        RecordType::A,
        None,
    );
    let m = udp(s.udp, "127.0.0.1", &zone_a).await;
    assert_eq!(m.answers[0].record_type(), RecordType::CNAME);
    assert_eq!(addresses(&m), ["127.0.1.2"]);

    // It recovers.
    s.publish.send(Arc::new(default_view())).unwrap();
    assert_eq!(
        addresses(&udp(s.udp, "127.0.0.1", &q).await),
        ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
    assert_eq!(
        ask_tcp(&mut conn).await,
        ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    );
    assert_eq!(
        addresses(&udp(s.udp, "127.0.0.1", &zone_a).await),
        ["127.0.1.1"]
    );

    // A publisher that goes away leaves the last view serving.
    drop(s.publish);
    assert_eq!(addresses(&udp(s.udp, "127.0.0.1", &q).await).len(), 3);
}

#[tokio::test]
async fn idle_tcp_connections_are_closed_and_garbage_is_not_answered() {
    let options = ServeOptions {
        tcp_idle_timeout: Duration::from_millis(200),
        ..ServeOptions::default()
    };
    let s = start(default_view(), options).await;
    // Idle: the server closes; the read sees EOF well before our own deadline.
    let mut idle = TcpStream::connect(s.tcp).await.unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(DEADLINE, idle.read(&mut buf))
        .await
        .expect("the server closes an idle connection")
        .unwrap();
    assert_eq!(n, 0);
    // A response sent to the server is dropped, not answered; the next query is.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut response = query(ZONE, RecordType::SOA, None);
    response.metadata.message_type = hickory_proto::op::MessageType::Response;
    socket
        .send_to(&response.to_vec().unwrap(), s.udp)
        .await
        .unwrap();
    let real = query(ZONE, RecordType::SOA, None);
    socket
        .send_to(&real.to_vec().unwrap(), s.udp)
        .await
        .unwrap();
    let mut buf = vec![0; 4096];
    let (len, _) = tokio::time::timeout(DEADLINE, socket.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        Message::from_vec(&buf[..len]).unwrap().metadata.id,
        real.metadata.id
    );
    assert_eq!(s.metrics.dropped_total(), 1);
}

#[tokio::test]
async fn tcp_connections_beyond_the_limit_are_closed() {
    let options = ServeOptions {
        tcp_max_connections: 1,
        ..ServeOptions::default()
    };
    let s = start(default_view(), options).await;
    // The first connection is served (its answer proves it holds the only slot)...
    let mut first = TcpStream::connect(s.tcp).await.unwrap();
    let q = query(ZONE, RecordType::SOA, None).to_vec().unwrap();
    first
        .write_all(&(q.len() as u16).to_be_bytes())
        .await
        .unwrap();
    first.write_all(&q).await.unwrap();
    let len = tokio::time::timeout(DEADLINE, first.read_u16())
        .await
        .unwrap()
        .unwrap();
    assert!(len > 12);
    // ... the second is closed without an answer.
    let mut second = TcpStream::connect(s.tcp).await.unwrap();
    second
        .write_all(&(q.len() as u16).to_be_bytes())
        .await
        .unwrap();
    let _ = second.write_all(&q).await;
    let mut buf = [0u8; 2];
    let read = tokio::time::timeout(DEADLINE, second.read(&mut buf))
        .await
        .expect("the server closes the connection");
    // EOF, or a reset when our query arrived after the close.
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

/// Several `SO_REUSEPORT` sockets on one port, each served by its own task, as the agent
/// runs one per worker: a burst from many clients (sent before any answer is read, so
/// each socket drains a queue of them) is answered in full, by more than one socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reuseport_sockets_share_the_port_and_answer_bursts() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let sockets = lb_agent::dns::bind_udp_sockets(port, 4).unwrap();
    assert_eq!(sockets.len(), 4);
    let (_publish, rx) = watch::channel(Arc::new(default_view()));
    let per_socket: Vec<DnsMetrics> = (0..4).map(|_| DnsMetrics::new()).collect();
    for (s, m) in sockets.into_iter().zip(&per_socket) {
        assert_eq!(s.local_addr().unwrap(), port);
        tokio::spawn(serve_udp(s, rx.clone(), m.clone(), ServeOptions::default()));
    }
    let q = query("cart.shop.global.meridian.test.", RecordType::A, None);
    let mut clients = Vec::new();
    // Small enough that the queued queries fit the sockets' default receive buffers.
    for _ in 0..16 {
        let c = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        c.connect(port).await.unwrap();
        clients.push(c);
    }
    const BURST: u16 = 16;
    for c in &clients {
        for id in 0..BURST {
            let mut q = q.clone();
            q.metadata.id = id;
            c.send(&q.to_vec().unwrap()).await.unwrap();
        }
    }
    for c in &clients {
        let mut ids = std::collections::BTreeSet::new();
        let mut buf = vec![0; 4096];
        while ids.len() < usize::from(BURST) {
            let len = tokio::time::timeout(DEADLINE, c.recv(&mut buf))
                .await
                .expect("every query of the burst answered")
                .unwrap();
            let m = Message::from_vec(&buf[..len]).unwrap();
            assert_eq!(addresses(&m), ["127.0.1.1", "127.0.1.2", "127.0.1.3"]);
            ids.insert(m.metadata.id);
        }
    }
    let counts: Vec<u64> = per_socket
        .iter()
        .map(|m| m.responses(Rcode::NoError, "A"))
        .collect();
    assert_eq!(
        counts.iter().sum::<u64>(),
        16 * u64::from(BURST),
        "{counts:?}"
    );
    assert!(
        counts.iter().filter(|n| **n > 0).count() > 1,
        "the kernel spread 16 clients over the sockets: {counts:?}"
    );
}

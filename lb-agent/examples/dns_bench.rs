//! Throughput and latency of the lb-agent DNS responder.
//!
//! Builds a realistic view (100 clusters in 5 regions × 3 zones, 1,000 Services in 20
//! namespaces, each served by about a third of the clusters, 20 client subnets; a quarter
//! of the Services each under the nearest, failover, weighted and geo policies, each with a
//! TCP and a UDP port for SRV), then measures:
//! 1. pure `answer()` throughput on one thread;
//! 2. UDP serving: `serve_udp` on its own thread (one socket per server worker, as the
//!    agent runs it), driven by a load generator on another thread (several sockets, many queries outstanding on
//!    each); queries/s is the median of several 2-second rounds, latency the median and
//!    p99 of every round trip.
//!
//! Run: `cargo run --release -p lb-agent --example dns_bench`
//! (on a quiet machine `taskset -c 0,1` keeps server and generator on two known cores).
//! Options: `--rounds N` (default 5), `--sockets N` (4), `--window N` (64 outstanding
//! queries per socket), `--server-threads N` (1: UDP sockets with `SO_REUSEPORT` and
//! runtime workers serving them, as the agent runs one per worker).

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fed_api::lbconfig::{
    ClientSubnet, LbCluster, LbConfig, LbPort, LbService, PolicyKind, TrafficPolicy,
};
use lb_agent::dns::wire::{self, rtype};
use lb_agent::dns::{
    DnsMetrics, DnsView, Rcode, ServeOptions, Transport, answer, bind_udp_sockets, serve_udp,
};
use tokio::net::UdpSocket;
use tokio::sync::watch;

const ROUND: Duration = Duration::from_secs(2);
/// Queries are sent round-robin from this many pre-encoded ones.
const DISTINCT_QUERIES: usize = 8192;

/// A small deterministic generator, so every run measures the same view and queries.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u32
    }

    fn below(&mut self, n: usize) -> usize {
        self.next() as usize % n
    }
}

const REGIONS: usize = 5;
const ZONES_PER_REGION: usize = 3;

fn config() -> LbConfig {
    let clusters = (0..100)
        .map(|i| {
            let region = i % REGIONS;
            LbCluster {
                name: format!("cluster-{i:03}"),
                region: format!("region-{region}"),
                zone: format!("region-{region}-{}", (i / REGIONS) % ZONES_PER_REGION),
                address: format!("10.200.{}.{}", i / 200, 1 + i % 200),
                http_port: 8080,
                peer_port: 8081,
                dns_port: 53,
                ready: i % 17 != 0,
            }
        })
        .collect::<Vec<_>>();
    let mut rng = Lcg(7);
    let services = (0..1000)
        .map(|i| {
            let policy = match i % 4 {
                0 => TrafficPolicy::default(),
                1 => TrafficPolicy {
                    kind: PolicyKind::Failover,
                    order: vec![
                        format!("region-{}", i % REGIONS),
                        format!("cluster-{:03}", i % 100),
                    ],
                    ..Default::default()
                },
                2 => TrafficPolicy {
                    kind: PolicyKind::Weighted,
                    weights: (0..5)
                        .map(|k| {
                            (
                                format!("cluster-{:03}", (i * 7 + k * 13) % 100),
                                1 + k as u32,
                            )
                        })
                        .collect(),
                    ..Default::default()
                },
                _ => TrafficPolicy {
                    kind: PolicyKind::Geo,
                    ..Default::default()
                },
            };
            LbService {
                namespace: format!("team-{:02}", i % 20),
                name: format!("svc-{i:04}"),
                ports: vec![
                    LbPort {
                        name: "http".into(),
                        port: 80,
                        protocol: "http".into(),
                        listen_port: 30000 + (2 * i) as u16,
                    },
                    LbPort {
                        name: "dns".into(),
                        port: 53,
                        protocol: "udp".into(),
                        listen_port: 30001 + (2 * i) as u16,
                    },
                ],
                backends: clusters
                    .iter()
                    .filter_map(|c| {
                        let n = rng.next();
                        n.is_multiple_of(3).then(|| (c.name.clone(), 1 + n % 5))
                    })
                    .collect(),
                policy,
                ..Default::default()
            }
        })
        .collect();
    let client_subnets = (0..20)
        .map(|i| ClientSubnet {
            cidr: format!("10.{}.0.0/16", 100 + i),
            region: format!("region-{}", i % REGIONS),
            zone: if i % 2 == 0 {
                format!("region-{}-{}", i % REGIONS, i % ZONES_PER_REGION)
            } else {
                String::new()
            },
        })
        .collect();
    LbConfig {
        dns_zone: "global.meridian.example".into(),
        cluster: "cluster-000".into(),
        ttl_seconds: 5,
        clusters,
        services,
        client_subnets,
    }
}

/// A mix like a resolver farm would send: mostly A for global names, some region and
/// zone names, SRV for a port, some AAAA (NODATA) and misspelled names (NXDOMAIN); half
/// with EDNS0.
fn queries(cfg: &LbConfig) -> Vec<Vec<u8>> {
    let mut rng = Lcg(11);
    (0..DISTINCT_QUERIES)
        .map(|i| {
            let s = &cfg.services[rng.below(cfg.services.len())];
            let region = rng.below(REGIONS);
            let zone = rng.below(ZONES_PER_REGION);
            let roll = rng.below(100);
            let name = match roll {
                0..50 => format!("{}.{}.{}", s.name, s.namespace, cfg.dns_zone),
                50..60 => format!("_http._tcp.{}.{}.{}", s.name, s.namespace, cfg.dns_zone),
                60..75 => format!(
                    "{}.{}.region-{region}.{}",
                    s.name, s.namespace, cfg.dns_zone
                ),
                75..90 => format!(
                    "{}.{}.region-{region}-{zone}.region-{region}.{}",
                    s.name, s.namespace, cfg.dns_zone
                ),
                _ => format!("{}x.{}.{}", s.name, s.namespace, cfg.dns_zone),
            };
            let qtype = if (50..60).contains(&roll) {
                rtype::SRV
            } else if roll % 10 == 3 {
                rtype::AAAA
            } else {
                rtype::A
            };
            encode(i as u16, &name, qtype, i % 2 == 0)
        })
        .collect()
}

fn encode(id: u16, name: &str, qtype: u16, edns: bool) -> Vec<u8> {
    let mut q = Vec::with_capacity(64);
    wire::put16(&mut q, id);
    wire::put16(&mut q, 0x0100);
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns)]);
    for label in name.split('.') {
        wire::put_label(&mut q, label.as_bytes());
    }
    q.push(0);
    wire::put16(&mut q, qtype);
    wire::put16(&mut q, wire::CLASS_IN);
    if edns {
        wire::put_opt(&mut q, 1232, 0, None);
    }
    q
}

fn pure_answer(view: &DnsView, queries: &[Vec<u8>]) -> (f64, [u64; 3]) {
    let mut out = Vec::with_capacity(2048);
    let mut codes = [0u64; 3];
    let clients: Vec<IpAddr> = (0..64u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 100 + i % 24, i, 1)))
        .collect();
    let transport = Transport::Udp { max_payload: 1232 };
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed() < ROUND {
        for (i, q) in queries.iter().enumerate() {
            let a = answer(view, q, clients[i % clients.len()], transport, &mut out)
                .expect("every benchmark query is answered");
            codes[match a.rcode {
                Rcode::NoError if a.answers > 0 => 0,
                Rcode::NoError => 1,
                _ => 2,
            }] += 1;
        }
        n += queries.len();
    }
    (n as f64 / start.elapsed().as_secs_f64(), codes)
}

/// Serves the view as the agent does, on a thread of its own: `threads` UDP sockets with
/// `SO_REUSEPORT`, one `serve_udp` task each, on a runtime of `threads` workers (a
/// current-thread runtime for one).
fn start_server(view: DnsView, threads: usize) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("dns-server".into())
        .spawn(move || {
            let rt = if threads == 1 {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            } else {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .enable_all()
                    .build()
            }
            .unwrap();
            rt.block_on(async move {
                // A free port first, then every socket on it.
                let port = UdpSocket::bind("127.0.0.1:0")
                    .await
                    .unwrap()
                    .local_addr()
                    .unwrap();
                let sockets = bind_udp_sockets(port, threads).unwrap();
                tx.send(port).unwrap();
                let (_publish, views) = watch::channel(Arc::new(view));
                let tasks: Vec<_> = sockets
                    .into_iter()
                    .map(|s| {
                        tokio::spawn(serve_udp(
                            s,
                            views.clone(),
                            DnsMetrics::new(),
                            ServeOptions::default(),
                        ))
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            });
        })
        .unwrap();
    rx.recv().unwrap()
}

/// Results of one socket's share of a round.
#[derive(Default)]
struct Tally {
    answered: u64,
    lost: u64,
    latencies_us: Vec<u32>,
}

/// Closed loop on one socket: keep `window` queries outstanding until `until`; a silence
/// of 200 ms counts the outstanding queries as lost and refills the window.
async fn drive(
    server: SocketAddr,
    queries: Arc<Vec<Vec<u8>>>,
    offset: usize,
    window: usize,
    until: Instant,
) -> Tally {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(server).await.unwrap();
    let mut sent_at = vec![Instant::now(); 65_536];
    let mut next = offset;
    let mut id: u16 = 0;
    let mut buf = vec![0u8; 4096];
    let mut query = Vec::with_capacity(128);
    let mut tally = Tally::default();
    let mut outstanding = 0usize;
    let send =
        async |next: &mut usize, id: &mut u16, query: &mut Vec<u8>, sent_at: &mut [Instant]| {
            query.clear();
            query.extend_from_slice(&queries[*next % queries.len()]);
            query[..2].copy_from_slice(&id.to_be_bytes());
            sent_at[usize::from(*id)] = Instant::now();
            socket.send(query).await.unwrap();
            *next += 1;
            *id = id.wrapping_add(1);
        };
    while Instant::now() < until {
        while outstanding < window {
            send(&mut next, &mut id, &mut query, &mut sent_at).await;
            outstanding += 1;
        }
        match tokio::time::timeout(Duration::from_millis(200), socket.recv(&mut buf)).await {
            Ok(Ok(len)) if len >= 2 => {
                let rid = u16::from_be_bytes([buf[0], buf[1]]);
                let us = sent_at[usize::from(rid)].elapsed().as_micros();
                tally.latencies_us.push(us.min(u128::from(u32::MAX)) as u32);
                tally.answered += 1;
                outstanding -= 1;
            }
            Ok(_) => {}
            Err(_) => {
                tally.lost += outstanding as u64;
                outstanding = 0;
            }
        }
    }
    tally
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn main() {
    let rounds = arg("--rounds", 5);
    let sockets = arg("--sockets", 4);
    let window = arg("--window", 64);
    let server_threads = arg("--server-threads", 1);

    let cfg = config();
    let build = Instant::now();
    let serves = lb_agent::dns::config_serves(&cfg);
    let view = DnsView::from_config(&cfg, serves).expect("a valid benchmark configuration");
    println!(
        "view: {} clusters, {} services, built in {:?}",
        cfg.clusters.len(),
        cfg.services.len(),
        build.elapsed()
    );
    let queries = queries(&cfg);

    let (qps, codes) = pure_answer(&view, &queries);
    println!(
        "answer(): {:.0} queries/s on one thread ({:.0} ns/query); answers {} / nodata {} / nxdomain {}",
        qps,
        1e9 / qps,
        codes[0],
        codes[1],
        codes[2]
    );

    let server = start_server(view, server_threads);
    let queries = Arc::new(queries);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut per_round = Vec::new();
    let mut latencies = Vec::new();
    let mut lost = 0;
    // One warm-up round, not reported.
    for round in 0..=rounds {
        let until = Instant::now() + ROUND;
        let start = Instant::now();
        let tallies: Vec<Tally> = rt.block_on(async {
            let tasks: Vec<_> = (0..sockets)
                .map(|s| {
                    tokio::spawn(drive(
                        server,
                        queries.clone(),
                        s * DISTINCT_QUERIES / sockets,
                        window,
                        until,
                    ))
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        let elapsed = start.elapsed().as_secs_f64();
        let answered: u64 = tallies.iter().map(|t| t.answered).sum();
        if round == 0 {
            continue;
        }
        let qps = answered as f64 / elapsed;
        println!("round {round}: {qps:.0} queries/s");
        per_round.push(qps);
        lost += tallies.iter().map(|t| t.lost).sum::<u64>();
        latencies.extend(tallies.into_iter().flat_map(|t| t.latencies_us));
    }
    per_round.sort_by(f64::total_cmp);
    latencies.sort_unstable();
    println!(
        "udp serve_udp ({server_threads} server socket(s) and worker(s); {sockets} client sockets × {window} outstanding): \
         median {:.0} queries/s over {rounds} rounds of {ROUND:?}; latency median {} µs, p99 {} µs; lost {lost}",
        per_round[per_round.len() / 2],
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
    );

    // Round-trip time of a lone query, without queueing behind others.
    let until = Instant::now() + ROUND;
    let mut light = rt.block_on(drive(server, queries.clone(), 0, 1, until));
    light.latencies_us.sort_unstable();
    println!(
        "udp one query at a time: {} round trips, latency median {} µs, p99 {} µs",
        light.answered,
        percentile(&light.latencies_us, 0.5),
        percentile(&light.latencies_us, 0.99),
    );
}

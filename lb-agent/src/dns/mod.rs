//! The lb-agent's authoritative DNS responder for the federation's `dnsZone`.
//!
//! Names (Federation v1 / k8gb model): `<svc>.<ns>.<dnsZone>` (global),
//! `<svc>.<ns>.<region>.<dnsZone>` and `<svc>.<ns>.<zone>.<region>.<dnsZone>` answer the
//! lb-agents of the Ready clusters serving the Service in that scope, ordered and chosen by
//! the Service's traffic policy (nearest to the asker first by default); an empty zone or
//! region level is a CNAME to the next wider name. `_<port>._<tcp|udp>.<svc>.<ns>.<dnsZone>`
//! answers SRV records with the listen port and targets `<cluster>.<svc>.<ns>.<dnsZone>`.
//! The apex has an SOA and one NS `ns-<cluster>.<dnsZone>` per lb-agent, with glue.
//!
//! [`DnsView`] is the precomputed snapshot, [`answer`] the pure query → response function,
//! [`serve_udp`] / [`serve_tcp`] the listeners that answer from the latest view published
//! on a `tokio::sync::watch` channel.

mod answer;
mod derived;
mod metrics;
mod order;
mod server;
mod view;
/// The DNS wire codec (the `meridian-dns-wire` crate, shared with cluster-sim).
pub use meridian_dns_wire as wire;

pub use answer::{Answered, DEFAULT_UDP_PAYLOAD, Rcode, Transport, answer};
pub use metrics::{DnsMetrics, ResponseLabels};
pub use server::{ServeOptions, bind_udp_sockets, serve_tcp, serve_udp};
pub use view::{DnsConfigError, DnsView, Locality, config_serves};

#[cfg(test)]
pub(crate) mod testutil {
    //! A small federation used by the unit tests.

    use fed_api::lbconfig::{ClientSubnet, LbCluster, LbConfig, LbService};

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

    fn subnet(cidr: &str, region: &str, zone: &str) -> ClientSubnet {
        ClientSubnet {
            cidr: cidr.into(),
            region: region.into(),
            zone: zone.into(),
        }
    }

    /// Four clusters, listed out of name order: us-1 and us-3 in us-east1-a, us-2 in
    /// us-east1-b, eu-1 in eu-west1-a; this agent is us-1. `prod/web` has backends in
    /// us-1, us-2 and eu-1; `prod/api` has none.
    pub fn config() -> LbConfig {
        LbConfig {
            dns_zone: "global.meridian.test".into(),
            cluster: "us-1".into(),
            ttl_seconds: 30,
            clusters: vec![
                cluster("us-2", "us-east", "us-east1-b", "127.0.1.2"),
                cluster("us-1", "us-east", "us-east1-a", "127.0.1.1"),
                cluster("us-3", "us-east", "us-east1-a", "127.0.1.3"),
                cluster("eu-1", "eu-west", "eu-west1-a", "127.0.1.4"),
            ],
            services: vec![
                LbService {
                    namespace: "prod".into(),
                    name: "web".into(),
                    ports: vec![],
                    backends: [("us-1".into(), 2), ("us-2".into(), 1), ("eu-1".into(), 3)].into(),
                    ..Default::default()
                },
                LbService {
                    namespace: "prod".into(),
                    name: "api".into(),
                    ports: vec![],
                    backends: Default::default(),
                    ..Default::default()
                },
            ],
            client_subnets: vec![
                subnet("10.2.0.0/16", "us-east", ""),
                subnet("10.2.1.0/24", "us-east", "us-east1-b"),
                subnet("10.9.0.0/16", "eu-west", ""),
                subnet("fd00::/64", "eu-west", "eu-west1-a"),
            ],
        }
    }
}

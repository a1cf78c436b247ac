//! What the service controller tells each member's lb-agent: the federation's DNS zone,
//! the clusters with their lb-agents, and the federated Services with where their
//! backends are. Stored as JSON under `config.json` of the ConfigMap
//! [`crate::names::LB_AGENT_CONFIGMAP`] in the member's `meridian-system` namespace.
//!
//! Local endpoints are not in here: the lb-agent reads its own cluster's EndpointSlices
//! (those not managed by [`crate::names::ENDPOINTSLICE_MANAGER`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The whole configuration of one lb-agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbConfig {
    /// The DNS zone the lb-agents are authoritative for, e.g. `global.meridian.test`.
    pub dns_zone: String,
    /// Name of the member cluster this configuration is for.
    pub cluster: String,
    /// TTL of DNS answers, seconds.
    #[serde(default = "default_ttl")]
    pub ttl_seconds: u32,
    /// Every member with a known lb-agent (this one included).
    #[serde(default)]
    pub clusters: Vec<LbCluster>,
    /// Federated Services.
    #[serde(default)]
    pub services: Vec<LbService>,
    /// Client subnets with their locality, for nearest-first DNS answers.
    #[serde(default)]
    pub client_subnets: Vec<ClientSubnet>,
}

fn default_ttl() -> u32 {
    5
}

/// One member cluster and its lb-agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbCluster {
    /// Member cluster name.
    pub name: String,
    /// Region of the cluster (may be empty).
    #[serde(default)]
    pub region: String,
    /// Zone of the cluster (may be empty).
    #[serde(default)]
    pub zone: String,
    /// IPv4 address of its lb-agent.
    pub address: String,
    /// HTTP listener port.
    pub http_port: u16,
    /// Peer port (lb-agent to lb-agent, local backends only).
    pub peer_port: u16,
    /// DNS port.
    pub dns_port: u16,
    /// The federation's view of the cluster: Ready condition True.
    pub ready: bool,
}

/// One federated Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbService {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Ports (TCP and UDP; SCTP ports are not proxied).
    #[serde(default)]
    pub ports: Vec<LbPort>,
    /// Ready endpoints per cluster as last seen by the service controller (cluster name →
    /// count). Clusters absent or at zero have no backends.
    #[serde(default)]
    pub backends: BTreeMap<String, u32>,
    /// How DNS answers and proxy choices spread the Service's traffic over the clusters
    /// that serve it.
    #[serde(default, skip_serializing_if = "TrafficPolicy::is_default")]
    pub policy: TrafficPolicy,
    /// Dedicated addresses (cluster name → IPv4): where that cluster's lb-agent also serves
    /// the Service's own port numbers, for clients that cannot use the listen ports. DNS
    /// answers these instead of the shared lb-agent addresses.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub addresses: BTreeMap<String, String>,
    /// A `kubernetes.io/tls` Secret in the Service's namespace of each member: when set,
    /// the lb-agents terminate TLS for the Service's names with its certificate and route
    /// the requests inside by Host, as on the HTTP listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret: Option<String>,
}

/// How the traffic of one Service is spread over its clusters (k8gb's strategies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// The strategy.
    #[serde(rename = "type", default)]
    pub kind: PolicyKind,
    /// `failover`: cluster, region or zone names, most preferred first; clusters that
    /// match none come last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
    /// `weighted`: cluster name → relative share of new requests and first DNS answers
    /// (clusters not listed get none while a listed one serves).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, u32>,
}

impl TrafficPolicy {
    /// Nearest first, nothing else set.
    pub fn is_default(&self) -> bool {
        *self == TrafficPolicy::default()
    }
}

/// A traffic strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PolicyKind {
    /// Every serving cluster, nearest to the client first (same cluster, zone, region).
    #[default]
    Nearest,
    /// Only the first group of `order` that serves (then the next, and so on).
    Failover,
    /// Every serving cluster; the first answer and each new request chosen by `weights`.
    Weighted,
    /// Only the serving clusters nearest to the client: its zone, else its region, else all.
    Geo,
}

/// One port of a federated Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LbPort {
    /// Port name in the Service (may be empty for a single unnamed port).
    #[serde(default)]
    pub name: String,
    /// The Service port.
    pub port: u16,
    /// `http`, `h2c`, `tls`, `tcp` or `udp`: see [`LbPort::protocol_of`]; `udp` for UDP
    /// Service ports.
    pub protocol: String,
    /// Port on which every lb-agent listens for this Service port (same in all clusters);
    /// Meridian's EndpointSlices in members point at `<remote lb-agent>:<listenPort>`.
    pub listen_port: u16,
}

/// A client subnet and where it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientSubnet {
    /// CIDR, e.g. `10.1.0.0/16`.
    pub cidr: String,
    /// Region.
    #[serde(default)]
    pub region: String,
    /// Zone.
    #[serde(default)]
    pub zone: String,
}

impl LbPort {
    /// The protocol a TCP Service port is proxied with, from its `appProtocol`, else its
    /// name: `http`/`http-*` is HTTP, `https`/`https-*`/`tls`/`tls-*` is TLS (routed by
    /// SNI, never terminated), anything else plain TCP.
    pub fn protocol_of(name: &str, app_protocol: Option<&str>) -> &'static str {
        match app_protocol.map(str::to_ascii_lowercase).as_deref() {
            Some("http" | "http1" | "kubernetes.io/ws") => "http",
            Some("h2c" | "kubernetes.io/h2c" | "grpc") => "h2c",
            Some("https" | "tls" | "kubernetes.io/wss") => "tls",
            Some(_) => "tcp",
            None if name == "http" || name.starts_with("http-") => "http",
            None if ["https", "tls"].iter().any(|p| {
                name == *p || name.strip_prefix(p).is_some_and(|r| r.starts_with('-'))
            }) =>
            {
                "tls"
            }
            None => "tcp",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_follows_app_protocol_then_name() {
        assert_eq!(LbPort::protocol_of("web", Some("HTTP")), "http");
        assert_eq!(LbPort::protocol_of("web", Some("kubernetes.io/h2c")), "h2c");
        assert_eq!(LbPort::protocol_of("http", Some("mysql")), "tcp");
        assert_eq!(LbPort::protocol_of("http-alt", None), "http");
        assert_eq!(LbPort::protocol_of("httpx", None), "tcp");
        assert_eq!(LbPort::protocol_of("", None), "tcp");
        assert_eq!(LbPort::protocol_of("web", Some("https")), "tls");
        assert_eq!(LbPort::protocol_of("web", Some("TLS")), "tls");
        assert_eq!(LbPort::protocol_of("web", Some("grpc")), "h2c");
        for tls in ["https", "https-admin", "tls", "tls-db"] {
            assert_eq!(LbPort::protocol_of(tls, None), "tls", "{tls}");
        }
        for tcp in ["httpsx", "tlsdb", "tls_"] {
            assert_eq!(LbPort::protocol_of(tcp, None), "tcp", "{tcp}");
        }
    }

    #[test]
    fn policies_parse_and_default_to_nearest() {
        let s: LbService = serde_json::from_str(
            r#"{"namespace":"a","name":"b","policy":{"type":"failover","order":["eu","us-1"]}}"#,
        )
        .unwrap();
        assert_eq!(s.policy.kind, PolicyKind::Failover);
        assert_eq!(s.policy.order, ["eu", "us-1"]);
        let plain: LbService = serde_json::from_str(r#"{"namespace":"a","name":"b"}"#).unwrap();
        assert!(plain.policy.is_default());
        let text = serde_json::to_string(&plain).unwrap();
        assert!(
            !text.contains("policy") && !text.contains("addresses"),
            "{text}"
        );
        assert!(
            serde_json::from_str::<LbService>(
                r#"{"namespace":"a","name":"b","policy":{"type":"random"}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn config_round_trips_with_defaults() {
        let c: LbConfig =
            serde_json::from_str(r#"{"dnsZone":"global.test","cluster":"a"}"#).unwrap();
        assert_eq!(c.ttl_seconds, 5);
        let back: LbConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}

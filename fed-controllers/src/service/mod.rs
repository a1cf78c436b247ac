//! The service controller: makes each federated Service reachable from every member.
//! It pushes the Service into the clusters that run its backends, points a
//! `<name>-meridian` EndpointSlice in each of them at the other clusters' lb-agents,
//! allocates one lb-agent listen port per Service port, writes every member's lb-agent
//! configuration, records each member's lb-agent in `Cluster.status.lbAgent`, keeps the
//! Service's `Placement service-<name>` and its `status.loadBalancer.ingress`, and cleans
//! members up behind the member-cleanup finalizer (docs/traffic.md).
//!
//! Pure decisions — [`backends`], [`desired`], [`ports`], [`addresses`] (dedicated
//! per-Service addresses) and [`address_condition`] (the Service's condition about them),
//! [`lbconf`], [`status`], [`traffic`] (policies and client subnets) — are
//! separate from the effects: [`member`] runs one task and queue per member cluster,
//! [`controller`] watches the federation and hands members their intents (what each watch
//! event concerns is in `inputs`, its own federation writes in `fedwrite`).

pub mod address_condition;
pub mod addresses;
mod alloc_map;
pub mod backends;
pub mod controller;
mod custom_kinds;
pub mod dedicated;
pub mod desired;
mod fedwrite;
mod inputs;
pub mod lbconf;
pub mod member;
pub mod ports;
mod selecting;
pub mod status;
pub mod traffic;
mod workloads;

use std::fmt;

pub use controller::run;
pub use ports::PortRange;

/// The finalizer holding a federated Service until its member copies are gone: the same
/// member-cleanup finalizer federated workloads carry.
pub const FINALIZER: &str = fed_api::names::WORKLOAD_FINALIZER;
/// Namespaces whose Services are the federation's own, never federated.
pub const IGNORED_NAMESPACES: [&str; 2] = ["kube-system", fed_api::names::SYSTEM_NAMESPACE];
/// The component name on the Events this controller writes.
pub const COMPONENT: &str = "meridian-service-controller";

/// Tunables of the service controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The DNS zone the lb-agents serve.
    pub dns_zone: String,
    /// Where lb-agent listen ports are allocated.
    pub port_range: PortRange,
    /// TTL of the lb-agents' DNS answers, seconds.
    pub ttl_seconds: u32,
    /// Request deadline, retry backoff and member clients.
    pub fleet: crate::fleet::Settings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            dns_zone: "global.meridian.test".into(),
            port_range: PortRange {
                first: 30000,
                last: 32767,
            },
            ttl_seconds: 5,
            fleet: crate::fleet::Settings::default(),
        }
    }
}

/// An Event about a federated Service.
pub fn event(
    key: &ServiceKey,
    uid: &str,
    type_: meridian_runtime::events::EventType,
    reason: &str,
    message: &str,
) -> meridian_runtime::events::EventSpec {
    let regarding =
        crate::fleet::events::regarding("v1", "Service", &key.namespace, &key.name, uid);
    crate::fleet::events::event(regarding, type_, reason, message)
}

/// A federated Service: namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ServiceKey {
    /// A key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Name of the Service's Placement: `service-web`.
    pub fn placement_name(&self) -> String {
        format!("service-{}", self.name)
    }

    /// Name of Meridian's EndpointSlice for the Service in members: `web-meridian`.
    pub fn slice_name(&self) -> String {
        format!("{}{}", self.name, fed_api::names::ENDPOINTSLICE_SUFFIX)
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Service {}/{}", self.namespace, self.name)
    }
}

/// What the service controller needs to know of one member cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Cluster name.
    pub name: String,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Region (may be empty).
    pub region: String,
    /// Zone (may be empty).
    pub zone: String,
    /// The Cluster object's labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its lb-agent, once known.
    pub lb_agent: Option<fed_api::cluster::LbAgentStatus>,
}

/// A Ready or unready cluster in region `eu`, with an lb-agent at `agent` on the usual
/// ports, for tests.
#[cfg(test)]
pub(crate) fn test_view(name: &str, ready: bool, agent: Option<&str>) -> ClusterView {
    ClusterView {
        name: name.into(),
        ready,
        region: "eu".into(),
        zone: format!("eu-{name}"),
        lb_agent: agent.map(|a| fed_api::cluster::LbAgentStatus {
            address: a.into(),
            http_port: Some(8080),
            dns_port: Some(5353),
            peer_port: Some(15001),
            address_pool: Vec::new(),
        }),
        ..Default::default()
    }
}

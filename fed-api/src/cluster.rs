//! `Cluster`: a member cluster joined to the federation, and what Meridian knows of it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::{Condition, NamespacedName};
use crate::quantity::{self, QuantityError};

/// How to reach a member cluster and where it sits.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(group = "federation.meridian.dev", version = "v1alpha1"),
    kube(kind = "Cluster", status = "ClusterStatus", shortname = "fc")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The member's API server URL, e.g. `https://10.0.0.10:6443`.
    pub api_endpoint: String,
    /// Base64-encoded PEM bundle of the member's CA; TLS is always verified against it.
    pub ca_bundle: Option<String>,
    /// The Secret in the federation that holds the member's credentials (`token`).
    pub secret_ref: Option<NamespacedName>,
    /// Region of the cluster, used by affinity, spread and DNS.
    pub region: Option<String>,
    /// Zone of the cluster, used by affinity, spread and DNS.
    pub zone: Option<String>,
    /// Taints that keep workloads away unless their policy tolerates them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A taint on a member cluster: policies must tolerate it, as pods tolerate node taints.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value.
    pub value: Option<String>,
    /// What the taint does to workloads that do not tolerate it.
    pub effect: TaintEffect,
}

/// Effect of a cluster [`Taint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// No new replicas; replicas already there stay.
    NoSchedule,
    /// No replicas at all; replicas already there are moved away.
    NoExecute,
}

impl TaintEffect {
    /// The name as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

impl std::fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the cluster controller last observed of a member.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Ready` (and related) conditions with reasons and probe times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The member's Kubernetes version, e.g. `v1.34.2`.
    pub kubernetes_version: Option<String>,
    /// API groups/versions and resources the member serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_enablements: Vec<ApiEnablement>,
    /// Node counts.
    pub nodes: Option<NodeSummary>,
    /// Capacity of the member's Ready nodes and what is already requested.
    pub resource_summary: Option<ResourceSummary>,
    /// Address of the member's lb-agent, once it runs.
    pub lb_agent: Option<LbAgentStatus>,
}

/// One group/version served by a member and its resources.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEnablement {
    /// `group/version`, or `v1` for the core group.
    pub group_version: String,
    /// Plural resource names served under it.
    #[serde(default)]
    pub resources: Vec<String>,
}

/// Node counts of a member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodeSummary {
    /// All nodes.
    pub total: i64,
    /// Nodes whose Ready condition is True.
    pub ready: i64,
}

/// Resource quantities (Kubernetes notation: `cpu: "500m"`, `memory: 4Gi`).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceList {
    /// CPU quantity.
    pub cpu: Option<String>,
    /// Memory quantity.
    pub memory: Option<String>,
    /// Pod count.
    pub pods: Option<String>,
}

impl ResourceList {
    /// Exact amounts in Kubernetes notation, as the cluster controller writes them.
    pub fn from_amounts(cpu_milli: u64, memory_bytes: u64, pods: u64) -> Self {
        Self {
            cpu: Some(quantity::format_cpu_milli(cpu_milli)),
            memory: Some(quantity::format_bytes(memory_bytes)),
            pods: Some(pods.to_string()),
        }
    }

    /// CPU in millicores (`None` when not reported).
    pub fn cpu_milli(&self) -> Result<Option<u64>, QuantityError> {
        self.cpu.as_deref().map(quantity::cpu_milli).transpose()
    }

    /// Memory in bytes (`None` when not reported).
    pub fn memory_bytes(&self) -> Result<Option<u64>, QuantityError> {
        self.memory.as_deref().map(quantity::units).transpose()
    }

    /// Pod slots (`None` when not reported).
    pub fn pod_count(&self) -> Result<Option<u64>, QuantityError> {
        self.pods.as_deref().map(quantity::units).transpose()
    }
}

/// Capacity summary of a member's Ready nodes.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSummary {
    /// Sum of allocatable over Ready nodes.
    #[serde(default)]
    pub allocatable: ResourceList,
    /// Sum of requests of scheduled, non-terminated pods on Ready nodes.
    #[serde(default)]
    pub allocated: ResourceList,
    /// The largest free slot on any single Ready node.
    pub largest_free: Option<ResourceList>,
}

/// Where a member's lb-agent answers.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LbAgentStatus {
    /// Address reachable from the other members.
    pub address: String,
    /// Port of its DNS responder (UDP and TCP).
    pub dns_port: Option<i32>,
    /// Port of its HTTP listener (Host-based routing of `<svc>.<ns>.<dnsZone>`).
    pub http_port: Option<i32>,
    /// Port other lb-agents use to reach this cluster's local backends.
    pub peer_port: Option<i32>,
    /// Addresses the lb-agent can also serve on, for federated Services that ask for a
    /// dedicated address: IPv4 addresses and CIDRs, as the member's `meridian-lb-agent`
    /// Service lists them in its `federation.meridian.dev/address-pool` annotation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub address_pool: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_lists_read_back_what_they_write() {
        let l = ResourceList::from_amounts(41_500, 120 << 30, 310);
        assert_eq!(
            (l.cpu.as_deref(), l.memory.as_deref(), l.pods.as_deref()),
            (Some("41500m"), Some("120Gi"), Some("310"))
        );
        assert_eq!(l.cpu_milli(), Ok(Some(41_500)));
        assert_eq!(l.memory_bytes(), Ok(Some(120 << 30)));
        assert_eq!(l.pod_count(), Ok(Some(310)));
        let unreported = ResourceList::default();
        assert_eq!(unreported.cpu_milli(), Ok(None));
        let bad = ResourceList {
            memory: Some("lots".into()),
            ..Default::default()
        };
        assert!(matches!(
            bad.memory_bytes(),
            Err(QuantityError::Syntax { .. })
        ));
    }

    #[test]
    fn taint_effects_are_checked_when_read() {
        let t: Taint =
            serde_json::from_value(serde_json::json!({"key": "gpu", "effect": "NoExecute"}))
                .unwrap();
        assert_eq!(t.effect, TaintEffect::NoExecute);
        assert_eq!(t.effect.to_string(), "NoExecute");
        let bad = serde_json::json!({"key": "gpu", "effect": "PreferNoSchedule"});
        assert!(serde_json::from_value::<Taint>(bad).is_err());
    }
}

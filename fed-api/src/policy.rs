//! `PropagationPolicy`: which workloads go to which member clusters, and how replicas divide.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::LabelSelector;

/// Selects workloads and says how to place them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "federation.meridian.dev",
    version = "v1alpha1",
    kind = "PropagationPolicy",
    namespaced,
    shortname = "pp"
)]
#[serde(rename_all = "camelCase")]
pub struct PropagationPolicySpec {
    /// Higher wins when several policies match a workload equally specifically.
    #[serde(default)]
    pub priority: i32,
    /// The workloads this policy applies to.
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Where and how the selected workloads run.
    #[serde(default)]
    pub placement: PlacementRules,
}

/// Selects workloads by apiVersion/kind and optionally name or labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// `apps/v1`.
    pub api_version: String,
    /// `Deployment` or `ReplicaSet`.
    pub kind: String,
    /// Exact name; empty selects by labels or all of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Label selector over the workload's labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// The placement rules of a policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRules {
    /// Which clusters are candidates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Cluster taints this placement tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    /// Spread over regions, zones or clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// How replicas are assigned to the chosen clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaScheduling>,
    /// What happens when a chosen cluster goes Offline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
}

/// Candidate clusters: all conditions given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Only these clusters (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Never these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Clusters whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Clusters in these regions (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Clusters in these zones (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

/// Tolerates cluster taints, as pod tolerations do node taints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Toleration {
    /// Taint key; empty with `Exists` tolerates every taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Value to match with `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `NoExecute`, or empty for both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
}

/// Spread replicas over groups of clusters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// `region`, `zone` or `cluster`.
    pub spread_by_field: String,
    /// At least this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_groups: Option<i32>,
    /// At most this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_groups: Option<i32>,
}

/// How replicas are assigned to clusters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaScheduling {
    /// `Duplicated` or `Divided`.
    #[serde(rename = "type")]
    pub type_: String,
    /// For `Divided`: `StaticWeight` or `DynamicWeight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub division: Option<String>,
    /// Static weights by cluster names or labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<WeightRule>,
    /// Per-cluster bounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterBounds>,
    /// Give every selected cluster at least one replica.
    #[serde(default)]
    pub at_least_one_per_cluster: bool,
}

/// A static weight for the clusters a rule selects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightRule {
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Clusters by labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// The weight.
    pub weight: i64,
}

/// Bounds on one cluster's replicas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBounds {
    /// Cluster name.
    pub name: String,
    /// Lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
}

/// Failover behaviour.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// How long a cluster may be Offline before its replicas move (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
    /// Move replicas back when a cluster returns or a new one matches.
    #[serde(default)]
    pub rebalance_on_recovery: bool,
}

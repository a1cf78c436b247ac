//! `PropagationPolicy`: which workloads it selects and how it places them (API.md shapes).

use serde::{Deserialize, Serialize};

use super::cluster::{ObjectMeta, TaintEffect};
use super::selector::LabelSelector;

/// Failover toleration when a policy does not say (seconds).
pub const DEFAULT_TOLERATION_SECONDS: u64 = 300;

/// A `PropagationPolicy` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PropagationPolicy {
    /// Name and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The policy itself.
    #[serde(default)]
    pub spec: PolicySpec,
}

/// `PropagationPolicy.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// Higher wins when several policies match equally specifically.
    #[serde(default)]
    pub priority: i32,
    /// Workloads this policy applies to.
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    /// How selected workloads are placed.
    #[serde(default)]
    pub placement: Placement,
}

/// Selects workloads by apiVersion/kind and optionally name or labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Exact name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Labels of the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// `spec.placement`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Which clusters are eligible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Cluster taints this placement tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    /// How widely replicas must / may spread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// Duplicated or divided, and how. Absent means `Duplicated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaScheduling>,
    /// Behaviour when clusters go offline and come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
}

/// Cluster affinity; every non-empty field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAffinity {
    /// Allowed cluster names (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Never these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Cluster labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Allowed regions (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Allowed zones (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

/// Tolerates cluster taints, like a pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key; empty with `Exists` tolerates everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value for `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Effect tolerated; absent tolerates all effects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

/// Toleration operator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Key and value must be equal.
    #[default]
    Equal,
    /// Key must exist (any value).
    Exists,
}

/// One spread constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// What a group is.
    pub spread_by_field: SpreadField,
    /// At least this many groups, else unschedulable.
    #[serde(default)]
    pub min_groups: u32,
    /// At most this many groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_groups: Option<u32>,
}

/// Grouping for spread constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SpreadField {
    /// `spec.region`.
    Region,
    /// `spec.zone`.
    Zone,
    /// The cluster itself.
    Cluster,
}

/// `placement.replicaScheduling`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaScheduling {
    /// Duplicated or Divided.
    #[serde(rename = "type", default)]
    pub type_: ReplicaSchedulingType,
    /// How `Divided` divides (default `StaticWeight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub division: Option<Division>,
    /// Static weight rules; the first rule matching a cluster gives its weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<WeightRule>,
    /// Per-cluster bounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterBounds>,
    /// Every selected cluster gets at least one replica (when there are enough).
    #[serde(default)]
    pub at_least_one_per_cluster: bool,
}

/// Replica scheduling type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplicaSchedulingType {
    /// Every chosen cluster runs all replicas.
    #[default]
    Duplicated,
    /// Replicas are divided among chosen clusters.
    Divided,
}

/// How `Divided` replicas are divided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Division {
    /// By the static weight rules (equal weights when there are none).
    #[default]
    StaticWeight,
    /// By how many pods of this shape each cluster can still take.
    DynamicWeight,
}

/// A static weight rule: clusters named, or matching labels, get `weight`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightRule {
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Clusters by labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Relative weight.
    pub weight: u32,
}

/// Per-cluster replica bounds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBounds {
    /// Cluster name.
    pub name: String,
    /// Lower bound.
    #[serde(default)]
    pub min_replicas: u32,
    /// Upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
}

/// `placement.failover`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// Seconds a cluster may be offline before its replicas move (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<u64>,
    /// Move replicas back when a cluster returns or a new one matches.
    #[serde(default)]
    pub rebalance_on_recovery: bool,
}

impl WeightRule {
    /// Whether the rule covers this cluster.
    pub(crate) fn matches(
        &self,
        name: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        if self.cluster_names.is_empty() && self.label_selector.is_none() {
            return false;
        }
        (self.cluster_names.is_empty() || self.cluster_names.iter().any(|n| n == name))
            && self
                .label_selector
                .as_ref()
                .is_none_or(|s| s.matches(labels))
    }
}

impl Placement {
    /// Failover toleration in seconds.
    pub fn toleration_seconds(&self) -> u64 {
        self.failover
            .as_ref()
            .and_then(|f| f.toleration_seconds)
            .unwrap_or(DEFAULT_TOLERATION_SECONDS)
    }

    /// Whether replicas move back to returning / newly matching clusters.
    pub fn rebalance_on_recovery(&self) -> bool {
        self.failover
            .as_ref()
            .is_some_and(|f| f.rebalance_on_recovery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_api_md_placement() {
        let spec = serde_json::json!({
            "priority": 0,
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
            "placement": {
                "clusterAffinity": {
                    "clusterNames": ["eu-west-1", "us-east-1"], "exclude": ["legacy-1"],
                    "labelSelector": {"matchLabels": {"env": "prod"}},
                    "regions": ["eu-west", "us-east"], "zones": []
                },
                "clusterTolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}],
                "spreadConstraints": [{"spreadByField": "region", "minGroups": 2, "maxGroups": 3}],
                "replicaScheduling": {
                    "type": "Divided", "division": "StaticWeight",
                    "weights": [
                        {"clusterNames": ["eu-west-1"], "weight": 1},
                        {"labelSelector": {"matchLabels": {"provider": "onprem"}}, "weight": 2}
                    ],
                    "clusters": [{"name": "eu-west-1", "minReplicas": 1, "maxReplicas": 10}],
                    "atLeastOnePerCluster": false
                },
                "failover": {"tolerationSeconds": 300, "rebalanceOnRecovery": false}
            }
        });
        let obj = serde_json::json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": spec.clone()});
        let p: PropagationPolicy = serde_json::from_value(obj).unwrap();
        let placement: Placement = serde_json::from_value(spec["placement"].clone()).unwrap();
        assert_eq!(p.spec.placement, placement);
        let rs = placement.replica_scheduling.as_ref().unwrap();
        assert_eq!(rs.type_, ReplicaSchedulingType::Divided);
        assert_eq!(rs.weights[1].weight, 2);
        assert_eq!(
            placement.spread_constraints[0].spread_by_field,
            SpreadField::Region
        );
        assert_eq!(
            placement.cluster_tolerations[0].operator,
            TolerationOperator::Exists
        );
        assert_eq!(placement.toleration_seconds(), 300);
        // Round trip keeps the camelCase names.
        let back = serde_json::to_value(&placement).unwrap();
        assert_eq!(back["replicaScheduling"]["atLeastOnePerCluster"], false);
        assert_eq!(back["spreadConstraints"][0]["spreadByField"], "region");
        let empty: Placement = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(empty.toleration_seconds(), DEFAULT_TOLERATION_SECONDS);
    }
}

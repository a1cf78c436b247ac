//! `PropagationPolicy` and `ClusterPropagationPolicy`: which objects go to which member
//! clusters, and how replicas divide.
//!
//! The predicates here (affinity, tolerations, weight rules) are the scheduler's filters;
//! they are `#[inline]` because it calls them per cluster for every decision.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_with::skip_serializing_none;

use crate::cluster::TaintEffect;
use crate::selector::LabelSelector;

/// Failover toleration when a policy does not say (seconds).
pub const DEFAULT_TOLERATION_SECONDS: u64 = 300;

/// Selects objects and says how to place them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(group = "federation.meridian.dev", version = "v1alpha1"),
    kube(kind = "PropagationPolicy", namespaced, shortname = "pp")
)]
#[serde(rename_all = "camelCase")]
pub struct PropagationPolicySpec {
    /// Higher wins when several policies match an object equally specifically.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    /// The objects this policy applies to.
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Where and how the selected objects run.
    #[serde(default)]
    pub placement: PlacementRules,
}

cluster_wide_spec! {
    /// The spec of a `ClusterPropagationPolicy`: a [`PropagationPolicySpec`] that may select
    /// cluster-scoped kinds and namespaced kinds in any namespace. A namespaced policy that
    /// matches an object wins over a cluster-wide one.
    ClusterPropagationPolicySpec(PropagationPolicySpec),
    kind = "ClusterPropagationPolicy", shortname = "cpp"
}

/// Selects objects by apiVersion/kind and optionally name or labels.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSelector {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Exact name; absent selects by labels or all of the kind.
    pub name: Option<String>,
    /// Label selector over the object's labels.
    pub label_selector: Option<LabelSelector>,
}

/// The placement rules of a policy.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRules {
    /// Which clusters are candidates.
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Cluster taints this placement tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_tolerations: Vec<Toleration>,
    /// Spread over regions, zones or clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// How replicas are assigned to the chosen clusters; absent means `Duplicated`.
    pub replica_scheduling: Option<ReplicaScheduling>,
    /// What happens when a chosen cluster goes Offline.
    pub failover: Option<Failover>,
}

impl PlacementRules {
    /// Seconds a cluster may be Offline before its replicas move.
    #[inline]
    pub fn toleration_seconds(&self) -> u64 {
        self.failover
            .as_ref()
            .and_then(|f| f.toleration_seconds)
            .unwrap_or(DEFAULT_TOLERATION_SECONDS)
    }

    /// Whether replicas move back to returning or newly matching clusters.
    #[inline]
    pub fn rebalance_on_recovery(&self) -> bool {
        self.failover
            .as_ref()
            .is_some_and(|f| f.rebalance_on_recovery)
    }
}

/// Candidate clusters: every condition given must hold.
#[skip_serializing_none]
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
    pub label_selector: Option<LabelSelector>,
    /// Clusters in these regions (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Clusters in these zones (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}

/// The first condition of a [`ClusterAffinity`] a cluster fails, in the order they are
/// checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AffinityMismatch {
    /// The cluster is in `exclude`.
    Excluded,
    /// `clusterNames` is given and does not name the cluster.
    NotInClusterNames,
    /// The cluster's labels do not match `labelSelector`.
    LabelSelector,
    /// `regions` is given and the cluster's region is not one of them.
    Region,
    /// `zones` is given and the cluster's zone is not one of them.
    Zone,
}

impl ClusterAffinity {
    /// Which condition the cluster `name` with `labels` in `region`/`zone` fails, if any.
    #[inline]
    pub fn mismatch(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        region: Option<&str>,
        zone: Option<&str>,
    ) -> Option<AffinityMismatch> {
        let listed = |list: &[String], v: Option<&str>| {
            list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x == v))
        };
        if self.exclude.iter().any(|n| n == name) {
            Some(AffinityMismatch::Excluded)
        } else if !listed(&self.cluster_names, Some(name)) {
            Some(AffinityMismatch::NotInClusterNames)
        } else if self
            .label_selector
            .as_ref()
            .is_some_and(|s| !s.matches(labels))
        {
            Some(AffinityMismatch::LabelSelector)
        } else if !listed(&self.regions, region) {
            Some(AffinityMismatch::Region)
        } else if !listed(&self.zones, zone) {
            Some(AffinityMismatch::Zone)
        } else {
            None
        }
    }
}

/// Tolerates cluster taints, as pod tolerations do node taints.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Toleration {
    /// Taint key; absent or empty with `Exists` tolerates every taint.
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value to match with `Equal`.
    pub value: Option<String>,
    /// Effect tolerated; absent or empty tolerates both, as in Kubernetes.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub effect: Option<TaintEffect>,
}

/// Reads `""` as absent: Kubernetes writes an empty toleration effect for "every effect".
fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TaintEffect>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Wire {
        Effect(TaintEffect),
        Text(String),
    }
    match Option::<Wire>::deserialize(d)? {
        None => Ok(None),
        Some(Wire::Effect(e)) => Ok(Some(e)),
        Some(Wire::Text(s)) if s.is_empty() => Ok(None),
        Some(Wire::Text(s)) => Err(serde::de::Error::unknown_variant(
            &s,
            &["NoSchedule", "NoExecute"],
        )),
    }
}

/// Operator of a [`Toleration`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TolerationOperator {
    /// Key and value must be equal.
    #[default]
    Equal,
    /// The key must exist (any value).
    Exists,
}

impl Toleration {
    /// Whether this toleration covers a taint with `key`, `value` and `effect`.
    #[inline]
    pub fn tolerates(&self, key: &str, value: Option<&str>, effect: TaintEffect) -> bool {
        if self.effect.is_some_and(|e| e != effect) {
            return false;
        }
        match (self.key.as_deref(), self.operator) {
            (None | Some(""), TolerationOperator::Exists) => true,
            (Some(k), TolerationOperator::Exists) => k == key,
            (k, TolerationOperator::Equal) => {
                k == Some(key) && self.value.as_deref().unwrap_or("") == value.unwrap_or("")
            }
        }
    }
}

/// Spread replicas over groups of clusters.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// What a group is.
    pub spread_by_field: SpreadField,
    /// At least this many groups, else unschedulable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_groups: u32,
    /// At most this many groups.
    pub max_groups: Option<u32>,
}

fn is_zero<N: Default + PartialEq>(n: &N) -> bool {
    *n == N::default()
}

/// Grouping of clusters for a [`SpreadConstraint`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum SpreadField {
    /// `spec.region` of the Cluster.
    Region,
    /// `spec.zone` of the Cluster.
    Zone,
    /// The cluster itself.
    Cluster,
}

/// How replicas are assigned to clusters.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaScheduling {
    /// `Duplicated` (default) or `Divided`.
    #[serde(rename = "type", default)]
    pub type_: ReplicaSchedulingType,
    /// How `Divided` divides (default `StaticWeight`).
    pub division: Option<Division>,
    /// Static weight rules; the first rule matching a cluster gives its weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<WeightRule>,
    /// Per-cluster bounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterBounds>,
    /// Give every selected cluster at least one replica (when there are enough).
    #[serde(default)]
    pub at_least_one_per_cluster: bool,
}

/// Whether chosen clusters each run every replica or share them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReplicaSchedulingType {
    /// Every chosen cluster runs all replicas.
    #[default]
    Duplicated,
    /// Replicas are divided among the chosen clusters.
    Divided,
}

/// How `Divided` replicas are divided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Division {
    /// By the static weight rules (equal weights when there are none).
    #[default]
    StaticWeight,
    /// By how many pods of the workload's shape each cluster can still take.
    DynamicWeight,
}

/// A static weight for the clusters a rule selects.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightRule {
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Clusters by labels.
    pub label_selector: Option<LabelSelector>,
    /// Relative weight.
    pub weight: u32,
}

impl WeightRule {
    /// Whether the rule covers the cluster `name` with `labels`; a rule naming neither
    /// clusters nor labels covers none.
    #[inline]
    pub fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
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

/// Bounds on one cluster's replicas.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBounds {
    /// Cluster name.
    pub name: String,
    /// Lower bound.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_replicas: u32,
    /// Upper bound.
    pub max_replicas: Option<u32>,
}

/// Failover behaviour.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// How long a cluster may be Offline before its replicas move (default
    /// [`DEFAULT_TOLERATION_SECONDS`]).
    pub toleration_seconds: Option<u64>,
    /// Move replicas back when a cluster returns or a new one matches.
    #[serde(default)]
    pub rebalance_on_recovery: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::tests::labels;

    #[test]
    fn affinity_reports_the_first_failed_condition() {
        let a: ClusterAffinity = serde_json::from_value(serde_json::json!({
            "clusterNames": ["a", "b", "c"], "exclude": ["c"],
            "labelSelector": {"matchLabels": {"env": "prod"}},
            "regions": ["eu"], "zones": ["eu-1"]
        }))
        .unwrap();
        let prod = labels(&[("env", "prod")]);
        let cases = [
            ("a", prod.clone(), Some("eu"), Some("eu-1"), None),
            (
                "c",
                prod.clone(),
                Some("eu"),
                Some("eu-1"),
                Some(AffinityMismatch::Excluded),
            ),
            (
                "d",
                prod.clone(),
                Some("eu"),
                Some("eu-1"),
                Some(AffinityMismatch::NotInClusterNames),
            ),
            (
                "a",
                labels(&[]),
                Some("eu"),
                Some("eu-1"),
                Some(AffinityMismatch::LabelSelector),
            ),
            (
                "a",
                prod.clone(),
                Some("us"),
                Some("eu-1"),
                Some(AffinityMismatch::Region),
            ),
            (
                "a",
                prod.clone(),
                None,
                Some("eu-1"),
                Some(AffinityMismatch::Region),
            ),
            (
                "a",
                prod.clone(),
                Some("eu"),
                None,
                Some(AffinityMismatch::Zone),
            ),
        ];
        for (name, l, region, zone, want) in cases {
            assert_eq!(
                a.mismatch(name, &l, region, zone),
                want,
                "{name} {region:?} {zone:?}"
            );
        }
        assert_eq!(
            ClusterAffinity::default().mismatch("x", &labels(&[]), None, None),
            None
        );
    }

    #[test]
    fn tolerations_table() {
        use TaintEffect::*;
        let t = |v: serde_json::Value| serde_json::from_value::<Toleration>(v).unwrap();
        let cases = [
            (
                t(serde_json::json!({"operator": "Exists"})),
                "k",
                None,
                NoExecute,
                true,
            ),
            (
                t(serde_json::json!({"key": "", "operator": "Exists"})),
                "k",
                None,
                NoSchedule,
                true,
            ),
            (
                t(serde_json::json!({"key": "k", "operator": "Exists"})),
                "k",
                Some("v"),
                NoSchedule,
                true,
            ),
            (
                t(serde_json::json!({"key": "j", "operator": "Exists"})),
                "k",
                None,
                NoSchedule,
                false,
            ),
            (
                t(serde_json::json!({"key": "k", "value": "v"})),
                "k",
                Some("v"),
                NoSchedule,
                true,
            ),
            (
                t(serde_json::json!({"key": "k", "value": "w"})),
                "k",
                Some("v"),
                NoSchedule,
                false,
            ),
            (
                t(serde_json::json!({"key": "k"})),
                "k",
                None,
                NoSchedule,
                true,
            ),
            (
                t(serde_json::json!({"key": "k", "effect": "NoSchedule"})),
                "k",
                None,
                NoExecute,
                false,
            ),
            (
                t(serde_json::json!({"key": "k", "effect": ""})),
                "k",
                None,
                NoExecute,
                true,
            ),
        ];
        for (i, (tol, key, value, effect, want)) in cases.into_iter().enumerate() {
            assert_eq!(tol.tolerates(key, value, effect), want, "case {i}: {tol:?}");
        }
        let bad = serde_json::json!({"key": "k", "effect": "Sometimes"});
        assert!(serde_json::from_value::<Toleration>(bad).is_err());
    }

    #[test]
    fn weight_rules_need_a_target() {
        let l = labels(&[("tier", "gold")]);
        let by_name = WeightRule {
            cluster_names: vec!["a".into()],
            weight: 1,
            ..Default::default()
        };
        let by_labels = WeightRule {
            label_selector: Some(LabelSelector::from_labels([("tier", "gold")]).unwrap()),
            weight: 1,
            ..Default::default()
        };
        assert!(by_name.matches("a", &l) && !by_name.matches("b", &l));
        assert!(by_labels.matches("b", &l) && !by_labels.matches("b", &labels(&[])));
        assert!(!WeightRule::default().matches("a", &l));
    }

    #[test]
    fn defaults_when_fields_are_absent() {
        let p: PlacementRules = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(p.toleration_seconds(), DEFAULT_TOLERATION_SECONDS);
        assert!(!p.rebalance_on_recovery());
        let rs: ReplicaScheduling = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(rs.type_, ReplicaSchedulingType::Duplicated);
        let negative = serde_json::json!({"weights": [{"clusterNames": ["a"], "weight": -1}]});
        assert!(serde_json::from_value::<ReplicaScheduling>(negative).is_err());
    }
}

//! `Placement`: the scheduler's decision for one federated workload and its per-cluster state.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::common::Condition;
use crate::governance::PolicyChoice;

/// Where one federated workload runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(group = "federation.meridian.dev", version = "v1alpha1"),
    kube(kind = "Placement", namespaced, status = "PlacementStatus")
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// The federated workload this placement is for.
    pub resource: WorkloadReference,
    /// The scheduler's decision; empty means unscheduled.
    #[serde(default)]
    pub dest_clusters: Vec<TargetCluster>,
}

/// Identifies the federated workload.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReference {
    /// `apps/v1`.
    pub api_version: String,
    /// `Deployment` or `ReplicaSet`.
    pub kind: String,
    /// Name of the workload (same namespace as the Placement).
    pub name: String,
    /// UID of the workload.
    pub uid: Option<String>,
}

/// One cluster's share: an entry of `destClusters`, and what the scheduler's decision is
/// made of. Ordered by cluster, then replicas, so a decision has one canonical order.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct TargetCluster {
    /// Member cluster name.
    pub cluster: String,
    /// Replicas that cluster runs. Unsigned, so the served schema says `minimum: 0` and no
    /// negative share can be stored or decided; it fits a Deployment's `int32` replicas
    /// because a workload's own replicas do.
    pub replicas: u32,
}

impl TargetCluster {
    /// `cluster` runs `replicas`.
    pub fn new(cluster: impl Into<String>, replicas: u32) -> Self {
        Self {
            cluster: cluster.into(),
            replicas,
        }
    }
}

/// Observed state of the placement.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// `Scheduled` and `Propagated` conditions, one per type. Each writer owns its own
    /// type: a strategic merge patch merges the list by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Per-cluster status of the pushed sub-object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterWorkloadStatus>,
    /// Replicas that fit nowhere, and why.
    pub unschedulable: Option<Unschedulable>,
    /// The policy that governs the object and the matching policies it overruled
    /// (written with `Scheduled`, by the same writer).
    pub policy: Option<PolicyChoice>,
}

/// Status of the workload in one member cluster.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterWorkloadStatus {
    /// Member cluster name.
    pub cluster: String,
    /// Desired replicas there.
    #[serde(default)]
    pub replicas: i32,
    /// Ready replicas there.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Available replicas there.
    #[serde(default)]
    pub available_replicas: i32,
    /// Updated replicas there.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Generation of the sub-object the member has observed.
    pub observed_generation: Option<i64>,
    /// Last successful sync (RFC 3339).
    pub last_sync_time: Option<String>,
    /// Last error, empty when in sync.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Services only: ready endpoints of the Service in that member (its own pods).
    pub endpoints: Option<i32>,
    /// Services only: address of that member's lb-agent, once known.
    pub lb_agent: Option<String>,
    /// Services: whether the member's lb-agent receives the Service's traffic (cluster
    /// Ready, lb-agent known, ready endpoints there). Custom kinds whose
    /// ResourceInterpreter names a health condition: whether the copy's is `True`.
    pub healthy: Option<bool>,
    /// HorizontalPodAutoscalers only: the replicas the member's autoscaler last saw.
    pub current_replicas: Option<i32>,
    /// HorizontalPodAutoscalers only: the replicas the member's autoscaler wants.
    pub desired_replicas: Option<i32>,
    /// PodDisruptionBudgets only: how many pod disruptions the member allows now.
    pub disruptions_allowed: Option<i32>,
    /// Copied objects: the member copy's own `status.conditions`, as the member reports
    /// them (an HPA's `ScalingActive`, a PDB's `DisruptionAllowed`, a custom resource's
    /// `Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Replicas that could not be placed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unschedulable {
    /// How many.
    pub replicas: i32,
    /// Why, per cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<ClusterReason>,
}

/// Why one cluster did not take (more) replicas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterReason {
    /// Member cluster name.
    pub cluster: String,
    /// CamelCase reason, e.g. `InsufficientCapacity`.
    pub reason: String,
    /// Detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[cfg(all(test, feature = "kube"))]
mod tests {
    use kube::CustomResourceExt;

    use super::Placement;

    #[test]
    fn conditions_are_a_list_map_keyed_by_type() {
        let crd = serde_json::to_value(Placement::crd()).unwrap();
        let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map", "{conditions}");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
    }
}

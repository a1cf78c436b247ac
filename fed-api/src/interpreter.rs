//! `ResourceInterpreter`: teaches Meridian where a custom workload kind keeps its replicas,
//! its pod template and its status (built-in kinds need none).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// How to read one custom kind.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(group = "federation.meridian.dev", version = "v1alpha1"),
    kube(kind = "ResourceInterpreter", shortname = "ri")
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInterpreterSpec {
    /// The kind this interpreter is for.
    pub target: InterpreterTarget,
    /// Where the replica count is; absent: the kind is only ever `Duplicated`.
    pub replicas: Option<FieldRef>,
    /// Where the pod template is: its requests size capacity, its ConfigMaps and Secrets
    /// are pushed with the object.
    pub pod_template: Option<FieldRef>,
    /// Status fields combined over member copies into the federated object's status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_aggregation: Vec<StatusAggregation>,
    /// When a member copy counts as healthy.
    pub health: Option<HealthRule>,
}

/// The apiVersion and kind an interpreter is for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterTarget {
    /// e.g. `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// e.g. `Rollout`.
    pub kind: String,
}

/// A field of the object, by path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FieldRef {
    /// Dotted path from the object's root, e.g. `.spec.replicas`.
    pub path: String,
}

/// One status field and how member copies' values combine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StatusAggregation {
    /// Dotted path of the field, e.g. `.status.readyReplicas`.
    pub path: String,
    /// How the values combine.
    pub op: AggregationOp,
}

/// How member copies' values of one status field combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AggregationOp {
    /// The sum (replica counts).
    Sum,
    /// The smallest value (e.g. an observed generation every copy has reached).
    Min,
    /// The largest value.
    Max,
}

/// When a member copy is healthy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// The copy is healthy when its condition of this type is `True`.
    pub condition_type: String,
}

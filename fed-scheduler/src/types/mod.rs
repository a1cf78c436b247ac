//! Plain data the scheduler reads and writes: the fleet snapshot, workloads, decisions.
//!
//! Clusters and policies are `fed-api`'s kube-free types, the ones the API server serves,
//! re-exported here; nothing in the core depends on kube or k8s-openapi.

mod decision;
mod snapshot;
mod workload;

pub use decision::{
    ClusterOutcome, ClusterVerdict, Decision, PluginReason, Reason, Strategy, Unschedulable,
    UnschedulableCause, UnschedulableReason, UnschedulableStatus,
};
pub use fed_api::cluster::{Taint, TaintEffect};
pub use fed_api::common::Condition;
pub use fed_api::object::{Cluster, ObjectMeta, PropagationPolicy};
pub use fed_api::placement::TargetCluster;
pub use fed_api::policy::{
    ClusterAffinity, ClusterBounds, DEFAULT_TOLERATION_SECONDS, Division, Failover, PlacementRules,
    ReplicaScheduling, ReplicaSchedulingType, ResourceSelector, SpreadConstraint, SpreadField,
    Toleration, TolerationOperator, WeightRule,
};
pub use fed_api::selector::LabelSelector;
#[cfg(test)]
pub(crate) use snapshot::ServedApis;
pub use snapshot::Snapshot;
pub(crate) use snapshot::{ClusterState, Health, Resources};
pub use workload::{ContainerRequests, PodRequests, Workload, WorkloadError};

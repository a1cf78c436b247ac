//! Plain data the scheduler reads and writes: clusters, policies, workloads, decisions.
//!
//! The serde shapes follow `API.md` (camelCase), so callers can deserialize straight out
//! of Kubernetes objects' JSON; nothing here depends on kube or k8s-openapi.

mod cluster;
mod decision;
mod policy;
mod selector;
mod workload;

pub use cluster::Snapshot;
pub use cluster::{
    ApiEnablement, Cluster, ClusterSpec, ClusterStatus, Condition, NodeCount, ObjectMeta,
    ResourceList, ResourceSummary, Taint, TaintEffect,
};
pub(crate) use cluster::{ClusterState, Health, Resources};
pub use decision::{
    ClusterOutcome, ClusterVerdict, Decision, PluginReason, Reason, Strategy, TargetCluster,
    Unschedulable, UnschedulableCause, UnschedulableReason, UnschedulableStatus,
};
pub use policy::{
    ClusterAffinity, ClusterBounds, DEFAULT_TOLERATION_SECONDS, Division, Failover, Placement,
    PolicySpec, PropagationPolicy, ReplicaScheduling, ReplicaSchedulingType, ResourceSelector,
    SpreadConstraint, SpreadField, Toleration, TolerationOperator, WeightRule,
};
pub use selector::{LabelSelector, LabelSelectorRequirement, SelectorOperator};
pub use workload::{PodRequests, Workload, WorkloadError};

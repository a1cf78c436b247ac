//! The workload kinds Meridian divides across members, and the key that names one federated
//! workload (in the scheduler's and the workload controller's queues alike).

use std::fmt;

use crate::placement::WorkloadReference;

/// A federated workload kind: one whose pods Meridian divides across members. All take
/// one generic path; what differs by kind (the field holding the count, the status) is
/// asked of the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `batch/v1` Job: its parallelism is divided.
    Job,
}

impl WorkloadKind {
    /// Every workload kind.
    pub const ALL: [WorkloadKind; 4] = [
        WorkloadKind::Deployment,
        WorkloadKind::ReplicaSet,
        WorkloadKind::StatefulSet,
        WorkloadKind::Job,
    ];

    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Job => "Job",
        }
    }

    /// Parses a Kubernetes kind name; other kinds are not workloads.
    pub fn parse(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The workload kind of `kind` in API group `group`, if it is one.
    pub fn of_group(group: &str, kind: &str) -> Option<Self> {
        Self::parse(kind).filter(|k| k.group() == group)
    }

    /// The workload kind of `kind` in `api_version` (`apps/v1`, `batch/v1`), if it is one.
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        Self::parse(kind).filter(|k| k.api_version() == api_version)
    }

    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            WorkloadKind::Job => "batch",
            _ => "apps",
        }
    }

    /// The `apiVersion` objects of this kind are read and written in.
    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::Job => "batch/v1",
            _ => "apps/v1",
        }
    }

    /// The field of `spec` holding the count the scheduler divides: a Job's pods run
    /// `parallelism` at a time, the others keep `replicas`.
    pub fn count_field(self) -> &'static str {
        match self {
            WorkloadKind::Job => "parallelism",
            _ => "replicas",
        }
    }

    /// The plural resource name.
    pub fn plural(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "deployments",
            WorkloadKind::ReplicaSet => "replicasets",
            WorkloadKind::StatefulSet => "statefulsets",
            WorkloadKind::Job => "jobs",
        }
    }

    /// The dynamic API resource of this kind.
    #[cfg(feature = "kube")]
    pub fn api_resource(self) -> kube::api::ApiResource {
        kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(self.group(), "v1", self.as_str()),
            self.plural(),
        )
    }
}

/// Names one federated workload: kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKey {
    /// Kind.
    pub kind: WorkloadKind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl WorkloadKey {
    /// Builds a key.
    pub fn new(kind: WorkloadKind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Name of the workload's Placement (same namespace): `deployment-web`.
    pub fn placement_name(&self) -> String {
        placement_name(self.kind.as_str(), &self.name)
    }

    /// The workload a Placement is about, from its namespace and `spec.resource`.
    pub fn of_placement(namespace: &str, resource: &WorkloadReference) -> Option<Self> {
        WorkloadKind::of(&resource.api_version, &resource.kind)
            .map(|k| WorkloadKey::new(k, namespace, resource.name.clone()))
    }
}

impl fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// The name of the Placement of object `name` of `kind`: `deployment-web`.
pub fn placement_name(kind: &str, name: &str) -> String {
    format!("{}-{name}", kind.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let k = WorkloadKey::new(WorkloadKind::Deployment, "shop", "web");
        assert_eq!(k.placement_name(), "deployment-web");
        assert_eq!(k.to_string(), "Deployment shop/web");
        let r = WorkloadKey::new(WorkloadKind::ReplicaSet, "shop", "batch");
        assert_eq!(r.placement_name(), "replicaset-batch");
        assert_eq!(r.to_string(), "ReplicaSet shop/batch");
        assert_eq!(
            WorkloadKind::parse("ReplicaSet"),
            Some(WorkloadKind::ReplicaSet)
        );
        assert_eq!(
            WorkloadKind::parse("StatefulSet"),
            Some(WorkloadKind::StatefulSet)
        );
        assert_eq!(WorkloadKind::parse("DaemonSet"), None);
        assert_eq!(
            WorkloadKey::new(WorkloadKind::Job, "b", "x").placement_name(),
            "job-x"
        );
        assert_eq!(WorkloadKind::of("batch/v1", "Job"), Some(WorkloadKind::Job));
        assert_eq!(WorkloadKind::of("apps/v1", "Job"), None);
        assert_eq!(
            WorkloadKind::of_group("apps", "StatefulSet"),
            Some(WorkloadKind::StatefulSet)
        );
        assert_eq!(WorkloadKind::of_group("batch", "Deployment"), None);
        assert_eq!(WorkloadKind::Job.count_field(), "parallelism");
        assert_eq!(WorkloadKind::StatefulSet.count_field(), "replicas");
        assert_eq!(placement_name("Service", "web"), "service-web");
    }

    #[test]
    fn placements_of_workloads_only() {
        let reference = |api_version: &str, kind: &str| WorkloadReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "web".into(),
            ..Default::default()
        };
        assert_eq!(
            WorkloadKey::of_placement("shop", &reference("apps/v1", "Deployment")),
            Some(WorkloadKey::new(WorkloadKind::Deployment, "shop", "web"))
        );
        assert_eq!(
            WorkloadKey::of_placement("shop", &reference("v1", "Deployment")),
            None
        );
        assert_eq!(
            WorkloadKey::of_placement("shop", &reference("apps/v1", "Job")),
            None
        );
        assert_eq!(
            WorkloadKey::of_placement("shop", &reference("batch/v1", "Job")),
            Some(WorkloadKey::new(WorkloadKind::Job, "shop", "web"))
        );
    }

    #[cfg(feature = "kube")]
    #[test]
    fn api_resources() {
        let ar = WorkloadKind::Deployment.api_resource();
        assert_eq!(
            (ar.plural.as_str(), ar.api_version.as_str()),
            ("deployments", "apps/v1")
        );
        let ar = WorkloadKind::Job.api_resource();
        assert_eq!(
            (
                ar.plural.as_str(),
                ar.api_version.as_str(),
                ar.group.as_str()
            ),
            ("jobs", "batch/v1", "batch")
        );
        let ar = WorkloadKind::StatefulSet.api_resource();
        assert_eq!(
            (ar.plural.as_str(), ar.api_version.as_str()),
            ("statefulsets", "apps/v1")
        );
    }
}

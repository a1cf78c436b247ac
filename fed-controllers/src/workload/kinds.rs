//! The kinds the workload controller propagates, and the key that names one federated workload.

use std::fmt;

use kube::api::{ApiResource, GroupVersionKind};

/// A federated workload kind. Deployments and ReplicaSets take one generic path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
}

impl Kind {
    /// Every propagated workload kind.
    pub const ALL: [Kind; 2] = [Kind::Deployment, Kind::ReplicaSet];

    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
        }
    }

    /// Parses a Kubernetes kind name.
    pub fn parse(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// The dynamic API resource of this kind.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            Kind::Deployment => "deployments",
            Kind::ReplicaSet => "replicasets",
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apps", "v1", self.as_str()),
            plural,
        )
    }
}

/// A kind of object the pod template depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DepKind {
    /// `v1` ConfigMap.
    ConfigMap,
    /// `v1` Secret.
    Secret,
}

impl DepKind {
    /// Both dependency kinds.
    pub const ALL: [DepKind; 2] = [DepKind::ConfigMap, DepKind::Secret];

    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::ConfigMap => "ConfigMap",
            DepKind::Secret => "Secret",
        }
    }

    /// The dynamic API resource of this kind.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            DepKind::ConfigMap => "configmaps",
            DepKind::Secret => "secrets",
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", self.as_str()), plural)
    }
}

/// Names one federated workload: kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadKey {
    /// Kind.
    pub kind: Kind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl WorkloadKey {
    /// Builds a key.
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        WorkloadKey {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Name of the workload's Placement, as the scheduler names it: `deployment-web`.
    pub fn placement_name(&self) -> String {
        format!("{}-{}", self.kind.as_str().to_lowercase(), self.name)
    }

    /// The workload a Placement is about, from its name and `spec.resource`.
    pub fn of_placement(
        namespace: &str,
        resource: &fed_api::placement::WorkloadReference,
    ) -> Option<Self> {
        (resource.api_version == "apps/v1")
            .then(|| Kind::parse(&resource.kind))
            .flatten()
            .map(|k| WorkloadKey::new(k, namespace, resource.name.clone()))
    }
}

impl fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let k = WorkloadKey::new(Kind::Deployment, "shop", "web");
        assert_eq!(k.placement_name(), "deployment-web");
        assert_eq!(k.to_string(), "Deployment shop/web");
        assert_eq!(
            WorkloadKey::new(Kind::ReplicaSet, "a", "b").placement_name(),
            "replicaset-b"
        );
        assert_eq!(Kind::parse("ReplicaSet"), Some(Kind::ReplicaSet));
        assert_eq!(Kind::parse("StatefulSet"), None);
        assert_eq!(Kind::Deployment.api_resource().plural, "deployments");
        assert_eq!(DepKind::Secret.api_resource().api_version, "v1");
    }
}

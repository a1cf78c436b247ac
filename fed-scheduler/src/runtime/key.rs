//! Identity of a federated workload in the work queue, and its Placement's name.

use std::fmt;

/// The workload kinds the scheduler places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
}

impl WorkloadKind {
    /// The `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::ReplicaSet => "ReplicaSet",
        }
    }

    /// Parses a `kind` string; other kinds are not scheduled.
    pub fn parse(kind: &str) -> Option<Self> {
        match kind {
            "Deployment" => Some(WorkloadKind::Deployment),
            "ReplicaSet" => Some(WorkloadKind::ReplicaSet),
            _ => None,
        }
    }
}

/// `kind namespace/name` of a workload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
        crate::placement_name(self.kind.as_str(), &self.name)
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
        let k = WorkloadKey::new(WorkloadKind::ReplicaSet, "shop", "batch");
        assert_eq!(k.placement_name(), "replicaset-batch");
        assert_eq!(k.to_string(), "ReplicaSet shop/batch");
        assert_eq!(
            WorkloadKind::parse("Deployment"),
            Some(WorkloadKind::Deployment)
        );
        assert_eq!(WorkloadKind::parse("StatefulSet"), None);
    }
}

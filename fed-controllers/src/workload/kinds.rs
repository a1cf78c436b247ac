//! The kinds the workload controller propagates, and the key that names one federated workload.

use kube::api::{ApiResource, GroupVersionKind};

/// Names one federated workload (the scheduler's queue key too).
pub use fed_api::workload::WorkloadKey;
/// A federated workload kind: the one the scheduler places too.
pub use fed_api::workload::WorkloadKind as Kind;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Kind::Deployment.api_resource().plural, "deployments");
        assert_eq!(DepKind::Secret.api_resource().api_version, "v1");
    }
}

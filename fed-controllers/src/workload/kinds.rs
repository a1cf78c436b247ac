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
    /// `v1` ServiceAccount (`serviceAccountName`, other than every namespace's `default`).
    ServiceAccount,
    /// `v1` PersistentVolumeClaim (`persistentVolumeClaim.claimName` volumes).
    PersistentVolumeClaim,
}

impl DepKind {
    /// Every dependency kind.
    pub const ALL: [DepKind; 4] = [
        DepKind::ConfigMap,
        DepKind::Secret,
        DepKind::ServiceAccount,
        DepKind::PersistentVolumeClaim,
    ];

    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::ConfigMap => "ConfigMap",
            DepKind::Secret => "Secret",
            DepKind::ServiceAccount => "ServiceAccount",
            DepKind::PersistentVolumeClaim => "PersistentVolumeClaim",
        }
    }

    /// The dynamic API resource of this kind.
    pub fn api_resource(self) -> ApiResource {
        let plural = match self {
            DepKind::ConfigMap => "configmaps",
            DepKind::Secret => "secrets",
            DepKind::ServiceAccount => "serviceaccounts",
            DepKind::PersistentVolumeClaim => "persistentvolumeclaims",
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", self.as_str()), plural)
    }

    /// The top-level fields of the federated object its member copy carries. A
    /// ServiceAccount's token `secrets` are left out: the member's token controller writes
    /// them.
    pub fn copied_fields(self) -> &'static [&'static str] {
        match self {
            DepKind::ConfigMap | DepKind::Secret => &["data", "binaryData", "type", "immutable"],
            DepKind::ServiceAccount => &["imagePullSecrets", "automountServiceAccountToken"],
            DepKind::PersistentVolumeClaim => &["spec"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Kind::Deployment.api_resource().plural, "deployments");
        assert_eq!(DepKind::Secret.api_resource().api_version, "v1");
        assert_eq!(
            DepKind::PersistentVolumeClaim.api_resource().plural,
            "persistentvolumeclaims"
        );
        assert_eq!(
            DepKind::ServiceAccount.api_resource().plural,
            "serviceaccounts"
        );
    }
}

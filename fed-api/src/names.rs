//! Well-known labels, annotations and finalizers shared by Meridian's components.

/// Marks objects Meridian pushed into a member cluster.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on objects Meridian manages.
pub const MANAGED_BY_VALUE: &str = "meridian";
/// The uid of the federated object a member-cluster object belongs to.
pub const OWNER_UID_LABEL: &str = "federation.meridian.dev/owner-uid";
/// Federation v1's replica preferences annotation, honoured with v1 semantics.
pub const REPLICA_SET_PREFERENCES_ANNOTATION: &str =
    "federation.kubernetes.io/replica-set-preferences";
/// Finalizer that holds a federated workload until member objects are removed.
pub const WORKLOAD_FINALIZER: &str = "federation.meridian.dev/member-cleanup";
/// Namespace Meridian uses in member clusters and the federation for its own objects.
pub const SYSTEM_NAMESPACE: &str = "meridian-system";

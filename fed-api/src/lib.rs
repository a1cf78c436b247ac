//! Types of Meridian's API group `federation.meridian.dev/v1alpha1`, defined once, and the
//! names (labels, annotations, condition types) every component shares.
//!
//! Every spec and status type here is plain serde data with no kube dependency: the
//! scheduler's pure core, `fedctl plan` and the controllers' decision functions use them
//! as they are, inside the kube-free envelopes of [`object`]. With the `kube` feature (on
//! by default) the kube `CustomResource` wrappers ([`Cluster`], [`PropagationPolicy`], ...)
//! are derived beside them, so the API server serves and the clients read the very same
//! types: a schema change is a compile error in every crate that reads the field.
//!
//! Shared helpers live here too: label selectors matched by `apimachinery` ([`selector`]),
//! the one quantity codec capacity is written and read with ([`quantity`]), conditions.
//!
//! Optional fields are left out of the JSON when absent and read as absent when missing:
//! each type says so once with `#[skip_serializing_none]` rather than on every field.

/// A cluster-scoped kind whose spec is a namespaced kind's spec, as it is: the newtype (so the
/// kube wrapper gets its own kind and scope) reads and writes as the inner spec and derefs
/// to it, so code written for the namespaced kind reads both.
macro_rules! cluster_wide_spec {
    (
        $(#[$doc:meta])*
        $name:ident($inner:ident), kind = $kind:tt, shortname = $short:tt
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[cfg_attr(
            feature = "kube",
            derive(kube::CustomResource),
            kube(group = "federation.meridian.dev", version = "v1alpha1"),
            kube(kind = $kind, shortname = $short)
        )]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl std::ops::Deref for $name {
            type Target = $inner;

            fn deref(&self) -> &$inner {
                &self.0
            }
        }
    };
}

pub mod cluster;
pub mod common;
pub mod copies;
pub mod governance;
pub mod interpreter;
pub mod lbconfig;
pub mod names;
pub mod object;
pub mod overrides;
pub mod placement;
pub mod policy;
pub mod quantity;
pub mod selector;
pub mod workload;

#[cfg(feature = "kube")]
pub use cluster::Cluster;
pub use cluster::{ClusterSpec, ClusterStatus};
#[cfg(feature = "kube")]
pub use interpreter::ResourceInterpreter;
pub use interpreter::ResourceInterpreterSpec;
#[cfg(feature = "kube")]
pub use overrides::{ClusterOverridePolicy, OverridePolicy};
pub use overrides::{ClusterOverridePolicySpec, OverridePolicySpec};
#[cfg(feature = "kube")]
pub use placement::Placement;
pub use placement::{PlacementSpec, PlacementStatus};
#[cfg(feature = "kube")]
pub use policy::{ClusterPropagationPolicy, PropagationPolicy};
pub use policy::{ClusterPropagationPolicySpec, PropagationPolicySpec};

/// The API group of Meridian's own kinds.
pub const GROUP: &str = "federation.meridian.dev";
/// The served version of that group.
pub const VERSION: &str = "v1alpha1";
/// `group/version`, as written in `apiVersion`.
pub const API_VERSION: &str = "federation.meridian.dev/v1alpha1";

//! Types of Meridian's API group `federation.meridian.dev/v1alpha1` and the names
//! (labels, annotations, condition types) every component shares.

pub mod cluster;
pub mod common;
pub mod lbconfig;
pub mod names;
pub mod placement;
pub mod policy;

pub use cluster::{Cluster, ClusterSpec, ClusterStatus};
pub use placement::{Placement, PlacementSpec, PlacementStatus};
pub use policy::{PropagationPolicy, PropagationPolicySpec};

/// The API group of Meridian's own kinds.
pub const GROUP: &str = "federation.meridian.dev";
/// The served version of that group.
pub const VERSION: &str = "v1alpha1";
/// `group/version`, as written in `apiVersion`.
pub const API_VERSION: &str = "federation.meridian.dev/v1alpha1";

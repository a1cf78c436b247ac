//! The live scheduler around the pure core: watches the federation API, decides each
//! workload with [`crate::schedule`] and writes its Placement (kube-dependent; the core
//! never imports this module).
//!
//! [`controller::run`] wires it together: [`watch`] reflectors feed the [`index`] and
//! the work queue (`meridian_runtime::queue`); workers take keys and [`reconcile`] them,
//! computing writes with the pure [`desired`] module and applying them through the
//! [`writer`], with Events recorded best effort (`meridian_runtime::events`) and
//! evictions limited by one token bucket ([`evictions`]; [`Rate`], [`TokenBucket`]).
//! [`copies`] places the objects of every other kind a policy names (a copy in each
//! selected cluster, or shares of a divided custom object), evicting within the same
//! budget, and looks up kinds not served yet again as `meridian_runtime::kind_retry` says.

pub mod cli;
pub mod controller;
pub mod copies;
pub mod desired;
pub mod evictions;
pub mod index;
pub mod key;
pub mod metrics;
pub mod reconcile;
pub mod watch;
pub mod writer;

pub use controller::{Config, ControllerError, run};
pub use key::{WorkloadKey, WorkloadKind};
pub use meridian_runtime::rate::{Rate, TokenBucket};

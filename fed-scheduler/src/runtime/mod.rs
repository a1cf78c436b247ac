//! The live scheduler around the pure core: watches the federation API, decides each
//! workload with [`crate::schedule`] and writes its Placement (kube-dependent; the core
//! never imports this module).
//!
//! [`controller::run`] wires it together: [`watch`] reflectors feed the [`index`] and
//! the [`queue`]; workers take keys and [`reconcile`] them, computing writes with the
//! pure [`desired`] module and applying them through the [`writer`], with [`events`]
//! sent best effort and evictions limited by a [`rate`] token bucket.

pub mod cli;
pub mod controller;
pub mod desired;
pub mod events;
pub mod index;
pub mod key;
pub mod metrics;
pub mod queue;
pub mod rate;
pub mod reconcile;
pub mod watch;
pub mod writer;

pub use controller::{Config, ControllerError, run};
pub use key::{WorkloadKey, WorkloadKind};
pub use rate::{Rate, TokenBucket};

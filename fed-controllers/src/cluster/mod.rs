//! The cluster controller: probes members, tracks their capacity, writes `Cluster.status`.
//!
//! Pure decisions — [`probe`], [`capacity`], [`conditions`], [`guard::evaluate`],
//! [`status`], the renewal and sweep of [`lease`] — are separate from the effects:
//! [`member`] runs one task per member cluster, [`controller`] supervises them. Each
//! member's liveness is its Lease; its Cluster status is written when it changes.

pub mod capacity;
pub mod conditions;
pub mod controller;
pub use crate::credentials;
pub mod discovery;
pub mod events;
pub mod guard;
pub mod lease;
pub mod member;
pub mod probe;
pub mod prober;
pub mod status;

pub use controller::{ControllerConfig, run};

//! The workload controller: pushes federated Deployments and ReplicaSets (with their
//! namespace and the ConfigMaps/Secrets their pod templates use) into the member clusters
//! their Placement names, with each member's replica share; aggregates the members' status
//! into `Placement.status.clusters` and the federated object's `status`; reverts edits made
//! in members; cleans members up behind the `member-cleanup` finalizer.
//!
//! Pure decisions — [`deps`], [`desired`], [`plan`], [`drift`], [`ownership`], [`status`] —
//! are separate from the effects: [`member`] runs one task and queue per member cluster,
//! [`controller`] watches the federation and hands members their intents.

pub mod compact;
pub mod controller;
pub mod deps;
pub mod desired;
pub mod drift;
pub mod echo;
pub mod events;
pub mod intents;
pub mod kinds;
pub mod member;
pub mod objects;
pub mod ownership;
pub mod pacing;
pub mod placements;
pub mod plan;
pub mod status;
pub mod status_spacing;

use std::sync::Arc;
use std::time::Duration;

use crate::member_client::{Limits, MemberClients};

pub use controller::run;

/// Tunables of the workload controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Deadline of one member or federation request.
    pub sync_timeout: Duration,
    /// First retry delay after a failed member sync.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Member clients (share the cluster controller's: one connection per member).
    pub clients: Arc<MemberClients>,
    /// Federation-side workers (reconciles of different workloads run side by side).
    pub workers: usize,
    /// Workers per member cluster (syncs of different workloads run side by side).
    pub member_workers: usize,
    /// How long a member's status report waits for the reports that follow it before the
    /// central controller aggregates them (one status write for a burst).
    pub status_delay: Duration,
    /// How long an Event gathers the same outcome from other members before it is written.
    pub event_window: Duration,
    /// Shortest time between two writes of a Placement's per-cluster entries while its
    /// Propagated condition stays the same (see [`pacing`]).
    pub placement_status_interval: Duration,
    /// How often every workload is reconciled whatever its events said.
    pub resync_period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            clients: MemberClients::new(Limits::default()),
            workers: 32,
            member_workers: 4,
            status_delay: Duration::from_millis(100),
            event_window: Duration::from_millis(250),
            placement_status_interval: Duration::from_secs(1),
            resync_period: Duration::from_secs(600),
        }
    }
}

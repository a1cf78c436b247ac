//! The workload controller: pushes federated Deployments, ReplicaSets, StatefulSets and
//! Jobs (with their namespace and the ConfigMaps, Secrets, ServiceAccounts and
//! PersistentVolumeClaims their pod templates use, [`deps`]) into the
//! member clusters their Placement names, with each member's share (a Job's parallelism and
//! completions, [`job`]); aggregates the members' status
//! into `Placement.status.clusters` and the federated object's `status`; reverts edits made
//! in members (but not the replicas a member's copy of an HPA writes, [`hpa`]); cleans
//! members up behind the `member-cleanup` finalizer.
//!
//! Pure decisions — [`deps`], [`hpa`], [`desired`], [`wants`] and [`dep_wants`] (the copies of the
//! workload and of its dependencies each member gets, override policies applied), [`plan`], [`drift`], [`ownership`], [`status`], [`job_status`] —
//! are separate from the effects: [`member`] runs one task and queue per member cluster,
//! [`controller`] watches the federation and hands members their intents, `inputs` telling
//! what each federation event means for its queue.

pub mod controller;
pub mod copy_index;
pub mod dep_drift;
pub mod dep_wants;
pub mod deps;
pub mod desired;
pub mod drift;
pub mod echo;
pub mod events;
mod finalize;
pub mod hpa;
mod inputs;
pub mod intents;
pub mod job;
pub mod job_status;
pub mod kinds;
pub mod member;
pub mod objects;
pub mod ownership;
pub mod pacing;
pub mod placements;
pub mod plan;
pub mod status;
pub mod status_spacing;
pub mod wants;

use std::time::Duration;

pub use controller::run;

/// Tunables of the workload controller.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Request deadline, retry backoff and member clients.
    pub fleet: crate::fleet::Settings,
    /// Federation-side workers (reconciles of different workloads run side by side).
    pub workers: usize,
    /// Workers per member cluster (syncs of different workloads run side by side).
    pub member_workers: usize,
    /// How long a member's status report waits for the reports that follow it before the
    /// central controller aggregates them (one status write for a burst).
    pub status_delay: Duration,
    /// How long a status write waits for the scheduler's answer to a scale, or for the
    /// first destination whose controller acts on a new copy (a member's Deployment
    /// controller observes one within milliseconds; one whose controllers are down gets
    /// its entries written all the same, saying the copy is there and not observed).
    pub status_hold: Duration,
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
            fleet: crate::fleet::Settings::default(),
            workers: 32,
            member_workers: 4,
            status_delay: Duration::from_millis(100),
            status_hold: Duration::from_secs(2),
            event_window: Duration::from_millis(250),
            placement_status_interval: Duration::from_secs(1),
            resync_period: Duration::from_secs(600),
        }
    }
}

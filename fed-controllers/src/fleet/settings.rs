//! The tunables every member fleet shares: request deadline, retry backoff, the member
//! clients (one connection per member for the whole process) and the process-wide budget of
//! member syncs.

use std::sync::Arc;
use std::time::Duration;

use meridian_runtime::queue::{self, Backoff};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::Answering;
use crate::member_client::{Limits, MemberClients};

/// Tunables of a member fleet.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Deadline of one member or federation request.
    pub sync_timeout: Duration,
    /// First retry delay after a failure.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Member clients (shared with the other controllers: one connection per member).
    pub clients: Arc<MemberClients>,
    /// Member syncs in progress at once over the whole process: every member, every
    /// controller (see [`Settings::sync_slot`]).
    pub syncs: Arc<Semaphore>,
}

/// How long a status look may wait behind changes to what is wanted before they take turns:
/// a stream of new work (a GitOps sync of thousands of objects) slows the federated status
/// down, but never holds a finished rollout's READY back until the stream ends.
pub const STATUS_WAIT_BOUND: Duration = Duration::from_secs(1);

/// Default of [`Settings::syncs`]: enough to keep a thousand members' writes flowing at
/// hundreds of microseconds to tens of milliseconds each, few enough that a burst never
/// queues thousands of tasks ahead of a probe.
pub const CONCURRENT_SYNCS: usize = 256;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            clients: MemberClients::new(Limits::default()),
            syncs: Arc::new(Semaphore::new(CONCURRENT_SYNCS)),
        }
    }
}

impl Settings {
    /// The retry delays after failures.
    pub fn backoff(&self) -> Backoff {
        Backoff::jittered(self.backoff_base, self.backoff_max)
    }

    /// Waits for a slot to sync one object in one member, held until the slot is dropped;
    /// a member that does not answer ([`Answering`]) syncs without one.
    ///
    /// A workload created on a thousand members is a thousand syncs at once, each with a
    /// few member requests; with four workers per member, two hundred such workloads had
    /// four thousand syncs in flight, their answers queued on the process's cores, and the
    /// member probes and Lease renewals waiting behind them timed out: healthy members went
    /// NotReady under load and were failed over, which made more work. Bounding the syncs
    /// in progress (not each request, so a sync's deadlines start once it runs) keeps the
    /// tasks ready to run few, so the health checks, which take no slot, are answered in
    /// time. A member that does not answer spends its syncs waiting out deadlines, not the
    /// cores: left in the budget, a partitioned part of the fleet would hold every slot.
    pub async fn sync_slot(&self, member: &Answering) -> Option<SemaphorePermit<'_>> {
        if !member.answers() {
            return None;
        }
        // The semaphore is never closed: `None` cannot happen, and would only mean no bound.
        self.syncs.acquire().await.ok()
    }

    /// A work queue retrying with [`Settings::backoff`].
    pub fn queue(&self) -> queue::Settings {
        queue::Settings::jittered(self.backoff_base, self.backoff_max)
    }

    /// A central controller's queue: [`Settings::queue`], with what members report (status
    /// looks) in the low lane for at most [`STATUS_WAIT_BOUND`].
    pub fn central_queue(&self) -> queue::Settings {
        queue::Settings {
            low_lane_bound: Some(STATUS_WAIT_BOUND),
            ..self.queue()
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt as _;

    use super::*;

    #[test]
    fn syncs_wait_for_a_slot_unless_their_member_does_not_answer() {
        let settings = Settings {
            syncs: Arc::new(Semaphore::new(1)),
            ..Settings::default()
        };
        let (answers, silent) = (Answering::default(), Answering::default());
        silent.set(false);
        let held = settings
            .sync_slot(&answers)
            .now_or_never()
            .expect("a free slot is taken at once");
        assert!(held.is_some());
        assert!(
            settings.sync_slot(&answers).now_or_never().is_none(),
            "an answering member's sync waits for the slot"
        );
        assert!(
            matches!(settings.sync_slot(&silent).now_or_never(), Some(None)),
            "a silent member's sync runs at once, without a slot"
        );
        drop(held);
        assert!(matches!(
            settings.sync_slot(&answers).now_or_never(),
            Some(Some(_))
        ));
    }
}

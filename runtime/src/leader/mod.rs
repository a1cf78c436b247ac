//! Leader election through a `coordination.k8s.io/v1` Lease, with client-go's semantics,
//! shared by every component of which several replicas may run (fed-scheduler,
//! fed-controllers).
//!
//! - [`record`]: the Lease's election record and the pure acquire-or-renew decision.
//! - [`store`]: where the record lives ([`store::KubeLeases`] through the API;
//!   [`memory::MemoryLeases`] in process, for tests).
//! - [`elector`]: the loop: campaign, renew every retry period, lose the term when no
//!   renewal succeeds within the renew deadline, release the Lease on a clean stop.
//! - [`gate`]: the write gate in the component's API clients, open only during a term.
//! - [`args`]: the `--leader-elect*` flags.
//!
//! How a component uses it ([`Election::run`]): it builds its clients through
//! [`Election::gate`], so every write (to the federation or to a member, Events included)
//! is refused unless this replica leads; it may start its watches and caches at once (a
//! standby keeps them warm and takes over without re-listing) and starts the loops that
//! write after [`gate::Gate::leading`]. When the term is lost the gate is already closed
//! and `run` returns [`RunError::Lost`]: the binary exits non-zero, as
//! kube-controller-manager does, and restarts as a candidate with nothing of the old term
//! in memory (queues, pacing, what it believed it had written). On SIGTERM the gate
//! closes, writes in flight get a moment to finish, and the Lease is released so a
//! standby takes over at once rather than after a lease duration.

pub mod args;
pub mod elector;
pub mod gate;
pub mod memory;
pub mod metrics;
pub mod record;
pub mod store;

#[cfg(test)]
mod tests;

use std::future::Future;

pub use args::LeaderElectionArgs;
pub use elector::{Elector, Lost, Settings};
pub use gate::{Gate, NotLeading, Role};
pub use metrics::ElectionMetrics;
pub use store::{KubeLeases, LeaseStore};

use crate::shutdown::Shutdown;

/// Why [`Election::run`] ended other than by a clean stop.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The term was lost: the process must stop (its writes already are).
    #[error(transparent)]
    Lost(Lost),
    /// The component's own work failed.
    #[error(transparent)]
    Work(E),
}

/// One component's election: the gate its clients write through and, when the election
/// is on, the elector that opens it.
pub struct Election<S = KubeLeases> {
    elector: Option<Elector<S>>,
    gate: Gate,
}

impl Election<KubeLeases> {
    /// The election `settings` describe (`None`: off, everything is written at once) over
    /// a Lease read and written with `client`, which must not be gated itself.
    pub fn kube(
        settings: Option<Settings>,
        client: kube::Client,
        metrics: ElectionMetrics,
    ) -> Self {
        let store = settings
            .as_ref()
            .map(|s| KubeLeases::new(client, &s.namespace, &s.name));
        Self::with_store(settings.zip(store), metrics)
    }
}

impl<S: LeaseStore> Election<S> {
    /// An election over `store` (`None`: off).
    pub fn with_store(election: Option<(Settings, S)>, metrics: ElectionMetrics) -> Self {
        match election {
            None => Self {
                elector: None,
                gate: Gate::unelected(metrics),
            },
            Some((settings, store)) => {
                let gate = Gate::candidate(&settings.name, metrics);
                Self {
                    elector: Some(Elector::new(settings, store, gate.clone())),
                    gate,
                }
            }
        }
    }

    /// The gate to build the component's clients with.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// [`Election::run`] for a process that ends with it: `Ok` on a clean stop or when
    /// `work` is done, the work's error, or the lost term as one.
    pub async fn run_to_end<T, E: From<Lost>>(
        self,
        shutdown: &Shutdown,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<(), E> {
        match self.run(shutdown, work).await {
            Ok(_) => Ok(()),
            Err(RunError::Lost(lost)) => Err(lost.into()),
            Err(RunError::Work(e)) => Err(e),
        }
    }

    /// Runs `work` (which waits for [`Gate::leading`] before it writes) beside the
    /// election until `shutdown` (`Ok(None)`, the Lease released), until `work` ends
    /// (its result; the Lease released), or until the term is lost
    /// ([`RunError::Lost`]; `work` is dropped, and could not write any more anyway).
    pub async fn run<T, E>(
        self,
        shutdown: &Shutdown,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<Option<T>, RunError<E>> {
        let Some(elector) = self.elector else {
            return match shutdown.run_until(work).await {
                None => Ok(None),
                Some(r) => r.map(Some).map_err(RunError::Work),
            };
        };
        let stop = shutdown.child();
        // Its own task: polled beside `work`, a renewal would wait whenever the
        // component's loops run long between awaits (hundreds of members connecting at
        // once), and the term would be lost for want of a poll. Aborted if `run` is dropped.
        let election = async {
            match tokio_util::task::AbortOnDropHandle::new(tokio::spawn(elector.run(stop.clone())))
                .await
            {
                Ok(r) => r,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        };
        tokio::pin!(election, work);
        tokio::select! {
            r = &mut election => match r {
                Ok(()) => Ok(None),
                Err(lost) => Err(RunError::Lost(lost)),
            },
            r = &mut work => {
                // Hand the Lease on before reporting how the work ended.
                stop.trigger();
                let _ = election.await;
                r.map(Some).map_err(RunError::Work)
            }
        }
    }
}

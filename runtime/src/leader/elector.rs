//! The election loop (client-go's `LeaderElector`): campaign until the Lease is ours,
//! then renew it every retry period until a renewal fails past the renew deadline (the
//! term is lost) or the process stops (the Lease is released).
//!
//! A candidate reads the Lease every retry period (jittered, as client-go does) and also
//! watches it, so it sees each renewal when it happens: expiry is `observed + duration`
//! on its own clock, and it tries at that moment rather than at its next poll. A leader
//! renews with the resourceVersion it last wrote (one request) and falls back to a read
//! when that conflicts.

use std::time::Duration;

use futures::StreamExt as _;
use jiff::Timestamp;
use tokio::time::Instant;

use super::gate::Gate;
use super::record::{Observed, Step, Stored, decide};
use super::store::{LeaseStore, StoreError};
use crate::error::Report;
use crate::shutdown::Shutdown;

/// client-go's `JitterFactor`: a candidate's poll comes after `retry * (1 + rand * 1.2)`.
pub const JITTER: f64 = 1.2;
/// How long writes in flight get to finish on shutdown before the Lease is released.
const DRAIN: Duration = Duration::from_secs(2);

/// The election's timing and names (validated by [`super::args`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// This replica's name in the Lease (unique per process).
    pub identity: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// How long candidates wait after last seeing the record change before taking over.
    pub lease_duration: Duration,
    /// How long after the start of its last successful renewal a leader keeps writing
    /// while it cannot renew.
    pub renew_deadline: Duration,
    /// Time between a leader's renewals and between a candidate's polls.
    pub retry_period: Duration,
    /// Poll jitter factor (`0` in tests that want exact timing).
    pub jitter: f64,
}

/// Why a term ended against this replica's will.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// No renewal succeeded within the renew deadline.
    #[error("leader election lost: no renewal of {lease} succeeded within {deadline:?}")]
    Deadline {
        /// `namespace/name`.
        lease: String,
        /// The renew deadline.
        deadline: Duration,
    },
    /// Another replica holds the Lease now.
    #[error("leader election lost: {lease} is held by {holder}")]
    Taken {
        /// `namespace/name`.
        lease: String,
        /// Who holds it.
        holder: String,
    },
}

/// The outcome of one acquire-or-renew step.
#[derive(Debug)]
enum Attempt {
    /// The Lease is ours (written at or after the step's start).
    Held,
    /// Someone else holds it.
    Other(String),
    /// Another candidate won a race for the same version.
    Raced,
    /// The store failed.
    Failed(StoreError),
}

/// One replica's side of the election.
pub struct Elector<S> {
    settings: Settings,
    store: S,
    gate: Gate,
    observed: Option<Observed>,
    leading: bool,
}

impl<S: LeaseStore> Elector<S> {
    /// A candidate using `store`, opening `gate` while it leads.
    pub fn new(settings: Settings, store: S, gate: Gate) -> Self {
        Self {
            settings,
            store,
            gate,
            observed: None,
            leading: false,
        }
    }

    /// Campaigns, then leads until the term is lost (`Err`) or `stop` fires (`Ok`:
    /// writes drained and the Lease released so a successor takes over at once).
    pub async fn run(mut self, stop: Shutdown) -> Result<(), Lost> {
        match self.campaign(&stop).await {
            Some(began) => self.lead(&stop, began).await,
            None => Ok(()),
        }
    }

    fn lease(&self) -> String {
        self.store.describe()
    }

    fn observe(&mut self, read: Option<Stored>, now: Instant) {
        self.observed = Observed::update(self.observed.take(), read, now);
    }

    /// One acquire-or-renew step, bounded by `limit`.
    async fn attempt(&mut self, limit: Duration) -> Attempt {
        match tokio::time::timeout(limit, self.step()).await {
            Ok(a) => a,
            Err(_) => Attempt::Failed(StoreError::Timeout(limit)),
        }
    }

    async fn step(&mut self) -> Attempt {
        let now = Instant::now();
        let me = self.settings.identity.clone();
        // Leading: renew on the version we wrote, without reading first.
        if self.leading
            && let Some(o) = &self.observed
            && o.stored.record.holder == me
            && let Step::Update {
                record,
                resource_version,
            } = decide(
                Some(o),
                &me,
                now,
                Timestamp::now(),
                self.settings.lease_duration,
            )
        {
            match self.store.update(&record, &resource_version).await {
                Ok(stored) => {
                    self.observe(Some(stored), now);
                    return Attempt::Held;
                }
                Err(error) => {
                    tracing::debug!(error = %Report(&error), "renewing on the last version; reading the Lease");
                }
            }
        }
        let read = match self.store.get().await {
            Ok(r) => r,
            Err(e) => return Attempt::Failed(e),
        };
        // Seen when the answer came (a renewal may have landed while the read was in
        // flight); judged valid from the step's start. Both err on the side of waiting.
        self.observe(read, Instant::now());
        let step = decide(
            self.observed.as_ref(),
            &me,
            now,
            Timestamp::now(),
            self.settings.lease_duration,
        );
        let written = match step {
            Step::Wait { holder, .. } => return Attempt::Other(holder),
            Step::Create(record) => self.store.create(&record).await,
            Step::Update {
                record,
                resource_version,
            } => self.store.update(&record, &resource_version).await,
        };
        match written {
            Ok(stored) => {
                self.observe(Some(stored), now);
                Attempt::Held
            }
            Err(StoreError::Conflict | StoreError::Gone) => Attempt::Raced,
            Err(e) => Attempt::Failed(e),
        }
    }

    /// When a candidate next reads the Lease: after a jittered retry period.
    fn next_poll(&self, from: Instant) -> Instant {
        let jitter = rand::random::<f64>() * self.settings.jitter;
        from + self.settings.retry_period.mul_f64(1.0 + jitter)
    }

    /// Campaigns until the Lease is ours (the start of the winning attempt: the term is
    /// counted from it) or `stop` fires (`None`).
    async fn campaign(&mut self, stop: &Shutdown) -> Option<Instant> {
        let lease = self.lease();
        tracing::info!(%lease, identity = %self.settings.identity, "campaigning for the leader Lease");
        let mut changes = self.store.changes();
        let mut failures = 0u32;
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                a = self.attempt(self.settings.renew_deadline) => a,
                () = stop.triggered() => return None,
            };
            match attempt {
                Attempt::Held => {
                    self.leading = true;
                    // The write was sent after `started`, so every other candidate saw it
                    // then or later: counting the term from `started` keeps it inside
                    // theirs.
                    self.gate.begin(started + self.settings.renew_deadline);
                    let transitions = self
                        .observed
                        .as_ref()
                        .map_or(0, |o| o.stored.record.transitions);
                    tracing::info!(%lease, identity = %self.settings.identity, transitions, "became the leader");
                    return Some(started);
                }
                Attempt::Other(holder) => {
                    failures = 0;
                    self.gate.saw_leader(Some(&holder));
                }
                Attempt::Raced => {
                    tracing::debug!(%lease, "another candidate took the Lease first");
                }
                Attempt::Failed(error) => {
                    failures += 1;
                    // Once, then now and then: a down API server is logged elsewhere too.
                    if failures == 1 || failures.is_multiple_of(30) {
                        tracing::warn!(%lease, error = %Report(&error), failures, "reading or taking the leader Lease");
                    }
                }
            }
            // Next try: at the poll, or when the lease seen at this attempt expires if
            // that comes first, or at once when a change shows it free or gone.
            let poll = self.next_poll(Instant::now());
            loop {
                let expiry = self
                    .observed
                    .as_ref()
                    .and_then(|o| o.expires_at(self.settings.lease_duration))
                    .filter(|e| *e > started);
                let wake = expiry.map_or(poll, |e| e.min(poll));
                tokio::select! {
                    () = tokio::time::sleep_until(wake) => break,
                    Some(change) = changes.next() => {
                        self.observe(change, Instant::now());
                        let holder = self.observed.as_ref().map(|o| o.stored.record.holder.clone());
                        if holder.as_deref().is_none_or(str::is_empty) {
                            break;
                        }
                        self.gate.saw_leader(holder.as_deref());
                    }
                    () = stop.triggered() => return None,
                }
            }
        }
    }

    /// Renews every retry period until the term is lost or `stop` fires; the term began
    /// at `began`.
    async fn lead(&mut self, stop: &Shutdown, began: Instant) -> Result<(), Lost> {
        let Settings {
            renew_deadline,
            retry_period,
            ..
        } = self.settings.clone();
        let mut deadline = began + renew_deadline;
        let mut next = Instant::now() + retry_period;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = stop.triggered() => {
                    self.release().await;
                    return Ok(());
                }
            }
            let started = Instant::now();
            if started >= deadline {
                return Err(self.lose(None));
            }
            match self.attempt(deadline - started).await {
                Attempt::Held => {
                    deadline = started + renew_deadline;
                    self.gate.extend(deadline);
                    next = Instant::now() + retry_period;
                }
                Attempt::Other(holder) => return Err(self.lose(Some(holder))),
                a @ (Attempt::Raced | Attempt::Failed(_)) => {
                    if let Attempt::Failed(error) = &a {
                        tracing::warn!(lease = %self.lease(), error = %Report(error), remaining = ?deadline.saturating_duration_since(Instant::now()), "renewing the leader Lease");
                    }
                    next = (Instant::now() + retry_period).min(deadline);
                }
            }
        }
    }

    fn lose(&mut self, holder: Option<String>) -> Lost {
        self.gate.end();
        self.leading = false;
        let lease = self.lease();
        let lost = match holder {
            Some(holder) => Lost::Taken { lease, holder },
            None => Lost::Deadline {
                lease,
                deadline: self.settings.renew_deadline,
            },
        };
        tracing::error!(identity = %self.settings.identity, "{lost}");
        lost
    }

    /// Stops writing, then hands the Lease back (nobody holds it, it expires a second
    /// after it is seen), so a standby takes over at its next look rather than after a
    /// whole lease duration.
    async fn release(&mut self) {
        self.gate.close(DRAIN).await;
        self.leading = false;
        let me = self.settings.identity.clone();
        let Some(o) = self
            .observed
            .clone()
            .filter(|o| o.stored.record.holder == me)
        else {
            return;
        };
        let record = o.stored.record.released(Timestamp::now());
        let write = self.store.update(&record, &o.stored.resource_version);
        match tokio::time::timeout(self.settings.retry_period, write).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.lease(), "released the leader Lease"),
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.lease(), error = %Report(&error), "releasing the leader Lease");
            }
            Err(_) => tracing::warn!(lease = %self.lease(), "releasing the leader Lease timed out"),
        }
    }
}

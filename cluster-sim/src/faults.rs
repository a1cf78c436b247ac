//! Fault injection for one simulated cluster: down (connections refused), partitioned (accepts
//! but never answers), slow (added latency), flapping (down and up on a period).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The fault a cluster is under.
#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(tag = "fault", rename_all = "camelCase")]
pub enum Fault {
    /// Healthy.
    #[default]
    None,
    /// Nothing listens: connections are refused.
    Down,
    /// Connections are accepted but nothing is ever answered.
    Partitioned,
    /// Every request waits this long first.
    Slow {
        /// Added latency in milliseconds.
        latency_ms: u64,
    },
    /// Down and up alternately, each for `period_ms`.
    Flapping {
        /// Half-period in milliseconds.
        period_ms: u64,
    },
}

/// A cluster's fault switch, watched by its listener and connections.
#[derive(Clone)]
pub struct Faults {
    tx: watch::Sender<(Fault, Instant)>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            tx: watch::channel((Fault::None, Instant::now())).0,
        }
    }
}

impl Faults {
    /// Switches to a new fault.
    pub fn set(&self, f: Fault) {
        self.tx.send_replace((f, Instant::now()));
    }

    /// The current fault.
    pub fn current(&self) -> Fault {
        self.tx.borrow().0.clone()
    }

    /// A receiver of changes.
    pub fn subscribe(&self) -> watch::Receiver<(Fault, Instant)> {
        self.tx.subscribe()
    }

    /// Whether the cluster refuses connections right now, and when that may next change.
    pub fn down_now(&self) -> (bool, Option<Instant>) {
        let (f, since) = self.tx.borrow().clone();
        phase(&f, since, Instant::now())
    }

    /// Delay to add to a request, and whether it must hang (partitioned).
    pub fn request_gate(&self) -> (Option<Duration>, bool) {
        match self.current() {
            Fault::Slow { latency_ms } => (Some(Duration::from_millis(latency_ms)), false),
            Fault::Partitioned => (None, true),
            _ => (None, false),
        }
    }
}

/// Down or not at `now`, and the next instant the answer changes (flapping only).
pub fn phase(f: &Fault, since: Instant, now: Instant) -> (bool, Option<Instant>) {
    match f {
        Fault::Down => (true, None),
        Fault::Flapping { period_ms } => {
            let period = Duration::from_millis((*period_ms).max(1));
            let elapsed = now.saturating_duration_since(since);
            let n = elapsed.as_nanos() / period.as_nanos();
            // Starts with a down phase, so the flap is visible at once.
            let down = n.is_multiple_of(2);
            let next = since + period * (n as u32 + 1);
            (down, Some(next))
        }
        _ => (false, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flapping_alternates() {
        let t0 = Instant::now();
        let f = Fault::Flapping { period_ms: 100 };
        assert!(phase(&f, t0, t0).0);
        assert!(!phase(&f, t0, t0 + Duration::from_millis(150)).0);
        assert!(phase(&f, t0, t0 + Duration::from_millis(250)).0);
        assert_eq!(
            phase(&f, t0, t0 + Duration::from_millis(150)).1,
            Some(t0 + Duration::from_millis(200))
        );
        assert_eq!(phase(&Fault::Down, t0, t0), (true, None));
        assert_eq!(phase(&Fault::Partitioned, t0, t0), (false, None));
    }
}

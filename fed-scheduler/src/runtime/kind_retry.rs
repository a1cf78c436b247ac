//! When the copy loop asks discovery again for a kind a policy names but no server serves
//! yet: at once when the federation's CustomResourceDefinitions change (the usual way such
//! a kind appears), else on an exponential back-off, the fallback for what no definition
//! will bring (a typo in a policy) and for a definition event that came before the kind was
//! served. Pure: the loop passes the time in.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// The fallback back-off between discovery attempts of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait after the first failed attempt.
    pub initial: Duration,
    /// The longest wait; each failure doubles the last one up to this.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    due: Instant,
    /// The wait that gave `due`; the next failure doubles it.
    delay: Duration,
}

/// The kinds whose discovery failed, and when each is tried again.
#[derive(Debug)]
pub struct Retries<K> {
    backoff: Backoff,
    pending: BTreeMap<K, Pending>,
}

impl<K: Ord + Clone> Retries<K> {
    /// No kind pending.
    pub fn new(backoff: Backoff) -> Self {
        Retries {
            backoff,
            pending: BTreeMap::new(),
        }
    }

    /// Whether `kind` may be tried at `now`: never tried, or its wait is over.
    pub fn ready(&self, kind: &K, now: Instant) -> bool {
        self.pending.get(kind).is_none_or(|p| p.due <= now)
    }

    /// Discovery of `kind` failed at `now`: its next attempt waits the initial delay, or
    /// twice the last one, at most the maximum.
    pub fn failed(&mut self, kind: K, now: Instant) {
        let delay = match self.pending.get(&kind) {
            Some(p) => p.delay.saturating_mul(2).min(self.backoff.max),
            None => self.backoff.initial.min(self.backoff.max),
        };
        self.pending.insert(
            kind,
            Pending {
                due: now + delay,
                delay,
            },
        );
    }

    /// Keeps only the kinds `wanted` holds: one found, or no longer named, is forgotten.
    pub fn retain(&mut self, mut wanted: impl FnMut(&K) -> bool) {
        self.pending.retain(|k, _| wanted(k));
    }

    /// Something that may serve a pending kind changed: every one is due at `now`. The
    /// delays are kept, so a kind still missing afterwards waits longer, not from scratch.
    pub fn expedite(&mut self, now: Instant) {
        for p in self.pending.values_mut() {
            p.due = p.due.min(now);
        }
    }

    /// When the next pending kind is due; `None` when none is pending.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.due).min()
    }

    /// Kinds waiting for another attempt.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no kind waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn retries() -> Retries<&'static str> {
        Retries::new(Backoff {
            initial: S,
            max: 4 * S,
        })
    }

    #[test]
    fn a_new_kind_is_ready_and_failures_back_off_to_the_cap() {
        let t0 = Instant::now();
        let mut r = retries();
        assert!(r.ready(&"Widget", t0), "never tried: at once");
        assert_eq!(r.next_due(), None);
        let mut at = t0;
        for want in [1u32, 2, 4, 4, 4] {
            r.failed("Widget", at);
            let due = r.next_due().expect("pending");
            assert_eq!(due - at, want * S);
            assert!(!r.ready(&"Widget", due - Duration::from_millis(1)));
            assert!(r.ready(&"Widget", due));
            at = due;
        }
        assert!(r.ready(&"Gadget", t0), "another kind is not held back");
    }

    #[test]
    fn a_definition_change_makes_every_pending_kind_due_at_once() {
        let t0 = Instant::now();
        let mut r = retries();
        r.failed("Widget", t0);
        r.failed("Widget", t0 + S);
        r.failed("Gadget", t0 + S);
        let t = t0 + S + Duration::from_millis(10);
        assert!(!r.ready(&"Widget", t) && !r.ready(&"Gadget", t));
        r.expedite(t);
        assert!(r.ready(&"Widget", t) && r.ready(&"Gadget", t));
        assert_eq!(r.next_due(), Some(t));
        // Still not served: the back-off goes on from where it was.
        r.failed("Widget", t);
        r.failed("Gadget", t);
        assert!(r.ready(&"Widget", t + 4 * S) && !r.ready(&"Widget", t + 3 * S));
        assert!(r.ready(&"Gadget", t + 2 * S) && !r.ready(&"Gadget", t + S));
        // A kind already due stays due (expedite never delays).
        r.expedite(t + 10 * S);
        assert_eq!(r.next_due(), Some(t + 2 * S));
    }

    #[test]
    fn kinds_found_or_no_longer_named_are_forgotten() {
        let t0 = Instant::now();
        let mut r = retries();
        r.failed("Widget", t0);
        r.failed("Gadget", t0);
        assert_eq!(r.len(), 2);
        r.retain(|k| *k == "Gadget");
        assert_eq!(r.len(), 1);
        assert!(
            r.ready(&"Widget", t0),
            "forgotten: tried at once when named again"
        );
        r.retain(|_| false);
        assert!(r.is_empty());
        assert_eq!(r.next_due(), None);
    }
}

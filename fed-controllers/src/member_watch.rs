//! How watches in member clusters retry after a failure.
//!
//! kube's default watch backoff grows to 30 s, so after a member outage of half a minute
//! its watches reconnect up to 30 s after the member is back. Until they do, caches fed by
//! them keep objects that are already gone (a finalizer waiting on a member copy waits as
//! long). A member's API server serves only Meridian's few watches, so retrying them every
//! few seconds costs it little; the cap below bounds that wait instead.

use std::time::Duration;

use kube::runtime::utils::{Backoff, ResetTimerBackoff};

/// The first retry's delay.
const BASE: Duration = Duration::from_millis(500);
/// The longest delay between two attempts, and so the longest a watch stays down after
/// its member is reachable again.
const MAX: Duration = Duration::from_secs(4);
/// How long a watch must go without failing for the next failure to start again at `BASE`
/// (so a watch that lists fine and then fails at once does not retry in a tight loop).
const RESET_AFTER: Duration = Duration::from_secs(30);

/// The backoff for a watch in a member cluster: exponential from 0.5 s to 4 s, jittered.
pub fn backoff() -> impl Backoff {
    ResetTimerBackoff::new(Exponential::default(), RESET_AFTER)
}

/// Exponential delays with full jitter, capped at [`MAX`].
#[derive(Default)]
struct Exponential {
    attempt: u32,
}

impl Iterator for Exponential {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.attempt = self.attempt.saturating_add(1);
        Some(meridian_runtime::queue::Backoff::jittered(BASE, MAX).delay(self.attempt))
    }
}

impl Backoff for Exponential {
    fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_and_starts_again_after_a_reset() {
        let mut b = Exponential::default();
        let first = b.next().unwrap();
        assert_eq!(first, BASE, "the first retry waits exactly the base");
        let later: Vec<Duration> = (0..20).map(|_| b.next().unwrap()).collect();
        assert!(later.iter().all(|d| *d >= BASE && *d <= MAX), "{later:?}");
        // Jittered up to the cap: over 20 draws at the cap, some exceed half of it.
        assert!(later.iter().any(|d| *d > MAX / 2), "{later:?}");
        b.reset();
        assert_eq!(b.next().unwrap(), BASE);
    }
}

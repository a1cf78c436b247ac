//! How long a workload's member status reports gather before the central controller looks
//! at them. A look visits every destination, so a workload spread over many clusters is
//! looked at less often: its delay grows with its destinations (up to a bound), which keeps
//! the work a stream of reports costs per second about the same however wide the workload.
//! And [`Waits`]: a status held back until something worth telling arrives, for a bounded
//! time however many looks come meanwhile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::kinds::WorkloadKey;
use meridian_runtime::sync::lock;

/// Destinations one base delay covers.
const DESTINATIONS_PER_STEP: usize = 25;
/// The most steps a delay grows to.
const MAX_STEPS: usize = 4;

/// The status delay of every workload: the base one, longer for wide workloads.
pub struct StatusSpacing {
    base: Duration,
    /// Only workloads wider than one step.
    wide: Mutex<HashMap<WorkloadKey, Duration>>,
}

impl StatusSpacing {
    /// Spacing with `base` as the delay of a workload of up to 25 destinations.
    pub fn new(base: Duration) -> Self {
        Self {
            base,
            wide: Mutex::default(),
        }
    }

    /// Records that `key` has `destinations` member clusters.
    pub fn set_destinations(&self, key: &WorkloadKey, destinations: usize) {
        let steps = destinations
            .div_ceil(DESTINATIONS_PER_STEP)
            .clamp(1, MAX_STEPS);
        let mut wide = lock(&self.wide);
        if steps == 1 {
            wide.remove(key);
        } else if wide.get(key).is_none_or(|d| *d != self.base * steps as u32) {
            wide.insert(key.clone(), self.base * steps as u32);
        }
    }

    /// Forgets a workload that is gone.
    pub fn forget(&self, key: &WorkloadKey) {
        lock(&self.wide).remove(key);
    }

    /// How long reports of `key` gather before a look.
    pub fn delay(&self, key: &WorkloadKey) -> Duration {
        lock(&self.wide).get(key).copied().unwrap_or(self.base)
    }
}

/// Workloads whose status write waits for something, each since the first look that found
/// it waiting: the wait is bounded from then, whatever number of looks come meanwhile
/// (every edit of the workload, every member report brings one).
#[derive(Default)]
pub struct Waits(Mutex<HashMap<WorkloadKey, Instant>>);

impl Waits {
    /// `key` waits (at most `bound` from its first wait): how much longer at `now`, `None`
    /// once the bound has passed.
    pub fn left(&self, key: &WorkloadKey, bound: Duration, now: Instant) -> Option<Duration> {
        let since = *lock(&self.0).entry(key.clone()).or_insert(now);
        bound.checked_sub(now.saturating_duration_since(since))
    }

    /// `key` no longer waits: its next wait starts afresh.
    pub fn clear(&self, key: &WorkloadKey) {
        lock(&self.0).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::kinds::Kind;

    #[test]
    fn a_wait_is_bounded_from_its_first_look() {
        let w = Waits::default();
        let k = WorkloadKey::new(Kind::Deployment, "shop", "web");
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(w.left(&k, ms(100), t0), Some(ms(100)));
        assert_eq!(w.left(&k, ms(100), t0 + ms(60)), Some(ms(40)));
        assert_eq!(w.left(&k, ms(100), t0 + ms(101)), None);
        // Past its bound it stays past, until cleared.
        assert_eq!(w.left(&k, ms(100), t0 + ms(200)), None);
        w.clear(&k);
        assert_eq!(w.left(&k, ms(100), t0 + ms(300)), Some(ms(100)));
    }

    #[test]
    fn the_delay_grows_with_destinations_up_to_a_bound() {
        let s = StatusSpacing::new(Duration::from_millis(100));
        let k = WorkloadKey::new(Kind::Deployment, "shop", "web");
        assert_eq!(s.delay(&k), Duration::from_millis(100));
        for (n, ms) in [
            (0, 100),
            (2, 100),
            (25, 100),
            (26, 200),
            (100, 400),
            (1000, 400),
        ] {
            s.set_destinations(&k, n);
            assert_eq!(s.delay(&k), Duration::from_millis(ms), "{n} destinations");
        }
        s.forget(&k);
        assert_eq!(s.delay(&k), Duration::from_millis(100));
        assert!(lock(&s.wide).is_empty());
    }
}

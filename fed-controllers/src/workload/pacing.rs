//! Pacing of Placement status writes: while a workload rolls out, every member's report
//! changes its Placement's per-cluster entries, and at 100 destinations each write of
//! those entries is ~15 KB the federation stores and sends to every Placement watcher.
//! Entries that only moved on are written at most once per interval per Placement; what a
//! user waits on (the Propagated condition, errors, conflicts, the end of a rollout) is
//! never held back.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use meridian_runtime::sync::lock;
use std::time::{Duration, Instant};

/// When each key's status was last written.
pub struct Pacer<K> {
    interval: Duration,
    written: Mutex<Written<K>>,
}

struct Written<K> {
    at: HashMap<K, Instant>,
    /// Size after the last sweep of expired entries: the next sweep waits until the map has
    /// doubled, so sweeping costs O(1) per write however many keys there are.
    swept_len: usize,
}

impl<K: Clone + Eq + Hash> Pacer<K> {
    /// A pacer allowing one paced write per key per `interval` (zero: no pacing).
    pub fn new(interval: Duration) -> Self {
        Pacer {
            interval,
            written: Mutex::new(Written {
                at: HashMap::new(),
                swept_len: 0,
            }),
        }
    }

    /// How long a paced write of `key` must still wait at `now`; `None`: it may go now.
    pub fn wait(&self, key: &K, now: Instant) -> Option<Duration> {
        let w = lock(&self.written);
        let due = *w.at.get(key)? + self.interval;
        (due > now).then(|| due - now)
    }

    /// Records a write of `key` at `now` (paced or not: either starts a new interval).
    pub fn wrote(&self, key: &K, now: Instant) {
        if self.interval.is_zero() {
            return;
        }
        let mut w = lock(&self.written);
        w.at.insert(key.clone(), now);
        if w.at.len() > 2 * w.swept_len + 64 {
            let interval = self.interval;
            w.at.retain(|_, at| now.saturating_duration_since(*at) < interval);
            w.swept_len = w.at.len();
        }
    }

    /// Forgets `key` (its workload is gone).
    pub fn forget(&self, key: &K) {
        let mut w = lock(&self.written);
        w.at.remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.written).at.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    #[test]
    fn first_write_goes_at_once_and_the_next_waits_out_the_interval() {
        let p = Pacer::new(SEC);
        let t0 = Instant::now();
        assert_eq!(p.wait(&"a", t0), None);
        p.wrote(&"a", t0);
        assert_eq!(p.wait(&"a", t0 + SEC / 4), Some(SEC * 3 / 4));
        assert_eq!(p.wait(&"b", t0 + SEC / 4), None, "keys are paced apart");
        assert_eq!(p.wait(&"a", t0 + SEC), None);
        // An unpaced write (a condition change) starts a new interval.
        p.wrote(&"a", t0 + SEC * 2);
        assert_eq!(p.wait(&"a", t0 + SEC * 2), Some(SEC));
        p.forget(&"a");
        assert_eq!(p.wait(&"a", t0 + SEC * 2), None);
    }

    #[test]
    fn zero_interval_never_waits_or_remembers() {
        let p = Pacer::new(Duration::ZERO);
        let t0 = Instant::now();
        p.wrote(&1, t0);
        assert_eq!(p.wait(&1, t0), None);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn expired_keys_are_swept_as_the_map_grows() {
        let p = Pacer::new(SEC);
        let t0 = Instant::now();
        for k in 0..1000 {
            p.wrote(&k, t0);
        }
        // Long after, once the map has doubled, a write sweeps out the expired keys.
        for k in 1000..2100 {
            p.wrote(&k, t0 + SEC * 10);
        }
        assert!(p.len() <= 1100, "{} keys kept", p.len());
        assert_eq!(p.wait(&2099, t0 + SEC * 10), Some(SEC));
    }
}

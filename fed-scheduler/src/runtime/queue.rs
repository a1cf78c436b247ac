//! The work queue of workload keys: deduplicated, bounded, with delayed adds and
//! per-key failure backoff (the shape of client-go's rate-limited delaying queue).
//!
//! A key is never handed to two workers at once: a key added while it is being processed
//! is queued again when the worker calls [`WorkQueue::done`]. Delayed adds keep only the
//! earliest deadline per key, so "requeue when the toleration expires" and "retry after a
//! conflict" never pile up.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// First retry delay after a failure; doubled per consecutive failure.
const BACKOFF_BASE: Duration = Duration::from_millis(50);
/// Longest retry delay.
const BACKOFF_MAX: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct State<K> {
    queue: VecDeque<K>,
    /// Keys waiting in `queue` or re-added while processing.
    dirty: HashSet<K>,
    processing: HashSet<K>,
    delayed: BTreeMap<(Instant, u64), K>,
    delayed_at: HashMap<K, (Instant, u64)>,
    seq: u64,
    failures: HashMap<K, u32>,
    dropped: u64,
}

/// A deduplicating, bounded work queue; see the module docs.
#[derive(Debug)]
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
    capacity: usize,
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    /// A queue holding at most `capacity` distinct pending keys.
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                delayed: BTreeMap::new(),
                delayed_at: HashMap::new(),
                seq: 0,
                failures: HashMap::new(),
                dropped: 0,
            }),
            notify: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // The state stays consistent across every early return below, so a panic in a
        // holder elsewhere cannot leave it half-updated.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` now. Returns `false` when it was dropped because the queue is full
    /// (the periodic resync picks it up later).
    pub fn add(&self, key: K) -> bool {
        let mut s = self.lock();
        let added = Self::add_locked(&mut s, key, self.capacity);
        drop(s);
        if added {
            self.notify.notify_one();
        }
        added
    }

    fn add_locked(s: &mut State<K>, key: K, capacity: usize) -> bool {
        if s.dirty.contains(&key) {
            return true;
        }
        if s.dirty.len() >= capacity {
            s.dropped += 1;
            return false;
        }
        if let Some(at) = s.delayed_at.remove(&key) {
            s.delayed.remove(&at);
        }
        s.dirty.insert(key.clone());
        if !s.processing.contains(&key) {
            s.queue.push_back(key);
        }
        true
    }

    /// Queues `key` after `delay` (immediately when zero); an earlier pending deadline wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = Instant::now() + delay;
        let mut s = self.lock();
        if s.dirty.contains(&key) {
            return;
        }
        if let Some(&(prev, seq)) = s.delayed_at.get(&key) {
            if prev <= at {
                return;
            }
            s.delayed.remove(&(prev, seq));
        }
        s.seq += 1;
        let id = (at, s.seq);
        s.delayed.insert(id, key.clone());
        s.delayed_at.insert(key, id);
        drop(s);
        // Waiting workers recompute their sleep: this deadline may be the earliest.
        self.notify.notify_waiters();
    }

    /// Queues `key` again after its backoff (grows with consecutive failures).
    pub fn retry(&self, key: K) -> Duration {
        let delay = {
            let mut s = self.lock();
            let n = s.failures.entry(key.clone()).or_default();
            *n = n.saturating_add(1);
            backoff(*n)
        };
        self.add_after(key, delay);
        delay
    }

    /// Forgets `key`'s failures (it succeeded).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// The next key to process, waiting for one to be ready.
    pub async fn next(&self) -> K {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut s = self.lock();
                let now = Instant::now();
                while let Some((&id, _)) = s.delayed.first_key_value() {
                    if id.0 > now {
                        break;
                    }
                    if let Some(key) = s.delayed.remove(&id) {
                        s.delayed_at.remove(&key);
                        Self::add_locked(&mut s, key, self.capacity);
                    }
                }
                if let Some(key) = s.queue.pop_front() {
                    s.dirty.remove(&key);
                    s.processing.insert(key.clone());
                    let more = !s.queue.is_empty();
                    drop(s);
                    if more {
                        // Pass the baton: another worker may take the next key.
                        self.notify.notify_one();
                    }
                    return key;
                }
                s.delayed.first_key_value().map(|(id, _)| id.0)
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks `key` processed; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &K) {
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.contains(key) {
            s.queue.push_back(key.clone());
            drop(s);
            self.notify.notify_one();
        }
    }

    /// Keys waiting to be processed now (not counting delayed ones).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether nothing is waiting now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for a deadline.
    pub fn delayed(&self) -> usize {
        self.lock().delayed.len()
    }

    /// Keys dropped because the queue was full, since start.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

/// Delay before retry number `failures` (1-based).
pub fn backoff(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    BACKOFF_BASE.saturating_mul(1u32 << shift).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedups_and_requeues_keys_added_while_processing() {
        let q = WorkQueue::new(10);
        assert!(q.add("a"));
        assert!(q.add("b"));
        assert!(q.add("a"));
        assert_eq!(q.len(), 2);
        let a = q.next().await;
        assert_eq!(a, "a");
        // Added while being processed: not handed out twice, but queued again on done.
        q.add("a");
        assert_eq!(q.next().await, "b");
        assert!(q.is_empty());
        q.done(&"a");
        assert_eq!(q.next().await, "a");
        q.done(&"a");
        q.done(&"b");
        assert!(q.is_empty());
    }

    #[tokio::test]
    async fn bounded() {
        let q = WorkQueue::new(2);
        assert!(q.add(1));
        assert!(q.add(2));
        assert!(q.add(2), "already queued is not a drop");
        assert!(!q.add(3));
        assert_eq!(q.dropped(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_fire_at_their_deadline() {
        let q = std::sync::Arc::new(WorkQueue::new(10));
        q.add_after("late", Duration::from_secs(10));
        q.add_after("soon", Duration::from_secs(2));
        // A later deadline for a key already waiting keeps the earlier one.
        q.add_after("soon", Duration::from_secs(5));
        assert_eq!(q.delayed(), 2);
        let start = Instant::now();
        assert_eq!(q.next().await, "soon");
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        // An immediate add overtakes a pending delayed one.
        q.add("late");
        assert_eq!(q.next().await, "late");
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(q.delayed(), 0);

        // A waiting worker wakes for an earlier deadline added while it sleeps.
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.next().await });
        tokio::task::yield_now().await;
        q.add_after("x", Duration::from_secs(1));
        assert_eq!(waiter.await.expect("join"), "x");
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_until_forgotten() {
        let q = WorkQueue::new(10);
        assert_eq!(q.retry("k"), Duration::from_millis(50));
        assert_eq!(q.next().await, "k");
        q.done(&"k");
        assert_eq!(q.retry("k"), Duration::from_millis(100));
        assert_eq!(q.next().await, "k");
        q.done(&"k");
        q.forget(&"k");
        assert_eq!(q.retry("k"), Duration::from_millis(50));
        assert_eq!(backoff(100), BACKOFF_MAX);
    }
}

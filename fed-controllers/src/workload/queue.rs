//! A deduplicating work queue: a key waits at most once, so the queue is bounded by the
//! number of distinct keys and producers never block (level-triggered: the worker reads the
//! latest state when it pops a key, however many changes were coalesced). Several workers
//! may pop: a key being worked on is never handed out twice; pushed meanwhile, it waits
//! until its worker calls [`Queue::done`] (client-go's workqueue rule). Keys pushed with
//! [`Queue::push_low`] (status refreshes) wait behind those pushed with [`Queue::push`]
//! (changes to what is wanted), so a flood of status updates never delays new work; a key
//! pushed both ways waits once, in the first lane. A flood of new work does not hold status
//! back for ever either: once the oldest low key has waited past the queue's bound (see
//! [`Queue::with_low_lane_bound`]), the lanes take turns until it has not. Each waiting key
//! remembers when it was first queued, for the status-lag metric and that bound.
//! [`Queue::push_low_after`] defers a low push, so a burst of status updates of one key (each
//! member reporting in turn) costs one pass.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

struct Inner<K> {
    /// The lanes, first served first. An entry whose key waits in another lane (it moved
    /// up) or does not wait any more is stale and skipped.
    lanes: [VecDeque<K>; 2],
    /// Waiting keys (in a lane unless their worker is still busy): since when, which lane.
    waiting: HashMap<K, (Instant, usize)>,
    /// Keys a worker holds.
    processing: HashSet<K>,
    /// Keys whose deferred low push is pending, and when it is due (the earliest asked for).
    deferred: HashMap<K, tokio::time::Instant>,
    /// The lane the last key handed out came from.
    last_lane: usize,
}

impl<K: Clone + Eq + Hash> Inner<K> {
    /// Whether the oldest key of the low lane has waited longer than `bound`. Stale entries
    /// at the lane's front are dropped on the way (a pop would skip them too).
    fn low_lane_overdue(&mut self, now: Instant, bound: Duration) -> bool {
        while let Some(k) = self.lanes[1].front() {
            match self.waiting.get(k) {
                Some(&(since, 1)) if !self.processing.contains(k) => {
                    return now.saturating_duration_since(since) > bound;
                }
                _ => {
                    self.lanes[1].pop_front();
                }
            }
        }
        false
    }
}

/// Keys waiting for a worker.
pub struct Queue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
    /// How long the low lane's oldest key may wait before the lanes take turns.
    low_lane_bound: Option<Duration>,
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            inner: Mutex::new(Inner {
                lanes: [VecDeque::new(), VecDeque::new()],
                waiting: HashMap::new(),
                processing: HashSet::new(),
                deferred: HashMap::new(),
                last_lane: 0,
            }),
            notify: Notify::new(),
            low_lane_bound: None,
        }
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    /// A queue whose low lane is served strictly after the other, except that once its
    /// oldest key has waited longer than `bound`, every other key handed out comes from it
    /// (while that holds): under a sustained flood of urgent work each lane gets at least
    /// half the workers' turns, rather than the low one none.
    pub fn with_low_lane_bound(bound: Duration) -> Self {
        Queue {
            low_lane_bound: Some(bound),
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<K>> {
        // The data stays consistent across a panicking holder: each operation is one step.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a key unless it already waits (moving it to this lane if it waited in the low one).
    pub fn push(&self, key: K) {
        self.push_to(key, 0);
    }

    /// Adds a key behind every key of [`Queue::push`], unless it already waits.
    pub fn push_low(&self, key: K) {
        self.push_to(key, 1);
    }

    /// Adds a key behind urgent work once `delay` has passed, unless a deferred push of it
    /// is already due by then: the pushes of a key within `delay` of the first become one.
    /// One due sooner moves the push earlier (a long wait never holds back a short one).
    pub fn push_low_after(self: &Arc<Self>, key: K, delay: Duration)
    where
        K: Send + 'static,
    {
        let due = tokio::time::Instant::now() + delay;
        {
            let mut g = self.lock();
            if g.deferred.get(&key).is_some_and(|pending| *pending <= due) {
                return;
            }
            g.deferred.insert(key.clone(), due);
        }
        let q = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            let Some(q) = q.upgrade() else { return };
            // A push moved earlier has already fired (or will): only the current one pushes.
            let current = {
                let mut g = q.lock();
                let current = g.deferred.get(&key) == Some(&due);
                if current {
                    g.deferred.remove(&key);
                }
                current
            };
            if current {
                q.push_low(key);
            }
        });
    }

    fn push_to(&self, key: K, lane: usize) {
        let mut g = self.lock();
        let since = match g.waiting.get(&key) {
            Some(&(_, l)) if l <= lane => return,
            Some(&(since, _)) => since,
            None => Instant::now(),
        };
        g.waiting.insert(key.clone(), (since, lane));
        // A busy key is queued again by `done`.
        if !g.processing.contains(&key) {
            g.lanes[lane].push_back(key);
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Takes the next key without waiting.
    pub fn try_pop(&self) -> Option<K> {
        self.try_pop_timed().map(|(k, _)| k)
    }

    /// Takes the next key and when it was first queued, without waiting. The key is busy
    /// until [`Queue::done`].
    pub fn try_pop_timed(&self) -> Option<(K, Instant)> {
        self.try_pop_at(Instant::now())
    }

    /// [`Queue::try_pop_timed`] as of `now`.
    fn try_pop_at(&self, now: Instant) -> Option<(K, Instant)> {
        let mut g = self.lock();
        let low_turn = g.last_lane == 0
            && self
                .low_lane_bound
                .is_some_and(|bound| g.low_lane_overdue(now, bound));
        let order = if low_turn { [1, 0] } else { [0, 1] };
        for lane in order {
            while let Some(k) = g.lanes[lane].pop_front() {
                match g.waiting.get(&k) {
                    Some(&(since, l)) if l == lane && !g.processing.contains(&k) => {
                        g.waiting.remove(&k);
                        g.processing.insert(k.clone());
                        g.last_lane = lane;
                        return Some((k, since));
                    }
                    // Stale: moved to another lane, or busy (`done` queues it again).
                    _ => {}
                }
            }
        }
        None
    }

    /// The worker is done with `key`; if it was pushed meanwhile it waits again.
    pub fn done(&self, key: &K) {
        let mut g = self.lock();
        g.processing.remove(key);
        if let Some(&(_, lane)) = g.waiting.get(key) {
            g.lanes[lane].push_back(key.clone());
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Waits for the next key.
    pub async fn pop(&self) -> K {
        self.pop_timed().await.0
    }

    /// Waits for the next key; also returns when it was first queued.
    pub async fn pop_timed(&self) -> (K, Instant) {
        loop {
            let notified = self.notify.notified();
            if let Some(k) = self.try_pop_timed() {
                return k;
            }
            notified.await;
        }
    }

    /// Keys waiting.
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether nothing waits and no worker holds a key.
    pub fn is_idle(&self) -> bool {
        let g = self.lock();
        g.waiting.is_empty() && g.processing.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dedups_and_keeps_order() {
        let q = Queue::default();
        for k in [1, 2, 1, 3, 2] {
            q.push(k);
        }
        assert_eq!(q.len(), 3);
        assert_eq!((q.pop().await, q.pop().await, q.pop().await), (1, 2, 3));
        assert!(q.is_empty());
        for k in [1, 2, 3] {
            q.done(&k);
        }
        assert!(q.is_idle());
        q.push(1);
        let before = Instant::now();
        q.push(1);
        let (k, since) = q.try_pop_timed().expect("queued");
        assert_eq!(k, 1);
        assert!(since <= before, "the first push's time is kept");
        q.done(&1);
        q.push(1);
        assert_eq!(q.try_pop(), Some(1));
        assert_eq!(q.try_pop(), None);
        q.done(&1);
    }

    #[test]
    fn low_lane_waits_behind_and_moves_up() {
        let q = Queue::default();
        q.push_low(1);
        q.push_low(2);
        q.push(3);
        q.push(2);
        q.push_low(3);
        assert_eq!(q.len(), 3);
        let order: Vec<i32> = std::iter::from_fn(|| q.try_pop()).collect();
        assert_eq!(order, [3, 2, 1]);
        for k in order {
            q.done(&k);
        }
        assert!(q.is_idle());
    }

    #[test]
    fn an_overdue_low_lane_takes_turns_with_the_other() {
        let bound = Duration::from_millis(250);
        let q = Queue::with_low_lane_bound(bound);
        q.push_low(1);
        q.push_low(2);
        for k in 10..14 {
            q.push(k);
        }
        let pop_at = |now: Instant| {
            let (k, _) = q.try_pop_at(now).expect("queued");
            q.done(&k);
            k
        };
        let t0 = Instant::now();
        // Within the bound the low lane waits.
        assert_eq!(pop_at(t0), 10);
        // Past it, every other key is a low one, oldest first, until none is overdue.
        let late = t0 + bound * 2;
        let order: Vec<i32> = (0..5).map(|_| pop_at(late)).collect();
        assert_eq!(order, [1, 11, 2, 12, 13]);
        assert!(q.is_idle());

        // A queue without a bound keeps the low lane strictly behind.
        let strict = Queue::default();
        strict.push_low(1);
        strict.push(10);
        strict.push(11);
        let order: Vec<i32> =
            std::iter::from_fn(|| strict.try_pop_at(late).map(|(k, _)| k)).collect();
        assert_eq!(order, [10, 11, 1]);
    }

    #[test]
    fn a_low_key_moved_up_is_not_counted_as_overdue() {
        let bound = Duration::from_millis(250);
        let q = Queue::with_low_lane_bound(bound);
        q.push_low(1);
        q.push(1); // now waits in the first lane; its low entry is stale
        q.push(2);
        q.push(3);
        let late = Instant::now() + bound * 2;
        let order: Vec<i32> = std::iter::from_fn(|| q.try_pop_at(late).map(|(k, _)| k)).collect();
        assert_eq!(order, [1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn deferred_pushes_coalesce() {
        let q = Arc::new(Queue::default());
        let delay = Duration::from_millis(100);
        let t0 = tokio::time::Instant::now();
        q.push_low_after(1, delay);
        q.push_low_after(1, delay);
        q.push_low_after(2, delay);
        assert_eq!(q.try_pop(), None, "nothing before the delay");
        // The paused clock jumps to the deferred pushes' deadline while `pop` waits.
        assert_eq!(q.pop().await, 1);
        assert_eq!(t0.elapsed(), delay);
        assert_eq!(q.pop().await, 2);
        assert_eq!(q.try_pop(), None, "once each");
        q.done(&1);
        q.done(&2);
        // Pending no more: a later push defers again.
        let t1 = tokio::time::Instant::now();
        q.push_low_after(1, delay);
        assert_eq!(q.pop().await, 1);
        assert_eq!(t1.elapsed(), delay);
        q.done(&1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sooner_deferred_push_is_not_held_back_by_a_later_one() {
        let q = Arc::new(Queue::default());
        let short = Duration::from_millis(100);
        let long = Duration::from_secs(1);
        let t0 = tokio::time::Instant::now();
        q.push_low_after(1, long);
        q.push_low_after(1, short);
        assert_eq!(q.pop().await, 1);
        assert_eq!(t0.elapsed(), short);
        q.done(&1);
        // The superseded long push does not fire on its own; one asked for again does.
        q.push_low_after(1, long - short);
        assert_eq!(q.pop().await, 1);
        assert_eq!(t0.elapsed(), long);
        q.done(&1);
        tokio::time::sleep(long * 2).await;
        assert_eq!(q.try_pop(), None, "one push for the two long waits");
    }

    #[tokio::test]
    async fn a_busy_key_is_not_handed_out_twice() {
        let q = Queue::default();
        q.push("a");
        assert_eq!(q.try_pop(), Some("a"));
        // Changed while its worker runs: it waits for the worker, then comes back once.
        q.push("a");
        q.push("a");
        q.push("b");
        assert_eq!(q.len(), 2);
        assert_eq!(q.try_pop(), Some("b"));
        assert_eq!(q.try_pop(), None);
        assert!(!q.is_idle());
        q.done(&"a");
        assert_eq!(q.try_pop(), Some("a"));
        q.done(&"a");
        q.done(&"b");
        assert!(q.is_idle());
    }
}

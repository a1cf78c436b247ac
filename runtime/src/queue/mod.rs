//! The one work queue of every controller loop: client-go's rate-limited delaying queue,
//! with two lanes.
//!
//! - **Keyed dedup.** A key waits at most once, so the queue is bounded by the number of
//!   distinct keys and producers never block; the worker reads the latest state when it
//!   takes a key, however many changes were coalesced (level-triggered).
//! - **One worker per key.** Several workers may take keys, but a key being worked on is
//!   never handed out twice: added meanwhile, it waits until its worker calls
//!   [`WorkQueue::done`].
//! - **Delayed adds.** [`WorkQueue::add_after`] keeps the earliest deadline per key, and an
//!   add that queues the key now cancels its deadline: the pass it would have caused runs
//!   now, and a pass that still needs a later one asks for it again.
//! - **Back-off.** [`WorkQueue::retry`] queues a failed key after an exponential delay
//!   ([`Backoff`]) that grows with its consecutive failures until [`WorkQueue::forget`].
//! - **Lanes.** Keys added with [`WorkQueue::add_low`] wait behind every [`Lane::Normal`]
//!   key; with a low-lane bound, once the oldest low key has waited past it the lanes
//!   take turns, so a flood of new work slows status down rather than starving it.
//! - **Order.** [`Fifo`] by default; [`Sorted`] hands keys out smallest first.
//! - **Bounds and metrics.** A full queue drops new keys and counts them (the periodic
//!   resync brings them back); depth, adds, retries and drops are exported
//!   ([`QueueFamilies`]).

mod backoff;
mod metrics;
mod order;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub use backoff::Backoff;
pub use metrics::{QueueFamilies, QueueMetrics};
pub use order::{Fifo, Lane, Order, Sorted};

use crate::sync::lock;

/// How a queue behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Distinct keys waiting at most; more are dropped and counted.
    pub capacity: usize,
    /// Retry delays of [`WorkQueue::retry`].
    pub backoff: Backoff,
    /// How long the oldest [`Lane::Low`] key may wait before the lanes take turns (`None`:
    /// the low lane always waits).
    pub low_lane_bound: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            capacity: usize::MAX,
            backoff: Backoff::default(),
            low_lane_bound: None,
        }
    }
}

impl Settings {
    /// The defaults, with retries backing off from `base` to `max` with jitter.
    pub fn jittered(base: Duration, max: Duration) -> Self {
        Self {
            backoff: Backoff::jittered(base, max),
            ..Self::default()
        }
    }
}

/// A key waiting to be handed out (or to be handed out again once its worker is done).
#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// When it was queued (kept while it moves up a lane).
    since: Instant,
    lane: Lane,
}

/// A key's pending deadline.
#[derive(Debug, Clone, Copy)]
struct Timer {
    at: Instant,
    seq: u64,
    lane: Lane,
    /// Set by [`WorkQueue::retry`] (see [`WorkQueue::expedite_retries`]).
    retry: bool,
}

/// The room a drained queue keeps. A burst leaves every table sized for its peak (a member
/// queue that took two hundred workloads at once keeps room for them, some 16 KB, and a
/// controller has one per member and kind of work); a queue that drains gives it back.
const DRAINED_ROOM: usize = 16;

#[derive(Debug)]
struct State<K, O> {
    order: O,
    waiting: HashMap<K, Waiting>,
    processing: HashSet<K>,
    /// Deadlines in time order (`seq` breaks ties), and each key's own.
    timeline: BTreeMap<(Instant, u64), K>,
    timers: HashMap<K, Timer>,
    seq: u64,
    failures: HashMap<K, u32>,
    /// The lane the last key handed out came from.
    last_lane: Lane,
    dropped: u64,
}

/// Whom an operation should wake.
#[derive(Debug, PartialEq, Eq)]
enum Wake {
    Nobody,
    /// A key became ready: one worker.
    One,
    /// A deadline moved earlier: every sleeping worker recomputes its sleep.
    Sleepers,
}

/// A deduplicating work queue; see the module docs.
#[derive(Debug)]
pub struct WorkQueue<K, O = Fifo<K>> {
    state: Mutex<State<K, O>>,
    notify: Notify,
    settings: Settings,
    metrics: QueueMetrics,
}

impl<K, O> Default for WorkQueue<K, O>
where
    K: Clone + Eq + Hash,
    O: Order<K>,
{
    fn default() -> Self {
        Self::new(Settings::default(), QueueMetrics::default())
    }
}

impl<K, O> WorkQueue<K, O>
where
    K: Clone + Eq + Hash,
    O: Order<K>,
{
    /// A queue with `settings`, reporting into `metrics`.
    pub fn new(settings: Settings, metrics: QueueMetrics) -> Self {
        Self {
            state: Mutex::new(State {
                order: O::default(),
                waiting: HashMap::new(),
                processing: HashSet::new(),
                timeline: BTreeMap::new(),
                timers: HashMap::new(),
                seq: 0,
                failures: HashMap::new(),
                last_lane: Lane::Normal,
                dropped: 0,
            }),
            notify: Notify::new(),
            settings: Settings {
                capacity: settings.capacity.max(1),
                ..settings
            },
            metrics,
        }
    }

    fn wake(&self, wake: Wake) {
        match wake {
            Wake::Nobody => {}
            Wake::One => self.notify.notify_one(),
            Wake::Sleepers => self.notify.notify_waiters(),
        }
    }

    /// Queues `key` now in the normal lane (dropped and counted when the queue is full).
    pub fn add(&self, key: K) {
        self.add_to(key, Lane::Normal);
    }

    /// Queues `key` now behind every normal key (unless it already waits in either lane).
    pub fn add_low(&self, key: K) {
        self.add_to(key, Lane::Low);
    }

    fn add_to(&self, key: K, lane: Lane) {
        let mut s = lock(&self.state);
        let wake = self.add_locked(&mut s, key, lane, Instant::now());
        drop(s);
        self.wake(wake);
    }

    /// Queues `key` in the normal lane once `delay` has passed (at once when zero).
    pub fn add_after(&self, key: K, delay: Duration) {
        self.schedule(key, delay, Lane::Normal, false);
    }

    /// Queues `key` in the low lane once `delay` has passed (at once when zero): the adds
    /// of a key within `delay` of the first become one pass.
    pub fn add_low_after(&self, key: K, delay: Duration) {
        self.schedule(key, delay, Lane::Low, false);
    }

    /// Queues `key` again after the queue's back-off for its consecutive failures, and
    /// returns the delay.
    pub fn retry(&self, key: K) -> Duration {
        self.retry_with(key, self.settings.backoff)
    }

    /// [`WorkQueue::retry`] with another back-off (a conflict, say, is retried sooner
    /// than an outage); the failures counted are the key's, whichever back-off counts them.
    pub fn retry_with(&self, key: K, backoff: Backoff) -> Duration {
        let delay = {
            let mut s = lock(&self.state);
            let n = s.failures.entry(key.clone()).or_default();
            *n = n.saturating_add(1);
            backoff.delay(*n)
        };
        self.metrics.retries.inc();
        self.schedule(key, delay, Lane::Normal, true);
        delay
    }

    /// Forgets `key`'s failures (it succeeded): its next retry starts from the base delay.
    pub fn forget(&self, key: &K) {
        lock(&self.state).failures.remove(key);
    }

    /// Queues now every key waiting out a retry back-off (what failed can work again: a
    /// member is reachable again).
    pub fn expedite_retries(&self) {
        let mut s = lock(&self.state);
        let keys: Vec<(K, Lane)> = s
            .timers
            .iter()
            .filter(|(_, t)| t.retry)
            .map(|(k, t)| (k.clone(), t.lane))
            .collect();
        let now = Instant::now();
        let mut any = false;
        for (key, lane) in keys {
            any |= self.add_locked(&mut s, key, lane, now) == Wake::One;
        }
        drop(s);
        if any {
            // Several keys may have become ready: let every idle worker look.
            self.notify.notify_waiters();
            self.notify.notify_one();
        }
    }

    fn schedule(&self, key: K, delay: Duration, lane: Lane, retry: bool) {
        let mut s = lock(&self.state);
        let now = Instant::now();
        let wake = if delay.is_zero() {
            self.add_locked(&mut s, key, lane, now)
        } else {
            Self::set_timer(&mut s, key, now + delay, lane, retry)
        };
        drop(s);
        self.wake(wake);
    }

    fn cancel_timer(s: &mut State<K, O>, key: &K) {
        if let Some(t) = s.timers.remove(key) {
            s.timeline.remove(&(t.at, t.seq));
        }
    }

    fn set_timer(s: &mut State<K, O>, key: K, at: Instant, lane: Lane, retry: bool) -> Wake {
        // Waiting already: it is handed out before the deadline anyway.
        if s.waiting.contains_key(&key) {
            return Wake::Nobody;
        }
        if let Some(t) = s.timers.get(&key) {
            if t.at <= at {
                return Wake::Nobody;
            }
            Self::cancel_timer(s, &key);
        }
        s.seq += 1;
        let seq = s.seq;
        s.timeline.insert((at, seq), key.clone());
        s.timers.insert(
            key,
            Timer {
                at,
                seq,
                lane,
                retry,
            },
        );
        Wake::Sleepers
    }

    /// Queues `key` in `lane` (unless the queue is full); says whom to wake.
    fn add_locked(&self, s: &mut State<K, O>, key: K, lane: Lane, now: Instant) -> Wake {
        let busy = s.processing.contains(&key);
        if s.waiting.contains_key(&key) || s.waiting.len() < self.settings.capacity {
            // A pass now does what a later one would have done.
            Self::cancel_timer(s, &key);
        }
        if let Some(w) = s.waiting.get_mut(&key) {
            if w.lane <= lane {
                return Wake::Nobody;
            }
            // Moves up a lane, keeping when it was queued.
            let old = std::mem::replace(&mut w.lane, lane);
            if busy {
                return Wake::Nobody;
            }
            s.order.remove(old, &key);
            s.order.push(lane, key);
            return Wake::One;
        }
        if s.waiting.len() >= self.settings.capacity {
            s.dropped += 1;
            self.metrics.dropped.inc();
            return Wake::Nobody;
        }
        s.waiting.insert(key.clone(), Waiting { since: now, lane });
        self.metrics.depth.inc();
        self.metrics.adds.inc();
        if busy {
            // Its worker queues it again in `done`.
            return Wake::Nobody;
        }
        s.order.push(lane, key);
        Wake::One
    }

    /// Moves keys whose deadline has come into their lanes.
    fn fire_timers(&self, s: &mut State<K, O>, now: Instant) {
        while let Some((&(at, seq), _)) = s.timeline.first_key_value() {
            if at > now {
                break;
            }
            let Some(key) = s.timeline.remove(&(at, seq)) else {
                break;
            };
            if let Some(t) = s.timers.remove(&key) {
                self.add_locked(s, key, t.lane, now);
            }
        }
    }

    /// Whether the oldest low key has waited longer than `bound`. Stale entries at the
    /// lane's front are dropped on the way (taking a key would skip them too).
    fn low_lane_overdue(s: &mut State<K, O>, now: Instant, bound: Duration) -> bool {
        loop {
            let since = match s.order.front(Lane::Low) {
                None => return false,
                Some(k) => match s.waiting.get(k) {
                    Some(w) if w.lane == Lane::Low && !s.processing.contains(k) => Some(w.since),
                    _ => None,
                },
            };
            match since {
                Some(since) => return now.saturating_duration_since(since) > bound,
                None => {
                    s.order.pop(Lane::Low);
                }
            }
        }
    }

    /// Takes the next ready key and when it was queued.
    fn take_locked(&self, s: &mut State<K, O>, now: Instant) -> Option<(K, Instant)> {
        self.fire_timers(s, now);
        let low_turn = s.last_lane == Lane::Normal
            && self
                .settings
                .low_lane_bound
                .is_some_and(|bound| Self::low_lane_overdue(s, now, bound));
        let lanes = if low_turn {
            [Lane::Low, Lane::Normal]
        } else {
            Lane::ALL
        };
        for lane in lanes {
            while let Some(key) = s.order.pop(lane) {
                let since = match s.waiting.get(&key) {
                    Some(w) if w.lane == lane && !s.processing.contains(&key) => w.since,
                    // Stale: moved to the other lane, taken, or busy (`done` requeues it).
                    _ => continue,
                };
                s.waiting.remove(&key);
                self.metrics.depth.dec();
                s.processing.insert(key.clone());
                s.last_lane = lane;
                return Some((key, since));
            }
        }
        None
    }

    /// Takes the next ready key without waiting; it is the caller's until
    /// [`WorkQueue::done`].
    pub fn try_next(&self) -> Option<K> {
        self.try_next_timed().map(|(k, _)| k)
    }

    /// [`WorkQueue::try_next`], with when the key was queued.
    pub fn try_next_timed(&self) -> Option<(K, Instant)> {
        let mut s = lock(&self.state);
        let taken = self.take_locked(&mut s, Instant::now());
        let more = taken.is_some() && !s.order.is_empty();
        drop(s);
        if more {
            self.notify.notify_one();
        }
        taken
    }

    /// Waits for the next key; it is the caller's until [`WorkQueue::done`].
    pub async fn next(&self) -> K {
        self.next_timed().await.0
    }

    /// [`WorkQueue::next`], with when the key was queued (for lag metrics).
    pub async fn next_timed(&self) -> (K, Instant) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before looking, so a wake-up between the look and the wait counts.
            notified.as_mut().enable();
            let deadline = {
                let mut s = lock(&self.state);
                if let Some(taken) = self.take_locked(&mut s, Instant::now()) {
                    let more = !s.order.is_empty();
                    drop(s);
                    if more {
                        // Pass the baton: another worker may take the next key.
                        self.notify.notify_one();
                    }
                    return taken;
                }
                s.timeline.first_key_value().map(|(&(at, _), _)| at)
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

    /// The worker is done with `key`; added meanwhile, it waits again now.
    pub fn done(&self, key: &K) {
        let mut s = lock(&self.state);
        s.processing.remove(key);
        if let Some(lane) = s.waiting.get(key).map(|w| w.lane) {
            s.order.push(lane, key.clone());
            drop(s);
            self.notify.notify_one();
        } else if s.waiting.is_empty() && s.processing.is_empty() {
            release_room(&mut s);
        }
    }

    /// Keys waiting (not counting those waiting for a deadline).
    pub fn len(&self) -> usize {
        lock(&self.state).waiting.len()
    }

    /// Whether no key waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether no key waits and no worker holds one (deadlines aside).
    pub fn is_idle(&self) -> bool {
        let s = lock(&self.state);
        s.waiting.is_empty() && s.processing.is_empty()
    }

    /// Keys waiting for a deadline.
    pub fn delayed(&self) -> usize {
        lock(&self.state).timers.len()
    }

    /// Keys dropped because the queue was full, since it was made.
    pub fn dropped(&self) -> u64 {
        lock(&self.state).dropped
    }
}

/// Gives a drained queue's spare room back (see [`DRAINED_ROOM`]); keys waiting for a
/// deadline, and their failure counts, keep theirs.
fn release_room<K: Eq + Hash, O: Order<K>>(s: &mut State<K, O>) {
    s.order.clear(DRAINED_ROOM);
    s.waiting.shrink_to(DRAINED_ROOM);
    s.processing.shrink_to(DRAINED_ROOM);
    s.timers.shrink_to(DRAINED_ROOM);
    s.failures.shrink_to(DRAINED_ROOM);
}

//! Bounded in-memory event history and the watch streams served from it, shared by the embedded and memory backends.
//!
//! Watchers hold no buffer of their own: each keeps a cursor (the last revision it has looked
//! at) into the one shared history and copies events out of it when woken. A watcher whose
//! cursor falls behind the oldest retained event can no longer be served without a gap, so its
//! stream ends with [`StoreError::Compacted`] instead of silently skipping events.
//!
//! The same history lets a listing read an older revision: the retained events after it carry
//! each key's previous value, which is what the key held then.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::WatchFrom;
use crate::{Event, ProgressWatchStream, Result, Revision, StoreError, WatchItem, under_prefix};

/// How many retained events one wake-up of a watcher scans at most, so a watcher catching up
/// on a long history does not hold the lock for long.
const SCAN_BATCH: usize = 1024;

pub(crate) struct History {
    state: Mutex<State>,
    /// Bumped after every publish or close; watchers wait on it when caught up.
    notify: watch::Sender<()>,
}

struct State {
    /// Retained events, in strictly increasing revision order.
    events: VecDeque<Event>,
    capacity: usize,
    /// Every event with a revision greater than this is retained (or not yet written).
    floor: Revision,
    /// The revision of the newest event handed to `publish` (or the starting floor).
    published: Revision,
    closed: bool,
}

impl History {
    /// An empty history keeping at most `capacity` events, complete from revision `floor` on.
    pub(crate) fn new(capacity: usize, floor: Revision) -> Self {
        // A zero capacity would evict every event before any watcher could see it.
        let capacity = capacity.max(1);
        History {
            state: Mutex::new(State {
                events: VecDeque::new(),
                capacity,
                floor,
                published: floor,
                closed: false,
            }),
            notify: watch::Sender::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Critical sections only push, pop and clone; a panic inside one cannot leave the
        // queue half-updated, so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends events, which must come in increasing revision order after every event already
    /// published, and wakes the watchers.
    pub(crate) fn publish(&self, events: impl IntoIterator<Item = Event>) {
        {
            let mut state = self.lock();
            for event in events {
                state.published = state.published.max(event.revision());
                // A compaction may run ahead of a publish (it only checks the acknowledged
                // revision); such events are already compacted away.
                if event.revision() <= state.floor {
                    continue;
                }
                debug_assert!(
                    state
                        .events
                        .back()
                        .is_none_or(|last| last.revision() < event.revision())
                );
                state.events.push_back(event);
            }
            while state.events.len() > state.capacity {
                if let Some(evicted) = state.events.pop_front() {
                    state.floor = evicted.revision();
                }
            }
        }
        self.notify.send_replace(());
    }

    /// Drops every event up to and including `revision`.
    pub(crate) fn compact(&self, revision: Revision) {
        let mut state = self.lock();
        if revision <= state.floor {
            return;
        }
        while state
            .events
            .front()
            .is_some_and(|event| event.revision() <= revision)
        {
            state.events.pop_front();
        }
        state.floor = revision;
        drop(state);
        // Watchers behind the new floor must learn now that they were compacted.
        self.notify.send_replace(());
    }

    /// Marks the history closed: watchers end with [`StoreError::Closed`] once caught up.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.notify.send_replace(());
    }

    /// Starts the watch `from` asks for: events under its prefix with a revision greater than
    /// its `after`, reporting progress whenever its `progress` passes without an item.
    pub(crate) fn watch(self: &Arc<Self>, from: WatchFrom<'_>) -> Result<ProgressWatchStream> {
        let WatchFrom {
            prefix,
            after,
            progress,
        } = from;
        {
            let state = self.lock();
            if after < state.floor {
                return Err(StoreError::Compacted {
                    compact_revision: state.floor,
                });
            }
        }
        let watcher = Watcher {
            history: Arc::clone(self),
            wake: self.notify.subscribe(),
            prefix: prefix.into(),
            cursor: after,
            pending: VecDeque::new(),
            progress,
            last_item: Instant::now(),
            finished: false,
        };
        Ok(futures::stream::unfold(watcher, Watcher::next).boxed())
    }

    /// The retained events under `prefix` with a revision in `(after, upto]`, in revision
    /// order. The caller makes sure everything up to `upto` was published (see
    /// [`History::wait_published`]).
    pub(crate) fn changes_between(
        &self,
        prefix: &str,
        after: Revision,
        upto: Revision,
    ) -> Result<Vec<Event>> {
        let state = self.lock();
        if after < state.floor {
            return Err(StoreError::Compacted {
                compact_revision: state.floor,
            });
        }
        debug_assert!(state.published >= upto);
        let start = state
            .events
            .partition_point(|event| event.revision() <= after);
        Ok(state
            .events
            .range(start..)
            .take_while(|event| event.revision() <= upto)
            .filter(|event| under_prefix(&event.kv.key, prefix))
            .cloned()
            .collect())
    }

    /// Waits until every event up to `revision` has been published (the embedded store
    /// commits a group before publishing it, so a reader can see a revision a moment early).
    pub(crate) async fn wait_published(&self, revision: Revision) -> Result<()> {
        let mut wake = self.notify.subscribe();
        loop {
            wake.borrow_and_update();
            {
                let state = self.lock();
                if state.published >= revision || state.floor >= revision {
                    return Ok(());
                }
                if state.closed {
                    return Err(StoreError::Closed);
                }
            }
            if wake.changed().await.is_err() {
                return Err(StoreError::Closed);
            }
        }
    }

    /// Copies events under `prefix` after `*cursor` into `out` and advances the cursor past
    /// every event scanned, matching or not. Returns whether the cursor reached the newest
    /// retained event.
    fn read_after(
        &self,
        prefix: &str,
        cursor: &mut Revision,
        out: &mut VecDeque<Event>,
    ) -> Result<bool> {
        let state = self.lock();
        if *cursor < state.floor {
            return Err(StoreError::Compacted {
                compact_revision: state.floor,
            });
        }
        let start = state
            .events
            .partition_point(|event| event.revision() <= *cursor);
        let end = state.events.len().min(start + SCAN_BATCH);
        for event in state.events.range(start..end) {
            if under_prefix(&event.kv.key, prefix) {
                out.push_back(event.clone());
            }
            *cursor = event.revision();
        }
        if out.is_empty() && state.closed && start == state.events.len() {
            return Err(StoreError::Closed);
        }
        Ok(end == state.events.len())
    }
}

/// The state of one watch stream.
struct Watcher {
    history: Arc<History>,
    wake: watch::Receiver<()>,
    prefix: Box<str>,
    /// The last revision handed to `pending` or skipped as outside the prefix.
    cursor: Revision,
    pending: VecDeque<Event>,
    /// Report progress when this long passes without an item.
    progress: Option<Duration>,
    /// When the stream last yielded an item.
    last_item: Instant,
    finished: bool,
}

impl Watcher {
    async fn next(mut self) -> Option<(Result<WatchItem>, Self)> {
        if self.finished {
            return None;
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                self.last_item = Instant::now();
                return Some((Ok(WatchItem::Event(event)), self));
            }
            let deadline = self.progress.map(|every| self.last_item + every);
            if deadline.is_some_and(|deadline| deadline <= Instant::now()) {
                // Nothing is pending, so every matching event up to the cursor was delivered.
                self.last_item = Instant::now();
                return Some((Ok(WatchItem::Progress(self.cursor)), self));
            }
            // Mark the current notification seen before reading, so a publish racing with the
            // read below wakes the `changed()` that follows instead of being lost.
            self.wake.borrow_and_update();
            let caught_up =
                match self
                    .history
                    .read_after(&self.prefix, &mut self.cursor, &mut self.pending)
                {
                    Ok(caught_up) => caught_up,
                    Err(err) => {
                        self.finished = true;
                        return Some((Err(err), self));
                    }
                };
            if self.pending.is_empty() && caught_up {
                let woken = match deadline {
                    Some(deadline) => {
                        match tokio::time::timeout_at(deadline, self.wake.changed()).await {
                            Ok(woken) => woken,
                            // Time for a progress report: the loop's top sends it.
                            Err(_) => continue,
                        }
                    }
                    None => self.wake.changed().await,
                };
                if woken.is_err() {
                    // Unreachable while `history` (which owns the sender) is alive, kept for safety.
                    self.finished = true;
                    return Some((Err(StoreError::Closed), self));
                }
            }
        }
    }
}

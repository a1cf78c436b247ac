//! Kubernetes Events on federated workloads: drift reverts, conflicts, failures and member
//! cleanup (best effort: a lost Event never blocks propagation). Pushes are not told here:
//! they carry out the scheduler's decision, told by its `Scheduled` Event.
//!
//! Members report each of their outcomes as a [`Note`]; the [`Batcher`] gathers the notes
//! of one workload, reason and action into one Event that names every cluster ("restored
//! shop/web after a direct edit in sim-1, sim-2"), so a workload spread over many clusters
//! costs the federation one Event per change, not one per cluster. A batch stays open while
//! notes keep coming (a thousand members report over seconds), closing a window after its
//! last note or [`LONGEST_BATCH`] after its first. Events go out through the process's
//! recorder; while its buffer is full, batches keep growing instead of queueing writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meridian_runtime::events::{EventSpec, EventType, Recorder};
use meridian_runtime::sync::lock;
use tokio::sync::Notify;

use super::kinds::WorkloadKey;
use crate::fleet;

/// The component name on every Event this controller writes.
pub const COMPONENT: &str = "meridian-workload-controller";

/// An Event about a federated workload.
pub fn build(
    key: &WorkloadKey,
    uid: &str,
    type_: EventType,
    reason: &str,
    message: &str,
) -> EventSpec {
    let kind = key.kind.as_str();
    let regarding =
        fleet::events::regarding(key.kind.api_version(), kind, &key.namespace, &key.name, uid);
    fleet::events::event(regarding, type_, reason, message)
}

/// Clusters named in one Event at most; the rest are counted.
const MAX_ITEMS: usize = 20;

/// How long a batch stays open at most, however steadily notes join it: what a fan-out
/// has done so far is told at least this often.
pub const LONGEST_BATCH: Duration = Duration::from_secs(5);

/// One member's outcome, to be told in an Event on the federated workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Note {
    /// The workload.
    pub key: WorkloadKey,
    /// Its uid.
    pub uid: String,
    /// Normal or Warning.
    pub type_: EventType,
    /// The Event reason.
    pub reason: &'static str,
    /// What happened, shared by every cluster of a batch ("created shop/web in"); empty
    /// when each item is a whole sentence (errors).
    pub action: String,
    /// This cluster's part ("sim-1 (3 replicas)", or an error naming the cluster).
    pub item: String,
}

type BatchKey = (WorkloadKey, &'static str, String);

struct Batch {
    /// When its first note came.
    opened: Instant,
    /// When its last new item came.
    last: Instant,
    uid: String,
    type_: EventType,
    items: Vec<String>,
    more: usize,
}

impl Batch {
    fn message(&self, action: &str) -> String {
        let sep = if self.type_ == EventType::Warning {
            "; "
        } else {
            ", "
        };
        let mut m = self.items.join(sep);
        if self.more > 0 {
            m.push_str(&format!("{sep}and {} more", self.more));
        }
        if action.is_empty() {
            m
        } else {
            format!("{action} {m}")
        }
    }
}

/// Notes waiting to become Events (pure: time is passed in). A batch is due `window` after
/// its last new item or [`LONGEST_BATCH`] after its first, whichever comes first.
pub struct Batches {
    open: HashMap<BatchKey, Batch>,
    window: Duration,
}

impl Batches {
    /// No batches; each closes `window` after its last new item.
    pub fn new(window: Duration) -> Self {
        Self {
            open: HashMap::new(),
            window,
        }
    }

    /// Adds a note to its open batch, or opens one at `now`.
    pub fn add(&mut self, note: Note, now: Instant) {
        let key = (note.key, note.reason, note.action);
        match self.open.get_mut(&key) {
            Some(b) => {
                if b.items.contains(&note.item) {
                    return;
                }
                b.last = now;
                if b.items.len() < MAX_ITEMS {
                    b.items.push(note.item);
                } else {
                    b.more += 1;
                }
            }
            None => {
                self.open.insert(
                    key,
                    Batch {
                        opened: now,
                        last: now,
                        uid: note.uid,
                        type_: note.type_,
                        items: vec![note.item],
                        more: 0,
                    },
                );
            }
        }
    }

    fn due(&self, b: &Batch) -> Instant {
        (b.last + self.window).min(b.opened + LONGEST_BATCH)
    }

    /// When the next batch is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.open.values().map(|b| self.due(b)).min()
    }

    /// Closes the batches due at `now`, as Events, the oldest first.
    pub fn take_due(&mut self, now: Instant) -> Vec<EventSpec> {
        let mut due: Vec<BatchKey> = self
            .open
            .iter()
            .filter(|(_, b)| self.due(b) <= now)
            .map(|(k, _)| k.clone())
            .collect();
        due.sort_by_key(|k| self.open[k].opened);
        due.into_iter()
            .filter_map(|key| {
                let b = self.open.remove(&key)?;
                let (wk, reason, action) = &key;
                Some(build(wk, &b.uid, b.type_, reason, &b.message(action)))
            })
            .collect()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Gathers notes into batches and records each batch as one Event once it is due (see
/// [`Batches`]). Dropping it stops its task.
pub struct Batcher {
    shared: Arc<Shared>,
    writer: tokio::task::JoinHandle<()>,
}

struct Shared {
    batches: Mutex<Batches>,
    wake: Notify,
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

impl Batcher {
    /// A batcher handing its Events to `recorder`.
    pub fn start(recorder: Recorder, window: Duration) -> Arc<Self> {
        let shared = Arc::new(Shared {
            batches: Mutex::new(Batches::new(window)),
            wake: Notify::new(),
        });
        let writer = tokio::spawn(write_loop(shared.clone(), recorder));
        Arc::new(Self { shared, writer })
    }

    /// Adds a note; its Event is written once its batch is due.
    pub fn note(&self, note: Note) {
        let was_empty = {
            let mut b = lock(&self.shared.batches);
            let empty = b.is_empty();
            b.add(note, Instant::now());
            empty
        };
        if was_empty {
            self.shared.wake.notify_one();
        }
    }
}

async fn write_loop(shared: Arc<Shared>, recorder: Recorder) {
    loop {
        let wake = shared.wake.notified();
        let next = lock(&shared.batches).next_due();
        match next {
            None => {
                wake.await;
                continue;
            }
            // A note that came meanwhile only makes its batch due later.
            Some(t) => tokio::time::sleep_until(t.into()).await,
        }
        let due = lock(&shared.batches).take_due(Instant::now());
        for ev in due {
            // Waits for room in the recorder's buffer: meanwhile new notes join open
            // batches.
            recorder.record_when_room(ev).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::kinds::Kind;

    fn note(name: &str, reason: &'static str, action: &str, item: &str) -> Note {
        Note {
            key: WorkloadKey::new(Kind::Deployment, "shop", name),
            uid: format!("uid-{name}"),
            type_: if reason == "SyncFailed" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason,
            action: action.into(),
            item: item.into(),
        }
    }

    #[test]
    fn notes_of_one_change_become_one_event() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut b = Batches::new(Duration::from_millis(4));
        for (name, reason, action, item, at) in [
            (
                "web",
                "DriftReverted",
                "restored shop/web after a direct edit in",
                "sim-1",
                0,
            ),
            (
                "web",
                "DriftReverted",
                "restored shop/web after a direct edit in",
                "sim-2",
                10,
            ),
            (
                "web",
                "DriftReverted",
                "restored shop/web after a direct edit in",
                "sim-2",
                11,
            ),
            ("web", "SyncFailed", "", "creating in sim-3: refused", 20),
            ("web", "SyncFailed", "", "creating in sim-4: refused", 21),
            (
                "db",
                "DriftReverted",
                "restored shop/db after a direct edit in",
                "sim-1",
                30,
            ),
        ] {
            b.add(note(name, reason, action, item), ms(at));
        }
        // Due a window after web's last new cluster (the repeated note is no news).
        assert_eq!(b.next_due(), Some(ms(14)));
        assert!(b.take_due(ms(13)).is_empty());
        let first = b.take_due(ms(25));
        let msgs: Vec<(&str, &str, &str)> = first
            .iter()
            .map(|e| {
                (
                    e.regarding.name.as_deref().unwrap(),
                    e.reason.as_str(),
                    e.message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            msgs,
            [
                (
                    "web",
                    "DriftReverted",
                    "restored shop/web after a direct edit in sim-1, sim-2"
                ),
                (
                    "web",
                    "SyncFailed",
                    "creating in sim-3: refused; creating in sim-4: refused"
                ),
            ]
        );
        assert_eq!(first[1].type_, EventType::Warning);
        assert_eq!(first[0].regarding.uid.as_deref(), Some("uid-web"));
        // A note after its batch closed opens a new one.
        b.add(
            note(
                "web",
                "DriftReverted",
                "restored shop/web after a direct edit in",
                "sim-5",
            ),
            ms(40),
        );
        let rest = b.take_due(ms(44));
        assert_eq!(rest.len(), 2);
        assert_eq!(
            rest[0].message,
            "restored shop/db after a direct edit in sim-1"
        );
        assert!(b.is_empty());
    }

    #[test]
    fn long_batches_name_the_first_clusters_and_count_the_rest() {
        let t0 = Instant::now();
        let mut b = Batches::new(Duration::ZERO);
        for i in 0..MAX_ITEMS + 5 {
            b.add(
                note(
                    "web",
                    "DriftReverted",
                    "restored shop/web after a direct edit in",
                    &format!("c{i}"),
                ),
                t0,
            );
        }
        let ev = b.take_due(t0);
        let m = ev[0].message.clone();
        assert!(
            m.starts_with("restored shop/web after a direct edit in c0, c1,"),
            "{m}"
        );
        assert!(m.ends_with(", and 5 more"), "{m}");
    }

    #[test]
    fn a_steady_fan_out_is_told_once_per_longest_batch() {
        let t0 = Instant::now();
        let window = Duration::from_millis(250);
        let mut b = Batches::new(window);
        let mut events = Vec::new();
        // A member reports every 100 ms for 12 s: 120 notes, never a window apart.
        for i in 0..120u64 {
            let now = t0 + Duration::from_millis(100 * i);
            events.extend(b.take_due(now));
            b.add(
                note(
                    "web",
                    "DriftReverted",
                    "restored shop/web after a direct edit in",
                    &format!("c{i}"),
                ),
                now,
            );
        }
        let end = t0 + Duration::from_millis(100 * 119) + window;
        assert_eq!(b.next_due(), Some(end));
        events.extend(b.take_due(end));
        let counts: Vec<usize> = events
            .iter()
            .map(|e| e.message.matches(", c").count() + 1)
            .collect();
        // Closed at 5 s and 10 s by age, then a window after the last note.
        assert_eq!(events.len(), 3, "{counts:?}");
        assert!(
            events[0].message.ends_with("and 30 more"),
            "{}",
            events[0].message
        );
        assert!(b.is_empty());
    }

    #[test]
    fn event_shape() {
        let key = WorkloadKey::new(Kind::Deployment, "shop", "web");
        let e = build(&key, "u", EventType::Warning, "Conflict", "m");
        assert_eq!(e.regarding.kind.as_deref(), Some("Deployment"));
        assert_eq!(e.regarding.uid.as_deref(), Some("u"));
        assert_eq!(e.regarding.namespace.as_deref(), Some("shop"));
        assert_eq!(e.type_, EventType::Warning);
    }
}

//! Kubernetes Events on federated workloads: pushes, drift reverts, conflicts, failures and
//! member cleanup (best effort: a lost Event never blocks propagation).
//!
//! Members report each of their outcomes as a [`Note`]; the [`Batcher`] gathers the notes
//! of one workload, reason and action made within a short window into one Event that names
//! every cluster ("created shop/web in sim-1 (3 replicas), sim-2 (7 replicas)"), so a
//! workload spread over many clusters costs the federation one Event per change, not one
//! per cluster. Events go out through the process's recorder; while its buffer is full,
//! batches keep growing instead of queueing writes.

use std::collections::{HashMap, VecDeque};
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

/// Notes waiting to become Events, oldest first (pure: time is passed in).
#[derive(Default)]
pub struct Batches {
    open: HashMap<BatchKey, Batch>,
    /// When each batch opened, in order.
    order: VecDeque<(Instant, BatchKey)>,
}

impl Batches {
    /// Adds a note to its open batch, or opens one at `now`.
    pub fn add(&mut self, note: Note, now: Instant) {
        let key = (note.key, note.reason, note.action);
        match self.open.get_mut(&key) {
            Some(b) => {
                if b.items.contains(&note.item) {
                    return;
                }
                if b.items.len() < MAX_ITEMS {
                    b.items.push(note.item);
                } else {
                    b.more += 1;
                }
            }
            None => {
                self.order.push_back((now, key.clone()));
                self.open.insert(
                    key,
                    Batch {
                        uid: note.uid,
                        type_: note.type_,
                        items: vec![note.item],
                        more: 0,
                    },
                );
            }
        }
    }

    /// When the oldest batch opened.
    pub fn oldest(&self) -> Option<Instant> {
        self.order.front().map(|(t, _)| *t)
    }

    /// Closes the batches opened at or before `cutoff`, as Events.
    pub fn take_due(&mut self, cutoff: Instant) -> Vec<EventSpec> {
        let mut out = Vec::new();
        while self.order.front().is_some_and(|(t, _)| *t <= cutoff) {
            let Some((_, key)) = self.order.pop_front() else {
                break;
            };
            if let Some(b) = self.open.remove(&key) {
                let (wk, reason, action) = &key;
                out.push(build(wk, &b.uid, b.type_, reason, &b.message(action)));
            }
        }
        out
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Gathers notes into batches and records each batch as one Event once it is `window`
/// old. Dropping it stops its task.
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
            batches: Mutex::default(),
            wake: Notify::new(),
        });
        let writer = tokio::spawn(write_loop(shared.clone(), recorder, window));
        Arc::new(Self { shared, writer })
    }

    /// Adds a note; its Event is written about a window later.
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

async fn write_loop(shared: Arc<Shared>, recorder: Recorder, window: Duration) {
    loop {
        let wake = shared.wake.notified();
        let oldest = lock(&shared.batches).oldest();
        match oldest {
            None => {
                wake.await;
                continue;
            }
            Some(t) => tokio::time::sleep_until((t + window).into()).await,
        }
        let Some(cutoff) = Instant::now().checked_sub(window) else {
            continue;
        };
        let due = lock(&shared.batches).take_due(cutoff);
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
        let mut b = Batches::default();
        for (name, reason, action, item, at) in [
            (
                "web",
                "Pushed",
                "created shop/web in",
                "sim-1 (3 replicas)",
                0,
            ),
            (
                "web",
                "Pushed",
                "created shop/web in",
                "sim-2 (7 replicas)",
                10,
            ),
            (
                "web",
                "Pushed",
                "created shop/web in",
                "sim-2 (7 replicas)",
                11,
            ),
            ("web", "SyncFailed", "", "creating in sim-3: refused", 20),
            ("web", "SyncFailed", "", "creating in sim-4: refused", 21),
            (
                "db",
                "Pushed",
                "created shop/db in",
                "sim-1 (1 replicas)",
                30,
            ),
        ] {
            b.add(note(name, reason, action, item), ms(at));
        }
        assert_eq!(b.oldest(), Some(t0));
        assert!(b.take_due(t0 - Duration::from_millis(1)).is_empty());
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
                    "Pushed",
                    "created shop/web in sim-1 (3 replicas), sim-2 (7 replicas)"
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
            note("web", "Pushed", "created shop/web in", "sim-5 (1 replicas)"),
            ms(40),
        );
        let rest = b.take_due(ms(40));
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].message, "created shop/db in sim-1 (1 replicas)");
        assert!(b.is_empty());
    }

    #[test]
    fn long_batches_name_the_first_clusters_and_count_the_rest() {
        let t0 = Instant::now();
        let mut b = Batches::default();
        for i in 0..MAX_ITEMS + 5 {
            b.add(
                note("web", "Removed", "removed shop/web from", &format!("c{i}")),
                t0,
            );
        }
        let ev = b.take_due(t0);
        let m = ev[0].message.clone();
        assert!(m.starts_with("removed shop/web from c0, c1,"), "{m}");
        assert!(m.ends_with(", and 5 more"), "{m}");
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

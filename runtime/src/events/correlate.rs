//! Which write each recorded Event becomes (pure): the first of a kind is created, a repeat
//! of the same (component, object, type, reason, message) raises the count of the Event
//! already written, as client-go's `EventCorrelator` does, so repeats never become new
//! objects. One write per Event object is in flight at a time: repeats arriving meanwhile
//! are folded into the count the next write carries.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::{EventSpec, EventType};

/// Longest message written; the Kubernetes API caps Event messages at 1 KiB.
pub const MAX_MESSAGE: usize = 1024;

/// What makes two recorded Events the same Event object (client-go's event key); cheap
/// to clone, as the cache, its age order and each write in flight share one copy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(Arc<Identity>);

/// The fields of a [`Key`]: enough to write the Event again from scratch.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Identity {
    component: Arc<str>,
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    field_path: Option<String>,
    type_: EventType,
    reason: String,
    message: String,
}

/// One write to the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Create this Event.
    Create(Box<Event>),
    /// Raise the count of an Event written before.
    Count {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The new count.
        count: i32,
        /// The latest occurrence.
        last: jiff::Timestamp,
    },
}

/// How a write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written.
    Written,
    /// The Event to count on is gone (expired, or deleted): it is created again.
    Gone,
    /// Failed otherwise (the occurrence is lost; the next one tries again).
    Failed,
}

/// What the cache keeps of one Event besides its key: the key and these rebuild it, so a
/// full Event is never held (as client-go's correlator keeps only name and counts).
#[derive(Debug)]
struct Entry {
    /// The Event object's name.
    name: String,
    first: jiff::Timestamp,
    count: i32,
    last: jiff::Timestamp,
    /// The count the API holds.
    written: i32,
    /// Whether the Event object exists (a create succeeded).
    created: bool,
    in_flight: bool,
}

/// The correlation state: a bounded cache of the Events written.
#[derive(Debug)]
pub struct Correlator {
    entries: HashMap<Key, Entry>,
    /// Keys in the order they were first seen, for eviction.
    age: VecDeque<Key>,
    capacity: usize,
    default_namespace: String,
}

/// `message` cut to [`MAX_MESSAGE`] bytes on a character boundary, marked with `...`.
pub fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut cut = MAX_MESSAGE - 3;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &message[..cut])
}

impl Correlator {
    /// Remembers up to `capacity` distinct Events; Events about cluster-scoped objects go
    /// to `default_namespace`.
    pub fn new(capacity: usize, default_namespace: &str) -> Self {
        Self {
            entries: HashMap::new(),
            age: VecDeque::new(),
            capacity: capacity.max(1),
            default_namespace: default_namespace.to_string(),
        }
    }

    fn key(component: &Arc<str>, spec: EventSpec) -> Key {
        let r = spec.regarding;
        Key(Arc::new(Identity {
            component: component.clone(),
            api_version: r.api_version,
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            uid: r.uid,
            field_path: r.field_path,
            type_: spec.type_,
            reason: spec.reason,
            message: spec.message,
        }))
    }

    /// Forgets the oldest idle entries until one more fits.
    fn make_room(&mut self) {
        let mut spins = self.age.len();
        while self.entries.len() >= self.capacity && spins > 0 {
            spins -= 1;
            let Some(k) = self.age.pop_front() else {
                return;
            };
            match self.entries.get(&k) {
                // Its write's outcome is still to come: keep it.
                Some(e) if e.in_flight => self.age.push_back(k),
                _ => {
                    self.entries.remove(&k);
                }
            }
        }
    }

    /// An occurrence of `spec` by `component` at `at`: the write to send now, if any, and
    /// the key its outcome is reported under.
    pub fn observe(
        &mut self,
        component: &Arc<str>,
        spec: EventSpec,
        at: jiff::Timestamp,
    ) -> Option<(Key, Write)> {
        let key = Self::key(component, spec);
        if let Some(e) = self.entries.get_mut(&key) {
            e.count = e.count.saturating_add(1);
            e.last = at;
            if e.in_flight {
                return None;
            }
            e.in_flight = true;
            let write = self.next_write(&key);
            return Some((key, write));
        }
        self.make_room();
        let base = key.0.name.as_deref().unwrap_or_default();
        let entry = Entry {
            // Unique without a round trip, as client-go's recorder does.
            name: format!("{base}.{:016x}", rand::random::<u64>()),
            first: at,
            count: 1,
            last: at,
            written: 0,
            created: false,
            in_flight: true,
        };
        self.entries.insert(key.clone(), entry);
        self.age.push_back(key.clone());
        let write = self.next_write(&key);
        Some((key, write))
    }

    /// The write that brings the API to the count of `key`'s entry, which exists.
    fn next_write(&self, key: &Key) -> Write {
        let e = &self.entries[key];
        if e.created {
            Write::Count {
                namespace: self.namespace(key).to_string(),
                name: e.name.clone(),
                count: e.count,
                last: e.last,
            }
        } else {
            Write::Create(Box::new(self.event(key, e)))
        }
    }

    /// How the write under `key` that carried `count` ended: the next write, if repeats
    /// came meanwhile or the Event must be created again.
    pub fn finished(&mut self, key: &Key, count: i32, outcome: Outcome) -> Option<Write> {
        let e = self.entries.get_mut(key)?;
        e.in_flight = false;
        match outcome {
            Outcome::Written => {
                e.created = true;
                e.written = e.written.max(count);
            }
            Outcome::Gone => {
                e.created = false;
                e.written = 0;
                e.in_flight = true;
                return Some(self.next_write(key));
            }
            Outcome::Failed if !e.created => {
                // Never written: the next occurrence starts afresh.
                self.entries.remove(key);
                return None;
            }
            Outcome::Failed => return None,
        }
        if e.count > e.written {
            e.in_flight = true;
            return Some(self.next_write(key));
        }
        None
    }

    /// The namespace of `key`'s Event.
    fn namespace<'a>(&'a self, key: &'a Key) -> &'a str {
        key.0
            .namespace
            .as_deref()
            .filter(|ns| !ns.is_empty())
            .unwrap_or(&self.default_namespace)
    }

    /// The Event `key` and `e` stand for, with `e`'s count and times.
    fn event(&self, key: &Key, e: &Entry) -> Event {
        let id = &*key.0;
        Event {
            metadata: ObjectMeta {
                name: Some(e.name.clone()),
                namespace: Some(self.namespace(key).to_string()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: id.api_version.clone(),
                kind: id.kind.clone(),
                namespace: id.namespace.clone(),
                name: id.name.clone(),
                uid: id.uid.clone(),
                field_path: id.field_path.clone(),
                resource_version: None,
            },
            reason: Some(id.reason.clone()),
            message: Some(truncate(&id.message)),
            type_: Some(id.type_.as_str().to_string()),
            count: Some(e.count),
            first_timestamp: Some(Time(e.first)),
            last_timestamp: Some(Time(e.last)),
            source: Some(EventSource {
                component: Some(id.component.to_string()),
                host: None,
            }),
            reporting_component: Some(id.component.to_string()),
            ..Default::default()
        }
    }

    /// Distinct Events remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The count a write carries (for [`Correlator::finished`]).
pub fn count_of(w: &Write) -> i32 {
    match w {
        Write::Create(e) => e.count.unwrap_or(1),
        Write::Count { count, .. } => *count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, reason: &str, message: &str) -> EventSpec {
        EventSpec {
            regarding: ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                namespace: Some("shop".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            type_: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + s).expect("time")
    }

    #[test]
    fn repeats_raise_the_count_of_one_event() {
        let c: Arc<str> = Arc::from("meridian-test");
        let mut k = Correlator::new(16, "default");
        let (key, first) = k
            .observe(&c, spec("web", "SyncFailed", "refused"), t(0))
            .expect("create");
        let Write::Create(event) = &first else {
            panic!("first occurrence is created: {first:?}")
        };
        assert_eq!(event.count, Some(1));
        assert_eq!(event.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reporting_component.as_deref(), Some("meridian-test"));
        let name = event.metadata.name.clone().expect("name");
        assert!(name.starts_with("web."), "{name}");

        // Two repeats while the create is in flight: folded into one count write after it.
        assert_eq!(
            k.observe(&c, spec("web", "SyncFailed", "refused"), t(1)),
            None
        );
        assert_eq!(
            k.observe(&c, spec("web", "SyncFailed", "refused"), t(2)),
            None
        );
        let next = k.finished(&key, 1, Outcome::Written).expect("count write");
        assert_eq!(
            next,
            Write::Count {
                namespace: "shop".into(),
                name: name.clone(),
                count: 3,
                last: t(2)
            }
        );
        assert_eq!(k.finished(&key, 3, Outcome::Written), None);
        // An idle repeat is written at once.
        let (_, w) = k
            .observe(&c, spec("web", "SyncFailed", "refused"), t(9))
            .expect("write");
        assert_eq!(count_of(&w), 4);

        // Another message, object or component is another Event.
        assert!(matches!(
            k.observe(&c, spec("web", "SyncFailed", "timed out"), t(3)),
            Some((_, Write::Create(_)))
        ));
        assert!(matches!(
            k.observe(
                &Arc::from("other"),
                spec("web", "SyncFailed", "refused"),
                t(3)
            ),
            Some((_, Write::Create(_)))
        ));
        assert_eq!(k.len(), 3);
    }

    #[test]
    fn a_vanished_event_is_created_again_with_its_count() {
        let c: Arc<str> = Arc::from("meridian-test");
        let mut k = Correlator::new(16, "default");
        let (key, first) = k
            .observe(&c, spec("web", "Pushed", "created"), t(0))
            .expect("create");
        let Write::Create(first) = first else {
            panic!("created")
        };
        k.finished(&key, 1, Outcome::Written);
        let (_, w) = k
            .observe(&c, spec("web", "Pushed", "created"), t(5))
            .expect("count");
        assert!(matches!(w, Write::Count { count: 2, .. }));
        let again = k.finished(&key, 2, Outcome::Gone).expect("create again");
        let Write::Create(e) = again else {
            panic!("created again")
        };
        // The cache keeps no Event: the one created again is rebuilt from the key, the
        // same object as the first but for its count and latest time.
        let mut expected = first;
        expected.count = Some(2);
        expected.last_timestamp = Some(Time(t(5)));
        assert_eq!(e, expected);
    }

    #[test]
    fn the_field_path_tells_events_apart() {
        let c: Arc<str> = Arc::from("meridian-test");
        let mut k = Correlator::new(4, "default");
        let mut a = spec("web", "Pulled", "image pulled");
        a.regarding.field_path = Some("spec.containers{web}".into());
        let mut b = a.clone();
        b.regarding.field_path = Some("spec.containers{sidecar}".into());
        let Some((_, Write::Create(e))) = k.observe(&c, a, t(0)) else {
            panic!("created")
        };
        assert_eq!(
            e.involved_object.field_path.as_deref(),
            Some("spec.containers{web}")
        );
        assert!(matches!(
            k.observe(&c, b, t(1)),
            Some((_, Write::Create(_)))
        ));
        assert_eq!(k.len(), 2);
    }

    #[test]
    fn a_failed_first_write_is_forgotten_and_the_cache_is_bounded() {
        let c: Arc<str> = Arc::from("meridian-test");
        let mut k = Correlator::new(2, "default");
        let (key, _) = k.observe(&c, spec("a", "R", "m"), t(0)).expect("create");
        assert_eq!(k.finished(&key, 1, Outcome::Failed), None);
        assert!(k.is_empty());
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            let (key, _) = k
                .observe(&c, spec(name, "R", "m"), t(i as i64))
                .expect("create");
            k.finished(&key, 1, Outcome::Written);
        }
        assert_eq!(k.len(), 2, "the oldest was evicted");
        assert!(matches!(
            k.observe(&c, spec("a", "R", "m"), t(9)),
            Some((_, Write::Create(_)))
        ));
    }

    #[test]
    fn cluster_scoped_objects_get_the_default_namespace_and_long_messages_are_cut() {
        let c: Arc<str> = Arc::from("meridian-test");
        let mut k = Correlator::new(4, "default");
        let mut s = spec("eu-1", "Offline", &"é".repeat(600));
        s.regarding.namespace = None;
        let Some((_, Write::Create(e))) = k.observe(&c, s, t(0)) else {
            panic!("created")
        };
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        let m = e.message.expect("message");
        assert!(m.len() <= MAX_MESSAGE && m.ends_with("..."), "{}", m.len());
    }
}

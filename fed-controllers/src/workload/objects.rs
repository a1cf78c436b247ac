//! A watch-fed cache of dynamic objects that keeps each one as its JSON text plus the few
//! fields the hot paths read (ownership, dependencies), instead of a parsed tree: the
//! controller caches every federated workload and every copy it pushed, and a parsed
//! `serde_json::Value` costs about ten times its JSON size.
//!
//! Each entry also carries its copy's status counts and a digest of what a member edit
//! can change (generation, labels, annotations), so an event that changes neither is
//! recognised without parsing anything again.
//!
//! It follows kube's reflector semantics: a relist (`Init` … `InitDone`) replaces the
//! contents at once, and until the first list completes the cache is not ready.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::Value;

use super::deps::{self, Dependencies};
use super::kinds::DepKind;
use super::status::CopyStatus;
use crate::compact::Compact;
use crate::name_index::NameIndex;
use crate::slim_cache::Ready;

/// One cached object.
#[derive(Debug)]
pub struct Entry {
    /// Namespace ("" for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The object's own uid.
    pub uid: String,
    /// The federated owner's uid when the object carries both of Meridian's labels.
    pub owner_uid: Option<String>,
    /// What its pod template references (workloads only; empty otherwise).
    pub deps: Dependencies,
    /// Its status counts (all zero for kinds without them).
    pub status: CopyStatus,
    /// A digest of what an edit of the object changes: its generation (every spec change
    /// bumps it), labels, annotations and deletion; the whole content for kinds without a
    /// generation (ConfigMaps, Secrets, ServiceAccounts).
    pub shape: u64,
    json: Compact,
    /// The last answer of [`Entry::in_sync_with`] in one word, as every cached object
    /// carries it: the digest of the wanted copy it compared with, its lowest bit replaced
    /// by whether they matched; 0 before any.
    verdict: AtomicU64,
}

/// What a watch event changed in the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// The object appeared, went, or its [`Entry::shape`] changed.
    pub shape: bool,
    /// The object appeared, went, or its [`Entry::status`] changed.
    pub status: bool,
}

impl Change {
    const ALL: Change = Change {
        shape: true,
        status: true,
    };
}

fn shape_of(o: &DynamicObject) -> u64 {
    use std::hash::{Hash, Hasher};
    let m = &o.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    m.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    if m.generation.is_none() {
        o.data.to_string().hash(&mut h);
    }
    h.finish()
}

/// `o` encoded without its status and managedFields: what a member copy is read for
/// (drift, the base of an update) never needs them, and its counts are kept apart.
struct WithoutStatus<'a>(&'a DynamicObject);

impl serde::Serialize for WithoutStatus<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let o = self.0;
        let mut m = s.serialize_map(None)?;
        if let Some(t) = &o.types {
            m.serialize_entry("apiVersion", &t.api_version)?;
            m.serialize_entry("kind", &t.kind)?;
        }
        if o.metadata.managed_fields.is_some() {
            let mut meta = o.metadata.clone();
            meta.managed_fields = None;
            m.serialize_entry("metadata", &meta)?;
        } else {
            m.serialize_entry("metadata", &o.metadata)?;
        }
        if let Value::Object(data) = &o.data {
            for (k, v) in data.iter().filter(|(k, _)| *k != "status") {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

impl Entry {
    /// Summarises `o`; `with_deps` also reads its pod template's references.
    pub fn new(o: &DynamicObject, with_deps: bool) -> Self {
        let kind = o.types.as_ref().map_or("", |t| t.kind.as_str());
        Self::summarise(o, kind, with_deps, true)
    }

    /// [`Entry::new`] for an object of `kind` (a listed object may not say its own);
    /// without `keep_status` the text leaves out the object's status and managedFields
    /// ([`Entry::status`] still has the counts).
    fn summarise(o: &DynamicObject, kind: &str, with_deps: bool, keep_status: bool) -> Self {
        let labels = o.labels();
        let managed = labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE);
        let owner_uid = labels
            .get(OWNER_UID_LABEL)
            .filter(|u| managed && !u.is_empty())
            .cloned();
        let deps = if with_deps {
            deps::of_pod_template(&o.data["spec"]["template"])
        } else {
            Dependencies::default()
        };
        let json = if keep_status {
            serde_json::to_string(o)
        } else {
            serde_json::to_string(&WithoutStatus(o))
        }
        .map(|text| Compact::from_json(kind, text));
        let status = CopyStatus::of(kind, o.metadata.generation, &o.data["status"]);
        Self {
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            uid: o.uid().unwrap_or_default(),
            owner_uid,
            deps,
            status,
            shape: shape_of(o),
            // A DynamicObject always encodes; null would only show as an empty object.
            json: json.unwrap_or_else(|_| Compact::from_json(kind, "null".into())),
            verdict: AtomicU64::new(0),
        }
    }

    /// The whole object, parsed.
    pub fn value(&self) -> Value {
        self.json.value()
    }

    /// Whether this copy matches the wanted one, whose inputs digest to `wanted`: `in_sync`
    /// compares the parsed copy with it, and is asked again only for another wanted copy.
    /// Every look at a workload asks each of its members; an entry is replaced whenever the
    /// member's copy changes, so between changes a copy is unpacked and parsed once, not
    /// once per look.
    ///
    /// Two wanted copies whose digests differ only in the lowest bit share a verdict: one
    /// chance in 2^63 for a 64-bit hash.
    pub fn in_sync_with(&self, wanted: u64, in_sync: impl FnOnce(&Value) -> bool) -> bool {
        let wanted = wanted & !1;
        let verdict = self.verdict.load(Ordering::Relaxed);
        if verdict != 0 && verdict & !1 == wanted {
            return verdict & 1 == 1;
        }
        let matched = in_sync(&self.value());
        self.verdict
            .store(wanted | u64::from(matched), Ordering::Relaxed);
        matched
    }

    /// Whether this is Meridian's copy of the federated object with `uid`.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner_uid.as_deref() == Some(uid)
    }
}

/// Entries by namespace, then name: looked up with borrowed names, without building a key
/// (every reconcile asks every member whether it holds a copy); and the entries whose pod
/// templates reference each dependency.
#[derive(Default)]
struct Map {
    entries: HashMap<String, HashSet<ByName>>,
    /// (kind, namespace, name) of a dependency → the names of the entries referencing it:
    /// a ConfigMap's change finds its workloads without a scan of every workload.
    referrers: NameIndex<(DepKind, String, String)>,
}

/// An entry in its namespace's set, found by its name: the entry's own name is the key,
/// not a second copy of it (a member of a thousand-member fleet caches one entry per
/// workload copy).
struct ByName(Arc<Entry>);

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl std::hash::Hash for ByName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes: `Borrow` asks lookups by `&str` to find the same bucket.
        self.0.name.as_str().hash(state);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

// `ByName` hashes and compares by the entry's name, which never changes; the entry's
// atomic verdict, which clippy sees as a mutable key, is no part of it.
#[allow(clippy::mutable_key_type)]
impl Map {
    fn insert(&mut self, e: Arc<Entry>) -> Option<Arc<Entry>> {
        let names = match self.entries.get_mut(&e.namespace) {
            Some(names) => names,
            None => self.entries.entry(e.namespace.clone()).or_default(),
        };
        let old = names.replace(ByName(e.clone())).map(|old| old.0);
        if old.as_ref().is_none_or(|o| o.deps != e.deps) {
            if let Some(o) = &old {
                self.unrefer(o);
            }
            for (kind, dep) in &e.deps.refs {
                let key = (*kind, e.namespace.clone(), dep.clone());
                self.referrers.add(&key, &e.name);
            }
        }
        old
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        if let Some(names) = self.entries.get_mut(namespace) {
            let gone = names.take(name);
            if names.is_empty() {
                self.entries.remove(namespace);
            }
            if let Some(gone) = gone {
                self.unrefer(&gone.0);
            }
        }
    }

    /// Drops `e` from the referrers of its dependencies.
    fn unrefer(&mut self, e: &Entry) {
        for (kind, dep) in &e.deps.refs {
            let key = (*kind, e.namespace.clone(), dep.clone());
            self.referrers.remove(&key, &e.name);
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<Entry>> {
        self.entries.get(namespace)?.get(name).map(|e| &e.0)
    }

    fn values(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.entries
            .values()
            .flat_map(|names| names.iter().map(|e| &e.0))
    }
}

#[derive(Default)]
struct Inner {
    objects: Map,
    /// Objects of a relist in progress; they replace `objects` when it completes.
    relist: Option<Map>,
}

/// The cache; clones share it.
#[derive(Clone)]
pub struct ObjectCache {
    inner: Arc<RwLock<Inner>>,
    /// The kind of the objects (their text is packed with that kind's dictionary).
    kind: Arc<str>,
    ready: Ready,
    with_deps: bool,
    keep_status: bool,
}

impl ObjectCache {
    /// An empty cache of objects of `kind`; `with_deps` records each object's
    /// pod-template references.
    pub fn new(kind: &str, with_deps: bool) -> Self {
        Self {
            inner: Arc::default(),
            kind: kind.into(),
            ready: Ready::default(),
            with_deps,
            keep_status: true,
        }
    }

    /// The same cache keeping objects without their status and managedFields (member
    /// copies: only their counts are read, from [`Entry::status`]).
    pub fn without_status(mut self) -> Self {
        self.keep_status = false;
        self
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        meridian_runtime::sync::read(&self.inner)
    }

    /// Applies one watcher event; says what it changed.
    pub fn apply(&self, event: &Event<DynamicObject>) -> Change {
        // Summarise outside the lock: encoding is the costly part.
        let entry = match event {
            Event::Apply(o) | Event::InitApply(o) => Some(Arc::new(Entry::summarise(
                o,
                &self.kind,
                self.with_deps,
                self.keep_status,
            ))),
            _ => None,
        };
        let mut g = meridian_runtime::sync::write(&self.inner);
        match (event, entry) {
            (Event::Apply(_), Some(e)) => {
                let new = e.clone();
                match g.objects.insert(e) {
                    Some(old) => Change {
                        shape: old.shape != new.shape,
                        status: old.status != new.status,
                    },
                    None => Change::ALL,
                }
            }
            (Event::Delete(o), _) => {
                let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
                g.objects.remove(namespace, &o.name_any());
                Change::ALL
            }
            (Event::Init, _) => {
                g.relist = Some(Map::default());
                Change::default()
            }
            (Event::InitApply(_), Some(e)) => {
                g.relist.get_or_insert_with(Map::default).insert(e);
                Change::ALL
            }
            (Event::InitDone, _) => {
                if let Some(m) = g.relist.take() {
                    g.objects = m;
                }
                drop(g);
                self.ready.set();
                Change::default()
            }
            _ => Change::default(),
        }
    }

    /// Drops `namespace/name`, which the member's API server said is gone (its watch brings
    /// the same deletion later, or a relist the truth).
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut g = meridian_runtime::sync::write(&self.inner);
        g.objects.remove(namespace, name);
    }

    /// The object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Entry>> {
        self.read().objects.get(namespace, name).cloned()
    }

    /// The names of the objects in `namespace` whose pod templates reference `kind` `name`
    /// (only a cache made `with_deps` records references).
    pub fn referencing(&self, kind: DepKind, namespace: &str, name: &str) -> Vec<String> {
        let key = (kind, namespace.to_string(), name.to_string());
        let g = self.read();
        g.objects
            .referrers
            .get(&key)
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every object.
    pub fn state(&self) -> Vec<Arc<Entry>> {
        self.read().objects.values().cloned().collect()
    }

    /// Whether the first list has completed, and a wait for it.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cfg"}}]}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_copy_is_compared_once_per_wanted_copy() {
        let entry = Entry::new(&obj("a", json!({})), true);
        let compared = std::cell::Cell::new(0);
        let named_a = |actual: &Value| {
            compared.set(compared.get() + 1);
            actual["metadata"]["name"] == "a"
        };
        assert!(entry.in_sync_with(1, named_a));
        assert!(entry.in_sync_with(1, named_a));
        assert_eq!(
            compared.get(),
            1,
            "the same wanted copy is not compared again"
        );
        let named_b = |actual: &Value| {
            compared.set(compared.get() + 1);
            actual["metadata"]["name"] == "b"
        };
        assert!(!entry.in_sync_with(2, named_b));
        assert!(!entry.in_sync_with(2, named_b));
        assert_eq!(compared.get(), 2, "another wanted copy is compared once");
        assert!(
            entry.in_sync_with(1, named_a),
            "back to the first wanted copy"
        );
        assert_eq!(compared.get(), 3);
        // A changed member copy is a new entry: compared afresh.
        let changed = Entry::new(&obj("a", json!({"tier": "web"})), true);
        assert!(changed.in_sync_with(1, named_a));
        assert_eq!(compared.get(), 4);
    }

    #[test]
    fn relist_replaces_and_events_apply() {
        let c = ObjectCache::new("Deployment", true);
        assert!(!c.ready().is_ready());
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(obj("a", json!({}))));
        c.apply(&Event::InitApply(obj("b", json!({}))));
        assert!(
            c.get("shop", "a").is_none(),
            "visible before the list completed"
        );
        c.apply(&Event::InitDone);
        assert!(c.ready().is_ready());
        assert_eq!(c.state().len(), 2);
        c.apply(&Event::Delete(obj("a", json!({}))));
        c.apply(&Event::Apply(obj("c", json!({}))));
        let mut names: Vec<String> = c.state().iter().map(|e| e.name.clone()).collect();
        names.sort();
        assert_eq!(names, ["b", "c"]);
        // A relist drops what is gone and keeps serving the old contents until it is done.
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(obj("c", json!({}))));
        assert!(c.get("shop", "b").is_some());
        c.apply(&Event::InitDone);
        assert!(c.get("shop", "b").is_none());
        assert_eq!(c.state().len(), 1);
        // A deletion the member's API server answered is dropped before its event comes;
        // the event then changes nothing further.
        c.forget("shop", "c");
        assert!(c.get("shop", "c").is_none());
        c.apply(&Event::Delete(obj("c", json!({}))));
        assert!(c.state().is_empty());
    }

    #[test]
    fn entry_summary_and_value() {
        let e = Entry::new(
            &obj(
                "web",
                json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "fed-uid"}),
            ),
            true,
        );
        assert_eq!(e.uid, "uid-web");
        assert!(e.owned_by("fed-uid") && !e.owned_by("other"));
        assert!(
            e.deps
                .contains(super::super::kinds::DepKind::ConfigMap, "cfg")
        );
        assert_eq!(e.value()["metadata"]["name"], "web");
        assert_eq!(
            e.value()["spec"]["template"]["spec"]["containers"][0]["name"],
            "c"
        );
        let foreign = Entry::new(&obj("x", json!({OWNER_UID_LABEL: "fed-uid"})), false);
        assert!(!foreign.owned_by("fed-uid"));
        assert!(foreign.deps.refs.is_empty());
    }

    #[test]
    fn changes_tell_edits_from_status_updates() {
        let c = ObjectCache::new("Deployment", false);
        let copy = |generation: i64, ready: i64, labels: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop", "generation": generation, "labels": labels},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": generation, "readyReplicas": ready}
            }))
            .unwrap()
        };
        assert_eq!(
            c.apply(&Event::Apply(copy(1, 0, json!({})))),
            Change::ALL,
            "a new object"
        );
        assert_eq!(
            c.apply(&Event::Apply(copy(1, 0, json!({})))),
            Change::default(),
            "nothing we read changed"
        );
        assert_eq!(
            c.apply(&Event::Apply(copy(1, 2, json!({})))),
            Change {
                shape: false,
                status: true
            }
        );
        assert_eq!(c.get("shop", "web").unwrap().status.ready, 2);
        let stripped = ObjectCache::new("Deployment", false).without_status();
        stripped.apply(&Event::Apply(copy(1, 2, json!({"x": "y"}))));
        let e = stripped.get("shop", "web").unwrap();
        assert_eq!(e.status.ready, 2, "counts kept");
        let v = e.value();
        assert!(v.get("status").is_none(), "{v}");
        assert_eq!(v["spec"]["replicas"], 2);
        assert_eq!(v["metadata"]["labels"]["x"], "y");
        assert_eq!(v["kind"], "Deployment");
        assert!(
            c.apply(&Event::Apply(copy(2, 2, json!({})))).shape,
            "a spec edit bumps the generation"
        );
        assert_eq!(
            c.apply(&Event::Apply(copy(2, 2, json!({"x": "y"})))),
            Change {
                shape: true,
                status: false
            },
            "a label edit"
        );
        assert_eq!(c.apply(&Event::Delete(copy(2, 2, json!({})))), Change::ALL);
        // Without a generation, any content change is a shape change.
        let cm = |v: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg", "namespace": "shop"}, "data": {"k": v}}))
            .unwrap()
        };
        c.apply(&Event::Apply(cm("a")));
        assert!(!c.apply(&Event::Apply(cm("a"))).shape);
        assert!(c.apply(&Event::Apply(cm("b"))).shape);
    }

    #[tokio::test]
    async fn ready_after_first_list() {
        let c = ObjectCache::new("Deployment", false);
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.ready().wait().await }
        });
        c.apply(&Event::Init);
        c.apply(&Event::InitDone);
        waiter.await.unwrap();
    }

    #[test]
    fn the_objects_referencing_a_dependency_follow_events() {
        let c = ObjectCache::new("Deployment", true);
        let referencing = || {
            let mut names = c.referencing(DepKind::ConfigMap, "shop", "cfg");
            names.sort();
            names
        };
        c.apply(&Event::Apply(obj("a", json!({}))));
        c.apply(&Event::Apply(obj("b", json!({}))));
        assert_eq!(referencing(), ["a", "b"]);
        assert!(c.referencing(DepKind::ConfigMap, "other", "cfg").is_empty());
        assert!(c.referencing(DepKind::Secret, "shop", "cfg").is_empty());
        // A label change keeps the reference; a template without it drops it.
        c.apply(&Event::Apply(obj("a", json!({"tier": "web"}))));
        assert_eq!(referencing(), ["a", "b"]);
        let mut plain = obj("a", json!({}));
        plain.data["spec"]["template"]["spec"]["containers"][0]["envFrom"] = json!([]);
        c.apply(&Event::Apply(plain));
        assert_eq!(referencing(), ["b"]);
        c.apply(&Event::Delete(obj("b", json!({}))));
        assert!(referencing().is_empty());
        // A relist's references replace the old ones when it ends.
        c.apply(&Event::Apply(obj("z", json!({}))));
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(obj("y", json!({}))));
        c.apply(&Event::InitDone);
        assert_eq!(referencing(), ["y"]);
        let uncounted = ObjectCache::new("Deployment", false);
        uncounted.apply(&Event::Apply(obj("a", json!({}))));
        assert!(
            uncounted
                .referencing(DepKind::ConfigMap, "shop", "cfg")
                .is_empty(),
            "a cache without dependencies records none"
        );
    }
}

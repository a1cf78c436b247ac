//! The watch cache: every object of every served resource in memory as JSON text (packed,
//! for the federation's server), a bounded history of recent events per resource, and a
//! broadcast that all watchers of a resource share, fed by one store watch.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use apimachinery::{JsonPointer, PackedJson, Packer};
use bytes::Bytes;
use futures::StreamExt;
use meridian_store::{Event as StoreEvent, EventKind, KeyValue, Revision, Storage, StoreError};
use serde_json::{Map, Value};
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;

use crate::registry::{Registry, ResourceDef};
use crate::{object, stored_text};

/// How many events each resource keeps for watches that resume from a resourceVersion.
pub const HISTORY_PER_RESOURCE: usize = 10_000;
/// How long an event stays in its resource's history at most: a watch can resume from a
/// resourceVersion this recent (unless `HISTORY_PER_RESOURCE` newer events came since).
/// Idle resources then stop holding old versions of their objects.
pub const HISTORY_WINDOW: Duration = Duration::from_secs(150);
/// Events each resource keeps whatever their age, so a watcher that saw the latest changes
/// of a quiet resource can still resume.
pub const HISTORY_MIN: usize = 100;
/// How far a watcher may fall behind the live stream before it is closed (it then resumes).
pub const BROADCAST_CAPACITY: usize = 8192;

/// One object as the cache holds it.
#[derive(Debug)]
pub struct Cached {
    /// Storage key (`/<group>/<plural>/[<namespace>/]<name>`: the namespace and name are
    /// read from it rather than held twice).
    pub key: Arc<str>,
    /// `metadata.uid`.
    pub uid: Box<str>,
    /// The resourceVersion (store revision of its last write, or of its deletion).
    pub rv: Revision,
    /// The object as JSON with `resourceVersion` set.
    json: Text,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.labels`, compact (a list-heavy server holds these for every object).
    pub labels: Labels,
    /// Uids in `metadata.ownerReferences`.
    pub owners: Box<[Box<str>]>,
    /// Values of the kind's extra field selectors, in [`ResourceDef::field_selectors`] order.
    pub fields: Box<[Box<str>]>,
    /// The kind's field selector names (shared, static).
    pub field_names: &'static [(&'static str, &'static str)],
}

impl Cached {
    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        key_parts(&self.key).0
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        key_parts(&self.key).1
    }

    /// The object as JSON.
    pub fn json(&self) -> Bytes {
        match &self.json {
            Text::Plain(b) => b.clone(),
            Text::Packed(p) => Bytes::from(p.unpack()),
        }
    }

    /// The length of [`Cached::json`].
    pub fn json_len(&self) -> usize {
        match &self.json {
            Text::Plain(b) => b.len(),
            Text::Packed(p) => p.text_len(),
        }
    }

    /// Appends the object as JSON to `out`.
    pub fn append_json(&self, out: &mut Vec<u8>) {
        match &self.json {
            Text::Plain(b) => out.extend_from_slice(b),
            Text::Packed(p) => p.append_to(out),
        }
    }

    /// The object parsed back into a value.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json()).unwrap_or(Value::Null)
    }

    /// The watch frame announcing this version as `kind`.
    pub fn frame_as(&self, kind: EventType) -> Bytes {
        let mut out = Vec::with_capacity(self.json_len() + 32);
        frame_head(kind.as_str(), &mut out);
        self.append_json(&mut out);
        out.extend_from_slice(FRAME_TAIL);
        Bytes::from(out)
    }

    /// The value a field selector asks for.
    pub fn field(&self, field: &str) -> Option<&str> {
        match field {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace()),
            other => self
                .field_names
                .iter()
                .position(|(n, _)| *n == other)
                .and_then(|i| self.fields.get(i))
                .map(|v| &**v),
        }
    }
}

/// The namespace ("" when cluster-scoped) and name in a storage key: names and namespaces
/// hold no `/`, so a key has four segments for namespaced objects and three otherwise.
fn key_parts(key: &str) -> (&str, &str) {
    let (rest, name) = key.rsplit_once('/').unwrap_or(("", key));
    let segments = rest.trim_start_matches('/').split('/').count();
    let namespace = match rest.rsplit_once('/') {
        Some((_, ns)) if segments == 3 => ns,
        _ => "",
    };
    (namespace, name)
}

/// How the cache holds each object's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextForm {
    /// Packed ([`PackedJson`], against a dictionary per resource): a fifth to a tenth of
    /// the memory, for a few microseconds per write and per read. The federation's server
    /// holds every federated object and, for a while, every version of it, so memory is
    /// what it is short of.
    Packed,
    /// As is: a simulated fleet runs many servers on a few cores, so CPU is.
    Plain,
}

/// An object's text in its [`TextForm`].
#[derive(Debug)]
enum Text {
    Plain(Bytes),
    Packed(PackedJson),
}

/// An object's labels, sorted by key, in two boxed strings each.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Labels(Box<[(Box<str>, Box<str>)]>);

impl Labels {
    /// From a `metadata.labels` object (non-string values are ignored).
    pub fn from_map(m: Option<&Map<String, Value>>) -> Self {
        let mut v: Vec<(Box<str>, Box<str>)> = m
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
            .collect();
        v.sort();
        Self(v.into_boxed_slice())
    }

    /// The value of one label.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    /// Whether a label selector matches.
    pub fn matches(&self, sel: &apimachinery::selector::LabelSelector) -> bool {
        sel.matches_with(|k| self.get(k))
    }

    /// Whether every `key: value` of a map selector (Service `spec.selector`) is present.
    pub fn has_all(&self, selector: &Map<String, Value>) -> bool {
        selector
            .iter()
            .all(|(k, v)| v.as_str().is_some_and(|v| self.get(k) == Some(v)))
    }
}

/// Kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created (or first seen).
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to one object.
#[derive(Debug)]
pub struct CacheEvent {
    /// Its revision.
    pub rv: Revision,
    /// Added, modified or deleted.
    pub kind: EventType,
    /// The object after the change (for deletes, the last state).
    pub obj: Arc<Cached>,
    /// The object before the change.
    pub prev: Option<Arc<Cached>>,
    /// When the cache applied it; the history drops events older than its window.
    at: Instant,
}

impl CacheEvent {
    /// The JSON watch frame.
    pub fn frame(&self) -> Bytes {
        self.obj.frame_as(self.kind)
    }
}

/// `{"type":"T","object":`, the part of a watch frame before the object.
fn frame_head(kind: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
}

/// `}\n`, the part of a watch frame after the object.
const FRAME_TAIL: &[u8] = b"}\n";

/// `{"type":T,"object":OBJ}\n`.
pub fn watch_frame(kind: &str, obj: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(obj.len() + 32);
    frame_head(kind, &mut out);
    out.extend_from_slice(obj);
    out.extend_from_slice(FRAME_TAIL);
    Bytes::from(out)
}

struct ResourceState {
    objects: BTreeMap<Arc<str>, Arc<Cached>>,
    history: VecDeque<Arc<CacheEvent>>,
    /// Every event after this revision is in `history`.
    horizon: Revision,
    /// Created on the first watch: a fleet of simulated servers has many resources nobody
    /// watches, and each channel preallocates its whole ring.
    tx: Option<broadcast::Sender<Arc<CacheEvent>>>,
    broadcast_capacity: usize,
}

impl ResourceState {
    /// Drops the oldest events beyond `bounds`, moving the horizon past them.
    fn trim(&mut self, bounds: HistoryBounds, now: Instant) {
        while let Some(front) = self.history.front() {
            let len = self.history.len();
            let over = len > bounds.max_events;
            let stale =
                len > HISTORY_MIN && now.saturating_duration_since(front.at) > bounds.window;
            if !(over || stale) {
                break;
            }
            self.horizon = front.rv;
            self.history.pop_front();
        }
    }

    fn sender(&mut self) -> &broadcast::Sender<Arc<CacheEvent>> {
        let cap = self.broadcast_capacity;
        self.tx.get_or_insert_with(|| broadcast::channel(cap).0)
    }
}

/// The cache of one resource.
pub struct ResourceCache {
    state: RwLock<ResourceState>,
    /// Packs its objects' text against one dictionary ([`TextForm::Packed`]); `None` for
    /// [`TextForm::Plain`].
    packer: Option<Packer>,
}

/// What a watcher starts with: events to replay, then a live receiver.
pub struct Subscription {
    /// Events after the requested revision, already in the cache.
    pub backlog: Vec<Arc<CacheEvent>>,
    /// Live events (may repeat the backlog's last revisions: skip those `<=` it).
    pub live: broadcast::Receiver<Arc<CacheEvent>>,
    /// The cache's revision when the subscription was made.
    pub revision: Revision,
}

/// Errors starting a watch.
#[derive(Debug, thiserror::Error)]
pub enum WatchStartError {
    /// The revision is older than the history kept.
    #[error("too old resource version: {requested} ({horizon})")]
    TooOld {
        /// Requested revision.
        requested: Revision,
        /// Oldest revision one can resume from.
        horizon: Revision,
    },
}

/// A page of a list.
pub struct Page {
    /// Matching objects in key order.
    pub items: Vec<Arc<Cached>>,
    /// Revision the page was read at.
    pub revision: Revision,
    /// Key to continue after, when `limit` cut the list.
    pub next: Option<Arc<str>>,
    /// How many matching objects remain after this page (when cut).
    pub remaining: usize,
}

/// Signals for the in-server controllers (garbage collector, namespace deleter).
#[derive(Default)]
pub struct Signals {
    /// Owner uids whose dependents need a look.
    pub owners: Mutex<HashSet<String>>,
    /// Namespaces whose deletion needs a look.
    pub namespaces: Mutex<HashSet<String>>,
    /// Woken whenever either set gains an entry.
    pub notify: Notify,
}

/// Indexes the garbage collector uses: live uids and dependents by owner uid.
#[derive(Default)]
pub struct OwnerIndex {
    /// uid -> key of every live object.
    pub uids: HashMap<Box<str>, Arc<str>>,
    /// owner uid -> keys of objects naming it.
    pub dependents: HashMap<Box<str>, HashSet<Arc<str>>>,
}

/// How much history each resource keeps for watches that resume from a resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBounds {
    /// The most events kept (at least one).
    pub max_events: usize,
    /// Events older than this are dropped, down to [`HISTORY_MIN`].
    pub window: Duration,
}

impl HistoryBounds {
    /// At most `max_events` events, none older than [`HISTORY_WINDOW`] beyond [`HISTORY_MIN`].
    pub fn new(max_events: usize) -> Self {
        Self {
            max_events: max_events.max(1),
            window: HISTORY_WINDOW,
        }
    }
}

/// The registry a cache serves and one cache per resource prefix.
struct Served {
    registry: Arc<Registry>,
    resources: Arc<HashMap<String, Arc<ResourceCache>>>,
}

/// An empty cache for `def`, complete after revision `horizon`.
fn new_resource(
    def: &ResourceDef,
    horizon: Revision,
    broadcast_capacity: usize,
    form: TextForm,
) -> Arc<ResourceCache> {
    Arc::new(ResourceCache {
        state: RwLock::new(ResourceState {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            horizon,
            tx: None,
            broadcast_capacity,
        }),
        packer: (form == TextForm::Packed).then(|| Packer::for_kind(def.kind)),
    })
}

/// The cache of every resource.
pub struct Cache {
    /// The served kinds and their caches, replaced together when custom resources come
    /// and go (read on every request: a lock held for a pointer copy).
    served: RwLock<Served>,
    /// How new resources' caches are made.
    broadcast_capacity: usize,
    form: TextForm,
    revision: watch::Sender<Revision>,
    /// Ownership indexes for garbage collection.
    pub owners: Mutex<OwnerIndex>,
    /// Work signals for the in-server controllers.
    pub signals: Signals,
    history: HistoryBounds,
}

/// The cached form of a stored value at revision `rv`: its text packed by `packer`, or
/// plain without one.
fn to_cached(
    def: &ResourceDef,
    kv: &KeyValue,
    rv: Revision,
    packer: Option<&Packer>,
) -> Option<Arc<Cached>> {
    // Field selectors may read any top-level member; only those are parsed.
    let read = |member: &str| {
        def.field_selectors
            .iter()
            .any(|(_, ptr)| stored_text::top_member(ptr) == member)
    };
    let (mut text, v) = match stored_text::prepare(&kv.value, rv, read) {
        Some(p) => (p.text, p.partial),
        None => {
            let mut v: Value = match serde_json::from_slice(&kv.value) {
                Ok(v) => v,
                Err(e) => {
                    tracing::error!(key = %kv.key, error = %e, "stored value is not JSON; skipped");
                    return None;
                }
            };
            object::set_resource_version(&mut v, rv);
            // Room for the resourceVersion the stored bytes lack, so the buffer rarely regrows.
            let mut text = Vec::with_capacity(kv.value.len() + 32);
            serde_json::to_writer(&mut text, &v).ok()?;
            (text, v)
        }
    };
    let meta = object::meta(&v);
    let json = match packer {
        Some(p) => Text::Packed(p.pack(&text)),
        None => {
            // Held for a while (in the history too): no slack from the growth above.
            text.shrink_to_fit();
            Text::Plain(Bytes::from(text))
        }
    };
    Some(Arc::new(Cached {
        key: kv.key.clone(),
        uid: object::uid(&v).into(),
        rv,
        json,
        deleting: object::is_deleting(&v),
        labels: Labels::from_map(meta.get("labels").and_then(Value::as_object)),
        owners: object::owner_uids(&v)
            .into_iter()
            .map(String::into_boxed_str)
            .collect(),
        fields: def
            .field_selectors
            .iter()
            .map(|(_, ptr)| field_string(v.at(ptr)).into_boxed_str())
            .collect(),
        field_names: def.field_selectors,
    }))
}

/// A field's value as a field selector compares it (absent is empty).
fn field_string(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Trims every history a few times per window, until the cache is dropped.
async fn trim_periodically(cache: Weak<Cache>) {
    let Some(period) = cache
        .upgrade()
        .map(|c| (c.history.window / 8).max(Duration::from_secs(1)))
    else {
        return;
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(cache) = cache.upgrade() else {
            return;
        };
        cache.trim_histories();
    }
}

impl Cache {
    /// Loads every object from the store and starts following its changes.
    pub async fn start(
        registry: Registry,
        store: Arc<dyn Storage>,
        history: HistoryBounds,
        broadcast_capacity: usize,
        form: TextForm,
    ) -> Result<Arc<Self>, StoreError> {
        let list = store.list("/").await?;
        let mut resources = HashMap::new();
        for def in registry.all() {
            resources
                .entry(def.prefix())
                .or_insert_with(|| new_resource(def, list.revision, broadcast_capacity, form));
        }
        let cache = Arc::new(Self {
            served: RwLock::new(Served {
                registry: Arc::new(registry),
                resources: Arc::new(resources),
            }),
            broadcast_capacity,
            form,
            revision: watch::channel(list.revision).0,
            owners: Mutex::new(OwnerIndex::default()),
            signals: Signals::default(),
            history: HistoryBounds {
                max_events: history.max_events.max(1),
                ..history
            },
        });
        for kv in &list.items {
            let Some((def, rc)) = cache.resource_for_key(&kv.key) else {
                continue;
            };
            if let Some(c) = to_cached(&def, kv, kv.mod_revision, rc.packer.as_ref()) {
                cache.index_put(&c, None);
                rc.state
                    .write()
                    .expect("cache lock")
                    .objects
                    .insert(c.key.clone(), c);
            }
        }
        // Orphans left by a crash between an owner's delete and its dependents' deletes.
        {
            let idx = cache.owners.lock().expect("owner index");
            let missing: Vec<String> = idx
                .dependents
                .keys()
                .filter(|u| !idx.uids.contains_key(*u))
                .map(|u| u.to_string())
                .collect();
            drop(idx);
            cache.signal_owners(missing);
        }
        let follower = cache.clone();
        tokio::spawn(async move { follower.follow(store, list.revision).await });
        tokio::spawn(trim_periodically(Arc::downgrade(&cache)));
        Ok(cache)
    }

    fn resource_for_key(&self, key: &str) -> Option<(Arc<ResourceDef>, Arc<ResourceCache>)> {
        let served = self.served.read().expect("cache registry");
        let def = served.registry.for_key(key)?.clone();
        let rc = served.resources.get(&def.prefix())?.clone();
        Some((def, rc))
    }

    /// The cache of one resource. A resource no longer served (its custom resource
    /// definition deleted while a request held it) reads as empty.
    pub fn resource(&self, def: &ResourceDef) -> Arc<ResourceCache> {
        let prefix = def.prefix();
        let served = self.served.read().expect("cache registry");
        match served.resources.get(&prefix) {
            Some(rc) => rc.clone(),
            None => {
                drop(served);
                new_resource(def, self.revision(), 1, TextForm::Plain)
            }
        }
    }

    fn resources(&self) -> Arc<HashMap<String, Arc<ResourceCache>>> {
        self.served
            .read()
            .expect("cache registry")
            .resources
            .clone()
    }

    /// Serves `registry` from now on: resources new to it start empty and complete from
    /// the current revision (nothing of theirs can be stored before they are served),
    /// resources it lacks are dropped with their watchers.
    pub fn set_registry(&self, registry: Arc<Registry>) {
        let mut served = self.served.write().expect("cache registry");
        let horizon = self.revision();
        let mut resources = HashMap::new();
        for def in registry.all() {
            let prefix = def.prefix();
            if resources.contains_key(&prefix) {
                continue;
            }
            let rc =
                served.resources.get(&prefix).cloned().unwrap_or_else(|| {
                    new_resource(def, horizon, self.broadcast_capacity, self.form)
                });
            resources.insert(prefix, rc);
        }
        *served = Served {
            registry,
            resources: Arc::new(resources),
        };
    }

    /// The revision the cache has caught up to.
    pub fn revision(&self) -> Revision {
        *self.revision.borrow()
    }

    /// Waits until the cache has applied every write up to `rev` (bounded by `timeout`).
    pub async fn wait_for(&self, rev: Revision, timeout: Duration) -> bool {
        let mut rx = self.revision.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|r| *r >= rev))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    async fn follow(self: Arc<Self>, store: Arc<dyn Storage>, mut from: Revision) {
        let mut backoff = Duration::from_millis(50);
        loop {
            match store.watch("/", from).await {
                Ok(mut stream) => {
                    while let Some(ev) = stream.next().await {
                        match ev {
                            Ok(ev) => {
                                backoff = Duration::from_millis(50);
                                from = ev.revision();
                                self.apply(&ev);
                            }
                            Err(StoreError::Closed) => return,
                            Err(e) => {
                                tracing::warn!(error = %e, "store watch ended; resuming");
                                break;
                            }
                        }
                    }
                }
                Err(StoreError::Closed) => return,
                Err(StoreError::Compacted { .. }) => {
                    tracing::error!(from, "store history compacted under the cache; reloading");
                    match self.reload(&*store).await {
                        Ok(rev) => from = rev,
                        Err(e) => tracing::error!(error = %e, "reload failed"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "store watch failed; retrying"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    /// Replaces every resource's contents with a fresh store listing, emitting the differences.
    async fn reload(&self, store: &dyn Storage) -> Result<Revision, StoreError> {
        let list = store.list("/").await?;
        let fresh: HashMap<&str, &KeyValue> = list.items.iter().map(|kv| (&*kv.key, kv)).collect();
        // Deletions for keys that vanished, puts for everything else.
        for rc in self.resources().values() {
            let gone: Vec<Arc<Cached>> = {
                let st = rc.state.read().expect("cache lock");
                st.objects
                    .values()
                    .filter(|c| !fresh.contains_key(&*c.key))
                    .cloned()
                    .collect()
            };
            for c in gone {
                let kv = KeyValue {
                    key: c.key.clone(),
                    value: c.json(),
                    create_revision: 0,
                    mod_revision: list.revision,
                };
                self.apply(&StoreEvent {
                    kind: EventKind::Delete,
                    kv,
                    prev: None,
                });
            }
        }
        for kv in &list.items {
            self.apply(&StoreEvent {
                kind: EventKind::Put,
                kv: kv.clone(),
                prev: None,
            });
        }
        self.revision.send_replace(list.revision);
        Ok(list.revision)
    }

    fn apply(&self, ev: &StoreEvent) {
        let rev = ev.revision();
        if let Some((def, rc)) = self.resource_for_key(&ev.kv.key) {
            // Only this task (the store follower) changes `objects`, so the type decided
            // here still holds when the write lock is taken below.
            let kind = match ev.kind {
                EventKind::Delete => EventType::Deleted,
                EventKind::Put
                    if rc
                        .state
                        .read()
                        .expect("cache lock")
                        .objects
                        .contains_key(&*ev.kv.key) =>
                {
                    EventType::Modified
                }
                EventKind::Put => EventType::Added,
            };
            if let Some(obj) = to_cached(&def, &ev.kv, rev, rc.packer.as_ref()) {
                self.record(&rc, kind, obj, rev);
            }
        }
        self.revision.send_replace(rev);
    }

    /// Stores one change of `rc`, appends it to the history and hands it to the watchers.
    fn record(&self, rc: &ResourceCache, kind: EventType, obj: Arc<Cached>, rev: Revision) {
        let mut st = rc.state.write().expect("cache lock");
        let prev = match kind {
            EventType::Deleted => st.objects.remove(&obj.key),
            EventType::Added | EventType::Modified => {
                st.objects.insert(obj.key.clone(), obj.clone())
            }
        };
        let event = Arc::new(CacheEvent {
            rv: rev,
            kind,
            obj: obj.clone(),
            prev: prev.clone(),
            at: Instant::now(),
        });
        st.history.push_back(event.clone());
        st.trim(self.history, Instant::now());
        if let Some(tx) = &st.tx {
            let _ = tx.send(event);
        }
        drop(st);
        match kind {
            EventType::Deleted => self.index_delete(&obj),
            _ => self.index_put(&obj, prev.as_deref()),
        }
        if kind == EventType::Deleted && !obj.namespace().is_empty() {
            self.signal_namespace(obj.namespace());
        }
    }

    /// Drops history events past the window of every resource, including the ones no write
    /// touched lately (their trimming would otherwise wait for their next change).
    pub fn trim_histories(&self) {
        let now = Instant::now();
        for rc in self.resources().values() {
            rc.state
                .write()
                .expect("cache lock")
                .trim(self.history, now);
        }
    }

    fn index_put(&self, obj: &Arc<Cached>, prev: Option<&Cached>) {
        let mut idx = self.owners.lock().expect("owner index");
        if !obj.uid.is_empty() {
            idx.uids.insert(obj.uid.clone(), obj.key.clone());
        }
        if let Some(p) = prev {
            for o in &p.owners {
                if let Some(set) = idx.dependents.get_mut(&**o) {
                    set.remove(&p.key);
                    if set.is_empty() {
                        idx.dependents.remove(&**o);
                    }
                }
            }
        }
        let mut missing = Vec::new();
        for o in &obj.owners {
            idx.dependents
                .entry(o.clone())
                .or_default()
                .insert(obj.key.clone());
            if !idx.uids.contains_key(&**o) {
                missing.push(o.to_string());
            }
        }
        drop(idx);
        // Owners that are deleting (orphan/foreground) or gone need the collector.
        if obj.deleting {
            missing.push(obj.uid.to_string());
        }
        self.signal_owners(missing);
    }

    fn index_delete(&self, obj: &Cached) {
        let mut idx = self.owners.lock().expect("owner index");
        if idx.uids.get(&*obj.uid).is_some_and(|k| *k == obj.key) {
            idx.uids.remove(&*obj.uid);
        }
        for o in &obj.owners {
            if let Some(set) = idx.dependents.get_mut(&**o) {
                set.remove(&obj.key);
                if set.is_empty() {
                    idx.dependents.remove(&**o);
                }
            }
        }
        let has_dependents = idx.dependents.contains_key(&*obj.uid);
        drop(idx);
        if has_dependents {
            self.signal_owners(vec![obj.uid.to_string()]);
        }
        // A deleted dependent may unblock a foreground-deleting owner.
        self.signal_owners(obj.owners.iter().map(|o| o.to_string()).collect());
    }

    /// Asks the garbage collector to look at these owner uids.
    pub fn signal_owners(&self, uids: Vec<String>) {
        let uids: Vec<String> = uids.into_iter().filter(|u| !u.is_empty()).collect();
        if uids.is_empty() {
            return;
        }
        self.signals.owners.lock().expect("signals").extend(uids);
        self.signals.notify.notify_one();
    }

    /// Asks the namespace controller to look at a namespace.
    pub fn signal_namespace(&self, ns: &str) {
        self.signals
            .namespaces
            .lock()
            .expect("signals")
            .insert(ns.to_string());
        self.signals.notify.notify_one();
    }

    /// The registry this cache serves now.
    pub fn registry(&self) -> Arc<Registry> {
        self.served.read().expect("cache registry").registry.clone()
    }
}

impl ResourceCache {
    /// One object.
    pub fn get(&self, key: &str) -> Option<Arc<Cached>> {
        self.state
            .read()
            .expect("cache lock")
            .objects
            .get(key)
            .cloned()
    }

    /// Objects under `prefix` matching `filter`, starting after `after`, at most `limit`.
    pub fn list(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: Option<usize>,
        revision: Revision,
        filter: impl Fn(&Cached) -> bool,
    ) -> Page {
        use std::ops::Bound;
        let st = self.state.read().expect("cache lock");
        let start: Bound<&str> = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Included(prefix),
        };
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0;
        for (k, c) in st
            .objects
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            if !filter(c) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                if next.is_none() {
                    next = items.last().map(|c: &Arc<Cached>| c.key.clone());
                }
                remaining += 1;
                continue;
            }
            let _ = k;
            items.push(c.clone());
        }
        Page {
            items,
            revision,
            next,
            remaining,
        }
    }

    /// Starts a watch after `rev`: the events already past it, then the live stream.
    pub fn subscribe(&self, rev: Revision) -> Result<Subscription, WatchStartError> {
        let mut st = self.state.write().expect("cache lock");
        if rev < st.horizon {
            return Err(WatchStartError::TooOld {
                requested: rev,
                horizon: st.horizon,
            });
        }
        let live = st.sender().subscribe();
        let start = st.history.partition_point(|e| e.rv <= rev);
        let backlog = st.history.iter().skip(start).cloned().collect();
        Ok(Subscription {
            backlog,
            live,
            revision: st.history.back().map_or(st.horizon, |e| e.rv),
        })
    }

    /// Every object now, and a live receiver positioned right after them.
    pub fn snapshot_and_subscribe(&self) -> (Vec<Arc<Cached>>, Subscription) {
        let mut st = self.state.write().expect("cache lock");
        let live = st.sender().subscribe();
        let objects = st.objects.values().cloned().collect();
        let revision = st.history.back().map_or(st.horizon, |e| e.rv);
        (
            objects,
            Subscription {
                backlog: Vec::new(),
                live,
                revision,
            },
        )
    }

    /// Number of objects held.
    pub fn len(&self) -> usize {
        self.state.read().expect("cache lock").objects.len()
    }

    /// Whether no object is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;

//! A watch-fed cache that keeps, per object, only what a controller derives from it. A
//! kube reflector store holds each object whole, and a k8s-openapi object costs kilobytes
//! inline however much of it was trimmed (a `Deployment` carries its whole `PodSpec`
//! layout); at 10,000 federated workloads that is most of a controller's memory. A cache
//! may also index what it keeps by tags ([`SlimCache::with_tags`]), to find objects
//! without a scan of their namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use futures::stream::{BoxStream, StreamExt};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use meridian_runtime::lean::{self, Lean};
use tokio::sync::watch;

use crate::name_index::NameIndex;

/// Ordered by (namespace, name): one namespace's objects are one range.
type Map<V> = BTreeMap<(String, String), Arc<V>>;

/// Whether a watch-fed cache has completed its first list; clones share it.
#[derive(Clone)]
pub struct Ready(watch::Sender<bool>);

impl Default for Ready {
    fn default() -> Self {
        Self(watch::Sender::new(false))
    }
}

impl Ready {
    /// Marks the first list complete.
    pub fn set(&self) {
        self.0.send_replace(true);
    }

    /// Whether the first list has completed.
    pub fn is_ready(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits for the first list to complete.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = rx.wait_for(|r| *r).await;
    }
}

/// What a cache keeps of an object (`None`: nothing, it is not of interest).
type Derive<K, V> = Arc<dyn Fn(&K) -> Option<V> + Send + Sync>;

/// What the tags of a value are.
type TagsOf<V> = Box<dyn Fn(&V) -> Vec<String> + Send + Sync>;

/// The tags [`SlimCache::tagged`] finds a kept value by.
struct Tagging<V> {
    of: TagsOf<V>,
    /// Whether two values are equal (so are their tags): most events change nothing a
    /// tag is made of (a workload's status), and cost no tags then.
    same: fn(&V, &V) -> bool,
}

type Tags<V> = Arc<Tagging<V>>;

/// (namespace, tag) → the names of the objects of that namespace holding the tag.
type Index = NameIndex<(String, String)>;

struct Inner<V> {
    values: Map<V>,
    /// Values of a relist in progress; they replace `values` when it completes.
    relist: Option<Map<V>>,
    /// The tags of `values` (empty in a cache without tags).
    index: Index,
}

impl<V> Inner<V> {
    /// Keeps `v` as `k`'s value; returns the one before.
    fn insert(&mut self, tags: Option<&Tags<V>>, k: (String, String), v: Arc<V>) -> Option<Arc<V>> {
        let previous = self.values.insert(k.clone(), v.clone());
        if let Some(tags) = tags {
            if let Some(p) = &previous {
                if (tags.same)(p, &v) {
                    return previous;
                }
                unindex(&mut self.index, (tags.of)(p), &k);
            }
            index(&mut self.index, (tags.of)(&v), &k);
        }
        previous
    }

    /// Drops `k`'s value; returns it.
    fn remove(&mut self, tags: Option<&Tags<V>>, k: &(String, String)) -> Option<Arc<V>> {
        let previous = self.values.remove(k);
        if let (Some(tags), Some(p)) = (tags, &previous) {
            unindex(&mut self.index, (tags.of)(p), k);
        }
        previous
    }

    /// Replaces every value with `values` (a relist's).
    fn replace(&mut self, tags: Option<&Tags<V>>, values: Map<V>) {
        self.index.clear();
        if let Some(tags) = tags {
            for (k, v) in &values {
                index(&mut self.index, (tags.of)(v), k);
            }
        }
        self.values = values;
    }
}

/// Files `namespace/name` under each of `tags`.
fn index(index: &mut Index, tags: Vec<String>, (namespace, name): &(String, String)) {
    for t in tags {
        index.add(&(namespace.clone(), t), name);
    }
}

/// Takes `namespace/name` out from under each of `tags`.
fn unindex(index: &mut Index, tags: Vec<String>, (namespace, name): &(String, String)) {
    for t in tags {
        index.remove(&(namespace.clone(), t), name);
    }
}

/// The cache, keyed by (namespace, name); clones share it.
pub struct SlimCache<K, V> {
    inner: Arc<RwLock<Inner<V>>>,
    ready: Ready,
    derive: Derive<K, V>,
    tags: Option<Tags<V>>,
}

impl<K, V> Clone for SlimCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            ready: self.ready.clone(),
            derive: self.derive.clone(),
            tags: self.tags.clone(),
        }
    }
}

/// A watcher event and what the cache kept of its object before it.
pub type WithPrevious<K, V> = (Event<K>, Option<Arc<V>>);

fn key<K: Resource>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

impl<K: Resource, V> SlimCache<K, V> {
    /// An empty cache keeping `derive(object)` of each object.
    pub fn new(derive: impl Fn(&K) -> Option<V> + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                values: BTreeMap::new(),
                relist: None,
                index: Index::default(),
            })),
            ready: Ready::default(),
            derive: Arc::new(derive),
            tags: None,
        }
    }

    /// [`Self::new`], with what is kept of each object indexed by `tags` of it.
    pub fn with_tags(
        derive: impl Fn(&K) -> Option<V> + Send + Sync + 'static,
        tags: impl Fn(&V) -> Vec<String> + Send + Sync + 'static,
    ) -> Self
    where
        V: PartialEq,
    {
        Self {
            tags: Some(Arc::new(Tagging {
                of: Box::new(tags),
                same: V::eq,
            })),
            ..Self::new(derive)
        }
    }

    /// Applies one watcher event; returns what was kept of an applied, listed or deleted
    /// object before it. A (re)list's objects show as they come; the ones it no longer
    /// has go when it ends.
    pub fn apply(&self, event: &Event<K>) -> Option<Arc<V>> {
        // Derive outside the lock.
        let derived = match event {
            Event::Apply(o) | Event::InitApply(o) => (self.derive)(o).map(Arc::new),
            _ => None,
        };
        let tags = self.tags.as_ref();
        let mut g = meridian_runtime::sync::write(&self.inner);
        match (event, derived) {
            (Event::Apply(o), Some(v)) => g.insert(tags, key(o), v),
            (Event::Apply(o) | Event::Delete(o), _) => g.remove(tags, &key(o)),
            (Event::Init, _) => {
                g.relist = Some(Map::new());
                None
            }
            // A listed object shows at once, not only when the list ends: its event goes on
            // to consumers now, and one that looks then must find it (a custom kind's watch
            // starts mid-flight; nothing tells its objects again at the list's end).
            (Event::InitApply(o), Some(v)) => {
                let k = key(o);
                g.relist
                    .get_or_insert_with(Map::new)
                    .insert(k.clone(), v.clone());
                g.insert(tags, k, v)
            }
            (Event::InitApply(o), None) => g.remove(tags, &key(o)),
            (Event::InitDone, _) => {
                if let Some(m) = g.relist.take() {
                    g.replace(tags, m);
                }
                drop(g);
                self.ready.set();
                None
            }
        }
    }

    /// What is kept of `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<V>> {
        meridian_runtime::sync::read(&self.inner)
            .values
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// What is kept of each object in `namespace` that `keep` accepts, as (name, value), in
    /// name order. Only that namespace is visited, and only what is kept is copied.
    pub fn in_namespace(
        &self,
        namespace: &str,
        keep: impl Fn(&V) -> bool,
    ) -> Vec<(String, Arc<V>)> {
        meridian_runtime::sync::read(&self.inner)
            .values
            .range((namespace.to_string(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .filter(|(_, v)| keep(v))
            .map(|((_, name), v)| (name.clone(), v.clone()))
            .collect()
    }

    /// [`Self::in_namespace`], of the objects holding every one of `tags`: found by the
    /// index (the fewest holders of one tag), not by a scan of the namespace. Only for a
    /// cache made [`Self::with_tags`]; no tags is every object.
    pub fn tagged(
        &self,
        namespace: &str,
        tags: &[String],
        keep: impl Fn(&V) -> bool,
    ) -> Vec<(String, Arc<V>)> {
        debug_assert!(self.tags.is_some(), "a cache without tags has no index");
        if tags.is_empty() {
            return self.in_namespace(namespace, keep);
        }
        let g = meridian_runtime::sync::read(&self.inner);
        let holders: Vec<Option<&BTreeSet<String>>> = tags
            .iter()
            .map(|t| g.index.get(&(namespace.to_string(), t.clone())))
            .collect();
        let Some(holders) = holders.into_iter().collect::<Option<Vec<_>>>() else {
            return Vec::new();
        };
        let Some(fewest) = holders.iter().min_by_key(|h| h.len()) else {
            return Vec::new();
        };
        fewest
            .iter()
            .filter(|n| holders.iter().all(|h| h.contains(*n)))
            .filter_map(|n| {
                let v = g.values.get(&(namespace.to_string(), n.clone()))?;
                keep(v).then(|| (n.clone(), v.clone()))
            })
            .collect()
    }

    /// A watch of every object of `api` that feeds this cache as its events pass (decoded
    /// without their managedFields: nothing derived reads them).
    pub fn watch(&self, api: Api<Lean<K>>) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
    where
        K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
        V: Send + Sync + 'static,
    {
        self.watch_with_previous(api)
            .map(|r| r.map(|(e, _)| e))
            .boxed()
    }

    /// Like [`Self::watch`], each event with what the cache kept of the object before it
    /// (so a consumer sees what changed: the labels a workload had and has now).
    pub fn watch_with_previous(
        &self,
        api: Api<Lean<K>>,
    ) -> BoxStream<'static, Result<WithPrevious<K, V>, watcher::Error>>
    where
        K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
        V: Send + Sync + 'static,
    {
        let cache = self.clone();
        watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .map(move |e| {
                e.map(|e| {
                    let e = lean::unwrap(e);
                    let previous = cache.apply(&e);
                    (e, previous)
                })
            })
            .boxed()
    }

    /// Whether the first list has completed, and a wait for it.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn cm(ns: &str, name: &str, v: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "data": {"v": v}
        }))
        .unwrap()
    }

    /// Keeps `data.v`, and nothing of objects whose `v` is "skip".
    fn cache() -> SlimCache<ConfigMap, String> {
        SlimCache::new(|c: &ConfigMap| {
            let v = c.data.as_ref()?.get("v")?.clone();
            (v != "skip").then_some(v)
        })
    }

    #[test]
    fn follows_events_and_keeps_only_what_is_derived() {
        let c = cache();
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(cm("a", "x", "1")));
        c.apply(&Event::InitApply(cm("a", "s", "skip")));
        assert!(!c.ready().is_ready());
        assert_eq!(
            c.get("a", "x").as_deref().map(String::as_str),
            Some("1"),
            "a listed object shows as its event passes"
        );
        c.apply(&Event::InitDone);
        assert!(c.ready().is_ready());
        assert_eq!(c.get("a", "x").as_deref().map(String::as_str), Some("1"));
        assert!(c.get("a", "s").is_none(), "not of interest");
        c.apply(&Event::Apply(cm("b", "y", "2")));
        c.apply(&Event::Apply(cm("a", "x", "3")));
        c.apply(&Event::Apply(cm("a", "w", "5")));
        c.apply(&Event::Apply(cm("ab", "v", "6")));
        let a = c.in_namespace("a", |_| true);
        let a: Vec<(&str, &str)> = a.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(
            a,
            [("w", "5"), ("x", "3")],
            "that namespace only, in name order"
        );
        let kept = c.in_namespace("a", |v| v == "3");
        assert_eq!(kept.len(), 1, "only what `keep` accepts");
        c.apply(&Event::Delete(cm("a", "w", "5")));
        // An object that stops being of interest is dropped; so is a deleted one.
        c.apply(&Event::Apply(cm("a", "x", "skip")));
        assert!(c.get("a", "x").is_none());
        c.apply(&Event::Delete(cm("b", "y", "2")));
        assert!(c.get("b", "y").is_none());
        // A relist drops what it no longer lists when it ends, and gives what it lists at
        // once, with what was kept of it before.
        c.apply(&Event::Apply(cm("a", "z", "4")));
        c.apply(&Event::Apply(cm("a", "q", "3")));
        c.apply(&Event::Init);
        let before = c.apply(&Event::InitApply(cm("a", "q", "7")));
        assert_eq!(before.as_deref().map(String::as_str), Some("3"));
        assert_eq!(c.get("a", "q").as_deref().map(String::as_str), Some("7"));
        assert!(c.get("a", "z").is_some(), "not gone before the list ends");
        c.apply(&Event::InitDone);
        assert!(c.get("a", "z").is_none());
        assert_eq!(c.get("a", "q").as_deref().map(String::as_str), Some("7"));
    }

    /// Keeps `data.v`, tagged by each comma-separated part of it.
    fn tagged_cache() -> SlimCache<ConfigMap, String> {
        SlimCache::with_tags(
            |c: &ConfigMap| c.data.as_ref()?.get("v").cloned(),
            |v: &String| v.split(',').map(String::from).collect(),
        )
    }

    fn found(c: &SlimCache<ConfigMap, String>, ns: &str, tags: &[&str]) -> Vec<String> {
        let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        c.tagged(ns, &tags, |_| true)
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn tags_find_objects_as_they_change() {
        let c = tagged_cache();
        c.apply(&Event::Apply(cm("a", "x", "web,blue")));
        c.apply(&Event::Apply(cm("a", "y", "web,green")));
        c.apply(&Event::Apply(cm("b", "z", "web,blue")));
        assert_eq!(found(&c, "a", &["web"]), ["x", "y"], "in name order");
        assert_eq!(found(&c, "a", &["web", "blue"]), ["x"], "every tag held");
        assert_eq!(found(&c, "a", &["blue", "green"]), Vec::<String>::new());
        assert_eq!(found(&c, "b", &["blue"]), ["z"], "that namespace only");
        assert_eq!(found(&c, "a", &[]), ["x", "y"], "no tags: every object");
        let kept = c.tagged("a", &["web".to_string()], |v| v.contains("green"));
        assert_eq!(kept.len(), 1, "only what `keep` accepts");
        // A changed value is found by its new tags only; a deleted one by none.
        c.apply(&Event::Apply(cm("a", "x", "web,green")));
        assert_eq!(found(&c, "a", &["blue"]), Vec::<String>::new());
        assert_eq!(found(&c, "a", &["green"]), ["x", "y"]);
        c.apply(&Event::Apply(cm("a", "x", "web,green")));
        assert_eq!(
            found(&c, "a", &["green"]),
            ["x", "y"],
            "an equal value keeps its tags"
        );
        c.apply(&Event::Delete(cm("a", "y", "web,green")));
        assert_eq!(found(&c, "a", &["green"]), ["x"]);
        // A relist: what it lists is found at once, what it no longer lists is not once
        // it ends, and the index holds nothing of it.
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(cm("a", "w", "web,red")));
        assert_eq!(found(&c, "a", &["red"]), ["w"]);
        c.apply(&Event::InitDone);
        assert_eq!(found(&c, "a", &["web"]), ["w"]);
        assert_eq!(found(&c, "b", &["web"]), Vec::<String>::new());
        let index = &meridian_runtime::sync::read(&c.inner).index;
        assert_eq!(index.len(), 2, "only w's tags: {index:?}");
    }
}

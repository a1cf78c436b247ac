//! A watch-fed cache that keeps, per object, only what a controller derives from it. A
//! kube reflector store holds each object whole, and a k8s-openapi object costs kilobytes
//! inline however much of it was trimmed (a `Deployment` carries its whole `PodSpec`
//! layout); at 10,000 federated workloads that is most of a controller's memory.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use futures::stream::{BoxStream, StreamExt};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use meridian_runtime::lean::{self, Lean};
use tokio::sync::watch;

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

struct Inner<V> {
    values: Map<V>,
    /// Values of a relist in progress; they replace `values` when it completes.
    relist: Option<Map<V>>,
}

/// The cache, keyed by (namespace, name); clones share it.
pub struct SlimCache<K, V> {
    inner: Arc<RwLock<Inner<V>>>,
    ready: Ready,
    derive: Derive<K, V>,
}

impl<K, V> Clone for SlimCache<K, V> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            ready: self.ready.clone(),
            derive: self.derive.clone(),
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
            })),
            ready: Ready::default(),
            derive: Arc::new(derive),
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
        let mut g = meridian_runtime::sync::write(&self.inner);
        match (event, derived) {
            (Event::Apply(o), Some(v)) => g.values.insert(key(o), v),
            (Event::Apply(o) | Event::Delete(o), _) => g.values.remove(&key(o)),
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
                g.values.insert(k, v)
            }
            (Event::InitApply(o), None) => g.values.remove(&key(o)),
            (Event::InitDone, _) => {
                if let Some(m) = g.relist.take() {
                    g.values = m;
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
}

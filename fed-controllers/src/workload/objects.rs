//! A watch-fed cache of dynamic objects that keeps each one as its JSON text plus the few
//! fields the hot paths read (ownership, dependencies), instead of a parsed tree: the
//! controller caches every federated workload and every copy it pushed, and a parsed
//! `serde_json::Value` costs about ten times its JSON size.
//!
//! It follows kube's reflector semantics: a relist (`Init` … `InitDone`) replaces the
//! contents at once, and until the first list completes the cache is not ready.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde_json::Value;
use tokio::sync::watch;

use super::compact::Compact;
use super::deps::{self, Dependencies};

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
    json: Compact,
}

impl Entry {
    /// Summarises `o`; `with_deps` also reads its pod template's references.
    pub fn new(o: &DynamicObject, with_deps: bool) -> Self {
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
        let json = serde_json::to_string(o).map(Compact::from_json);
        Self {
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
            uid: o.uid().unwrap_or_default(),
            owner_uid,
            deps,
            // A DynamicObject always encodes; null would only show as an empty object.
            json: json.unwrap_or_else(|_| Compact::from_json("null".into())),
        }
    }

    /// The whole object, parsed.
    pub fn value(&self) -> Value {
        self.json.value()
    }

    /// Whether this is Meridian's copy of the federated object with `uid`.
    pub fn owned_by(&self, uid: &str) -> bool {
        self.owner_uid.as_deref() == Some(uid)
    }
}

type Map = HashMap<(String, String), Arc<Entry>>;

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
    ready: watch::Sender<bool>,
    with_deps: bool,
}

impl ObjectCache {
    /// An empty cache; `with_deps` records each object's pod-template references.
    pub fn new(with_deps: bool) -> Self {
        Self {
            inner: Arc::default(),
            ready: watch::Sender::new(false),
            with_deps,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: &Event<DynamicObject>) {
        let key = |o: &DynamicObject| (o.namespace().unwrap_or_default(), o.name_any());
        // Summarise outside the lock: encoding is the costly part.
        let entry = match event {
            Event::Apply(o) | Event::InitApply(o) => Some(Arc::new(Entry::new(o, self.with_deps))),
            _ => None,
        };
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match (event, entry) {
            (Event::Apply(o), Some(e)) => {
                g.objects.insert(key(o), e);
            }
            (Event::Delete(o), _) => {
                g.objects.remove(&key(o));
            }
            (Event::Init, _) => g.relist = Some(Map::new()),
            (Event::InitApply(o), Some(e)) => {
                g.relist.get_or_insert_with(Map::new).insert(key(o), e);
            }
            (Event::InitDone, _) => {
                if let Some(m) = g.relist.take() {
                    g.objects = m;
                }
                drop(g);
                self.ready.send_replace(true);
            }
            _ => {}
        }
    }

    /// The object `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Entry>> {
        self.read()
            .objects
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object.
    pub fn state(&self) -> Vec<Arc<Entry>> {
        self.read().objects.values().cloned().collect()
    }

    /// Whether the first list has completed.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits for the first list to complete.
    pub async fn wait_until_ready(&self) {
        let mut rx = self.ready.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = rx.wait_for(|r| *r).await;
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
    fn relist_replaces_and_events_apply() {
        let c = ObjectCache::new(true);
        assert!(!c.is_ready());
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(obj("a", json!({}))));
        c.apply(&Event::InitApply(obj("b", json!({}))));
        assert!(
            c.get("shop", "a").is_none(),
            "visible before the list completed"
        );
        c.apply(&Event::InitDone);
        assert!(c.is_ready());
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

    #[tokio::test]
    async fn ready_after_first_list() {
        let c = ObjectCache::new(false);
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.wait_until_ready().await }
        });
        c.apply(&Event::Init);
        c.apply(&Event::InitDone);
        waiter.await.unwrap();
    }
}

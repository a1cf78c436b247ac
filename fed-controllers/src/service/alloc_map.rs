//! One allocation ConfigMap (listen ports, dedicated addresses) as the service workers share
//! it. Each read → assign → compare-and-swap write runs one at a time, and on the newest
//! copy this process knows: its own last write until the watch has caught up with it
//! ([`own_writes`]). Reading that copy needs no turn, so a Service whose allocation is
//! already there does not wait behind another's write.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{ObjectRef, Store};
use meridian_runtime::sync::lock;

use crate::fleet::own_writes;

/// An allocation ConfigMap of the system namespace: its cache and this process's last write.
pub struct AllocationMap {
    name: &'static str,
    namespace: &'static str,
    cache: Store<ConfigMap>,
    /// This process's last write, until the cache shows it.
    written: std::sync::Mutex<Option<Arc<ConfigMap>>>,
    /// Whose turn it is to write.
    turn: tokio::sync::Mutex<()>,
}

/// The map held for one read → assign → write; others wait until it is dropped.
pub struct Held<'a> {
    map: &'a AllocationMap,
    _turn: tokio::sync::MutexGuard<'a, ()>,
}

impl AllocationMap {
    /// The ConfigMap `namespace/name`, as `cache` (a watch of it) shows it.
    pub fn new(namespace: &'static str, name: &'static str, cache: Store<ConfigMap>) -> Self {
        Self {
            name,
            namespace,
            cache,
            written: std::sync::Mutex::default(),
            turn: tokio::sync::Mutex::default(),
        }
    }

    /// Holds the map until the returned guard is dropped.
    pub async fn hold(&self) -> Held<'_> {
        Held {
            map: self,
            _turn: self.turn.lock().await,
        }
    }

    /// The newest copy of the ConfigMap this process knows (`None`: it does not exist),
    /// without waiting for a turn: what a write in progress will change is not in it.
    pub fn current(&self) -> Option<Arc<ConfigMap>> {
        let cached = self
            .cache
            .get(&ObjectRef::new(self.name).within(self.namespace));
        let mut written = lock(&self.written);
        let (current, keep) = own_writes::newest(cached, written.take());
        *written = keep;
        current
    }

    /// The newest copy's data.
    pub fn data(&self) -> BTreeMap<String, String> {
        self.current()
            .and_then(|c| c.data.clone())
            .unwrap_or_default()
    }
}

impl Held<'_> {
    /// The ConfigMap's name.
    pub fn name(&self) -> &'static str {
        self.map.name
    }

    /// The newest copy of the ConfigMap this process knows (`None`: it does not exist).
    pub fn current(&mut self) -> Option<Arc<ConfigMap>> {
        self.map.current()
    }

    /// The newest copy's data.
    pub fn data(&mut self) -> BTreeMap<String, String> {
        self.map.data()
    }

    /// The server accepted this write: build on it until the cache shows it.
    pub fn wrote(&mut self, cm: ConfigMap) {
        *lock(&self.map.written) = Some(Arc::new(cm));
    }

    /// A write failed (another writer got in first, or it is not known whether it landed):
    /// start again from the cache.
    pub fn forget(&mut self) {
        *lock(&self.map.written) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(rv: &str, port: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.resource_version = Some(rv.into());
        c.data = Some(BTreeMap::from([("default.web.http".into(), port.into())]));
        c
    }

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_failed_write_falls_back_to_the_cache() {
        let (store, mut writer) = kube::runtime::reflector::store::<ConfigMap>();
        let mut cached = cm("5", "30000");
        cached.metadata.name = Some("ports".into());
        cached.metadata.namespace = Some("meridian-system".into());
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(cached));
        let map = AllocationMap::new("meridian-system", "ports", store);

        let mut held = map.hold().await;
        assert_eq!(held.data()["default.web.http"], "30000");
        held.wrote(cm("6", "30001"));
        assert!(map.turn.try_lock().is_err(), "held by one at a time");
        assert_eq!(
            map.data()["default.web.http"],
            "30001",
            "read without a turn: the newest copy"
        );
        drop(held);

        let mut held = map.hold().await;
        assert_eq!(held.data()["default.web.http"], "30001");
        held.forget();
        assert_eq!(held.data()["default.web.http"], "30000");
    }
}

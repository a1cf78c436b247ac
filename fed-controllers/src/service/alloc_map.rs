//! One allocation ConfigMap (listen ports, dedicated addresses) as the service workers share
//! it. Each Service's read → assign → compare-and-swap write runs one at a time, and on the
//! newest copy this process knows: its own last write until the watch has caught up with
//! it ([`own_writes`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::{Mutex, MutexGuard};

use crate::fleet::own_writes;

/// An allocation ConfigMap of the system namespace: its cache and this process's last write.
pub struct AllocationMap {
    name: &'static str,
    namespace: &'static str,
    cache: Store<ConfigMap>,
    written: Mutex<Option<Arc<ConfigMap>>>,
}

/// The map held for one read → assign → write; others wait until it is dropped.
pub struct Held<'a> {
    map: &'a AllocationMap,
    written: MutexGuard<'a, Option<Arc<ConfigMap>>>,
}

impl AllocationMap {
    /// The ConfigMap `namespace/name`, as `cache` (a watch of it) shows it.
    pub fn new(namespace: &'static str, name: &'static str, cache: Store<ConfigMap>) -> Self {
        Self {
            name,
            namespace,
            cache,
            written: Mutex::default(),
        }
    }

    /// Holds the map until the returned guard is dropped.
    pub async fn hold(&self) -> Held<'_> {
        Held {
            map: self,
            written: self.written.lock().await,
        }
    }
}

impl Held<'_> {
    /// The ConfigMap's name.
    pub fn name(&self) -> &'static str {
        self.map.name
    }

    /// The newest copy of the ConfigMap this process knows (`None`: it does not exist).
    pub fn current(&mut self) -> Option<Arc<ConfigMap>> {
        let cached = self
            .map
            .cache
            .get(&ObjectRef::new(self.map.name).within(self.map.namespace));
        let (current, keep) = own_writes::newest(cached, self.written.take());
        *self.written = keep;
        current
    }

    /// The newest copy's data.
    pub fn data(&mut self) -> BTreeMap<String, String> {
        self.current()
            .and_then(|c| c.data.clone())
            .unwrap_or_default()
    }

    /// The server accepted this write: build on it until the cache shows it.
    pub fn wrote(&mut self, cm: ConfigMap) {
        *self.written = Some(Arc::new(cm));
    }

    /// A write failed (another writer got in first, or it is not known whether it landed):
    /// start again from the cache.
    pub fn forget(&mut self) {
        *self.written = None;
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
        assert!(map.written.try_lock().is_err(), "held by one at a time");
        drop(held);

        let mut held = map.hold().await;
        assert_eq!(held.data()["default.web.http"], "30001");
        held.forget();
        assert_eq!(held.data()["default.web.http"], "30000");
    }
}

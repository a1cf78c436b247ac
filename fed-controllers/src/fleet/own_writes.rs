//! Reading one's own writes before the watch brings them back. A controller that writes an
//! object and looks at it again soon after (the next pass over the same Service, the next
//! Service's allocation) would read its cache one write behind: its next compare-and-swap
//! loses and waits out a retry back-off, or it writes again what it already wrote. It
//! builds on what the server answered instead, until the cache holds that version.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use kube::Resource;
use meridian_runtime::sync::lock;

/// Of the `cached` copy of an object and the copy this process last `written`, the one to
/// build on, and the written copy to keep for next time. The cache has caught up once it
/// holds the written resourceVersion; until then it is older. (Should another writer's
/// newer version reach the cache first, the next compare-and-swap on the written copy
/// fails, and the caller forgets it and starts again from the cache.)
pub fn newest<K: Resource>(
    cached: Option<Arc<K>>,
    written: Option<Arc<K>>,
) -> (Option<Arc<K>>, Option<Arc<K>>) {
    match written {
        None => (cached, None),
        Some(w) => {
            let rv = |o: &K| o.meta().resource_version.clone();
            let caught_up = cached
                .as_deref()
                .is_some_and(|c| rv(c).is_some() && rv(c) == rv(&w));
            if caught_up {
                (cached, None)
            } else {
                (Some(w.clone()), Some(w))
            }
        }
    }
}

/// This process's last write of each object by key, until the cache shows it.
pub struct OwnWrites<Key, K> {
    written: Mutex<HashMap<Key, Arc<K>>>,
}

impl<Key, K> Default for OwnWrites<Key, K> {
    fn default() -> Self {
        Self {
            written: Mutex::default(),
        }
    }
}

impl<Key: Hash + Eq + Clone, K: Resource> OwnWrites<Key, K> {
    /// The copy of `key`'s object to build on, given the `cached` one ([`newest`]).
    pub fn current(&self, key: &Key, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut written = lock(&self.written);
        let (current, keep) = newest(cached, written.remove(key));
        if let Some(w) = keep {
            written.insert(key.clone(), w);
        }
        current
    }

    /// The server accepted this write of `key`'s object. It is kept without its
    /// managedFields, as the watched copies are ([`meridian_runtime::lean`]): nothing builds
    /// on them, and an update that leaves them out keeps the server's.
    pub fn wrote(&self, key: &Key, mut object: K) {
        object.meta_mut().managed_fields = None;
        lock(&self.written).insert(key.clone(), Arc::new(object));
    }

    /// A write of `key`'s object failed, or the object is gone: the cache is the truth.
    pub fn forget(&self, key: &Key) {
        lock(&self.written).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(rv: &str, value: &str) -> Arc<ConfigMap> {
        let mut c = ConfigMap::default();
        c.metadata.resource_version = Some(rv.into());
        c.data = Some([("k".to_string(), value.to_string())].into());
        Arc::new(c)
    }

    fn value(c: &Option<Arc<ConfigMap>>) -> Option<&str> {
        c.as_ref()?.data.as_ref()?.get("k").map(String::as_str)
    }

    #[test]
    fn the_cache_is_used_when_nothing_was_written() {
        let (current, keep) = newest(Some(cm("5", "a")), None);
        assert_eq!(value(&current), Some("a"));
        assert!(keep.is_none());
        assert_eq!(newest::<ConfigMap>(None, None), (None, None));
    }

    #[test]
    fn an_own_write_counts_until_the_cache_holds_it() {
        // The cache is a write behind, or the object was just created.
        for cached in [Some(cm("5", "a")), None] {
            let (current, keep) = newest(cached, Some(cm("6", "b")));
            assert_eq!(value(&current), Some("b"));
            assert_eq!(value(&keep), Some("b"));
        }
        // The watch brought the write back.
        let (current, keep) = newest(Some(cm("6", "b")), Some(cm("6", "b")));
        assert_eq!(value(&current), Some("b"));
        assert!(keep.is_none());
    }

    #[test]
    fn writes_are_kept_per_key_until_caught_up_or_forgotten() {
        let own: OwnWrites<&str, ConfigMap> = OwnWrites::default();
        own.wrote(&"x", (*cm("6", "b")).clone());
        assert_eq!(value(&own.current(&"x", Some(cm("5", "a")))), Some("b"));
        assert_eq!(value(&own.current(&"y", Some(cm("5", "a")))), Some("a"));
        // Caught up: the entry goes, so a later cache version is read as it is.
        assert_eq!(value(&own.current(&"x", Some(cm("6", "b")))), Some("b"));
        assert_eq!(value(&own.current(&"x", Some(cm("7", "c")))), Some("c"));
        own.wrote(&"x", (*cm("8", "d")).clone());
        own.forget(&"x");
        assert_eq!(value(&own.current(&"x", Some(cm("7", "c")))), Some("c"));
    }
}

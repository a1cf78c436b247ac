//! The federation-side reflectors both controllers start, and what a watched kind must be.

use futures::TryStreamExt;
use futures::stream::{BoxStream, StreamExt};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use meridian_runtime::lean::{self, Lean};

/// A kind a reflector can watch and cache: said once here rather than at every watch.
pub trait Object:
    kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
}

impl<K> Object for K where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A federation reflector: its cache and the stream of its events (retried with the
/// default backoff), which must be polled for the cache to fill. Objects are decoded
/// without their managedFields ([`Lean`]): nothing here reads them.
pub fn reflect<K>(
    api: Api<Lean<K>>,
    cfg: watcher::Config,
) -> (
    Store<K>,
    BoxStream<'static, Result<Event<K>, watcher::Error>>,
)
where
    K: Object,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let s = watcher::watcher(api, cfg)
        .default_backoff()
        .map_ok(lean::unwrap)
        .reflect(writer)
        .boxed();
    (reader, s)
}

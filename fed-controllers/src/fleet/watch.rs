//! The federation-side reflectors both controllers start, what a watched kind must be, and
//! when a reflector's events may be acted on ([`Changes`]).

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

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

/// Tells a reflector's changed objects once its store shows them. kube's store takes a
/// (re-)list in whole at its `InitDone`: an object is not in it at its `InitApply`, so a
/// reader woken then finds nothing and, woken no more, would act as if it did not exist.
/// Applied and deleted objects are told at once; a list's objects at its end, with those
/// of the list before that it no longer has (deleted while the watch was down).
pub struct Changes<K: kube::Resource> {
    /// The store's objects when a list began, until it ends.
    before: Option<Vec<Arc<K>>>,
    /// Whether a list has ended: until then the store shows nothing.
    listed: bool,
}

impl<K> Default for Changes<K>
where
    K: kube::Resource,
{
    fn default() -> Self {
        Changes {
            before: None,
            listed: false,
        }
    }
}

impl<K> Changes<K>
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + Hash + Clone,
{
    /// Calls `changed` with each object `event` changed, as far as `store` (the reflector's,
    /// the event already applied to it) shows it now.
    pub fn on(&mut self, event: &Event<K>, store: &Store<K>, mut changed: impl FnMut(&K)) {
        match event {
            Event::Apply(o) | Event::Delete(o) => changed(o),
            Event::Init => self.before = Some(store.state()),
            Event::InitApply(_) => {}
            Event::InitDone => {
                self.listed = true;
                let now = store.state();
                let kept: HashSet<_> = now.iter().map(|o| name_of(&**o)).collect();
                now.iter().for_each(|o| changed(o));
                self.before
                    .take()
                    .unwrap_or_default()
                    .iter()
                    .filter(|o| !kept.contains(&name_of(&***o)))
                    .for_each(|o| changed(o));
            }
        }
    }

    /// Whether a list has ended, so an object missing from the store is missing.
    pub fn listed(&self) -> bool {
        self.listed
    }
}

/// An object's place in a store of one kind.
fn name_of<K: kube::Resource>(o: &K) -> (Option<String>, Option<String>) {
    (o.meta().namespace.clone(), o.meta().name.clone())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// Feeds `events` through a store and [`Changes`]: the names each event told, checking
    /// that each told object was in the store then (a deleted one, gone from it).
    fn run(events: Vec<Event<ConfigMap>>) -> Vec<Vec<String>> {
        let mut writer = reflector::store::Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let mut changes = Changes::default();
        let mut told = Vec::new();
        for ev in events {
            writer.apply_watcher_event(&ev);
            let deleted = matches!(&ev, Event::Delete(_));
            let mut names = Vec::new();
            changes.on(&ev, &store, |o| {
                let name = o.metadata.name.clone().unwrap_or_default();
                let shown = store
                    .state()
                    .iter()
                    .any(|s| s.metadata.name == o.metadata.name);
                assert_eq!(shown, !deleted, "{name} told as the store did not show it");
                names.push(name);
            });
            names.sort();
            told.push(names);
        }
        told
    }

    #[test]
    fn a_lists_objects_are_told_at_its_end_when_the_store_shows_them() {
        let told = run(vec![
            Event::Init,
            Event::InitApply(cm("a")),
            Event::InitApply(cm("b")),
            Event::InitDone,
            Event::Apply(cm("c")),
            Event::Delete(cm("a")),
        ]);
        let none: Vec<String> = Vec::new();
        assert_eq!(
            told,
            vec![
                none.clone(),
                none.clone(),
                none,
                vec!["a".to_string(), "b".to_string()],
                vec!["c".to_string()],
                vec!["a".to_string()],
            ]
        );
    }

    #[test]
    fn a_relist_also_tells_the_objects_deleted_while_the_watch_was_down() {
        let mut writer = reflector::store::Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let mut changes = Changes::default();
        assert!(!changes.listed());
        let mut told = Vec::new();
        for ev in [
            Event::Init,
            Event::InitApply(cm("a")),
            Event::InitApply(cm("b")),
            Event::InitDone,
            // The watch broke; b was deleted and c created meanwhile.
            Event::Init,
            Event::InitApply(cm("a")),
            Event::InitApply(cm("c")),
            Event::InitDone,
        ] {
            writer.apply_watcher_event(&ev);
            told.clear();
            changes.on(&ev, &store, |o| {
                told.push((
                    o.metadata.name.clone().unwrap_or_default(),
                    store
                        .state()
                        .iter()
                        .any(|s| s.metadata.name == o.metadata.name),
                ));
            });
        }
        assert!(changes.listed());
        told.sort();
        // a and c as the store shows them; b, no longer in it, so its reader removes it.
        assert_eq!(
            told,
            vec![
                ("a".to_string(), true),
                ("b".to_string(), false),
                ("c".to_string(), true)
            ]
        );
    }
}

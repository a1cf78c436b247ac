//! What the workload controller keeps of each Placement: its destinations, resourceVersion
//! and conditions, and a digest of its per-cluster status entries. Only this controller
//! writes those entries, so the digest is all it needs to tell whether they changed; at
//! 10,000 Placements (and 100 entries each when Duplicated) the entries would be most of
//! the cache.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use fed_api::Placement;
use fed_api::common::Condition;
use fed_api::placement::ClusterWorkloadStatus;
use kube::ResourceExt;
use kube::runtime::watcher::Event;
use tokio::sync::watch;

use super::kinds::WorkloadKey;

/// One Placement as the workload controller reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacementView {
    /// `metadata.resourceVersion`: status writes are pinned to it.
    pub resource_version: String,
    /// `spec.destClusters` as (cluster, replicas).
    pub dest: Vec<(String, i32)>,
    /// `status.conditions` (the scheduler's and ours).
    pub conditions: Vec<Condition>,
    /// [`entries_digest`] of `status.clusters`.
    pub clusters_digest: u64,
}

impl PlacementView {
    /// The view of a whole Placement.
    pub fn of(p: &Placement) -> Self {
        let status = p.status.as_ref();
        Self {
            resource_version: p.resource_version().unwrap_or_default(),
            dest: p
                .spec
                .dest_clusters
                .iter()
                .map(|t| (t.cluster.clone(), t.replicas))
                .collect(),
            conditions: status.map(|s| s.conditions.clone()).unwrap_or_default(),
            clusters_digest: entries_digest(status.map_or(&[], |s| &s.clusters)),
        }
    }
}

/// A digest of per-cluster status entries, equal exactly when their JSON is.
pub fn entries_digest(entries: &[ClusterWorkloadStatus]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    // Encoding a list of plain structs cannot fail.
    serde_json::to_string(entries)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

type Map = HashMap<(String, String), Arc<PlacementView>>;

#[derive(Default)]
struct Inner {
    views: Map,
    /// Views of a relist in progress; they replace `views` when it completes.
    relist: Option<Map>,
}

/// The cache; clones share it.
#[derive(Clone)]
pub struct PlacementCache {
    inner: Arc<RwLock<Inner>>,
    ready: watch::Sender<bool>,
}

impl Default for PlacementCache {
    fn default() -> Self {
        Self {
            inner: Arc::default(),
            ready: watch::Sender::new(false),
        }
    }
}

fn key(p: &Placement) -> (String, String) {
    (p.namespace().unwrap_or_default(), p.name_any())
}

/// Whether `p` places a workload this controller propagates (Service Placements belong to
/// the service controller).
fn ours(p: &Placement) -> bool {
    WorkloadKey::of_placement("", &p.spec.resource).is_some()
}

impl PlacementCache {
    /// Applies one watcher event.
    pub fn apply(&self, event: &Event<Placement>) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(p) if ours(p) => {
                g.views.insert(key(p), Arc::new(PlacementView::of(p)));
            }
            Event::Apply(_) => {}
            Event::Delete(p) => {
                g.views.remove(&key(p));
            }
            Event::Init => g.relist = Some(Map::new()),
            Event::InitApply(p) if !ours(p) => {}
            Event::InitApply(p) => {
                g.relist
                    .get_or_insert_with(Map::new)
                    .insert(key(p), Arc::new(PlacementView::of(p)));
            }
            Event::InitDone => {
                if let Some(m) = g.relist.take() {
                    g.views = m;
                }
                drop(g);
                self.ready.send_replace(true);
            }
        }
    }

    /// The Placement `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<PlacementView>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .views
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
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

    fn placement(rv: &str, ready: i32) -> Placement {
        serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "deployment-web", "namespace": "shop", "resourceVersion": rv,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1", "controller": true}]},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1"},
                     "destClusters": [{"cluster": "a", "replicas": 3}, {"cluster": "b", "replicas": 7}]},
            "status": {"conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": "10/10"}],
                       "clusters": [{"cluster": "a", "replicas": 3, "readyReplicas": ready}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_view_keeps_destinations_conditions_and_a_digest_of_the_entries() {
        let p = placement("7", 1);
        let v = PlacementView::of(&p);
        assert_eq!(v.resource_version, "7");
        assert_eq!(v.dest, vec![("a".to_string(), 3), ("b".to_string(), 7)]);
        assert_eq!(v.conditions.len(), 1);
        let entries = &p.status.as_ref().unwrap().clusters;
        assert_eq!(v.clusters_digest, entries_digest(entries));
        // Any change of an entry changes the digest.
        let mut other = entries.clone();
        other[0].ready_replicas = 2;
        assert_ne!(v.clusters_digest, entries_digest(&other));
        assert_ne!(entries_digest(&[]), entries_digest(entries));
    }

    #[test]
    fn the_cache_follows_events_and_relists() {
        let c = PlacementCache::default();
        c.apply(&Event::Init);
        c.apply(&Event::InitApply(placement("1", 0)));
        assert!(
            c.get("shop", "deployment-web").is_none(),
            "a relist lands when done"
        );
        c.apply(&Event::InitDone);
        assert!(*c.ready.borrow());
        assert_eq!(
            c.get("shop", "deployment-web").unwrap().resource_version,
            "1"
        );
        c.apply(&Event::Apply(placement("2", 3)));
        assert_eq!(
            c.get("shop", "deployment-web").unwrap().resource_version,
            "2"
        );
        let mut service = placement("9", 0);
        service.metadata.name = Some("service-web".into());
        service.spec.resource.api_version = "v1".into();
        service.spec.resource.kind = "Service".into();
        c.apply(&Event::Apply(service));
        assert!(c.get("shop", "service-web").is_none(), "not a workload's");
        c.apply(&Event::Delete(placement("2", 3)));
        assert!(c.get("shop", "deployment-web").is_none());
        // A relist drops what it no longer lists.
        c.apply(&Event::Apply(placement("3", 3)));
        c.apply(&Event::Init);
        c.apply(&Event::InitDone);
        assert!(c.get("shop", "deployment-web").is_none());
    }
}

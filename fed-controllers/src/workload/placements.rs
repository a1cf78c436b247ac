//! What the workload controller keeps of each Placement: its destinations, its own
//! `Propagated` condition and a digest of its per-cluster status entries. Only this
//! controller writes those two, so they are all it needs to tell whether its status part
//! changed (the scheduler's part is merged in by the API server); at
//! 10,000 Placements (and 100 entries each when Duplicated) the entries would be most of
//! the cache.

use std::hash::{Hash, Hasher};

use fed_api::Placement;
use fed_api::common::Condition;
use fed_api::placement::ClusterWorkloadStatus;

use super::kinds::WorkloadKey;
use crate::slim_cache::SlimCache;

/// One Placement as the workload controller reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacementView {
    /// `spec.destClusters` as (cluster, replicas).
    pub dest: Vec<(String, i32)>,
    /// The `Propagated` condition of `status.conditions` (ours), if any.
    pub propagated: Option<Condition>,
    /// [`entries_digest`] of `status.clusters`.
    pub clusters_digest: u64,
}

impl PlacementView {
    /// The view of a whole Placement.
    pub fn of(p: &Placement) -> Self {
        let status = p.status.as_ref();
        Self {
            dest: p
                .spec
                .dest_clusters
                .iter()
                // A member Deployment's replicas are int32; a share never exceeds its
                // workload's own int32 replicas, so the cap only guards a hand-written one.
                .map(|t| {
                    let replicas = i32::try_from(t.replicas).unwrap_or(i32::MAX);
                    (t.cluster.clone(), replicas)
                })
                .collect(),
            propagated: status.and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == "Propagated")
                    .cloned()
            }),
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

/// The workload controller's Placement cache: views of workload Placements only (Service
/// Placements belong to the service controller).
pub type PlacementCache = SlimCache<Placement, PlacementView>;

/// An empty [`PlacementCache`].
pub fn cache() -> PlacementCache {
    SlimCache::new(|p: &Placement| {
        WorkloadKey::of_placement("", &p.spec.resource).map(|_| PlacementView::of(p))
    })
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
    fn a_view_keeps_destinations_our_condition_and_a_digest_of_the_entries() {
        let mut p = placement("7", 1);
        let v = PlacementView::of(&p);
        assert_eq!(v.dest, vec![("a".to_string(), 3), ("b".to_string(), 7)]);
        assert_eq!(
            v.propagated, None,
            "the Scheduled condition is the scheduler's"
        );
        let propagated: Condition = serde_json::from_value(
            json!({"type": "Propagated", "status": "True", "reason": "InSync"}),
        )
        .unwrap();
        p.status
            .as_mut()
            .unwrap()
            .conditions
            .push(propagated.clone());
        assert_eq!(PlacementView::of(&p).propagated, Some(propagated));
        let entries = &p.status.as_ref().unwrap().clusters;
        assert_eq!(v.clusters_digest, entries_digest(entries));
        // Any change of an entry changes the digest.
        let mut other = entries.clone();
        other[0].ready_replicas = 2;
        assert_ne!(v.clusters_digest, entries_digest(&other));
        assert_ne!(entries_digest(&[]), entries_digest(entries));
    }

    #[test]
    fn the_cache_keeps_views_of_workload_placements_only() {
        use kube::runtime::watcher::Event;
        let c = cache();
        c.apply(&Event::Apply(placement("2", 3)));
        assert_eq!(c.get("shop", "deployment-web").unwrap().dest.len(), 2);
        let mut service = placement("9", 0);
        service.metadata.name = Some("service-web".into());
        service.spec.resource.api_version = "v1".into();
        service.spec.resource.kind = "Service".into();
        c.apply(&Event::Apply(service));
        assert!(c.get("shop", "service-web").is_none(), "not a workload's");
    }
}

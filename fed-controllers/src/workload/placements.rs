//! What the workload controller keeps of each Placement: its destinations, the replicas the
//! scheduler left unplaced, its own `Propagated` condition and a digest of its per-cluster
//! status entries. Only this
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
    /// `status.unschedulable.replicas`: what the scheduler's decision left unplaced.
    pub unschedulable: i64,
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
            unschedulable: status
                .and_then(|s| s.unschedulable.as_ref())
                .map_or(0, |u| i64::from(u.replicas)),
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

impl PlacementView {
    /// Whether the scheduler's decision is for `count` replicas (the workload's
    /// `spec.replicas`, a Job's `parallelism`): the shares and what was left unplaced add up
    /// to it (Divided), or every share is all of it (Duplicated). Not so between a scale
    /// and the scheduler's answer to it, when the members still hold the old shares.
    /// A Divided decision whose every share happens to equal the new count passes as
    /// Duplicated: the check errs only toward "decided".
    pub fn decided_for(&self, count: i64) -> bool {
        let placed: i64 = self.dest.iter().map(|(_, r)| i64::from(*r)).sum();
        placed + self.unschedulable == count
            || (!self.dest.is_empty() && self.dest.iter().all(|(_, r)| i64::from(*r) == count))
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

    #[test]
    fn a_decision_is_for_the_count_its_shares_and_unplaced_replicas_add_up_to() {
        let view = |dest: &[i32], unschedulable: i64| PlacementView {
            dest: dest
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("c{i}"), *r))
                .collect(),
            unschedulable,
            ..PlacementView::default()
        };
        // (shares, unplaced, the workload's count) → decided for it
        let cases: &[(&[i32], i64, i64, bool)] = &[
            (&[3, 7], 0, 10, true),
            (&[3, 7], 0, 12, false),  // scaled up, not yet re-divided
            (&[3, 7], 0, 8, false),   // scaled down
            (&[3, 4], 3, 10, true),   // partly unplaced
            (&[4, 4, 4], 0, 4, true), // Duplicated
            (&[4, 4, 4], 0, 5, false),
            (&[], 0, 0, true),     // scaled to zero
            (&[], 3, 3, true),     // nowhere to go
            (&[], 0, 3, false),    // not decided at all
            (&[2, 2], 0, 2, true), // a Divided 4 scaled to 2 passes as Duplicated
        ];
        for (dest, unplaced, count, decided) in cases {
            assert_eq!(
                view(dest, *unplaced).decided_for(*count),
                *decided,
                "{dest:?} + {unplaced} for {count}"
            );
        }
    }

    #[test]
    fn a_view_keeps_the_unplaced_replicas() {
        let mut p = placement("3", 1);
        assert_eq!(PlacementView::of(&p).unschedulable, 0);
        p.status.as_mut().unwrap().unschedulable = Some(fed_api::placement::Unschedulable {
            replicas: 4,
            reasons: Vec::new(),
        });
        assert_eq!(PlacementView::of(&p).unschedulable, 4);
    }
}

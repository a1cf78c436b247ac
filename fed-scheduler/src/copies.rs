//! Placement of the kinds placed through the copy path (ServiceAccounts, RBAC, Ingresses,
//! custom resources, ...): every cluster the governing policy selects gets a copy; a custom
//! kind whose `ResourceInterpreter` says where its replicas are is divided instead when the
//! policy divides replicas ([`place`]).
//!
//! The clusters are chosen by the same filter and select plugins as workloads (health, API
//! enablement, affinity, tolerations, spread), so "why not cluster B?" has the same answer.

use fed_api::interpreter::ResourceInterpreterSpec;
use fed_api::placement::TargetCluster;
use fed_api::policy::PlacementRules;

use crate::explain::{self, Outcome};
use crate::types::{
    ClusterOutcome, Decision, PropagationPolicy, ReplicaSchedulingType, Snapshot, Unschedulable,
    UnschedulableStatus, Workload,
};
use crate::{decide, schedule};

/// An object to copy into members, as placement reads it.
#[derive(Clone, Debug, Default)]
pub struct CopiedObject {
    /// e.g. `rbac.authorization.k8s.io/v1`.
    pub api_version: String,
    /// e.g. `Role`.
    pub kind: String,
    /// Namespace; empty for a cluster-scoped object.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Where copies of `object` go under `policy`: `destClusters` entries with no replicas,
/// sorted by cluster, plus the per-cluster verdicts behind them. `previous` is the current
/// `destClusters`: a copy stays in a cluster that is Offline within the policy's toleration
/// or newly tainted `NoSchedule`, as a workload's replicas would.
pub fn place_copies(
    snapshot: &Snapshot,
    object: &CopiedObject,
    policy: &PropagationPolicy,
    previous: &[TargetCluster],
) -> Result<(Vec<TargetCluster>, Decision), Unschedulable> {
    // A copy is one whole object in every chosen cluster: Duplicated, with nothing to fit.
    let duplicated = PropagationPolicy {
        metadata: policy.metadata.clone(),
        spec: fed_api::PropagationPolicySpec {
            placement: PlacementRules {
                replica_scheduling: None,
                ..policy.spec.placement.clone()
            },
            ..policy.spec.clone()
        },
        status: policy.status,
    };
    let workload = Workload {
        api_version: object.api_version.clone(),
        kind: object.kind.clone(),
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        replicas: 0,
        ..Default::default()
    };
    let decision = decide(
        snapshot,
        &workload,
        Some(&duplicated),
        Some(&held(previous)),
        true,
    )?;
    let dest = decision
        .clusters
        .iter()
        .filter(|v| matches!(v.outcome, ClusterOutcome::Selected | ClusterOutcome::Kept))
        .map(|v| TargetCluster::new(v.cluster.clone(), 0))
        .collect();
    Ok((dest, decision))
}

/// `previous` with each copy counted as one replica: the scheduler keeps a cluster's share
/// in place, and counts an eviction, only where it had replicas.
fn held(previous: &[TargetCluster]) -> Vec<TargetCluster> {
    previous
        .iter()
        .map(|t| TargetCluster::new(t.cluster.clone(), 1))
        .collect()
}

/// Where an object of a copied kind goes and what its Placement says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyPlacement {
    /// `destClusters`: `replicas: 0` entries for whole copies, each member's share when
    /// divided (a cluster with no share is not listed).
    pub dest: Vec<TargetCluster>,
    /// The `Scheduled` condition.
    pub outcome: Outcome,
    /// Replicas left unplaced and why (divided objects only).
    pub unschedulable: UnschedulableStatus,
    /// Seconds (on the snapshot's clock) until a cluster that is offline within the
    /// policy's toleration passes it: decide again then, or what it holds stays there.
    pub recheck_after: Option<u64>,
    /// Whether it takes a share or a copy away from a cluster offline beyond its
    /// toleration: an eviction, which the caller rate-limits.
    pub evicts: bool,
}

/// `object` (JSON) read as `interpreter` says, for [`place`]: `None` when it names no
/// replicas, else the workload or why it cannot be read (the error and its causes as one
/// line).
pub fn interpret(
    object: &serde_json::Value,
    interpreter: &ResourceInterpreterSpec,
) -> Option<Result<Workload, String>> {
    Workload::from_interpreted(object, interpreter).map(|r| {
        r.map_err(|e| {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(": ");
                text.push_str(&c.to_string());
                cause = c.source();
            }
            text
        })
    })
}

/// Whether `policy` divides replicas among the clusters it selects.
pub fn divides(policy: &PropagationPolicy) -> bool {
    policy
        .spec
        .placement
        .replica_scheduling
        .as_ref()
        .is_some_and(|rs| rs.type_ == ReplicaSchedulingType::Divided)
}

/// Places `object` under its governing `policy`. `interpreted` is the object read as its
/// kind's `ResourceInterpreter` says ([`Workload::from_interpreted`], the error as text),
/// `None` when no interpreter names the kind's replicas. A policy that divides replicas
/// divides an interpreted object as it would a Deployment (weights, capacity, spread,
/// failover: the same [`schedule`]); an object that cannot be read that way is placed
/// nowhere and says why (`InvalidWorkload`). Everything else gets a copy in every selected
/// cluster ([`place_copies`]). `previous` is the current `destClusters`.
pub fn place(
    snapshot: &Snapshot,
    object: &CopiedObject,
    interpreted: Option<&Result<Workload, String>>,
    policy: &PropagationPolicy,
    previous: &[TargetCluster],
) -> CopyPlacement {
    match interpreted.filter(|_| divides(policy)) {
        Some(Ok(w)) => {
            let result = schedule(snapshot, w, Some(policy), Some(previous));
            CopyPlacement {
                dest: explain::dest_clusters(&result),
                outcome: explain::outcome(&result),
                unschedulable: explain::unschedulable(&result, w.replicas),
                recheck_after: explain::toleration_expiry(&result),
                evicts: !explain::evictions(&result, previous).is_empty(),
            }
        }
        Some(Err(problem)) => CopyPlacement {
            dest: Vec::new(),
            outcome: Outcome {
                scheduled: false,
                reason: "InvalidWorkload",
                message: format!(
                    "{} {}: {problem}",
                    object.kind,
                    if object.namespace.is_empty() {
                        object.name.clone()
                    } else {
                        format!("{}/{}", object.namespace, object.name)
                    }
                ),
            },
            unschedulable: UnschedulableStatus::default(),
            recheck_after: None,
            evicts: false,
        },
        None => match place_copies(snapshot, object, policy, previous) {
            Ok((dest, decision)) => {
                let names: Vec<&str> = dest.iter().map(|t| t.cluster.as_str()).collect();
                let result = Ok(decision);
                CopyPlacement {
                    outcome: Outcome {
                        scheduled: true,
                        reason: "Scheduled",
                        message: format!(
                            "a copy in each of {} clusters: {}",
                            dest.len(),
                            names.join(", ")
                        ),
                    },
                    dest,
                    unschedulable: UnschedulableStatus::default(),
                    recheck_after: explain::toleration_expiry(&result),
                    evicts: !explain::evictions(&result, &held(previous)).is_empty(),
                }
            }
            Err(u) => {
                let result = Err(u);
                CopyPlacement {
                    dest: Vec::new(),
                    outcome: explain::outcome(&result),
                    unschedulable: UnschedulableStatus::default(),
                    recheck_after: explain::toleration_expiry(&result),
                    evicts: !explain::evictions(&result, &held(previous)).is_empty(),
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::{Cluster, UnschedulableReason};

    const NOW: i64 = 1_750_000_000;

    /// A Ready cluster in `region` with `labels`, serving rbac and apps, with no room left for
    /// pods at all (a copy needs none).
    fn cluster(name: &str, region: &str, env: &str) -> Cluster {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"env": env}},
            "spec": {"apiEndpoint": format!("https://{name}.test:6443"), "region": region},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "apiEnablements": [
                    {"groupVersion": "rbac.authorization.k8s.io/v1", "resources": ["roles", "clusterroles"]},
                    {"groupVersion": "apps/v1", "resources": ["deployments"]}
                ],
                "nodes": {"total": 1, "ready": 1},
                "resourceSummary": {
                    "allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"},
                    "allocated": {"cpu": "1", "memory": "1Gi", "pods": "10"}
                }
            }
        }))
        .unwrap()
    }

    fn fleet() -> Snapshot {
        let mut tainted = cluster("d", "us", "prod");
        tainted.spec.taints = vec![
            serde_json::from_value(
                json!({"key": "maintenance", "value": "true", "effect": "NoSchedule"}),
            )
            .unwrap(),
        ];
        Snapshot::new(
            [
                cluster("a", "eu", "prod"),
                cluster("b", "eu", "dev"),
                cluster("c", "us", "prod"),
                tainted,
            ],
            NOW,
        )
    }

    fn role() -> CopiedObject {
        CopiedObject {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "Role".into(),
            namespace: "shop".into(),
            name: "reader".into(),
        }
    }

    fn policy(placement: serde_json::Value) -> PropagationPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}],
                "placement": placement
            }
        }))
        .unwrap()
    }

    fn names(dest: &[TargetCluster]) -> Vec<&str> {
        dest.iter().map(|t| t.cluster.as_str()).collect()
    }

    #[test]
    fn copies_go_to_every_selected_cluster() {
        // (placement, previous destClusters, expected clusters)
        let cases: Vec<(serde_json::Value, Vec<&str>, Vec<&str>)> = vec![
            // No affinity: every untainted cluster, full or not.
            (json!({}), vec![], vec!["a", "b", "c"]),
            // Tolerating the taint adds d.
            (
                json!({"clusterTolerations": [{"key": "maintenance", "operator": "Exists"}]}),
                vec![],
                vec!["a", "b", "c", "d"],
            ),
            (
                json!({"clusterAffinity": {"labelSelector": {"matchLabels": {"env": "prod"}}}}),
                vec![],
                vec!["a", "c"],
            ),
            (
                json!({"clusterAffinity": {"regions": ["eu"]}}),
                vec![],
                vec!["a", "b"],
            ),
            (
                json!({"clusterAffinity": {"clusterNames": ["a", "c"], "exclude": ["c"]}}),
                vec![],
                vec!["a"],
            ),
            // A copy already in the tainted cluster stays there (NoSchedule keeps).
            (json!({}), vec!["d"], vec!["a", "b", "c", "d"]),
            // A policy asking to divide still gets copies: the kind has no replicas.
            (
                json!({"replicaScheduling": {"type": "Divided"}, "clusterAffinity": {"regions": ["us"]}}),
                vec![],
                vec!["c"],
            ),
        ];
        for (i, (placement, previous, want)) in cases.into_iter().enumerate() {
            let previous: Vec<TargetCluster> =
                previous.iter().map(|c| TargetCluster::new(*c, 0)).collect();
            let (dest, _) =
                place_copies(&fleet(), &role(), &policy(placement), &previous).expect("placed");
            assert_eq!(names(&dest), want, "case {i}");
            assert!(dest.iter().all(|t| t.replicas == 0), "case {i}");
        }
    }

    #[test]
    fn clusters_that_do_not_serve_the_kind_get_no_copy() {
        let mut crd_kind = role();
        crd_kind.api_version = "example.com/v1".into();
        crd_kind.kind = "Widget".into();
        let mut p = policy(json!({}));
        p.spec.resource_selectors[0].api_version = "example.com/v1".into();
        p.spec.resource_selectors[0].kind = "Widget".into();
        let err = place_copies(&fleet(), &crd_kind, &p, &[]).unwrap_err();
        assert_eq!(err.reason, UnschedulableReason::NoCandidates);
        assert!(
            err.clusters
                .iter()
                .all(|v| v.outcome == ClusterOutcome::Filtered),
            "{:?}",
            err.clusters
        );
    }

    #[test]
    fn no_cluster_matches() {
        let p = policy(json!({"clusterAffinity": {"clusterNames": ["nowhere"]}}));
        let err = place_copies(&fleet(), &role(), &p, &[]).unwrap_err();
        assert_eq!(err.reason, UnschedulableReason::NoCandidates);
    }

    /// Two Ready clusters serving `example.com/v1` rollouts, each with room for 4 pods of
    /// 500m.
    fn rollout_fleet() -> Snapshot {
        Snapshot::new([rollout_cluster("a"), rollout_cluster("b")], NOW)
    }

    fn rollout_cluster(name: &str) -> Cluster {
        let c = |name: &str| -> Cluster {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"apiEndpoint": format!("https://{name}.test:6443"), "region": "eu"},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "apiEnablements": [{"groupVersion": "example.com/v1", "resources": ["rollouts"]}],
                    "nodes": {"total": 1, "ready": 1},
                    "resourceSummary": {
                        "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                        "allocated": {"cpu": "0", "memory": "0", "pods": "0"}
                    }
                }
            }))
            .unwrap()
        };
        c(name)
    }

    fn rollout_policy(scheduling: serde_json::Value) -> PropagationPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "example.com/v1", "kind": "Rollout"}],
                "placement": {"replicaScheduling": scheduling}
            }
        }))
        .unwrap()
    }

    fn rollout(replicas: u32, cpu_milli: u64) -> (CopiedObject, Workload) {
        let object = CopiedObject {
            api_version: "example.com/v1".into(),
            kind: "Rollout".into(),
            namespace: "shop".into(),
            name: "web".into(),
        };
        let w = Workload {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            replicas,
            requests: crate::types::PodRequests {
                cpu_milli,
                memory_bytes: 0,
            },
            ..Default::default()
        };
        (object, w)
    }

    /// Cluster `b`, serving rollouts, offline for the last `secs` seconds.
    fn offline_b(secs: i64) -> Cluster {
        serde_json::from_value(json!({
            "metadata": {"name": "b"},
            "spec": {"apiEndpoint": "https://b.test:6443", "region": "eu"},
            "status": {
                "conditions": [{"type": "Ready", "status": "False",
                                "lastTransitionTime": jiff::Timestamp::from_second(NOW - secs).unwrap().to_string()}],
                "apiEnablements": [{"groupVersion": "example.com/v1", "resources": ["rollouts"]}]
            }
        }))
        .unwrap()
    }

    fn shares(dest: &[TargetCluster]) -> Vec<(&str, u32)> {
        dest.iter()
            .map(|t| (t.cluster.as_str(), t.replicas))
            .collect()
    }

    #[test]
    fn an_interpreted_object_is_divided_only_under_a_dividing_policy() {
        let weighted = json!({"type": "Divided", "weights": [
            {"clusterNames": ["a"], "weight": 1}, {"clusterNames": ["b"], "weight": 2}]});
        // (scheduling, replicas, cpu per pod, read as interpreted?, expected shares, reason)
        type Case = (
            serde_json::Value,
            u32,
            u64,
            bool,
            Vec<(&'static str, u32)>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                weighted.clone(),
                6,
                0,
                true,
                vec![("a", 2), ("b", 4)],
                "Scheduled",
            ),
            (
                weighted.clone(),
                9,
                0,
                true,
                vec![("a", 3), ("b", 6)],
                "Scheduled",
            ),
            // Capacity counts: 4 pods of 500m fit in each cluster.
            (
                weighted.clone(),
                9,
                500,
                true,
                vec![("a", 4), ("b", 4)],
                "Unschedulable",
            ),
            (
                json!({"type": "Divided"}),
                4,
                0,
                true,
                vec![("a", 2), ("b", 2)],
                "Scheduled",
            ),
            // Duplicated: a whole copy in each cluster, as for any copied kind.
            (
                json!({"type": "Duplicated"}),
                6,
                0,
                true,
                vec![("a", 0), ("b", 0)],
                "Scheduled",
            ),
            // No interpreter naming replicas: copies, whatever the policy says.
            (
                weighted.clone(),
                6,
                0,
                false,
                vec![("a", 0), ("b", 0)],
                "Scheduled",
            ),
        ];
        for (i, (scheduling, replicas, cpu, interpreted, want, reason)) in
            cases.into_iter().enumerate()
        {
            let (object, w) = rollout(replicas, cpu);
            let read = Ok(w);
            let got = place(
                &rollout_fleet(),
                &object,
                interpreted.then_some(&read),
                &rollout_policy(scheduling),
                &[],
            );
            assert_eq!(shares(&got.dest), want, "case {i}");
            assert_eq!(
                got.outcome.reason, reason,
                "case {i}: {}",
                got.outcome.message
            );
        }
    }

    #[test]
    fn an_unreadable_interpreted_object_is_placed_nowhere_and_says_why() {
        let (object, _) = rollout(0, 0);
        let bad = Err(".spec.replicas is missing".to_owned());
        let got = place(
            &rollout_fleet(),
            &object,
            Some(&bad),
            &rollout_policy(json!({"type": "Divided"})),
            &[],
        );
        assert!(got.dest.is_empty());
        assert!(!got.outcome.scheduled);
        assert_eq!(got.outcome.reason, "InvalidWorkload");
        assert_eq!(
            got.outcome.message,
            "Rollout shop/web: .spec.replicas is missing"
        );
        // Under a Duplicated policy the count is never read: copies as before.
        let copied = place(
            &rollout_fleet(),
            &object,
            Some(&bad),
            &rollout_policy(json!({"type": "Duplicated"})),
            &[],
        );
        assert_eq!(shares(&copied.dest), vec![("a", 0), ("b", 0)]);
    }

    #[test]
    fn a_cluster_offline_within_its_toleration_is_looked_at_again_when_it_passes() {
        // sim b went offline 20 s ago; the policy tolerates 60 s.
        let offline = offline_b(20);
        let fleet = Snapshot::new([rollout_cluster("a"), offline], NOW);
        let mut policy = rollout_policy(json!({"type": "Divided"}));
        policy.spec.placement.failover =
            serde_json::from_value(json!({"tolerationSeconds": 60})).unwrap();
        let (object, w) = rollout(4, 0);
        let previous = [TargetCluster::new("a", 2), TargetCluster::new("b", 2)];
        let read = Ok(w);
        let divided = place(&fleet, &object, Some(&read), &policy, &previous);
        assert_eq!(
            shares(&divided.dest),
            vec![("a", 2), ("b", 2)],
            "{:?}",
            divided.outcome
        );
        assert_eq!(divided.recheck_after, Some(41));
        assert!(
            !divided.evicts,
            "within the toleration nothing is taken away"
        );
        let copied = place(
            &fleet,
            &object,
            None,
            &policy,
            &[TargetCluster::new("b", 0)],
        );
        assert!(copied.dest.iter().any(|t| t.cluster == "b"));
        assert_eq!(copied.recheck_after, Some(41));
        assert!(!copied.evicts);
        // Nothing offline: nothing to look at again.
        let (object, w) = rollout(4, 0);
        let calm = place(&rollout_fleet(), &object, Some(&Ok(w)), &policy, &[]);
        assert_eq!(calm.recheck_after, None);
    }

    #[test]
    fn taking_shares_or_copies_from_a_cluster_offline_too_long_is_an_eviction() {
        // sim b went offline 100 s ago; the policy tolerates 60 s.
        let offline = offline_b(100);
        let fleet = Snapshot::new([rollout_cluster("a"), offline], NOW);
        let mut policy = rollout_policy(json!({"type": "Divided"}));
        policy.spec.placement.failover =
            serde_json::from_value(json!({"tolerationSeconds": 60})).unwrap();
        let (object, w) = rollout(4, 0);
        let read = Ok(w);
        let held_by_b = [TargetCluster::new("a", 2), TargetCluster::new("b", 2)];
        let divided = place(&fleet, &object, Some(&read), &policy, &held_by_b);
        assert_eq!(shares(&divided.dest), vec![("a", 4)]);
        assert!(divided.evicts, "b's share moves to a");
        // Nothing was in b: placing elsewhere evicts nothing.
        let fresh = place(&fleet, &object, Some(&read), &policy, &[]);
        assert!(!fresh.evicts);
        // A whole copy taken from b is one too.
        let copied = place(
            &fleet,
            &object,
            None,
            &policy,
            &[TargetCluster::new("b", 0)],
        );
        assert!(copied.dest.iter().all(|t| t.cluster != "b"));
        assert!(copied.evicts);
    }
}

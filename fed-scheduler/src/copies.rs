//! Placement of kinds without replicas (ServiceAccounts, RBAC, Ingresses, custom resources,
//! ...): every cluster the governing policy selects gets a copy, whatever the policy says
//! about dividing replicas.
//!
//! The clusters are chosen by the same filter and select plugins as workloads (health, API
//! enablement, affinity, tolerations, spread), so "why not cluster B?" has the same answer.

use fed_api::placement::TargetCluster;
use fed_api::policy::PlacementRules;

use crate::decide;
use crate::types::{
    ClusterOutcome, Decision, PropagationPolicy, Snapshot, Unschedulable, Workload,
};

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
    // The scheduler keeps a cluster's share in place only when it had replicas; a copy
    // counts as one there.
    let held: Vec<TargetCluster> = previous
        .iter()
        .map(|t| TargetCluster::new(t.cluster.clone(), 1))
        .collect();
    let decision = decide(snapshot, &workload, Some(&duplicated), Some(&held), true)?;
    let dest = decision
        .clusters
        .iter()
        .filter(|v| matches!(v.outcome, ClusterOutcome::Selected | ClusterOutcome::Kept))
        .map(|v| TargetCluster::new(v.cluster.clone(), 0))
        .collect();
    Ok((dest, decision))
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
}

//! `plan_offline` over the YAML fixtures in `testdata/plan/`.

use super::*;
use meridian_runtime::error::report;

const FLEET: &str = include_str!("../../testdata/plan/fleet.yaml");
const APP: &str = include_str!("../../testdata/plan/app.yaml");
const NOW: i64 = 1_750_000_000;

fn input() -> PlanInput {
    let mut input = PlanInput::default();
    input.add_yaml("fleet.yaml", FLEET).expect("fleet");
    input.add_yaml("app.yaml", APP).expect("app");
    input
}

fn plan(input: &PlanInput, without: &[&str]) -> PlanReport {
    let opts = PlanOptions {
        without: without.iter().map(|s| s.to_string()).collect(),
        now_unix: NOW,
    };
    plan_offline(input, &opts).expect("plan")
}

fn dest(report: &PlanReport, name: &str) -> Vec<(String, u32)> {
    entry(report, name)
        .dest_clusters
        .iter()
        .map(|t| (t.cluster.clone(), t.replicas))
        .collect()
}

fn entry<'a>(report: &'a PlanReport, name: &str) -> &'a PlanEntry {
    report
        .workloads
        .iter()
        .find(|e| e.name == name)
        .expect("workload in report")
}

fn pairs(p: &[(&str, u32)]) -> Vec<(String, u32)> {
    p.iter().map(|(c, r)| (c.to_string(), *r)).collect()
}

#[test]
fn reads_every_kind() {
    let input = input();
    assert_eq!(input.clusters.len(), 3);
    assert_eq!(input.policies.len(), 1);
    assert_eq!(input.workloads.len(), 3);
    assert_eq!(input.placements.len(), 1);
    assert!(!input.mass_failure);
    assert_eq!(input.ignored, vec!["Service".to_string()]);
}

#[test]
fn plans_like_the_scheduler() {
    let report = plan(&input(), &[]);
    let names: Vec<&str> = report.workloads.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["api", "web", "batch"],
        "namespace, kind, name order"
    );

    let web = entry(&report, "web");
    assert_eq!(
        dest(&report, "web"),
        pairs(&[("eu-west-1", 3), ("eu-west-2", 7)])
    );
    assert!(!web.changed, "the existing placement is the decision");
    assert_eq!(web.policy.as_deref(), Some("shop/web"));
    assert_eq!(web.placement, "deployment-web");
    assert!(web.scheduled.scheduled);
    assert!(
        web.scheduled
            .message
            .contains("us-east-1: ClusterAffinity: not in clusterAffinity.clusterNames"),
        "{}",
        web.scheduled.message
    );

    let api = entry(&report, "api");
    assert!(api.dest_clusters.is_empty());
    assert_eq!(
        (api.scheduled.scheduled, api.scheduled.reason),
        (false, "NoPolicy")
    );
    assert_eq!(api.unschedulable.replicas, 2);

    assert_eq!(
        dest(&report, "batch"),
        pairs(&[("eu-west-1", 2), ("eu-west-2", 2), ("us-east-1", 2)])
    );
    assert!(entry(&report, "batch").changed, "no previous placement");
}

#[test]
fn without_a_cluster_moves_its_replicas() {
    let input = input();
    let report = plan(&input, &["eu-west-2"]);
    // eu-west-1 has room for 8 (5 free + the 3 it runs); 2 fit nowhere.
    let web = entry(&report, "web");
    assert_eq!(dest(&report, "web"), pairs(&[("eu-west-1", 8)]));
    assert!(web.changed);
    assert_eq!(web.unschedulable.replicas, 2);
    assert_eq!(web.scheduled.reason, "Unschedulable");
    let why: Vec<(&str, &str)> = web
        .unschedulable
        .reasons
        .iter()
        .map(|r| (r.cluster.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        why,
        [
            ("eu-west-1", "InsufficientCapacity"),
            ("eu-west-2", "ClusterOffline"),
            ("us-east-1", "ClusterAffinityMismatch")
        ]
    );
    assert_eq!(
        dest(&report, "batch"),
        pairs(&[("eu-west-1", 3), ("us-east-1", 3)])
    );

    // While the mass-failure guard is engaged nothing is evicted.
    let mut guarded = input.clone();
    guarded.mass_failure = true;
    let report = plan(&guarded, &["eu-west-2"]);
    assert_eq!(
        dest(&report, "web"),
        pairs(&[("eu-west-1", 3), ("eu-west-2", 7)])
    );
    assert!(report.mass_failure);
}

#[test]
fn errors_name_the_problem() {
    let err = plan_offline(
        &input(),
        &PlanOptions {
            without: vec!["nope".into(), "eu-west-1".into()],
            now_unix: NOW,
        },
    )
    .expect_err("unknown cluster");
    assert_eq!(err.to_string(), "unknown clusters in --without: nope");

    let mut i = PlanInput::default();
    let err = i
        .add_yaml("bad.yaml", "kind: Cluster\n---\nkind: [\n")
        .expect_err("bad yaml");
    assert!(report(&err).starts_with("bad.yaml: document 2: "), "{err}");

    let err = i
        .add_yaml(
            "w.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: -1}\n",
        )
        .expect_err("bad replicas");
    assert!(report(&err).contains("spec.replicas"), "{err}");

    // Lists (kubectl get -o yaml) and empty documents are fine.
    let mut i = PlanInput::default();
    i.add_yaml(
        "list.yaml",
        "---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: federation.meridian.dev/v1alpha1\n  kind: Cluster\n  metadata: {name: a}\n---\n",
    )
    .expect("list");
    assert_eq!(i.clusters.len(), 1);
}

#[test]
fn plans_every_governed_kind() {
    let mut input = PlanInput::default();
    input
        .add_yaml(
            "any-kind.yaml",
            include_str!("../../testdata/plan/any-kind.yaml"),
        )
        .expect("input");
    assert_eq!(input.cluster_policies.len(), 1);
    assert_eq!(input.interpreters.len(), 1);
    let report = plan(&input, &[]);
    // (namespace, kind, name, placement, replicas, destClusters, Scheduled reason)
    type Row<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        u32,
        Vec<(&'a str, u32)>,
        &'a str,
    );
    let rows: Vec<Row> = report
        .workloads
        .iter()
        .map(|e| {
            (
                e.namespace.as_str(),
                e.kind.as_str(),
                e.name.as_str(),
                e.placement.as_str(),
                e.replicas,
                e.dest_clusters
                    .iter()
                    .map(|t| (t.cluster.as_str(), t.replicas))
                    .collect(),
                e.scheduled.reason,
            )
        })
        .collect();
    let copies = vec![("eu-1", 0), ("us-1", 0)];
    assert_eq!(
        rows,
        vec![
            // Cluster-scoped, through the ClusterPropagationPolicy.
            (
                "",
                "ClusterRole",
                "shop-reader",
                "clusterrole.rbac.authorization.k8s.io-shop-reader",
                0,
                copies.clone(),
                "Scheduled"
            ),
            (
                "shop",
                "Deployment",
                "web",
                "deployment-web",
                4,
                vec![("eu-1", 2), ("us-1", 2)],
                "Scheduled"
            ),
            (
                "shop",
                "Ingress",
                "web",
                "ingress.networking.k8s.io-web",
                0,
                copies.clone(),
                "Scheduled"
            ),
            (
                "shop",
                "Role",
                "web",
                "role.rbac.authorization.k8s.io-web",
                0,
                copies.clone(),
                "Scheduled"
            ),
            // Divided as its interpreter says, at the policy's weights.
            (
                "shop",
                "Rollout",
                "broken",
                "rollout.example.com-broken",
                0,
                vec![],
                "InvalidWorkload"
            ),
            (
                "shop",
                "Rollout",
                "canary",
                "rollout.example.com-canary",
                6,
                vec![("eu-1", 2), ("us-1", 4)],
                "Scheduled"
            ),
            (
                "shop",
                "ServiceAccount",
                "web",
                "serviceaccount-web",
                0,
                copies,
                "Scheduled"
            ),
        ]
    );
    let broken = entry(&report, "broken");
    assert_eq!(
        broken.scheduled.message,
        "Rollout shop/broken: .spec.replicas is not a replica count: \"many\""
    );
    assert_eq!(
        entry(&report, "canary").policy.as_deref(),
        Some("shop/rollouts")
    );
    let reader = entry(&report, "shop-reader");
    assert_eq!(reader.policy.as_deref(), Some("platform"));
    // Without us-1 every kind stays in eu-1; the Rollout takes all six there.
    let failed = plan(&input, &["us-1"]);
    assert_eq!(
        entry(&failed, "canary")
            .dest_clusters
            .iter()
            .map(|t| (t.cluster.as_str(), t.replicas))
            .collect::<Vec<_>>(),
        vec![("eu-1", 6)]
    );
    assert_eq!(entry(&failed, "shop-reader").dest_clusters.len(), 1);
}

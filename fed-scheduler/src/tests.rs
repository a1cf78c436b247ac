//! End-to-end tests of `schedule` over small fleets: every strategy, failover, stability, reasons.

use proptest::prelude::{ProptestConfig, any, prop, prop_assert, prop_assert_eq, proptest};
use proptest::strategy::Strategy as _;
use serde_json::json;

use super::*;
use crate::types::Strategy as Chosen;

const NOW: i64 = 1_750_000_000;

/// A Ready cluster serving apps/v1 deployments with `cpu` free cores (pods need 1 core).
fn cluster(name: &str, region: &str, cpu: u64) -> Cluster {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"region": region}},
        "spec": {"apiEndpoint": format!("https://{name}.test:6443"), "region": region, "zone": format!("{region}-a")},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "apiEnablements": [{"groupVersion": "apps/v1", "resources": ["deployments", "replicasets"]}],
            "nodes": {"total": 10, "ready": 10},
            "resourceSummary": {
                "allocatable": {"cpu": cpu.to_string(), "memory": "1000Gi", "pods": "1000"},
                "allocated": {"cpu": "0", "memory": "0", "pods": "0"}
            }
        }
    }))
    .unwrap()
}

fn offline(mut c: Cluster, secs_ago: i64) -> Cluster {
    let since = NOW - secs_ago;
    // Format an RFC 3339 time by hand from the unix seconds (UTC), good for 2001–2099.
    let days = since.div_euclid(86_400);
    let rem = since.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    c.status.conditions = vec![Condition {
        type_: "Ready".into(),
        status: "False".into(),
        last_transition_time: Some(format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )),
        ..Default::default()
    }];
    c
}

fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn workload(replicas: u32) -> Workload {
    Workload {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "shop".into(),
        name: "web".into(),
        replicas,
        requests: PodRequests {
            cpu_milli: 1000,
            memory_bytes: 1 << 30,
        },
        ..Default::default()
    }
}

fn policy(placement: serde_json::Value) -> PropagationPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": placement
        }
    }))
    .unwrap()
}

fn targets(d: &Decision) -> Vec<(&str, u32)> {
    d.targets
        .iter()
        .map(|t| (t.cluster.as_str(), t.replicas))
        .collect()
}

fn prev(pairs: &[(&str, u32)]) -> Vec<TargetCluster> {
    pairs
        .iter()
        .map(|&(c, r)| TargetCluster::new(c, r))
        .collect()
}

fn fleet3() -> Snapshot {
    Snapshot::new(
        [
            cluster("a", "eu", 100),
            cluster("b", "eu", 100),
            cluster("c", "us", 100),
        ],
        NOW,
    )
}

#[test]
fn no_policy_no_annotation_is_unschedulable() {
    let err = schedule(&fleet3(), &workload(3), None, None).unwrap_err();
    assert_eq!(err.reason, UnschedulableReason::NoPolicy);
    assert_eq!(err.reason.code(), "NoPolicy");
}

#[test]
fn static_three_two_one() {
    let p = policy(
        json!({"replicaScheduling": {"type": "Divided", "division": "StaticWeight", "weights": [
        {"clusterNames": ["a"], "weight": 3}, {"clusterNames": ["b"], "weight": 2}, {"clusterNames": ["c"], "weight": 1}]}}),
    );
    for (n, want) in [(12, [6, 4, 2]), (13, [7, 4, 2]), (14, [7, 5, 2])] {
        let d = schedule(&fleet3(), &workload(n), Some(&p), None).unwrap();
        assert_eq!(
            targets(&d),
            vec![("a", want[0]), ("b", want[1]), ("c", want[2])],
            "{n}"
        );
        assert_eq!(d.strategy, Chosen::StaticWeight);
        assert_eq!(d.unschedulable.replicas, 0);
        assert_eq!(
            d.message(),
            format!("{n}/{n} replicas placed in 3 clusters (StaticWeight)")
        );
    }
}

#[test]
fn label_weights_and_zero_weight_reason() {
    let p = policy(json!({"replicaScheduling": {"type": "Divided", "weights": [
        {"labelSelector": {"matchLabels": {"region": "eu"}}, "weight": 1}]}}));
    let d = schedule(&fleet3(), &workload(4), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("b", 2)]);
    assert_eq!(d.why("c").unwrap().reasons[0].reason, Reason::ZeroWeight);
}

#[test]
fn duplicated_filters_small_clusters_and_explains() {
    let snap = Snapshot::new([cluster("a", "eu", 10), cluster("b", "eu", 3)], NOW);
    let p = policy(json!({}));
    let d = schedule(&snap, &workload(5), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 5)]);
    let b = d.why("b").unwrap();
    assert_eq!(b.outcome, ClusterOutcome::Filtered);
    assert_eq!(b.reasons[0].plugin, "ClusterCapacity");
    assert_eq!(
        b.reasons[0].to_string(),
        "ClusterCapacity: fits 3 of 5 replicas (limited by cpu)"
    );
}

#[test]
fn dynamic_divides_by_capacity() {
    let snap = Snapshot::new([cluster("a", "eu", 30), cluster("b", "eu", 10)], NOW);
    let p = policy(json!({"replicaScheduling": {"type": "Divided", "division": "DynamicWeight"}}));
    let d = schedule(&snap, &workload(8), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 6), ("b", 2)]);
}

#[test]
fn shortfall_is_reported_not_dropped() {
    let snap = Snapshot::new(
        [
            cluster("a", "eu", 3),
            cluster("b", "eu", 2),
            cluster("c", "us", 0),
        ],
        NOW,
    );
    let p = policy(json!({"replicaScheduling": {"type": "Divided"}}));
    let d = schedule(&snap, &workload(10), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 3), ("b", 2)]);
    assert_eq!(d.unschedulable.replicas, 5);
    let codes: Vec<(&str, &str)> = d
        .unschedulable
        .reasons
        .iter()
        .map(|r| (r.cluster.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("a", "InsufficientCapacity"),
            ("b", "InsufficientCapacity"),
            ("c", "InsufficientCapacity")
        ]
    );
    assert!(
        d.message()
            .starts_with("5/10 replicas placed in 2 clusters"),
        "{}",
        d.message()
    );
    let status = serde_json::to_value(&d.unschedulable).unwrap();
    assert_eq!(status["replicas"], 5);
    assert_eq!(status["reasons"][0]["cluster"], "a");
}

#[test]
fn affinity_taints_and_api_reasons() {
    let mut tainted = cluster("t", "eu", 100);
    tainted.spec.taints = vec![Taint {
        key: "maintenance".into(),
        value: None,
        effect: TaintEffect::NoSchedule,
    }];
    // A cluster that serves apps/v1 but not deployments.
    let mut old = cluster("old", "eu", 100);
    for a in &mut old.status.api_enablements {
        a.resources.retain(|r| r != "deployments");
    }
    let snap = Snapshot::new(
        [
            cluster("a", "eu", 100),
            cluster("x", "eu", 100),
            tainted,
            old,
        ],
        NOW,
    );
    let p = policy(
        json!({"clusterAffinity": {"exclude": ["x"]}, "replicaScheduling": {"type": "Divided"}}),
    );
    let d = schedule(&snap, &workload(4), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 4)]);
    assert_eq!(d.why("x").unwrap().reasons[0].reason, Reason::Excluded);
    assert_eq!(
        d.why("t").unwrap().reasons[0].reason.code(),
        "TaintNotTolerated"
    );
    assert_eq!(
        d.why("old").unwrap().reasons[0].reason.code(),
        "KindNotServed"
    );

    // A NoSchedule taint keeps replicas already there; NoExecute moves them.
    let d = schedule(
        &snap,
        &workload(4),
        Some(&p),
        Some(&prev(&[("a", 2), ("t", 2)])),
    )
    .unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("t", 2)]);
    assert_eq!(d.why("t").unwrap().outcome, ClusterOutcome::Kept);
    let mut tainted = cluster("t", "eu", 100);
    tainted.spec.taints = vec![Taint {
        key: "drain".into(),
        value: None,
        effect: TaintEffect::NoExecute,
    }];
    let snap = Snapshot::new([cluster("a", "eu", 100), tainted], NOW);
    let d = schedule(
        &snap,
        &workload(4),
        Some(&p),
        Some(&prev(&[("a", 2), ("t", 2)])),
    )
    .unwrap();
    assert_eq!(targets(&d), vec![("a", 4)]);
    // Tolerating it lets replicas stay.
    let tol = policy(
        json!({"clusterTolerations": [{"key": "drain", "operator": "Exists"}], "replicaScheduling": {"type": "Divided"}}),
    );
    let d = schedule(
        &snap,
        &workload(4),
        Some(&tol),
        Some(&prev(&[("a", 2), ("t", 2)])),
    )
    .unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("t", 2)]);
}

#[test]
fn failover_toleration_guard_and_recovery() {
    let p = policy(json!({"replicaScheduling": {"type": "Divided"}}));
    let before = prev(&[("a", 2), ("b", 2), ("c", 2)]);
    let w = workload(6);

    // Offline 100s of 300s: replicas stay counted in c.
    let snap = Snapshot::new(
        [
            cluster("a", "eu", 100),
            cluster("b", "eu", 100),
            offline(cluster("c", "us", 100), 100),
        ],
        NOW,
    );
    let d = schedule(&snap, &w, Some(&p), Some(&before)).unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("b", 2), ("c", 2)]);
    assert_eq!(d.why("c").unwrap().outcome, ClusterOutcome::Kept);

    // Offline 301s: they move, only c's replicas move.
    let snap = Snapshot::new(
        [
            cluster("a", "eu", 100),
            cluster("b", "eu", 100),
            offline(cluster("c", "us", 100), 301),
        ],
        NOW,
    );
    let d = schedule(&snap, &w, Some(&p), Some(&before)).unwrap();
    assert_eq!(targets(&d), vec![("a", 3), ("b", 3)]);
    assert_eq!(
        d.why("c").unwrap().reasons[0].reason.code(),
        "ClusterOffline"
    );

    // Custom toleration.
    let quick = policy(
        json!({"replicaScheduling": {"type": "Divided"}, "failover": {"tolerationSeconds": 60}}),
    );
    let snap100 = Snapshot::new(
        [
            cluster("a", "eu", 100),
            cluster("b", "eu", 100),
            offline(cluster("c", "us", 100), 100),
        ],
        NOW,
    );
    assert_eq!(
        targets(&schedule(&snap100, &w, Some(&quick), Some(&before)).unwrap()),
        vec![("a", 3), ("b", 3)]
    );

    // Mass-failure guard pauses the eviction.
    let guarded = snap.clone().with_mass_failure_guard(true);
    let d = schedule(&guarded, &w, Some(&p), Some(&before)).unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("b", 2), ("c", 2)]);
    assert_eq!(
        d.why("c").unwrap().reasons[0].reason,
        Reason::EvictionPaused
    );

    // c returns: without rebalanceOnRecovery nothing moves back...
    let after = prev(&[("a", 3), ("b", 3)]);
    let d = schedule(&fleet3(), &w, Some(&p), Some(&after)).unwrap();
    assert_eq!(targets(&d), vec![("a", 3), ("b", 3)]);
    // ...and says why c got none.
    assert_eq!(d.why("c").unwrap().reasons[0].reason, Reason::NotRebalanced);
    // ...but growth goes there first.
    let d = schedule(&fleet3(), &workload(7), Some(&p), Some(&after)).unwrap();
    assert_eq!(targets(&d), vec![("a", 3), ("b", 3), ("c", 1)]);
    // With rebalanceOnRecovery the even split comes back.
    let back = policy(
        json!({"replicaScheduling": {"type": "Divided"}, "failover": {"rebalanceOnRecovery": true}}),
    );
    let d = schedule(&fleet3(), &w, Some(&back), Some(&after)).unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("b", 2), ("c", 2)]);
}

#[test]
fn dynamic_weights_small_shift_moves_nothing() {
    let p = policy(json!({"replicaScheduling": {"type": "Divided", "division": "DynamicWeight"}}));
    let snap = Snapshot::new([cluster("a", "eu", 500), cluster("b", "eu", 500)], NOW);
    let d = schedule(&snap, &workload(100), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 50), ("b", 50)]);
    // Free capacity drifts 10%: previous placement stays (capacity includes held replicas).
    let drift = Snapshot::new([cluster("a", "eu", 520), cluster("b", "eu", 430)], NOW);
    let d2 = schedule(&drift, &workload(100), Some(&p), Some(&d.targets)).unwrap();
    assert_eq!(d2.targets, d.targets);
    // A large shift re-divides.
    let big = Snapshot::new([cluster("a", "eu", 900), cluster("b", "eu", 100)], NOW);
    let d3 = schedule(&big, &workload(100), Some(&p), Some(&d.targets)).unwrap();
    // Capacity counts held replicas: 900+50 vs 100+50.
    assert_eq!(targets(&d3), vec![("a", 86), ("b", 14)]);
}

#[test]
fn static_weights_unrelated_change_does_not_reshuffle() {
    let p = policy(json!({"replicaScheduling": {"type": "Divided"}}));
    let d = schedule(&fleet3(), &workload(10), Some(&p), None).unwrap();
    // Capacity elsewhere changes, another cluster filtered out by affinity joins: same result.
    let mut extra = cluster("z", "ap", 5);
    extra.metadata.labels.insert("env".into(), "dev".into());
    let p2 = policy(
        json!({"clusterAffinity": {"regions": ["eu", "us"]}, "replicaScheduling": {"type": "Divided"}}),
    );
    let snap = Snapshot::new(
        [
            cluster("c", "us", 70),
            cluster("a", "eu", 100),
            cluster("b", "eu", 300),
            extra,
        ],
        NOW,
    );
    let d2 = schedule(&snap, &workload(10), Some(&p2), Some(&d.targets)).unwrap();
    assert_eq!(d2.targets, d.targets);
}

#[test]
fn bounds_and_at_least_one() {
    let p = policy(json!({"replicaScheduling": {"type": "Divided",
        "weights": [{"clusterNames": ["a"], "weight": 10}, {"clusterNames": ["b", "c"], "weight": 1}],
        "clusters": [{"name": "a", "maxReplicas": 5}, {"name": "c", "minReplicas": 3}]}}));
    let d = schedule(&fleet3(), &workload(12), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 5), ("b", 4), ("c", 3)]);
    let one = policy(
        json!({"replicaScheduling": {"type": "Divided", "atLeastOnePerCluster": true,
        "weights": [{"clusterNames": ["a"], "weight": 100}, {"clusterNames": ["b", "c"], "weight": 1}]}}),
    );
    let d = schedule(&fleet3(), &workload(10), Some(&one), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 8), ("b", 1), ("c", 1)]);
}

#[test]
fn spread_constraints_in_pipeline() {
    let snap = Snapshot::new(
        [
            cluster("a", "eu", 100),
            cluster("b", "eu", 100),
            cluster("c", "us", 100),
            cluster("d", "ap", 10),
        ],
        NOW,
    );
    let p = policy(
        json!({"spreadConstraints": [{"spreadByField": "region", "minGroups": 1, "maxGroups": 2}],
        "replicaScheduling": {"type": "Divided"}}),
    );
    let d = schedule(&snap, &workload(6), Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("a", 2), ("b", 2), ("c", 2)]);
    assert_eq!(d.why("d").unwrap().outcome, ClusterOutcome::NotSelected);
    assert_eq!(
        d.why("d").unwrap().reasons[0].reason.code(),
        "SpreadConstraint"
    );
    let too_many =
        policy(json!({"spreadConstraints": [{"spreadByField": "region", "minGroups": 4}]}));
    let err = schedule(&snap, &workload(6), Some(&too_many), None).unwrap_err();
    assert_eq!(err.reason.code(), "SpreadConstraintUnsatisfiable");
    assert_eq!(err.clusters.len(), 4);
}

fn annotated(replicas: u32, prefs: &str) -> Workload {
    let mut w = workload(replicas);
    w.annotations
        .insert(PREFERENCES_ANNOTATION.into(), prefs.into());
    w
}

#[test]
fn federation_v1_annotation() {
    let snap = Snapshot::new(
        [
            cluster("A", "eu", 100),
            cluster("B", "eu", 100),
            cluster("C", "us", 100),
        ],
        NOW,
    );
    // Weights and max, no policy needed.
    let w = annotated(
        50,
        r#"{"clusters": {"A": {"weight": 10000, "maxReplicas": 10}, "B": {"weight": 1}, "C": {"weight": 1, "maxReplicas": 10}}}"#,
    );
    let d = schedule(&snap, &w, None, None).unwrap();
    assert_eq!(d.strategy, Chosen::FederationV1);
    assert_eq!(targets(&d), vec![("A", 10), ("B", 30), ("C", 10)]);
    // rebalance false keeps current replicas (v1: C had 30 → A 10, B 10, C 30).
    let w = annotated(
        50,
        r#"{"rebalance": false, "clusters": {"*": {"weight": 1}}}"#,
    );
    let d = schedule(&snap, &w, None, Some(&prev(&[("C", 30)]))).unwrap();
    assert_eq!(targets(&d), vec![("A", 10), ("B", 10), ("C", 30)]);
    // rebalance true does not.
    let w = annotated(
        51,
        r#"{"rebalance": true, "clusters": {"*": {"weight": 1}}}"#,
    );
    let d = schedule(&snap, &w, None, Some(&prev(&[("C", 30)]))).unwrap();
    assert_eq!(
        targets(&d).iter().map(|t| t.1).collect::<Vec<_>>(),
        vec![17, 17, 17]
    );
    // No entry and no "*": zero, with a reason; capacity caps and the rest is reported.
    let small = Snapshot::new(
        [
            cluster("A", "eu", 4),
            cluster("B", "eu", 100),
            cluster("C", "us", 100),
        ],
        NOW,
    );
    let w = annotated(10, r#"{"clusters": {"A": {"weight": 1}}}"#);
    let d = schedule(&small, &w, None, None).unwrap();
    assert_eq!(targets(&d), vec![("A", 4)]);
    assert_eq!(d.unschedulable.replicas, 6);
    assert_eq!(
        d.why("B").unwrap().reasons[0].reason,
        Reason::NotInPreferences
    );
    assert_eq!(
        d.why("A").unwrap().reasons[0].reason.code(),
        "InsufficientCapacity"
    );
    // A policy still filters; the annotation divides.
    let p = policy(json!({"clusterAffinity": {"exclude": ["A"]}}));
    let w = annotated(10, r#"{"clusters": {"*": {"weight": 1}}}"#);
    let d = schedule(&snap, &w, Some(&p), None).unwrap();
    assert_eq!(targets(&d), vec![("B", 5), ("C", 5)]);
    // Garbage is rejected with a reason.
    let err = schedule(&snap, &annotated(3, "{nope"), None, None).unwrap_err();
    assert!(matches!(
        err.reason,
        UnschedulableReason::InvalidPreferences(_)
    ));
}

#[test]
fn all_filtered_is_unschedulable_with_reasons() {
    let snap = Snapshot::new([offline(cluster("a", "eu", 100), 5)], NOW);
    let err = schedule(&snap, &workload(3), Some(&policy(json!({}))), None).unwrap_err();
    assert_eq!(err.reason, UnschedulableReason::NoCandidates);
    assert_eq!(err.clusters[0].reasons[0].reason.code(), "ClusterNotReady");
}

// ---- properties ----

#[derive(Debug, Clone)]
struct Spec {
    name: String,
    cpu: u64,
    weight: u32,
    min: Option<u32>,
    max: Option<u32>,
}

fn fleet_strategy() -> impl proptest::strategy::Strategy<Value = Vec<Spec>> {
    prop::collection::vec(
        (
            0u64..60,
            0u32..6,
            prop::option::of(0u32..5),
            prop::option::of(0u32..40),
        ),
        1..8,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (cpu, weight, min, max))| Spec {
                name: format!("c{i}"),
                cpu,
                weight,
                min,
                max,
            })
            .collect()
    })
}

fn divided_policy(specs: &[Spec], division: &str, at_least_one: bool) -> PropagationPolicy {
    let weights: Vec<_> = specs
        .iter()
        .map(|s| json!({"clusterNames": [s.name], "weight": s.weight}))
        .collect();
    let bounds: Vec<_> = specs
        .iter()
        .filter(|s| s.min.is_some() || s.max.is_some())
        .map(|s| json!({"name": s.name, "minReplicas": s.min.unwrap_or(0), "maxReplicas": s.max}))
        .collect();
    policy(
        json!({"replicaScheduling": {"type": "Divided", "division": division, "weights": weights,
        "clusters": bounds, "atLeastOnePerCluster": at_least_one}}),
    )
}

fn snapshot_of(specs: &[Spec]) -> Snapshot {
    Snapshot::new(specs.iter().map(|s| cluster(&s.name, "eu", s.cpu)), NOW)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn sums_bounds_capacity(specs in fleet_strategy(), total in 0u32..150, dynamic in any::<bool>(), one in any::<bool>()) {
        let p = divided_policy(&specs, if dynamic { "DynamicWeight" } else { "StaticWeight" }, one);
        let snap = snapshot_of(&specs);
        let Ok(d) = schedule(&snap, &workload(total), Some(&p), None) else {
            // Only when no cluster has room at all.
            prop_assert!(specs.iter().all(|s| s.cpu == 0));
            return Ok(());
        };
        prop_assert_eq!(d.placed() + u64::from(d.unschedulable.replicas), u64::from(total));
        let sum_min: u64 = specs.iter().filter(|s| s.cpu > 0).map(|s| u64::from(s.min.unwrap_or(0).max(u32::from(one)).min(s.max.unwrap_or(u32::MAX)).min(s.cpu as u32))).sum();
        for s in &specs {
            let got = d.why(&s.name).unwrap().replicas;
            prop_assert!(u64::from(got) <= s.cpu, "capacity exceeded on {}", s.name);
            if let Some(max) = s.max { prop_assert!(got <= max); }
            if s.cpu > 0 && u64::from(total) >= sum_min {
                let lo = s.min.unwrap_or(0).max(u32::from(one)).min(s.max.unwrap_or(u32::MAX)).min(s.cpu as u32);
                prop_assert!(got >= lo, "{} got {got} < min {lo}", s.name);
            }
        }
        if d.unschedulable.replicas > 0 {
            prop_assert!(!d.unschedulable.reasons.is_empty());
        }
    }

    #[test]
    fn static_weights_monotone(specs in fleet_strategy(), total in 0u32..150) {
        let p = divided_policy(&specs, "StaticWeight", false);
        let snap = snapshot_of(&specs);
        let (Ok(a), Ok(b)) = (
            schedule(&snap, &workload(total), Some(&p), None),
            schedule(&snap, &workload(total + 1), Some(&p), None),
        ) else { return Ok(()) };
        for s in &specs {
            let (x, y) = (a.why(&s.name).unwrap().replicas, b.why(&s.name).unwrap().replicas);
            prop_assert!(x <= y, "{}: {x} -> {y} when growing", s.name);
        }
    }

    #[test]
    fn deterministic_and_order_independent(specs in fleet_strategy(), total in 0u32..150, dynamic in any::<bool>(), seed in any::<u64>()) {
        let p = divided_policy(&specs, if dynamic { "DynamicWeight" } else { "StaticWeight" }, false);
        let a = schedule(&snapshot_of(&specs), &workload(total), Some(&p), None);
        let mut shuffled = specs.clone();
        let len = shuffled.len();
        for i in 0..len {
            shuffled.swap(i, (seed.rotate_left(i as u32) as usize) % len);
        }
        let b = schedule(&snapshot_of(&shuffled), &workload(total), Some(&p), None);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn rescheduling_with_own_result_moves_nothing(specs in fleet_strategy(), total in 1u32..150, dynamic in any::<bool>()) {
        let p = divided_policy(&specs, if dynamic { "DynamicWeight" } else { "StaticWeight" }, false);
        let Ok(first) = schedule(&snapshot_of(&specs), &workload(total), Some(&p), None) else { return Ok(()) };
        // The next snapshot sees our replicas as allocated (1 CPU each).
        let after: Vec<Spec> = specs
            .iter()
            .map(|s| Spec { cpu: s.cpu - u64::from(first.why(&s.name).unwrap().replicas), ..s.clone() })
            .collect();
        let again = schedule(&snapshot_of(&after), &workload(total), Some(&p), Some(&first.targets)).unwrap();
        prop_assert_eq!(again.targets, first.targets);
    }

    #[test]
    fn fedv1_sum_and_capacity(specs in fleet_strategy(), total in 0u32..150, rebalance in any::<bool>()) {
        let clusters: serde_json::Map<String, serde_json::Value> = specs.iter().map(|s| {
            (s.name.clone(), json!({"weight": s.weight, "minReplicas": s.min.unwrap_or(0), "maxReplicas": s.max}))
        }).collect();
        let w = annotated(total, &json!({"rebalance": rebalance, "clusters": clusters}).to_string());
        let Ok(d) = schedule(&snapshot_of(&specs), &w, None, None) else { return Ok(()) };
        prop_assert_eq!(d.placed() + u64::from(d.unschedulable.replicas), u64::from(total));
        for s in &specs {
            prop_assert!(u64::from(d.why(&s.name).unwrap().replicas) <= s.cpu);
        }
    }
}

#[test]
fn a_job_is_divided_by_its_parallelism_where_jobs_are_served() {
    let serving_jobs = |name: &str| {
        let mut c = cluster(name, "eu", 100);
        c.status.api_enablements.push(
            serde_json::from_value(json!({"groupVersion": "batch/v1", "resources": ["jobs"]}))
                .unwrap(),
        );
        c
    };
    let fleet = Snapshot::new(
        [
            serving_jobs("a"),
            serving_jobs("b"),
            cluster("c", "us", 100),
        ],
        NOW,
    );
    let job = Workload::from_object(&json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "crunch", "namespace": "shop"},
        "spec": {"parallelism": 4, "completions": 8, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}
    }))
    .unwrap();
    let p: PropagationPolicy = serde_json::from_value(json!({
        "metadata": {"name": "jobs", "namespace": "shop"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "batch/v1", "kind": "Job"}],
            "placement": {"replicaScheduling": {"type": "Divided", "division": "StaticWeight"}}
        }
    }))
    .unwrap();
    let d = schedule(&fleet, &job, Some(&p), None).unwrap();
    // c serves no batch/v1 jobs: the parallelism goes to a and b.
    assert_eq!(targets(&d), vec![("a", 2), ("b", 2)]);
}

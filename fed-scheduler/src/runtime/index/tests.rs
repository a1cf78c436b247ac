//! Requeue selection and snapshot sharing.

use serde_json::json;

use super::*;
use crate::runtime::key::WorkloadKind;

fn cluster(name: &str, ready: &str, allocated_cpu: &str) -> Cluster {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"env": "prod"}},
        "spec": {"apiEndpoint": format!("https://{name}.test:6443"), "region": "eu"},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "lastProbeTime": "2025-01-01T00:00:00Z",
                            "lastTransitionTime": "2025-01-01T00:00:00Z"}],
            "apiEnablements": [{"groupVersion": "apps/v1", "resources": ["deployments"]}],
            "nodes": {"total": 3, "ready": 3},
            "resourceSummary": {
                "allocatable": {"cpu": "12", "memory": "24Gi", "pods": "330"},
                "allocated": {"cpu": allocated_cpu, "memory": "0", "pods": "0"}
            }
        }
    }))
    .expect("cluster")
}

fn key(name: &str) -> WorkloadKey {
    WorkloadKey::new(WorkloadKind::Deployment, "shop", name)
}

fn entry(name: &str, labels: &[(&str, &str)]) -> WorkloadEntry {
    WorkloadEntry {
        uid: format!("uid-{name}"),
        workload: Ok(Workload {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            replicas: 3,
            ..Default::default()
        }),
    }
}

fn policy(name: &str, selector: serde_json::Value) -> PropagationPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"resourceSelectors": [selector]}
    }))
    .expect("policy")
}

#[test]
fn classifies_cluster_changes() {
    let base = cluster("a", "True", "1");
    let mut probed = base.clone();
    probed.status.conditions[0].last_probe_time = Some("2025-01-01T00:00:09Z".into());
    let mut offline = base.clone();
    offline.status.conditions[0].status = "False".into();
    let mut relabelled = base.clone();
    relabelled
        .metadata
        .labels
        .insert("tier".into(), "gold".into());
    let mut tainted = base.clone();
    tainted.spec.taints.push(crate::Taint {
        key: "maintenance".into(),
        value: None,
        effect: crate::TaintEffect::NoSchedule,
    });
    let mut shrunk = base.clone();
    if let Some(r) = shrunk.status.resource_summary.as_mut() {
        r.allocatable.cpu = Some("8".into());
    }
    let busier = cluster("a", "True", "2");
    let cases = [
        (
            "probe time only",
            Some(&base),
            Some(&probed),
            ClusterChange::Unchanged,
        ),
        (
            "offline",
            Some(&base),
            Some(&offline),
            ClusterChange::Eligibility,
        ),
        (
            "labels",
            Some(&base),
            Some(&relabelled),
            ClusterChange::Eligibility,
        ),
        (
            "taint",
            Some(&base),
            Some(&tainted),
            ClusterChange::Eligibility,
        ),
        (
            "node lost",
            Some(&base),
            Some(&shrunk),
            ClusterChange::Eligibility,
        ),
        (
            "pods came and went",
            Some(&base),
            Some(&busier),
            ClusterChange::Allocated,
        ),
        ("joined", None, Some(&base), ClusterChange::Eligibility),
        ("left", Some(&base), None, ClusterChange::Eligibility),
    ];
    for (what, old, new, want) in cases {
        assert_eq!(classify(old, new), want, "{what}");
    }
}

#[test]
fn cluster_changes_requeue_the_right_workloads() {
    let idx = Index::new();
    idx.apply_workload(key("web"), entry("web", &[]));
    idx.apply_workload(key("big"), entry("big", &[]));
    assert_eq!(
        idx.apply_cluster("a", Some(cluster("a", "True", "1"))),
        Requeue::All { first: vec![] }
    );
    // Wiggles concern nobody until a workload is short of room.
    assert_eq!(
        idx.apply_cluster("a", Some(cluster("a", "True", "2"))),
        Requeue::Nothing
    );
    idx.record(&key("big"), vec![TargetCluster::new("a", 1)], true);
    idx.record(&key("web"), vec![TargetCluster::new("a", 3)], false);
    assert_eq!(
        idx.apply_cluster("a", Some(cluster("a", "True", "3"))),
        Requeue::Keys(vec![key("big")])
    );
    assert_eq!(
        idx.apply_cluster("a", Some(cluster("a", "True", "3"))),
        Requeue::Nothing
    );
    // Going offline: everyone, those with replicas there first.
    assert_eq!(
        idx.apply_cluster("a", Some(cluster("a", "False", "3"))),
        Requeue::All {
            first: vec![key("big"), key("web")]
        }
    );
    idx.record(&key("big"), vec![TargetCluster::new("b", 1)], true);
    assert_eq!(
        idx.apply_cluster("a", None),
        Requeue::All {
            first: vec![key("web")]
        }
    );
    assert_eq!(idx.apply_cluster("zz", None), Requeue::Nothing);
}

#[test]
fn workload_status_noise_is_not_a_change() {
    let idx = Index::new();
    assert!(idx.apply_workload(key("web"), entry("web", &[])));
    assert!(!idx.apply_workload(key("web"), entry("web", &[])));
    assert!(idx.apply_workload(key("web"), entry("web", &[("tier", "front")])));
    idx.delete_workload(&key("web"));
    assert!(idx.workload(&key("web")).is_none());
}

#[test]
fn policy_changes_requeue_what_they_select() {
    let idx = Index::new();
    idx.apply_workload(key("front"), entry("front", &[("tier", "front")]));
    idx.apply_workload(key("back"), entry("back", &[("tier", "back")]));
    let mut other_ns = entry("x", &[("tier", "front")]);
    if let Ok(w) = other_ns.workload.as_mut() {
        w.namespace = "other".into();
    }
    idx.apply_workload(
        WorkloadKey::new(WorkloadKind::Deployment, "other", "x"),
        other_ns,
    );

    let by_label = |tier: &str| {
        policy(
            "p",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"tier": tier}}}),
        )
    };
    assert_eq!(
        idx.apply_policy("shop", "p", Some(by_label("front"))),
        vec![key("front")]
    );
    assert_eq!(idx.policies("shop").len(), 1);
    assert!(
        idx.apply_policy("shop", "p", Some(by_label("front")))
            .is_empty(),
        "unchanged"
    );
    // Moving the selector concerns the old and the new selection.
    assert_eq!(
        idx.apply_policy("shop", "p", Some(by_label("back"))),
        vec![key("back"), key("front")]
    );
    assert_eq!(idx.apply_policy("shop", "p", None), vec![key("back")]);
    assert!(idx.policies("shop").is_empty());
    assert!(idx.policies("nowhere").is_empty());
}

#[test]
fn snapshots_are_shared_per_second_and_generation() {
    let idx = Index::new();
    idx.apply_cluster("a", Some(cluster("a", "True", "1")));
    let s1 = idx.snapshot(100, false);
    assert!(Arc::ptr_eq(&s1, &idx.snapshot(100, false)));
    assert!(
        !Arc::ptr_eq(&s1, &idx.snapshot(100, true)),
        "guarded is its own"
    );
    assert!(
        !Arc::ptr_eq(&s1, &idx.snapshot(101, false)),
        "the clock moved"
    );
    let s2 = idx.snapshot(101, false);
    idx.apply_cluster("b", Some(cluster("b", "True", "1")));
    let s3 = idx.snapshot(101, false);
    assert!(!Arc::ptr_eq(&s2, &s3));
    assert_eq!(s3.len(), 2);
}

#[test]
fn placement_observations() {
    let idx = Index::new();
    idx.apply_workload(key("web"), entry("web", &[]));
    let ours = vec![TargetCluster::new("a", 3)];
    assert!(
        !idx.observe_placement(&key("web"), Some(ours.clone())),
        "not decided yet"
    );
    idx.record(&key("web"), ours.clone(), false);
    assert!(!idx.observe_placement(&key("web"), Some(ours)));
    assert!(idx.observe_placement(&key("web"), Some(vec![TargetCluster::new("b", 3)])));
    assert!(
        idx.observe_placement(&key("web"), None),
        "deleted: recreate"
    );
    assert!(!idx.observe_placement(&key("gone"), None));
}

#[test]
fn subscribers_are_told_of_policy_and_cluster_changes_only() {
    let idx = Index::new();
    let mut rx = idx.subscribe();
    assert!(!rx.has_changed().expect("open"));
    let p = policy("p", json!({"apiVersion": "v1", "kind": "ServiceAccount"}));

    idx.apply_policy("shop", "p", Some(p.clone()));
    assert!(rx.has_changed().expect("open"), "a new policy");
    assert_eq!(*rx.borrow_and_update(), idx.generations());
    idx.apply_policy("shop", "p", Some(p.clone()));
    assert!(!rx.has_changed().expect("open"), "the same policy again");

    assert!(idx.apply_cluster_policy("all", Some(p)));
    assert!(
        rx.has_changed().expect("open"),
        "a ClusterPropagationPolicy"
    );
    rx.mark_unchanged();

    idx.apply_cluster("a", Some(cluster("a", "True", "1")));
    assert!(rx.has_changed().expect("open"), "a cluster joined");
    rx.mark_unchanged();
    let mut probed = cluster("a", "True", "1");
    probed.status.conditions[0].last_probe_time = Some("2025-01-01T00:00:09Z".into());
    idx.apply_cluster("a", Some(probed));
    assert!(
        !rx.has_changed().expect("open"),
        "a probe time is no change"
    );
    idx.apply_workload(key("web"), entry("web", &[]));
    assert!(
        !rx.has_changed().expect("open"),
        "workloads are not the copy loop's"
    );
    idx.apply_cluster("a", Some(cluster("a", "False", "1")));
    assert!(rx.has_changed().expect("open"), "a cluster went Offline");
    assert_eq!(*rx.borrow_and_update(), idx.generations());
}

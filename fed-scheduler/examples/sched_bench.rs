//! Times one full decision (filter + score + select + divide) for 1,000 replicas over 100
//! and 1,000 clusters, per strategy; prints median and p99.
//!
//! `cargo run --release -p fed-scheduler --example sched_bench`

use std::hint::black_box;
use std::time::{Duration, Instant};

use fed_scheduler::{
    PREFERENCES_ANNOTATION, PodRequests, PropagationPolicy, Snapshot, TargetCluster, Workload,
    schedule,
};
use serde_json::json;

const REPLICAS: u32 = 1000;

fn fleet(n: usize) -> Snapshot {
    let clusters = (0..n).map(|i| {
        let region = ["eu", "us", "ap", "sa"][i % 4];
        let tier = ["gold", "silver", "bronze"][i % 3];
        serde_json::from_value(json!({
            "metadata": {"name": format!("member-{i:04}"), "labels": {"env": "prod", "tier": tier}},
            "spec": {"apiEndpoint": format!("https://member-{i:04}.test:6443"), "region": region, "zone": format!("{region}-{}", i % 3)},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "apiEnablements": [{"groupVersion": "apps/v1", "resources": ["deployments", "replicasets"]}],
                "nodes": {"total": 50, "ready": 50},
                "resourceSummary": {
                    "allocatable": {"cpu": "2000", "memory": "8000Gi", "pods": "5500"},
                    "allocated": {"cpu": format!("{}m", 100_000 + (i * 7919) % 900_000), "memory": "1000Gi", "pods": "300"},
                    "largestFree": {"cpu": "30", "memory": "120Gi"}
                }
            }
        }))
        .expect("valid cluster")
    });
    Snapshot::new(clusters, 1_750_000_000)
}

fn policy(placement: serde_json::Value) -> PropagationPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}], "placement": placement}
    }))
    .expect("valid policy")
}

fn workload(annotation: Option<&str>) -> Workload {
    let mut w = Workload {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "bench".into(),
        name: "web".into(),
        replicas: REPLICAS,
        requests: PodRequests::parse("500m", "1Gi").expect("valid requests"),
        ..Default::default()
    };
    if let Some(a) = annotation {
        w.annotations
            .insert(PREFERENCES_ANNOTATION.into(), a.into());
    }
    w
}

fn time(
    label: &str,
    snap: &Snapshot,
    w: &Workload,
    p: Option<&PropagationPolicy>,
    previous: Option<&[TargetCluster]>,
    iters: usize,
) {
    // Warm up and check it places everything.
    let d = schedule(snap, w, p, previous).expect("schedulable");
    assert_eq!(d.unschedulable.replicas, 0, "{label}: {}", d.message());
    let mut samples: Vec<Duration> = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        black_box(schedule(black_box(snap), black_box(w), p, previous).ok());
        samples.push(t.elapsed());
    }
    samples.sort();
    let median = samples[iters / 2];
    let p99 = samples[(iters * 99 / 100).min(iters - 1)];
    println!(
        "{:>5} clusters  {label:<22} median {:>8.1} µs   p99 {:>8.1} µs   ({} targets)",
        snap.len(),
        median.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        d.targets.len()
    );
}

fn main() {
    let static_p = policy(
        json!({"replicaScheduling": {"type": "Divided", "division": "StaticWeight", "weights": [
        {"labelSelector": {"matchLabels": {"tier": "gold"}}, "weight": 3},
        {"labelSelector": {"matchLabels": {"tier": "silver"}}, "weight": 2},
        {"labelSelector": {"matchLabels": {"tier": "bronze"}}, "weight": 1}]}}),
    );
    let dynamic_p =
        policy(json!({"replicaScheduling": {"type": "Divided", "division": "DynamicWeight"}}));
    let dup_p = policy(json!({"replicaScheduling": {"type": "Duplicated"}}));
    let plain = workload(None);
    let v1 = workload(Some(
        r#"{"rebalance": true, "clusters": {"member-0001": {"weight": 5, "minReplicas": 3}, "member-0002": {"weight": 2, "maxReplicas": 4}, "*": {"weight": 1}}}"#,
    ));

    for (n, iters) in [(100, 5000), (1000, 1000)] {
        let snap = fleet(n);
        time(
            "static weights",
            &snap,
            &plain,
            Some(&static_p),
            None,
            iters,
        );
        time(
            "dynamic weights",
            &snap,
            &plain,
            Some(&dynamic_p),
            None,
            iters,
        );
        time("duplicated", &snap, &plain, Some(&dup_p), None, iters);
        time("fedv1 annotation", &snap, &v1, None, None, iters);
        let prev = schedule(&snap, &plain, Some(&dynamic_p), None)
            .expect("schedulable")
            .targets;
        time(
            "dynamic + previous",
            &snap,
            &plain,
            Some(&dynamic_p),
            Some(&prev),
            iters,
        );
    }
}

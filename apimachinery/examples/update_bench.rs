//! The field manager's update path on a 3-container Deployment that carries the
//! `managedFields` of a create, an apply and a status writer: the writes the federation
//! and its members make most (a create, a scale, an image change, a status update, an
//! unchanged write-back), per-operation median and mean, against a plain clone of the
//! object.
//!
//! `cargo run --release -p apimachinery --example update_bench [iterations]`

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use apimachinery::Definitions;
use apimachinery::managed::{FieldManager, ObjectType, ResetFields};
use serde_json::{Value, json};

const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";

fn definitions() -> Result<Definitions> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../apiserver/openapi/k8s-definitions.json"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    Ok(Definitions::new(serde_json::from_str(&text)?))
}

fn container(name: &str, image: &str, port: u16) -> Value {
    json!({
        "name": name,
        "image": image,
        "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
        "env": [{"name": "MODE", "value": "prod"}, {"name": "REGION", "value": "eu-west-1"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 5},
        "terminationMessagePath": "/dev/termination-log",
        "imagePullPolicy": "IfNotPresent"
    })
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web", "tier": "front"},
            "annotations": {"meridian.io/placement": "p1"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [
                    container("web", image, 8080),
                    container("sidecar", "envoy:1.30", 9901),
                    container("metrics", "exporter:0.9", 9100),
                ], "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}
            }
        }
    })
}

fn status(ready: i64) -> Value {
    json!({"replicas": 3, "readyReplicas": ready, "availableReplicas": ready, "updatedReplicas": 3,
        "observedGeneration": 1, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
}

fn measure(iterations: usize, mut op: impl FnMut(usize)) -> (Duration, Duration) {
    for i in 0..iterations / 10 {
        op(i);
    }
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let start = Instant::now();
        op(i);
        samples.push(start.elapsed());
    }
    samples.sort();
    let total: Duration = samples.iter().sum();
    (samples[samples.len() / 2], total / samples.len() as u32)
}

/// Prints a line; with `floor`, also the median above it (what the update itself costs).
fn report(name: &str, (median, mean): (Duration, Duration), floor: Option<Duration>) {
    let net = floor.map_or(String::new(), |f| {
        format!(
            "  update alone {:>5.1} µs",
            (median.as_secs_f64() - f.as_secs_f64()) * 1e6
        )
    });
    println!(
        "{name:<30} median {:>6.1} µs  mean {:>6.1} µs{net}",
        median.as_secs_f64() * 1e6,
        mean.as_secs_f64() * 1e6
    );
}

fn main() -> Result<()> {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let only = std::env::args().nth(2);
    let defs = definitions()?;
    let ty = ObjectType::from_definitions(&defs, DEPLOYMENT)?;
    let fm = FieldManager::new(ty, "apps/v1", "Deployment")
        .with_reset_fields(ResetFields::paths(&["status"]));
    let status_fm = fm.for_subresource("status", ResetFields::paths(&["spec", "metadata.labels"]));
    let t0 = jiff::Timestamp::from_second(1_700_000_000)?;

    // Created by one manager, given a status by another, scaled by a third.
    let mut live = deployment(2, "web:1.0");
    fm.update(None, &mut live, "fed-controllers", t0);
    let mut with_status = live.clone();
    with_status["status"] = status(2);
    status_fm.update(Some(&live), &mut with_status, "kube-controller-manager", t0);
    let mut scaled = with_status.clone();
    scaled["spec"]["replicas"] = json!(3);
    fm.update(Some(&with_status), &mut scaled, "kubectl-scale", t0);
    let live = scaled;

    let variant = |f: &dyn Fn(&mut Value)| {
        let mut v = live.clone();
        f(&mut v);
        v
    };
    let writes: [(&str, &FieldManager, Value); 5] = [
        (
            "scale (spec.replicas)",
            &fm,
            variant(&|v| v["spec"]["replicas"] = json!(4)),
        ),
        (
            "image change",
            &fm,
            variant(&|v| {
                v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("web:1.1")
            }),
        ),
        (
            "label added, env removed",
            &fm,
            variant(&|v| {
                v["metadata"]["labels"]["track"] = json!("stable");
                v["spec"]["template"]["spec"]["containers"][1]["env"]
                    .as_array_mut()
                    .unwrap()
                    .pop();
            }),
        ),
        (
            "status update",
            &status_fm,
            variant(&|v| v["status"] = status(3)),
        ),
        ("unchanged write-back", &fm, live.clone()),
    ];

    println!("{iterations} writes per line\n");
    let floor = measure(iterations, |_| {
        black_box(writes[0].2.clone());
    });
    report("clone of the object (floor)", floor, None);
    // A create: every field is new and its writer's, with no earlier object to compare.
    let mut created = live.clone();
    if let Some(meta) = created["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    if only.as_deref().is_none_or(|o| "create".starts_with(o)) {
        report(
            "create",
            measure(iterations, |_| {
                let mut out = created.clone();
                fm.update(None, &mut out, "fed-controllers", t0);
                black_box(out);
            }),
            Some(floor.0),
        );
    }
    for (name, manager, new) in &writes {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        report(
            name,
            measure(iterations, |_| {
                let mut out = new.clone();
                manager.update(Some(&live), &mut out, "fed-controllers", t0);
                black_box(out);
            }),
            Some(floor.0),
        );
    }
    Ok(())
}

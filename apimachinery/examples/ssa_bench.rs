//! Server-side apply against strategic merge patch on a 3-container Deployment: the same
//! change (one image) written both ways, per-operation median and p99, plus the size
//! `managedFields` adds to a stored object.
//!
//! `cargo run --release -p apimachinery --example ssa_bench [iterations]`

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use apimachinery::managed::{FieldManager, ObjectType, ResetFields};
use apimachinery::{Definitions, Packer, strategic_merge_patch};
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
        "ports": [{"containerPort": port, "name": "http"}],
        "env": [{"name": "MODE", "value": "prod"}, {"name": "REGION", "value": "eu-west-1"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 5}
    })
}

/// The applied configuration, with `image` for the first container.
fn config(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [
                    container("web", image, 8080),
                    container("sidecar", "envoy:1.30", 9901),
                    container("metrics", "exporter:0.9", 9100),
                ]}
            }
        }
    })
}

/// The same change as a strategic merge patch.
fn patch(image: &str) -> Value {
    json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}})
}

struct Stats {
    median: Duration,
    p99: Duration,
    mean: Duration,
}

fn measure(iterations: usize, mut op: impl FnMut(usize)) -> Stats {
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
    Stats {
        median: samples[samples.len() / 2],
        p99: samples[samples.len() * 99 / 100],
        mean: total / samples.len() as u32,
    }
}

fn report(name: &str, s: &Stats, base: Option<&Stats>) {
    let ratio = base.map_or(String::new(), |b| {
        format!(
            "  ({:.2}x median, {:.2}x mean)",
            ratio(s.median, b.median),
            ratio(s.mean, b.mean)
        )
    });
    println!(
        "{name:<44} median {:>7.1} µs  p99 {:>7.1} µs  mean {:>7.1} µs{ratio}",
        micros(s.median),
        micros(s.p99),
        micros(s.mean)
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn main() -> Result<()> {
    let iterations: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let defs = definitions()?;
    let ty = ObjectType::from_definitions(&defs, DEPLOYMENT)?;
    let fm = FieldManager::new(ty, "apps/v1", "Deployment")
        .with_reset_fields(ResetFields::paths(&["status"]));
    let status_fm = fm.for_subresource("status", ResetFields::paths(&["spec", "metadata.labels"]));
    let t0 = jiff::Timestamp::from_second(1_700_000_000)?;
    let images = ["registry.example/web:1.0.0", "registry.example/web:1.0.1"];

    // Two live objects, one per image, each applied by kubectl and given a status by the
    // controller, so every timed write is a real change of one image.
    let mut live = Vec::new();
    for image in images {
        let mut obj = fm
            .apply(None, &config(images[0]), "kubectl", false, t0)?
            .object;
        let mut with_status = obj.clone();
        with_status["status"] = json!({"replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
            "observedGeneration": 1, "conditions": [{"type": "Available", "status": "True"}]});
        status_fm.update(Some(&obj), &mut with_status, "kube-controller-manager", t0);
        obj = fm
            .apply(Some(&with_status), &config(image), "kubectl", false, t0)?
            .object;
        live.push(obj);
    }
    let configs = [config(images[0]), config(images[1])];
    let patches = [patch(images[0]), patch(images[1])];
    let live_text: Vec<String> = live
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    let config_text: Vec<String> = configs
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    let patch_text: Vec<String> = patches
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;

    println!("3-container Deployment, {iterations} writes per line, one image changed each time\n");
    let smp = measure(iterations, |i| {
        let out =
            strategic_merge_patch(&live[i % 2], &patches[(i + 1) % 2], &defs, DEPLOYMENT).unwrap();
        black_box(out);
    });
    report("strategic merge patch", &smp, None);
    let smp_tracked = measure(iterations, |i| {
        let mut out =
            strategic_merge_patch(&live[i % 2], &patches[(i + 1) % 2], &defs, DEPLOYMENT).unwrap();
        fm.update(Some(&live[i % 2]), &mut out, "kubectl-patch", t0);
        black_box(out);
    });
    report(
        "strategic merge patch + managedFields update",
        &smp_tracked,
        Some(&smp),
    );
    let apply = measure(iterations, |i| {
        let out = fm
            .apply(
                Some(&live[i % 2]),
                &configs[(i + 1) % 2],
                "kubectl",
                false,
                t0,
            )
            .unwrap();
        black_box(out);
    });
    report("server-side apply", &apply, Some(&smp));
    report(
        "  vs strategic merge patch + update",
        &apply,
        Some(&smp_tracked),
    );
    let noop = measure(iterations, |i| {
        let out = fm
            .apply(Some(&live[i % 2]), &configs[i % 2], "kubectl", false, t0)
            .unwrap();
        black_box(out);
    });
    report("server-side apply, no change", &noop, Some(&smp));

    println!("\nwith JSON parsing of the stored object and the body, and the result written out:");
    let smp_json = measure(iterations, |i| {
        let old: Value = serde_json::from_str(&live_text[i % 2]).unwrap();
        let p: Value = serde_json::from_str(&patch_text[(i + 1) % 2]).unwrap();
        let mut out = strategic_merge_patch(&old, &p, &defs, DEPLOYMENT).unwrap();
        fm.update(Some(&old), &mut out, "kubectl-patch", t0);
        black_box(serde_json::to_vec(&out).unwrap());
    });
    report("strategic merge patch + update", &smp_json, None);
    let apply_json = measure(iterations, |i| {
        let old: Value = serde_json::from_str(&live_text[i % 2]).unwrap();
        let c: Value = serde_json::from_str(&config_text[(i + 1) % 2]).unwrap();
        let out = fm.apply(Some(&old), &c, "kubectl", false, t0).unwrap();
        black_box(serde_json::to_vec(&out.object).unwrap());
    });
    report("server-side apply", &apply_json, Some(&smp_json));

    // What managedFields cost a stored object, as text and as the caches pack it: each
    // kind's packer compresses against the first object it saw, here another Deployment.
    let strip = |v: &Value| {
        let mut v = v.clone();
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        serde_json::to_vec(&v).unwrap()
    };
    let other = {
        let mut c = config("registry.example/api:2.3.1");
        c["metadata"]["name"] = json!("api");
        c["metadata"]["labels"]["app"] = json!("api");
        fm.apply(None, &c, "helm", false, t0)?.object
    };
    let packed = |first: &[u8], text: &[u8]| {
        let packer = Packer::for_kind("Deployment");
        packer.pack(first);
        packer.pack(text).packed_len()
    };
    let (with_text, without_text) = (serde_json::to_vec(&live[0])?, strip(&live[0]));
    let with_packed = packed(&serde_json::to_vec(&other)?, &with_text);
    let without_packed = packed(&strip(&other), &without_text);
    let entries = live[0]["metadata"]["managedFields"]
        .as_array()
        .map_or(0, Vec::len);
    println!(
        "\nstored object ({entries} managedFields entries): {} bytes without them, {} with (+{:.0}%); \
         packed: {} and {} bytes (+{:.0}%)",
        without_text.len(),
        with_text.len(),
        100.0 * (with_text.len() as f64 / without_text.len() as f64 - 1.0),
        without_packed,
        with_packed,
        100.0 * (with_packed as f64 / without_packed as f64 - 1.0)
    );
    Ok(())
}

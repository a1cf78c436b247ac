//! End-to-end scheduler benchmark against a real federation API server (release build,
//! embedded store, HTTPS): creates N Ready Clusters and M Deployments spread over
//! policies, runs the scheduling loop in-process and prints
//! - throughput: workloads per second until every Placement exists (and has its status);
//! - failover: time from one cluster's status turning Offline past its toleration until
//!   every Placement that used it has been rewritten without it.
//!
//! ```text
//! cargo build --release -p federation-apiserver
//! cargo run --release -p fed-scheduler --example e2e_bench [-- --clusters 10 --workloads 10000]
//! ```

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Context;
use fed_scheduler::runtime::metrics::Metrics;
use fed_scheduler::runtime::{self, Rate};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::{KUBECONFIG_LINE, Proc, start_federation_apiserver};
use meridian_runtime::metrics::Exposition as _;
use serde_json::json;
use tokio::sync::mpsc;

/// Policies (each over three neighbouring clusters) the workloads are spread across.
const GROUPS: usize = 10;
const TOLERATION: u64 = 60;

fn arg(name: &str, default: usize) -> anyhow::Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .context("missing value")?
            .parse()
            .with_context(|| name.to_string()),
        None => Ok(default),
    }
}

/// The release federation-apiserver beside this example (data and output in `<dir>/data`),
/// once it printed its kubeconfig.
fn start_server(dir: &std::path::Path) -> anyhow::Result<(Proc, PathBuf)> {
    let server = start_federation_apiserver(&dir.join("data"), &[], KUBECONFIG_LINE)?;
    let kubeconfig = server
        .ready_value()
        .map(PathBuf::from)
        .context("federation-apiserver's kubeconfig line")?;
    Ok((server, kubeconfig))
}

fn rfc3339(secs_ago: u64) -> String {
    let t = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(secs_ago as i64);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn cluster_status(ready: bool, since: &str) -> serde_json::Value {
    json!({"status": {
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "reason": if ready { "ProbeSucceeded" } else { "ProbeFailed" },
                        "lastTransitionTime": since}],
        "apiEnablements": [{"groupVersion": "apps/v1", "resources": ["deployments", "replicasets"]}],
        "nodes": {"total": 100, "ready": 100},
        "resourceSummary": {
            "allocatable": {"cpu": "10000", "memory": "40000Gi", "pods": "100000"},
            "allocated": {"cpu": "0", "memory": "0", "pods": "0"}
        }
    }})
}

/// Runs `f` over `items` with `n` in flight.
async fn concurrently<T, F, Fut>(items: Vec<T>, n: usize, f: F) -> anyhow::Result<()>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures::stream::iter(items.into_iter().map(f))
        .buffer_unordered(n)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let clusters = arg("--clusters", 10)?.max(3);
    let workloads = arg("--workloads", 10_000)?;
    let workers = arg("--workers", 64)?;
    let dir = std::env::temp_dir().join(format!("e2e-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (_server, kubeconfig) = start_server(&dir)?;
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(cfg)?;

    // Fleet: N Ready clusters (status written through /status, as the cluster controller does).
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "bench"}}))?,
    )
    .await?;
    let capi: Api<fed_api::Cluster> = Api::all(client.clone());
    let names: Vec<String> = (0..clusters).map(|i| format!("member-{i:03}")).collect();
    for name in &names {
        let c: fed_api::Cluster = serde_json::from_value(json!({
            "apiVersion": fed_api::API_VERSION, "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"apiEndpoint": "https://127.0.0.1:1", "region": "bench"}
        }))?;
        capi.create(&PostParams::default(), &c).await?;
        capi.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(cluster_status(true, &rfc3339(3600))),
        )
        .await?;
    }
    // Policies: group g places over clusters g, g+1, g+2 (mod N) with equal weights.
    let papi: Api<fed_api::PropagationPolicy> = Api::namespaced(client.clone(), "bench");
    for g in 0..GROUPS {
        let over: Vec<&String> = (0..3).map(|k| &names[(g + k) % clusters]).collect();
        let p: fed_api::PropagationPolicy = serde_json::from_value(json!({
            "apiVersion": fed_api::API_VERSION, "kind": "PropagationPolicy",
            "metadata": {"name": format!("group-{g}"), "namespace": "bench"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                       "labelSelector": {"matchLabels": {"group": format!("g{g}")}}}],
                "placement": {
                    "clusterAffinity": {"clusterNames": over},
                    "replicaScheduling": {"type": "Divided"},
                    "failover": {"tolerationSeconds": TOLERATION}
                }
            }
        }))?;
        papi.create(&PostParams::default(), &p).await?;
    }
    // Workloads, created before the scheduler starts so only scheduling is timed.
    let dapi: Api<Deployment> = Api::namespaced(client.clone(), "bench");
    let t = Instant::now();
    concurrently((0..workloads).collect(), 64, |i| {
        let dapi = dapi.clone();
        async move {
            let d: Deployment = serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("app-{i:05}"), "labels": {"group": format!("g{}", i % GROUPS)}},
                "spec": {"replicas": 6, "selector": {"matchLabels": {"app": format!("app-{i:05}")}},
                         "template": {"metadata": {"labels": {"app": format!("app-{i:05}")}},
                                      "spec": {"containers": [{"name": "c", "image": "x",
                                               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}
            }))?;
            dapi.create(&PostParams::default(), &d).await?;
            Ok(())
        }
    })
    .await?;
    println!(
        "setup: {clusters} clusters, {GROUPS} policies, {workloads} deployments created in {:.1?}",
        t.elapsed()
    );

    // Observe Placements through a watch of our own.
    let (tx, mut rx) = mpsc::unbounded_channel::<fed_api::Placement>();
    let pl: Api<fed_api::Placement> = Api::namespaced(client.clone(), "bench");
    tokio::spawn(async move {
        let mut rv = "0".to_string();
        loop {
            let Ok(stream) = pl.watch(&WatchParams::default().timeout(290), &rv).await else {
                continue;
            };
            let mut stream = Box::pin(stream);
            while let Ok(Some(ev)) = stream.try_next().await {
                match ev {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                        if let Some(v) = p.metadata.resource_version.clone() {
                            rv = v;
                        }
                        if tx.send(p).is_err() {
                            return;
                        }
                    }
                    WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                    _ => {}
                }
            }
        }
    });

    let config = runtime::Config {
        workers,
        // The failover figure measures the loop, not the safety throttle (100/s by default).
        eviction_rate: Rate::per_second(1e9),
        eviction_burst: u32::MAX,
        ..runtime::Config::default()
    };
    let metrics = Arc::new(Metrics::new());
    let start = Instant::now();
    let sched = tokio::spawn(runtime::run(
        client.clone(),
        config,
        metrics.clone(),
        Arc::new(AtomicBool::new(false)),
        meridian_runtime::leader::Gate::unelected(Default::default()),
    ));

    // Throughput.
    let mut latest: HashMap<String, fed_api::Placement> = HashMap::new();
    let mut with_status: HashSet<String> = HashSet::new();
    let mut all_exist = None;
    while with_status.len() < workloads {
        let p = tokio::time::timeout(Duration::from_secs(120), rx.recv())
            .await
            .context("placements stalled")?
            .context("watch ended")?;
        let name = p.metadata.name.clone().unwrap_or_default();
        if p.status.as_ref().is_some_and(|s| !s.conditions.is_empty()) {
            with_status.insert(name.clone());
        }
        latest.insert(name, p);
        if all_exist.is_none() && latest.len() == workloads {
            all_exist = Some(start.elapsed());
        }
    }
    let exist = all_exist.unwrap_or_else(|| start.elapsed());
    let done = start.elapsed();
    println!(
        "scheduling: {workloads} workloads -> all Placements exist after {:.2?} ({:.0} workloads/s); with status after {:.2?} ({:.0}/s)",
        exist,
        workloads as f64 / exist.as_secs_f64(),
        done,
        workloads as f64 / done.as_secs_f64()
    );

    // Failover: member-000 turns Offline, its transition already past the toleration.
    let victim = names[0].clone();
    let uses = |p: &fed_api::Placement| p.spec.dest_clusters.iter().any(|t| t.cluster == victim);
    let mut affected: HashSet<String> = latest
        .values()
        .filter(|p| uses(p))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let total_affected = affected.len();
    // Let the tail of status writes and Events settle so they do not count against failover.
    tokio::time::sleep(Duration::from_secs(2)).await;
    while let Ok(p) = rx.try_recv() {
        latest.insert(p.metadata.name.clone().unwrap_or_default(), p);
    }
    let t = Instant::now();
    capi.patch_status(
        &victim,
        &PatchParams::default(),
        &Patch::Merge(cluster_status(false, &rfc3339(TOLERATION + 60))),
    )
    .await?;
    while !affected.is_empty() {
        let p = tokio::time::timeout(Duration::from_secs(120), rx.recv())
            .await
            .context("failover stalled")?
            .context("watch ended")?;
        if !uses(&p)
            && let Some(n) = &p.metadata.name
        {
            affected.remove(n);
        }
    }
    let failover = t.elapsed();
    println!(
        "failover: {victim} Offline past its {TOLERATION}s toleration -> {total_affected} of {workloads} Placements rewritten in {failover:.2?}"
    );
    let text = metrics.encode();
    for line in text.lines().filter(|l| {
        l.starts_with("meridian_scheduler_placement_writes_total")
            || l.starts_with("meridian_scheduler_events_total")
            || l.starts_with("meridian_scheduler_reconciles_total")
    }) {
        println!("  {line}");
    }
    sched.abort();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

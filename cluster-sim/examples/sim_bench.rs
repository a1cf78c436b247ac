//! Scale benchmark of the simulator: bring up a fleet, push pods through Deployments, and
//! measure time to all Ready and resident memory.
//!
//! ```text
//! cargo run --release -p cluster-sim --example sim_bench -- --clusters 100 --nodes 1000 --pods 1000
//! ```
//! (`--pods` is per cluster; Deployments of `--replicas` pods each.)

use std::sync::Arc;
use std::time::Instant;

use cluster_sim::fleet::{ClusterSpec, FleetFile};
use cluster_sim::runtime::Fleet;
use meridian_apiserver::engine::WriteOptions;
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.parse().expect("number"))
        .unwrap_or(default)
}

fn rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let clusters = arg("--clusters", 10);
    let nodes = arg("--nodes", 100);
    let pods = arg("--pods", 1000);
    let replicas = arg("--replicas", 100).max(1);
    let t0 = Instant::now();
    let spec = FleetFile::new(
        (0..clusters)
            .map(|i| ClusterSpec {
                name: format!("sim-{}", i + 1),
                region: format!("region-{}", i % 4),
                zone: format!("zone-{}", i % 12),
                nodes: nodes as u32,
                node_cpu: "32".into(),
                node_memory: "128Gi".into(),
                node_pods: 110,
                labels: Default::default(),
                taints: vec![],
                kubernetes_version: "v1.34.2".into(),
                lb_pool: vec![],
                ready_delay: Some("0s".into()),
                runtime: Default::default(),
            })
            .collect(),
    );
    let fleet = Arc::new(Fleet::start(&spec, "127.0.0.1".parse()?).await?);
    let up = t0.elapsed();
    println!(
        "fleet up: {clusters} clusters x {nodes} nodes in {:.1}s, RSS {:.0} MB",
        up.as_secs_f64(),
        rss_mb()
    );

    let t1 = Instant::now();
    let deployments = pods.div_ceil(replicas);
    let mut tasks = Vec::new();
    for c in fleet.clusters.iter().cloned() {
        tasks.push(tokio::spawn(async move {
            let engine = &c.engine;
            let def = engine.registry().lookup("apps", "v1", "deployments").cloned().expect("deployments");
            for d in 0..deployments {
                let n = replicas.min(pods - d * replicas);
                let obj = json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": format!("app-{d}"), "namespace": "default"},
                    "spec": {"replicas": n, "selector": {"matchLabels": {"app": format!("app-{d}")}},
                        "template": {"metadata": {"labels": {"app": format!("app-{d}")}},
                            "spec": {"containers": [{"name": "c", "image": "nginx",
                                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}
                });
                engine.create(&def, "default", obj, &WriteOptions::default()).await.expect("create deployment");
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    // Wait until every Deployment reports all replicas available, following the caches.
    for c in &fleet.clusters {
        let def = c
            .engine
            .registry()
            .lookup("apps", "v1", "deployments")
            .cloned()
            .expect("deployments");
        let rc = c.engine.cache.resource(&def).clone();
        let (_, mut sub) = rc.snapshot_and_subscribe();
        loop {
            let all_ready = rc
                .list(&def.prefix(), None, None, 0, |_| true)
                .items
                .iter()
                .all(|d| {
                    let v = d.value();
                    v.pointer("/status/availableReplicas") == v.pointer("/spec/replicas")
                        && v.pointer("/status/observedGeneration")
                            == v.pointer("/metadata/generation")
                });
            if all_ready {
                break;
            }
            match sub.live.recv().await {
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => anyhow::bail!("cache closed: {e}"),
            }
        }
    }
    let total = clusters * pods;
    let ready = t1.elapsed();
    println!(
        "{total} pods through {} Deployments: all Ready in {:.1}s ({:.0} pods/s); RSS {:.0} MB",
        clusters * deployments,
        ready.as_secs_f64(),
        total as f64 / ready.as_secs_f64(),
        rss_mb()
    );
    fleet.stop();
    Ok(())
}

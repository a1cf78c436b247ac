//! Fleet-scale benchmark of the cluster controller: real federation-apiserver, cluster-sim and
//! fed-controllers processes (release builds). Prints, per fleet shape, controller RSS (when
//! every cluster is first Ready, and again after the probe rounds), bytes per tracked node,
//! member connections, CPU per probe round and status lag (member change -> Cluster status)
//! median and p99.
//!
//! `--clusters` and `--nodes` take comma-separated lists; every combination runs on a fresh
//! fleet, and the summary prints the slopes between runs: the marginal RSS of one more node
//! (same cluster count, different node counts) and of one more member (same nodes per
//! cluster, different cluster counts).
//!
//! ```text
//! cargo build --release -p federation-apiserver -p cluster-sim -p fed-controllers
//! cargo run --release -p fed-controllers --example cluster_bench -- --clusters 1000 --nodes 100
//! cargo run --release -p fed-controllers --example cluster_bench -- \
//!     --clusters 10 --nodes 500,5000 --rounds 0 --samples 0
//! ```
//!
//! `--rounds N` probe periods are timed for CPU after `--settle-s S` seconds (default 20);
//! `--rounds 0 --samples 0` measures memory only. `--controller-env KEY=VALUE` (repeatable) sets environment variables of the controller
//! process only, e.g. `MALLOC_ARENA_MAX=2`.

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{Fleet, arg, cpu_secs, rss_mb, spawn};
use futures::TryStreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::json;

fn arg_list(name: &str, default: usize) -> Vec<usize> {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map_or_else(
            || vec![default],
            |v| v.split(',').map(|x| x.parse().expect("number")).collect(),
        )
}

fn controller_env() -> Vec<(String, String)> {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .filter(|w| w[0] == "--controller-env")
        .map(|w| {
            let (k, v) = w[1].split_once('=').expect("KEY=VALUE");
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Open sockets and threads of a process.
fn sockets_threads(pid: u32) -> (usize, usize) {
    let sockets = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0);
    (sockets, threads)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// What one fleet shape measured.
struct Figures {
    clusters: usize,
    nodes: usize,
    /// RSS when every cluster first reported all nodes Ready.
    rss_ready: f64,
    /// RSS after the probe rounds (or a short settle when there are none).
    rss_steady: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cluster_counts = arg_list("--clusters", 100);
    let node_counts = arg_list("--nodes", 100);
    let mut results = Vec::new();
    for &clusters in &cluster_counts {
        for &nodes in &node_counts {
            println!("== {clusters} clusters x {nodes} nodes");
            results.push(run(clusters, nodes).await?);
        }
    }
    if results.len() > 1 {
        summary(&results);
    }
    Ok(())
}

/// The table of all runs and the slopes between them.
fn summary(results: &[Figures]) {
    println!("== summary (RSS after the probe rounds)");
    for r in results {
        let tracked = (r.clusters * r.nodes) as f64;
        println!(
            "{:>5} clusters x {:>5} nodes: RSS ready {:>6.1} MB, steady {:>6.1} MB = {:>6.0} B per tracked node",
            r.clusters,
            r.nodes,
            r.rss_ready / 1e6,
            r.rss_steady / 1e6,
            r.rss_steady / tracked
        );
    }
    for (i, a) in results.iter().enumerate() {
        for b in &results[i + 1..] {
            if a.clusters == b.clusters && a.nodes != b.nodes {
                let dn = (b.nodes as f64 - a.nodes as f64) * a.clusters as f64;
                println!(
                    "marginal cost per node ({} clusters, {} -> {} nodes each): {:.0} B (steady), {:.0} B (at ready)",
                    a.clusters,
                    a.nodes,
                    b.nodes,
                    (b.rss_steady - a.rss_steady) / dn,
                    (b.rss_ready - a.rss_ready) / dn
                );
            }
            if a.nodes == b.nodes && a.clusters != b.clusters {
                let dc = b.clusters as f64 - a.clusters as f64;
                println!(
                    "marginal cost per member ({} nodes each, {} -> {} clusters): {:.0} B (steady), {:.0} B (at ready)",
                    a.nodes,
                    a.clusters,
                    b.clusters,
                    (b.rss_steady - a.rss_steady) / dc,
                    (b.rss_ready - a.rss_ready) / dc
                );
            }
        }
    }
}

async fn run(clusters: usize, nodes: usize) -> anyhow::Result<Figures> {
    let samples = arg("--samples", 100).min(clusters);
    let period = arg("--probe-period-s", 10);
    let rounds = arg("--rounds", 3);
    let settle = arg("--settle-s", 20) as u64;
    let t0 = Instant::now();
    // Every member registered directly (what fedctl join would do, minus the member-side RBAC).
    let fleet = Fleet::start(
        &format!("cluster-bench-{clusters}x{nodes}"),
        clusters,
        vec![format!("--nodes={nodes}"), "--ready-delay=0s".into()],
        &[],
    )
    .await?;
    println!(
        "fleet of {clusters} x {nodes} nodes up and registered in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let (dir, fed_kc, sim_kc) = (
        fleet.dir.clone(),
        fleet.fed_kc.clone(),
        fleet.sim_kc.clone(),
    );
    let cl_api: Api<fed_api::Cluster> = Api::all(fleet.fed.clone());
    let t1 = Instant::now();
    let ctrl = spawn("fed-controllers", &dir)?
        .args([
            format!("--kubeconfig={}", fed_kc.display()),
            format!("--probe-period={period}s"),
            "--metrics-bind-address=off".into(),
        ])
        .envs(controller_env())
        .spawn()?;
    let pid = ctrl.pid();
    // All Ready with full node counts.
    let mut ready = std::collections::HashSet::new();
    let mut stream = Box::pin(cl_api.watch(&WatchParams::default(), "0").await?);
    while ready.len() < clusters {
        if let Some(WatchEvent::Added(c) | WatchEvent::Modified(c)) = stream.try_next().await? {
            let ok = c.status.as_ref().is_some_and(|s| {
                s.nodes.as_ref().is_some_and(|n| n.ready as usize == nodes)
                    && s.conditions
                        .iter()
                        .any(|x| x.type_ == "Ready" && x.status == "True")
            });
            if ok {
                ready.insert(c.metadata.name.clone().unwrap());
            }
        }
    }
    drop(stream);
    println!(
        "all {clusters} clusters Ready with {nodes}/{nodes} nodes after {:.1}s",
        t1.elapsed().as_secs_f64()
    );
    let rss_ready = rss_mb(pid) * 1e6;
    let tracked = (clusters * nodes) as f64;
    println!(
        "controller RSS {:.0} MB = {:.0} bytes per tracked member node (all-in, incl. TLS clients and runtime)",
        rss_ready / 1e6,
        rss_ready / tracked
    );
    let (sockets, threads) = sockets_threads(pid);
    println!(
        "controller sockets {sockets} ({:.2} per member, incl. the federation connections), threads {threads}",
        sockets as f64 / clusters as f64
    );
    if rounds > 0 {
        // Becoming Ready starts each member's discovery; let that finish so the rounds
        // measure probing (and watching an idle fleet), not start-up.
        tokio::time::sleep(Duration::from_secs(settle)).await;
        let cpu0 = cpu_secs(pid);
        tokio::time::sleep(Duration::from_secs((period * rounds) as u64)).await;
        let cpu1 = cpu_secs(pid);
        println!(
            "CPU per probe round ({clusters} probes): {:.3} s",
            (cpu1 - cpu0) / rounds as f64
        );
    } else {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let rss_steady = rss_mb(pid) * 1e6;
    println!(
        "controller RSS after the probe rounds {:.0} MB = {:.0} bytes per tracked member node",
        rss_steady / 1e6,
        rss_steady / tracked
    );

    // Status lag: mark one node NotReady in `samples` clusters, time until the Cluster shows it.
    if samples > 0 {
        let state: cluster_sim::admin::AdminState = serde_json::from_str(
            &std::fs::read_to_string(cluster_sim::cli::state_path(&sim_kc))?,
        )?;
        let mut lags = Vec::new();
        for k in 0..samples {
            let name = format!("sim-{}", 1 + k * clusters / samples);
            let mut w = Box::pin(
                cl_api
                    .watch(
                        &WatchParams::default().fields(&format!("metadata.name={name}")),
                        "0",
                    )
                    .await?,
            );
            let start = Instant::now();
            let (code, _) = cluster_sim::admin::request(
                &state,
                "POST",
                &format!("/clusters/{name}/nodes/{name}-node-0"),
                json!({"ready": false}),
            )
            .await?;
            assert_eq!(code, 200);
            loop {
                if let Some(WatchEvent::Added(c) | WatchEvent::Modified(c)) = w.try_next().await?
                    && c.status
                        .as_ref()
                        .and_then(|s| s.nodes.as_ref())
                        .is_some_and(|n| n.ready as usize == nodes - 1)
                {
                    break;
                }
            }
            lags.push(start.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "status lag (node NotReady -> Cluster status), {samples} samples: median {:.0} ms, p99 {:.0} ms",
            pct(&mut lags.clone(), 0.5),
            pct(&mut lags, 0.99)
        );
    }
    drop(ctrl);
    drop(fleet);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Figures {
        clusters,
        nodes,
        rss_ready,
        rss_steady,
    })
}

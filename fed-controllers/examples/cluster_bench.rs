//! Fleet-scale benchmark of the cluster controller: real federation-apiserver, cluster-sim and
//! fed-controllers processes (release builds). Prints controller RSS, bytes per tracked node,
//! CPU per probe round and status lag (member change -> Cluster status) median and p99.
//!
//! ```text
//! cargo build --release -p federation-apiserver -p cluster-sim -p fed-controllers
//! cargo run --release -p fed-controllers --example cluster_bench -- --clusters 1000 --nodes 100
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.parse().expect("number"))
        .unwrap_or(default)
}

fn bin(name: &str) -> PathBuf {
    let p = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join(name);
    assert!(
        p.exists(),
        "build it first: cargo build --release -p {name}"
    );
    p
}

fn spawn_until(bin: &Path, args: &[String], prefix: &str) -> (Child, Vec<String>) {
    let mut child = Command::new(bin)
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let done = l.starts_with(prefix);
        seen.push(l);
        if done {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (child, seen)
}

fn proc_stat(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .unwrap_or(0.0)
        * 1024.0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    (rss, ticks / 100.0)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let clusters = arg("--clusters", 100);
    let nodes = arg("--nodes", 100);
    let samples = arg("--samples", 100).min(clusters);
    let period = arg("--probe-period-s", 10);
    let dir = tempfile_dir();
    let (_fed, banner) = spawn_until(
        &bin("federation-apiserver"),
        &[
            "--secure-port=0".into(),
            format!("--data-dir={}", dir.join("fed").display()),
        ],
        "export KUBECONFIG=",
    );
    let fed_kc = PathBuf::from(
        banner
            .last()
            .unwrap()
            .trim_start_matches("export KUBECONFIG="),
    );
    let sim_kc = dir.join("sim.kubeconfig");
    let t0 = Instant::now();
    let (_sim, _) = spawn_until(
        &bin("cluster-sim"),
        &[
            format!("--clusters={clusters}"),
            format!("--nodes={nodes}"),
            "--ready-delay=0s".into(),
            format!("--kubeconfig-out={}", sim_kc.display()),
        ],
        "admin API:",
    );
    println!(
        "fleet of {clusters} x {nodes} nodes up in {:.1}s",
        t0.elapsed().as_secs_f64()
    );

    // Register every member directly (what fedctl join would do, minus the member-side RBAC).
    let fed = client(&fed_kc).await;
    let sim: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&sim_kc)?)?;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fed.clone());
    let _ = nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "meridian-system"}}))?,
        )
        .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(fed.clone(), "meridian-system");
    let cl_api: Api<fed_api::Cluster> = Api::all(fed.clone());
    for (i, c) in sim["clusters"].as_array().unwrap().iter().enumerate() {
        let name = c["name"].as_str().unwrap();
        let token = sim["users"][i]["user"]["token"].as_str().unwrap();
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(token);
        secrets
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("{name}-credentials")}, "data": {"token": b64}}))?)
            .await?;
        let cluster: fed_api::Cluster = serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"apiEndpoint": c["cluster"]["server"], "caBundle": c["cluster"]["certificate-authority-data"],
                     "secretRef": {"namespace": "meridian-system", "name": format!("{name}-credentials")}}
        }))?;
        cl_api.create(&PostParams::default(), &cluster).await?;
    }
    let t1 = Instant::now();
    let mut ctrl = Command::new(bin("fed-controllers"))
        .args([
            format!("--kubeconfig={}", fed_kc.display()),
            format!("--probe-period={period}s"),
            "--metrics-bind-address=off".into(),
        ])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()?;
    let pid = ctrl.id();
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
    println!(
        "all {clusters} clusters Ready with {nodes}/{nodes} nodes after {:.1}s",
        t1.elapsed().as_secs_f64()
    );
    let (rss, cpu0) = proc_stat(pid);
    let tracked = (clusters * nodes) as f64;
    println!(
        "controller RSS {:.0} MB = {:.0} bytes per tracked member node (all-in, incl. TLS clients and runtime)",
        rss / 1e6,
        rss / tracked
    );
    let rounds = 3;
    tokio::time::sleep(Duration::from_secs((period * rounds) as u64)).await;
    let (_, cpu1) = proc_stat(pid);
    println!(
        "CPU per probe round ({clusters} probes): {:.3} s",
        (cpu1 - cpu0) / rounds as f64
    );

    // Status lag: mark one node NotReady in `samples` clusters, time until the Cluster shows it.
    let state: cluster_sim::admin::AdminState = serde_json::from_str(&std::fs::read_to_string(
        cluster_sim::cli::state_path(&sim_kc),
    )?)?;
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
    let _ = ctrl.kill();
    Ok(())
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("cluster-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn client(path: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

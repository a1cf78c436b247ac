//! Propagation benchmark of the workload controller: real federation-apiserver (embedded
//! store), cluster-sim, fed-scheduler and fed-controllers processes (release builds). Every
//! Deployment has 2 replicas divided over a pair of clusters (one policy per pair), so each
//! one becomes two sub-Deployments. Timestamps are taken when watch events arrive here.
//! Prints:
//! - propagation latency, paced and burst: create in the federation → the sub-object's
//!   ADDED event from every destination member's watch (p50/p99/max);
//! - federated status lag: the last destination's copy reports its pods Ready (member
//!   watch) → the federated Deployment shows READY (federation watch) (p50/p99/max);
//! - control-plane RSS (VmRSS of apiserver + scheduler + controllers) with every
//!   Deployment propagated;
//! - member write throughput: every Deployment scaled 2 → 4 at once, sub-object updates
//!   per second seen by the member watches, and the controller's own write counters;
//! - the same with fan-out: Deployments a `Duplicated` policy places in every cluster
//!   (one federation change, one write per cluster), created and then scaled 1 → 2 at once;
//!   `--fan-out-writes N` (default 2,000) sets how many member writes each phase makes. This
//!   phase runs last, with the member watches stopped: the controller's counter of member
//!   writes times it (read every 20 ms), and a list of every member then checks the copies.
//!
//! Each phase ends when the federation settles (no workload writes for 3 s), so its
//! status write-back is counted in its CPU and federation writes and does not run on into
//! the next phase.
//!
//! `--api-only` runs the members without their simulated controllers (cluster-sim
//! `--api-only`): written copies stay as written and no pods run, so the member side costs
//! what a real member's API server costs this host (its controllers and kubelets run on the
//! member's own machines) and the figures show the federation side alone. With no pods to
//! become Ready, the bench plays the members' controllers for the status-lag phase: each
//! paced copy gets, `--ready-delay-ms` after it appears, the status a member reports once
//! its pods are Ready (one status write on the member), and again after the scale, so the
//! scale's federation writes are those of a scale members report back on.
//! `PROPAGATION_BENCH_FED_CONTROLLERS=<path>`
//! (likewise `_FEDERATION_APISERVER`, `_FED_SCHEDULER`, `_CLUSTER_SIM`) runs another build
//! or a profiler wrapper in that binary's place. CPU seconds per process are printed per phase
//! (robust to a noisy machine where latencies are not).
//!
//! ```text
//! cargo build --release -p federation-apiserver -p cluster-sim -p fed-scheduler -p fed-controllers
//! cargo run --release -p fed-controllers --example propagation_bench -- --clusters 10 --deployments 1000
//! cargo run --release -p fed-controllers --example propagation_bench -- --clusters 10 --deployments 1000 --api-only
//! cargo run --release -p fed-controllers --example propagation_bench -- --clusters 100 --deployments 10000 --rate 500
//! ```

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use common::members::{ReadyResponder, counts};
use common::status_lag::{self, Lag};
use common::{
    Cpu, Fleet, arg, client, count_writes, fed_writes, member_writes_ok, report_fed_writes, rss_mb,
    scrape, settle, status_mb, summary, until,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio::sync::Semaphore;

const NS: &str = "bench";
/// Requests in flight while creating or scaling.
const CONCURRENCY: usize = 64;

/// What the watches saw, keyed by Deployment name; times are arrival times.
#[derive(Default)]
struct Seen {
    /// First ADDED of the copy in member `c`.
    added: HashMap<(usize, String), Instant>,
    /// First event where the copy in `c` has `spec.replicas == r`.
    scaled: HashMap<(usize, String, i32), Instant>,
    /// First event where the copy in `c` has `r` replicas, all ready.
    member_ready: HashMap<(usize, String, i32), Instant>,
    /// First event where the federated Deployment has `r` replicas, all ready.
    fed_ready: HashMap<(String, i32), Instant>,
    /// First event where the workload's Placement has destinations (the scheduler's part).
    placed: HashMap<String, Instant>,
    /// First event where the workload's Placement reports `r` ready replicas in all.
    placement_ready: HashMap<(String, i32), Instant>,
}

/// Every member write and Placement update reaches the bench's watches: they decode only
/// the fields the bench reads (as `kube::core::Object`s of these slim parts), so its own CPU
/// stays small beside the processes it measures.
mod watched {
    use kube::api::ApiResource;
    use kube::core::Object;
    use serde::Deserialize;

    pub use super::common::members::{Replicas, SlimDeployment as Deployment, deployments};

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct Named {
        pub name: String,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct PlacementSpec {
        pub resource: Named,
        #[serde(default)]
        pub dest_clusters: Vec<Replicas>,
    }

    #[derive(Clone, Debug, Default, Deserialize)]
    pub struct PlacementStatus {
        #[serde(default)]
        pub clusters: Vec<Replicas>,
    }

    /// A Placement's workload, destinations' replicas and per-cluster ready replicas.
    pub type Placement = Object<PlacementSpec, PlacementStatus>;

    pub fn placements() -> ApiResource {
        ApiResource::erase::<fed_api::Placement>(&())
    }
}

/// Records when each Placement first has destinations.
fn watch_placements(client: kube::Client, seen: Arc<Mutex<Seen>>) -> tokio::task::JoinHandle<()> {
    let api: Api<watched::Placement> = Api::namespaced_with(client, NS, &watched::placements());
    tokio::spawn(async move {
        let mut s =
            std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = s.next().await {
            let now = Instant::now();
            let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev else {
                continue;
            };
            let mut g = seen.lock().unwrap();
            if !p.spec.dest_clusters.is_empty() {
                g.placed.entry(p.spec.resource.name.clone()).or_insert(now);
            }
            let ready: i32 = p
                .status
                .iter()
                .flat_map(|s| &s.clusters)
                .map(|c| c.ready_replicas.unwrap_or(0))
                .sum();
            let wanted: i32 = p
                .spec
                .dest_clusters
                .iter()
                .map(|t| t.replicas.unwrap_or(0))
                .sum();
            if ready > 0 && ready == wanted {
                g.placement_ready
                    .entry((p.spec.resource.name.clone(), ready))
                    .or_insert(now);
            }
        }
    })
}

/// Starts a watcher on the Deployments of [`NS`]; `member` is `None` for the federation.
/// A member's watch shows each copy it sees to `responder`, if any.
fn watch(
    client: kube::Client,
    member: Option<usize>,
    seen: Arc<Mutex<Seen>>,
    responder: Option<ReadyResponder>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<watched::Deployment> = Api::namespaced_with(client, NS, &watched::deployments());
    tokio::spawn(async move {
        let mut s =
            std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = s.next().await {
            let now = Instant::now();
            let Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) = ev else {
                continue;
            };
            let name = d.metadata.name.clone().unwrap_or_default();
            let (spec, ready) = counts(&d);
            let mut g = seen.lock().unwrap();
            match member {
                Some(c) => {
                    g.added.entry((c, name.clone())).or_insert(now);
                    if let Some(r) = &responder {
                        r.observe(c, &d);
                    }
                    g.scaled.entry((c, name.clone(), spec)).or_insert(now);
                    if ready == spec {
                        g.member_ready.entry((c, name, spec)).or_insert(now);
                    }
                }
                None => {
                    if ready == spec {
                        g.fed_ready.entry((name, spec)).or_insert(now);
                    }
                }
            }
        }
    })
}

fn deployment(name: &str, group: usize) -> Deployment {
    deployment_in(name, &group.to_string(), 2)
}

fn deployment_in(name: &str, group: &str, replicas: i32) -> Deployment {
    common::members::deployment(NS, name, group, replicas)
}

/// Creates `names` in the federation, `rate` per second (0: as fast as possible); returns
/// each one's creation start time.
async fn create_all(
    fed: &kube::Client,
    names: &[(String, usize)],
    rate: usize,
) -> HashMap<String, Instant> {
    let api: Api<Deployment> = Api::namespaced(fed.clone(), NS);
    let sem = Arc::new(Semaphore::new(CONCURRENCY));
    let started = Arc::new(Mutex::new(HashMap::new()));
    let mut tick = (rate > 0).then(|| {
        let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        t
    });
    let mut tasks = Vec::new();
    for (name, group) in names {
        if let Some(t) = tick.as_mut() {
            t.tick().await;
        }
        let permit = sem.clone().acquire_owned().await.unwrap();
        let (api, started) = (api.clone(), started.clone());
        let d = deployment(name, *group);
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            started.lock().unwrap().insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &d)
                .await
                .unwrap_or_else(|e| panic!("creating {name}: {e}"));
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(started).unwrap().into_inner().unwrap()
}

fn dests(group: usize) -> [usize; 2] {
    [2 * group, 2 * group + 1]
}

/// Prints, for a few workloads whose copies never showed up everywhere, what their
/// Placement says: where the federation stands when a run gives up.
async fn explain_missing(fed: &kube::Client, seen: &Arc<Mutex<Seen>>, names: &[(String, usize)]) {
    let missing: Vec<(String, Vec<usize>)> = {
        let g = seen.lock().unwrap();
        names
            .iter()
            .filter_map(|(n, grp)| {
                let absent: Vec<usize> = dests(*grp)
                    .into_iter()
                    .filter(|c| !g.added.contains_key(&(*c, n.clone())))
                    .collect();
                (!absent.is_empty()).then(|| (n.clone(), absent))
            })
            .collect()
    };
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), NS);
    for (name, absent) in missing.iter().take(5) {
        let p = placements.get_opt(&format!("deployment-{name}")).await;
        let p = p.ok().flatten().map(|p| {
            serde_json::json!({"rv": p.metadata.resource_version, "spec": p.spec, "status": p.status})
        });
        println!(
            "    missing {name} in members {absent:?}; placement: {}",
            p.unwrap_or_default()
        );
    }
}

/// Propagation latencies (ms) of `created` from the members' ADDED events.
async fn propagation(
    fed: &kube::Client,
    label: &str,
    seen: &Arc<Mutex<Seen>>,
    names: &[(String, usize)],
    created: &HashMap<String, Instant>,
) {
    let total = names.len();
    let all_in = until(label, Duration::from_secs(120), || {
        let g = seen.lock().unwrap();
        let n = names
            .iter()
            .filter(|(n, grp)| {
                dests(*grp)
                    .iter()
                    .all(|c| g.added.contains_key(&(*c, n.clone())))
            })
            .count();
        (n, total)
    })
    .await;
    if !all_in {
        explain_missing(fed, seen, names).await;
    }
    let g = seen.lock().unwrap();
    let lat: Vec<f64> = names
        .iter()
        .filter_map(|(n, grp)| {
            let last = dests(*grp)
                .iter()
                .map(|c| g.added.get(&(*c, n.clone())).copied())
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .max()?;
            Some(last.saturating_duration_since(created[n]).as_secs_f64() * 1e3)
        })
        .collect();
    let first = created.values().min().copied();
    let last = names
        .iter()
        .flat_map(|(n, grp)| dests(*grp).map(|c| g.added.get(&(c, n.clone())).copied()))
        .flatten()
        .max();
    if let (Some(a), Some(b)) = (first, last) {
        println!(
            "  {label}: all {} sub-objects in {:.2}s",
            2 * total,
            b.duration_since(a).as_secs_f64()
        );
    }
    summary(&format!("  {label} latency (create -> in every dest)"), lat);
    let split = |f: &dyn Fn(&Instant, &Instant) -> f64| -> Vec<f64> {
        names
            .iter()
            .filter_map(|(n, grp)| {
                let placed = g.placed.get(n)?;
                let last = dests(*grp)
                    .iter()
                    .map(|c| g.added.get(&(*c, n.clone())).copied())
                    .collect::<Option<Vec<_>>>()?
                    .into_iter()
                    .max()?;
                Some(f(placed, &last))
            })
            .collect()
    };
    summary(
        &format!("  {label}   of which create -> Placement scheduled"),
        names
            .iter()
            .filter_map(|(n, _)| {
                Some(
                    g.placed
                        .get(n)?
                        .saturating_duration_since(created[n])
                        .as_secs_f64()
                        * 1e3,
                )
            })
            .collect(),
    );
    summary(
        &format!("  {label}   of which Placement scheduled -> in every dest"),
        split(&|p, l| l.saturating_duration_since(*p).as_secs_f64() * 1e3),
    );
}

/// Status lag on `paced`: the last member copy Ready -> the federated READY.
async fn status_lag(seen: &Arc<Mutex<Seen>>, paced: &[(String, usize)]) {
    until("federated READY", Duration::from_secs(600), || {
        let g = seen.lock().unwrap();
        let n = paced
            .iter()
            .filter(|(n, _)| g.fed_ready.contains_key(&(n.clone(), 2)))
            .count();
        (n, paced.len())
    })
    .await;
    let g = seen.lock().unwrap();
    let lags: Vec<Lag> = paced
        .iter()
        .filter_map(|(n, grp)| {
            let members = dests(*grp)
                .iter()
                .map(|c| g.member_ready.get(&(*c, n.clone(), 1)).copied())
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .max();
            Lag::of(
                members,
                g.placement_ready.get(&(n.clone(), 2)).copied(),
                g.fed_ready.get(&(n.clone(), 2)).copied(),
            )
        })
        .collect();
    status_lag::report("  status lag", &lags);
}

/// The federation API server's request counters (`verb resource`, with ` (code)` when it
/// was refused → count), from its `/metrics`; writes only (reads and watches do not change
/// state).
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ctrl-C drops the run, and with it the child processes.
    tokio::select! {
        r = run() => r,
        s = tokio::signal::ctrl_c() => s.context("waiting for Ctrl-C"),
    }
}

async fn run() -> anyhow::Result<()> {
    let clusters = arg("--clusters", 10).max(2) / 2 * 2;
    let deployments = arg("--deployments", 1000);
    let rate = arg("--rate", 200);
    let burst = arg("--burst", deployments / 5);
    let ready_delay_ms = arg("--ready-delay-ms", 100);
    let metrics_port = arg("--metrics-port", 18089) as u16;
    let api_only = std::env::args().any(|a| a == "--api-only");
    let groups = clusters / 2;
    println!(
        "{deployments} Deployments x 2 replicas over {clusters} clusters ({groups} policies), paced at {rate}/s, then a burst of {burst}{}",
        if api_only {
            "; members API-only (no simulated controllers or pods)"
        } else {
            ""
        }
    );
    // Room for every pod after the scale to 4, whatever the split.
    let fan_out = arg("--fan-out-writes", 2000).div_ceil(clusters).max(20);
    let pods_per_node = (4 * (deployments + burst) / clusters + 2 * fan_out).max(110) as u32;
    let mut sim_args = vec![
        "--nodes=2".into(),
        "--node-cpu=512".into(),
        "--node-memory=2Ti".into(),
        format!("--node-pods={pods_per_node}"),
        format!("--ready-delay={ready_delay_ms}ms"),
    ];
    if api_only {
        sim_args.push("--api-only".into());
    }
    let fleet = Fleet::start("propagation-bench", clusters, sim_args, &[NS]).await?;
    let (fed, names) = (fleet.fed.clone(), fleet.names.clone());
    // Group g holds clusters 2g and 2g+1.
    let policies: Api<fed_api::PropagationPolicy> = Api::namespaced(fed.clone(), NS);
    for g in 0..groups {
        let [a, b] = dests(g);
        let p: fed_api::PropagationPolicy = serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": format!("group-{g}"), "namespace": NS},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                            "labelSelector": {"matchLabels": {"group": g.to_string()}}}],
                     "placement": {"clusterAffinity": {"clusterNames": [names[a], names[b]]},
                                   "replicaScheduling": {"type": "Divided", "division": "StaticWeight"}}}
        }))?;
        policies.create(&PostParams::default(), &p).await?;
    }
    let (scheduler, controllers) = fleet.start_control_plane(metrics_port).await?;
    let (apiserver, sim_proc, sim_kc) = (&fleet.apiserver, &fleet.sim, fleet.sim_kc.clone());

    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut member_clients = Vec::new();
    for n in &names {
        member_clients.push(client(&sim_kc, Some(n)).await);
    }
    let responder = api_only.then(|| {
        ReadyResponder::start(
            member_clients.clone(),
            NS,
            Duration::from_millis(ready_delay_ms as u64),
            CONCURRENCY,
        )
    });
    let mut member_watches = Vec::new();
    for (i, c) in member_clients.into_iter().enumerate() {
        member_watches.push(watch(c, Some(i), seen.clone(), responder.clone()));
    }
    let fed_watches = [
        watch(fed.clone(), None, seen.clone(), None),
        watch_placements(fed.clone(), seen.clone()),
    ];

    // (a) paced.
    let paced: Vec<(String, usize)> = (0..deployments)
        .map(|i| (format!("p-{i}"), i % groups))
        .collect();
    let pids = [
        apiserver.pid(),
        scheduler.pid(),
        controllers.pid(),
        sim_proc.pid(),
    ];
    let cpu0 = Cpu::sample(pids);
    let fw0 = fed_writes(&fed).await;
    let t_paced = Instant::now();
    let created = create_all(&fed, &paced, rate).await;
    propagation(&fed, "paced", &seen, &paced, &created).await;
    settle(&fed, t_paced).await;
    Cpu::sample(pids).report(
        cpu0,
        "paced creation",
        (2.0 * paced.len() as f64, "sub-object"),
    );
    report_fed_writes(
        &fw0,
        &fed_writes(&fed).await,
        (paced.len() as f64, "Deployment"),
    );

    // (d) status lag on the paced set: last member copy Ready -> federated READY.
    if api_only {
        println!("  (API-only members: this bench writes each copy's Ready status)");
    }
    status_lag(&seen, &paced).await;

    // (c) memory with every Deployment propagated and steady.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (a, s, c) = (
        rss_mb(apiserver.pid()),
        rss_mb(scheduler.pid()),
        rss_mb(controllers.pid()),
    );
    println!(
        "  RSS with {deployments} federated Deployments over {clusters} clusters: apiserver {a:.0} MB + scheduler {s:.0} MB + controllers {c:.0} MB = {:.0} MB",
        a + s + c
    );
    let file: f64 = [apiserver.pid(), scheduler.pid(), controllers.pid()]
        .into_iter()
        .map(|pid| status_mb(pid, "RssFile:"))
        .sum();
    println!(
        "    of which mapped program files (RssFile) {file:.0} MB, heap and stacks {:.0} MB",
        a + s + c - file
    );

    // (b) member write throughput: scale every Deployment 2 -> 4 at once.
    let writes0 = scrape(
        metrics_port,
        "meridian_controllers_workload_member_writes_total{verb=\"update\",result=\"ok\"}",
    )
    .await;
    let api: Api<Deployment> = Api::namespaced(fed.clone(), NS);
    let sem = Arc::new(Semaphore::new(CONCURRENCY));
    let cpu0 = Cpu::sample(pids);
    let fw0 = fed_writes(&fed).await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (n, _) in &paced {
        let permit = sem.clone().acquire_owned().await?;
        let (api, n) = (api.clone(), n.clone());
        tasks.push(tokio::spawn(async move {
            api.patch(
                &n,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 4}})),
            )
            .await
            .unwrap_or_else(|e| panic!("scaling {n}: {e}"));
            drop(permit);
        }));
    }
    for t in tasks {
        t.await?;
    }
    let patched = start.elapsed();
    until("scale 2 -> 4", Duration::from_secs(600), || {
        let g = seen.lock().unwrap();
        let n = paced
            .iter()
            .map(|(n, grp)| {
                dests(*grp)
                    .iter()
                    .filter(|c| g.scaled.contains_key(&(**c, n.clone(), 2)))
                    .count()
            })
            .sum();
        (n, 2 * paced.len())
    })
    .await;
    {
        let g = seen.lock().unwrap();
        let times: Vec<Instant> = paced
            .iter()
            .flat_map(|(n, grp)| dests(*grp).map(|c| g.scaled.get(&(c, n.clone(), 2)).copied()))
            .flatten()
            .collect();
        if let Some((all, rates)) = write_rates(&times, start) {
            println!(
                "  member writes: {} sub-object updates; federation patches took {:.2}s; all members updated {all:.2}s after the first patch = {rates}",
                times.len(),
                patched.as_secs_f64(),
            );
        }
    }
    let writes1 = scrape(
        metrics_port,
        "meridian_controllers_workload_member_writes_total{verb=\"update\",result=\"ok\"}",
    )
    .await;
    println!(
        "  controller member update writes (metrics): {:.0}",
        writes1 - writes0
    );
    settle(&fed, start).await;
    Cpu::sample(pids).report(cpu0, "the scale", (writes1 - writes0, "member write"));
    report_fed_writes(
        &fw0,
        &fed_writes(&fed).await,
        (paced.len() as f64, "Deployment"),
    );
    if let Some(r) = &responder {
        r.stop();
    }

    // (a) burst: a new batch created as fast as the client can.
    if burst > 0 {
        let batch: Vec<(String, usize)> =
            (0..burst).map(|i| (format!("b-{i}"), i % groups)).collect();
        let created = create_all(&fed, &batch, 0).await;
        propagation(&fed, "burst", &seen, &batch, &created).await;
    }

    // (e) fan-out: every Deployment of a Duplicated policy goes to every cluster. Its writes
    // are timed by the controller's own counter rather than by watching here: a watch of
    // every member would have each member send every copy twice and this process decode
    // it, on the same two cores as what is measured. Nothing else is watched either.
    for w in member_watches.iter().chain(&fed_watches) {
        w.abort();
    }
    let members = FanOutMembers {
        names: &names,
        kubeconfig: &sim_kc,
    };
    fan_out_phase(&fed, members, fan_out, pids, metrics_port).await?;
    let (a, s, c) = (
        rss_mb(apiserver.pid()),
        rss_mb(scheduler.pid()),
        rss_mb(controllers.pid()),
    );
    println!(
        "  RSS at the end ({} Deployments): apiserver {a:.0} MB + scheduler {s:.0} MB + controllers {c:.0} MB = {:.0} MB",
        deployments + burst,
        a + s + c
    );
    for m in [
        "meridian_controllers_workload_member_writes_total",
        "meridian_controllers_workload_member_syncs_total",
        "meridian_controllers_workload_reconciles_total",
    ] {
        println!("  {m}: {:.0}", scrape(metrics_port, m).await);
    }
    for result in ["created", "updated", "unchanged", "error", "conflict"] {
        let series =
            format!("meridian_controllers_workload_member_syncs_total{{result=\"{result}\"}}");
        println!(
            "    syncs {result}: {:.0}",
            scrape(metrics_port, &series).await
        );
    }
    for result in ["ok", "error"] {
        let series =
            format!("meridian_controllers_workload_reconciles_total{{result=\"{result}\"}}");
        println!(
            "    reconciles {result}: {:.0}",
            scrape(metrics_port, &series).await
        );
    }
    drop((controllers, scheduler));
    let dir = fleet.dir.clone();
    drop(fleet);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Seconds from `start` to the last of the member writes seen at `times`, and their rate
/// end to end and between the first and the last.
fn write_rates(times: &[Instant], start: Instant) -> Option<(f64, String)> {
    let (first, last) = (times.iter().min()?, times.iter().max()?);
    let all = last.duration_since(start).as_secs_f64();
    let window = last.duration_since(*first).as_secs_f64().max(1e-3);
    let n = times.len() as f64;
    Some((
        all,
        format!(
            "{:.0} writes/s end to end, {:.0} writes/s between the first and last member write",
            n / all,
            n / window
        ),
    ))
}

/// The members of the fan-out phase: their names and the kubeconfig with a context each.
struct FanOutMembers<'a> {
    names: &'a [String],
    kubeconfig: &'a Path,
}

/// Checks that every member holds every Deployment of `names` with `replicas`: the counter
/// timed the writes, this confirms they are the copies wanted.
async fn verify_copies(
    members: &FanOutMembers<'_>,
    names: &[String],
    replicas: i32,
) -> anyhow::Result<()> {
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    for m in members.names {
        let api: Api<watched::Deployment> = Api::namespaced_with(
            client(members.kubeconfig, Some(m)).await,
            NS,
            &watched::deployments(),
        );
        let held = api
            .list(&ListParams::default().labels("group=everywhere"))
            .await?
            .items
            .iter()
            .filter(|d| {
                d.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| wanted.contains(n))
                    && counts(d).0 == replicas
            })
            .count();
        anyhow::ensure!(
            held == names.len(),
            "member {m} holds {held} of the {} copies with {replicas} replicas",
            names.len()
        );
    }
    Ok(())
}

/// Phase (e): `count` Deployments placed by a Duplicated policy in every cluster; created,
/// then scaled 1 -> 2 at once. Prints member writes per second for both.
async fn fan_out_phase(
    fed: &kube::Client,
    members: FanOutMembers<'_>,
    count: usize,
    pids: [u32; 4],
    metrics_port: u16,
) -> anyhow::Result<()> {
    let clusters = members.names;
    let n = clusters.len();
    println!("fan-out: {count} Deployments, each in all {n} clusters (Duplicated)");
    let policies: Api<fed_api::PropagationPolicy> = Api::namespaced(fed.clone(), NS);
    let p: fed_api::PropagationPolicy = serde_json::from_value(json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "everywhere", "namespace": NS},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "labelSelector": {"matchLabels": {"group": "everywhere"}}}],
                 "placement": {"clusterAffinity": {"clusterNames": clusters},
                               "replicaScheduling": {"type": "Duplicated"}}}
    }))?;
    policies.create(&PostParams::default(), &p).await?;
    let names: Vec<String> = (0..count).map(|i| format!("f-{i}")).collect();
    let api: Api<Deployment> = Api::namespaced(fed.clone(), NS);
    let total = count * n;
    for (phase, replicas) in [("create", 1), ("scale 1 -> 2", 2)] {
        let writes0 = scrape(
            metrics_port,
            "meridian_controllers_workload_member_writes_total",
        )
        .await;
        let reconciles0 = scrape(metrics_port, RECONCILES).await;
        let verb = if replicas == 1 { "create" } else { "update" };
        let ok0 = scrape(metrics_port, &member_writes_ok(verb)).await;
        let cpu0 = Cpu::sample(pids);
        let fw0 = fed_writes(fed).await;
        let sem = Arc::new(Semaphore::new(CONCURRENCY));
        let start = Instant::now();
        let requests = async {
            let mut tasks = Vec::new();
            for name in &names {
                let permit = sem.clone().acquire_owned().await?;
                let (api, name) = (api.clone(), name.clone());
                tasks.push(tokio::spawn(async move {
                    let r = if replicas == 1 {
                        api.create(
                            &PostParams::default(),
                            &deployment_in(&name, "everywhere", 1),
                        )
                        .await
                        .map(drop)
                    } else {
                        api.patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                        )
                        .await
                        .map(drop)
                    };
                    r.unwrap_or_else(|e| panic!("{name}: {e}"));
                    drop(permit);
                }));
            }
            for t in tasks {
                t.await?;
            }
            anyhow::Ok(())
        };
        let limit = Duration::from_secs(600);
        let (sent, counted) = tokio::join!(
            requests,
            count_writes(metrics_port, verb, ok0, total, limit)
        );
        sent?;
        let Some((first, last)) = counted else {
            anyhow::bail!("fan-out {phase}: the member writes never all completed");
        };
        let all = last.duration_since(start).as_secs_f64();
        let window = last.duration_since(first).as_secs_f64().max(1e-3);
        println!(
            "  fan-out {phase}: {total} member copies {} {all:.2}s after the first federation request = {:.0} writes/s end to end, {:.0} writes/s between the first and last member write (controller's counter)",
            if replicas == 1 { "created" } else { "updated" },
            total as f64 / all,
            total as f64 / window,
        );
        let writes = scrape(
            metrics_port,
            "meridian_controllers_workload_member_writes_total",
        )
        .await
            - writes0;
        settle(fed, start).await;
        Cpu::sample(pids).report(cpu0, &format!("fan-out {phase}"), (writes, "member write"));
        let reconciles = scrape(metrics_port, RECONCILES).await - reconciles0;
        println!(
            "  controller reconciles: {reconciles:.0} ({:.1} per Deployment)",
            reconciles / count as f64
        );
        report_fed_writes(&fw0, &fed_writes(fed).await, (count as f64, "Deployment"));
        verify_copies(&members, &names, replicas).await?;
    }
    Ok(())
}

/// The workload controller's reconcile counter (every result).
const RECONCILES: &str = "meridian_controllers_workload_reconciles_total";

//! Fleet benchmark: one workload onto a thousand member clusters. Real federation-apiserver
//! (embedded store), cluster-sim `--api-only` (every member in one process: API servers
//! that only store), fed-scheduler and fed-controllers (release builds). Timestamps are
//! taken when watch events arrive here. The bench plays the members' controllers: each copy
//! gets, `--ready-delay-ms` after it appears, the status a member reports once its pods are
//! Ready (one status write on the member), so the federated status can become READY.
//!
//! Phases, each followed by the CPU seconds every process used, the federation writes per
//! workload (the API server's request counters, by verb and resource), the Events the phase
//! added by the kind of object they are about (a workload's own apart from the Clusters') and
//! each process's RSS:
//! - start: the time from starting the controllers to every Cluster Ready, and the Cluster
//!   status writes that took;
//! - Duplicated: `--repeat` Deployments (1 replica) on every member, one at a time (the next
//!   once the last is READY): apply → every member holds its copy, apply → federated READY
//!   (every copy's pods counted Ready), p50/p99 over the repetitions;
//! - Divided: the same with `--clusters` replicas divided over every member (one each);
//! - a pair: `--pairs` Deployments (2 replicas) placed on 2 of the members, created
//!   `--rate` per second: apply → both copies, apply → READY; the workload's cost should
//!   follow its own destinations, not the size of the fleet;
//! - idle: `--idle-s` seconds (default 20) with nothing to do, after the phases above have
//!   settled: the fleet's background writes per second, the members' Lease renewals (one
//!   per member per probe period at most) and Cluster status patches (only on a change,
//!   and once per `--status-report-period`);
//! - sustained: `--workloads` Duplicated Deployments created at once (`--workloads` ×
//!   `--clusters` copies). The member watches and the bench's status writes are stopped
//!   first: the controller's own counter of member writes times the phase (as
//!   `propagation_bench`'s fan-out does), and a list of every member then checks that each
//!   holds every copy.
//!
//! The benches share their process handling (`common/`): `PROPAGATION_BENCH_FED_CONTROLLERS=<path>`
//! (likewise `_FEDERATION_APISERVER`, `_FED_SCHEDULER`, `_CLUSTER_SIM`) runs another build or
//! a profiler wrapper in that binary's place here too. Apply → READY includes the
//! `--ready-delay-ms` the bench waits before writing a copy's status.
//!
//! ```text
//! cargo build --release --bins --examples -p federation-apiserver -p cluster-sim -p fed-scheduler -p fed-controllers
//! target/release/examples/fleet_bench --clusters 1000 --repeat 10 --pairs 100 --workloads 200
//! target/release/examples/fleet_bench --clusters 200 --repeat 5 --pairs 50 --workloads 20
//! ```

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use common::members::{self, ReadyResponder, SlimDeployment, counts, deployments};
use common::{
    Cpu, Fleet, arg, count_writes, fed_writes, member_clients, member_writes_ok, report_fed_writes,
    rss_mb, settle, summary, until,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio::sync::Semaphore;

const NS: &str = "fleet";
/// Requests in flight while creating, and the bench's status writes in flight.
const CONCURRENCY: usize = 64;
/// Longest any one wait of a phase may take before the run gives up.
const WITHIN: Duration = Duration::from_secs(600);

/// What the watches saw, keyed by Deployment name; times are arrival times.
#[derive(Default)]
struct Seen {
    /// The members holding a copy, and when the latest of them got it.
    copies: HashMap<String, (HashSet<usize>, Instant)>,
    /// Ready replicas the federated Deployment reports once every copy is Ready.
    wanted_ready: HashMap<String, i32>,
    /// When the federated Deployment first reported them.
    fed_ready: HashMap<String, Instant>,
}

impl Seen {
    fn holders(&self, name: &str) -> usize {
        self.copies.get(name).map_or(0, |c| c.0.len())
    }
}

/// Watches the Deployments of [`NS`] in member `member` (`None`: the federation).
fn watch(
    client: kube::Client,
    member: Option<usize>,
    seen: Arc<Mutex<Seen>>,
    responder: Option<ReadyResponder>,
) -> tokio::task::JoinHandle<()> {
    let api: Api<SlimDeployment> = Api::namespaced_with(client, NS, &deployments());
    tokio::spawn(async move {
        let mut s =
            std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = s.next().await {
            let now = Instant::now();
            let Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) = ev else {
                continue;
            };
            let name = d.metadata.name.clone().unwrap_or_default();
            let (_, ready) = counts(&d);
            let mut g = seen.lock().unwrap();
            match member {
                Some(c) => {
                    let entry = g
                        .copies
                        .entry(name.clone())
                        .or_insert_with(|| (HashSet::new(), now));
                    if entry.0.insert(c) {
                        entry.1 = now;
                    }
                    if let Some(r) = &responder {
                        r.observe(c, &d);
                    }
                }
                None => {
                    if g.wanted_ready.get(&name).is_some_and(|w| ready >= *w) {
                        g.fed_ready.entry(name).or_insert(now);
                    }
                }
            }
        }
    })
}

/// A Deployment of `replicas` that the policy of `group` selects.
fn deployment(name: &str, group: &str, replicas: i32) -> Deployment {
    members::deployment(NS, name, group, replicas)
}

/// A policy placing the Deployments labelled `group` on `clusters` (every cluster for
/// `None`), `Duplicated` or `Divided`.
async fn policy(
    fed: &kube::Client,
    group: &str,
    clusters: Option<&[String]>,
    duplicated: bool,
) -> anyhow::Result<()> {
    let mut placement = if duplicated {
        json!({"replicaScheduling": {"type": "Duplicated"}})
    } else {
        json!({"replicaScheduling": {"type": "Divided", "division": "StaticWeight"}})
    };
    if let Some(names) = clusters {
        placement["clusterAffinity"] = json!({"clusterNames": names});
    }
    let p: fed_api::PropagationPolicy = serde_json::from_value(json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": group, "namespace": NS},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "labelSelector": {"matchLabels": {"group": group}}}],
                 "placement": placement}
    }))?;
    Api::<fed_api::PropagationPolicy>::namespaced(fed.clone(), NS)
        .create(&PostParams::default(), &p)
        .await?;
    Ok(())
}

/// What one measured phase creates: `count` Deployments named `<prefix>-<i>` of
/// `replicas`, labelled `group`, each with copies in `members` members whose Ready
/// replicas add up to `ready`.
struct Shape {
    label: &'static str,
    prefix: &'static str,
    group: &'static str,
    count: usize,
    replicas: i32,
    members: usize,
    ready: i32,
    /// Creations per second; `None`: one at a time, each once the previous is READY.
    rate: Option<usize>,
}

/// The processes a phase reports on.
struct Procs {
    /// apiserver, scheduler, controllers, cluster-sim.
    pids: [u32; 4],
    /// The controllers' metrics port.
    metrics_port: u16,
}

impl Procs {
    /// The controllers' passes over federated workloads so far (each visits every member
    /// the workload is on).
    async fn workload_passes(&self) -> f64 {
        common::scrape(
            self.metrics_port,
            "meridian_controllers_workload_reconciles_total",
        )
        .await
    }

    /// Prints the passes since `before`, per workload of the phase.
    async fn report_passes(&self, before: f64, workloads: usize) {
        let passes = self.workload_passes().await - before;
        println!(
            "  controller passes over the workloads: {passes:.0} ({:.1} per Deployment)",
            passes / workloads.max(1) as f64
        );
    }

    fn report_rss(&self, when: &str) {
        let [a, s, c, m] = self.pids.map(rss_mb);
        println!(
            "  RSS {when}: apiserver {a:.0} MB + scheduler {s:.0} MB + controllers {c:.0} MB = {:.0} MB control plane; cluster-sim {m:.0} MB",
            a + s + c
        );
    }
}

/// Runs one phase of [`Shape`] with the watches on: creates, waits for every copy and for
/// READY, prints both latencies, then CPU, federation writes and RSS.
async fn measured(
    fed: &kube::Client,
    seen: &Arc<Mutex<Seen>>,
    procs: &Procs,
    shape: &Shape,
) -> anyhow::Result<()> {
    println!(
        "{}: {} Deployments of {} replicas, each on {} members{}",
        shape.label,
        shape.count,
        shape.replicas,
        shape.members,
        match shape.rate {
            Some(r) => format!(", created {r}/s"),
            None => ", one at a time".into(),
        }
    );
    let api: Api<Deployment> = Api::namespaced(fed.clone(), NS);
    let names: Vec<String> = (0..shape.count)
        .map(|i| format!("{}-{i}", shape.prefix))
        .collect();
    {
        let mut g = seen.lock().unwrap();
        for n in &names {
            g.wanted_ready.insert(n.clone(), shape.ready);
        }
    }
    let cpu0 = Cpu::sample(procs.pids);
    let passes0 = procs.workload_passes().await;
    let fw0 = fed_writes(fed).await;
    let ev0 = events_by_subject(fed).await?;
    let start = Instant::now();
    let mut created = HashMap::new();
    let mut tick = shape.rate.map(|r| {
        let mut t = tokio::time::interval(Duration::from_secs_f64(1.0 / r.max(1) as f64));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        t
    });
    let mut requests = Vec::new();
    for name in &names {
        if let Some(t) = tick.as_mut() {
            t.tick().await;
        }
        created.insert(name.clone(), Instant::now());
        let (api, d) = (api.clone(), deployment(name, shape.group, shape.replicas));
        let request = async move { api.create(&PostParams::default(), &d).await };
        if tick.is_some() {
            requests.push(tokio::spawn(request));
        } else {
            request.await.with_context(|| format!("creating {name}"))?;
            let done = until(name, WITHIN, || {
                let g = seen.lock().unwrap();
                let have = g.holders(name) + usize::from(g.fed_ready.contains_key(name));
                (have, shape.members + 1)
            })
            .await;
            anyhow::ensure!(done, "{name} never reached every member and READY");
        }
    }
    for r in requests {
        r.await?.context("creating")?;
    }
    let done = until(shape.label, WITHIN, || {
        let g = seen.lock().unwrap();
        let have = names
            .iter()
            .filter(|n| g.holders(n) == shape.members && g.fed_ready.contains_key(*n))
            .count();
        (have, names.len())
    })
    .await;
    if !done {
        // Which half is missing: copies in the members, or READY in the federation.
        let g = seen.lock().unwrap();
        let short = |n: &&String| g.holders(n) < shape.members;
        let over = |n: &&String| g.holders(n) > shape.members;
        let not_ready = |n: &&String| !g.fed_ready.contains_key(*n);
        println!(
            "  {}: {} with copies missing, {} with extra copies, {} not READY in the federation",
            shape.label,
            names.iter().filter(short).count(),
            names.iter().filter(over).count(),
            names.iter().filter(not_ready).count(),
        );
    }
    anyhow::ensure!(done, "{}: not every Deployment got there", shape.label);
    {
        let g = seen.lock().unwrap();
        let ms = |n: &String, at: Instant| at.duration_since(created[n]).as_secs_f64() * 1e3;
        summary(
            &format!("  {} apply -> every member holds its copy", shape.label),
            names.iter().map(|n| ms(n, g.copies[n].1)).collect(),
        );
        summary(
            &format!("  {} apply -> federated READY", shape.label),
            names.iter().map(|n| ms(n, g.fed_ready[n])).collect(),
        );
    }
    settle(fed, start).await;
    let copies = (shape.count * shape.members) as f64;
    Cpu::sample(procs.pids).report(cpu0, shape.label, (copies, "member copy"));
    procs.report_passes(passes0, shape.count).await;
    workload_writes(&fw0, &fed_writes(fed).await, shape.count);
    report_events(&ev0, &events_by_subject(fed).await?);
    procs.report_rss(&format!("after {}", shape.label));
    Ok(())
}

/// Whether a federation write counter is the fleet's own background: Cluster status,
/// the members' heartbeat Leases and the leader-election Leases, written whatever the
/// workloads do.
fn background(key: &str) -> bool {
    key.contains(" clusters") || key.contains(" leases")
}

/// Prints the federation writes since `before` per created Deployment, the fleet's
/// background (see [`background`]) apart: at a thousand members the heartbeats outnumber
/// a phase's own writes.
fn workload_writes(before: &HashMap<String, f64>, after: &HashMap<String, f64>, count: usize) {
    let (bg, own): (HashMap<String, f64>, HashMap<String, f64>) = after
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .partition(|(k, _)| background(k));
    report_fed_writes(before, &own, (count as f64, "Deployment"));
    let before_bg: HashMap<String, f64> = before
        .iter()
        .filter(|(k, _)| background(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    print!("  background");
    report_fed_writes(&before_bg, &bg, (1.0, "phase"));
}

/// The federation's Events by the kind of object they are about: (Event objects, sum of
/// their counts). A phase's difference tells the workloads' Events from the fleet's
/// (Clusters going offline and back while a fan-out starts every member's connection).
async fn events_by_subject(fed: &kube::Client) -> anyhow::Result<HashMap<String, (u64, u64)>> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(fed.clone());
    let mut out: HashMap<String, (u64, u64)> = HashMap::new();
    for e in api
        .list(&ListParams::default())
        .await
        .context("listing Events")?
    {
        let kind = e.involved_object.kind.unwrap_or_default();
        let entry = out.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += u64::try_from(e.count.unwrap_or(1)).unwrap_or(1);
    }
    Ok(out)
}

/// Prints the Events a phase added, by the kind of object they are about.
fn report_events(before: &HashMap<String, (u64, u64)>, after: &HashMap<String, (u64, u64)>) {
    let mut kinds: Vec<(&String, u64, u64)> = after
        .iter()
        .map(|(k, (n, c))| {
            let (n0, c0) = before.get(k).copied().unwrap_or_default();
            (k, n.saturating_sub(n0), c.saturating_sub(c0))
        })
        .filter(|(_, n, c)| *n > 0 || *c > 0)
        .collect();
    kinds.sort();
    let parts: Vec<String> = kinds
        .iter()
        .map(|(k, n, c)| format!("{k} {n} new ({c} occurrences)"))
        .collect();
    println!(
        "  Events by subject: {}",
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    );
}

/// The sustained phase: `count` Duplicated Deployments created at once onto `members`,
/// timed by the controller's counter of member creates, then checked by listing every
/// member.
async fn sustained(
    fed: &kube::Client,
    members: &[kube::Client],
    procs: &Procs,
    count: usize,
    metrics_port: u16,
) -> anyhow::Result<()> {
    let total = count * members.len();
    println!(
        "sustained: {count} Duplicated Deployments created at once, each on all {} members ({total} copies)",
        members.len()
    );
    let api: Api<Deployment> = Api::namespaced(fed.clone(), NS);
    let names: Vec<String> = (0..count).map(|i| format!("s-{i}")).collect();
    let base = common::scrape(metrics_port, &member_writes_ok("create")).await;
    let cpu0 = Cpu::sample(procs.pids);
    let passes0 = procs.workload_passes().await;
    let fw0 = fed_writes(fed).await;
    let ev0 = events_by_subject(fed).await?;
    let sem = Arc::new(Semaphore::new(CONCURRENCY));
    let start = Instant::now();
    let requests = async {
        let mut tasks = Vec::new();
        for name in &names {
            let permit = sem.clone().acquire_owned().await?;
            let (api, d) = (api.clone(), deployment(name, "duplicated", 1));
            tasks.push(tokio::spawn(async move {
                let r = api.create(&PostParams::default(), &d).await;
                drop(permit);
                r
            }));
        }
        for t in tasks {
            t.await?.context("creating")?;
        }
        anyhow::Ok(start.elapsed())
    };
    let (sent, counted) = tokio::join!(
        requests,
        count_writes(metrics_port, "create", base, total, WITHIN)
    );
    let sent = sent?;
    // A create that failed on the way back but took on the member is not counted as one;
    // the list of every member below says whether copies are really missing.
    if let Some((first, last)) = counted {
        let all = last.duration_since(start).as_secs_f64();
        let window = last.duration_since(first).as_secs_f64().max(1e-3);
        println!(
            "  {count} federation creates took {:.2}s; all {total} copies created {all:.2}s after the first = {:.0} writes/s end to end, {:.0} writes/s between the first and last member write (controller's counter)",
            sent.as_secs_f64(),
            total as f64 / all,
            total as f64 / window
        );
    }
    settle(fed, start).await;
    Cpu::sample(procs.pids).report(cpu0, "sustained", (total as f64, "member copy"));
    procs.report_passes(passes0, count).await;
    workload_writes(&fw0, &fed_writes(fed).await, count);
    report_events(&ev0, &events_by_subject(fed).await?);
    procs.report_rss("after sustained");
    // The counter timed the writes; this confirms every member holds every copy.
    let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
    let short: Vec<(usize, usize)> = futures::stream::iter(members.iter().enumerate())
        .map(|(i, m)| {
            let api: Api<SlimDeployment> = Api::namespaced_with(m.clone(), NS, &deployments());
            let wanted = &wanted;
            async move {
                let list = api
                    .list(&ListParams::default().labels("group=duplicated"))
                    .await;
                let held = list.map_or(0, |l| {
                    l.items
                        .iter()
                        .filter(|d| {
                            d.metadata
                                .name
                                .as_deref()
                                .is_some_and(|n| wanted.contains(n))
                        })
                        .count()
                });
                (i, held)
            }
        })
        .buffer_unordered(16)
        .filter(|(_, held)| std::future::ready(*held != count))
        .collect()
        .await;
    anyhow::ensure!(
        short.is_empty(),
        "{} members do not hold all {count} copies (member index, held): {:?}",
        short.len(),
        &short[..short.len().min(5)]
    );
    println!("  every member holds all {count} copies");
    Ok(())
}

/// The federation writes and CPU per second over `seconds` in which nothing changes (the
/// window is the measurement): what the fleet costs at rest, probes and heartbeats, which
/// the phases above pay too.
async fn idle(fed: &kube::Client, procs: &Procs, seconds: u64) {
    if seconds == 0 {
        return;
    }
    println!("idle for {seconds}s");
    let before = fed_writes(fed).await;
    let cpu0 = Cpu::sample(procs.pids);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    Cpu::sample(procs.pids).report(cpu0, "idle", (seconds as f64, "second"));
    report_fed_writes(&before, &fed_writes(fed).await, (seconds as f64, "second"));
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ctrl-C drops the run, and with it the child processes.
    tokio::select! {
        r = run() => r,
        s = tokio::signal::ctrl_c() => s.context("waiting for Ctrl-C"),
    }
}

async fn run() -> anyhow::Result<()> {
    let clusters = arg("--clusters", 1000).max(2);
    let repeat = arg("--repeat", 10);
    let pairs = arg("--pairs", 100);
    let rate = arg("--rate", 20);
    let workloads = arg("--workloads", 200);
    let ready_delay = Duration::from_millis(arg("--ready-delay-ms", 100) as u64);
    let metrics_port = arg("--metrics-port", 18090) as u16;
    println!("{clusters} API-only member clusters in one cluster-sim");
    let sim_args = vec!["--api-only".into(), "--nodes=1".into()];
    let fleet = Fleet::start("fleet-bench", clusters, sim_args, &[NS]).await?;
    let (fed, names) = (fleet.fed.clone(), fleet.names.clone());
    println!(
        "  cluster-sim RSS with {clusters} clusters: {:.0} MB",
        rss_mb(fleet.sim.pid())
    );
    let pair = [names[0].clone(), names[clusters - 1].clone()];
    policy(&fed, "duplicated", None, true).await?;
    policy(&fed, "divided", None, false).await?;
    policy(&fed, "pair", Some(&pair[..]), false).await?;

    let fw0 = fed_writes(&fed).await;
    let (scheduler, controllers) = fleet.start_control_plane(metrics_port).await?;
    report_fed_writes(&fw0, &fed_writes(&fed).await, (clusters as f64, "Cluster"));
    let procs = Procs {
        pids: [
            fleet.apiserver.pid(),
            scheduler.pid(),
            controllers.pid(),
            fleet.sim.pid(),
        ],
        metrics_port,
    };
    procs.report_rss("with every Cluster Ready");

    let seen = Arc::new(Mutex::new(Seen::default()));
    let members = member_clients(&fleet.sim_kc, &names).await;
    let responder = ReadyResponder::start(members.clone(), NS, ready_delay, CONCURRENCY);
    let mut watches: Vec<_> = members
        .iter()
        .enumerate()
        .map(|(i, c)| watch(c.clone(), Some(i), seen.clone(), Some(responder.clone())))
        .collect();
    watches.push(watch(fed.clone(), None, seen.clone(), None));

    let copies = i32::try_from(clusters)?;
    let shapes = [
        Shape {
            label: "Duplicated",
            prefix: "dup",
            group: "duplicated",
            count: repeat,
            replicas: 1,
            members: clusters,
            ready: copies,
            rate: None,
        },
        Shape {
            label: "Divided",
            prefix: "div",
            group: "divided",
            count: repeat,
            replicas: copies,
            members: clusters,
            ready: copies,
            rate: None,
        },
        Shape {
            label: "2 of the members",
            prefix: "pair",
            group: "pair",
            count: pairs,
            replicas: 2,
            members: 2,
            ready: 2,
            rate: Some(rate),
        },
    ];
    for shape in shapes.iter().filter(|s| s.count > 0) {
        measured(&fed, &seen, &procs, shape).await?;
    }

    idle(&fed, &procs, arg("--idle-s", 20) as u64).await;

    // Nothing watches the members while the sustained phase runs: a watch of every member
    // would have each send every copy twice and this process decode it, on the same cores
    // as what is measured.
    responder.stop();
    for w in &watches {
        w.abort();
    }
    if workloads > 0 {
        sustained(&fed, &members, &procs, workloads, metrics_port).await?;
    }
    drop((controllers, scheduler));
    let dir = fleet.dir.clone();
    drop(fleet);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

//! Mixed-kind propagation benchmark: what a platform team's applications cost the
//! federation, kind by kind. Real federation-apiserver (embedded store), cluster-sim,
//! fed-scheduler and fed-controllers processes (release builds), members API-only by default
//! (their own controllers would run on their own machines).
//!
//! Every app is a ServiceAccount, a ConfigMap, a Deployment (2 replicas, divided) that uses
//! both, a Service, an HPA and a PDB for it; every tenth app also a StatefulSet and a Job
//! (divided: 2 replicas, parallelism 2). One PropagationPolicy per pair of clusters selects
//! every kind but the ConfigMap and the ServiceAccount by the app's `group` label, so each
//! object lands in the two clusters of its group: the ConfigMap and the ServiceAccount as the
//! Deployment's dependencies (a policy naming them too would have two paths write them), the
//! Service on its own path, the rest as divided workloads or copies. `--overrides` adds a ClusterOverridePolicy that
//! labels every copy and rewrites the workloads' image registry, so two runs give the cost
//! of applying overrides per pushed copy.
//!
//! Objects are created at `--rate` per second. Prints, per kind and over all: propagation
//! latency (create in the federation → ADDED in the last destination's member watch;
//! p50/p99/max); for the workload kinds (Deployments, StatefulSets, Jobs) the federated
//! status lag (the last destination's copy reports its pods Ready → the federated object
//! shows them Ready, and of that the part until its Placement's status shows them; as
//! propagation_bench measures it); member writes per second over the run, CPU seconds per
//! process with the controllers' CPU per member write, federation writes per object, and
//! control-plane RSS with everything propagated.
//!
//! API-only members have no controllers to report their copies Ready: the bench plays them,
//! writing each workload copy's Ready status `--ready-delay-ms` (default 100) after it
//! appears (one status write on the member), so the figures include the status write-back
//! members cause.
//!
//! ```text
//! cargo build --release -p federation-apiserver -p cluster-sim -p fed-scheduler -p fed-controllers
//! cargo run --release -p fed-controllers --example mixed_bench -- --clusters 100 --objects 10000
//! cargo run --release -p fed-controllers --example mixed_bench -- --clusters 100 --objects 10000 --overrides
//! ```

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::members::{ReadyResponder, Workload};
use common::status_lag::{self, Lag};
use common::{
    Cpu, Fleet, arg, fed_writes, report_fed_writes, rss_mb, scrape, settle, summary, until,
};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const NS: &str = "bench";
/// Requests in flight while creating.
const CONCURRENCY: usize = 64;
/// Every kind an app is made of: (apiVersion, kind, plural).
const KINDS: [(&str, &str, &str); 8] = [
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("apps/v1", "Deployment", "deployments"),
    ("v1", "Service", "services"),
    (
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    ),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("batch/v1", "Job", "jobs"),
];

/// The kinds that follow their Deployment as its pod template's dependencies.
const DEPENDENCIES: [&str; 2] = ["ServiceAccount", "ConfigMap"];

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The objects of app `i` in `group`, in creation order (dependencies first).
fn app(i: usize, group: usize) -> Vec<Value> {
    let name = format!("app-{i}");
    let labels = json!({"app": name, "group": group.to_string()});
    let meta = |n: &str| json!({"name": n, "namespace": NS, "labels": labels});
    let pod = json!({
        "metadata": {"labels": {"app": name}},
        "spec": {"serviceAccountName": name, "containers": [{
            "name": "app", "image": "registry.example/app:1",
            "envFrom": [{"configMapRef": {"name": name}}],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    });
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(&name)}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(&name),
               "data": {"LOG_LEVEL": "info", "APP": name}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(&name),
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": pod}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(&name),
               "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}}),
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta(&name),
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                        "minReplicas": 1, "maxReplicas": 4,
                        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                     "target": {"type": "Utilization", "averageUtilization": 80}}}]}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(&name),
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}}),
    ];
    if i.is_multiple_of(10) {
        let db = format!("{name}-db");
        let job = format!("{name}-migrate");
        objects.push(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(&db),
            "spec": {"replicas": 2, "serviceName": db, "selector": {"matchLabels": {"app": db}},
                     "template": {"metadata": {"labels": {"app": db}},
                                  "spec": {"containers": [{"name": "db", "image": "registry.example/db:1",
                                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}));
        objects.push(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta(&job),
            "spec": {"parallelism": 2, "completions": 2,
                     "template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "migrate", "image": "registry.example/migrate:1",
                                                           "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}));
    }
    objects
}

/// When each object's copies first appeared, by member: `(kind, name) → member → time`
/// (also when each workload's copies first reported every pod Ready).
type Seen = Arc<Mutex<HashMap<(String, String), HashMap<usize, Instant>>>>;

/// When something first happened to each object: `(kind, name) → time`.
type Firsts = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// Whether a workload `o` of kind `w` reports every pod Ready.
fn all_ready(w: Workload, o: &Value) -> bool {
    let (wanted, ready) = w.counts(o);
    wanted > 0 && ready == wanted
}

/// Watches Meridian's copies of every kind in member `index` (label `group` set, as on
/// every bench object), recording first sightings, and when each workload copy first
/// reports every pod Ready (`ready`), showing the copies to `responder` if any.
fn watch_member(
    client: kube::Client,
    index: usize,
    seen: Seen,
    ready: Seen,
    responder: Option<ReadyResponder>,
) -> Vec<tokio::task::JoinHandle<()>> {
    KINDS
        .iter()
        .map(|(av, kind, plural)| {
            let ar = resource(av, kind, plural);
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
            let (seen, ready, responder) = (seen.clone(), ready.clone(), responder.clone());
            let kind = kind.to_string();
            tokio::spawn(async move {
                let cfg = watcher::Config::default().labels("group");
                let mut stream = std::pin::pin!(
                    watcher::watcher(api, cfg)
                        .default_backoff()
                        .applied_objects()
                );
                while let Some(ev) = stream.next().await {
                    let Ok(o) = ev else { continue };
                    let now = Instant::now();
                    let key = (kind.clone(), o.metadata.name.clone().unwrap_or_default());
                    // A workload copy: decoded once more, for its counts.
                    if let Some(w) = Workload::of(&kind) {
                        let v = serde_json::to_value(&o).unwrap();
                        if all_ready(w, &v) {
                            ready
                                .lock()
                                .unwrap()
                                .entry(key.clone())
                                .or_default()
                                .entry(index)
                                .or_insert(now);
                        }
                        if let Some(r) = &responder {
                            r.observe_workload(index, w, &v);
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .entry(key)
                        .or_default()
                        .entry(index)
                        .or_insert(now);
                }
            })
        })
        .collect()
}

/// Watches the federation's workloads of every [`Workload`] kind, recording when each
/// first reports every pod Ready.
fn watch_federated_ready(fed: kube::Client, ready: Firsts) -> Vec<tokio::task::JoinHandle<()>> {
    Workload::ALL
        .into_iter()
        .map(|w| {
            let api: Api<DynamicObject> = Api::namespaced_with(fed.clone(), NS, &w.resource());
            let ready = ready.clone();
            tokio::spawn(async move {
                let cfg = watcher::Config::default().labels("group");
                let mut stream = std::pin::pin!(
                    watcher::watcher(api, cfg)
                        .default_backoff()
                        .applied_objects()
                );
                while let Some(ev) = stream.next().await {
                    let Ok(o) = ev else { continue };
                    if all_ready(w, &serde_json::to_value(&o).unwrap()) {
                        let key = (w.as_str().to_owned(), o.metadata.name.unwrap_or_default());
                        ready
                            .lock()
                            .unwrap()
                            .entry(key)
                            .or_insert_with(Instant::now);
                    }
                }
            })
        })
        .collect()
}

/// Watches the federation's Placements, recording when each object's first had
/// destinations (the scheduler's half of the propagation latency), and when each
/// workload's first showed every destination's pods Ready (`ready`).
fn watch_placements(fed: kube::Client, placed: Seen, ready: Firsts) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<fed_api::Placement> = Api::namespaced(fed, NS);
        let mut stream = std::pin::pin!(
            watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        while let Some(ev) = stream.next().await {
            let Ok(p) = ev else { continue };
            if p.spec.dest_clusters.is_empty() {
                continue;
            }
            let r = &p.spec.resource;
            let wanted: i64 = p
                .spec
                .dest_clusters
                .iter()
                .map(|t| i64::from(t.replicas))
                .sum();
            let shown: i64 = p
                .status
                .iter()
                .flat_map(|s| &s.clusters)
                .map(|c| i64::from(c.ready_replicas))
                .sum();
            if Workload::of(&r.kind).is_some() && wanted > 0 && shown == wanted {
                ready
                    .lock()
                    .unwrap()
                    .entry((r.kind.clone(), r.name.clone()))
                    .or_insert_with(Instant::now);
            }
            placed
                .lock()
                .unwrap()
                .entry((r.kind.clone(), r.name.clone()))
                .or_default()
                .entry(0)
                .or_insert_with(Instant::now);
        }
    })
}

/// Creates `objects` in the federation, `rate` per second; returns each one's creation
/// start time by `(kind, name)`.
async fn create_all(
    fed: &kube::Client,
    objects: Vec<Value>,
    rate: usize,
) -> HashMap<(String, String), Instant> {
    let sem = Arc::new(Semaphore::new(CONCURRENCY));
    let started = Arc::new(Mutex::new(HashMap::new()));
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::new();
    for o in objects {
        tick.tick().await;
        let permit = sem.clone().acquire_owned().await.unwrap();
        let kind = o["kind"].as_str().unwrap().to_owned();
        let (av, _, plural) = KINDS.iter().find(|k| k.1 == kind).unwrap();
        let api: Api<DynamicObject> =
            Api::namespaced_with(fed.clone(), NS, &resource(av, &kind, plural));
        let started = started.clone();
        tasks.push(tokio::spawn(async move {
            let name = o["metadata"]["name"].as_str().unwrap().to_owned();
            let obj: DynamicObject = serde_json::from_value(o).unwrap();
            started
                .lock()
                .unwrap()
                .insert((kind.clone(), name.clone()), Instant::now());
            api.create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(started).unwrap().into_inner().unwrap()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let clusters = arg("--clusters", 100).max(2) / 2 * 2;
    let target = arg("--objects", 10_000);
    let rate = arg("--rate", 500);
    let metrics_port = arg("--metrics-port", 18090) as u16;
    let with_pods = std::env::args().any(|a| a == "--with-pods");
    let ready_delay_ms = arg("--ready-delay-ms", 100);
    let overrides = std::env::args().any(|a| a == "--overrides");
    let groups = clusters / 2;

    let mut objects: Vec<(Value, usize)> = Vec::new();
    let mut apps = 0;
    while objects.len() < target {
        let group = apps % groups;
        objects.extend(app(apps, group).into_iter().map(|o| (o, group)));
        apps += 1;
    }
    println!(
        "{} objects ({apps} apps) over {clusters} clusters ({groups} policies), at {rate}/s{}{}",
        objects.len(),
        if with_pods {
            "; members simulate pods"
        } else {
            "; members API-only"
        },
        if overrides {
            "; with a ClusterOverridePolicy on every copy"
        } else {
            ""
        },
    );
    let mut sim_args = vec![
        "--nodes=2".into(),
        "--node-cpu=512".into(),
        "--node-memory=2Ti".into(),
        "--node-pods=5000".into(),
    ];
    if !with_pods {
        sim_args.push("--api-only".into());
    }
    let fleet = Fleet::start("mixed-bench", clusters, sim_args, &[NS]).await?;
    let fed = fleet.fed.clone();
    let selectors: Vec<Value> = KINDS
        .iter()
        .filter(|(_, kind, _)| !DEPENDENCIES.contains(kind))
        .map(|(av, kind, _)| json!({"apiVersion": av, "kind": kind}))
        .collect();
    let policies: Api<fed_api::PropagationPolicy> = Api::namespaced(fed.clone(), NS);
    for g in 0..groups {
        let with_group: Vec<Value> = selectors
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s["labelSelector"] = json!({"matchLabels": {"group": g.to_string()}});
                s
            })
            .collect();
        let p: fed_api::PropagationPolicy = serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": format!("group-{g}"), "namespace": NS},
            "spec": {"resourceSelectors": with_group,
                     "placement": {"clusterAffinity": {"clusterNames": [fleet.names[2 * g], fleet.names[2 * g + 1]]},
                                   "replicaScheduling": {"type": "Divided", "division": "StaticWeight"}}}
        }))?;
        policies.create(&PostParams::default(), &p).await?;
    }
    if overrides {
        let cop: fed_api::ClusterOverridePolicy = serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "ClusterOverridePolicy",
            "metadata": {"name": "fleet"},
            "spec": {"resourceSelectors": selectors,
                     "overrideRules": [
                         {"overriders": {"labelsOverrider": [{"operator": "add", "value": {"fleet": "bench"}}]}},
                         {"overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace",
                                                             "value": "mirror.example"}]}}]}
        }))?;
        Api::<fed_api::ClusterOverridePolicy>::all(fed.clone())
            .create(&PostParams::default(), &cop)
            .await?;
    }
    let (scheduler, controllers) = fleet.start_control_plane(metrics_port).await?;

    let seen: Seen = Arc::default();
    let member_ready: Seen = Arc::default();
    let mut members = Vec::new();
    for n in &fleet.names {
        members.push(fleet.member(n).await);
    }
    let responder = (!with_pods).then(|| {
        ReadyResponder::start(
            members.clone(),
            NS,
            Duration::from_millis(ready_delay_ms as u64),
            CONCURRENCY,
        )
    });
    let mut watches = Vec::new();
    for (i, m) in members.into_iter().enumerate() {
        watches.extend(watch_member(
            m,
            i,
            seen.clone(),
            member_ready.clone(),
            responder.clone(),
        ));
    }
    let placed: Seen = Arc::default();
    let placement_ready: Firsts = Arc::default();
    let federated_ready: Firsts = Arc::default();
    watches.push(watch_placements(
        fed.clone(),
        placed.clone(),
        placement_ready.clone(),
    ));
    watches.extend(watch_federated_ready(fed.clone(), federated_ready.clone()));
    let pids = [
        fleet.apiserver.pid(),
        scheduler.pid(),
        controllers.pid(),
        fleet.sim.pid(),
    ];
    let cpu0 = Cpu::sample(pids);
    let fw0 = fed_writes(&fed).await;
    let writes0 = scrape(
        metrics_port,
        "meridian_controllers_workload_member_writes_total",
    )
    .await;
    let dests: HashMap<(String, String), usize> = objects
        .iter()
        .map(|(o, g)| {
            (
                (
                    o["kind"].as_str().unwrap().to_owned(),
                    o["metadata"]["name"].as_str().unwrap().to_owned(),
                ),
                *g,
            )
        })
        .collect();
    let total = objects.len();
    let t0 = Instant::now();
    let created = create_all(&fed, objects.into_iter().map(|(o, _)| o).collect(), rate).await;
    println!(
        "created {total} objects in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    let everywhere = |k: &(String, String)| {
        let g = dests[k];
        seen.lock()
            .unwrap()
            .get(k)
            .is_some_and(|m| m.contains_key(&(2 * g)) && m.contains_key(&(2 * g + 1)))
    };
    until(
        "copies in both destinations",
        Duration::from_secs(600),
        || (created.keys().filter(|k| everywhere(k)).count(), total),
    )
    .await;
    let workloads: Vec<&(String, String)> = created
        .keys()
        .filter(|(kind, _)| Workload::of(kind).is_some())
        .collect();
    until(
        "workloads Ready in the federation",
        Duration::from_secs(600),
        || {
            let f = federated_ready.lock().unwrap();
            (
                workloads.iter().filter(|k| f.contains_key(**k)).count(),
                workloads.len(),
            )
        },
    )
    .await;
    settle(&fed, t0).await;

    // Latency per kind and over all; member writes per second over the whole run.
    let seen_now = seen.lock().unwrap().clone();
    let placed_now = placed.lock().unwrap().clone();
    let mut by_kind: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut placing: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut all = Vec::new();
    let (mut copies, mut last) = (0usize, t0);
    for (key, start) in &created {
        let Some(m) = seen_now.get(key) else { continue };
        let g = dests[key];
        let (Some(a), Some(b)) = (m.get(&(2 * g)), m.get(&(2 * g + 1))) else {
            continue;
        };
        let done = (*a).max(*b);
        last = last.max(done);
        copies += 2;
        let ms = done.saturating_duration_since(*start).as_secs_f64() * 1e3;
        let kind = KINDS.iter().find(|k| k.1 == key.0).map_or("?", |k| k.1);
        by_kind.entry(kind).or_default().push(ms);
        if let Some(at) = placed_now.get(key).and_then(|m| m.get(&0)) {
            let placed_ms = at.saturating_duration_since(*start).as_secs_f64() * 1e3;
            placing.entry(kind).or_default().push(placed_ms);
        }
        all.push(ms);
    }
    println!("create → placed (the scheduler's Placement has destinations), by kind:");
    for (_, kind, _) in KINDS {
        summary(
            &format!("  {kind}"),
            placing.remove(kind).unwrap_or_default(),
        );
    }
    println!("create → a copy in every destination member, by kind:");
    for (_, kind, _) in KINDS {
        summary(
            &format!("  {kind}"),
            by_kind.remove(kind).unwrap_or_default(),
        );
    }
    summary("propagation, every object", all);
    // Status lag per workload kind and over all of them.
    let lags: Vec<(Workload, Lag)> = {
        let (m, p, f) = (
            member_ready.lock().unwrap(),
            placement_ready.lock().unwrap(),
            federated_ready.lock().unwrap(),
        );
        workloads
            .iter()
            .filter_map(|key| {
                let g = dests[*key];
                let copies = m.get(*key)?;
                let last = [2 * g, 2 * g + 1]
                    .iter()
                    .map(|c| copies.get(c).copied())
                    .collect::<Option<Vec<_>>>()?
                    .into_iter()
                    .max();
                let lag = Lag::of(last, p.get(*key).copied(), f.get(*key).copied())?;
                Some((Workload::of(&key.0)?, lag))
            })
            .collect()
    };
    println!("status lag, by workload kind:");
    for w in Workload::ALL {
        let of_kind: Vec<Lag> = lags
            .iter()
            .filter(|(k, _)| *k == w)
            .map(|(_, l)| *l)
            .collect();
        status_lag::report(&format!("  {}", w.as_str()), &of_kind);
    }
    let every: Vec<Lag> = lags.iter().map(|(_, l)| *l).collect();
    status_lag::report("status lag, every workload", &every);
    let secs = last.duration_since(t0).as_secs_f64();
    println!(
        "member copies: {copies} in {secs:.1}s ({:.0} member writes/s over the run)",
        copies as f64 / secs.max(1e-3)
    );
    let workload_writes = scrape(
        metrics_port,
        "meridian_controllers_workload_member_writes_total",
    )
    .await
        - writes0;
    println!(
        "  of which the workload path's writes (workloads and dependencies): {workload_writes:.0}"
    );
    Cpu::sample(pids).report(cpu0, "the run", (copies as f64, "member write"));
    report_fed_writes(&fw0, &fed_writes(&fed).await, (total as f64, "object"));
    let rss = [fleet.apiserver.pid(), scheduler.pid(), controllers.pid()].map(rss_mb);
    println!(
        "control-plane RSS: {:.0} MB (apiserver {:.0}, scheduler {:.0}, controllers {:.0})",
        rss.iter().sum::<f64>(),
        rss[0],
        rss[1],
        rss[2]
    );
    drop(watches);
    drop((controllers, scheduler));
    let dir = fleet.dir.clone();
    drop(fleet);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

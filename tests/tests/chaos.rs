//! Chaos: a federation on a local 3-member etcd with two API server replicas, two
//! schedulers and two controllers (one of each on each API server), under a steady write
//! load. The etcd leader, one API server, the scheduler's leader and the controllers'
//! leader are killed (SIGKILL) in turn, and after each the app is scaled and must converge.
//!
//! Throughout, a client that knows both API servers creates ConfigMaps (moving to the other
//! replica when one fails) and a watcher follows them (resuming from its last
//! resourceVersion on either replica, relisting only on 410). At the end every
//! acknowledged create is stored, the watcher saw each object created exactly once and
//! resourceVersions only grow, and no member copy or Placement was written between a
//! leader's death and its successor's takeover (so never by two leaders).

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::ha::{CLUSTERS, Component, Ha, SIM_ARGS, WriteLog, poll};
use meridian_e2e::{Env, EtcdApiServer, client, etcd_path};
use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions};

/// The namespace the write load creates its ConfigMaps in.
const LOAD: &str = "load";
/// How long a failover may take: a Lease's 15 s, a retry period, and a debug build's slack.
const FAILOVER: Duration = Duration::from_secs(60);

/// What the write load had acknowledged, and what the watcher saw.
#[derive(Default)]
struct Ledger {
    /// Names whose create was answered 201.
    acked: BTreeSet<String>,
    /// When each of those answers came.
    acked_at: Vec<Instant>,
    /// ADDED events per name.
    added: HashMap<String, usize>,
    /// Names a relist after a 410 showed (an ADDED for them may have been compacted away).
    relisted: BTreeSet<String>,
    /// resourceVersions that went backwards: (before, after).
    backwards: Vec<(u64, u64)>,
    /// Watch connections made, and 410s answered.
    watches: usize,
    gone: usize,
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"written": name},
    }))
    .unwrap()
}

/// Creates `load-0`, `load-1`, ... every 20 ms until `stop`, through `clients[0]` and,
/// while that one fails, `clients[1]`.
async fn write_load(clients: [kube::Client; 2], ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let (mut n, mut which) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let name = format!("load-{n}");
        let api: Api<ConfigMap> = Api::namespaced(clients[which].clone(), LOAD);
        match api.create(&PostParams::default(), &config_map(&name)).await {
            Ok(_) => {
                let mut l = ledger.lock().unwrap();
                l.acked.insert(name);
                l.acked_at.push(Instant::now());
                n += 1;
            }
            // An earlier attempt landed though its answer was lost: stored, not acked.
            Err(kube::Error::Api(e)) if e.code == 409 => n += 1,
            // This replica (or etcd under it) failed the request: try the other.
            Err(_) => which = 1 - which,
        }
        // The load's pace, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Follows the load's ConfigMaps from `from` until `stop`, resuming on either replica from
/// the last resourceVersion it saw, and relisting only when told 410 Gone.
async fn watch_load(
    clients: [kube::Client; 2],
    from: String,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let (mut rv, mut which) = (from, 0);
    let mut last: u64 = rv.parse().unwrap();
    while !stop.load(Ordering::Relaxed) {
        let api: Api<ConfigMap> = Api::namespaced(clients[which].clone(), LOAD);
        let params = WatchParams::default().timeout(20);
        let Ok(stream) = api.watch(&params, &rv).await else {
            which = 1 - which;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        ledger.lock().unwrap().watches += 1;
        let mut stream = stream.boxed();
        loop {
            let event = match stream.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(_) => {
                    which = 1 - which;
                    break;
                }
            };
            let (object_rv, name, added) = match &event {
                WatchEvent::Added(cm) => (
                    cm.metadata.resource_version.clone(),
                    cm.metadata.name.clone(),
                    true,
                ),
                WatchEvent::Modified(cm) | WatchEvent::Deleted(cm) => {
                    (cm.metadata.resource_version.clone(), None, false)
                }
                WatchEvent::Bookmark(b) => (Some(b.metadata.resource_version.clone()), None, false),
                WatchEvent::Error(e) if e.code == 410 => {
                    let list = api.list(&ListParams::default()).await.unwrap();
                    let mut l = ledger.lock().unwrap();
                    l.gone += 1;
                    l.relisted
                        .extend(list.items.iter().filter_map(|c| c.metadata.name.clone()));
                    rv = list.metadata.resource_version.unwrap();
                    last = rv.parse().unwrap();
                    break;
                }
                WatchEvent::Error(_) => break,
            };
            let now: u64 = object_rv.unwrap().parse().unwrap();
            let mut l = ledger.lock().unwrap();
            if now < last || (added && now == last) {
                l.backwards.push((last, now));
            }
            if let (true, Some(name)) = (added, name) {
                *l.added.entry(name).or_default() += 1;
            }
            last = last.max(now);
            rv = last.to_string();
        }
    }
}

/// Sets `shop/web`'s replicas through `fed`, again while the write fails (the API server or
/// etcd may be between leaders).
async fn scale(fed: &kube::Client, replicas: i32) {
    let api: Api<Deployment> = Api::namespaced(fed.clone(), "shop");
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    poll("scaling shop/web", Duration::from_secs(30), || async {
        api.patch("web", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .ok()
    })
    .await;
}

/// Waits until the Placement (read through `fed`) and the members' copies both give
/// `replicas`; returns when.
async fn converged(ha: &Ha, fed: &kube::Client, replicas: i32) -> Instant {
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "shop");
    poll(&format!("shop/web at {replicas}"), FAILOVER, || async {
        let placed: u32 = placements
            .get_opt("deployment-web")
            .await
            .ok()
            .flatten()?
            .spec
            .dest_clusters
            .iter()
            .map(|t| t.replicas)
            .sum();
        (i64::from(placed) == i64::from(replicas) && ha.in_members().await == replicas)
            .then(Instant::now)
    })
    .await
}

/// How long after `killed` the first create was acknowledged (a figure, not a check).
fn first_ack_after(ledger: &Mutex<Ledger>, killed: Instant) -> Duration {
    let l = ledger.lock().unwrap();
    l.acked_at
        .iter()
        .find(|at| **at > killed)
        .map_or(Duration::MAX, |at| *at - killed)
}

/// No write at `places` in `[from, to)`.
fn quiet(log: &WriteLog, places: &[&str], from: Instant, to: Instant, what: &str) {
    let writes: Vec<_> = log
        .between(from, to)
        .into_iter()
        .filter(|w| places.contains(&w.place.as_str()))
        .collect();
    assert!(
        writes.is_empty(),
        "{what} written between a kill and the takeover: {writes:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_each_piece_in_turn_loses_no_write_and_keeps_converging() {
    // Declared first, dropped last: the members die before their directory goes.
    let etcd_dir = tempfile::tempdir().unwrap();
    let mut etcd = LocalEtcd::start(LocalEtcdOptions::new(
        etcd_path(),
        etcd_dir.path().to_owned(),
        3,
    ))
    .await
    .expect("starting etcd");
    let servers = etcd.endpoints().join(",");
    let dir = tempfile::tempdir().unwrap();
    let a = EtcdApiServer::new(&dir.path().join("federation"), &servers, None);
    let a_proc = a.spawn();
    let a_kubeconfig = PathBuf::from(a_proc.ready_value().unwrap());
    let b = EtcdApiServer::new(
        &dir.path().join("federation-b"),
        &servers,
        Some(&dir.path().join("federation/pki")),
    );
    let b_proc = b.spawn();
    let b_kubeconfig = PathBuf::from(b_proc.ready_value().unwrap());
    let env = Env::start_with(dir, a_proc, &SIM_ARGS);
    let mut ha = Ha::start_in(env, vec![a_kubeconfig.clone(), b_kubeconfig.clone()], 4).await;
    let fed_a = client(&a_kubeconfig, None).await;
    let fed_b = client(&b_kubeconfig, None).await;

    let log = WriteLog::default();
    for c in CLUSTERS {
        log.watch(Api::<Deployment>::all(ha.env.member(c).await), c);
    }
    log.watch(Api::<fed_api::Placement>::all(fed_b.clone()), "federation");

    // The load and its watcher, from before the first write.
    let namespaces: Api<Namespace> = Api::all(fed_a.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": LOAD}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let from = Api::<ConfigMap>::namespaced(fed_a.clone(), LOAD)
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = [fed_a.clone(), fed_b.clone()];
    let writer = tokio::spawn(write_load(clients.clone(), ledger.clone(), stop.clone()));
    // Both start on A, so A's death makes them move to B mid-stream.
    let watcher = tokio::spawn(watch_load(
        clients.clone(),
        from,
        ledger.clone(),
        stop.clone(),
    ));

    // 1. The etcd leader dies: the cluster elects another, the app scales on it.
    let leader = etcd.leader().await.expect("an etcd leader");
    etcd.kill(leader).unwrap();
    let killed = Instant::now();
    scale(&fed_a, 6).await;
    let done = converged(&ha, &fed_a, 6).await;
    eprintln!(
        "etcd leader killed: first acknowledged create after {:?}, app converged after {:?}",
        first_ack_after(&ledger, killed),
        done - killed
    );
    etcd.restart(leader).await.unwrap();

    // 2. API server A dies with the scheduler's and controllers' leaders on it: they can
    //    no longer renew, stop, and the replicas on B take over; the app scales through B.
    for c in [Component::Scheduler, Component::Controllers] {
        assert_eq!(ha.leader(c).await.0, 0, "{c:?}: the replica on A leads");
    }
    let on_a = [Component::Scheduler, Component::Controllers]
        .map(|c| (c, ha.replicas(c)[0].identity.clone()));
    ha.env.apiserver.kill();
    let killed = Instant::now();
    scale(&fed_b, 8).await;
    let done = converged(&ha, &fed_b, 8).await;
    eprintln!(
        "API server A killed: first acknowledged create (through B) after {:?}, app converged after {:?}",
        first_ack_after(&ledger, killed),
        done - killed
    );
    for (c, identity) in &on_a {
        let mut former = ha.remove(*c, identity);
        let status = tokio::task::block_in_place(|| former.proc.wait_exit(FAILOVER))
            .unwrap()
            .unwrap_or_else(|| panic!("{identity} kept running without its API server"));
        assert!(
            !status.success(),
            "{identity} lost its Lease and exited {status:?}"
        );
    }
    // A comes back on its port; new standbys start on it.
    ha.env.apiserver = a.spawn();
    ha.spawn_on(Component::Scheduler, &a_kubeconfig);
    ha.spawn_on(Component::Controllers, &a_kubeconfig);

    // 3 and 4. The scheduler's leader, then the controllers' leader, die; the standby on A
    //    takes over and nobody writes in between.
    for (c, replicas, places) in [
        (Component::Scheduler, 5, &["federation"][..]),
        (Component::Controllers, 7, &CLUSTERS[..]),
    ] {
        let (f, dead) = ha.kill_leader(c, replicas, FAILOVER).await;
        eprintln!("{dead} killed: decided after {:?}", f.latency());
        quiet(
            &log,
            places,
            f.killed + Duration::from_secs(1),
            f.took_over,
            &format!("{c:?}"),
        );
        converged(&ha, &fed_b, replicas).await;
    }
    ha.env.rollout_status("deploy/web", "shop");

    // The load stops; the watcher catches up with everything acknowledged.
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let acked = ledger.lock().unwrap().acked.clone();
    assert!(acked.len() > 100, "the load wrote {} objects", acked.len());
    poll(
        "the watcher sees every acknowledged create",
        Duration::from_secs(30),
        || async {
            let l = ledger.lock().unwrap();
            acked
                .iter()
                .all(|n| l.added.contains_key(n) || l.relisted.contains(n))
                .then_some(())
        },
    )
    .await;
    watcher.abort();

    let stored: BTreeSet<String> = Api::<ConfigMap>::namespaced(fed_b.clone(), LOAD)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    let lost: Vec<_> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged creates lost: {lost:?}");
    let l = ledger.lock().unwrap();
    let repeated: Vec<_> = l.added.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "ADDED more than once: {repeated:?}");
    assert!(
        l.backwards.is_empty(),
        "resourceVersions went back: {:?}",
        l.backwards
    );
    assert!(
        l.watches > 1,
        "the watcher resumed after the kills ({} watches)",
        l.watches
    );
    eprintln!(
        "{} creates acknowledged, {} stored; {} watches, {} answered 410",
        acked.len(),
        stored.len(),
        l.watches,
        l.gone
    );
}

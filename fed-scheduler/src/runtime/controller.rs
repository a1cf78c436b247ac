//! Wires the scheduler together: reflectors feed the index and the queue, workers take
//! keys and reconcile them, a resync re-queues everything now and then.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fed_api::Placement;
use kube::Client;
use kube::runtime::reflector::{self, Store};
use meridian_runtime::error::Report;
use meridian_runtime::events::{self, Recorder};
use meridian_runtime::kind_retry::Backoff;
use meridian_runtime::leader::{Gate, Role};
use meridian_runtime::queue::{self, WorkQueue};
use meridian_runtime::rate::{Rate, TokenBucket};
use tracing::Instrument as _;

use super::evictions::Evictions;
use super::index::Index;
use super::key::WorkloadKey;
use super::metrics::Metrics;
use super::reconcile::Reconciler;
use super::watch::{self, Ctx, Synced};
use super::writer::Writer;

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Workloads decided and written concurrently.
    pub workers: usize,
    /// Evictions (moves away from offline clusters) per second, sustained.
    pub eviction_rate: Rate,
    /// Evictions allowed at once.
    pub eviction_burst: u32,
    /// Deadline of each API write.
    pub write_timeout: Duration,
    /// Every workload is re-decided this often even without a change.
    pub resync_period: Duration,
    /// Distinct workloads the queue holds at most.
    pub queue_capacity: usize,
    /// Events waiting to be sent at most (more are dropped).
    pub event_queue: usize,
    /// Events sent per second, sustained (more are dropped).
    pub event_rate: Rate,
    /// Events sent in one burst.
    pub event_burst: u32,
    /// How the copy loop looks up a kind a policy names that is not served yet, between
    /// changes of the CustomResourceDefinitions (which make it look at once).
    pub kind_retry: Backoff,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 16,
            eviction_rate: Rate::per_second(100.0),
            eviction_burst: 100,
            write_timeout: Duration::from_secs(10),
            resync_period: Duration::from_secs(300),
            queue_capacity: 1_000_000,
            event_queue: 4096,
            event_rate: Rate::per_second(50.0),
            event_burst: 500,
            kind_retry: Backoff::default(),
        }
    }
}

/// The component name on every Event the scheduler writes.
pub const COMPONENT: &str = "meridian-scheduler";

/// Why the loop stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A watch task ended, which kube's watcher never does while healthy.
    #[error("the {0} watch ended")]
    WatchEnded(&'static str),
    /// A reflector store was dropped before it synced.
    #[error("a cache was dropped before its first list")]
    CacheDropped(#[source] reflector::store::WriterDropped),
}

async fn worker(
    id: usize,
    queue: Arc<WorkQueue<WorkloadKey>>,
    reconciler: Arc<Reconciler>,
    metrics: Arc<Metrics>,
) {
    loop {
        let key = queue.next().await;
        let span = tracing::info_span!("reconcile", worker = id, workload = %key);
        let started = Instant::now();
        match reconciler.reconcile(&key).instrument(span).await {
            Ok(r) => {
                queue.forget(&key);
                if let Some(after) = r.requeue {
                    queue.add_after(key.clone(), after);
                }
                metrics.reconcile(r.result, started.elapsed().as_secs_f64());
            }
            Err(error) => {
                let after = queue.retry(key.clone());
                metrics.reconcile("error", started.elapsed().as_secs_f64());
                tracing::warn!(workload = %key, error = %Report(&error), retry_in = ?after, "reconcile failed");
            }
        }
        queue.done(&key);
        metrics.queue(queue.len(), queue.dropped());
    }
}

/// Runs the scheduler against the federation API until a watch fails for good. `ready`
/// is set once every cache has listed. The caches fill and follow the API at once; the
/// workers that decide and write start when `leader` says this replica leads, so a
/// standby takes over with its caches warm (every workload is queued then).
pub async fn run(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    leader: Gate,
) -> Result<(), ControllerError> {
    let index = Arc::new(Index::new());
    let queue = Arc::new(WorkQueue::new(
        queue::Settings {
            capacity: config.queue_capacity,
            ..queue::Settings::default()
        },
        metrics.queue.clone(),
    ));
    // Placements are the one kind kept whole: the reconciler reads and rewrites them.
    // The others are digested into the index as they arrive.
    let (placements, placements_w) = reflector::store::<Placement>();
    let [
        placements_synced,
        clusters,
        policies,
        cluster_policies,
        status,
    ] = std::array::from_fn(|_| Synced::default());
    let workloads_synced: watch::WorkloadsSynced = std::array::from_fn(|_| Synced::default());

    // Over the rate or with the buffer full, Events are dropped and counted: a mass
    // failover must not spend the API server's capacity on Events while Placements wait.
    let recorder = Recorder::spawn(
        client.clone(),
        COMPONENT,
        events::Settings {
            buffer: config.event_queue,
            concurrency: 4,
            timeout: config.write_timeout,
            limit: Some(TokenBucket::new(
                config.event_rate,
                config.event_burst,
                tokio::time::Instant::now(),
            )),
            ..events::Settings::default()
        },
        metrics.events.clone(),
    );
    // One eviction budget for workloads and copied objects alike.
    let evictions = Arc::new(Evictions::new(
        TokenBucket::new(
            config.eviction_rate,
            config.eviction_burst,
            tokio::time::Instant::now(),
        ),
        metrics.clone(),
    ));
    let reconciler = Arc::new(Reconciler::new(
        index.clone(),
        placements.clone(),
        Writer::new(client.clone(), config.write_timeout),
        recorder,
        evictions.clone(),
        metrics.clone(),
    ));
    let ctx = Ctx {
        index: index.clone(),
        queue: queue.clone(),
        reconciler: reconciler.clone(),
        metrics: metrics.clone(),
    };

    let mut tasks = tokio::task::JoinSet::new();
    let (c, x, w) = (client.clone(), ctx.clone(), workloads_synced.clone());
    tasks.spawn(async move {
        watch::all_workloads(c, w, x).await;
        "workload"
    });
    let (c, x, s) = (client.clone(), ctx.clone(), clusters.clone());
    tasks.spawn(async move {
        watch::clusters(c, s, x).await;
        "Cluster"
    });
    let (c, x, s) = (client.clone(), ctx.clone(), policies.clone());
    tasks.spawn(async move {
        watch::policies(c, s, x).await;
        "PropagationPolicy"
    });
    let (c, x, s) = (client.clone(), ctx.clone(), cluster_policies.clone());
    tasks.spawn(async move {
        watch::cluster_policies(c, s, x).await;
        "ClusterPropagationPolicy"
    });
    let (c, x, s) = (client.clone(), ctx.clone(), placements_synced.clone());
    tasks.spawn(async move {
        watch::placements(c, placements_w, s, x).await;
        "Placement"
    });
    let (c, x, s) = (client.clone(), ctx.clone(), status.clone());
    tasks.spawn(async move {
        watch::federation_status(c, s, x).await;
        "federation-status ConfigMap"
    });

    // Deciding before every cache has listed would create Placements that exist and
    // evict from clusters not seen yet.
    let synced = async {
        wait(&placements).await?;
        for kind in
            workloads_synced
                .iter()
                .chain([&clusters, &policies, &cluster_policies, &status])
        {
            kind.wait().await;
        }
        Ok(())
    };
    tokio::select! {
        r = synced => r.map_err(ControllerError::CacheDropped)?,
        ended = tasks.join_next() => {
            return Err(ControllerError::WatchEnded(ended.and_then(Result::ok).unwrap_or("a")));
        }
    }
    tracing::info!(
        workloads = index.keys().len(),
        clusters = index.cluster_names().len(),
        workers = config.workers,
        "caches synced; scheduling"
    );
    ready.store(true, Ordering::Release);
    if leader.role() != Role::Leading && leader.role() != Role::Unelected {
        tracing::info!("caches synced; standing by until this replica leads");
    }
    tokio::select! {
        () = leader.leading() => {}
        ended = tasks.join_next() => {
            return Err(ControllerError::WatchEnded(ended.and_then(Result::ok).unwrap_or("a")));
        }
    }
    // Whatever a previous leader left undone: decide everything once.
    ctx.enqueue_all();
    // Objects of the kinds without replicas, on the same caches of clusters, policies and
    // Placements.
    let (c, i, p, w, m) = (
        client.clone(),
        index.clone(),
        placements.clone(),
        Writer::new(client.clone(), config.write_timeout),
        metrics.clone(),
    );
    let copy_settings = super::copies::Settings {
        workers: config.workers,
        kind_retry: config.kind_retry,
    };
    let e = evictions.clone();
    tasks.spawn(async move {
        super::copies::run(c, i, p, w, m, e, copy_settings).await;
        "copied kinds"
    });

    for id in 0..config.workers.max(1) {
        let (q, r, m) = (queue.clone(), reconciler.clone(), metrics.clone());
        tasks.spawn(async move {
            worker(id, q, r, m).await;
            "worker"
        });
    }
    let resync = config.resync_period;
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(resync);
        tick.tick().await;
        loop {
            tick.tick().await;
            ctx.enqueue_all();
        }
    });
    let ended = tasks.join_next().await;
    Err(ControllerError::WatchEnded(
        ended.and_then(Result::ok).unwrap_or("a"),
    ))
}

async fn wait<K>(s: &Store<K>) -> Result<(), reflector::store::WriterDropped>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    s.wait_until_ready().await
}

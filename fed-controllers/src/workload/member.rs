//! One member cluster's side of the workload controller: its own client, label-selected
//! watches of the copies Meridian pushed there, and its own work queue and worker, so a
//! slow or dead member never delays another. The central controller hands it [`Intent`]s;
//! it converges the member to them, retrying failures with backoff, and reports back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fed_api::Cluster;
use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};
use futures::future::BoxFuture;
use futures::{FutureExt as _, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::Request;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use meridian_runtime::answer::Written;
use meridian_runtime::error::{Report, report};
use meridian_runtime::events::EventType;
use meridian_runtime::queue::WorkQueue;
use meridian_runtime::sync::lock;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::echo::{Echo, Seen};
use super::events::{Batcher, Note};
use super::intents::Intents;
use super::kinds::{DepKind, Kind, WorkloadKey};
use super::objects::{Change, Entry, ObjectCache};
use super::ownership::{self, Ownership};
use super::status::MemberReport;
use super::status_spacing::StatusSpacing;
use super::{Settings, drift, hpa};
use crate::compact::Compact;
use crate::dynamic::{self, Decoded};
use crate::fleet;
use crate::member_sync::{self, Applied, SyncError, now};
use crate::member_watch;
use crate::metrics::WorkloadMetrics;

/// One member's copy of a workload, as [`MemberShared::look`] finds it.
#[derive(Clone, Debug, Default)]
pub struct Look {
    /// Whether it holds a copy; `None` while unknown (not connected, or not listed yet).
    pub holds: Option<bool>,
    /// The copy, if it holds one.
    pub entry: Option<Arc<Entry>>,
}

/// A dependency copy (ConfigMap, Secret) a workload needs in a member.
#[derive(Clone, Debug, PartialEq)]
pub struct Dependency {
    /// Its kind.
    pub kind: DepKind,
    /// Its name (in the workload's namespace).
    pub name: String,
    /// The copy to hold; `None` when an override rule cannot make it for this member:
    /// what the member holds is left as it is (and still counts as in use).
    pub object: Option<Compact>,
}

/// What Meridian wants from a member for one workload.
#[derive(Clone, Debug, PartialEq)]
pub enum Want {
    /// Hold these: the namespace, the dependencies, then the workload copy.
    Present {
        /// Dependency copies.
        deps: Vec<Dependency>,
        /// The workload copy.
        workload: Compact,
        /// Its replicas (for Events).
        replicas: i32,
    },
    /// Hold no copy of the workload (only a copy carrying its uid is removed).
    Absent,
}

/// The intent for one workload in one member.
pub type Intent = fleet::Intent<Want>;

/// Per-key bookkeeping of syncs; the intent it converged to is the one the intents hold
/// until the next change.
type Record = fleet::Record<Arc<Intent>>;

/// The caches of the member's Meridian-managed objects. A kind's watch starts on the kind's
/// first need (a sync of a workload of that kind, or of one using a dependency of that
/// kind), or at once when the member's first look finds Meridian's objects of that kind
/// there. A member that never gets a StatefulSet never watches StatefulSets: each watch
/// costs the controller a task, a stream and its buffers, and the member an open request,
/// which adds up over a thousand members.
struct Caches {
    client: Client,
    workloads: HashMap<Kind, OnceLock<ObjectCache>>,
    deps: HashMap<DepKind, OnceLock<ObjectCache>>,
    /// Meridian's copies of HPAs in the member: the workloads they scale keep the
    /// replicas the HPA writes ([`hpa`]). Always watched: the copy path pushes HPAs
    /// without this member's knowing.
    hpas: ObjectCache,
    /// Set once every kind was first looked at (listed, or its watch listed) and the
    /// watches started meanwhile have listed.
    synced: Arc<AtomicBool>,
    /// Runs a started watch on the member's task set, so it stops with the member.
    spawn: mpsc::UnboundedSender<BoxFuture<'static, ()>>,
}

impl Caches {
    /// The cached copy of the workload, if it is Meridian's for `uid`.
    fn copy_of(&self, key: &WorkloadKey, uid: &str) -> Option<Arc<Entry>> {
        let e = self.workload(key.kind)?.get(&key.namespace, &key.name)?;
        e.owned_by(uid).then_some(e)
    }

    /// Whether a cache of the member's objects of one kind (`None`: not watched, the first
    /// look found none and none was pushed since) tells all of them.
    fn knows(&self, cache: Option<&ObjectCache>) -> bool {
        self.synced.load(Ordering::Acquire) && cache.is_none_or(|c| c.ready().is_ready())
    }

    /// The cache of the member's copies of `kind`, if they are watched.
    fn workload(&self, kind: Kind) -> Option<&ObjectCache> {
        self.workloads.get(&kind).and_then(OnceLock::get)
    }

    /// The cache of the member's copies of `kind`, their watch started if it was not.
    fn watch_workload(&self, m: &Arc<MemberShared>, kind: Kind) -> Option<&ObjectCache> {
        let cell = self.workloads.get(&kind)?;
        Some(cell.get_or_init(|| self.start(m, kind.api_resource(), on_workload_change(kind))))
    }

    /// The cache of the member's dependency copies of `kind`, their watch started if it
    /// was not.
    fn watch_dep(&self, m: &Arc<MemberShared>, kind: DepKind) -> Option<&ObjectCache> {
        let cell = self.deps.get(&kind)?;
        Some(cell.get_or_init(|| self.start(m, kind.api_resource(), on_dep_change(kind))))
    }

    /// Every cache whose watch has started.
    fn started(&self) -> Vec<ObjectCache> {
        let workloads = self.workloads.values().filter_map(OnceLock::get);
        let deps = self.deps.values().filter_map(OnceLock::get);
        workloads.chain(deps).chain([&self.hpas]).cloned().collect()
    }

    fn start(
        &self,
        m: &Arc<MemberShared>,
        ar: ApiResource,
        on_change: impl Fn(&MemberShared, &DynamicObject, Change, bool, bool) + Send + 'static,
    ) -> ObjectCache {
        let (cache, watch) = watch(m.clone(), self.client.clone(), ar, on_change);
        // Fails only once the member's tasks are gone, and the watch with them.
        let _ = self.spawn.send(watch.boxed());
        cache
    }
}

/// What every member task gets from the central controller.
#[derive(Clone)]
pub struct Context {
    /// The federation client (credentials Secrets are read through it).
    pub fed: Client,
    /// The controller's tunables.
    pub settings: Arc<Settings>,
    /// Central's queue, told of every change of a member's copies.
    pub central: Arc<WorkQueue<WorkloadKey>>,
    /// How long status reports gather before central looks.
    pub status_spacing: Arc<StatusSpacing>,
    /// The controller's metrics.
    pub metrics: Arc<WorkloadMetrics>,
    /// Members' outcomes, gathered into Events.
    pub events: Arc<Batcher>,
    /// Which path writes each dependency object (the copy path's are never collected).
    pub writers: Arc<crate::dep_writers::DepWriters>,
    /// Which members may hold each workload's copy: this member's watches keep its part.
    pub copy_index: Arc<super::copy_index::CopyIndex>,
}

/// The state one member shares with the central controller.
pub struct MemberShared {
    /// Cluster name.
    pub name: String,
    /// What it got from central.
    ctx: Context,
    /// This member's syncs; failures are retried with the settings' back-off.
    queue: WorkQueue<WorkloadKey>,
    intents: Mutex<Intents>,
    records: Mutex<HashMap<WorkloadKey, Record>>,
    caches: Mutex<Option<Arc<Caches>>>,
    connection: fleet::Connection,
    /// Unreferenced dependency copies are removed only once the central controller has
    /// handed out every intent (else a restart would delete what is still needed).
    gc: AtomicBool,
    /// Whether a dependency copy may have lost its last user since the last collection
    /// (which would otherwise look at every copy after every sync).
    gc_due: AtomicBool,
    /// Wakes the collection outside any sync ([`MemberShared::collect_soon`]).
    gc_kick: tokio::sync::Notify,
    /// This member's writes, to tell their watch events from edits made by others.
    echo: Mutex<Echo>,
}

impl MemberShared {
    /// Sets the intent for a workload, built from inputs with digest `source` (`None` for
    /// an intent that costs nothing to build); the worker runs only if it changed, and the
    /// answer says whether it did.
    pub fn set_intent(&self, key: &WorkloadKey, intent: Intent, source: Option<u64>) -> bool {
        let replaced = lock(&self.intents).set(key, Some(intent), source);
        if replaced.orphaned_a_dependency {
            self.gc_due.store(true, Ordering::Release);
        }
        let changed = replaced.changed;
        if changed {
            self.queue.add(key.clone());
        }
        changed
    }

    /// Whether the member holds an intent for `key` and has not finished a first sync of it
    /// yet. When it does, it reports back (see `work`), so a status written before then
    /// would only be overwritten at once.
    pub fn first_sync_pending(&self, key: &WorkloadKey) -> bool {
        let has_intent = lock(&self.intents).contains(key);
        has_intent && !lock(&self.records).contains_key(key)
    }

    /// Whether the workload's intent was built from inputs with digest `source`: building
    /// it again would give the same intent.
    pub fn has_intent_from(&self, key: &WorkloadKey, source: u64) -> bool {
        lock(&self.intents).source(key) == Some(source)
    }

    /// Whether the event of `o` (of `kind`) is a write of this member's workers coming
    /// back through the watch (or may be: see [`Echo::answered`]). A deletion never is.
    fn is_own_write(&self, kind: &str, o: &DynamicObject, deleted: bool) -> bool {
        let key = (
            kind.to_string(),
            o.namespace().unwrap_or_default(),
            o.name_any(),
        );
        let rv = o
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok());
        lock(&self.echo).event(&key, rv, deleted) == Seen::Own
    }

    /// Has the central controller look at the workload's status soon; reports that follow
    /// within its status delay (the settings', longer for a wide workload) share that look.
    fn status_soon(&self, key: WorkloadKey) {
        let delay = self.ctx.status_spacing.delay(&key);
        self.ctx.central.add_low_after(key, delay);
    }

    /// Retries at once every sync waiting out a backoff (the member is reachable again).
    pub fn retry_now(&self) {
        self.queue.expedite_retries();
    }

    /// Keys waiting in this member's queue.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Forgets a workload without touching the member (orphaned, or already cleaned).
    pub fn forget(&self, key: &WorkloadKey) {
        if lock(&self.intents)
            .set(key, None, None)
            .orphaned_a_dependency
        {
            self.gc_due.store(true, Ordering::Release);
        }
        lock(&self.records).remove(key);
        // Its dependencies may now be unreferenced.
        self.queue.add(key.clone());
    }

    /// Lets this member remove unreferenced dependency copies, once the central controller
    /// has handed out every intent.
    pub fn enable_gc(&self) {
        self.gc_due.store(true, Ordering::Release);
        self.gc.store(true, Ordering::Release);
    }

    /// Has the member look for unreferenced dependency copies of `kind` now, not after its
    /// next sync: a copy the copy path just handed over may have no user left, and then no
    /// sync comes. Their watch starts if it had not (the collection then waits for its
    /// first list).
    pub fn collect_soon(self: &Arc<Self>, kind: DepKind) {
        if let Some(c) = self.caches() {
            c.watch_dep(self, kind);
        }
        self.gc_due.store(true, Ordering::Release);
        self.gc_kick.notify_one();
    }

    fn caches(&self) -> Option<Arc<Caches>> {
        lock(&self.caches).clone()
    }

    /// Whether the member holds a copy owned by `uid`; `None` while that is unknown
    /// (not connected, or the watches have not listed yet).
    pub fn holds(&self, key: &WorkloadKey, uid: &str) -> Option<bool> {
        self.look(key, uid).holds
    }

    /// The member's copy of a workload and whether it holds one, from one cache lookup
    /// (a reconcile asks this of every member).
    pub fn look(&self, key: &WorkloadKey, uid: &str) -> Look {
        let Some(c) = self.caches() else {
            return Look::default();
        };
        let entry = c.copy_of(key, uid);
        Look {
            holds: c.knows(c.workload(key.kind)).then_some(entry.is_some()),
            entry,
        }
    }

    /// Whether Meridian's copy of an HPA in the member scales the workload `key` there, so
    /// the replicas of its copy are the member's ([`hpa`]).
    pub fn scaled_by_hpa(&self, key: &WorkloadKey) -> bool {
        self.caches()
            .is_some_and(|c| scaled_in_member(&c.hpas, key))
    }

    /// What the member reports for a workload whose copy there is `copy` (see [`Self::look`]).
    pub fn report<'a>(&self, key: &WorkloadKey, copy: Option<&'a Entry>) -> MemberReport<'a> {
        let (error, conflict, last_sync_time) = lock(&self.records)
            .get(key)
            .map(|r| (r.error.clone(), r.conflict, r.last_sync_time.clone()))
            .unwrap_or_default();
        let error = self.connection.error_or(error);
        MemberReport {
            copy: copy.map(|e| &e.status),
            error,
            conflict,
            last_sync_time,
        }
    }

    /// Has the central controller look at every workload this member has an intent for: a
    /// connection attempt failed, its first look ended, or a watch of a kind has just
    /// listed. Spaced as its reports are:
    /// a thousand members listing one after another would otherwise bring a wide
    /// workload a look per member, each visiting every member and most writing a status.
    fn notify_all(&self) {
        let keys: Vec<WorkloadKey> = lock(&self.intents).keys().cloned().collect();
        for k in keys {
            self.status_soon(k);
        }
    }
}

/// A running member.
pub type MemberHandle = fleet::Handle<MemberShared>;

/// Starts a member of `cluster`, connected with settings of this `fingerprint`;
/// unreferenced dependency copies are collected once `gc` is set.
pub fn spawn(ctx: Context, cluster: Arc<Cluster>, fingerprint: u64, gc: bool) -> MemberHandle {
    let queue = WorkQueue::new(
        ctx.settings.fleet.queue(),
        ctx.metrics.member_queues.clone(),
    );
    let connection = fleet::Connection::new(cluster.name_any(), &ctx.settings.fleet);
    let shared = Arc::new(MemberShared {
        name: cluster.name_any(),
        ctx,
        queue,
        intents: Mutex::default(),
        records: Mutex::default(),
        caches: Mutex::default(),
        connection,
        gc: AtomicBool::new(gc),
        gc_due: AtomicBool::new(true),
        gc_kick: tokio::sync::Notify::new(),
        echo: Mutex::default(),
    });
    // Until its watches list, it may hold a copy of anything.
    shared.ctx.copy_index.started(&shared.name);
    let span = tracing::info_span!("workload-member", cluster = %shared.name);
    let task = tokio::spawn(run(shared.clone(), cluster).instrument(span));
    MemberHandle::new(task, shared, fingerprint)
}

async fn run(m: Arc<MemberShared>, cluster: Arc<Cluster>) {
    // Boxed, as a sync is in `work`: this task then waits as one of the workers.
    let client = Box::pin(m.connection.connect(
        &m.ctx.settings.fleet,
        &m.ctx.fed,
        &cluster,
        || m.notify_all(),
    ))
    .await;
    let mut tasks = JoinSet::new();
    // Watches started later, on a kind's first need, run on a task set of their own that
    // this task set owns: dropping the member drops them all.
    let (spawn, mut started) = mpsc::unbounded_channel::<BoxFuture<'static, ()>>();
    tasks.spawn(async move {
        let mut watches = JoinSet::new();
        while let Some(watch) = started.recv().await {
            watches.spawn(watch);
        }
    });
    let synced = Arc::new(AtomicBool::new(false));
    let (hpas, hpa_watch) = watch(
        m.clone(),
        client.clone(),
        hpa::api_resource(),
        on_hpa_change,
    );
    tasks.spawn(hpa_watch);
    let caches = Arc::new(Caches {
        client: client.clone(),
        workloads: Kind::ALL.map(|k| (k, OnceLock::new())).into(),
        deps: DepKind::ALL.map(|k| (k, OnceLock::new())).into(),
        hpas,
        synced: synced.clone(),
        spawn,
    });
    *lock(&m.caches) = Some(caches.clone());
    let m2 = m.clone();
    tasks.spawn(async move {
        first_look(&m2, &caches).await;
        for cache in caches.started() {
            cache.ready().wait().await;
        }
        synced.store(true, Ordering::Release);
        m2.ctx.copy_index.listed(&m2.name);
        m2.gc_due.store(true, Ordering::Release);
        m2.notify_all();
        for k in lock(&m2.intents).keys() {
            m2.queue.add(k.clone());
        }
    });
    for _ in 1..m.ctx.settings.member_workers.max(1) {
        tasks.spawn(work(m.clone()));
    }
    tasks.spawn(collect_when_kicked(m.clone()));
    work(m).await;
}

/// The member's first look: which kinds it already holds Meridian's objects of (left by
/// an earlier run, or pushed by the copy path), whose watches start now; the others start
/// on their first need. Each listing is retried until the member answers it.
async fn first_look(m: &Arc<MemberShared>, caches: &Caches) {
    let holds_workloads = Kind::ALL.map(|k| holds_any(m, &caches.client, k.api_resource()));
    let holds_deps = DepKind::ALL.map(|k| holds_any(m, &caches.client, k.api_resource()));
    let (workloads, deps) = futures::join!(
        futures::future::join_all(holds_workloads),
        futures::future::join_all(holds_deps)
    );
    for (kind, holds) in Kind::ALL.into_iter().zip(workloads) {
        if holds {
            caches.watch_workload(m, kind);
        }
    }
    for (kind, holds) in DepKind::ALL.into_iter().zip(deps) {
        if holds {
            caches.watch_dep(m, kind);
        }
    }
}

/// Whether the member holds any object of `ar` carrying Meridian's labels (one listing of
/// at most one object, retried until the member answers).
async fn holds_any(m: &MemberShared, client: &Client, ar: ApiResource) -> bool {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let params = ListParams::default().labels(&copies_selector()).limit(1);
    let mut backoff = member_watch::backoff();
    loop {
        let op = format!("listing Meridian's {}", ar.plural);
        match m.connection.timed(&op, api.list(&params)).await {
            Ok(list) => return !list.items.is_empty(),
            Err(error) => {
                tracing::debug!(error = %Report(&error), resource = %ar.plural, "member listing failed; retrying");
                let delay = backoff.next().unwrap_or(Duration::from_secs(4));
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Selects the copies of federated objects: they carry their owner's uid. Other objects
/// Meridian manages in members (the lb-agent's ConfigMap, written by the service
/// controller) are not this controller's to look after, nor to collect as unreferenced
/// dependencies.
fn copies_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{OWNER_UID_LABEL}")
}

/// One member worker: syncs keys until the member stops.
async fn work(m: Arc<MemberShared>) {
    loop {
        let key = m.queue.next().await;
        let slot = m
            .ctx
            .settings
            .fleet
            .sync_slot(m.connection.answering())
            .await;
        // Boxed: a worker waits on its queue most of the time, and a task is as large as its
        // largest state; with the sync inline every idle worker of a thousand members would
        // keep the ~8 KB a sync needs.
        let result = Box::pin(sync(&m, &key)).await;
        drop(slot);
        finish(&m, &key, result);
        m.queue.done(&key);
        m.status_soon(key);
    }
}

/// What a watch of the member's copies of a workload kind does with each change.
fn on_workload_change(
    kind: Kind,
) -> impl Fn(&MemberShared, &DynamicObject, Change, bool, bool) + Send + 'static {
    move |m, o, change, own_write, deleted| {
        let key = WorkloadKey::new(kind, o.namespace().unwrap_or_default(), o.name_any());
        if deleted {
            m.ctx.copy_index.remove(&key, &m.name);
        } else {
            m.ctx.copy_index.add(&key, &m.name);
        }
        // Drift for this member's worker: only an edit (generation, labels, annotations)
        // can be one; status updates are most events and never are, nor is our own write
        // coming back.
        if change.shape && !own_write && lock(&m.intents).contains(&key) {
            m.queue.add(key.clone());
        }
        // Status for the central controller, behind changes of what is wanted.
        if change.shape || change.status {
            m.status_soon(key);
        }
    }
}

/// What a watch of the member's dependency copies of `kind` does with each change.
fn on_dep_change(
    kind: DepKind,
) -> impl Fn(&MemberShared, &DynamicObject, Change, bool, bool) + Send + 'static {
    move |m, o, change, own_write, _| {
        if !change.shape {
            return;
        }
        let (ns, name) = (o.namespace().unwrap_or_default(), o.name_any());
        let users = lock(&m.intents).users_of(kind, &ns, &name);
        if users.is_empty() {
            // Perhaps left by an earlier run, or written just as its last user let go of
            // it: the next sync collects it.
            m.gc_due.store(true, Ordering::Release);
        } else if !own_write {
            for k in users {
                m.queue.add(k);
            }
        }
    }
}

/// An HPA copy that comes, goes or retargets changes whose replicas are the member's.
fn on_hpa_change(m: &MemberShared, o: &DynamicObject, change: Change, _own: bool, _del: bool) {
    if !change.shape {
        return;
    }
    let ns = o.namespace().unwrap_or_default();
    let Ok(v) = serde_json::to_value(o) else {
        return;
    };
    if let Some(key) = hpa::target(&ns, &v)
        && lock(&m.intents).contains(&key)
    {
        // Whether its copy counts as observed changes too.
        m.queue.add(key.clone());
        m.status_soon(key);
    }
}

/// A label-selected watch of `ar` in the member, and the cache it fills; `on_change` sees
/// every applied or deleted object with what it changed in the cache, whether it is this
/// member's own last write coming back, and whether it was deleted. Once the first list of
/// a watch started after the member's first look is in, the member's workloads are synced
/// again (from the caches, so at no cost where nothing changed): the sync that started it
/// wrote without a cache, and an edit of that copy made before the list is never told.
/// (The first look's end syncs them all anyway.) A collection of unreferenced dependencies
/// waiting for the list goes ahead too.
fn watch(
    m: Arc<MemberShared>,
    client: Client,
    ar: ApiResource,
    on_change: impl Fn(&MemberShared, &DynamicObject, Change, bool, bool) + Send + 'static,
) -> (ObjectCache, impl Future<Output = ()> + Send + 'static) {
    // Member copies are looked up by name; their pod-template references are never read.
    let cache = ObjectCache::new(&ar.kind, false).without_status();
    // Every copy pushed comes back through here: decoded in one pass (see `dynamic`).
    let api: Api<Decoded> = Api::all_with(client, &ar);
    let cfg = watcher::Config::default().labels(&copies_selector());
    let stream = watcher::watcher(api, cfg)
        .backoff(member_watch::backoff())
        .map(|ev| ev.map(dynamic::into_dynamic));
    let writer = cache.clone();
    let task = async move {
        let (plural, kind) = (ar.plural, ar.kind);
        let mut stream = std::pin::pin!(stream);
        let mut listed = false;
        while let Some(ev) = stream.next().await {
            let change = match &ev {
                Ok(e) => writer.apply(e),
                Err(_) => Change::default(),
            };
            match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    let own = m.is_own_write(&kind, &o, false);
                    on_change(&m, &o, change, own, false)
                }
                Ok(Event::Delete(o)) => {
                    m.is_own_write(&kind, &o, true);
                    on_change(&m, &o, change, false, true)
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(error = %Report(&error), resource = %plural, "member watch failed; retrying")
                }
            }
            if !listed && writer.ready().is_ready() {
                listed = true;
                if m.caches().is_some_and(|c| c.synced.load(Ordering::Acquire)) {
                    m.notify_all();
                    for k in lock(&m.intents).keys() {
                        m.queue.add(k.clone());
                    }
                }
                if m.gc_due.load(Ordering::Acquire) {
                    m.gc_kick.notify_one();
                }
            }
        }
    };
    (cache, task)
}

/// [`timed`] for a write, counted and timed in the metrics by `verb`.
async fn write<T>(
    m: &MemberShared,
    verb: &str,
    op: &str,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, SyncError> {
    let start = std::time::Instant::now();
    let r = m.connection.timed(op, f).await;
    let result = if r.is_ok() { "ok" } else { "error" };
    m.ctx
        .metrics
        .member_write(verb, result, start.elapsed().as_secs_f64());
    r
}

/// Makes the member hold `desired` (never over an object that is not Meridian's). With a
/// synced `cache` of the member's managed objects it decides from the cache first, so a sync
/// that changes nothing costs no request and a change costs one; a stale cache shows as a
/// 409 (AlreadyExists, or a resourceVersion conflict), and then the object is read and the
/// decision made again. Objects travel as JSON text: a create sends the desired copy as it
/// is held, and no answer is decoded (the watch brings the result).
async fn apply(
    m: &MemberShared,
    target: Target<'_>,
    desired: &Compact,
    cache: Option<&ObjectCache>,
) -> Result<Applied, SyncError> {
    let (client, ar, ns, name) = (target.client, target.ar, target.ns, target.name);
    if let Some(store) = cache {
        let cached = store.get(ns, name).map(|e| e.value());
        match converge(m, &target, desired, cached).await {
            Err(e) if e.is_status(409) => {}
            r => return r,
        }
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let existing = m
        .connection
        .timed(&format!("reading {}", target.what), api.get_opt(name))
        .await?
        .map(|o| serde_json::to_value(&o))
        .transpose()
        .map_err(|e| SyncError::Encode(target.what.clone(), e))?;
    converge(m, &target, desired, existing).await
}

/// The member object one [`apply`] is about.
struct Target<'a> {
    /// The workload being synced (the object is its copy or one of its dependencies).
    workload: &'a WorkloadKey,
    client: &'a Client,
    ar: &'a kube::api::ApiResource,
    ns: &'a str,
    name: &'a str,
    /// "Kind ns/name", for errors.
    what: String,
    /// For the workload's own copy: the member's HPA copies (synced), which may own its
    /// replicas.
    hpas: Option<&'a ObjectCache>,
}

impl<'a> Target<'a> {
    /// The copy `ns/name` of `ar` for `workload`, in the member `client` reaches.
    fn new(
        workload: &'a WorkloadKey,
        client: &'a Client,
        ar: &'a kube::api::ApiResource,
        (ns, name): (&'a str, &'a str),
    ) -> Self {
        Target {
            workload,
            client,
            ar,
            ns,
            name,
            what: format!("{} {ns}/{name}", ar.kind),
            hpas: None,
        }
    }

    fn request(&self) -> Request {
        Request::new(<DynamicObject as kube::Resource>::url_path(
            self.ar,
            Some(self.ns),
        ))
    }

    /// Sends a write built by `build` from the request; the answer's body is not decoded.
    async fn send(
        &self,
        m: &MemberShared,
        verb: &str,
        build: impl FnOnce(&Request) -> Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<(), SyncError> {
        let op = format!(
            "{} {}",
            if verb == "create" {
                "creating"
            } else {
                "updating"
            },
            self.what
        );
        let req = build(&self.request()).map_err(|e| SyncError::Api {
            op: op.clone(),
            cluster: m.name.clone(),
            source: kube::Error::BuildRequest(e),
        })?;
        let object = (
            self.ar.kind.clone(),
            self.ns.to_string(),
            self.name.to_string(),
        );
        lock(&m.echo).sending(object.clone());
        let answer = write(m, verb, &op, self.client.request_text(req)).await;
        // Of the answer only the resourceVersion is read: it tells this write from an edit
        // when it comes back through the watch.
        let rv = answer.as_ref().ok().and_then(|a| {
            serde_json::from_str::<Written>(a)
                .ok()?
                .resource_version()?
                .parse()
                .ok()
        });
        if lock(&m.echo).answered(&object, rv) {
            // Someone else's edit came by while this write was in flight: look again.
            m.queue.add(self.workload.clone());
        }
        answer.map(drop)
    }
}

/// One decision and write of [`apply`] against `existing` (as read or as cached).
async fn converge(
    m: &MemberShared,
    t: &Target<'_>,
    desired: &Compact,
    existing: Option<Value>,
) -> Result<Applied, SyncError> {
    match ownership::check(existing.as_ref()) {
        Ownership::Foreign => Err(SyncError::Conflict {
            kind: t.ar.kind.clone(),
            namespace: t.ns.into(),
            name: t.name.into(),
            cluster: m.name.clone(),
        }),
        Ownership::Absent => {
            let body = desired.json();
            t.send(m, "create", |r| r.create(&PostParams::default(), body))
                .await?;
            Ok(Applied::Created)
        }
        Ownership::Managed { .. } => {
            let Some(actual) = existing else {
                return Ok(Applied::Unchanged);
            };
            let mut desired = desired.value();
            if drift::in_sync(&actual, &desired) {
                return Ok(Applied::Unchanged);
            }
            // Looked at only when something differs: most syncs change nothing.
            if t.hpas.is_some_and(|h| scaled_in_member(h, t.workload)) {
                desired = hpa::with_member_replicas(&desired, &actual);
                if drift::in_sync(&actual, &desired) {
                    return Ok(Applied::Unchanged);
                }
            }
            // `merged` keeps the resourceVersion read: a concurrent change is a 409.
            let body = serde_json::to_vec(&drift::merged(&actual, &desired))
                .map_err(|e| SyncError::Encode(t.what.clone(), e))?;
            t.send(m, "update", |r| {
                r.replace(t.name, &PostParams::default(), body)
            })
            .await?;
            Ok(Applied::Updated)
        }
    }
}

/// Whether one of the member's HPA copies scales the workload `key`.
fn scaled_in_member(hpas: &ObjectCache, key: &WorkloadKey) -> bool {
    hpas.state()
        .iter()
        .filter(|e| e.namespace == key.namespace)
        .any(|e| hpa::target(&e.namespace, &e.value()).as_ref() == Some(key))
}

/// Outcome of one sync, for the record and Events.
struct Synced {
    workload: Applied,
    removed: bool,
}

async fn sync(m: &Arc<MemberShared>, key: &WorkloadKey) -> Result<Option<Synced>, SyncError> {
    let caches = m.caches().ok_or(SyncError::NotConnected)?;
    let intent = lock(&m.intents).get(key).cloned();
    let mut out = None;
    match intent.as_ref().map(|i| (&i.want, i.uid.as_str())) {
        Some((Want::Present { deps, workload, .. }, _)) => {
            m.connection
                .ensure_namespace(&caches.client, &key.namespace, |result, secs| {
                    m.ctx.metrics.member_write("create", result, secs)
                })
                .await?;
            // Once the first look is done, the caches decide, even one whose watch this
            // sync starts and which has not listed yet: its kind's first look found nothing,
            // and where the member holds a copy after all, the create answers 409 and the
            // copy is read.
            let synced = caches.synced.load(Ordering::Acquire);
            for d in deps {
                let Some(object) = &d.object else { continue };
                let cache = caches.watch_dep(m, d.kind).filter(|_| synced);
                let target = (key.namespace.as_str(), d.name.as_str());
                let ar = d.kind.api_resource();
                let target = Target::new(key, &caches.client, &ar, target);
                apply(m, target, object, cache).await?;
            }
            let cache = caches.watch_workload(m, key.kind).filter(|_| synced);
            let ar = key.kind.api_resource();
            let target = Target {
                hpas: Some(&caches.hpas).filter(|_| synced),
                ..Target::new(key, &caches.client, &ar, (&key.namespace, &key.name))
            };
            let applied = apply(m, target, workload, cache).await?;
            out = Some(Synced {
                workload: applied,
                removed: false,
            });
        }
        Some((Want::Absent, uid)) => {
            let api: Api<DynamicObject> = Api::namespaced_with(
                caches.client.clone(),
                &key.namespace,
                &key.kind.api_resource(),
            );
            let current = m
                .connection
                .timed(&format!("reading {key}"), api.get_opt(&key.name))
                .await?;
            let mut removed = false;
            // Whether the member answered that no copy is left: the cache learns it now,
            // not when the watch brings the deletion (after an outage its reconnect may
            // still be backing off), so a finalizer waiting on this member goes on.
            let mut gone = current.is_none();
            if let Some(obj) = current
                && let Ok(v) = serde_json::to_value(&obj)
                && ownership::owned_by(&v, uid)
            {
                // The uid precondition: never delete a same-name object created meanwhile.
                let dp = member_sync::delete_only(obj.uid());
                match write(
                    m,
                    "delete",
                    &format!("deleting {key}"),
                    api.delete(&key.name, &dp),
                )
                .await
                {
                    // An object returned is still there (finalizers hold it); a status
                    // means it is gone.
                    Ok(answer) => {
                        removed = true;
                        gone = answer.is_right();
                    }
                    Err(e) if e.is_status(404) => gone = true,
                    Err(e) => return Err(e),
                }
            }
            if gone && let Some(cache) = caches.workload(key.kind) {
                cache.forget(&key.namespace, &key.name);
            }
            out = Some(Synced {
                workload: Applied::Unchanged,
                removed,
            });
        }
        None => {}
    }
    collect_garbage(m, &caches).await?;
    Ok(out)
}

/// Collects whenever [`MemberShared::collect_soon`] asks. A failure leaves the collection
/// due, for the next sync or kick.
async fn collect_when_kicked(m: Arc<MemberShared>) {
    loop {
        m.gc_kick.notified().await;
        let Some(caches) = m.caches() else { continue };
        // Boxed: the task waits for a kick nearly always (see `work`).
        if let Err(error) = Box::pin(collect_garbage(&m, &caches)).await {
            tracing::warn!(error = %Report(&error), "collecting unreferenced dependencies failed");
        }
    }
}

/// Removes dependency copies no Present intent references any more.
async fn collect_garbage(m: &MemberShared, caches: &Caches) -> Result<(), SyncError> {
    // A dependency watch that has not listed yet kicks the collection once it has.
    let listed = || {
        let mut started = caches.deps.values().filter_map(OnceLock::get);
        caches.synced.load(Ordering::Acquire) && started.all(|c| c.ready().is_ready())
    };
    if !m.gc.load(Ordering::Acquire) || !listed() || !m.gc_due.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    let collected = collect_unreferenced(m, caches).await;
    if collected.is_err() {
        m.gc_due.store(true, Ordering::Release);
    }
    collected
}

async fn collect_unreferenced(m: &MemberShared, caches: &Caches) -> Result<(), SyncError> {
    for (kind, store) in &caches.deps {
        let Some(store) = store.get() else { continue };
        for obj in store.state() {
            let (ns, name) = (obj.namespace.clone(), obj.name.clone());
            if lock(&m.intents).is_used(*kind, &ns, &name) {
                continue;
            }
            // An object with a copy Placement is the copy path's to keep or remove.
            let r = crate::dep_writers::DepRef {
                kind: *kind,
                namespace: ns.clone(),
                name: name.clone(),
            };
            if m.ctx.writers.writer(&r) == crate::dep_writers::Writer::Copies {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(caches.client.clone(), &ns, &kind.api_resource());
            let dp = member_sync::delete_only((!obj.uid.is_empty()).then(|| obj.uid.clone()));
            match write(
                m,
                "delete",
                &format!("deleting {} {ns}/{name}", kind.as_str()),
                api.delete(&name, &dp),
            )
            .await
            {
                Ok(_) => {
                    tracing::info!(kind = kind.as_str(), %ns, %name, "removed unreferenced dependency")
                }
                Err(e) if e.is_status(404) || e.is_status(409) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Records the outcome, notes Events on transitions and schedules a retry after failures.
fn finish(m: &Arc<MemberShared>, key: &WorkloadKey, result: Result<Option<Synced>, SyncError>) {
    let intent = lock(&m.intents).get(key).cloned();
    let Some(intent) = intent else {
        if let Err(error) = result {
            tracing::debug!(%key, error = %Report(&error), "cleanup pass failed");
        }
        return;
    };
    let uid = intent.uid.clone();
    // Read without creating the record: a record appears only with an outcome in it, so a
    // reconcile between here and there still sees the first sync as pending.
    let (prev_error, prev_converged) = lock(&m.records)
        .get(key)
        .map(|r| (r.error.clone(), r.converged.clone()))
        .unwrap_or_default();
    match result {
        Ok(synced) => {
            {
                let mut records = lock(&m.records);
                let r = records.entry(key.clone()).or_default();
                let wrote = synced
                    .as_ref()
                    .is_some_and(|s| s.workload != Applied::Unchanged || s.removed);
                if wrote
                    || !r.error.is_empty()
                    || r.last_sync_time.is_none()
                    || r.converged.as_ref() != Some(&intent)
                {
                    r.last_sync_time = Some(now());
                }
                r.error.clear();
                r.conflict = false;
                r.converged = Some(intent.clone());
            }
            m.queue.forget(key);
            let Some(s) = synced else { return };
            let drift = prev_converged.as_ref() == Some(&intent);
            let outcome = match (s.workload, s.removed) {
                (_, true) => "removed",
                (Applied::Created, _) => "created",
                (Applied::Updated, _) if drift => "drift_reverted",
                (Applied::Updated, _) => "updated",
                (Applied::Unchanged, _) => "unchanged",
            };
            m.ctx.metrics.sync(outcome);
            if outcome != "unchanged" {
                tracing::info!(%key, outcome, "member synced");
            }
            // Only a revert of a direct edit in the member is told as an Event: creates,
            // updates and removals carry out a decision the scheduler's `Scheduled` Event
            // already told, and show on the Placement (each cluster's `lastSyncTime`, the
            // `Propagated` condition). An Event for them would be a federation write per
            // change that says nothing new.
            if outcome != "drift_reverted" {
                return;
            }
            m.ctx.events.note(Note {
                key: key.clone(),
                uid,
                type_: EventType::Normal,
                reason: "DriftReverted",
                action: format!("restored {key} after a direct edit in"),
                item: m.name.clone(),
            });
        }
        Err(error) => {
            let conflict = error.is_conflict();
            m.ctx
                .metrics
                .sync(if conflict { "conflict" } else { "error" });
            let msg = report(&error);
            tracing::warn!(%key, error = %msg, "member sync failed; retrying");
            {
                let mut records = lock(&m.records);
                let r = records.entry(key.clone()).or_default();
                r.error = msg.clone();
                r.conflict = conflict;
            }
            if msg != prev_error {
                m.ctx.events.note(Note {
                    key: key.clone(),
                    uid,
                    type_: EventType::Warning,
                    reason: if conflict { "Conflict" } else { "SyncFailed" },
                    action: String::new(),
                    item: msg,
                });
            }
            m.queue.retry(key.clone());
        }
    }
}

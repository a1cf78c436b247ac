//! The loop that places objects of every kind a policy names and that has no replicas
//! (ServiceAccounts, RBAC, Ingresses, custom resources, ...): a Placement whose
//! `destClusters` are every cluster the governing policy selects.
//!
//! For each `(apiVersion, kind)` some policy's selectors name ([`fed_api::copies`]), a
//! dynamic watch (its resource found by discovery) keeps a digest of the objects; the watch
//! starts when a policy first names the kind and stops when none does (the kind's objects
//! are then re-decided: ungoverned, their Placements are deleted). A change of any policy
//! or of a cluster's placement-relevant state re-decides every copied object. Nothing
//! polls: the index says when policies or clusters change ([`Index::subscribe`]), and a
//! kind not served yet is looked up again when the federation's CustomResourceDefinitions
//! change, with a back-off as the fallback ([`meridian_runtime::kind_retry`]).
//!
//! A custom kind whose `ResourceInterpreter` names its replicas is divided when its policy
//! divides replicas: the loop keeps the interpreters (one watch), reads each object of such
//! a kind as its interpreter says into the digest, and restarts the kind's watch when its
//! interpreter changes, so every object is read again and re-placed. Decisions are the
//! core's ([`crate::copies::place`], [`fed_api::governance`]) and the Placement writes are
//! the workload loop's ([`super::desired`], [`super::writer`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fed_api::copies::{copied_kinds, placement_of};
use fed_api::governance::{Subject, govern};
use fed_api::interpreter::{ResourceInterpreterSpec, interpreter_for};
use fed_api::placement::WorkloadReference;
use fed_api::{Placement, ResourceInterpreter};
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_fn};
use kube::{Client, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::kind_retry::{Backoff, Retries, definition_changes};
use meridian_runtime::queue::{self, WorkQueue};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::copies::{CopiedObject, interpret, place};
use crate::types::Workload;

use super::desired::{self, Desired, Plan};
use super::evictions::Evictions;
use super::index::Index;
use super::metrics::Metrics;
use super::writer::{WriteError, Writer};

/// Least time between two re-decisions of every copied object: allocated resources move
/// with pod churn, and a burst of such changes is one re-decision, not one per change.
const REQUEUE_SPACING: Duration = Duration::from_secs(1);

/// One copied object.
pub use fed_api::copies::CopyKey;

/// What placement reads of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    uid: String,
    labels: BTreeMap<String, String>,
    /// The object read as its kind's interpreter says (replicas, pod requests), when one
    /// names the kind's replicas; the error as text.
    interpreted: Option<Result<Workload, String>>,
}

type Kind = (String, String);

/// The digests of the watched kinds' objects.
#[derive(Default)]
struct Objects {
    inner: Mutex<HashMap<CopyKey, Entry>>,
}

impl Objects {
    fn lock(&self) -> MutexGuard<'_, HashMap<CopyKey, Entry>> {
        meridian_runtime::sync::lock(&self.inner)
    }

    fn keys(&self) -> Vec<CopyKey> {
        self.lock().keys().cloned().collect()
    }

    fn keys_of(&self, kind: &Kind) -> Vec<CopyKey> {
        self.lock()
            .keys()
            .filter(|k| k.api_version == kind.0 && k.kind == kind.1)
            .cloned()
            .collect()
    }
}

/// The loop's shared state.
struct Copies {
    client: Client,
    index: Arc<Index>,
    placements: Store<Placement>,
    writer: Writer,
    metrics: Arc<Metrics>,
    /// The eviction budget shared with the workload loop.
    evictions: Arc<Evictions>,
    objects: Objects,
    queue: WorkQueue<CopyKey>,
    /// How a kind no server serves yet is looked up again without a definition change.
    kind_retry: Backoff,
    /// Each custom kind's interpreter (the first by name).
    interpreters: Mutex<HashMap<Kind, ResourceInterpreterSpec>>,
}

/// How the loop runs: its workers and how it looks up kinds not served yet.
pub struct Settings {
    /// Objects decided side by side.
    pub workers: usize,
    /// How a kind no server serves yet is looked up again without a definition change.
    pub kind_retry: Backoff,
}

/// Places copied objects until the task is dropped, evicting within the budget the
/// workload loop draws on too.
pub async fn run(
    client: Client,
    index: Arc<Index>,
    placements: Store<Placement>,
    writer: Writer,
    metrics: Arc<Metrics>,
    evictions: Arc<Evictions>,
    settings: Settings,
) {
    let workers = settings.workers;
    let copies = Arc::new(Copies {
        client,
        index,
        placements,
        writer,
        queue: WorkQueue::new(queue::Settings::default(), metrics.queue.clone()),
        metrics,
        evictions,
        objects: Objects::default(),
        kind_retry: settings.kind_retry,
        interpreters: Mutex::default(),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..workers.max(1) {
        let c = copies.clone();
        tasks.spawn(async move { c.worker(id).await });
    }
    let c = copies.clone();
    tasks.spawn(async move { c.follow_kinds().await });
    while tasks.join_next().await.is_some() {}
}

impl Copies {
    /// Starts and stops the per-kind watches as policies name kinds, and re-decides every
    /// object when policies or clusters changed. Wakes only when the index's generations
    /// move, a CustomResourceDefinition changes, or a kind's back-off ends.
    async fn follow_kinds(self: Arc<Self>) {
        let mut generations = self.index.subscribe();
        let mut definitions = std::pin::pin!(self.definition_changes());
        let mut definitions_open = true;
        let mut interpreter_events = std::pin::pin!(self.interpreter_events());
        let mut interpreters = Interpreters::default();
        let mut interpreters_open = true;
        // No kind is watched before the interpreters are listed: an object of a divided
        // kind read without its interpreter would be placed as whole copies meanwhile.
        while let Some(event) = interpreter_events.next().await {
            let listed = matches!(event, Event::InitDone);
            for kind in interpreters.apply(event) {
                self.set_interpreter(&kind, interpreters.of(&kind));
            }
            if listed {
                break;
            }
        }
        let mut watches: HashMap<Kind, (ApiResource, JoinHandle<()>)> = HashMap::new();
        let mut retries: Retries<Kind> = Retries::new(self.kind_retry);
        let mut requeues = Spacing::new(REQUEUE_SPACING);
        let mut seen = None;
        loop {
            // Marked seen before the policies are read: a change after this wakes the
            // loop again rather than being lost.
            let current = *generations.borrow_and_update();
            let wanted = copied_kinds(self.index.all_policies().iter());
            retries.retain(|k| wanted.contains(k) && !watches.contains_key(k));
            for kind in &wanted {
                if watches.contains_key(kind) || !retries.ready(kind, tokio::time::Instant::now()) {
                    continue;
                }
                match self.discover(kind).await {
                    Ok(ar) => {
                        tracing::info!(api_version = %kind.0, kind = %kind.1, "watching a copied kind");
                        let c = self.clone();
                        let k = kind.clone();
                        let task = tokio::spawn(c.watch_kind(k, ar.clone()));
                        watches.insert(kind.clone(), (ar, task));
                    }
                    // Not served (yet): a CRD not created yet, a typo. Tried again when a
                    // definition changes, or after the back-off.
                    Err(e) => {
                        retries.failed(kind.clone(), tokio::time::Instant::now());
                        tracing::debug!(api_version = %kind.0, kind = %kind.1, error = %Report(&e), "kind not discovered")
                    }
                }
            }
            retries.retain(|k| !watches.contains_key(k));
            let gone: Vec<Kind> = watches
                .keys()
                .filter(|k| !wanted.contains(*k))
                .cloned()
                .collect();
            for kind in gone {
                if let Some((_, task)) = watches.remove(&kind) {
                    task.abort();
                }
                tracing::info!(api_version = %kind.0, kind = %kind.1, "no policy names the kind any more");
                let keys = self.objects.keys_of(&kind);
                self.objects
                    .lock()
                    .retain(|k, _| !(k.api_version == kind.0 && k.kind == kind.1));
                // Without an entry the reconcile removes the Placement.
                keys.into_iter().for_each(|k| self.queue.add(k));
            }
            if Some(current) != seen {
                seen = Some(current);
                requeues.changed(tokio::time::Instant::now());
            }
            if requeues.take(tokio::time::Instant::now()) {
                self.objects
                    .keys()
                    .into_iter()
                    .for_each(|k| self.queue.add(k));
            }
            let due = [retries.next_due(), requeues.due()]
                .into_iter()
                .flatten()
                .min();
            tokio::select! {
                changed = generations.changed() => {
                    if changed.is_err() {
                        // The index is gone: so is the scheduler.
                        return;
                    }
                }
                event = interpreter_events.next(), if interpreters_open => {
                    // The watch retries for ever; should it end, the interpreters stay as
                    // last seen.
                    let Some(event) = event else {
                        interpreters_open = false;
                        continue;
                    };
                    for kind in interpreters.apply(event) {
                        self.set_interpreter(&kind, interpreters.of(&kind));
                        // Re-read every object of the kind as the interpreter now says.
                        if let Some((ar, task)) = watches.remove(&kind) {
                            task.abort();
                            let c = self.clone();
                            let task = tokio::spawn(c.watch_kind(kind.clone(), ar.clone()));
                            watches.insert(kind, (ar, task));
                        }
                    }
                }
                event = definitions.next(), if definitions_open => match event {
                    Some(()) => retries.expedite(tokio::time::Instant::now()),
                    // The definition watch retries for ever; should it end, the back-off
                    // alone brings new kinds.
                    None => definitions_open = false,
                },
                () = sleep_until(due), if due.is_some() => {}
            }
        }
    }

    /// One item per change of the federation's CustomResourceDefinitions
    /// ([`definition_changes`]); watch errors are counted and logged.
    fn definition_changes(&self) -> impl Stream<Item = ()> + use<> {
        let metrics = self.metrics.clone();
        definition_changes(self.client.clone()).filter_map(move |ev| {
            if let Err(e) = &ev {
                metrics.watch_error("CustomResourceDefinition");
                tracing::warn!(error = %Report(e), "CustomResourceDefinition watch failed; retrying");
            }
            std::future::ready(ev.ok())
        })
    }

    /// The ResourceInterpreters' watch events (errors are logged and retried).
    fn interpreter_events(&self) -> impl Stream<Item = Event<ResourceInterpreter>> + use<> {
        let api: Api<ResourceInterpreter> = Api::all(self.client.clone());
        let metrics = self.metrics.clone();
        watch_fn(api, watcher::Config::default())
            .default_backoff()
            .filter_map(move |ev| {
                let out = match ev {
                    Ok(e) => Some(e),
                    Err(e) => {
                        metrics.watch_error("ResourceInterpreter");
                        tracing::warn!(error = %Report(&e), "ResourceInterpreter watch failed; retrying");
                        None
                    }
                };
                std::future::ready(out)
            })
    }

    fn set_interpreter(&self, kind: &Kind, spec: Option<ResourceInterpreterSpec>) {
        let mut all = meridian_runtime::sync::lock(&self.interpreters);
        match spec {
            Some(s) => all.insert(kind.clone(), s),
            None => all.remove(kind),
        };
    }

    async fn discover(&self, (api_version, kind): &Kind) -> Result<ApiResource, kube::Error> {
        let (group, version) = api_version
            .rsplit_once('/')
            .unwrap_or(("", api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map(|(ar, _caps)| ar)
    }

    /// Follows the objects of one kind into [`Objects`], queueing each one that changed.
    async fn watch_kind(self: Arc<Self>, kind: Kind, ar: ApiResource) {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let mut stream =
            std::pin::pin!(watch_fn(api, watcher::Config::default()).default_backoff());
        let mut listed: HashSet<CopyKey> = HashSet::new();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => listed.clear(),
                Ok(Event::InitApply(o)) => {
                    listed.insert(self.upsert(&kind, &o));
                }
                Ok(Event::InitDone) => {
                    // Objects deleted while the watch was down are absent from the re-list.
                    let stale: Vec<CopyKey> = self
                        .objects
                        .keys_of(&kind)
                        .into_iter()
                        .filter(|k| !listed.contains(k))
                        .collect();
                    for k in stale {
                        self.objects.lock().remove(&k);
                        self.queue.add(k);
                    }
                    listed.clear();
                }
                Ok(Event::Apply(o)) => {
                    self.upsert(&kind, &o);
                }
                Ok(Event::Delete(o)) => {
                    let k = key_of(&kind, &o);
                    self.objects.lock().remove(&k);
                    self.queue.add(k);
                }
                Err(e) => {
                    self.metrics.watch_error("copied kind");
                    tracing::warn!(api_version = %kind.0, kind = %kind.1, error = %Report(&e), "watch failed; retrying");
                }
            }
        }
    }

    /// Records an object; queues it when what placement reads changed.
    fn upsert(&self, kind: &Kind, o: &DynamicObject) -> CopyKey {
        let k = key_of(kind, o);
        let interpreter = meridian_runtime::sync::lock(&self.interpreters)
            .get(kind)
            .filter(|spec| spec.replicas.is_some())
            .cloned();
        let interpreted = interpreter
            .and_then(|spec| interpret(&serde_json::to_value(o).unwrap_or_default(), &spec));
        let entry = Entry {
            uid: o.uid().unwrap_or_default(),
            labels: o.labels().clone(),
            interpreted,
        };
        let changed = self.objects.lock().insert(k.clone(), entry.clone()) != Some(entry);
        if changed {
            self.queue.add(k.clone());
        }
        k
    }

    async fn worker(self: Arc<Self>, id: usize) {
        loop {
            let key = self.queue.next().await;
            let span = tracing::info_span!("place-copy", worker = id, object = %key);
            let started = Instant::now();
            match self.reconcile(&key).instrument(span).await {
                Ok(result) => {
                    self.queue.forget(&key);
                    self.metrics
                        .reconcile(result, started.elapsed().as_secs_f64());
                }
                Err(error) => {
                    let after = self.queue.retry(key.clone());
                    self.metrics
                        .reconcile("error", started.elapsed().as_secs_f64());
                    tracing::warn!(object = %key, error = %Report(&error), retry_in = ?after, "placing a copy failed");
                }
            }
            self.queue.done(&key);
        }
    }

    /// Decides one object's Placement from the caches and writes what differs.
    async fn reconcile(&self, key: &CopyKey) -> Result<&'static str, WriteError> {
        let (ns, name) = placement_of(
            &key.api_version,
            &key.kind,
            key.namespace.as_deref(),
            &key.name,
        );
        let current = self
            .placements
            .get(&ObjectRef::<Placement>::new(&name).within(&ns));
        let entry = self.objects.lock().get(key).cloned();
        let policies = key
            .namespace
            .as_deref()
            .map(|n| self.index.policies(n))
            .unwrap_or_default();
        let cluster_policies = self.index.cluster_policies();
        let governance = entry.as_ref().and_then(|e| {
            govern(
                &policies,
                &cluster_policies,
                &Subject {
                    api_version: &key.api_version,
                    kind: &key.kind,
                    namespace: key.namespace.as_deref(),
                    name: &key.name,
                    labels: &e.labels,
                },
            )
        });
        let (Some(entry), Some(governance)) = (entry, governance) else {
            // Gone, or no policy governs it: no Placement, so the controllers remove its
            // copies.
            if current.is_none() {
                return Ok("ungoverned");
            }
            return match self.writer.delete(&ns, &name).await {
                Ok(()) | Err(WriteError::NotFound(_)) => {
                    self.metrics.write("delete", "ok");
                    Ok("ungoverned")
                }
                Err(e) => {
                    self.metrics.write("delete", "error");
                    Err(e)
                }
            };
        };
        let now = SystemTime::now();
        let now_unix = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let guarded = self.index.mass_failure();
        let snapshot = self.index.snapshot(now_unix, guarded);
        let previous = current
            .as_ref()
            .map(|p| p.spec.dest_clusters.clone())
            .unwrap_or_default();
        let object = CopiedObject {
            api_version: key.api_version.clone(),
            kind: key.kind.clone(),
            namespace: key.namespace.clone().unwrap_or_default(),
            name: key.name.clone(),
        };
        let place_on = |snapshot| {
            place(
                snapshot,
                &object,
                entry.interpreted.as_ref(),
                governance.winner.policy,
                &previous,
            )
        };
        let mut placed = place_on(&snapshot);
        if placed.evicts
            && !guarded
            && let Err(wait) = self.evictions.admit()
        {
            // Over the eviction rate: decide as if evictions were paused and come back
            // when a token is due.
            placed = place_on(&self.index.snapshot(now_unix, true));
            self.queue.add_after(key.clone(), wait);
        }
        let want = Desired {
            owner: OwnerReference {
                api_version: key.api_version.clone(),
                kind: key.kind.clone(),
                name: key.name.clone(),
                uid: entry.uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            spec: fed_api::PlacementSpec {
                resource: WorkloadReference {
                    api_version: key.api_version.clone(),
                    kind: key.kind.clone(),
                    name: key.name.clone(),
                    uid: Some(entry.uid.clone()),
                },
                dest_clusters: desired::dest(&placed.dest),
            },
            outcome: placed.outcome,
            unschedulable: desired::unschedulable(&placed.unschedulable),
            policy: Some(governance.choice()),
        };
        if let Some(secs) = placed.recheck_after {
            // A cluster's toleration runs out then: no watch event says so.
            self.queue.add_after(key.clone(), Duration::from_secs(secs));
        }
        let now_text = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        match desired::plan_at(&ns, &name, current.as_deref(), &want, &now_text) {
            Plan::Create(mut p) => {
                p.status = desired::status(None, &want, &now_text);
                let created = self.writer.create(&p).await.inspect_err(|_| {
                    self.metrics.write("create", "error");
                })?;
                self.metrics.write("create", "ok");
                // A federation that dropped the status on create (one older than this
                // scheduler) gets it written as before.
                if created.status.is_none() {
                    let mut created = created;
                    created.status = p.status;
                    self.writer.write_status(&created).await?;
                }
                Ok("created")
            }
            Plan::Update { spec_patch, status } => {
                let Some(cur) = current else {
                    return Ok("unchanged");
                };
                let mut latest = (*cur).clone();
                if let Some(patch) = &spec_patch {
                    latest = self.writer.patch(&ns, &name, patch).await?;
                    self.metrics.write("patch", "ok");
                }
                if status {
                    latest.status = desired::status(cur.status.as_ref(), &want, &now_text);
                    self.writer.write_status(&latest).await?;
                    self.metrics.write("status", "ok");
                }
                Ok(if spec_patch.is_some() || status {
                    "updated"
                } else {
                    "unchanged"
                })
            }
        }
    }
}

/// The ResourceInterpreters as their watch shows them, and which kinds' interpreter each
/// event changes.
#[derive(Debug, Default)]
struct Interpreters {
    /// By name.
    all: BTreeMap<String, ResourceInterpreterSpec>,
    /// A re-list in progress.
    listing: Option<BTreeMap<String, ResourceInterpreterSpec>>,
}

impl Interpreters {
    /// The interpreter of `kind`: the first by name.
    fn of(&self, (api_version, kind): &Kind) -> Option<ResourceInterpreterSpec> {
        interpreter_for(
            self.all.iter().map(|(n, s)| (n.as_str(), s)),
            api_version,
            kind,
        )
        .cloned()
    }

    /// Takes one watch event; returns the kinds whose interpreter it changed.
    fn apply(&mut self, event: Event<ResourceInterpreter>) -> Vec<Kind> {
        let before = self.all.clone();
        match event {
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                return Vec::new();
            }
            Event::InitApply(i) => {
                self.listing
                    .get_or_insert_default()
                    .insert(i.name_any(), i.spec);
                return Vec::new();
            }
            Event::InitDone => self.all = self.listing.take().unwrap_or_default(),
            Event::Apply(i) => {
                self.all.insert(i.name_any(), i.spec);
            }
            Event::Delete(i) => {
                self.all.remove(&i.name_any());
            }
        }
        let targets: BTreeSet<Kind> = before
            .values()
            .chain(self.all.values())
            .map(|s| (s.target.api_version.clone(), s.target.kind.clone()))
            .collect();
        let previous = Interpreters {
            all: before,
            listing: None,
        };
        targets
            .into_iter()
            .filter(|k| previous.of(k) != self.of(k))
            .collect()
    }
}

/// When to act on changes that come in bursts: at once after a quiet spell, then at most
/// once per `spacing`, so the last change of a burst is always acted on.
#[derive(Debug)]
struct Spacing {
    spacing: Duration,
    last: Option<tokio::time::Instant>,
    due: Option<tokio::time::Instant>,
}

impl Spacing {
    fn new(spacing: Duration) -> Self {
        Spacing {
            spacing,
            last: None,
            due: None,
        }
    }

    /// Something changed at `now`.
    fn changed(&mut self, now: tokio::time::Instant) {
        let earliest = self.last.map_or(now, |t| (t + self.spacing).max(now));
        self.due.get_or_insert(earliest);
    }

    /// Whether to act at `now` (then it counts as done).
    fn take(&mut self, now: tokio::time::Instant) -> bool {
        if self.due.is_some_and(|d| d <= now) {
            self.due = None;
            self.last = Some(now);
            return true;
        }
        false
    }

    /// When a change waits to be acted on.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.due
    }
}

/// Sleeps until `due`; never wakes when there is none (the caller disables the branch).
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn key_of((api_version, kind): &Kind, o: &DynamicObject) -> CopyKey {
    CopyKey {
        api_version: api_version.clone(),
        kind: kind.clone(),
        namespace: o.namespace(),
        name: o.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn a_burst_of_changes_is_acted_on_at_once_then_once_per_spacing() {
        const S: Duration = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut s = Spacing::new(S);
        assert!(!s.take(t0), "nothing changed");
        s.changed(t0);
        assert!(s.take(t0), "the first change after a quiet spell: at once");
        assert!(!s.take(t0));
        // Three more within the second: one action, a second after the last.
        let ms = |n| t0 + Duration::from_millis(n);
        s.changed(ms(100));
        s.changed(ms(400));
        assert!(!s.take(ms(900)));
        s.changed(ms(950));
        assert_eq!(s.due(), Some(t0 + S));
        assert!(s.take(t0 + S));
        assert_eq!(s.due(), None, "all three were acted on");
        // Quiet for longer than the spacing: at once again.
        s.changed(t0 + 5 * S);
        assert!(s.take(t0 + 5 * S));
    }

    fn interpreter(name: &str, kind: &str, path: &str) -> ResourceInterpreter {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "ResourceInterpreter",
            "metadata": {"name": name},
            "spec": {"target": {"apiVersion": "example.com/v1", "kind": kind},
                     "replicas": {"path": path}}
        }))
        .unwrap()
    }

    #[test]
    fn interpreter_events_say_which_kinds_changed() {
        let rollout: Kind = ("example.com/v1".into(), "Rollout".into());
        let widget: Kind = ("example.com/v1".into(), "Widget".into());
        let mut i = Interpreters::default();
        // A list says nothing until it is done.
        assert!(i.apply(Event::Init).is_empty());
        assert!(
            i.apply(Event::InitApply(interpreter(
                "r",
                "Rollout",
                ".spec.replicas"
            )))
            .is_empty()
        );
        assert_eq!(i.apply(Event::InitDone), vec![rollout.clone()]);
        assert_eq!(
            i.of(&rollout).and_then(|s| s.replicas).map(|f| f.path),
            Some(".spec.replicas".into())
        );
        // The same again changes nothing.
        assert!(
            i.apply(Event::Apply(interpreter("r", "Rollout", ".spec.replicas")))
                .is_empty()
        );
        // A second interpreter of the kind, later by name, does not count; one earlier does.
        assert!(
            i.apply(Event::Apply(interpreter("z", "Rollout", ".spec.z")))
                .is_empty()
        );
        assert_eq!(
            i.apply(Event::Apply(interpreter("a", "Rollout", ".spec.a"))),
            vec![rollout.clone()]
        );
        assert_eq!(
            i.apply(Event::Apply(interpreter("w", "Widget", ".spec.n"))),
            vec![widget.clone()]
        );
        assert_eq!(
            i.apply(Event::Delete(interpreter("w", "Widget", ".spec.n"))),
            vec![widget.clone()]
        );
        assert_eq!(i.of(&widget), None);
        // A re-list without the earlier one falls back to the next by name.
        i.apply(Event::Init);
        i.apply(Event::InitApply(interpreter(
            "r",
            "Rollout",
            ".spec.replicas",
        )));
        assert_eq!(i.apply(Event::InitDone), vec![rollout.clone()]);
        assert_eq!(
            i.of(&rollout).and_then(|s| s.replicas).map(|f| f.path),
            Some(".spec.replicas".into())
        );
    }
}

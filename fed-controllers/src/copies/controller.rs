//! The copy controller: pushes every placed object of a copy-path kind into the members
//! its Placement names, reverts drift, removes copies a member should no longer hold, and
//! reports each member's result on the Placement.
//!
//! It reads caches only: the Placements, the federation's objects of each kind some
//! Placement is about (a dynamic reflector per kind, found by discovery), and in each
//! member a reflector per kind over Meridian's copies (label `managed-by=meridian`). A
//! member that does not serve a kind (a custom resource whose CRD it lacks) reports
//! `KindNotServed` and is asked again with back-off. The override policies come from the
//! process's one watch of them ([`crate::fleet::Overrides`]): a member's copy is the one
//! they make for it, and a change to a policy re-queues the objects it selects or selected.
//! An interpreted object's pod-template dependencies ([`super::template_deps`]) are recorded
//! in [`crate::dep_writers`], which makes them this path's objects, written where it has
//! copies; where an override policy cannot make such a dependency's copy, the interpreted
//! object's Placement says so ([`super::dep_failures`]). Decisions are [`super::plan`]'s and
//! [`super::member_copy`]'s; this module applies them, its federation writes in `fedwrite`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fed_api::copies::{Path, path, placement_of};
use fed_api::governance::Subject;
use fed_api::interpreter::{ResourceInterpreterSpec, interpreter_for};
use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, WORKLOAD_FINALIZER};
use fed_api::overrides::apply::{MemberCluster, labels_of, selecting};
use fed_api::placement::WorkloadReference;
use fed_api::{Cluster, Placement, ResourceInterpreter};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::lean::{self, Lean};
use meridian_runtime::namespace;
use meridian_runtime::queue::WorkQueue;
use meridian_runtime::sync::lock;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument as _;

use super::dep_failures::{override_failures, per_cluster, with_dep_failures};
use super::fedwrite::label_earlier_placements;
use super::member_copy::overridden;
use super::member_io::{classify, timed};
use super::packed::PackedObject;
use super::plan::{Finalizer, Step, finalizer, step, wanted};
use super::report::{FailReason, Outcome, cluster_entries, propagated};
use super::status::{MemberCopy, Rule, StatusKind, combined, member_entry};
use super::status_writes::StatusWrites;
use super::template_deps::{TemplateDeps, template_deps};
use super::visits::Visits;
use crate::dep_writers::{DepRef, DepWriters, copy_destinations};
use crate::dynamic::Decoded;
use crate::fleet::overrides::Changed;
use crate::fleet::{Answering, Changes, KnownNamespaces, Overrides, Settings, reflect};

/// `(apiVersion, kind)`.
type Kind = (String, String);

/// One copied object: its kind and where its Placement lives.
pub use fed_api::copies::CopyKey;

/// Objects reconciled at once: each waits on its members' answers and on federation writes,
/// spending little CPU, so passes in flight are what bound throughput (at 100 clusters,
/// sixteen kept new HPAs and PDBs queued for seconds behind a burst of applies).
const COPY_WORKERS: usize = 64;

/// Why one reconcile failed (it is retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A federation write failed.
    #[error("writing {what} in the federation")]
    Federation {
        /// What was written.
        what: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The kind is not discovered in the federation yet.
    #[error("{0}/{1} is not discovered in the federation yet")]
    NotDiscovered(String, String),
    /// The kind's objects are not listed from the federation yet.
    #[error("{0}/{1} is not listed from the federation yet")]
    NotListed(String, String),
    /// A federation write did not answer within the deadline.
    #[error("writing {0} in the federation timed out")]
    Timeout(&'static str),
    /// Some member did not take its step; the Placement says which and why.
    #[error("{0} member(s) not in sync")]
    Members(usize),
}

/// A kind as the federation serves it, with the cache of its objects.
pub(super) struct FedKind {
    pub(super) ar: ApiResource,
    pub(super) namespaced: bool,
    cache: Cache,
}

/// One member's view of one kind: the cache of Meridian's copies, or why there is none.
enum MemberKind {
    Served { ar: ApiResource, cache: Cache },
    NotServed(String),
}

/// One federated object being synced, as every member's step reads it.
struct Object<'a> {
    key: &'a CopyKey,
    kind: &'a Kind,
    fk: &'a FedKind,
    /// The federated object as cached (`None`: gone).
    fed: Option<&'a Value>,
    dest: &'a [fed_api::placement::TargetCluster],
    uid: &'a str,
    /// The override policies that select it, in the order they apply.
    selected: &'a [&'a fed_api::overrides::apply::Policy],
    /// Clusters where a workload referencing it runs: a copy there is not removed while
    /// the object lives ([`crate::dep_writers`]).
    demanded: &'a BTreeSet<String>,
    /// The object is being deleted: every copy goes, demanded or not.
    deleting: bool,
    /// Its kind's interpreter, if any: where a divided object's shares are written.
    interpreter: Option<&'a ResourceInterpreterSpec>,
}

/// What one member's step came to.
#[derive(Default)]
struct MemberResult {
    /// The entry on the Placement (none for a member that should hold nothing).
    outcome: Option<Outcome>,
    /// The member still holds a copy (or may: its step failed).
    held: bool,
    /// The step failed.
    failed: bool,
    /// The member's copy as cached, and whether it was current (nothing written).
    copy: Option<(Value, bool)>,
    /// The member was looked at and holds no copy after the step (its cache has none, or
    /// it does not serve the kind): later passes skip it while it is no destination.
    absent: bool,
}

/// One connected member.
struct Member {
    client: Client,
    kinds: Mutex<HashMap<Kind, Arc<MemberKind>>>,
    /// Held while a kind is looked up in the member: one lookup (and one watch) per kind,
    /// however many objects of it are synced at once.
    discovering: tokio::sync::Mutex<()>,
    /// Namespaces known to exist in the member: a create asks for its namespace only the
    /// first time.
    namespaces: KnownNamespaces,
    /// Whether the member answered this path's last step there.
    answering: Answering,
}

pub(super) struct Central {
    pub(super) fed: Client,
    pub(super) settings: Settings,
    placements: Store<Placement>,
    clusters: Store<Cluster>,
    /// How custom kinds' statuses combine.
    interpreters: Store<ResourceInterpreter>,
    overrides: Overrides,
    /// Kinds known so far; looked up on every reconcile, so behind a plain lock.
    kinds: Mutex<HashMap<Kind, Arc<FedKind>>>,
    /// One kind discovered at a time (each once).
    discovering: tokio::sync::Mutex<()>,
    /// Members connected so far; looked up for every member of every reconcile, so behind
    /// a plain lock: an async one held by sixteen workers in turn a hundred times each
    /// makes a convoy.
    members: Mutex<HashMap<String, Arc<Member>>>,
    /// Each member's turn to connect: one connection per member (each once), members side
    /// by side (a connection reads the member's token from the federation, and a hundred
    /// of those in a row held a new kind's first pass up for seconds).
    connecting: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Last result per object per member, for the Placement's status.
    outcomes: Mutex<HashMap<CopyKey, BTreeMap<String, Outcome>>>,
    /// Which members each object's pass looks at ([`Visits`]).
    visits: Visits,
    queue: Arc<WorkQueue<CopyKey>>,
    /// Which path writes a dependency object's member copies ([`crate::dep_writers`]).
    writers: Arc<DepWriters>,
    /// Each interpreted object's template dependencies as last told to `writers`: which
    /// objects to look at again when a dependency's override failures change.
    template_refs: Mutex<HashMap<CopyKey, BTreeSet<DepRef>>>,
    /// Each dependency object's override failures in its last sync, by cluster
    /// ([`override_failures`]): shown on the Placements of the interpreted objects
    /// referencing it.
    dep_failures: Mutex<HashMap<DepRef, BTreeMap<String, String>>>,
    /// The federated objects' statuses this controller wrote last ([`StatusWrites`]).
    pub(super) status_written: StatusWrites<CopyKey>,
    /// The same for their Placements' statuses.
    pub(super) placement_written: StatusWrites<CopyKey>,
}

/// The key of the object a Placement (in `namespace`, about `r`) of a copy-path kind is
/// about: a namespaced object's Placement is beside it.
fn key_of_placement(namespace: Option<String>, r: &WorkloadReference, namespaced: bool) -> CopyKey {
    CopyKey {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: namespace.filter(|_| namespaced),
        name: r.name.clone(),
    }
}

/// The key an interpreted object asks for its dependency objects under.
fn referrer(key: &CopyKey) -> String {
    format!(
        "{} {} {}/{}",
        key.api_version,
        key.kind,
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

fn split(api_version: &str) -> (&str, &str) {
    api_version.rsplit_once('/').unwrap_or(("", api_version))
}

async fn discover(
    client: &Client,
    kind: &Kind,
) -> Result<(ApiResource, ApiCapabilities), kube::Error> {
    let (group, version) = split(&kind.0);
    kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, &kind.1)).await
}

/// A dynamic reflector's cache, and whether its first list has arrived: until then it shows
/// nothing, so an object missing from it may well exist.
struct Cache {
    store: Store<PackedObject>,
    listed: Arc<AtomicBool>,
    _task: JoinHandle<()>,
}

impl Cache {
    fn listed(&self) -> bool {
        self.listed.load(Ordering::Acquire)
    }
}

/// A dynamic reflector of `ar` over `api` that calls `on_change` with every object an event
/// changed once its cache shows it ([`Changes`]; objects decoded in one pass, without their
/// managedFields: see [`crate::dynamic`]).
fn dynamic_reflector(
    api: Api<Decoded>,
    ar: &ApiResource,
    cfg: watcher::Config,
    mut on_change: impl FnMut(&PackedObject) + Send + 'static,
) -> Cache {
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let store = reader.clone();
    let listed = Arc::new(AtomicBool::new(false));
    let listed_now = listed.clone();
    let stream = watcher::watcher(api, cfg)
        .default_backoff()
        .map_ok(|ev| lean::map(ev, |o| PackedObject::of(o.0)))
        .reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut changes = Changes::default();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    changes.on(&ev, &reader, &mut on_change);
                    // After the list's objects are queued: a reconcile that finds the
                    // cache not listed is retried, so none is lost in between.
                    listed_now.store(changes.listed(), Ordering::Release);
                }
                Err(e) => {
                    tracing::debug!(error = %Report(&e), "copied-kind watch failed; retrying")
                }
            }
        }
    });
    Cache {
        store,
        listed,
        _task: task,
    }
}

/// The cache key of `key`'s object of kind `ar`: in its namespace only when the kind is
/// namespaced.
fn object_ref<K: kube::Resource<DynamicType = ApiResource>>(
    key: &CopyKey,
    ar: &ApiResource,
    namespaced: bool,
) -> ObjectRef<K> {
    let r = ObjectRef::new_with(&key.name, ar.clone());
    match &key.namespace {
        Some(ns) if namespaced => r.within(ns),
        _ => r,
    }
}

impl Central {
    /// The federation's view of `kind`, its watch started on first use.
    async fn fed_kind(self: &Arc<Self>, kind: &Kind) -> Result<Arc<FedKind>, CopyError> {
        if let Some(k) = lock(&self.kinds).get(kind) {
            return Ok(k.clone());
        }
        let _turn = self.discovering.lock().await;
        if let Some(k) = lock(&self.kinds).get(kind) {
            return Ok(k.clone());
        }
        let (ar, caps) = discover(&self.fed, kind)
            .await
            .map_err(|_| CopyError::NotDiscovered(kind.0.clone(), kind.1.clone()))?;
        let namespaced = caps.scope == Scope::Namespaced;
        let queue = self.queue.clone();
        let k = kind.clone();
        let cache = dynamic_reflector(
            Api::all_with(self.fed.clone(), &ar),
            &ar,
            watcher::Config::default(),
            move |o| {
                queue.add(CopyKey {
                    api_version: k.0.clone(),
                    kind: k.1.clone(),
                    namespace: o.namespace(),
                    name: o.name_any(),
                });
            },
        );
        let fk = Arc::new(FedKind {
            ar,
            namespaced,
            cache,
        });
        lock(&self.kinds).insert(kind.clone(), fk.clone());
        Ok(fk)
    }

    /// Member `cluster`'s turn to connect (or to be forgotten).
    fn connecting_turn(&self, cluster: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.connecting)
            .entry(cluster.to_owned())
            .or_default()
            .clone()
    }

    /// The connected member `cluster`, connecting on first use.
    async fn member(&self, cluster: &str) -> Result<Arc<Member>, String> {
        if let Some(m) = lock(&self.members).get(cluster) {
            return Ok(m.clone());
        }
        let turn = self.connecting_turn(cluster);
        let _turn = turn.lock().await;
        if let Some(m) = lock(&self.members).get(cluster) {
            return Ok(m.clone());
        }
        let c = self
            .clusters
            .get(&ObjectRef::new(cluster))
            .ok_or_else(|| format!("cluster {cluster} is not known"))?;
        let client = self
            .settings
            .clients
            .connect(&self.fed, &c.spec, self.settings.sync_timeout)
            .await
            .map_err(|e| format!("not connected: {}", Report(&e)))?;
        let m = Arc::new(Member {
            client,
            kinds: Mutex::default(),
            discovering: tokio::sync::Mutex::default(),
            namespaces: KnownNamespaces::default(),
            answering: Answering::default(),
        });
        lock(&self.members).insert(cluster.to_owned(), m.clone());
        Ok(m)
    }

    /// Member `m`'s view of `kind`, its watch of Meridian's copies started on first use; a
    /// kind the member does not serve is asked again on the next reconcile.
    async fn member_kind(&self, m: &Member, kind: &Kind) -> Arc<MemberKind> {
        let served = || {
            lock(&m.kinds)
                .get(kind)
                .filter(|k| matches!(***k, MemberKind::Served { .. }))
                .cloned()
        };
        if let Some(k) = served() {
            return k;
        }
        let _turn = m.discovering.lock().await;
        if let Some(k) = served() {
            return k;
        }
        let mk = match discover(&m.client, kind).await {
            Ok((ar, _)) => {
                let queue = self.queue.clone();
                let k = kind.clone();
                let cache = dynamic_reflector(
                    Api::all_with(m.client.clone(), &ar),
                    &ar,
                    watcher::Config::default()
                        .labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")),
                    move |o| {
                        queue.add(CopyKey {
                            api_version: k.0.clone(),
                            kind: k.1.clone(),
                            namespace: o.namespace(),
                            name: o.name_any(),
                        });
                    },
                );
                MemberKind::Served { ar, cache }
            }
            Err(e) => MemberKind::NotServed(format!(
                "{} {} is not served by the member: {}",
                kind.0,
                kind.1,
                Report(&e)
            )),
        };
        let mk = Arc::new(mk);
        lock(&m.kinds).insert(kind.clone(), mk.clone());
        mk
    }

    /// Re-queues every object an override policy's change may give another copy (all of
    /// them when changes were missed).
    fn requeue_for(&self, changed: Option<&Changed>) {
        let keys: Vec<CopyKey> = lock(&self.outcomes)
            .keys()
            .filter(|k| {
                changed
                    .is_none_or(|c| c.may_affect(&k.api_version, &k.kind, k.namespace.as_deref()))
            })
            .cloned()
            .collect();
        keys.into_iter().for_each(|k| self.queue.add(k));
    }

    /// How the statuses of `kind`'s copies combine: a built-in rule, else the first (by
    /// name) ResourceInterpreter for the kind, else none.
    fn status_rule(&self, kind: &Kind) -> Option<Rule> {
        if let Some(k) = StatusKind::of(&kind.0, &kind.1) {
            return Some(Rule::BuiltIn(k));
        }
        let all = self.interpreters.state();
        let names: Vec<String> = all.iter().map(|i| i.name_any()).collect();
        interpreter_for(
            names
                .iter()
                .map(String::as_str)
                .zip(all.iter().map(|i| &i.spec)),
            &kind.0,
            &kind.1,
        )
        .map(|spec| Rule::Interpreted(spec.clone()))
    }

    /// Records dependency `r`'s override failures (`failures`, by cluster); when they
    /// changed, re-queues the interpreted objects referencing it, whose Placements show them.
    fn set_dep_failures(&self, r: &DepRef, failures: BTreeMap<String, String>) {
        let changed = {
            let mut all = lock(&self.dep_failures);
            let before = if failures.is_empty() {
                all.remove(r)
            } else {
                all.insert(r.clone(), failures.clone())
            };
            before.unwrap_or_default() != failures
        };
        if changed {
            let referrers: Vec<CopyKey> = lock(&self.template_refs)
                .iter()
                .filter(|(_, refs)| refs.contains(r))
                .map(|(k, _)| k.clone())
                .collect();
            referrers.into_iter().for_each(|k| self.queue.add(k));
        }
    }

    /// Re-queues every copied object of `kind` (its interpreter changed).
    fn requeue_kind(&self, kind: &Kind) {
        let keys: Vec<CopyKey> = lock(&self.outcomes)
            .keys()
            .filter(|k| k.api_version == kind.0 && k.kind == kind.1)
            .cloned()
            .collect();
        keys.into_iter().for_each(|k| self.queue.add(k));
    }

    /// Forgets member `cluster` (its watches stop) and re-syncs every copy it may hold.
    async fn drop_member(&self, cluster: &str) {
        // After a connection in progress, which may be to the old address.
        let turn = self.connecting_turn(cluster);
        let _turn = turn.lock().await;
        lock(&self.members).remove(cluster);
        let keys: Vec<CopyKey> = lock(&self.outcomes).keys().cloned().collect();
        keys.into_iter().for_each(|k| self.queue.add(k));
    }

    /// One worker: takes keys off the queue and reconciles them, for good.
    async fn work(self: Arc<Self>) {
        loop {
            let (key, queued) = self.queue.next_timed().await;
            let waited = queued.elapsed();
            let started = Instant::now();
            let span = tracing::info_span!("copy", kind = %key.kind, namespace = ?key.namespace, name = %key.name);
            match self.reconcile(&key).instrument(span).await {
                Ok(result) => {
                    self.queue.forget(&key);
                    tracing::debug!(result, ?waited, elapsed = ?started.elapsed(), kind = %key.kind, name = %key.name, "copy reconciled");
                }
                Err(e) => {
                    let after = self.queue.retry(key.clone());
                    tracing::info!(error = %Report(&e), retry_in = ?after, kind = %key.kind, name = %key.name, "copy not in sync");
                }
            }
            self.queue.done(&key);
        }
    }

    async fn reconcile(self: &Arc<Self>, key: &CopyKey) -> Result<&'static str, CopyError> {
        let kind: Kind = (key.api_version.clone(), key.kind.clone());
        let fk = self.fed_kind(&kind).await?;
        // Until the kind's first list arrives its cache shows nothing, and acting then would
        // take every object for a deleted one. The list's end queues each listed object;
        // the retry covers the rest.
        if !fk.cache.listed() {
            return Err(CopyError::NotListed(kind.0, kind.1));
        }
        let (pns, pname) = placement_of(
            &key.api_version,
            &key.kind,
            key.namespace.as_deref(),
            &key.name,
        );
        let placement = self.placements.get(&ObjectRef::new(&pname).within(&pns));
        let fed_obj = fk.cache.store.get(&object_ref(key, &fk.ar, fk.namespaced));
        let fed_value = fed_obj.as_deref().map(PackedObject::to_value);
        let uid = fed_obj.as_ref().and_then(|o| o.uid()).unwrap_or_default();
        // The override policies that select the object, in the order they apply.
        let policies = self.overrides.snapshot();
        let labels = fed_value.as_ref().map(labels_of).unwrap_or_default();
        let subject = Subject {
            api_version: &key.api_version,
            kind: &key.kind,
            namespace: key.namespace.as_deref(),
            name: &key.name,
            labels: &labels,
        };
        let selected = selecting(&subject, &policies);
        // A Placement of an earlier object of the same name is not this one's.
        let dest = placement
            .as_ref()
            .filter(|p| p.spec.resource.uid.as_deref() == Some(uid.as_str()))
            .map(|p| p.spec.dest_clusters.clone())
            .unwrap_or_default();
        // One writer per member object: a dependency object with a copy Placement is this
        // path's, written also where the workloads referencing it run.
        let dep = DepRef::of_copy(
            &key.api_version,
            &key.kind,
            key.namespace.as_deref(),
            &key.name,
        );
        let (referenced, demanded) = dep
            .as_ref()
            .map(|r| (self.writers.referenced(r), self.writers.demanded(r)))
            .unwrap_or_default();
        if let Some(r) = &dep {
            self.writers.set_copied(r, !dest.is_empty());
        }
        let dest = copy_destinations(&dest, &referenced, &demanded);

        // The finalizer goes on before the first copy, so a deletion always waits for the
        // cleanup; the copies follow in the same pass.
        let mut has_finalizer = fed_obj
            .as_ref()
            .is_some_and(|o| o.finalizers().iter().any(|f| f == WORKLOAD_FINALIZER));
        // A dependency object nothing asks this path for, with no copies of this path left
        // (they go before the finalizer does): the workloads' own, if anyone's. Looking at
        // the members would take back copies the dependency path just wrote.
        if let Some(r) = dep.as_ref().filter(|_| dest.is_empty())
            && placement.is_none()
            && !has_finalizer
        {
            lock(&self.outcomes).remove(key);
            self.visits.forget(key);
            self.set_dep_failures(r, BTreeMap::new());
            return Ok("not copied");
        }
        if let Some(o) = &fed_obj
            && finalizer(
                has_finalizer,
                o.meta().deletion_timestamp.is_some(),
                !dest.is_empty(),
                false,
            ) == Finalizer::Add
        {
            self.set_finalizer(&fk, key, o, true).await?;
            has_finalizer = true;
        }

        let rule = self.status_rule(&kind);
        let interpreter = match &rule {
            Some(Rule::Interpreted(spec)) => Some(spec),
            _ => None,
        };
        // What its pod template references goes where it has copies, written by this path
        // ([`crate::dep_writers`]); told for every object, so one whose interpreter or
        // template stopped naming something lets go of it.
        if dep.is_none() {
            let TemplateDeps { refs, clusters } = template_deps(
                fed_value.as_ref(),
                key.namespace.as_deref().filter(|_| fk.namespaced),
                &dest,
                interpreter,
            );
            // Recorded before the dependencies' failures are read below: a dependency whose
            // failures change after this re-queues the object.
            {
                let mut all = lock(&self.template_refs);
                if refs.is_empty() {
                    all.remove(key);
                } else {
                    all.insert(key.clone(), refs.clone());
                }
            }
            self.writers.set_referenced(&referrer(key), refs, clusters);
        }
        // Every member that should hold a copy, and every one that may hold one.
        let plan = self.visits.plan(
            key,
            dest.iter().map(|t| t.cluster.clone()),
            self.clusters.state().iter().map(|c| c.name_any()).collect(),
        );
        // Every member's step at once: one slow or unreachable member does not hold up the
        // others, and the reconcile takes as long as its slowest member, not their sum.
        let object = Object {
            key,
            kind: &kind,
            fk: &fk,
            fed: fed_value.as_ref(),
            dest: &dest,
            uid: &uid,
            selected: &selected,
            demanded: &demanded,
            deleting: fed_obj
                .as_ref()
                .is_some_and(|o| o.meta().deletion_timestamp.is_some()),
            interpreter,
        };
        // Members whose cache answers alone take no step of their own: most of a new
        // object's first pass, which looks at every member.
        let quick: Vec<bool> = plan
            .clusters
            .iter()
            .map(|c| self.holds_nothing(&object, c))
            .collect();
        let stepped = futures::future::join_all(
            plan.clusters
                .iter()
                .zip(&quick)
                .filter(|(_, quick)| !**quick)
                .map(|(c, _)| self.sync_member(&object, c)),
        )
        .await;
        let mut stepped = stepped.into_iter();
        let results: Vec<MemberResult> = quick
            .iter()
            .map(|quick| {
                if *quick {
                    MemberResult {
                        absent: true,
                        ..MemberResult::default()
                    }
                } else {
                    // One result per member not answered above.
                    stepped.next().unwrap_or_default()
                }
            })
            .collect();
        self.visits
            .record(key, &plan, results.iter().map(|r| r.absent));
        let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
        // Each destination's copy as cached, and whether it was current (nothing written).
        let mut copies: BTreeMap<String, (Value, bool)> = BTreeMap::new();
        let mut held = false;
        let mut failed = 0usize;
        for (cluster, r) in plan.clusters.into_iter().zip(results) {
            held |= r.held;
            failed += usize::from(r.failed);
            if let Some(copy) = r.copy {
                copies.insert(cluster.clone(), copy);
            }
            if let Some(o) = r.outcome {
                outcomes.insert(cluster, o);
            }
        }
        lock(&self.outcomes).insert(key.clone(), outcomes.clone());
        if let Some(r) = &dep {
            self.set_dep_failures(r, override_failures(&outcomes));
        }

        if let Some(p) = placement
            .as_ref()
            .filter(|_| !dest.is_empty() || fed_obj.is_some())
        {
            // The dependencies its pod template references, held back where their override
            // failed, show on its entries as a built-in workload's do.
            let refs = lock(&self.template_refs)
                .get(key)
                .cloned()
                .unwrap_or_default();
            let of_deps = {
                let failures = lock(&self.dep_failures);
                per_cluster(&refs, |r| failures.get(r))
            };
            let shown = with_dep_failures(&outcomes, &dest, &of_deps);
            let mut entries = cluster_entries(&dest, &shown);
            for e in &mut entries {
                if let Some((copy, _)) = copies.get(&e.cluster) {
                    member_entry(rule.as_ref(), copy, e);
                }
            }
            self.write_status(key, p, entries, propagated(&dest, &shown))
                .await?;
        }
        if let (Some(rule), Some(fed)) = (&rule, &fed_value)
            && fed["metadata"]["deletionTimestamp"].is_null()
            && !dest.is_empty()
        {
            let members: Vec<MemberCopy> = dest
                .iter()
                .map(|t| match copies.get(&t.cluster) {
                    Some((o, current)) => MemberCopy {
                        object: Some(o),
                        current: *current,
                    },
                    None => MemberCopy {
                        object: None,
                        current: false,
                    },
                })
                .collect();
            if let Some(status) = combined(rule, fed, &members) {
                self.write_fed_status(&fk, key, fed, status).await?;
            }
        }
        if let Some(o) = &fed_obj {
            let deleting = o.meta().deletion_timestamp.is_some();
            match finalizer(has_finalizer, deleting, !dest.is_empty(), held) {
                Finalizer::Add => self.set_finalizer(&fk, key, o, true).await?,
                Finalizer::Remove => self.set_finalizer(&fk, key, o, false).await?,
                Finalizer::Leave => {}
            }
        } else {
            lock(&self.outcomes).remove(key);
            self.visits.forget(key);
            self.status_written.forget(key);
            self.placement_written.forget(key);
            lock(&self.template_refs).remove(key);
            if let Some(r) = &dep {
                self.set_dep_failures(r, BTreeMap::new());
            }
        }
        if failed > 0 {
            return Err(CopyError::Members(failed));
        }
        Ok(if dest.is_empty() {
            "unplaced"
        } else {
            "synced"
        })
    }

    /// Whether `cluster` should hold no copy of `o` and its cache shows none: connected,
    /// the kind served and listed there, no copy of that name. Its step would be to leave
    /// things as they are ([`Self::sync_member`] finds the same, at the cost of a task).
    fn holds_nothing(&self, o: &Object<'_>, cluster: &str) -> bool {
        // A destination may want a copy; a copy the dependency path writes there is
        // neither absent nor this path's.
        if o.dest.iter().any(|t| t.cluster == cluster)
            || (!o.deleting && o.demanded.contains(cluster))
        {
            return false;
        }
        let Some(m) = lock(&self.members).get(cluster).cloned() else {
            return false;
        };
        let Some(mk) = lock(&m.kinds).get(o.kind).cloned() else {
            return false;
        };
        let MemberKind::Served { ar, cache } = &*mk else {
            return false;
        };
        cache.listed()
            && cache
                .store
                .get(&object_ref(o.key, ar, o.fk.namespaced))
                .is_none()
    }

    /// Takes member `cluster`'s step for one object: what it should hold (its copy with
    /// the override policies applied), against what its cache shows.
    async fn sync_member(&self, o: &Object<'_>, cluster: &str) -> MemberResult {
        let key = o.key;
        let mut want = wanted(o.fed, o.dest, cluster, o.interpreter);
        if want.is_none() && !o.deleting && o.demanded.contains(cluster) {
            // The dependency path's copy (a workload there uses it): not this path's. A
            // deleted object's copies are this path's to remove wherever they are: left to
            // the dependency path, one whose workload goes at the same time would be
            // skipped by its collection as the copy path's, then orphaned.
            return MemberResult::default();
        }
        if let Some(w) = &want
            && !o.selected.is_empty()
            && let Some(c) = self.clusters.get(&ObjectRef::new(cluster))
        {
            match overridden(w, &key.kind, &MemberCluster::of(&c), o.selected, o.uid) {
                Ok(v) => want = Some(v),
                // Nothing is pushed there (nor removed) until the policy is fixed; its
                // change re-queues the object, so no retry is needed meanwhile.
                Err(e) => {
                    return MemberResult {
                        held: true,
                        outcome: Some(Outcome::Failed {
                            reason: FailReason::OverrideFailed,
                            message: e.to_string(),
                        }),
                        ..MemberResult::default()
                    };
                }
            }
        }
        // A member that cannot be asked fails only where it should hold a copy.
        let unable = |reason: FailReason, message: String| MemberResult {
            failed: want.is_some(),
            outcome: want
                .is_some()
                .then_some(Outcome::Failed { reason, message }),
            ..MemberResult::default()
        };
        let m = match self.member(cluster).await {
            Ok(m) => m,
            Err(message) => return unable(FailReason::Unreachable, message),
        };
        let mk = self.member_kind(&m, o.kind).await;
        let (ar, cache) = match &*mk {
            MemberKind::Served { ar, cache } => (ar, cache),
            MemberKind::NotServed(message) => {
                return MemberResult {
                    absent: true,
                    ..unable(FailReason::KindNotServed, message.clone())
                };
            }
        };
        let actual = cache
            .store
            .get(&object_ref(key, ar, o.fk.namespaced))
            .map(|o| o.to_value());
        let step = step(want.as_ref(), actual.as_ref(), o.uid);
        // Whether no copy is left there once the step is taken (as it then is unless it
        // fails): nothing was there and nothing is made, or Meridian's copy goes. Before the
        // member's first list arrives its cache shows no copy, whether there is one or not
        // (a member that forbids listing the kind never lists it): then a copy may be left.
        let none_left = match &step {
            Step::Leave => actual.is_none() && cache.listed(),
            Step::Delete => true,
            Step::Create(_) | Step::Update(_) | Step::Refuse => false,
        };
        let copy = match (&want, actual) {
            (Some(_), Some(a)) => Some((a, step == Step::Leave)),
            _ => None,
        };
        let asks = matches!(step, Step::Create(_) | Step::Update(_) | Step::Delete);
        // A step that asks the member is one of the process's member syncs; most passes
        // only find the cached copy current (or absent) and ask nothing.
        let _slot = if asks {
            self.settings.sync_slot(&m.answering).await
        } else {
            None
        };
        let applied = self.apply(&m, ar, key, o.fk.namespaced, step).await;
        if asks {
            m.answering
                .set(!matches!(applied, Err((FailReason::Unreachable, _))));
        }
        match applied {
            Ok(holds) => MemberResult {
                held: holds,
                outcome: want.is_some().then(|| Outcome::Synced { at: now() }),
                copy,
                absent: none_left && !holds,
                failed: false,
            },
            Err((reason, message)) => MemberResult {
                held: true,
                failed: true,
                outcome: Some(Outcome::Failed { reason, message }),
                copy,
                absent: false,
            },
        }
    }

    /// Takes one member's step on `key`'s object of kind `ar`; says whether the member still
    /// holds a copy, or why the step failed.
    async fn apply(
        &self,
        m: &Member,
        ar: &ApiResource,
        key: &CopyKey,
        namespaced: bool,
        step: Step,
    ) -> Result<bool, (FailReason, String)> {
        let timeout = self.settings.sync_timeout;
        // Made only for a step that asks the member: most steps leave things as they are.
        let api = || -> Api<DynamicObject> {
            match &key.namespace {
                Some(ns) if namespaced => Api::namespaced_with(m.client.clone(), ns, ar),
                _ => Api::all_with(m.client.clone(), ar),
            }
        };
        match step {
            Step::Leave => Ok(false),
            Step::Refuse => Err((
                FailReason::Conflict,
                format!(
                    "{} {} exists in the member and is not Meridian's",
                    key.kind, key.name
                ),
            )),
            Step::Delete => {
                match tokio::time::timeout(
                    timeout,
                    api().delete(&key.name, &DeleteParams::background()),
                )
                .await
                {
                    Ok(Ok(_)) => Ok(false),
                    Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(false),
                    Ok(Err(e)) => Err(classify(e)),
                    Err(_) => Err((
                        FailReason::Unreachable,
                        format!("timed out after {timeout:?}"),
                    )),
                }
            }
            Step::Create(v) => {
                if namespaced && let Some(ns) = &key.namespace {
                    m.namespaces
                        .ensure(ns, || async {
                            let made = crate::member_sync::member_namespace(ns);
                            timed(timeout, namespace::ensure(&m.client, &made))
                                .await
                                .map(drop)
                        })
                        .await?;
                }
                let obj: DynamicObject =
                    serde_json::from_value(v).map_err(|e| (FailReason::Rejected, e.to_string()))?;
                timed(timeout, api().create(&PostParams::default(), &obj))
                    .await
                    .map(|_| true)
            }
            Step::Update(v) => {
                let obj: DynamicObject =
                    serde_json::from_value(v).map_err(|e| (FailReason::Rejected, e.to_string()))?;
                timed(
                    timeout,
                    api().replace(&key.name, &PostParams::default(), &obj),
                )
                .await
                .map(|_| true)
            }
        }
    }
}

pub(super) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Runs the copy controller until its federation watches end.
pub async fn run(
    fed: Client,
    settings: Settings,
    overrides: Overrides,
    writers: Arc<DepWriters>,
) -> Result<(), CopyError> {
    let mut backoff = std::time::Duration::from_millis(200);
    loop {
        match label_earlier_placements(&fed).await {
            Ok(0) => break,
            Ok(labelled) => {
                tracing::info!(
                    labelled,
                    "labelled copied objects' Placements written before the copy label"
                );
                break;
            }
            Err(e) => {
                tracing::warn!(error = %Report(&e), retry_in = ?backoff, "labelling earlier Placements failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(30));
            }
        }
    }
    let all = watcher::Config::default;
    // Only copied objects' Placements: the divided workloads' are the workload controller's.
    let copies_only = watcher::Config::default().labels(&format!(
        "{}={}",
        fed_api::copies::COPY_PLACEMENT_LABEL,
        fed_api::copies::COPY_PLACEMENT_VALUE
    ));
    let (placements, mut placement_events) =
        reflect(Api::<Lean<Placement>>::all(fed.clone()), copies_only);
    let (clusters, mut cluster_events) = reflect(Api::<Lean<Cluster>>::all(fed.clone()), all());
    let (interpreters, mut interpreter_events) =
        reflect(Api::<Lean<ResourceInterpreter>>::all(fed.clone()), all());
    let queue = Arc::new(WorkQueue::new(
        settings.queue(),
        meridian_runtime::queue::QueueMetrics::default(),
    ));
    let central = Arc::new(Central {
        fed,
        settings,
        placements,
        clusters,
        interpreters,
        overrides: overrides.clone(),
        kinds: Mutex::default(),
        discovering: tokio::sync::Mutex::default(),
        members: Mutex::default(),
        connecting: Mutex::default(),
        outcomes: Mutex::default(),
        visits: Visits::default(),
        queue: queue.clone(),
        writers: writers.clone(),
        template_refs: Mutex::default(),
        dep_failures: Mutex::default(),
        status_written: StatusWrites::default(),
        placement_written: StatusWrites::default(),
    });
    // Workloads asking for a dependency object this path owns in other clusters, or an
    // interpreted object's references that came or went.
    let q = queue.clone();
    writers.on_demand_change(move |r| {
        q.add(CopyKey {
            api_version: "v1".into(),
            kind: r.kind.as_str().into(),
            namespace: Some(r.namespace.clone()),
            name: r.name.clone(),
        });
    });
    let mut specs: HashMap<String, String> = HashMap::new();
    // Each cluster's labels, which override rules may target (its region and zone are in
    // its spec).
    let mut labels: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    let mut override_changes = overrides.subscribe();
    let mut placement_changes = Changes::default();
    // Copies are pushed as the policies make them: never before they are listed.
    overrides.ready().await;
    let workers = {
        let c = central.clone();
        tokio::spawn(async move {
            // A divided custom object synced before its kind's interpreter is known would
            // be pushed with the whole count. Waited for once, here: a kube store's
            // readiness wakes only the last task that waited, so workers waiting each on
            // their own would leave all but one asleep.
            // The Placements and clusters too: a Placement not listed yet would read as
            // none, and its object's copies as ones to remove.
            if c.interpreters.wait_until_ready().await.is_err()
                || c.placements.wait_until_ready().await.is_err()
                || c.clusters.wait_until_ready().await.is_err()
            {
                return;
            }
            // Reconciles wait on member and federation requests far more than they compute.
            let mut workers = tokio::task::JoinSet::new();
            for _ in 0..COPY_WORKERS {
                workers.spawn(c.clone().work());
            }
            while workers.join_next().await.is_some() {}
        })
    };
    let _workers = AbortOnDropHandle::new(workers);
    loop {
        tokio::select! {
            ev = placement_events.next() => match ev {
                Some(Ok(ev)) => {
                    let mut changed = Vec::new();
                    placement_changes.on(&ev, &central.placements, |p| {
                        let r = &p.spec.resource;
                        if path(&r.api_version, &r.kind) == Path::Copy {
                            changed.push((p.namespace(), r.clone()));
                        }
                    });
                    for (namespace, r) in changed {
                        // Whether the object is cluster-scoped says where its key points.
                        match central.fed_kind(&(r.api_version.clone(), r.kind.clone())).await {
                            Ok(k) => queue.add(key_of_placement(namespace, &r, k.namespaced)),
                            Err(e) => tracing::warn!(error = %Report(&e), "placement of an undiscovered kind"),
                        }
                    }
                }
                Some(Err(_)) => {}
                None => return Ok(()),
            },
            ev = interpreter_events.next() => match ev {
                Some(Ok(Event::Apply(i) | Event::Delete(i) | Event::InitApply(i))) => {
                    let t = &i.spec.target;
                    central.requeue_kind(&(t.api_version.clone(), t.kind.clone()));
                }
                Some(_) => {}
                None => return Ok(()),
            },
            changed = override_changes.recv() => match changed {
                Ok(c) => central.requeue_for(Some(&c)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => central.requeue_for(None),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            },
            ev = cluster_events.next() => match ev {
                // A cluster gone or re-pointed (endpoint, CA, credentials) drops its
                // connection and caches; its copies are re-synced over a new one.
                Some(Ok(Event::Delete(c))) => {
                    specs.remove(&c.name_any());
                    labels.remove(&c.name_any());
                    central.drop_member(&c.name_any()).await;
                }
                Some(Ok(Event::Apply(c) | Event::InitApply(c))) => {
                    let spec = serde_json::to_string(&c.spec).unwrap_or_default();
                    let relabelled = labels
                        .insert(c.name_any(), c.labels().clone())
                        .is_some_and(|old| &old != c.labels());
                    if specs.insert(c.name_any(), spec.clone()).is_some_and(|old| old != spec) {
                        central.drop_member(&c.name_any()).await;
                    } else if relabelled && !central.overrides.snapshot().is_empty() {
                        // Relabelled: rules targeting labels may apply there now, or no more.
                        central.requeue_for(None);
                    }
                }
                Some(_) => {}
                None => return Ok(()),
            },
        }
    }
}

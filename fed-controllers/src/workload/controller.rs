//! The workload controller's federation side: watches workloads, Placements, ConfigMaps,
//! Secrets and Clusters; keeps one member task per Cluster; and for each workload key
//! (level-triggered, deduplicating queue) decides every member's intent, manages the
//! finalizer and writes the aggregated status. Each member's copy is the one the override
//! policies make for it ([`super::wants`]); a policy's change re-queues the workloads of
//! the kinds it selects or selected (what each event queues: `inputs`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use fed_api::governance::Subject;
use fed_api::names::WORKLOAD_FINALIZER;
use fed_api::overrides::apply::{MemberCluster, OverrideError, labels_of, selecting};
use fed_api::{Cluster, Placement};
use futures::TryStreamExt;
use futures::stream::{BoxStream, StreamExt};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use meridian_runtime::answer;
use meridian_runtime::error::Report;
use meridian_runtime::events::Recorder;
use meridian_runtime::lean::Lean;
use meridian_runtime::queue::{Backoff, WorkQueue};
use meridian_runtime::sync::lock;
use serde_json::{Value, json};
use tracing::Instrument;

use super::copy_index::CopyIndex;
use super::dep_wants::DepWants;
use super::events::{self, Batcher};
use super::finalize::finalizer_write_pending;
use super::inputs::Input;
use super::kinds::{DepKind, Kind, WorkloadKey};
use super::member::Dependency;
use super::member::{Intent, Look, MemberShared, Want};
use super::objects::ObjectCache;
use super::pacing::Pacer;
use super::placements::{self, PlacementCache, PlacementView};
use super::plan::{self, MemberPlan};
use super::status_spacing::{StatusSpacing, Waits};
use super::wants::Wants;
use super::{Settings, deps, desired, hpa, status};
use crate::compact::Compact;
use crate::dep_writers::{DepRef, DepWriters, Writer};
use crate::dynamic::{self, Decoded};
use crate::fleet::{self, FedError, Fleet, Overrides, reflect};
use crate::metrics::WorkloadMetrics;

/// First retry delay after a write conflict.
const CONFLICT_RETRY_BASE: std::time::Duration = std::time::Duration::from_millis(20);

/// The federation caches.
#[derive(Clone)]
pub(super) struct Caches {
    pub(super) workloads: HashMap<Kind, ObjectCache>,
    pub(super) deps: HashMap<DepKind, Store<DynamicObject>>,
    pub(super) placements: PlacementCache,
    pub(super) clusters: Store<Cluster>,
}

pub(super) struct Central {
    pub(super) fed: Client,
    pub(super) settings: Arc<Settings>,
    pub(super) caches: Caches,
    pub(super) queue: Arc<WorkQueue<WorkloadKey>>,
    pub(super) members: Fleet<MemberShared>,
    /// The override policies (one watch per process).
    pub(super) overrides: Overrides,
    /// Which path writes a dependency object's member copies ([`crate::dep_writers`]).
    pub(super) writers: Arc<DepWriters>,
    pub(super) metrics: Arc<WorkloadMetrics>,
    /// Members' outcomes, gathered into one Event per change.
    pub(super) events: Arc<Batcher>,
    /// This controller's own Events.
    pub(super) recorder: Recorder,
    /// Each cluster's Ready status as last seen, to tell a readiness change (every workload
    /// is looked at again) from a routine status update (nothing to do).
    pub(super) cluster_ready: Mutex<HashMap<String, Option<String>>>,
    /// What of each cluster override rules target (labels, region, zone) as last seen: a
    /// change re-applies the overrides at once.
    pub(super) cluster_targets: Mutex<HashMap<String, u64>>,
    /// Each cluster's connection settings as last seen (a digest of its spec): member tasks
    /// are matched to the Clusters again only when these change, not on every status
    /// update, which with a thousand members is most Cluster events.
    pub(super) cluster_specs: Mutex<HashMap<String, u64>>,
    /// What of each workload and Placement was last seen that changes what members should
    /// hold ([`wanted_workload`], [`wanted_placement`]): an event that changes it is urgent, one that only changes status
    /// (often our own write coming back) waits behind urgent work.
    pub(super) wanted_seen: Mutex<HashMap<(bool, WorkloadKey), u64>>,
    /// Set once every workload has been reconciled after start-up.
    pub(super) initial_pass_done: std::sync::atomic::AtomicBool,
    /// The resourceVersion each finalizer write was pinned to, until the watch shows the
    /// finalizer: a cached workload still at that version is our write not back yet, not a
    /// workload without the finalizer (patching it again would only be refused with 409).
    pub(super) finalizer_writes: Mutex<HashMap<WorkloadKey, String>>,
    /// When each Placement's status was last written, so entries that only moved on wait.
    pub(super) placement_pacer: Pacer<WorkloadKey>,
    /// How long each workload's member reports gather before a look (see [`StatusSpacing`]).
    pub(super) status_spacing: Arc<StatusSpacing>,
    /// Workloads whose first pass found no Placement yet, and since when: each waits one
    /// status delay for it before writing a status of its own, however many passes come
    /// meanwhile (every edit of the workload brings one).
    pub(super) awaiting_placement: Waits,
    /// Workloads whose copies no destination's controller has acted on yet, and since
    /// when: a status write then would tell nothing the first real report does not replace
    /// at once, so it waits for that report, for at most [`Settings::status_hold`].
    pub(super) awaiting_observation: Waits,
    /// Workloads scaled since the scheduler's last decision, and since when: their status
    /// waits for the new decision (see
    /// [`super::placements::PlacementView::decided_for`]), for at most
    /// [`Settings::status_hold`].
    pub(super) awaiting_decision: Waits,
    /// Which members may hold each workload's copy (kept by the members' watches).
    pub(super) copy_index: Arc<CopyIndex>,
}

/// The body of a Placement status write, encoded straight from the entries: with a thousand
/// destinations a JSON tree built in between would cost more than the encoding.
#[derive(Debug, serde::Serialize)]
struct PlacementStatusPatch<'a> {
    status: PlacementStatusPart<'a>,
}

#[derive(Debug, serde::Serialize)]
struct PlacementStatusPart<'a> {
    clusters: &'a [fed_api::placement::ClusterWorkloadStatus],
    conditions: Vec<Value>,
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

impl Central {
    fn members(&self) -> Vec<Arc<MemberShared>> {
        self.members.shared()
    }

    /// A member's status entry. A cluster the cluster controller reports not Ready counts no
    /// ready or available replicas: its last known pods cannot be vouched for (as a node
    /// that stops reporting has its pods marked not ready).
    fn entry(
        &self,
        cluster: &str,
        report: &status::MemberReport,
    ) -> fed_api::placement::ClusterWorkloadStatus {
        let mut e = status::cluster_status(cluster, report);
        let not_ready = self
            .caches
            .clusters
            .get(&ObjectRef::new(cluster))
            .and_then(|c| {
                let s = c.status.as_ref()?;
                let ready = s.conditions.iter().find(|c| c.type_ == "Ready")?;
                (ready.status != "True").then(|| ready.reason.clone())
            });
        if let Some(reason) = not_ready {
            if e.error.is_empty() {
                e.error = format!(
                    "cluster {cluster} is not Ready ({reason}); last known ready replicas {}",
                    e.ready_replicas
                );
            }
            e.ready_replicas = 0;
            e.available_replicas = 0;
        }
        e
    }

    pub(super) async fn timed<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, FedError> {
        fleet::timed(self.settings.fleet.sync_timeout, op, f).await
    }

    /// The dependency copies a member writes: those the copy path owns (they have a copy
    /// Placement) are left to it and still count as in use ([`crate::dep_writers`]).
    fn leave_copied(&self, namespace: &str, deps: Vec<Dependency>) -> Vec<Dependency> {
        deps.into_iter()
            .map(|mut d| {
                if self.writers.writer(&dep_ref(d.kind, namespace, &d.name)) == Writer::Copies {
                    d.object = None;
                }
                d
            })
            .collect()
    }

    /// Converges one workload; `Ok(true)` when it wrote a status (Placement or workload).
    async fn reconcile(&self, key: &WorkloadKey) -> Result<bool, FedError> {
        let obj = self.caches.workloads[&key.kind].get(&key.namespace, &key.name);
        let Some(obj) = obj else {
            lock(&self.finalizer_writes).remove(key);
            self.awaiting_placement.clear(key);
            self.awaiting_observation.clear(key);
            self.awaiting_decision.clear(key);
            self.placement_pacer.forget(key);
            self.status_spacing.forget(key);
            // Gone (cleaned behind the finalizer, or orphaned): nothing left to do in members,
            // and it asks for no dependency any more.
            self.writers
                .set_demand(&key.to_string(), BTreeSet::new(), BTreeSet::new());
            for m in &self.members() {
                m.forget(key);
            }
            return Ok(false);
        };
        let mut fed = obj.value();
        let uid = desired::uid_of(&fed).unwrap_or_default().to_string();
        let fins = finalizers(&fed);
        let ours = fins.iter().any(|f| f == WORKLOAD_FINALIZER);
        if fed
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
        {
            return self
                .finalize(key, &fed, &uid, &fins, &self.members())
                .await
                .map(|()| false);
        }
        let cached_rv = fed["metadata"]["resourceVersion"]
            .as_str()
            .map(String::from);
        let pending = finalizer_write_pending(
            lock(&self.finalizer_writes).get(key).map(String::as_str),
            cached_rv.as_deref(),
        );
        if ours {
            lock(&self.finalizer_writes).remove(key);
        } else if !pending {
            let mut list = fins.clone();
            list.push(WORKLOAD_FINALIZER.to_string());
            // Carry on with the object as written rather than wait for the watch to bring it:
            // the patch was pinned to the version read, so that is it with the finalizer.
            let written = self.set_finalizers(key, &fed, list.clone()).await?;
            fed["metadata"]["finalizers"] = json!(list);
            fed["metadata"]["resourceVersion"] = json!(written.resource_version());
            if let Some(rv) = cached_rv {
                lock(&self.finalizer_writes).insert(key.clone(), rv);
            }
        }
        let placement = self
            .caches
            .placements
            .get(&key.namespace, &key.placement_name());
        let dest: Vec<(String, i32)> = placement
            .as_ref()
            .map(|p| p.dest.clone())
            .unwrap_or_default();
        self.status_spacing.set_destinations(key, dest.len());
        // Each destination's share: its replicas and, for a Job, its completions.
        let shares: HashMap<&str, desired::Share> = dest
            .iter()
            .map(|(c, _)| c.as_str())
            .zip(desired::shares(key.kind, &fed, &dest))
            .collect();
        let share_of = |c: &str| shares.get(c).copied().unwrap_or_default();
        // Not scheduled yet. The scheduler gives every workload a Placement, normally within
        // milliseconds, and the pass that causes writes the first status with the members'
        // reports in it. A status written now (nothing placed, nothing reported) would be
        // replaced at once: wait for the Placement for one status delay, once.
        if placement.is_none() {
            let delay = self.status_spacing.delay(key);
            if let Some(left) = self.awaiting_placement.left(key, delay, Instant::now()) {
                self.queue.add_low_after(key.clone(), left);
                return Ok(false);
            }
        } else {
            self.awaiting_placement.clear(key);
        }

        // The dependencies as cached; their copies are built only if an intent is.
        let mut dep_objects = Vec::new();
        let mut missing = Vec::new();
        let mut refs: BTreeSet<DepRef> = BTreeSet::new();
        for (kind, name) in deps::of_pod_template(&fed["spec"]["template"]).refs {
            refs.insert(dep_ref(kind, &key.namespace, &name));
            match self.caches.deps[&kind].get(&dyn_ref(&kind.api_resource(), &key.namespace, &name))
            {
                Some(d) => dep_objects.push((kind, name, d)),
                None => missing.push(format!("{} {name}", kind.as_str())),
            }
        }
        // What every Present intent of this pass is built from: the workload's spec,
        // labels and annotations (its cache entry's shape), its uid and each dependency's
        // version. A member whose intent came from the same inputs keeps it unbuilt.
        let source = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (obj.shape, &uid).hash(&mut h);
            for (kind, name, d) in &dep_objects {
                (kind.as_str(), name, &d.metadata.resource_version).hash(&mut h);
                (self.writers.writer(&dep_ref(*kind, &key.namespace, name)) == Writer::Copies)
                    .hash(&mut h);
            }
            h.finish()
        };
        // Each destination's dependency copies: what the override policies change there.
        let policies = self.overrides.snapshot();
        let mut dep_wants = DepWants::new(dep_objects, &key.namespace, &policies);

        let dest_names: HashSet<&str> = dest.iter().map(|(c, _)| c.as_str()).collect();
        // The members that may hold a copy or should (not the whole fleet: see
        // `copy_index`), each by name, with its copy looked up once.
        let members: Vec<Arc<MemberShared>> = self
            .copy_index
            .candidates(key, dest_names.iter().copied())
            .iter()
            .filter_map(|c| self.members.get(c))
            .collect();
        let looks: HashMap<&str, (&Arc<MemberShared>, Look)> = members
            .iter()
            .map(|m| (m.name.as_str(), (m, m.look(key, &uid))))
            .collect();
        // Members holding a copy, and those outside the destinations that might (unknown
        // until their watches list).
        let holding: BTreeSet<String> = looks
            .iter()
            .filter(|(name, (_, look))| look.holds.unwrap_or(!dest_names.contains(*name)))
            .map(|(name, _)| name.to_string())
            .collect();
        // Where its dependencies are asked for: where it runs or still may.
        let running: BTreeSet<String> = dest_names
            .iter()
            .map(|c| c.to_string())
            .chain(holding.iter().cloned())
            .collect();
        self.writers.set_demand(&key.to_string(), refs, running);
        // Each destination's copy: its share, then what the override policies change there.
        let labels = labels_of(&fed);
        let subject = Subject {
            api_version: key.kind.api_version(),
            kind: key.kind.as_str(),
            namespace: Some(key.namespace.as_str()),
            name: &key.name,
            labels: &labels,
        };
        let mut wants = Wants::new(&fed, key.kind, &uid, selecting(&subject, &policies));
        let any_policy = wants.any_policy() || dep_wants.any_policy();
        let cluster_of = |c: &str| {
            if any_policy {
                self.caches.clusters.get(&ObjectRef::new(c))
            } else {
                None
            }
        };
        // Destinations whose copy an override cannot make: nothing is pushed there (what
        // they hold stays as it is) and their entry says why.
        let override_failures: HashMap<&str, OverrideError> = dest
            .iter()
            .filter_map(|(c, _)| {
                let cluster = cluster_of(c);
                let member = cluster.as_deref().map(MemberCluster::of);
                wants.variant(member.as_ref())?;
                let e = wants
                    .get(member.as_ref(), share_of(c))
                    .as_ref()
                    .err()?
                    .clone();
                Some((c.as_str(), e))
            })
            .collect();
        // Destinations where some dependency's copy cannot be made: that dependency is held
        // back there (the workload is still pushed) and the entry says why.
        let mut dep_failures: HashMap<&str, Vec<String>> = HashMap::new();
        if dep_wants.any_policy() {
            for (c, _) in &dest {
                let cluster = cluster_of(c);
                let member = cluster.as_deref().map(MemberCluster::of);
                let f = dep_wants.failures(member.as_ref())?;
                if !f.is_empty() {
                    dep_failures.insert(c.as_str(), f);
                }
            }
        }
        // Whether every destination is still on its first sync. Read before the reports: a
        // sync that ends in between then shows in them, never in neither.
        let first_syncs_pending = !dest.is_empty()
            && dest.iter().all(|(c, _)| {
                looks
                    .get(c.as_str())
                    .is_some_and(|(m, _)| m.first_sync_pending(key))
            });
        let reports: HashMap<&str, status::MemberReport> = dest_names
            .iter()
            .copied()
            .chain(holding.iter().map(String::as_str))
            .filter_map(|c| {
                let (m, look) = looks.get(c)?;
                Some((c, m.report(key, look.entry.as_deref())))
            })
            .collect();
        // Whether each destination has observed the spec it should hold. The wanted copy is
        // built (once per share: with many destinations most shares are equal), and the
        // member's copy parsed, only once its member's controller has caught up with that
        // copy; the member's copy is compared once per change of either
        // ([`super::objects::Entry::in_sync_with`]).
        let observed: Vec<bool> = dest
            .iter()
            .map(|(c, _)| {
                let Some((m, look)) = looks.get(c.as_str()) else {
                    return false;
                };
                look.entry.as_ref().is_some_and(|entry| {
                    if !entry.status.caught_up() {
                        return false;
                    }
                    let cluster = cluster_of(c);
                    let member = cluster.as_deref().map(MemberCluster::of);
                    let (member, share) = (member.as_ref(), share_of(c));
                    // The wanted copy is built only when the memo does not answer.
                    let in_sync =
                        entry.in_sync_with(wants.source(source, member, share), |actual| {
                            wants
                                .get(member, share)
                                .as_ref()
                                .is_ok_and(|want| super::drift::in_sync(actual, want))
                        });
                    // The replicas an HPA there writes are the member's; asked only when the
                    // copy differs.
                    in_sync
                        || (m.scaled_by_hpa(key)
                            && wants.get(member, share).as_ref().is_ok_and(|want| {
                                let actual = entry.value();
                                let want = hpa::with_member_replicas(want, &actual);
                                status::observed(&entry.status, || actual, &want)
                            }))
                })
            })
            .collect();
        // The status entries: every destination's (in `dest` order), then those of members
        // outside the destinations that still hold a copy.
        let mut entries: Vec<_> = dest
            .iter()
            .map(|(c, _)| match reports.get(c.as_str()) {
                Some(report) => self.entry(c, report),
                None => self.entry(
                    c,
                    &status::MemberReport {
                        error: format!("cluster {c} is not joined"),
                        ..Default::default()
                    },
                ),
            })
            .collect();
        for c in holding.iter().filter(|c| !dest_names.contains(c.as_str())) {
            if let Some(report) = reports.get(c.as_str()) {
                entries.push(self.entry(c, report));
            }
        }
        for e in entries.iter_mut().take(dest.len()) {
            let own = override_failures
                .get(e.cluster.as_str())
                .map(|e| e.to_string());
            let of_deps = dep_failures.get(e.cluster.as_str()).into_iter().flatten();
            let failures: Vec<String> = own.into_iter().chain(of_deps.cloned()).collect();
            if !failures.is_empty() {
                e.error = format!("OverrideFailed: {}", failures.join("; "));
            }
        }
        let dest_ready = dest
            .iter()
            .zip(&observed)
            .zip(&entries)
            .all(|(((c, r), seen), e)| {
                let copy = reports.get(c.as_str()).and_then(|r| r.copy);
                *seen && (e.available_replicas >= *r || status::completed(copy))
            });
        let plans = plan::plan(&dest, &holding, dest_ready);
        // A copy being removed has its pods terminating: like a ReplicaSet's terminating
        // pods they count no more (its entry stays, at zero, until the copy is gone). This
        // is what lets a rollout finish while a failed member that lost its share is still
        // unreachable, and keeps its old pods out of READY when it returns. Only members
        // outside the destinations (their entries follow the destinations') can be removed.
        let mut removing = HashSet::new();
        for e in &mut entries[dest.len()..] {
            if plans.get(&e.cluster) == Some(&MemberPlan::Remove) {
                status::count_nothing(e);
                removing.insert(e.cluster.clone());
            }
        }
        // Whether a member got a new intent: it reports back once it has acted on it, and
        // the status is written then rather than now as well.
        let mut handed_out = false;
        // Members holding equal shares (and no copy of their own) share one copy of the
        // wanted object.
        let mut built: HashMap<(Option<String>, desired::Share), Compact> = HashMap::new();
        for (cluster, p) in plans {
            let Some((m, _)) = looks.get(cluster.as_str()) else {
                continue;
            };
            match p {
                MemberPlan::Hold(_) if override_failures.contains_key(cluster.as_str()) => {}
                MemberPlan::Hold(r) => {
                    let c = cluster_of(&cluster);
                    let member = c.as_deref().map(MemberCluster::of);
                    let variant = wants.variant(member.as_ref());
                    let share = share_of(&cluster);
                    let mut src = wants.source(source, member.as_ref(), share);
                    if dep_wants.any_policy() {
                        use std::hash::{Hash, Hasher};
                        let mut h = std::collections::hash_map::DefaultHasher::new();
                        (src, dep_wants.source(member.as_ref())).hash(&mut h);
                        src = h.finish();
                    }
                    if m.has_intent_from(key, src) {
                        continue;
                    }
                    let workload = match built.entry((variant, share)) {
                        std::collections::hash_map::Entry::Occupied(e) => e.get().clone(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            match wants.get(member.as_ref(), share) {
                                Ok(v) => e.insert(Compact::new(v)).clone(),
                                // Failures were found above, for every destination.
                                Err(_) => continue,
                            }
                        }
                    };
                    let intent = Intent {
                        uid: uid.clone(),
                        want: Want::Present {
                            deps: self
                                .leave_copied(&key.namespace, dep_wants.get(member.as_ref())?),
                            workload,
                            replicas: r,
                        },
                    };
                    handed_out |= m.set_intent(key, intent, Some(src));
                }
                MemberPlan::Remove => {
                    let intent = Intent {
                        uid: uid.clone(),
                        want: Want::Absent,
                    };
                    handed_out |= m.set_intent(key, intent, None);
                }
                MemberPlan::Wait => {}
            }
        }
        if handed_out {
            return Ok(false);
        }
        // Nothing to tell yet: every destination is still on its first sync of this
        // workload and none has reported a thing. Each reports when done and the status is
        // written then; writing empty entries now would cost every new workload two writes
        // (its status and its Placement's) that the first report replaces at once.
        if first_syncs_pending && entries.iter().all(status::nothing_reported) {
            return Ok(false);
        }

        let all_observed = !dest.is_empty() && observed.iter().all(|o| *o);
        let conflict = reports.values().any(|r| r.conflict);
        // Copies pushed, none acted on yet by its member's controller, and nothing wrong:
        // the status would only say so, and the first observed report (moments away)
        // replaces it. That one is written instead: a new workload's status and its
        // Placement's are then written once each, not twice, and a scale's once.
        let nothing_observed = !dest.is_empty() && !observed.iter().any(|o| *o);
        let news = conflict
            || !override_failures.is_empty()
            || !dep_failures.is_empty()
            || !missing.is_empty()
            || entries.iter().any(|e| !e.error.is_empty());
        // Scaled moments ago, and the scheduler has not answered yet: the members still hold
        // the old shares, so every copy looks observed and the status would claim the new
        // generation done with the old counts, to be rewritten once the shares move. The
        // scheduler's answer brings a pass; the status waits for it (a scale then costs one
        // workload status write, not two), for at most the hold.
        let count = fed
            .pointer(&format!("/spec/{}", key.kind.count_field()))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if placement.as_ref().is_none_or(|p| p.decided_for(count)) {
            self.awaiting_decision.clear(key);
        } else if !news
            && let Some(left) =
                self.awaiting_decision
                    .left(key, self.settings.status_hold, Instant::now())
        {
            self.queue.add_low_after(key.clone(), left);
            return Ok(false);
        }
        if nothing_observed && !news {
            let left =
                self.awaiting_observation
                    .left(key, self.settings.status_hold, Instant::now());
            if let Some(left) = left {
                self.queue.add_low_after(key.clone(), left);
                return Ok(false);
            }
        } else {
            self.awaiting_observation.clear(key);
        }
        // Kubernetes writes condition times with second precision.
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let placement_write = async {
            match &placement {
                Some(p) => {
                    self.write_placement_status(
                        key,
                        p,
                        &entries,
                        conflict,
                        !override_failures.is_empty() || !dep_failures.is_empty(),
                        all_observed,
                        &missing,
                        &now,
                    )
                    .await
                }
                None => Ok(false),
            }
        };
        // The copies behind the entries; one being removed counts no more (as above).
        let copies: Vec<Option<&status::CopyStatus>> = entries
            .iter()
            .map(|e| {
                let report = reports.get(e.cluster.as_str())?;
                (!removing.contains(&e.cluster))
                    .then_some(report.copy)
                    .flatten()
            })
            .collect();
        let st = status::federated(
            key.kind,
            &fed,
            &status::Reports {
                entries: &entries,
                copies: &copies,
                destinations: dest.len(),
                all_observed,
            },
            &now,
        );
        let workload_write = async {
            if super::drift::contains(&fed["status"], &st) {
                return Ok(false);
            }
            let api = answer::api(
                self.fed.clone(),
                Some(&key.namespace),
                &key.kind.api_resource(),
            );
            self.timed(
                &format!("status of {key}"),
                api.patch_status(
                    &key.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": st})),
                ),
            )
            .await
            .map(|_| true)
        };
        // The two status writes are independent: sent side by side, a status pass costs one
        // round trip to the federation, not two.
        let (placement_wrote, workload_wrote) = futures::join!(placement_write, workload_write);
        Ok(placement_wrote? | workload_wrote?)
    }

    /// Writes the Placement's status if it changed; `Ok(true)` when it wrote. `conflict`:
    /// a member reports a name conflict; `override_failed`: some destination's copy could
    /// not be made.
    #[allow(clippy::too_many_arguments)]
    async fn write_placement_status(
        &self,
        key: &WorkloadKey,
        p: &PlacementView,
        entries: &[fed_api::placement::ClusterWorkloadStatus],
        conflict: bool,
        override_failed: bool,
        all_observed: bool,
        missing: &[String],
        now: &str,
    ) -> Result<bool, FedError> {
        let (st, reason, mut message) =
            status::propagated(entries, conflict, override_failed, all_observed);
        if !missing.is_empty() {
            message = format!(
                "{message}{}missing in the federation: {}",
                if message.is_empty() { "" } else { "; " },
                missing.join(", ")
            );
        }
        let digest = placements::entries_digest(entries);
        let mut conditions: Vec<_> = p.propagated.iter().cloned().collect();
        crate::member_sync::set_propagated(&mut conditions, st, reason, &message, now);
        let condition_changed = conditions.first() != p.propagated.as_ref();
        if p.clusters_digest == digest && !condition_changed {
            return Ok(false);
        }
        let now_instant = Instant::now();
        // Entries that only moved wait for the pacer, but not at the end of a rollout: they
        // go with the federated status that ends `kubectl rollout status`, so what a user
        // looks at next (`fedctl status`) agrees with it.
        let settled = all_observed && status::settled(entries);
        if !condition_changed
            && !settled
            && let Some(wait) = self.placement_pacer.wait(key, now_instant)
        {
            // Only counts moved: they are written when the interval is up (the pass then
            // reads the latest reports), together with whatever else arrives meanwhile.
            self.queue.add_low_after(key.clone(), wait);
            return Ok(false);
        }
        // Our part of the status only: the entries (replaced whole) and the Propagated
        // condition. A strategic merge patch merges conditions by type, so the scheduler's
        // condition and `unschedulable` stay as they are, whichever version either writer
        // last saw: the write needs no resourceVersion pin and cannot conflict.
        let patch = PlacementStatusPatch {
            status: PlacementStatusPart {
                clusters: entries,
                conditions: conditions.iter().map(|c| c.patch_entry()).collect(),
            },
        };
        let api = answer::api(
            self.fed.clone(),
            Some(&key.namespace),
            &ApiResource::erase::<Placement>(&()),
        );
        self.timed(
            &format!("status of placement {}", key.placement_name()),
            api.patch_status(
                &key.placement_name(),
                &PatchParams::default(),
                &Patch::Strategic(patch),
            ),
        )
        .await?;
        tracing::debug!(%key, reason, condition_changed, settled, "placement status written");
        self.placement_pacer.wrote(key, now_instant);
        Ok(true)
    }

    /// One worker: reconciles keys until the task stops (several run side by side; the queue
    /// never hands one key to two of them).
    async fn work(self: Arc<Self>) {
        loop {
            let (key, queued) = self.queue.next_timed().await;
            let span = tracing::info_span!("workload", %key);
            match self.reconcile(&key).instrument(span).await {
                Ok(wrote) => {
                    self.metrics.reconcile("ok");
                    if wrote {
                        self.metrics.status_lag(queued.elapsed().as_secs_f64());
                    }
                    self.queue.forget(&key);
                }
                Err(error) => {
                    self.metrics.reconcile("error");
                    // A conflict means our cached copy was older than the stored one;
                    // the watch brings the newer one within milliseconds, so the retry
                    // need not wait as long as after a failure.
                    let base = if error.is_conflict() {
                        tracing::debug!(%key, error = %Report(&error), "reconcile hit a newer version; retrying");
                        CONFLICT_RETRY_BASE
                    } else {
                        tracing::warn!(%key, error = %Report(&error), "reconcile failed; retrying");
                        self.settings.fleet.backoff_base
                    };
                    self.queue.retry_with(
                        key.clone(),
                        Backoff::jittered(base, self.settings.fleet.backoff_max),
                    );
                }
            }
            self.queue.done(&key);
            if self.queue.is_idle() && !self.initial_pass_done.swap(true, Ordering::AcqRel) {
                for m in self.members() {
                    m.enable_gc();
                }
            }
        }
    }
}

fn reflect_dynamic(
    fed: &Client,
    ar: &kube::api::ApiResource,
) -> (
    Store<DynamicObject>,
    BoxStream<'static, Result<Event<DynamicObject>, watcher::Error>>,
) {
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    // Decoded in one pass, without managedFields (see `dynamic`).
    let api: Api<Decoded> = Api::all_with(fed.clone(), ar);
    let s = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .map_ok(dynamic::into_dynamic)
        .reflect(writer)
        .boxed();
    (reader, s)
}

/// A cache key of a namespaced dynamic object.
pub(super) fn dyn_ref(
    ar: &kube::api::ApiResource,
    namespace: &str,
    name: &str,
) -> ObjectRef<DynamicObject> {
    ObjectRef::new_with(name, ar.clone()).within(namespace)
}

/// Runs the workload controller until its federation watches end (they retry with
/// backoff, so in practice until the task is dropped).
pub async fn run(
    fed: Client,
    settings: Settings,
    metrics: Arc<WorkloadMetrics>,
    recorder: Recorder,
    overrides: Overrides,
    writers: Arc<DepWriters>,
) -> Result<(), FedError> {
    let mut streams: Vec<BoxStream<'static, Input>> = Vec::new();
    let mut workloads = HashMap::new();
    for kind in Kind::ALL {
        let cache = ObjectCache::new(&kind.api_resource().kind, true);
        let writer = cache.clone();
        // Decoded in one pass, without managedFields (see `dynamic`).
        let api: Api<Decoded> = Api::all_with(fed.clone(), &kind.api_resource());
        let s = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .map(|ev| ev.map(dynamic::into_dynamic))
            .inspect(move |e| {
                if let Ok(e) = e {
                    writer.apply(e);
                }
            });
        workloads.insert(kind, cache);
        streams.push(s.map(move |e| Input::Workload(kind, Box::new(e))).boxed());
    }
    let mut dep_stores = HashMap::new();
    for kind in DepKind::ALL {
        let (store, s) = reflect_dynamic(&fed, &kind.api_resource());
        dep_stores.insert(kind, store);
        streams.push(s.map(move |e| Input::Dep(kind, Box::new(e))).boxed());
    }
    let placements = placements::cache();
    let s = placements.watch(Api::<Lean<Placement>>::all(fed.clone()));
    streams.push(s.map(|e| Input::Placement(Box::new(e))).boxed());
    let (clusters, s) = reflect(
        Api::<Lean<Cluster>>::all(fed.clone()),
        watcher::Config::default(),
    );
    let cluster_store = clusters.clone();
    streams.push(s.map(|e| Input::Cluster(Box::new(e))).boxed());
    streams.push(overrides.changes().map(Input::Overrides).boxed());

    let recorder = recorder.for_component(events::COMPONENT);
    let events = Batcher::start(recorder.clone(), settings.event_window);
    let queue = WorkQueue::new(settings.fleet.central_queue(), metrics.queue.clone());
    let placement_pacer = Pacer::new(settings.placement_status_interval);
    let status_spacing = Arc::new(StatusSpacing::new(settings.status_delay));
    let central = Arc::new(Central {
        fed,
        events,
        recorder,
        settings: Arc::new(settings),
        caches: Caches {
            workloads,
            deps: dep_stores,
            placements,
            clusters,
        },
        queue: Arc::new(queue),
        members: Fleet::default(),
        overrides,
        writers: writers.clone(),
        metrics,
        cluster_ready: Mutex::default(),
        cluster_targets: Mutex::default(),
        cluster_specs: Mutex::default(),
        wanted_seen: Mutex::default(),
        initial_pass_done: std::sync::atomic::AtomicBool::new(false),
        finalizer_writes: Mutex::default(),
        placement_pacer,
        status_spacing,
        awaiting_placement: Waits::default(),
        awaiting_observation: Waits::default(),
        awaiting_decision: Waits::default(),
        copy_index: Arc::default(),
    });
    // A dependency object that gained or lost its copy Placement changes what the
    // workloads referencing it write. One handed over to this path may have no user left
    // (its last workload went while the copy path still owned it): the members look.
    let weak = Arc::downgrade(&central);
    writers.on_copied_change(move |r| {
        if let Some(c) = weak.upgrade() {
            c.requeue_referencing(r.kind, &r.namespace, &r.name);
            if c.writers.writer(r) == Writer::Dependencies {
                c.members().iter().for_each(|m| m.collect_soon(r.kind));
            }
        }
    });
    let worker = {
        let c = central.clone();
        tokio::spawn(async move {
            // Decisions read the caches: wait for every initial list first.
            for s in c.caches.workloads.values() {
                s.ready().wait().await;
            }
            for s in c.caches.deps.values() {
                if s.wait_until_ready().await.is_err() {
                    return;
                }
            }
            c.caches.placements.ready().wait().await;
            c.overrides.ready().await;
            if cluster_store.wait_until_ready().await.is_err() {
                return;
            }
            let workers = (0..c.settings.workers.max(1))
                .map(|_| c.clone().work())
                .collect::<Vec<_>>();
            futures::future::join_all(workers).await;
        })
    };
    let _worker = AbortOnDropHandle::new(worker);
    // Queue depths are sampled: a gauge update per push would cost more than it tells.
    let sampler = {
        let c = central.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let members: usize = c.members().iter().map(|m| m.queue_len()).sum();
                c.metrics.set_queue_depth(c.queue.len(), members);
            }
        })
    };
    let _sampler = AbortOnDropHandle::new(sampler);
    // Level-triggered in the end: every workload is looked at again now and then, whatever
    // its events said.
    let resync = {
        let c = central.clone();
        tokio::spawn(async move {
            let period = c.settings.resync_period;
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                tick.tick().await;
                for k in c.all_keys() {
                    c.queue.add_low(k);
                }
            }
        })
    };
    let _resync = AbortOnDropHandle::new(resync);
    let mut inputs = futures::stream::select_all(streams);
    while let Some(input) = inputs.next().await {
        central.on_input(input);
    }
    Err(FedError::WatchEnded)
}

/// The dependency object `kind` `namespace/name`.
fn dep_ref(kind: DepKind, namespace: &str, name: &str) -> DepRef {
    DepRef {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

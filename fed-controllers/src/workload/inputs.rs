//! The workload controller's inputs: what each federation event (a workload, a
//! dependency object, a Placement, a Cluster, an override policy) means for the queue and
//! the member tasks, told apart from the reconcile ([`super::controller`]) that acts on the
//! keys queued.

use std::sync::atomic::Ordering;

use fed_api::{Cluster, Placement};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::{self, Event};
use meridian_runtime::error::Report;
use meridian_runtime::sync::lock;

use super::controller::{Central, dyn_ref};
use super::kinds::{DepKind, Kind, WorkloadKey};
use super::member;
use crate::cluster::controller::{fingerprint, token_digest};
use crate::fleet::overrides::Changed;

/// One event of the federation watches the controller reads.
pub(super) enum Input {
    Workload(Kind, Box<Result<Event<DynamicObject>, watcher::Error>>),
    Dep(DepKind, Box<Result<Event<DynamicObject>, watcher::Error>>),
    Placement(Box<Result<Event<Placement>, watcher::Error>>),
    Cluster(Box<Result<Event<Cluster>, watcher::Error>>),
    /// An override policy changed (`None`: changes were missed).
    Overrides(Option<Changed>),
}

/// A digest of what in a workload decides the members' intents: its generation (which the
/// API server bumps on every spec change), deletion, finalizers, labels and annotations.
/// Cheap on purpose: every federation event goes through it on one task.
fn wanted_workload(o: &DynamicObject) -> u64 {
    use std::hash::{Hash, Hasher};
    let m = &o.metadata;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    m.generation.hash(&mut h);
    m.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    m.finalizers.hash(&mut h);
    m.labels.hash(&mut h);
    m.annotations.hash(&mut h);
    h.finish()
}

/// A digest of a Placement's spec (its destinations), the part that decides intents.
fn wanted_placement(p: &Placement) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.spec.resource.uid.hash(&mut h);
    for t in &p.spec.dest_clusters {
        t.cluster.hash(&mut h);
        t.replicas.hash(&mut h);
    }
    h.finish()
}

/// A digest of what override rules target in a Cluster: its labels, region and zone.
fn targeted(c: &Cluster) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (c.labels(), &c.spec.region, &c.spec.zone).hash(&mut h);
    h.finish()
}

/// The status of a Cluster's Ready condition, if it has one.
fn ready_status(c: &Cluster) -> Option<String> {
    let s = c.status.as_ref()?;
    s.conditions
        .iter()
        .find(|x| x.type_ == "Ready")
        .map(|x| x.status.clone())
}

impl Central {
    pub(super) fn requeue_all(&self) {
        for k in self.all_keys() {
            self.queue.add(k);
        }
    }

    pub(super) fn all_keys(&self) -> Vec<WorkloadKey> {
        let mut keys = Vec::new();
        for (kind, store) in &self.caches.workloads {
            for o in store.state() {
                keys.push(WorkloadKey::new(*kind, o.namespace.clone(), o.name.clone()));
            }
        }
        keys
    }

    /// Starts, restarts or stops member tasks to match the Clusters and their credentials;
    /// says whether any member changed.
    pub(super) fn sync_members(&self) -> bool {
        let secrets = &self.caches.deps[&DepKind::Secret];
        let gc = self.initial_pass_done.load(Ordering::Acquire);
        self.members.sync(
            "workload",
            self.caches.clusters.state(),
            |r| {
                let s = secrets.get(&dyn_ref(
                    &DepKind::Secret.api_resource(),
                    &r.namespace,
                    &r.name,
                ))?;
                let typed: k8s_openapi::api::core::v1::Secret = serde_json::to_value(&*s)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())?;
                Some(token_digest(&typed))
            },
            |c, fp| {
                let ctx = member::Context {
                    fed: self.fed.clone(),
                    settings: self.settings.clone(),
                    central: self.queue.clone(),
                    status_spacing: self.status_spacing.clone(),
                    metrics: self.metrics.clone(),
                    events: self.events.clone(),
                    writers: self.writers.clone(),
                    copy_index: self.copy_index.clone(),
                };
                member::spawn(ctx, c, fp, gc)
            },
        )
    }

    /// Queues `key` if what it wants changed since last seen. Other changes are status
    /// writes, nearly all this controller's own coming back; members' reports and the
    /// periodic resync bring what they could have changed.
    fn push_changed(&self, placement: bool, key: WorkloadKey, digest: Option<u64>) {
        let mut seen = lock(&self.wanted_seen);
        let slot = (placement, key.clone());
        let changed = match digest {
            Some(d) => seen.insert(slot, d) != Some(d),
            None => {
                seen.remove(&slot);
                true
            }
        };
        drop(seen);
        if changed {
            self.queue.add(key);
        }
    }

    /// Takes in one federation event: queues the workloads it may concern.
    pub(super) fn on_input(&self, input: Input) {
        match input {
            Input::Overrides(changed) => {
                for (kind, store) in &self.caches.workloads {
                    for o in store.state() {
                        let ns = Some(o.namespace.as_str());
                        // A policy on a ConfigMap or Secret the pod template uses changes
                        // the dependency copies that go with the workload.
                        let affected = changed.as_ref().is_none_or(|c| {
                            c.may_affect(kind.api_version(), kind.as_str(), ns)
                                || o.deps
                                    .refs
                                    .iter()
                                    .any(|(k, _)| c.may_affect("v1", k.as_str(), ns))
                        });
                        if affected {
                            self.queue.add(WorkloadKey::new(
                                *kind,
                                o.namespace.clone(),
                                o.name.clone(),
                            ));
                        }
                    }
                }
            }
            Input::Workload(kind, ev) => match *ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    let key =
                        WorkloadKey::new(kind, o.namespace().unwrap_or_default(), o.name_any());
                    // The watch moved past a finalizer write: it is shown or overtaken.
                    let mut pinned = lock(&self.finalizer_writes);
                    if pinned
                        .get(&key)
                        .is_some_and(|rv| o.metadata.resource_version.as_ref() != Some(rv))
                    {
                        pinned.remove(&key);
                    }
                    drop(pinned);
                    self.push_changed(false, key, Some(wanted_workload(&o)));
                }
                Ok(Event::Delete(o)) => {
                    let key =
                        WorkloadKey::new(kind, o.namespace().unwrap_or_default(), o.name_any());
                    self.push_changed(false, key, None);
                }
                _ => {}
            },
            Input::Dep(kind, ev) => match *ev {
                Ok(Event::Apply(o) | Event::Delete(o) | Event::InitApply(o)) => {
                    let ns = o.namespace().unwrap_or_default();
                    self.requeue_referencing(kind, &ns, &o.name_any());
                    if kind == DepKind::Secret && self.sync_members() {
                        self.requeue_all();
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %Report(&error), "federation watch failed; retrying")
                }
            },
            Input::Placement(ev) => {
                let (p, deleted) = match *ev {
                    Ok(Event::Apply(p) | Event::InitApply(p)) => (p, false),
                    Ok(Event::Delete(p)) => (p, true),
                    _ => return,
                };
                if let Some(k) =
                    WorkloadKey::of_placement(&p.namespace().unwrap_or_default(), &p.spec.resource)
                {
                    let digest = (!deleted).then(|| wanted_placement(&p));
                    self.push_changed(true, k, digest);
                }
            }
            Input::Cluster(ev) => match *ev {
                Ok(Event::Apply(c)) => {
                    let ready = ready_status(&c);
                    let name = c.name_any();
                    let was = lock(&self.cluster_ready).insert(name.clone(), ready.clone());
                    let back = ready.as_deref() == Some("True")
                        && was.as_ref().is_some_and(|w| w.as_deref() != Some("True"));
                    let t = targeted(&c);
                    let retargeted = lock(&self.cluster_targets)
                        .insert(name.clone(), t)
                        .is_some_and(|old| old != t);
                    // Another label, region or zone may change which override rules apply
                    // there (only worth a pass while some policy exists).
                    let overrides_move = retargeted && !self.overrides.snapshot().is_empty();
                    let spec = fingerprint(&c.spec, None);
                    let reconnect = lock(&self.cluster_specs)
                        .insert(name.clone(), spec)
                        .is_none_or(|old| old != spec);
                    // Capacity and probe times change all the time: only membership,
                    // readiness and what override rules target change what workloads need.
                    if (reconnect && self.sync_members()) || was != Some(ready) || overrides_move {
                        self.requeue_all();
                    }
                    // Reachable again: what failed there (removing a copy it lost after a
                    // failover, say) is retried now rather than when its backoff ends.
                    if back && let Some(m) = self.members.get(&name) {
                        m.retry_now();
                    }
                }
                Ok(Event::InitApply(c)) => {
                    let ready = ready_status(&c);
                    lock(&self.cluster_ready).insert(c.name_any(), ready);
                    lock(&self.cluster_targets).insert(c.name_any(), targeted(&c));
                    lock(&self.cluster_specs).insert(c.name_any(), fingerprint(&c.spec, None));
                }
                Ok(Event::Delete(c)) => {
                    lock(&self.cluster_ready).remove(&c.name_any());
                    lock(&self.cluster_targets).remove(&c.name_any());
                    lock(&self.cluster_specs).remove(&c.name_any());
                    self.sync_members();
                    self.requeue_all();
                }
                Ok(Event::InitDone) => {
                    self.sync_members();
                    self.requeue_all();
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(error = %Report(&error), "federation Cluster watch failed; retrying")
                }
            },
        }
    }

    /// Queues the workloads whose pod templates reference `kind` `ns/name`.
    pub(super) fn requeue_referencing(&self, kind: DepKind, ns: &str, name: &str) {
        for (wk, store) in &self.caches.workloads {
            for w in store.referencing(kind, ns, name) {
                self.queue.add(WorkloadKey::new(*wk, ns, w));
            }
        }
    }
}

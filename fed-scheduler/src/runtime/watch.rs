//! Reflectors over the federation API and the handlers that digest their events into the
//! index and queue the workloads each change concerns.
//!
//! Every watch lists, then watches, and re-lists after errors with kube's default backoff;
//! a re-list reports objects that vanished meanwhile by their absence, which the
//! handlers turn into deletions (level-triggered: no event is load-bearing).
//!
//! Only Placements are kept whole (the reconciler reads and rewrites them); the other
//! kinds are digested into the index as they arrive and not stored, so 10,000 Deployments
//! cost their digest, not 10,000 typed objects.

use std::collections::HashSet;
use std::sync::Arc;

use fed_api::Placement;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Client, Resource, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::queue::WorkQueue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch as signal;

use crate::offline::{FEDERATION_STATUS_CONFIGMAP, MASS_FAILURE_KEY, SYSTEM_NAMESPACE};
use crate::types::Workload;

use super::desired;
use super::index::{Index, Requeue, WorkloadEntry};
use super::key::{WorkloadKey, WorkloadKind};
use super::metrics::Metrics;
use super::reconcile::Reconciler;

/// Why an object from the API could not be digested (logged; the object is skipped).
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    /// Its JSON does not fit the scheduler's view of the kind.
    #[error("{kind} {name}")]
    Shape {
        /// Kind.
        kind: &'static str,
        /// Name.
        name: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// What the handlers share.
#[derive(Clone)]
pub struct Ctx {
    /// Digested state.
    pub index: Arc<Index>,
    /// Work queue.
    pub queue: Arc<WorkQueue<WorkloadKey>>,
    /// To drop remembered writes when a Placement is deleted.
    pub reconciler: Arc<Reconciler>,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

impl Ctx {
    fn enqueue(&self, r: Requeue) {
        match r {
            Requeue::Nothing => {}
            Requeue::All { first } => {
                for k in first {
                    self.queue.add(k);
                }
                self.enqueue_all();
            }
            Requeue::Keys(keys) => keys.into_iter().for_each(|k| {
                self.queue.add(k);
            }),
        }
    }

    /// Queues every known workload.
    pub fn enqueue_all(&self) {
        for k in self.index.keys() {
            self.queue.add(k);
        }
    }
}

/// Converts between two serde views of the same JSON (API types → core types).
fn convert<A: Serialize, B: DeserializeOwned>(
    kind: &'static str,
    name: &str,
    a: &A,
) -> Result<B, DigestError> {
    serde_json::to_value(a)
        .and_then(serde_json::from_value)
        .map_err(|source| DigestError::Shape {
            kind,
            name: name.to_owned(),
            source,
        })
}

/// Whether a watch has completed its first list: the loop decides only once every kind
/// it digests was seen whole.
#[derive(Debug, Clone)]
pub struct Synced(Arc<signal::Sender<bool>>);

impl Default for Synced {
    fn default() -> Self {
        Self(Arc::new(signal::Sender::new(false)))
    }
}

impl Synced {
    fn mark(&self) {
        self.0
            .send_if_modified(|synced| !std::mem::replace(synced, true));
    }

    /// Whether the first list completed.
    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits for the first complete list.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|synced| *synced).await;
    }
}

/// Drives one watch, handing each event to `handle` and marking `synced` after the first
/// complete list, until the task is dropped.
async fn drive<K>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    kind: &'static str,
    metrics: Arc<Metrics>,
    synced: Synced,
    mut handle: impl FnMut(Event<K>),
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                let listed = matches!(ev, Event::InitDone);
                handle(ev);
                if listed {
                    synced.mark();
                }
            }
            Err(error) => {
                metrics.watch_error(kind);
                tracing::warn!(kind, error = %Report(&error), "watch error; retrying with backoff");
            }
        }
    }
}

/// A watch of `api` whose objects are handed on, not stored.
fn digest<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config).default_backoff()
}

/// Watches one workload kind (Deployments or ReplicaSets).
pub async fn workloads<K>(client: Client, synced: Synced, kind: WorkloadKind, ctx: Ctx)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let stream = digest(Api::<K>::all(client), watcher::Config::default());
    let mut seen: HashSet<WorkloadKey> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(stream, kind.as_str(), metrics, synced, move |ev| {
        let key_of =
            |o: &K| WorkloadKey::new(kind, o.namespace().unwrap_or_default(), o.name_any());
        let apply = |o: &K| {
            let key = key_of(o);
            let workload = serde_json::to_value(o)
                .map_err(|e| e.to_string())
                .and_then(|v| Workload::from_object(&v).map_err(|e| e.to_string()));
            if let Err(problem) = &workload {
                tracing::warn!(workload = %key, %problem, "cannot read workload");
            }
            let entry = WorkloadEntry {
                uid: o.uid().unwrap_or_default(),
                workload,
            };
            if ctx.index.apply_workload(key.clone(), entry) {
                ctx.queue.add(key.clone());
            }
            key
        };
        match ev {
            Event::Init => seen.clear(),
            Event::InitApply(o) => {
                seen.insert(apply(&o));
            }
            Event::InitDone => {
                for k in ctx.index.keys() {
                    if k.kind == kind && !seen.contains(&k) {
                        ctx.index.delete_workload(&k);
                        ctx.queue.add(k);
                    }
                }
                seen.clear();
            }
            Event::Apply(o) => {
                apply(&o);
            }
            Event::Delete(o) => {
                let key = key_of(&o);
                ctx.index.delete_workload(&key);
                ctx.queue.add(key);
            }
        }
    })
    .await;
}

/// Watches Clusters.
pub async fn clusters(client: Client, synced: Synced, ctx: Ctx) {
    let stream = digest::<fed_api::Cluster>(Api::all(client), watcher::Config::default());
    let mut seen: HashSet<String> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(stream, "Cluster", metrics, synced, move |ev| {
        let apply = |o: &fed_api::Cluster| {
            let name = o.name_any();
            match convert::<_, crate::Cluster>("Cluster", &name, o) {
                Ok(c) => ctx.enqueue(ctx.index.apply_cluster(&name, Some(c))),
                Err(error) => tracing::warn!(error = %Report(&error), "cannot read cluster"),
            }
            name
        };
        match ev {
            Event::Init => seen.clear(),
            Event::InitApply(o) => {
                seen.insert(apply(&o));
            }
            Event::InitDone => {
                for name in ctx.index.cluster_names() {
                    if !seen.contains(&name) {
                        ctx.enqueue(ctx.index.apply_cluster(&name, None));
                    }
                }
                seen.clear();
            }
            Event::Apply(o) => {
                apply(&o);
            }
            Event::Delete(o) => ctx.enqueue(ctx.index.apply_cluster(&o.name_any(), None)),
        }
    })
    .await;
}

/// Watches PropagationPolicies.
pub async fn policies(client: Client, synced: Synced, ctx: Ctx) {
    let stream = digest::<fed_api::PropagationPolicy>(Api::all(client), watcher::Config::default());
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(stream, "PropagationPolicy", metrics, synced, move |ev| {
        let id = |o: &fed_api::PropagationPolicy| (o.namespace().unwrap_or_default(), o.name_any());
        let apply = |o: &fed_api::PropagationPolicy| {
            let (ns, name) = id(o);
            match convert::<_, crate::PropagationPolicy>("PropagationPolicy", &name, o) {
                Ok(p) => {
                    for k in ctx.index.apply_policy(&ns, &name, Some(p)) {
                        ctx.queue.add(k);
                    }
                }
                Err(error) => tracing::warn!(error = %Report(&error), "cannot read policy"),
            }
            (ns, name)
        };
        let delete = |ns: &str, name: &str| {
            for k in ctx.index.apply_policy(ns, name, None) {
                ctx.queue.add(k);
            }
        };
        match ev {
            Event::Init => seen.clear(),
            Event::InitApply(o) => {
                seen.insert(apply(&o));
            }
            Event::InitDone => {
                for (ns, name) in ctx.index.policy_ids() {
                    if !seen.contains(&(ns.clone(), name.clone())) {
                        delete(&ns, &name);
                    }
                }
                seen.clear();
            }
            Event::Apply(o) => {
                apply(&o);
            }
            Event::Delete(o) => {
                let (ns, name) = id(&o);
                delete(&ns, &name);
            }
        }
    })
    .await;
}

fn placement_key(p: &Placement) -> Option<WorkloadKey> {
    let kind = WorkloadKind::parse(&p.spec.resource.kind)?;
    Some(WorkloadKey::new(
        kind,
        p.namespace().unwrap_or_default(),
        p.spec.resource.name.clone(),
    ))
}

/// Watches Placements: the cache the reconciler reads, and a trigger to restore a
/// Placement someone else changed or deleted.
pub async fn placements(client: Client, writer: Writer<Placement>, synced: Synced, ctx: Ctx) {
    let stream = reflector(
        writer,
        watcher::watcher(Api::all(client), watcher::Config::default())
            .default_backoff()
            .modify(desired::slim),
    );
    let metrics = ctx.metrics.clone();
    drive(stream, "Placement", metrics, synced, move |ev| match ev {
        Event::Apply(p) | Event::InitApply(p) => {
            if let Some(key) = placement_key(&p) {
                ctx.reconciler.settle(&key);
                let dest = desired::targets(&p.spec.dest_clusters);
                if ctx.index.observe_placement(&key, Some(dest)) {
                    ctx.queue.add(key);
                }
            }
        }
        Event::Delete(p) => {
            if let Some(key) = placement_key(&p) {
                ctx.reconciler.forget_written(&key);
                if ctx.index.observe_placement(&key, None) {
                    ctx.queue.add(key);
                }
            }
        }
        Event::Init | Event::InitDone => {}
    })
    .await;
}

/// Watches the `meridian-system/federation-status` ConfigMap for the mass-failure flag.
pub async fn federation_status(client: Client, synced: Synced, ctx: Ctx) {
    let config =
        watcher::Config::default().fields(&format!("metadata.name={FEDERATION_STATUS_CONFIGMAP}"));
    let stream = digest::<ConfigMap>(Api::namespaced(client, SYSTEM_NAMESPACE), config);
    let mut seen = false;
    let metrics = ctx.metrics.clone();
    drive(stream, "ConfigMap", metrics, synced, move |ev| {
        let set = |on: bool| {
            if ctx.index.set_mass_failure(on) {
                tracing::info!(mass_failure = on, "mass-failure guard changed");
                ctx.enqueue_all();
            }
        };
        let flag = |c: &ConfigMap| {
            c.data
                .as_ref()
                .and_then(|d| d.get(MASS_FAILURE_KEY))
                .is_some_and(|v| v == "true")
        };
        match ev {
            Event::Init => seen = false,
            Event::InitApply(c) | Event::Apply(c) => {
                seen = true;
                set(flag(&c));
            }
            Event::InitDone if !seen => set(false),
            Event::InitDone => {}
            Event::Delete(_) => set(false),
        }
    })
    .await;
}

/// Watches both workload kinds (helper for callers that do not care which is which).
pub async fn all_workloads(client: Client, deployments: Synced, replicasets: Synced, ctx: Ctx) {
    tokio::join!(
        workloads::<Deployment>(
            client.clone(),
            deployments,
            WorkloadKind::Deployment,
            ctx.clone()
        ),
        workloads::<ReplicaSet>(client, replicasets, WorkloadKind::ReplicaSet, ctx),
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn events(
        list: Vec<Event<ConfigMap>>,
    ) -> impl Stream<Item = Result<Event<ConfigMap>, watcher::Error>> {
        futures::stream::iter(list.into_iter().map(Ok))
    }

    #[tokio::test]
    async fn a_kind_is_synced_only_after_its_first_complete_list_was_handled() {
        let synced = Synced::default();
        let metrics = Arc::new(Metrics::new());
        let partial = vec![Event::Init, Event::InitApply(ConfigMap::default())];
        drive(
            events(partial),
            "ConfigMap",
            metrics.clone(),
            synced.clone(),
            |_| {},
        )
        .await;
        assert!(!synced.is_synced(), "a list cut short is not a sync");

        let seen_at_done = Arc::new(Mutex::new(None));
        let (probe, seen) = (synced.clone(), seen_at_done.clone());
        let whole = vec![
            Event::Init,
            Event::InitApply(ConfigMap::default()),
            Event::InitDone,
        ];
        drive(
            events(whole),
            "ConfigMap",
            metrics,
            synced.clone(),
            move |ev| {
                if matches!(ev, Event::InitDone) {
                    *seen.lock().unwrap() = Some(probe.is_synced());
                }
            },
        )
        .await;
        assert_eq!(
            *seen_at_done.lock().unwrap(),
            Some(false),
            "the handler digests the list before the kind counts as synced"
        );
        assert!(synced.is_synced());
        // Waiting on a synced kind returns at once.
        synced.wait().await;
    }
}

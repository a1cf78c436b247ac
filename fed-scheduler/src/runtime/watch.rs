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
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Client, Resource, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::lean::{self, Lean};
use meridian_runtime::queue::WorkQueue;
use serde::de::DeserializeOwned;
use tokio::sync::watch as signal;

use crate::offline::{FEDERATION_STATUS_CONFIGMAP, MASS_FAILURE_KEY, SYSTEM_NAMESPACE};
use crate::types::{ContainerRequests, PodRequests, Workload, WorkloadError};

use super::desired;
use super::index::{Index, Requeue, WorkloadEntry};
use super::key::{WorkloadKey, WorkloadKind};
use super::metrics::Metrics;
use super::reconcile::Reconciler;

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

/// A watch of `api` whose objects are handed on, not stored (decoded without their
/// managedFields: placement reads none).
fn digest<K>(
    api: Api<Lean<K>>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    watcher::watcher(api, config)
        .default_backoff()
        .map_ok(lean::unwrap)
}

/// The parts of a federated workload kind placement reads, taken from kube's own types:
/// the watch hands over typed objects and nothing is rendered to JSON to be read again.
pub trait WorkloadObject: Resource + k8s_openapi::Resource {
    /// The count the scheduler divides: `spec.replicas`, a Job's `spec.parallelism`.
    fn replicas(&self) -> Option<i32>;
    /// `spec.template.spec`.
    fn pod_spec(&self) -> Option<&PodSpec>;
}

impl WorkloadObject for Deployment {
    fn replicas(&self) -> Option<i32> {
        self.spec.as_ref()?.replicas
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()?.template.spec.as_ref()
    }
}

impl WorkloadObject for ReplicaSet {
    fn replicas(&self) -> Option<i32> {
        self.spec.as_ref()?.replicas
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()?.template.as_ref()?.spec.as_ref()
    }
}

impl WorkloadObject for StatefulSet {
    fn replicas(&self) -> Option<i32> {
        self.spec.as_ref()?.replicas
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()?.template.spec.as_ref()
    }
}

impl WorkloadObject for Job {
    fn replicas(&self) -> Option<i32> {
        self.spec.as_ref()?.parallelism
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        self.spec.as_ref()?.template.spec.as_ref()
    }
}

/// The requests of each container in `list`.
fn requests(list: &[Container]) -> impl Iterator<Item = ContainerRequests<'_>> {
    list.iter().map(|c| {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let get = |k: &str| req.and_then(|m| m.get(k)).map(|q| q.0.as_str());
        ContainerRequests {
            name: &c.name,
            cpu: get("cpu"),
            memory: get("memory"),
        }
    })
}

/// The core's view of a workload object.
pub fn digest_workload<K: WorkloadObject>(o: &K) -> Result<Workload, WorkloadError> {
    let pod = o.pod_spec();
    let containers = requests(pod.map(|p| p.containers.as_slice()).unwrap_or_default());
    let init = requests(
        pod.and_then(|p| p.init_containers.as_deref())
            .unwrap_or_default(),
    );
    let meta = o.meta();
    Ok(Workload {
        api_version: K::API_VERSION.to_owned(),
        kind: K::KIND.to_owned(),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta
            .name
            .clone()
            .ok_or(WorkloadError::Field("metadata.name"))?,
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        replicas: Workload::replicas_of(
            o.replicas().map(i64::from),
            Workload::count_field(K::KIND),
        )?,
        requests: PodRequests::of_pod(containers, init)?,
    })
}

/// Watches one workload kind.
pub async fn workloads<K>(client: Client, synced: Synced, kind: WorkloadKind, ctx: Ctx)
where
    K: WorkloadObject
        + Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let stream = digest(Api::<Lean<K>>::all(client), watcher::Config::default());
    let mut seen: HashSet<WorkloadKey> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(stream, kind.as_str(), metrics, synced, move |ev| {
        let key_of =
            |o: &K| WorkloadKey::new(kind, o.namespace().unwrap_or_default(), o.name_any());
        let apply = |o: &K| {
            let key = key_of(o);
            let workload = digest_workload(o).map_err(|e| e.to_string());
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

/// Watches Clusters. Each one moves into the core's kube-free `Cluster` (the same spec and
/// status types, without kube's metadata): nothing to convert, nothing to fail.
pub async fn clusters(client: Client, synced: Synced, ctx: Ctx) {
    let stream = digest::<fed_api::Cluster>(Api::all(client), watcher::Config::default());
    let mut seen: HashSet<String> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(stream, "Cluster", metrics, synced, move |ev| {
        let apply = |o: fed_api::Cluster| {
            let name = o.name_any();
            ctx.enqueue(ctx.index.apply_cluster(&name, Some(o.into())));
            name
        };
        match ev {
            Event::Init => seen.clear(),
            Event::InitApply(o) => {
                seen.insert(apply(o));
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
                apply(o);
            }
            Event::Delete(o) => ctx.enqueue(ctx.index.apply_cluster(&o.name_any(), None)),
        }
    })
    .await;
}

/// Watches PropagationPolicies, moved into the core's kube-free `PropagationPolicy`.
pub async fn policies(client: Client, synced: Synced, ctx: Ctx) {
    let stream = digest::<fed_api::PropagationPolicy>(Api::all(client), watcher::Config::default());
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(stream, "PropagationPolicy", metrics, synced, move |ev| {
        let id = |o: &fed_api::PropagationPolicy| (o.namespace().unwrap_or_default(), o.name_any());
        let apply = |o: fed_api::PropagationPolicy| {
            let (ns, name) = id(&o);
            for k in ctx.index.apply_policy(&ns, &name, Some(o.into())) {
                ctx.queue.add(k);
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
                seen.insert(apply(o));
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
                apply(o);
            }
            Event::Delete(o) => {
                let (ns, name) = id(&o);
                delete(&ns, &name);
            }
        }
    })
    .await;
}

/// Watches ClusterPropagationPolicies, moved into the core's kube-free envelope; a change
/// re-decides every workload (a cluster-wide policy may govern any of them).
pub async fn cluster_policies(client: Client, synced: Synced, ctx: Ctx) {
    let stream =
        digest::<fed_api::ClusterPropagationPolicy>(Api::all(client), watcher::Config::default());
    let mut seen: HashSet<String> = HashSet::new();
    let metrics = ctx.metrics.clone();
    drive(
        stream,
        "ClusterPropagationPolicy",
        metrics,
        synced,
        move |ev| {
            let mut changed = false;
            match ev {
                Event::Init => seen.clear(),
                Event::InitApply(o) => {
                    let name = o.name_any();
                    changed |= ctx.index.apply_cluster_policy(&name, Some(o.into()));
                    seen.insert(name);
                }
                Event::InitDone => {
                    for name in ctx.index.cluster_policy_names() {
                        if !seen.contains(&name) {
                            changed |= ctx.index.apply_cluster_policy(&name, None);
                        }
                    }
                    seen.clear();
                }
                Event::Apply(o) => {
                    changed |= ctx
                        .index
                        .apply_cluster_policy(&o.name_any(), Some(o.into()));
                }
                Event::Delete(o) => {
                    changed |= ctx.index.apply_cluster_policy(&o.name_any(), None);
                }
            }
            if changed {
                ctx.enqueue_all();
            }
        },
    )
    .await;
}

fn placement_key(p: &Placement) -> Option<WorkloadKey> {
    WorkloadKey::of_placement(&p.namespace().unwrap_or_default(), &p.spec.resource)
}

/// Watches Placements: the cache the reconciler reads, and a trigger to restore a
/// Placement someone else changed or deleted.
pub async fn placements(client: Client, writer: Writer<Placement>, synced: Synced, ctx: Ctx) {
    let stream = reflector(
        writer,
        watcher::watcher(
            Api::<Lean<Placement>>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .map_ok(lean::unwrap)
        .modify(desired::slim),
    );
    let metrics = ctx.metrics.clone();
    drive(stream, "Placement", metrics, synced, move |ev| match ev {
        Event::Apply(p) | Event::InitApply(p) => {
            if let Some(key) = placement_key(&p) {
                ctx.reconciler.settle(&key);
                let dest = desired::dest(&p.spec.dest_clusters);
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

/// Whether each workload kind's watch has listed, in the order of [`WorkloadKind::ALL`].
pub type WorkloadsSynced = [Synced; WorkloadKind::ALL.len()];

/// Watches every workload kind (helper for callers that do not care which is which).
pub async fn all_workloads(client: Client, synced: WorkloadsSynced, ctx: Ctx) {
    let [deployments, replicasets, statefulsets, jobs] = synced;
    tokio::join!(
        workloads::<Deployment>(
            client.clone(),
            deployments,
            WorkloadKind::Deployment,
            ctx.clone()
        ),
        workloads::<ReplicaSet>(
            client.clone(),
            replicasets,
            WorkloadKind::ReplicaSet,
            ctx.clone()
        ),
        workloads::<StatefulSet>(
            client.clone(),
            statefulsets,
            WorkloadKind::StatefulSet,
            ctx.clone()
        ),
        workloads::<Job>(client, jobs, WorkloadKind::Job, ctx),
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

    #[test]
    fn typed_workloads_read_as_their_json_does() {
        let deployment = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                         "annotations": {"federation.kubernetes.io/replica-set-preferences": "{}"}},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}}, "template": {"spec": {
                "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}},
                    {"name": "c"}
                ]}}}
        });
        let replica_set = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "batch", "namespace": "jobs"},
            "spec": {"selector": {"matchLabels": {"app": "batch"}}}
        });
        let typed: Deployment = serde_json::from_value(deployment.clone()).unwrap();
        assert_eq!(
            digest_workload(&typed).unwrap(),
            Workload::from_object(&deployment).unwrap()
        );
        let typed: ReplicaSet = serde_json::from_value(replica_set.clone()).unwrap();
        let w = digest_workload(&typed).unwrap();
        assert_eq!(w, Workload::from_object(&replica_set).unwrap());
        assert_eq!((w.kind.as_str(), w.replicas), ("ReplicaSet", 1));

        let stateful_set = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                     "template": {"spec": {"containers": [
                         {"name": "db", "resources": {"requests": {"cpu": "1"}}}]}}}
        });
        let typed: StatefulSet = serde_json::from_value(stateful_set.clone()).unwrap();
        assert_eq!(
            digest_workload(&typed).unwrap(),
            Workload::from_object(&stateful_set).unwrap()
        );
        let job = serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "crunch", "namespace": "b"},
            "spec": {"parallelism": 3, "completions": 6, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]}}}
        });
        let typed: Job = serde_json::from_value(job.clone()).unwrap();
        let w = digest_workload(&typed).unwrap();
        assert_eq!(w, Workload::from_object(&job).unwrap());
        assert_eq!(
            (w.api_version.as_str(), w.kind.as_str(), w.replicas),
            ("batch/v1", "Job", 3)
        );
        let mut bad_job = typed;
        bad_job.spec.as_mut().unwrap().parallelism = Some(-2);
        assert!(matches!(
            digest_workload(&bad_job),
            Err(WorkloadError::Field("spec.parallelism"))
        ));

        let mut bad: Deployment = serde_json::from_value(deployment).unwrap();
        bad.spec.as_mut().unwrap().replicas = Some(-1);
        assert!(matches!(
            digest_workload(&bad),
            Err(WorkloadError::Field("spec.replicas"))
        ));
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

//! The simulated control loops of one member cluster: what kube-controller-manager,
//! kube-scheduler and the kubelets of a real cluster would do, driven in-process against the
//! cluster's API engine.
//!
//! Every loop is level-triggered: watch handlers only mark keys dirty in a [`WorkQueue`]
//! (the runtime's, in sorted order; they also keep small numeric indexes), and a single
//! worker per loop reconciles dirty keys in sorted order by reading the watch cache and
//! writing the difference. A lagging watch
//! re-snapshots, so no event is load-bearing. Per-cluster memory stays small: indexes hold
//! names and numbers, never objects.

pub mod containers;
pub mod cron;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod hpa;
pub mod ingress;
pub mod job;
pub mod kubelet;
pub mod loadbalancer;
pub mod nodes;
pub mod replicaset;
mod responder;
pub mod scheduler;
pub mod serviceaccount;
pub mod statefulset;
pub(crate) mod util;
mod websocket;

#[cfg(test)]
mod hpa_ingress_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod workload_tests;

// The field managers the loops write as (`metadata.managedFields`), upstream's names, so
// ownership reads as in a real cluster to kubectl, Helm and appliers.
/// kube-controller-manager's loops: deployments, replica sets, endpoints, tokens, services.
pub(crate) const CONTROLLER_MANAGER: &str = "kube-controller-manager";
/// The scheduler's bindings.
pub(crate) const SCHEDULER: &str = "kube-scheduler";
/// Node and pod status.
pub(crate) const KUBELET: &str = "kubelet";

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use meridian_apiserver::cache::{Cached, EventType, ResourceCache};
use meridian_apiserver::engine::{Engine, PatchType, Target, WriteOptions, Written};
use meridian_apiserver::registry::ResourceDef;
use meridian_apiserver::status::ApiError;
use meridian_runtime::queue::Sorted;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::faults::Faults;

pub use containers::{Containers, FailMode};
pub use ingress::ensure_ingress_class;
pub use nodes::{NodeSpec, Taint, create_nodes, set_node_capacity, set_node_ready};
pub use responder::{CLUSTER_HEADER, NAMESPACE_HEADER, POD_HEADER, REQUEST_HEADER, TLS_HEADER};
pub use serviceaccount::{ServiceAccountIdentity, authenticate_token};
pub use util::parse_address_pool;

/// How many keys a worker takes per batch before it yields, so one busy loop cannot starve
/// the others on the shared runtime.
const BATCH: usize = 256;
/// Retry delay after a failed reconcile (other than a conflict).
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Static configuration of one simulated cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterConfig {
    /// The cluster's name (used in provider IDs and logs).
    pub name: String,
    /// How long a bound pod takes to become Running and Ready (zero: at once).
    pub ready_delay: Duration,
    /// Addresses LoadBalancer Services get, handed out first-free in this order.
    pub lb_pool: Vec<IpAddr>,
    /// The cluster CA certificate (PEM), written into service-account token Secrets.
    pub ca_pem: String,
    /// The cluster's index in the fleet.
    pub index: u32,
    /// How pods are addressed.
    pub pod_network: crate::podnet::PodNetwork,
    /// Whether Ready pods listen on their container ports (see [`containers`]).
    pub serve_pods: bool,
    /// How long a run-to-completion pod (a Job's) runs before its containers exit (zero: at
    /// once).
    pub job_pod_duration: Duration,
    /// Run pods with runc (see [`crate::runc`]) instead of simulating them.
    pub runc: Option<crate::runc::RuncConfig>,
}

/// Errors setting up or running the loops.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The engine does not serve a kind the loops need.
    #[error("the cluster's API does not serve {0}")]
    MissingKind(&'static str),
    /// An API call failed.
    #[error("API call failed: {0}")]
    Api(Box<ApiError>),
    /// An object or argument could not be understood.
    #[error("{0}")]
    Invalid(String),
}

impl From<ApiError> for SimError {
    fn from(e: ApiError) -> Self {
        SimError::Api(Box::new(e))
    }
}

impl SimError {
    /// The HTTP status code of an API failure (0 otherwise).
    pub fn code(&self) -> u16 {
        match self {
            SimError::Api(e) => e.code,
            _ => 0,
        }
    }
}

/// The resources the loops read and write, resolved once from the engine's registry.
pub struct Kinds {
    /// `v1` Namespace.
    pub namespaces: Arc<ResourceDef>,
    /// `v1` Node.
    pub nodes: Arc<ResourceDef>,
    /// `v1` Pod.
    pub pods: Arc<ResourceDef>,
    /// `v1` Service.
    pub services: Arc<ResourceDef>,
    /// `v1` Endpoints.
    pub endpoints: Arc<ResourceDef>,
    /// `discovery.k8s.io/v1` EndpointSlice.
    pub endpoint_slices: Arc<ResourceDef>,
    /// `v1` ServiceAccount.
    pub service_accounts: Arc<ResourceDef>,
    /// `v1` Secret.
    pub secrets: Arc<ResourceDef>,
    /// `v1` Event.
    pub events: Arc<ResourceDef>,
    /// `v1` ConfigMap.
    pub config_maps: Arc<ResourceDef>,
    /// `apps/v1` Deployment.
    pub deployments: Arc<ResourceDef>,
    /// `apps/v1` ReplicaSet.
    pub replica_sets: Arc<ResourceDef>,
    /// `apps/v1` StatefulSet.
    pub stateful_sets: Arc<ResourceDef>,
    /// `apps/v1` DaemonSet.
    pub daemon_sets: Arc<ResourceDef>,
    /// `batch/v1` Job.
    pub jobs: Arc<ResourceDef>,
    /// `batch/v1` CronJob.
    pub cron_jobs: Arc<ResourceDef>,
    /// `v1` PersistentVolumeClaim.
    pub pvcs: Arc<ResourceDef>,
    /// `policy/v1` PodDisruptionBudget.
    pub pdbs: Arc<ResourceDef>,
    /// `autoscaling/v2` HorizontalPodAutoscaler (the stored form; v1 serves the same).
    pub hpas: Arc<ResourceDef>,
    /// `networking.k8s.io/v1` Ingress.
    pub ingresses: Arc<ResourceDef>,
    /// `networking.k8s.io/v1` IngressClass.
    pub ingress_classes: Arc<ResourceDef>,
}

impl Kinds {
    fn resolve(engine: &Engine) -> Result<Self, SimError> {
        let get = |g: &str, v: &str, p: &'static str| {
            engine
                .registry()
                .lookup(g, v, p)
                .cloned()
                .ok_or(SimError::MissingKind(p))
        };
        Ok(Self {
            namespaces: get("", "v1", "namespaces")?,
            nodes: get("", "v1", "nodes")?,
            pods: get("", "v1", "pods")?,
            services: get("", "v1", "services")?,
            endpoints: get("", "v1", "endpoints")?,
            endpoint_slices: get("discovery.k8s.io", "v1", "endpointslices")?,
            service_accounts: get("", "v1", "serviceaccounts")?,
            secrets: get("", "v1", "secrets")?,
            config_maps: get("", "v1", "configmaps")?,
            events: get("", "v1", "events")?,
            deployments: get("apps", "v1", "deployments")?,
            replica_sets: get("apps", "v1", "replicasets")?,
            stateful_sets: get("apps", "v1", "statefulsets")?,
            daemon_sets: get("apps", "v1", "daemonsets")?,
            jobs: get("batch", "v1", "jobs")?,
            cron_jobs: get("batch", "v1", "cronjobs")?,
            pvcs: get("", "v1", "persistentvolumeclaims")?,
            pdbs: get("policy", "v1", "poddisruptionbudgets")?,
            hpas: get("autoscaling", "v2", "horizontalpodautoscalers")?,
            ingresses: get("networking.k8s.io", "v1", "ingresses")?,
            ingress_classes: get("networking.k8s.io", "v1", "ingressclasses")?,
        })
    }
}

/// Everything the loops of one cluster share.
pub struct Sim {
    /// The cluster's API engine.
    pub engine: Arc<Engine>,
    /// The cluster's configuration.
    pub config: ClusterConfig,
    /// Resolved resource definitions.
    pub kinds: Kinds,
    /// Service-account tokens issued in this cluster (token → account), for authentication.
    pub tokens: serviceaccount::TokenIndex,
    /// The cluster's fault switch (its API listener and pod servers obey it).
    pub faults: Faults,
    /// The pod servers, with `serve_pods`.
    pub containers: Option<Arc<Containers>>,
    /// The runc runtime, on clusters that run pods with runc.
    pub runc: Option<Arc<crate::runc::Runc>>,
    /// The Jobs whose pods are made to fail (`cluster-sim ctl job-fail`).
    pub job_failures: job::JobFailures,
    /// The recommendations forced on HPAs (`cluster-sim ctl hpa-desired`).
    pub hpa_recommendations: hpa::HpaRecommendations,
    /// Wall-clock time at `epoch`: timestamps follow the tokio clock from here, so tests
    /// with a paused clock see consistent `lastTransitionTime`s and `minReadySeconds`.
    wall_epoch: jiff::Timestamp,
    epoch: Instant,
}

impl Sim {
    /// The shared context of one cluster's loops.
    pub fn new(engine: Arc<Engine>, config: ClusterConfig) -> Result<Arc<Self>, SimError> {
        let kinds = Kinds::resolve(&engine)?;
        let faults = Faults::default();
        let containers = config.serve_pods.then(|| {
            Arc::new(Containers::new(
                &config.name,
                faults.clone(),
                config.runc.is_some(),
            ))
        });
        let runc = config
            .runc
            .clone()
            .map(|r| Arc::new(crate::runc::Runc::new(r, config.index)));
        Ok(Arc::new(Self {
            engine,
            config,
            kinds,
            tokens: serviceaccount::TokenIndex::default(),
            faults,
            containers,
            runc,
            job_failures: job::JobFailures::default(),
            hpa_recommendations: hpa::HpaRecommendations::default(),
            wall_epoch: jiff::Timestamp::now(),
            epoch: Instant::now(),
        }))
    }

    /// The current time on the simulation clock.
    pub fn now(&self) -> jiff::Timestamp {
        let elapsed = jiff::SignedDuration::try_from(self.epoch.elapsed()).unwrap_or_default();
        self.wall_epoch
            .checked_add(elapsed)
            .unwrap_or(self.wall_epoch)
    }

    /// The current time in Kubernetes' RFC 3339 form (second precision, UTC).
    pub fn now_rfc3339(&self) -> String {
        util::format_time(self.now())
    }

    /// The cache of one resource.
    pub(crate) fn cache(&self, def: &ResourceDef) -> Arc<ResourceCache> {
        self.engine.cache.resource(def).clone()
    }

    /// One cached object, parsed (`None`: not there).
    pub(crate) fn cached(&self, def: &ResourceDef, ns: &str, name: &str) -> Option<Value> {
        self.cache(def).get(&def.key(ns, name)).map(|c| c.value())
    }

    /// Merge-patches an object (`Target::Main`) or its status as kube-controller-manager,
    /// the way the controller loops write what they decided.
    pub(crate) async fn merge_patch(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        patch: &Value,
        target: Target,
    ) -> Result<Written, ApiError> {
        self.engine
            .patch(
                def,
                ns,
                name,
                PatchType::Merge,
                patch,
                target,
                &WriteOptions::by(CONTROLLER_MANAGER),
            )
            .await
    }

    /// Writes the whole `status` of the pod `namespace/name` (`key`) as the kubelet does,
    /// through the status subresource: the simulated kubelet's and the runc runtime's one way.
    pub(crate) async fn write_pod_status(
        &self,
        key: &str,
        status: &Value,
    ) -> Result<Written, ApiError> {
        let (ns, name) = split_key(key);
        self.engine
            .patch(
                &self.kinds.pods,
                ns,
                name,
                PatchType::Merge,
                &serde_json::json!({ "status": status }),
                Target::Status,
                &WriteOptions::by(KUBELET),
            )
            .await
    }

    /// The objects of `def` in `namespace` that the object with `owner_uid` owns.
    pub(crate) fn owned(
        &self,
        def: &ResourceDef,
        namespace: &str,
        owner_uid: &str,
    ) -> Vec<Arc<Cached>> {
        self.cache(def)
            .list(&def.namespace_prefix(Some(namespace)), None, None, 0, |c| {
                c.owners.iter().any(|o| **o == *owner_uid)
            })
            .items
    }

    /// Merge-patches `status` (an object of status fields) into `namespace/name` when one
    /// of its fields differs from `current` (the object as cached; a field it lacks reads
    /// as null, so a field set to null removes it); an object deleted meanwhile is done.
    pub(crate) async fn write_status_fields(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        current: &Value,
        status: Value,
    ) -> Result<(), SimError> {
        let old = &current["status"];
        let changed = status.as_object().is_some_and(|m| {
            m.iter()
                .any(|(k, v)| old.get(k).unwrap_or(&Value::Null) != v)
        });
        if !changed {
            return Ok(());
        }
        done_unless_failed(
            self.merge_patch(
                def,
                namespace,
                name,
                &serde_json::json!({ "status": status }),
                Target::Status,
            )
            .await,
        )
    }
}

/// A write whose object is gone (404) has nothing left to do: a loop that wrote to an
/// object deleted meanwhile treats it as done, and passes any other error on.
pub(crate) fn done_unless_failed<T>(written: Result<T, ApiError>) -> Result<(), SimError> {
    match written {
        Ok(_) => Ok(()),
        Err(e) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Spawns every loop of one cluster; the handles end only if the engine's cache closes.
pub fn start(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    handles.extend(deployment::spawn(sim.clone()));
    handles.extend(replicaset::spawn(sim.clone()));
    handles.extend(job::spawn(sim.clone()));
    handles.extend(cronjob::spawn(sim.clone()));
    handles.extend(statefulset::spawn(sim.clone()));
    handles.extend(daemonset::spawn(sim.clone()));
    handles.extend(disruption::spawn(sim.clone()));
    handles.extend(scheduler::spawn(sim.clone()));
    handles.extend(kubelet::spawn(sim.clone()));
    handles.extend(endpoints::spawn(sim.clone()));
    handles.extend(loadbalancer::spawn(sim.clone()));
    handles.extend(ingress::spawn(sim.clone()));
    handles.extend(hpa::spawn(sim.clone()));
    if let Some(c) = &sim.containers {
        handles.extend(containers::spawn(sim.clone(), c.clone()));
    }
    if let Some(rt) = &sim.runc {
        // One listing of Services and EndpointSlices for the proxy and the cluster DNS.
        let (listings, watches) = crate::runc::services::spawn(sim.clone());
        handles.extend(watches);
        handles.push(tokio::spawn(crate::runc::proxy::run(listings.clone())));
        if let Some(net) = rt.net {
            let addr = std::net::SocketAddr::from((net.dns(), 53));
            handles.extend(crate::runc::dns::spawn(addr, listings));
        }
        handles.extend(crate::runc::claims::spawn(sim.clone()));
    }
    handles.extend(serviceaccount::spawn(sim));
    handles
}

/// What a reconcile asks of the queue afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// Converged (or waiting for an event).
    No,
    /// Look again after this long (time-based conditions: delays, `minReadySeconds`).
    After(Duration),
}

/// A loop's queue of dirty keys: each held once (a burst of events for one object costs one
/// reconcile), handed out smallest first, plus keys due later.
pub(crate) type WorkQueue<K> = meridian_runtime::queue::WorkQueue<K, Sorted<K>>;

/// One control loop's reconcile step.
pub(crate) trait Reconciler<K>: Send + Sync + 'static {
    /// The loop's name, for logs.
    const NAME: &'static str;
    /// Converges the object behind `key`.
    fn reconcile(&self, key: &K) -> impl Future<Output = Result<Requeue, SimError>> + Send;
}

/// Runs a loop's worker: take dirty keys in order, make the cache current, reconcile each.
pub(crate) fn spawn_worker<K, R>(
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<K>>,
    reconciler: Arc<R>,
) -> JoinHandle<()>
where
    K: Ord + std::hash::Hash + Clone + Send + Sync + std::fmt::Debug + 'static,
    R: Reconciler<K>,
{
    tokio::spawn(async move {
        loop {
            let mut keys = vec![queue.next().await];
            while keys.len() < BATCH {
                match queue.try_next() {
                    Some(k) => keys.push(k),
                    None => break,
                }
            }
            // Reads come from the watch cache; waiting for it to reflect every acknowledged
            // write (ours included) keeps a loop from acting twice on its own stale view.
            if let Err(e) = sim.engine.sync().await {
                tracing::warn!(controller = R::NAME, error = %e, "cache behind the store");
            }
            for key in keys {
                match reconciler.reconcile(&key).await {
                    Ok(Requeue::No) => {}
                    Ok(Requeue::After(d)) => queue.add_after(key.clone(), d),
                    Err(e) if e.code() == 409 => {
                        tracing::debug!(controller = R::NAME, ?key, "conflict; retrying");
                        queue.add(key.clone());
                    }
                    Err(e) => {
                        tracing::warn!(controller = R::NAME, ?key, error = %e, "reconcile failed; retrying");
                        queue.add_after(key.clone(), RETRY_AFTER);
                    }
                }
                // Added again while it was reconciled: it waits again now.
                queue.done(&key);
            }
            tokio::task::yield_now().await;
        }
    })
}

/// What a watch handler sees.
pub(crate) enum Seen<'a> {
    /// A (re)listing starts: the objects follow as `Upsert`s, then `Synced`.
    Reset,
    /// Created or changed (`prev` is the previous state when known).
    Upsert {
        obj: &'a Arc<Cached>,
        prev: Option<&'a Arc<Cached>>,
    },
    /// Deleted (`obj` is its last state).
    Deleted { obj: &'a Arc<Cached> },
    /// The listing after `Reset` is complete.
    Synced,
}

/// The `namespace/name` key of the `kind` object that controls a changed child (a pod, a
/// ReplicaSet, a Job), when it has one. With `label`, only children carrying that label
/// are parsed (the label marks the owner's children), so other children cost a map lookup.
pub(crate) fn controlling_owner(seen: Seen<'_>, kind: &str, label: Option<&str>) -> Option<String> {
    let obj = match seen {
        Seen::Upsert { obj, .. } | Seen::Deleted { obj } => obj,
        Seen::Reset | Seen::Synced => return None,
    };
    if obj.owners.is_empty() || label.is_some_and(|l| obj.labels.get(l).is_none()) {
        return None;
    }
    util::controller_of(&obj.value(), kind).map(|(owner, _)| ns_key(obj.namespace(), owner))
}

/// Spawns a controller's loop over the objects of `owners` (each queued when it is created
/// or changes), a watch of `children` that queues the owner `child_owner` names for a
/// changed child, and its worker.
pub(crate) fn spawn_owner_loop<R>(
    sim: Arc<Sim>,
    owners: &Arc<ResourceDef>,
    children: &Arc<ResourceDef>,
    queue: Arc<WorkQueue<String>>,
    reconciler: Arc<R>,
    child_owner: impl Fn(Seen<'_>) -> Option<String> + Send + Sync + 'static,
) -> Vec<JoinHandle<()>>
where
    R: Reconciler<String>,
{
    let (q1, q2) = (queue.clone(), queue.clone());
    vec![
        spawn_watch(sim.cache(owners), move |e| {
            if let Seen::Upsert { obj, .. } = e {
                q1.add(ns_key(obj.namespace(), obj.name()));
            }
        }),
        spawn_watch(sim.cache(children), move |e| {
            if let Some(key) = child_owner(e) {
                q2.add(key);
            }
        }),
        spawn_worker(sim, queue, reconciler),
    ]
}

/// Follows one resource: a snapshot first, then live events; re-snapshots after lagging.
pub(crate) fn spawn_watch<F>(cache: Arc<ResourceCache>, handler: F) -> JoinHandle<()>
where
    F: Fn(Seen<'_>) + Send + Sync + 'static,
{
    tokio::spawn(async move {
        loop {
            let (snapshot, mut sub) = cache.snapshot_and_subscribe();
            handler(Seen::Reset);
            for obj in &snapshot {
                handler(Seen::Upsert { obj, prev: None });
            }
            handler(Seen::Synced);
            drop(snapshot);
            loop {
                match sub.live.recv().await {
                    Ok(ev) => match ev.kind {
                        EventType::Deleted => handler(Seen::Deleted { obj: &ev.obj }),
                        _ => handler(Seen::Upsert {
                            obj: &ev.obj,
                            prev: ev.prev.as_ref(),
                        }),
                    },
                    Err(RecvError::Lagged(n)) => {
                        tracing::debug!(missed = n, "watch lagged; re-listing");
                        break;
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }
    })
}

/// The `namespace/name` key of a namespaced object.
pub(crate) fn ns_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Splits a `namespace/name` key.
pub(crate) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

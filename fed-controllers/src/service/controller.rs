//! The service controller's federation side: watches Services, the workloads of every kind
//! with a pod template (`workloads`), Placements, PropagationPolicies, Clusters, their
//! Secrets and the port allocations; keeps one member task per Cluster; and,
//! level-triggered through a deduplicating queue, decides for each Service what every
//! member holds, writes its Placement and status, and for the whole fleet (the `Global`
//! key) each member's lb-agent configuration (with the client subnets of
//! `meridian-client-subnets`) and `Cluster.status.lbAgent`. Each member's Service copy is
//! the one the override policies make for it; a policy's change re-queues the Services of
//! the namespaces it may affect.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use fed_api::governance::Subject;
use fed_api::lbconfig::LbService;
use fed_api::names::{
    CLIENT_SUBNETS_CONFIGMAP, LB_ADDRESSES_CONFIGMAP, LB_PORTS_CONFIGMAP, SYSTEM_NAMESPACE,
};
use fed_api::overrides::apply::{MemberCluster, OverrideError, Policy, selecting};
use fed_api::placement::TargetCluster;
use fed_api::{Cluster, Placement, PropagationPolicy, ResourceInterpreter};
use futures::stream::{BoxStream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::events::{EventType, Recorder};
use meridian_runtime::lean::Lean;
use meridian_runtime::queue::WorkQueue;
use meridian_runtime::sync::lock;
use serde_json::{Value, json};
use tracing::Instrument;

use super::alloc_map::AllocationMap;
use super::backends::{self, WorkloadView};
use super::inputs::{Input, Labels, ns_of, placement_change};
use super::member::{self, Intent, Member, Want};
use super::status::{self, MemberState};
use super::workloads::Workloads;
use super::{
    ClusterView, FINALIZER, IGNORED_NAMESPACES, ServiceKey, Settings, desired, lbconf, ports,
    traffic,
};
use crate::cluster::controller::token_digest;
use crate::compact::Compact;
use crate::fleet::own_writes::OwnWrites;
use crate::fleet::{self, FedError, Fleet, Overrides, reflect};
use crate::metrics::Metrics;
use crate::slim_cache::SlimCache;

/// Passes over Services (and the fleet-wide `Global` one) that run at the same time. A new
/// Service's pass waits on up to five federation writes in turn (finalizer, listen ports,
/// Placement, its status, the Service's status), tens of milliseconds each under load, and
/// spends little CPU: passes in flight are what bound throughput (a GitOps sync of
/// thousands of Services at 100 clusters queued for seconds behind eight).
const SERVICE_WORKERS: usize = 64;

/// How long Service changes gather before every member's lb-agent configuration is rebuilt
/// (kube-proxy's `minSyncPeriod` for the same reason: one rebuild costs the whole fleet's
/// Services for every member).
const LB_CONFIG_BATCH: std::time::Duration = std::time::Duration::from_millis(200);

/// A unit of the central workers' work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CentralKey {
    /// One federated Service.
    Service(ServiceKey),
    /// Every member's lb-agent configuration and `Cluster.status.lbAgent`.
    Global,
    /// Every Service, then `Global` (an lb-agent or a cluster changed).
    Everything,
}

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A federation request failed, timed out or could not be encoded, or a watch ended.
    #[error(transparent)]
    Fed(#[from] FedError),
    /// No listen port is left.
    #[error(transparent)]
    Exhausted(#[from] ports::Exhausted),
    /// The Placement's name is taken by another resource's Placement.
    #[error("Placement {0} exists and is not this Service's")]
    PlacementTaken(String),
}

impl From<serde_json::Error> for ReconcileError {
    fn from(e: serde_json::Error) -> Self {
        Self::Fed(e.into())
    }
}

#[derive(Clone)]
pub(super) struct Caches {
    pub(super) services: Store<Service>,
    /// Each federated workload's pod-template labels, by kind.
    pub(super) workloads: Workloads,
    pub(super) placements: SlimCache<Placement, PlacementSlim>,
    pub(super) policies: Store<PropagationPolicy>,
    /// The ResourceInterpreters: which custom kinds back Services.
    pub(super) interpreters: Store<ResourceInterpreter>,
    pub(super) clusters: Store<Cluster>,
    pub(super) secrets: Store<Secret>,
    pub(super) ports: Store<ConfigMap>,
    /// `meridian-lb-addresses`.
    pub(super) addresses: Store<ConfigMap>,
    /// `meridian-client-subnets`.
    pub(super) subnets: Store<ConfigMap>,
}

pub(super) struct Central {
    pub(super) fed: Client,
    pub(super) settings: Arc<Settings>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) caches: Caches,
    pub(super) queue: Arc<WorkQueue<CentralKey>>,
    /// The service controller's Events.
    pub(super) events: Recorder,
    pub(super) members: Fleet<Member>,
    /// The override policies (one watch per process).
    pub(super) overrides: Overrides,
    /// Each Service's entry in the lb-agent configuration, as last reconciled.
    pub(super) lb_services: Mutex<BTreeMap<ServiceKey, LbService>>,
    /// The Services by their selectors, as their watch events tell them.
    pub(super) selecting: Mutex<super::selecting::Selecting>,
    /// What of each Cluster matters here, to skip the cluster controller's routine
    /// status writes (probe times).
    pub(super) cluster_digests: Mutex<HashMap<String, super::inputs::Seen>>,
    /// The listen port allocations last seen, to tell which Services a change concerns.
    pub(super) listen_ports: Mutex<BTreeMap<String, String>>,
    /// `meridian-lb-ports`, held by one Service at a time.
    pub(super) listen_ports_map: AllocationMap,
    /// Port ids of the Services waiting for `listen_ports_map`: whoever holds it next
    /// allocates them all in its write.
    pub(super) port_requests: Mutex<BTreeMap<ServiceKey, Vec<String>>>,
    /// The allocations of the newest version of `meridian-lb-ports` read, parsed.
    pub(super) parsed_ports: Mutex<Option<(Option<String>, Arc<ports::Allocations>)>>,
    /// `meridian-lb-addresses`, allocated one Service at a time.
    pub(super) addresses_map: AllocationMap,
    /// Each Service's Placement as last written, until the watch brings it back.
    pub(super) placement_writes: OwnWrites<ServiceKey, Placement>,
    /// The last unusable traffic policy reported per Service (an Event on each change,
    /// not on each reconcile).
    pub(super) policy_errors: Mutex<HashMap<ServiceKey, String>>,
    /// The last unusable client-subnet entries reported.
    pub(super) subnet_problems: Mutex<Vec<String>>,
    /// The last dedicated-address problems reported per Service.
    pub(super) address_problems: Mutex<HashMap<ServiceKey, String>>,
}

pub(super) fn ignored(ns: &str) -> bool {
    IGNORED_NAMESPACES.contains(&ns)
}

pub(super) fn ready(c: &Cluster) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

pub(super) fn rfc3339_now() -> String {
    // Kubernetes writes condition times with second precision.
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Central {
    fn members(&self) -> Vec<Arc<Member>> {
        self.members.shared()
    }

    pub(super) fn service_keys(&self, namespace: Option<&str>) -> Vec<ServiceKey> {
        self.caches
            .services
            .state()
            .iter()
            .filter_map(|s| {
                let ns = s.namespace().unwrap_or_default();
                (!ignored(&ns) && namespace.is_none_or(|n| n == ns))
                    .then(|| ServiceKey::new(ns, s.name_any()))
            })
            .collect()
    }

    /// Queues the Services of `namespace` whose selector picks pods with any of `labels`.
    pub(super) fn push_selecting(&self, namespace: &str, labels: &[&Labels]) {
        if ignored(namespace) || labels.is_empty() {
            return;
        }
        let selecting = lock(&self.selecting).selecting(namespace, labels);
        for key in selecting {
            self.queue.add(CentralKey::Service(key));
        }
    }

    pub(super) fn push_services(&self, namespace: Option<&str>) {
        for k in self.service_keys(namespace) {
            self.queue.add(CentralKey::Service(k));
        }
    }

    /// Starts, restarts or stops member tasks to match the Clusters and their credentials.
    pub(super) fn sync_members(&self) {
        let secrets = &self.caches.secrets;
        self.members.sync(
            "service",
            self.caches.clusters.state(),
            |r| {
                let s = secrets.get(&ObjectRef::new(&r.name).within(&r.namespace))?;
                Some(token_digest(&s))
            },
            |c, fp| {
                member::spawn(
                    self.fed.clone(),
                    self.settings.clone(),
                    self.metrics.clone(),
                    self.queue.clone(),
                    self.events.clone(),
                    c,
                    fp,
                )
            },
        );
    }

    pub(super) async fn timed<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ReconcileError> {
        Ok(fleet::timed(self.settings.fleet.sync_timeout, op, f).await?)
    }

    /// The clusters as the service controller sees them: Ready from the Cluster's
    /// condition, the lb-agent from the member when it has listed, else from the status.
    fn views(&self, members: &HashMap<String, Arc<Member>>) -> Vec<ClusterView> {
        let mut out: Vec<ClusterView> = self
            .caches
            .clusters
            .state()
            .iter()
            .map(|c| {
                let name = c.name_any();
                let reported = members.get(&name).and_then(|m| m.lb_agent());
                ClusterView {
                    ready: ready(c),
                    region: c.spec.region.clone().unwrap_or_default(),
                    zone: c.spec.zone.clone().unwrap_or_default(),
                    labels: c.labels().clone(),
                    lb_agent: reported
                        .unwrap_or_else(|| c.status.as_ref().and_then(|s| s.lb_agent.clone())),
                    name,
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The Service copy `cluster` gets under the `selected` override policies.
    fn copy_for(
        &self,
        cluster: &str,
        copy: &Value,
        plain: &Compact,
        selected: &[&Policy],
        uid: &str,
    ) -> Result<Compact, OverrideError> {
        if selected.is_empty() {
            return Ok(plain.clone());
        }
        match self.caches.clusters.get(&ObjectRef::new(cluster)) {
            Some(c) => desired::overridden_service(copy, &MemberCluster::of(&c), selected, uid)
                .map(|v| Compact::new(&v)),
            None => Ok(plain.clone()),
        }
    }

    /// The backend clusters of a Service.
    fn backends(&self, svc: &Service, v: &Value, views: &[ClusterView]) -> BTreeSet<String> {
        let ns = svc.namespace().unwrap_or_default();
        let selector = backends::selector_of(v);
        let mut workloads = Vec::new();
        // Only the workloads whose pods it selects are copied out of the cache, found by
        // the selector's labels (an empty selector selects nothing).
        let selected = |labels: &BTreeMap<String, String>| backends::selects(&selector, labels);
        let tags = super::workloads::label_tags(&selector);
        let kinds = if selector.is_empty() {
            Vec::new()
        } else {
            self.caches.workloads.all()
        };
        for (kind, cache) in kinds {
            let listed = cache.tagged(&ns, &tags, selected);
            workloads.extend(listed.into_iter().map(|(name, labels)| WorkloadView {
                kind: kind.clone(),
                name,
                template_labels: (*labels).clone(),
            }));
        }
        // One set of workloads always gives one answer.
        workloads.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        let placements: HashMap<String, Vec<TargetCluster>> = workloads
            .iter()
            .filter_map(|w| {
                let p = self.caches.placements.get(&ns, &w.placement_name())?;
                match &*p {
                    PlacementSlim::Workload(dest) => Some((w.placement_name(), dest.clone())),
                    PlacementSlim::Service(_) => None,
                }
            })
            .collect();
        let policies = self.caches.policies.state();
        let policies: Vec<&PropagationPolicy> = policies
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
            .map(|p| &**p)
            .collect();
        backends::backend_clusters(
            &svc.name_any(),
            svc.labels(),
            &selector,
            &workloads,
            |n| placements.get(n).map(Vec::as_slice),
            &policies,
            views,
        )
    }

    async fn reconcile(&self, key: &ServiceKey) -> Result<(), ReconcileError> {
        let members: HashMap<String, Arc<Member>> = self
            .members()
            .into_iter()
            .map(|m| (m.name.clone(), m))
            .collect();
        let Some(svc) = self
            .caches
            .services
            .get(&ObjectRef::new(&key.name).within(&key.namespace))
        else {
            // Gone (cleaned behind the finalizer): nothing left to do in members.
            for m in members.values() {
                m.forget(key);
            }
            self.placement_writes.forget(key);
            if lock(&self.lb_services).remove(key).is_some() {
                self.lb_services_changed();
            }
            return Ok(());
        };
        let uid = svc.uid().unwrap_or_default();
        let fins = svc.finalizers().to_vec();
        if svc.meta().deletion_timestamp.is_some() {
            if lock(&self.lb_services).remove(key).is_some() {
                self.lb_services_changed();
            }
            return self.finalize(key, &svc, &uid, &fins, &members).await;
        }
        // The finalizer first, then the rest in the same pass on the patched object: no
        // member copy exists that a deletion could leave behind.
        let svc = if fins.iter().any(|f| f == FINALIZER) {
            svc
        } else {
            let mut list = fins;
            list.push(FINALIZER.to_string());
            Arc::new(self.set_finalizers(key, &svc, list).await?)
        };
        let v = serde_json::to_value(&*svc)?;

        // Listen ports first: the slices and the lb-agents need them.
        let ids = desired::port_ids(&v);
        let alloc = match self.listen_ports(key, &ids).await {
            Ok(alloc) => alloc,
            Err(ReconcileError::Exhausted(e)) => {
                self.events.record(super::event(
                    key,
                    &uid,
                    EventType::Warning,
                    "PortsExhausted",
                    &e.to_string(),
                ));
                return Err(e.into());
            }
            Err(e) => return Err(e),
        };
        let lb_ports = desired::lb_ports(&v, |id| {
            ports::lookup(&alloc.ports, &key.namespace, &key.name, id)
        })
        .unwrap_or_default();
        let (policy, tls_secret) = self.traffic(key, &svc, &uid);

        let views = self.views(&members);
        let dedicated = self.dedicated_addresses(key, &svc, &uid, &views).await?;
        let pushed = self.backends(&svc, &v, &views);
        // What the members it is pushed to report: the rest is read by nothing below.
        let mut states: BTreeMap<String, MemberState> = members
            .iter()
            .filter(|(n, _)| pushed.contains(*n))
            .map(|(n, m)| (n.clone(), m.state(key, &uid)))
            .collect();
        let serving = status::serving(&pushed, &views, &states);
        let copy = desired::member_service(&v, &uid);
        // Packed once: without an override policy every member gets this same copy.
        let plain = Compact::new(&copy);
        let policies = self.overrides.snapshot();
        let subject = Subject {
            api_version: "v1",
            kind: "Service",
            namespace: Some(key.namespace.as_str()),
            name: &key.name,
            labels: svc.labels(),
        };
        let selected = selecting(&subject, &policies);
        for (name, m) in &members {
            if pushed.contains(name) {
                let service = match self.copy_for(name, &copy, &plain, &selected, &uid) {
                    Ok(s) => s,
                    // Nothing new is pushed there (what it holds stays) until the policy
                    // is fixed; that change re-queues the Service. The Placement says why.
                    Err(e) => {
                        let st = states.entry(name.clone()).or_default();
                        st.error = format!("OverrideFailed: {e}");
                        st.override_failed = true;
                        continue;
                    }
                };
                let slice = desired::slice(key, &uid, &status::remotes(name, &serving), &lb_ports);
                let slice = Compact::new(&slice);
                m.set_intent(
                    key,
                    Intent {
                        uid: uid.clone(),
                        want: Want::Present { service, slice },
                    },
                );
            } else if m.holds(key, &uid) != Some(false) {
                m.set_intent(
                    key,
                    Intent {
                        uid: uid.clone(),
                        want: Want::Absent,
                    },
                );
            } else if m.has_intent(key) {
                m.forget(key);
            }
        }

        let endpoints: BTreeMap<String, u32> = pushed
            .iter()
            .map(|c| (c.clone(), states.get(c).map_or(0, |s| s.endpoints)))
            .collect();
        let mut entry = lbconf::service(key, lb_ports, policy, &endpoints, &views);
        entry.tls_secret = tls_secret;
        entry.addresses = dedicated.addresses.clone();
        if lock(&self.lb_services).insert(key.clone(), entry.clone()) != Some(entry) {
            self.lb_services_changed();
        }

        self.write_placement(key, &svc, &uid, &pushed, &views, &states)
            .await?;
        self.write_service_status(key, &svc, &v, &serving, &dedicated)
            .await
    }

    /// The Service's traffic policy and TLS Secret from its annotations. Unusable values
    /// are reported (an Event when the problems change, not on each reconcile): the Service
    /// then stays `nearest`, or is passed through.
    fn traffic(
        &self,
        key: &ServiceKey,
        svc: &Service,
        uid: &str,
    ) -> (fed_api::lbconfig::TrafficPolicy, Option<String>) {
        let policy = traffic::policy(svc.annotations());
        let secret = traffic::tls_secret(svc.annotations());
        let mut problems = Vec::new();
        if let Err(e) = &policy {
            problems.push(format!("{e}; traffic goes nearest first"));
        }
        if let Err(e) = &secret {
            problems.push(format!("{e}; TLS is passed through"));
        }
        if problems.is_empty() {
            lock(&self.policy_errors).remove(key);
        } else {
            let message = problems.join("; ");
            let changed = lock(&self.policy_errors).insert(key.clone(), message.clone())
                != Some(message.clone());
            if changed {
                tracing::warn!(%key, problems = %message, "unusable traffic annotations");
                self.events.record(super::event(
                    key,
                    uid,
                    EventType::Warning,
                    "InvalidTrafficPolicy",
                    &message,
                ));
            }
        }
        (policy.unwrap_or_default(), secret.unwrap_or_default())
    }

    /// The client subnets of `meridian-client-subnets`; unusable entries are logged when
    /// they change and left out.
    fn client_subnets(&self) -> Vec<fed_api::lbconfig::ClientSubnet> {
        let data = self
            .caches
            .subnets
            .get(&ObjectRef::new(CLIENT_SUBNETS_CONFIGMAP).within(SYSTEM_NAMESPACE))
            .and_then(|cm| cm.data.clone())
            .unwrap_or_default();
        let (subnets, problems) = traffic::client_subnets(&data);
        let mut reported = lock(&self.subnet_problems);
        if *reported != problems {
            for p in &problems {
                tracing::warn!(configmap = CLIENT_SUBNETS_CONFIGMAP, problem = %p, "client subnet left out");
            }
            *reported = problems;
        }
        subnets
    }

    /// A deleting Service: remove member copies and slices, free its ports, then let go.
    async fn finalize(
        &self,
        key: &ServiceKey,
        svc: &Service,
        uid: &str,
        fins: &[String],
        members: &HashMap<String, Arc<Member>>,
    ) -> Result<(), ReconcileError> {
        if !fins.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let orphan = fins.iter().any(|f| f == "orphan");
        let pending = if orphan {
            Vec::new()
        } else {
            fleet::members::remove_copies(
                members.iter().map(|(name, m)| (name.as_str(), &**m)),
                |m| m.holds(key, uid),
                |m| m.set_intent(key, Intent::new(uid, Want::Absent)),
            )
        };
        if !pending.is_empty() {
            tracing::info!(%key, clusters = ?pending, "waiting for member copies to be removed");
            return Ok(());
        }
        {
            let mut held = self.listen_ports_map.hold().await;
            let alloc = ports::parse(&held.data());
            if let Some(next) = ports::release(&alloc, &key.namespace, &key.name) {
                self.write_allocations(&mut held, &next).await?;
                tracing::info!(%key, "lb-agent listen ports released");
            }
        }
        self.release_dedicated(key).await?;
        let rest: Vec<String> = fins.iter().filter(|f| *f != FINALIZER).cloned().collect();
        self.set_finalizers(key, svc, rest).await?;
        for m in members.values() {
            m.forget(key);
        }
        let (reason, message) =
            fleet::members::cleaned(orphan, "member copies and EndpointSlices removed");
        self.events
            .record(super::event(key, uid, EventType::Normal, reason, message));
        Ok(())
    }

    /// Every member's lb-agent configuration and every `Cluster.status.lbAgent`.
    async fn reconcile_global(&self) -> Result<(), ReconcileError> {
        let members: HashMap<String, Arc<Member>> = self
            .members()
            .into_iter()
            .map(|m| (m.name.clone(), m))
            .collect();
        let views = self.views(&members);
        let clusters = lbconf::clusters(&views);
        let services: Vec<LbService> = lock(&self.lb_services).values().cloned().collect();
        let subnets = self.client_subnets();
        for v in &views {
            let Some(m) = members.get(&v.name) else {
                continue;
            };
            let config = match &v.lb_agent {
                Some(_) => Some(serde_json::to_string_pretty(&lbconf::build(
                    &v.name,
                    &self.settings.dns_zone,
                    self.settings.ttl_seconds,
                    &clusters,
                    &services,
                    &subnets,
                ))?),
                None => None,
            };
            m.set_config(config);
        }
        let api: Api<Cluster> = Api::all(self.fed.clone());
        let mut first_error = None;
        for c in self.caches.clusters.state() {
            let name = c.name_any();
            // Only what the member itself says: an unreachable member keeps its last one.
            let Some(agent) = members.get(&name).and_then(|m| m.lb_agent()) else {
                continue;
            };
            if c.status.as_ref().and_then(|s| s.lb_agent.as_ref()) == agent.as_ref() {
                continue;
            }
            // Only lbAgent: the cluster controller owns (and merge-patches) the rest.
            let patch = json!({"status": {"lbAgent": agent}});
            if let Err(e) = self
                .timed(
                    &format!("status of Cluster {name}"),
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)),
                )
                .await
            {
                tracing::warn!(cluster = %name, error = %Report(&e), "lbAgent status not written");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A Service's lb-agent entry changed: the members' configurations follow, rebuilt once
    /// for all the changes of [`LB_CONFIG_BATCH`] rather than once per Service.
    fn lb_services_changed(&self) {
        self.queue.add_after(CentralKey::Global, LB_CONFIG_BATCH);
    }

    /// One pass over `key`, then what the queue needs to hear of it.
    async fn work(&self, key: &CentralKey, waited: std::time::Duration) {
        let started = Instant::now();
        let result = self.handle(key).await;
        // Pushed again while it was handled: it waits again now.
        self.queue.done(key);
        let elapsed = started.elapsed();
        self.metrics.service_sync(
            if result.is_ok() { "ok" } else { "error" },
            elapsed.as_secs_f64(),
        );
        match result {
            Ok(()) => {
                self.queue.forget(key);
                tracing::debug!(?key, ?waited, ?elapsed, "service controller pass");
            }
            Err(error) => {
                tracing::warn!(?key, error = %Report(&error), "service reconcile failed; retrying");
                self.queue.retry(key.clone());
            }
        }
    }

    async fn handle(&self, key: &CentralKey) -> Result<(), ReconcileError> {
        match key {
            CentralKey::Service(k) => {
                self.reconcile(k)
                    .instrument(tracing::info_span!("service", key = %k))
                    .await
            }
            CentralKey::Global => self.reconcile_global().await,
            CentralKey::Everything => {
                self.push_services(None);
                self.queue.add(CentralKey::Global);
                Ok(())
            }
        }
    }
}

/// What this controller keeps of a Placement: a workload's destinations only (for
/// [`Central::backends`]); a Service's whole (this controller writes it).
#[derive(Debug)]
pub(super) enum PlacementSlim {
    /// A workload's Placement: its `destClusters`.
    Workload(Vec<TargetCluster>),
    /// A Service's Placement.
    Service(Box<Placement>),
}

pub(super) fn placement_slim(p: &Placement) -> Option<PlacementSlim> {
    Some(if p.spec.resource.kind == "Service" {
        PlacementSlim::Service(Box::new(p.clone()))
    } else {
        PlacementSlim::Workload(p.spec.dest_clusters.clone())
    })
}

/// Runs the service controller until its federation watches end (they retry with
/// backoff, so in practice until the task is dropped).
pub async fn run(
    fed: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    overrides: Overrides,
) -> Result<(), ReconcileError> {
    let all = watcher::Config::default;
    let mut streams: Vec<BoxStream<'static, Input>> = Vec::new();
    let (services, s) = reflect(Api::<Lean<Service>>::all(fed.clone()), all());
    streams.push(s.map(|e| Input::Service(Box::new(e))).boxed());
    let (workloads, workload_streams) = Workloads::watch(&fed);
    streams.extend(workload_streams);
    let placements = SlimCache::new(placement_slim);
    streams.push(
        placements
            .watch_with_previous(Api::<Lean<Placement>>::all(fed.clone()))
            .filter_map(|e| async move { placement_change(e) })
            .boxed(),
    );
    let (policies, s) = reflect(Api::<Lean<PropagationPolicy>>::all(fed.clone()), all());
    streams.push(
        s.filter_map(|e| async move { ns_of(&e).map(Input::Policy) })
            .boxed(),
    );
    let (interpreters, s) = reflect(Api::<Lean<ResourceInterpreter>>::all(fed.clone()), all());
    streams.push(
        s.filter_map(|e| async move {
            matches!(e, Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone))
                .then_some(Input::Interpreters)
        })
        .boxed(),
    );
    let (clusters, s) = reflect(Api::<Lean<Cluster>>::all(fed.clone()), all());
    streams.push(s.map(|e| Input::Cluster(Box::new(e))).boxed());
    let (secrets, s) = reflect(Api::<Lean<Secret>>::all(fed.clone()), all());
    streams.push(
        s.filter_map(|e| async move {
            matches!(e, Ok(Event::Apply(_) | Event::Delete(_))).then_some(Input::Secret)
        })
        .boxed(),
    );
    let (port_store, s) = reflect(
        Api::<Lean<ConfigMap>>::namespaced(fed.clone(), SYSTEM_NAMESPACE),
        all().fields(&format!("metadata.name={LB_PORTS_CONFIGMAP}")),
    );
    // Each new Service allocates ports here: only the Services whose allocations moved
    // look again, not every Service at every allocation.
    streams.push(
        s.filter_map(|e| async move {
            match e {
                Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                    Some(Input::ListenPorts(cm.data.unwrap_or_default()))
                }
                Ok(Event::Delete(_)) => Some(Input::ListenPorts(BTreeMap::new())),
                _ => None,
            }
        })
        .boxed(),
    );
    let (address_store, s) = reflect(
        Api::<Lean<ConfigMap>>::namespaced(fed.clone(), SYSTEM_NAMESPACE),
        all().fields(&format!("metadata.name={LB_ADDRESSES_CONFIGMAP}")),
    );
    streams.push(
        s.filter_map(|e| async move {
            matches!(e, Ok(Event::Apply(_) | Event::Delete(_))).then_some(Input::Ports)
        })
        .boxed(),
    );
    let (subnet_store, s) = reflect(
        Api::<Lean<ConfigMap>>::namespaced(fed.clone(), SYSTEM_NAMESPACE),
        all().fields(&format!("metadata.name={CLIENT_SUBNETS_CONFIGMAP}")),
    );
    streams.push(
        s.filter_map(|e| async move {
            matches!(e, Ok(Event::Apply(_) | Event::Delete(_))).then_some(Input::Subnets)
        })
        .boxed(),
    );

    streams.push(overrides.changes().map(Input::Overrides).boxed());

    let queue = WorkQueue::new(
        settings.fleet.central_queue(),
        metrics.service_queue.clone(),
    );
    let central = Arc::new(Central {
        fed,
        settings: Arc::new(settings),
        metrics,
        events: recorder.for_component(super::COMPONENT),
        caches: Caches {
            services,
            workloads,
            placements,
            policies,
            interpreters,
            clusters,
            secrets,
            ports: port_store.clone(),
            addresses: address_store.clone(),
            subnets: subnet_store,
        },
        queue: Arc::new(queue),
        members: Fleet::default(),
        overrides,
        lb_services: Mutex::default(),
        selecting: Mutex::default(),
        cluster_digests: Mutex::default(),
        listen_ports: Mutex::default(),
        listen_ports_map: AllocationMap::new(SYSTEM_NAMESPACE, LB_PORTS_CONFIGMAP, port_store),
        port_requests: Mutex::default(),
        parsed_ports: Mutex::default(),
        addresses_map: AllocationMap::new(SYSTEM_NAMESPACE, LB_ADDRESSES_CONFIGMAP, address_store),
        placement_writes: OwnWrites::default(),
        policy_errors: Mutex::default(),
        subnet_problems: Mutex::default(),
        address_problems: Mutex::default(),
    });
    let workers = {
        let c = central.clone();
        tokio::spawn(async move {
            // Decisions read the caches: wait for every initial list first.
            let k = &c.caches;
            k.workloads.ready().await;
            k.placements.ready().wait().await;
            let ready = futures::future::join_all([
                futures::FutureExt::boxed(k.services.wait_until_ready()),
                futures::FutureExt::boxed(k.policies.wait_until_ready()),
                futures::FutureExt::boxed(k.clusters.wait_until_ready()),
                futures::FutureExt::boxed(k.secrets.wait_until_ready()),
                futures::FutureExt::boxed(k.ports.wait_until_ready()),
                futures::FutureExt::boxed(k.addresses.wait_until_ready()),
                futures::FutureExt::boxed(k.subnets.wait_until_ready()),
            ])
            .await;
            if ready.iter().any(Result::is_err) {
                return;
            }
            // Copies are pushed as the policies make them: never before they are listed.
            c.overrides.ready().await;
            c.sync_members();
            c.queue.add(CentralKey::Everything);
            // A pass waits on federation writes far more than it computes; the queue never
            // hands one key to two workers, and the allocation maps are held one at a time.
            let mut workers = tokio::task::JoinSet::new();
            for _ in 0..SERVICE_WORKERS {
                let c = c.clone();
                workers.spawn(async move {
                    loop {
                        let (key, queued) = c.queue.next_timed().await;
                        c.work(&key, queued.elapsed()).await;
                    }
                });
            }
            workers.join_all().await;
        })
    };
    let _workers = AbortOnDropHandle::new(workers);
    let mut inputs = futures::stream::select_all(streams);
    while let Some(input) = inputs.next().await {
        central.on_input(input);
    }
    Err(FedError::WatchEnded.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_service_placements_are_kept_whole() {
        let placement = |kind: &str| -> Placement {
            serde_json::from_value(json!({
                "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "p", "namespace": "shop", "uid": "u1", "resourceVersion": "7"},
                "spec": {"resource": {"apiVersion": "v1", "kind": kind, "name": "web"},
                         "destClusters": [{"cluster": "a", "replicas": 1}]},
                "status": {"clusters": [{"cluster": "a"}]}
            }))
            .unwrap()
        };
        match placement_slim(&placement("Deployment")) {
            Some(PlacementSlim::Workload(dest)) => {
                assert_eq!(dest.len(), 1);
                assert_eq!((dest[0].cluster.as_str(), dest[0].replicas), ("a", 1));
            }
            other => panic!("a workload's Placement keeps its destinations: {other:?}"),
        }
        match placement_slim(&placement("Service")) {
            Some(PlacementSlim::Service(p)) => assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::to_value(placement("Service")).unwrap()
            ),
            other => panic!("a Service's Placement is kept whole: {other:?}"),
        }
    }
}

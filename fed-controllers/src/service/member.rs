//! One member cluster's side of the service controller: its own client; watches of the
//! Services and EndpointSlices Meridian manages there, of every EndpointSlice naming a
//! Service (to count ready endpoints), of the lb-agent's Service and of the lb-agent
//! configuration; and its own queue and worker, so a slow or dead member never delays
//! another. The central controller hands it [`Intent`]s and the lb-agent configuration;
//! it converges the member to them, retrying failures with backoff, and reports back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use fed_api::Cluster;
use fed_api::cluster::LbAgentStatus;
use fed_api::names::{
    ENDPOINTSLICE_MANAGER, LB_AGENT_CONFIG_KEY, LB_AGENT_CONFIGMAP, LB_AGENT_SERVICE,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, SYSTEM_NAMESPACE,
};
use futures::StreamExt;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use meridian_runtime::error::{Report, report};
use meridian_runtime::events::{EventType, Recorder};
use meridian_runtime::lean::{self, Lean};
use meridian_runtime::queue::WorkQueue;
use meridian_runtime::sync::lock;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tracing::Instrument;

use super::controller::CentralKey;
use super::desired::{self, SERVICE_NAME_LABEL};
use super::status::MemberState;
use super::{ServiceKey, Settings};
use crate::compact::Compact;
use crate::fleet;
use crate::member_sync::{self, Applied, SyncError, now, to_dynamic};
use crate::member_watch;
use crate::metrics::Metrics;
use crate::workload::ownership::{self, Ownership};

/// How long a member's reports on one Service gather before the central controller looks
/// (the workload path's status delay, for the same reason).
const REPORT_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// What Meridian wants from a member for one Service.
#[derive(Clone, Debug, PartialEq)]
pub enum Want {
    /// Hold the Service copy, then Meridian's EndpointSlice for it.
    Present {
        /// The Service copy (packed: a member keeps its intents and the last converged
        /// one for every Service, and a JSON tree costs ten times its text).
        service: Compact,
        /// The `<name>-meridian` EndpointSlice.
        slice: Compact,
    },
    /// Hold neither (only objects carrying the Service's uid are removed).
    Absent,
}

/// The intent for one Service in one member.
pub type Intent = fleet::Intent<Want>;

/// A unit of work of the member's worker.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Work {
    Service(ServiceKey),
    LbConfig,
}

/// Per-work bookkeeping of syncs.
type Record = fleet::Record<Intent>;

/// The member's caches.
#[derive(Clone)]
struct Caches {
    client: Client,
    /// Services labelled as Meridian's.
    managed: Store<Service>,
    /// Every EndpointSlice that names a Service (Meridian's included).
    slices: Store<EndpointSlice>,
    /// The lb-agent's Service.
    agent: Store<Service>,
    synced: Arc<AtomicBool>,
}

/// The state one member shares with the central controller.
pub struct Member {
    /// Cluster name.
    pub name: String,
    fed: Client,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    central: Arc<WorkQueue<CentralKey>>,
    /// This member's syncs; failures are retried with the settings' back-off.
    queue: WorkQueue<Work>,
    events: Recorder,
    intents: Mutex<HashMap<ServiceKey, Intent>>,
    config: Mutex<Option<String>>,
    records: Mutex<HashMap<Work, Record>>,
    caches: Mutex<Option<Caches>>,
    connection: fleet::Connection,
}

fn service_ar() -> ApiResource {
    ApiResource::erase::<Service>(&())
}

fn slice_ar() -> ApiResource {
    ApiResource::erase::<EndpointSlice>(&())
}

impl Member {
    /// Sets the intent for a Service; the worker runs only if it changed.
    pub fn set_intent(&self, key: &ServiceKey, intent: Intent) {
        let changed = lock(&self.intents).insert(key.clone(), intent.clone()) != Some(intent);
        if changed {
            self.queue.add(Work::Service(key.clone()));
        }
    }

    /// Forgets a Service without touching the member (cleaned, or never held here).
    pub fn forget(&self, key: &ServiceKey) {
        lock(&self.intents).remove(key);
        lock(&self.records).remove(&Work::Service(key.clone()));
    }

    /// Whether the member has an intent for the Service.
    pub fn has_intent(&self, key: &ServiceKey) -> bool {
        lock(&self.intents).contains_key(key)
    }

    /// Sets the lb-agent configuration (JSON) the member should hold; `None` leaves
    /// whatever is there alone.
    pub fn set_config(&self, config: Option<String>) {
        let mut c = lock(&self.config);
        if *c != config {
            *c = config;
            drop(c);
            self.queue.add(Work::LbConfig);
        }
    }

    fn caches(&self) -> Option<Caches> {
        lock(&self.caches).clone()
    }

    /// Whether the member's watches have listed (its reports are current).
    pub fn synced(&self) -> bool {
        self.caches()
            .is_some_and(|c| c.synced.load(Ordering::Acquire))
    }

    fn owned<K: Resource<DynamicType = ()> + Clone + serde::Serialize>(
        store: &Store<K>,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> bool {
        store
            .get(&ObjectRef::new(name).within(namespace))
            .and_then(|o| serde_json::to_value(&*o).ok())
            .is_some_and(|v| ownership::owned_by(&v, uid))
    }

    /// Whether the member holds a copy or slice owned by `uid`; `None` while unknown.
    pub fn holds(&self, key: &ServiceKey, uid: &str) -> Option<bool> {
        let c = self.caches().filter(|c| c.synced.load(Ordering::Acquire))?;
        Some(
            Self::owned(&c.managed, &key.namespace, &key.name, uid)
                || Self::owned(&c.slices, &key.namespace, &key.slice_name(), uid),
        )
    }

    /// Ready endpoints of the Service's own pods in the member.
    pub fn endpoints(&self, key: &ServiceKey) -> u32 {
        let Some(c) = self.caches() else { return 0 };
        let slices: Vec<Value> = c
            .slices
            .state()
            .iter()
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                    && s.labels().get(SERVICE_NAME_LABEL) == Some(&key.name)
            })
            .filter_map(|s| serde_json::to_value(&**s).ok())
            .collect();
        desired::ready_endpoints(&slices)
    }

    /// What the member reports for a Service.
    pub fn state(&self, key: &ServiceKey, uid: &str) -> MemberState {
        let r = lock(&self.records)
            .get(&Work::Service(key.clone()))
            .cloned()
            .unwrap_or_default();
        let error = self.connection.error_or(r.error);
        MemberState {
            endpoints: self.endpoints(key),
            holds: Self::owned_copy(self, key, uid),
            error,
            conflict: r.conflict,
            override_failed: false,
            last_sync_time: r.last_sync_time,
        }
    }

    fn owned_copy(&self, key: &ServiceKey, uid: &str) -> bool {
        self.caches()
            .is_some_and(|c| Self::owned(&c.managed, &key.namespace, &key.name, uid))
    }

    /// The member's lb-agent: `None` while unknown (not listed yet), `Some(None)` when it
    /// has none (no Service, no address yet, or ports missing).
    pub fn lb_agent(&self) -> Option<Option<LbAgentStatus>> {
        let c = self.caches().filter(|c| c.synced.load(Ordering::Acquire))?;
        let svc = c
            .agent
            .get(&ObjectRef::new(LB_AGENT_SERVICE).within(SYSTEM_NAMESPACE));
        Some(
            svc.and_then(|s| serde_json::to_value(&*s).ok())
                .and_then(|v| desired::lb_agent_of(&v)),
        )
    }

    /// Has the central controller look at the Service soon, behind new work: what this
    /// member holds of it changed (a copy's echo, a sync's outcome). Reports within
    /// [`REPORT_DELAY`] of the first share one pass: a Service on a hundred members would
    /// otherwise be looked at once per member and per copy written, and new Services
    /// would queue behind those looks.
    fn report(&self, key: ServiceKey) {
        self.central
            .add_low_after(CentralKey::Service(key), REPORT_DELAY);
    }

    fn notify_all(&self) {
        for k in lock(&self.intents).keys() {
            self.central.add(CentralKey::Service(k.clone()));
        }
        self.central.add(CentralKey::Global);
    }
}

/// A running member.
pub type MemberHandle = fleet::Handle<Member>;

/// Starts a member.
pub fn spawn(
    fed: Client,
    settings: Arc<Settings>,
    metrics: Arc<Metrics>,
    central: Arc<WorkQueue<CentralKey>>,
    events: Recorder,
    cluster: Arc<Cluster>,
    fingerprint: u64,
) -> MemberHandle {
    let queue = WorkQueue::new(
        settings.fleet.queue(),
        metrics.service_member_queues.clone(),
    );
    let connection = fleet::Connection::new(cluster.name_any(), &settings.fleet);
    let shared = Arc::new(Member {
        name: cluster.name_any(),
        fed,
        settings,
        metrics,
        central,
        queue,
        events,
        intents: Mutex::default(),
        config: Mutex::default(),
        records: Mutex::default(),
        caches: Mutex::default(),
        connection,
    });
    let span = tracing::info_span!("service-member", cluster = %shared.name);
    let task = tokio::spawn(run(shared.clone(), cluster).instrument(span));
    MemberHandle::new(task, shared, fingerprint)
}

fn key_of<K: Resource>(o: &K, name: Option<&str>) -> ServiceKey {
    ServiceKey::new(
        o.meta().namespace.clone().unwrap_or_default(),
        name.map_or_else(|| o.meta().name.clone().unwrap_or_default(), String::from),
    )
}

async fn run(m: Arc<Member>, cluster: Arc<Cluster>) {
    // Boxed, as the syncs below are.
    let client = Box::pin(
        m.connection
            .connect(&m.settings.fleet, &m.fed, &cluster, || m.notify_all()),
    )
    .await;
    let mut tasks = JoinSet::new();
    let managed_cfg =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let managed = watch(
        &m,
        Api::<Lean<Service>>::all(client.clone()),
        managed_cfg,
        &mut tasks,
        |m, s: &Service| {
            let key = key_of(s, None);
            m.report(key.clone());
            // Drift: the worker compares and reverts.
            if m.has_intent(&key) {
                m.queue.add(Work::Service(key));
            }
        },
    );
    let slices = watch(
        &m,
        Api::<Lean<EndpointSlice>>::all(client.clone()),
        watcher::Config::default().labels(SERVICE_NAME_LABEL),
        &mut tasks,
        |m, s: &EndpointSlice| {
            let Some(svc) = s.labels().get(SERVICE_NAME_LABEL) else {
                return;
            };
            let key = key_of(s, Some(svc));
            // Meridian's own slice (remote lb-agents; the member's own slices carry the
            // Service's labels, Meridian's among them) counts for nothing centrally: only a
            // drift to revert.
            if s.labels()
                .get(desired::SLICE_MANAGED_BY_LABEL)
                .map(String::as_str)
                == Some(ENDPOINTSLICE_MANAGER)
            {
                if m.has_intent(&key) {
                    m.queue.add(Work::Service(key));
                }
            } else {
                // Endpoint counts feed the Service's status, every slice and every LbConfig.
                m.central.add(CentralKey::Service(key));
            }
        },
    );
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let agent = watch(
        &m,
        Api::<Lean<Service>>::namespaced(client.clone(), SYSTEM_NAMESPACE),
        by_name(LB_AGENT_SERVICE),
        &mut tasks,
        |m, _: &Service| {
            m.central.add(CentralKey::Everything);
        },
    );
    let config = watch(
        &m,
        Api::<Lean<ConfigMap>>::namespaced(client.clone(), SYSTEM_NAMESPACE),
        by_name(LB_AGENT_CONFIGMAP),
        &mut tasks,
        |m, _: &ConfigMap| {
            m.queue.add(Work::LbConfig);
        },
    );
    let synced = Arc::new(AtomicBool::new(false));
    *lock(&m.caches) = Some(Caches {
        client: client.clone(),
        managed: managed.clone(),
        slices: slices.clone(),
        agent: agent.clone(),
        synced: synced.clone(),
    });
    let m2 = m.clone();
    tasks.spawn(async move {
        // Each only fails when its writer is dropped, i.e. the member is stopping.
        if managed.wait_until_ready().await.is_err()
            || slices.wait_until_ready().await.is_err()
            || agent.wait_until_ready().await.is_err()
            || config.wait_until_ready().await.is_err()
        {
            return;
        }
        synced.store(true, Ordering::Release);
        m2.central.add(CentralKey::Everything);
        for k in lock(&m2.intents).keys() {
            m2.queue.add(Work::Service(k.clone()));
        }
        m2.queue.add(Work::LbConfig);
    });
    loop {
        let work = m.queue.next().await;
        let slot = m.settings.fleet.sync_slot(m.connection.answering()).await;
        // Boxed: this task waits on its queue most of the time, and a task is as large as its
        // largest state; with the syncs inline every idle member would keep the ~7 KB they
        // need.
        let result = match &work {
            Work::Service(key) => Box::pin(sync_service(&m, key)).await,
            Work::LbConfig => Box::pin(sync_config(&m)).await,
        };
        drop(slot);
        let changed = finish(&m, &work, result);
        // The key may have been pushed again while it was being synced: it waits again now.
        m.queue.done(&work);
        if let (Work::Service(key), true) = (work, changed) {
            m.report(key);
        }
    }
}

/// Starts a reflector in the member; `on_change` sees every applied or deleted object once
/// the store shows it ([`fleet::Changes`]). Objects are kept without their managedFields
/// ([`Lean`]): nothing here reads them, and they are much of a small object.
fn watch<K>(
    m: &Arc<Member>,
    api: Api<Lean<K>>,
    cfg: watcher::Config,
    tasks: &mut JoinSet<()>,
    on_change: impl Fn(&Member, &K) + Send + 'static,
) -> Store<K>
where
    K: fleet::Object + Resource<DynamicType = ()>,
{
    let (reader, writer) = reflector::store();
    let stream = watcher::watcher(api, cfg)
        .backoff(member_watch::backoff())
        .map_ok(lean::unwrap)
        .reflect(writer);
    let m = m.clone();
    let store = reader.clone();
    tasks.spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut changes = fleet::Changes::default();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => changes.on(&ev, &store, |o| on_change(&m, o)),
                Err(error) => {
                    tracing::debug!(error = %Report(&error), kind = %K::kind(&()), "member watch failed; retrying")
                }
            }
        }
    });
    reader
}

/// How drift of one kind is judged and reverted.
struct DriftRules {
    in_sync: fn(&Value, &Value) -> bool,
    merged: fn(&Value, &Value) -> Value,
}

/// Makes the member hold `want` (never over an object that is not Meridian's).
async fn apply(
    m: &Member,
    client: &Client,
    ar: &ApiResource,
    want: &Value,
    rules: DriftRules,
) -> Result<Applied, SyncError> {
    let ns = want["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = want["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    let what = format!("{} {ns}/{name}", ar.kind);
    let existing = m
        .connection
        .timed(&format!("reading {what}"), api.get_opt(name))
        .await?;
    let existing = existing
        .map(|o| serde_json::to_value(&o).map_err(|e| SyncError::Encode(what.clone(), e)))
        .transpose()?;
    let object = ar.plural.as_str();
    match (ownership::check(existing.as_ref()), existing) {
        (Ownership::Foreign, _) => Err(SyncError::Conflict {
            kind: ar.kind.clone(),
            namespace: ns.into(),
            name: name.into(),
            cluster: m.name.clone(),
        }),
        (Ownership::Absent, _) | (_, None) => {
            m.connection
                .timed(
                    &format!("creating {what}"),
                    api.create(&PostParams::default(), &to_dynamic(want)?),
                )
                .await?;
            m.metrics.service_member_write(&m.name, object, "create");
            Ok(Applied::Created)
        }
        (Ownership::Managed { .. }, Some(actual)) => {
            if (rules.in_sync)(&actual, want) {
                return Ok(Applied::Unchanged);
            }
            let next = to_dynamic(&(rules.merged)(&actual, want))?;
            m.connection
                .timed(
                    &format!("updating {what}"),
                    api.replace(name, &PostParams::default(), &next),
                )
                .await?;
            m.metrics.service_member_write(&m.name, object, "update");
            Ok(Applied::Updated)
        }
    }
}

/// Deletes `namespace/name` if it carries `uid` (uid precondition: never a same-name
/// object created meanwhile). Returns whether it deleted.
async fn remove(
    m: &Member,
    client: &Client,
    ar: &ApiResource,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<bool, SyncError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, ar);
    let what = format!("{} {namespace}/{name}", ar.kind);
    let Some(obj) = m
        .connection
        .timed(&format!("reading {what}"), api.get_opt(name))
        .await?
    else {
        return Ok(false);
    };
    let owned = serde_json::to_value(&obj).is_ok_and(|v| ownership::owned_by(&v, uid));
    if !owned {
        return Ok(false);
    }
    let dp = member_sync::delete_only(obj.uid());
    match m
        .connection
        .timed(&format!("deleting {what}"), api.delete(name, &dp))
        .await
    {
        Ok(_) => {
            m.metrics
                .service_member_write(&m.name, ar.plural.as_str(), "delete");
            Ok(true)
        }
        Err(e) if e.is_status(404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Outcome of one sync, for the record and Events.
struct Synced {
    service: Applied,
    slice: Applied,
    removed: bool,
}

async fn sync_service(m: &Member, key: &ServiceKey) -> Result<Option<Synced>, SyncError> {
    let caches = m.caches().ok_or(SyncError::NotConnected)?;
    let intent = lock(&m.intents).get(key).cloned();
    let Some(intent) = intent else {
        return Ok(None);
    };
    match &intent.want {
        Want::Present { service, slice } => {
            m.connection
                .ensure_namespace(&caches.client, &key.namespace, |_, _| {})
                .await?;
            // The Service first: a conflict there stops before the slice would add
            // endpoints to someone else's Service.
            let s = apply(
                m,
                &caches.client,
                &service_ar(),
                &service.value(),
                DriftRules {
                    in_sync: desired::service_in_sync,
                    merged: desired::service_merged,
                },
            )
            .await?;
            let e = apply(
                m,
                &caches.client,
                &slice_ar(),
                &slice.value(),
                DriftRules {
                    in_sync: desired::slice_in_sync,
                    merged: desired::slice_merged,
                },
            )
            .await?;
            Ok(Some(Synced {
                service: s,
                slice: e,
                removed: false,
            }))
        }
        Want::Absent => {
            let (ns, uid) = (&key.namespace, &intent.uid);
            let slice = remove(m, &caches.client, &slice_ar(), ns, &key.slice_name(), uid).await?;
            let svc = remove(m, &caches.client, &service_ar(), ns, &key.name, uid).await?;
            Ok(Some(Synced {
                service: Applied::Unchanged,
                slice: Applied::Unchanged,
                removed: slice || svc,
            }))
        }
    }
}

/// Writes the lb-agent configuration when its content differs from what the member holds.
async fn sync_config(m: &Member) -> Result<Option<Synced>, SyncError> {
    let caches = m.caches().ok_or(SyncError::NotConnected)?;
    let Some(want) = lock(&m.config).clone() else {
        return Ok(None);
    };
    let api: Api<ConfigMap> = Api::namespaced(caches.client.clone(), SYSTEM_NAMESPACE);
    let what = format!("ConfigMap {SYSTEM_NAMESPACE}/{LB_AGENT_CONFIGMAP}");
    let current = m
        .connection
        .timed(&format!("reading {what}"), api.get_opt(LB_AGENT_CONFIGMAP))
        .await?;
    let data = json!({ LB_AGENT_CONFIG_KEY: want });
    let labels = json!({ MANAGED_BY_LABEL: MANAGED_BY_VALUE });
    match current {
        Some(cm)
            if cm.data.as_ref().and_then(|d| d.get(LB_AGENT_CONFIG_KEY)) == Some(&want)
                && cm.labels().get(MANAGED_BY_LABEL).map(String::as_str)
                    == Some(MANAGED_BY_VALUE) =>
        {
            Ok(None)
        }
        Some(cm) => {
            let mut next = cm.clone();
            next.data =
                serde_json::from_value(data).map_err(|e| SyncError::Encode(what.clone(), e))?;
            next.labels_mut()
                .insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
            // resourceVersion kept: a concurrent writer makes this fail and retry.
            m.connection
                .timed(
                    &format!("updating {what}"),
                    api.replace(LB_AGENT_CONFIGMAP, &PostParams::default(), &next),
                )
                .await?;
            m.metrics
                .service_member_write(&m.name, "configmaps", "update");
            Ok(None)
        }
        None => {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": LB_AGENT_CONFIGMAP, "namespace": SYSTEM_NAMESPACE, "labels": labels},
                "data": data,
            }))
            .map_err(|e| SyncError::Encode(what.clone(), e))?;
            m.connection
                .timed(
                    &format!("creating {what}"),
                    api.create(&PostParams::default(), &cm),
                )
                .await?;
            m.metrics
                .service_member_write(&m.name, "configmaps", "create");
            Ok(None)
        }
    }
}

/// Records the outcome, writes Events on transitions and schedules a retry after failures.
/// Records a sync's result; whether the record changed as the Service's Placement shows it
/// (error, conflict, sync time). Only then has the central pass something new to read: a
/// sync that found the copy as wanted (the echo of an earlier write) says nothing new.
fn finish(m: &Arc<Member>, work: &Work, result: Result<Option<Synced>, SyncError>) -> bool {
    let shown = || {
        lock(&m.records)
            .get(work)
            .map(|r| (r.error.clone(), r.conflict, r.last_sync_time.clone()))
    };
    let before = shown();
    record(m, work, result);
    shown() != before
}

fn record(m: &Arc<Member>, work: &Work, result: Result<Option<Synced>, SyncError>) {
    let (prev_error, prev_converged) = {
        let mut records = lock(&m.records);
        let r = records.entry(work.clone()).or_default();
        (r.error.clone(), r.converged.clone())
    };
    let intent = match work {
        Work::Service(key) => lock(&m.intents).get(key).cloned(),
        Work::LbConfig => None,
    };
    match result {
        Ok(synced) => {
            {
                let mut records = lock(&m.records);
                let r = records.entry(work.clone()).or_default();
                let wrote = synced.as_ref().is_some_and(|s| {
                    s.removed || s.service != Applied::Unchanged || s.slice != Applied::Unchanged
                });
                // The sync time moves when something happened, not on every no-op pass
                // (it is part of the Placement's status).
                if wrote
                    || !r.error.is_empty()
                    || r.last_sync_time.is_none()
                    || r.converged != intent
                {
                    r.last_sync_time = Some(now());
                }
                r.error.clear();
                r.conflict = false;
                r.converged = intent.clone();
            }
            m.queue.forget(work);
            let (Work::Service(key), Some(s), Some(intent)) = (work, synced, intent) else {
                return;
            };
            // Only a revert of a direct edit is told as an Event: pushes, updates and
            // removals carry out the scheduler's decision (its `Scheduled` Event) and show on
            // the Placement; slice contents follow other clusters' health. An Event per
            // member per change would cost the federation a write each.
            let reverted = !s.removed
                && (s.service == Applied::Updated || s.slice == Applied::Updated)
                && prev_converged.as_ref() == Some(&intent);
            if s.removed || s.service != Applied::Unchanged || s.slice != Applied::Unchanged {
                tracing::info!(%key, reverted, "member synced");
            }
            if !reverted {
                return;
            }
            let (reason, message) = ("DriftReverted", format!("edited in {}; restored", m.name));
            m.events.record(super::event(
                key,
                &intent.uid,
                EventType::Normal,
                reason,
                &message,
            ));
        }
        Err(error) => {
            let msg = report(&error);
            let conflict = error.is_conflict();
            tracing::warn!(?work, error = %msg, "member sync failed; retrying");
            m.metrics.service_member_error(&m.name);
            {
                let mut records = lock(&m.records);
                let r = records.entry(work.clone()).or_default();
                r.error = msg.clone();
                r.conflict = conflict;
            }
            if msg != prev_error
                && let (Work::Service(key), Some(intent)) = (work, &intent)
            {
                let reason = if conflict { "Conflict" } else { "SyncFailed" };
                m.events.record(super::event(
                    key,
                    &intent.uid,
                    EventType::Warning,
                    reason,
                    &msg,
                ));
            }
            m.queue.retry(work.clone());
        }
    }
}

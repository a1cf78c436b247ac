//! One member cluster's task: client setup, probe loop, discovery, node/pod watches and
//! the debounced status writer — all inside one task tree, so one slow or dead member
//! never delays another, and aborting the task stops everything it started.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fed_api::Cluster;
use fed_api::common::Condition;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use meridian_runtime::error::{Report, report};
use meridian_runtime::events::{EventType, Recorder};
use meridian_runtime::queue::Backoff;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use super::capacity::{Tracker, extract};
use super::conditions;
use super::credentials::CredentialsError;
use super::discovery::{self, Discovered};
use super::events;
use super::guard::Board;
use super::lease;
use super::probe::{self, FailureKind, Health, Outcome, ProbeState, Thresholds};
use super::prober::{self, HealthPath};
use super::status::{self, Owned};
use crate::member_client::MemberClients;
use crate::metrics::Metrics;

/// Tunables of every member task.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Time between probes.
    pub probe_period: Duration,
    /// Deadline of one probe.
    pub probe_timeout: Duration,
    /// Damping thresholds.
    pub thresholds: Thresholds,
    /// Slow refresh of version and served APIs (also refreshed on becoming Ready).
    pub discovery_period: Duration,
    /// At most one status write per this interval per cluster.
    pub status_min_interval: Duration,
    /// An unchanged `Ready` (or `Offline`) condition gets a new `lastProbeTime`, and so a
    /// status write, once per this period; liveness is the member's Lease.
    pub status_report_period: Duration,
    /// Deadline of federation writes and reads (status, Secret, Events).
    pub federation_timeout: Duration,
    /// A member watch with no event for this long is restarted.
    pub watch_idle_timeout: Duration,
    /// Objects per page of a member list.
    pub list_page_size: u32,
    /// Members listing nodes or pods at the same time, process-wide. A list's decoded
    /// pages are short-lived but large; a thousand members listing at once (controller
    /// start, a fleet-wide outage ending) would add all of them up, and the allocator
    /// keeps that high-water mark long after.
    pub concurrent_lists: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            probe_period: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(3),
            thresholds: Thresholds::default(),
            discovery_period: Duration::from_secs(300),
            status_min_interval: Duration::from_millis(500),
            status_report_period: Duration::from_secs(300),
            federation_timeout: Duration::from_secs(10),
            watch_idle_timeout: Duration::from_secs(330),
            list_page_size: 100,
            concurrent_lists: 32,
        }
    }
}

/// What the member task shares with the rest of the process.
#[derive(Clone)]
pub struct Shared {
    /// Client of the federation API.
    pub fed: Client,
    /// Tunables.
    pub settings: Arc<Settings>,
    /// Process metrics.
    pub metrics: Arc<Metrics>,
    /// Offline flags for the mass-failure guard.
    pub board: Arc<Board>,
    /// Builds member clients (one multiplexed connection per member, shared TLS configs).
    pub clients: Arc<MemberClients>,
    /// Permits to list (see [`Settings::concurrent_lists`]).
    pub lists: Arc<Semaphore>,
    /// The cluster controller's Events.
    pub events: Recorder,
}

/// A running member task. Dropping it stops the task.
pub struct MemberHandle {
    task: JoinHandle<()>,
    cluster: watch::Sender<Arc<Cluster>>,
    /// Fingerprint of the connection settings the task was started with.
    pub fingerprint: u64,
}

impl MemberHandle {
    /// Hands the task the latest Cluster object (for other writers' conditions and
    /// to notice status changes made by others).
    pub fn update(&self, cluster: Arc<Cluster>) {
        self.cluster.send_replace(cluster);
    }

    /// The Cluster object the task last received.
    pub fn cluster(&self) -> Arc<Cluster> {
        self.cluster.borrow().clone()
    }
}

impl Drop for MemberHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the task for one Cluster.
pub fn spawn(shared: Shared, cluster: Arc<Cluster>, fingerprint: u64) -> MemberHandle {
    let name = cluster.name_any();
    let (tx, rx) = watch::channel(cluster.clone());
    let conds = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let probe = ProbeState::from_conditions(&conds);
    shared.board.set(&name, probe.offline);
    let member = Arc::new(Member {
        name: name.clone(),
        uid: cluster.uid(),
        shared,
        cluster: rx,
        state: Mutex::new(State {
            probe,
            conditions: conds,
            discovered: None,
            tracker: Tracker::new(),
            nodes_synced: false,
            pods_synced: false,
        }),
        dirty: Notify::new(),
        rediscover: Notify::new(),
        rewatch: watch::Sender::new(0),
        succeeded: watch::Sender::new(None),
    });
    let span = tracing::info_span!("member", cluster = %name);
    let task = tokio::spawn(run(member).instrument(span));
    MemberHandle {
        task,
        cluster: tx,
        fingerprint,
    }
}

struct State {
    probe: ProbeState,
    conditions: Vec<Condition>,
    discovered: Option<Discovered>,
    tracker: Tracker,
    nodes_synced: bool,
    pods_synced: bool,
}

struct Member {
    name: String,
    uid: Option<String>,
    shared: Shared,
    cluster: watch::Receiver<Arc<Cluster>>,
    state: Mutex<State>,
    /// Something in `state` changed: the status writer should look.
    dirty: Notify,
    /// Discovery should refresh now.
    rediscover: Notify,
    /// Bumped to make the watches re-list (after the member comes back).
    rewatch: watch::Sender<u64>,
    /// The scheduled time of the latest successful probe: the Lease renewer's input.
    succeeded: watch::Sender<Option<tokio::time::Instant>>,
}

impl Member {
    fn lock(&self) -> MutexGuard<'_, State> {
        meridian_runtime::sync::lock(&self.state)
    }

    fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// Feeds one probe outcome through the damping and acts on transitions.
    fn record(&self, outcome: Outcome) {
        let now = jiff::Timestamp::now();
        let th = self.settings().thresholds;
        let report_period = self.settings().status_report_period;
        let (prev, next, transition) = {
            let mut st = self.lock();
            let prev = st.probe.clone();
            let (next, t) = probe::next_state(&prev, &outcome, th, now);
            for mut c in probe::conditions_for(&next, th) {
                let old = conditions::find(&st.conditions, &c.type_);
                if !conditions::probe_time_due(old, &c, now, report_period) {
                    // `set` keeps the old probe time: nothing to write.
                    c.last_probe_time = None;
                }
                conditions::set(&mut st.conditions, c, now);
            }
            st.probe = next.clone();
            (prev, next, t)
        };
        self.dirty.notify_one();
        self.shared.board.set(&self.name, next.offline);
        if transition.ready {
            let (reason, type_) = match next.health {
                Health::Ready => ("ClusterReady", EventType::Normal),
                _ => ("ClusterNotReady", EventType::Warning),
            };
            let message = describe(&next);
            tracing::info!(health = ?next.health, %message, "ready changed");
            self.event(reason, type_, &message);
            if next.health == Health::Ready {
                self.rediscover.notify_one();
            }
        }
        if transition.offline {
            let (reason, type_) = if next.offline {
                ("ClusterOffline", EventType::Warning)
            } else {
                ("ClusterOnline", EventType::Normal)
            };
            self.event(reason, type_, &describe(&next));
            if prev.offline && !next.offline {
                // Watches may have been hanging on dead connections; start them afresh.
                self.rewatch.send_modify(|g| *g += 1);
            }
        }
    }

    fn event(&self, reason: &str, type_: EventType, message: &str) {
        let e = events::for_cluster(&self.name, self.uid.as_deref(), reason, type_, message);
        self.shared.events.record(e);
    }

    /// The status this member should have now.
    fn desired(&self) -> Owned {
        let current = self.cluster.borrow().clone();
        let current_conds = current
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let st = self.lock();
        let ours: Vec<Condition> = st
            .conditions
            .iter()
            .filter(|c| c.type_ == conditions::READY || c.type_ == conditions::OFFLINE)
            .cloned()
            .collect();
        // Capacity is only written once both initial lists completed: a half-listed
        // member would otherwise report a fraction of its nodes.
        let summary = (st.nodes_synced && st.pods_synced).then(|| st.tracker.summary());
        Owned {
            conditions: status::merge_conditions(current_conds, &ours),
            kubernetes_version: st.discovered.as_ref().map(|d| d.kubernetes_version.clone()),
            api_enablements: st.discovered.as_ref().map(|d| d.api_enablements.clone()),
            nodes: summary.map(|s| s.node_summary()),
            resource_summary: summary.map(|s| s.resource_summary()),
        }
    }
}

fn describe(state: &ProbeState) -> String {
    match (&state.health, &state.last_failure) {
        (Health::Ready, _) => "probes succeed".to_string(),
        (_, Some((kind, msg))) => format!("{}: {msg}", kind.reason()),
        _ => "no probe result yet".to_string(),
    }
}

async fn run(m: Arc<Member>) {
    let mut tasks = JoinSet::new();
    tasks.spawn(status_writer(m.clone()).in_current_span());
    tasks.spawn(lease_loop(m.clone()).in_current_span());
    let client = connect(&m).await;
    tasks.spawn(discovery_loop(m.clone(), client.clone()).in_current_span());
    tasks.spawn(definitions_loop(m.clone(), client.clone()).in_current_span());
    tasks.spawn(watch_loop::<Node>(m.clone(), client.clone()).in_current_span());
    tasks.spawn(watch_loop::<Pod>(m.clone(), client.clone()).in_current_span());
    probe_loop(&m, client).await;
}

/// Builds the member client, retrying every probe period; each failed attempt counts
/// as a failed probe (reason `InvalidConfig`, the message names the problem).
async fn connect(m: &Member) -> Client {
    let s = m.settings();
    loop {
        let spec = m.cluster.borrow().spec.clone();
        let attempt: Result<Client, CredentialsError> = m
            .shared
            .clients
            .connect(&m.shared.fed, &spec, s.federation_timeout)
            .await;
        match attempt {
            Ok(c) => return c,
            Err(e) => {
                tracing::warn!(error = %Report(&e), "member client not configured");
                m.shared
                    .metrics
                    .probe(&m.name, FailureKind::InvalidConfig.reason(), 0.0);
                m.record(Outcome::Failure {
                    kind: FailureKind::InvalidConfig,
                    message: report(&e),
                });
                tokio::time::sleep(s.probe_period).await;
            }
        }
    }
}

async fn probe_loop(m: &Member, client: Client) {
    let s = m.settings();
    let mut ticker = tokio::time::interval(s.probe_period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut path = HealthPath::default();
    loop {
        let scheduled = ticker.tick().await;
        let started = Instant::now();
        let outcome = prober::probe(&client, &mut path, s.probe_timeout).await;
        let result = match &outcome {
            Outcome::Success => "success",
            Outcome::Failure { kind, .. } => kind.reason(),
        };
        m.shared
            .metrics
            .probe(&m.name, result, started.elapsed().as_secs_f64());
        if let Outcome::Failure { message, .. } = &outcome {
            tracing::debug!(%result, %message, "probe failed");
        }
        let success = matches!(outcome, Outcome::Success);
        m.record(outcome);
        if success {
            m.succeeded.send_replace(Some(scheduled));
        }
    }
}

/// Renews the member's Lease after successful probes, at most once per renewal interval
/// ([`lease::renew_due`]). Its own task, so a slow federation write never delays a probe;
/// a failed renewal is retried at the next successful probe. A failing member's Lease is
/// not renewed and expires, which is what a reader of Leases expects.
async fn lease_loop(m: Arc<Member>) {
    let s = m.settings().clone();
    let seconds = lease::duration_seconds(s.probe_period);
    let interval = lease::renew_interval(seconds);
    let mut probes = m.succeeded.subscribe();
    let mut last: Option<tokio::time::Instant> = None;
    while probes.changed().await.is_ok() {
        let Some(at) = *probes.borrow_and_update() else {
            continue;
        };
        if !lease::renew_due(last, at, interval) {
            continue;
        }
        let now = jiff::Timestamp::now();
        let uid = m.uid.as_deref();
        // Boxed: the loop waits for probes nearly always, and a task is as large as its
        // largest state (the renewal's request, ~5 KB, times a thousand members).
        match Box::pin(lease::renew(
            &m.shared.fed,
            &m.name,
            uid,
            seconds,
            now,
            s.federation_timeout,
        ))
        .await
        {
            Ok(()) => {
                m.shared.metrics.lease_write("ok");
                last = Some(at);
            }
            Err(error) => {
                m.shared.metrics.lease_write("error");
                tracing::warn!(error = %Report(&error), "Lease renewal failed");
            }
        }
    }
}

async fn discovery_loop(m: Arc<Member>, client: Client) {
    let s = m.settings().clone();
    m.rediscover.notify_one();
    loop {
        tokio::select! {
            () = m.rediscover.notified() => {}
            () = tokio::time::sleep(s.discovery_period) => {}
        }
        if m.lock().probe.health == Health::NotReady {
            continue;
        }
        // Discovery walks every group-version: give it more than one probe's time.
        match discovery::discover(&client, s.probe_timeout * 10).await {
            Ok(d) => {
                let changed = {
                    let mut st = m.lock();
                    let changed = st.discovered.as_ref() != Some(&d);
                    st.discovered = Some(d);
                    changed
                };
                if changed {
                    m.dirty.notify_one();
                }
            }
            Err(error) => tracing::info!(error = %Report(&error), "discovery failed; will retry"),
        }
    }
}

/// Re-runs discovery whenever one of the member's CustomResourceDefinitions changes, so a
/// kind defined there (a CRD Meridian just copied in, or one the member's owners installed)
/// is in `apiEnablements`, and so placeable, within moments rather than at the next
/// periodic discovery. A metadata-only watch: a definition's establishment changes its
/// resourceVersion too. A re-list after a broken watch counts as a change, since one may
/// have been missed.
async fn definitions_loop(m: Arc<Member>, client: Client) {
    let api = Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client);
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut listed = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::InitDone) => {
                if listed {
                    m.rediscover.notify_one();
                }
                listed = true;
            }
            Ok(Event::Apply(_) | Event::Delete(_)) => m.rediscover.notify_one(),
            Ok(Event::Init | Event::InitApply(_)) => {}
            Err(error) => {
                tracing::debug!(error = %Report(&error), "definitions watch error; backing off")
            }
        }
    }
}

/// A member kind whose watch feeds the capacity tracker (one generic watch loop for both).
trait Watched: crate::fleet::Object + kube::Resource<DynamicType = ()> {
    /// Resource name, for logs and metrics.
    const RESOURCE: &'static str;
    /// A (re-)list begins.
    fn begin(t: &mut Tracker);
    /// An object was listed, added or modified.
    fn apply(t: &mut Tracker, obj: &Self) -> bool;
    /// An object was deleted.
    fn delete(t: &mut Tracker, obj: &Self) -> bool;
    /// The (re-)list is complete.
    fn finish(st: &mut State);
}

impl Watched for Node {
    const RESOURCE: &'static str = "nodes";
    fn begin(t: &mut Tracker) {
        t.begin_node_resync();
    }
    fn apply(t: &mut Tracker, n: &Node) -> bool {
        t.apply_node(&n.name_any(), extract::node_capacity(n))
    }
    fn delete(t: &mut Tracker, n: &Node) -> bool {
        t.remove_node(&n.name_any())
    }
    fn finish(st: &mut State) {
        st.tracker.finish_node_resync();
        st.nodes_synced = true;
    }
}

impl Watched for Pod {
    const RESOURCE: &'static str = "pods";
    fn begin(t: &mut Tracker) {
        t.begin_pod_resync();
    }
    fn apply(t: &mut Tracker, p: &Pod) -> bool {
        t.apply_pod(
            &p.namespace().unwrap_or_default(),
            &p.name_any(),
            extract::pod_placement(p),
        )
    }
    fn delete(t: &mut Tracker, p: &Pod) -> bool {
        t.remove_pod(&p.namespace().unwrap_or_default(), &p.name_any())
    }
    fn finish(st: &mut State) {
        st.tracker.finish_pod_resync();
        st.pods_synced = true;
    }
}

/// Longest a list holds its permit (see [`Settings::concurrent_lists`]); a healthy member
/// lists far faster, this only bounds what a stuck one can hold up.
const LIST_PERMIT_MAX: Duration = Duration::from_secs(10);

/// List once, then watch, for as long as the task lives. The kube watcher resumes from
/// its resourceVersion after errors (re-listing only when the server says 410 Gone),
/// with exponential backoff and jitter between attempts; this loop adds an idle
/// deadline and a fresh start after the member recovers from Offline.
async fn watch_loop<K: Watched>(m: Arc<Member>, client: Client) {
    let api = Api::<K>::all(client);
    let idle = m.settings().watch_idle_timeout;
    let config = watcher::Config::default().page_size(m.settings().list_page_size.max(1));
    let mut rewatch = m.rewatch.subscribe();
    loop {
        // Objects are reduced to numbers as they arrive and dropped; nothing keeps them.
        let stream = watcher::watcher(api.clone(), config.clone()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        // Held from the start of a (re-)list to its end, and given back early on errors
        // and after LIST_PERMIT_MAX, so a member that cannot list (or lists through a
        // hanging connection) does not hold up the others.
        let mut permit: Option<(OwnedSemaphorePermit, tokio::time::Instant)> = None;
        let cause = loop {
            let give_back = permit.as_ref().map(|p| p.1);
            let next = tokio::select! {
                changed = rewatch.changed() => {
                    if changed.is_err() { return; }
                    break "recovered";
                }
                () = tokio::time::sleep_until(give_back.unwrap_or_else(tokio::time::Instant::now)),
                    if give_back.is_some() => {
                    permit = None;
                    continue;
                }
                next = tokio::time::timeout(idle, stream.next()) => next,
            };
            let event = match next {
                Err(_) => break "idle",
                Ok(None) => break "ended",
                Ok(Some(Err(error))) => {
                    permit = None;
                    m.shared
                        .metrics
                        .watch_restart(&m.name, K::RESOURCE, "error");
                    tracing::debug!(error = %Report(&error), resource = K::RESOURCE, "watch error; backing off");
                    continue;
                }
                Ok(Some(Ok(event))) => event,
            };
            match &event {
                // The watcher announces a list before requesting its first page.
                Event::Init => {
                    let p = m.shared.lists.clone().acquire_owned().await.ok();
                    permit = p.map(|p| (p, tokio::time::Instant::now() + LIST_PERMIT_MAX));
                }
                Event::InitDone => permit = None,
                _ => {}
            }
            let changed = {
                let mut st = m.lock();
                match &event {
                    Event::Init => {
                        K::begin(&mut st.tracker);
                        false
                    }
                    Event::InitApply(o) => {
                        K::apply(&mut st.tracker, o);
                        false
                    }
                    Event::InitDone => {
                        K::finish(&mut st);
                        true
                    }
                    Event::Apply(o) => K::apply(&mut st.tracker, o),
                    Event::Delete(o) => K::delete(&mut st.tracker, o),
                }
            };
            if changed {
                m.dirty.notify_one();
            }
        };
        m.shared.metrics.watch_restart(&m.name, K::RESOURCE, cause);
        tracing::info!(resource = K::RESOURCE, cause, "restarting watch");
    }
}

/// Writes status when it changed, at most once per `status_min_interval`, and promptly
/// (no waiting) when the previous write is older than that.
async fn status_writer(m: Arc<Member>) {
    let s = m.settings().clone();
    let api: Api<Cluster> = Api::all(m.shared.fed.clone());
    let mut cluster = m.cluster.clone();
    let mut last_written: Owned = Owned::of(cluster.borrow().status.as_ref());
    let mut last_rv: Option<String> = None;
    let mut last_at: Option<tokio::time::Instant> = None;
    let mut failures: u32 = 0;
    loop {
        tokio::select! {
            () = m.dirty.notified() => {}
            changed = cluster.changed() => {
                if changed.is_err() { return; }
                // Our own write echoing back needs nothing; someone else's change to
                // the fields we own is put right.
                let obj = cluster.borrow_and_update().clone();
                if obj.resource_version() == last_rv {
                    continue;
                }
                last_written = Owned::of(obj.status.as_ref());
            }
        }
        if let Some(at) = last_at {
            tokio::time::sleep_until(at + s.status_min_interval).await;
        }
        let desired = m.desired();
        if !desired.differs_from(&last_written) {
            continue;
        }
        last_at = Some(tokio::time::Instant::now());
        let patch = desired.patch();
        let params = PatchParams::default();
        let merge = Patch::Merge(&patch);
        let write = api.patch_status(&m.name, &params, &merge);
        match tokio::time::timeout(s.federation_timeout, write).await {
            Ok(Ok(obj)) => {
                m.shared.metrics.status_write("ok");
                failures = 0;
                last_rv = obj.resource_version();
                last_written = desired;
            }
            outcome => {
                m.shared.metrics.status_write("error");
                let error = match outcome {
                    Ok(Err(e)) => report(&e),
                    _ => "timed out".to_string(),
                };
                failures = failures.saturating_add(1);
                let delay = Backoff::jittered(s.status_min_interval, Duration::from_secs(30))
                    .delay(failures);
                tracing::warn!(%error, retry_in = ?delay, "status write failed");
                tokio::time::sleep(delay).await;
                m.dirty.notify_one();
            }
        }
    }
}

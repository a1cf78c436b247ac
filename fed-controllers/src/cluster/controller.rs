//! The cluster controller's supervisor: watches Clusters and Secrets in the federation
//! and keeps exactly one member task per Cluster, restarted when its connection
//! settings or credentials change (credential rotation needs no process restart).

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;

use fed_api::{Cluster, ClusterSpec};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::events::Recorder;

use super::credentials;
use super::guard::{self, Board};
use super::lease;
use super::member::{self, MemberHandle, Settings, Shared};
use crate::member_client::{Limits, MemberClients};
use crate::metrics::Metrics;

/// Errors that end the controller.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A federation watch stream ended, which kube's watcher never does while healthy.
    #[error("the federation {0} watch ended")]
    WatchEnded(&'static str),
}

/// The controller's configuration.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Member task tunables.
    pub settings: Settings,
    /// Mass failure when strictly more than this share of members is Offline.
    pub mass_failure_share: f64,
    /// Member clients; share one with the other controllers so each member costs one
    /// connection per process.
    pub clients: Arc<MemberClients>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            settings: Settings::default(),
            mass_failure_share: 0.5,
            clients: MemberClients::new(member_limits(&Settings::default())),
        }
    }
}

/// `namespace/name` of a Secret.
type SecretKey = (String, String);

/// A stable digest of everything a member client is built from: endpoint, CA bundle,
/// Secret reference and the Secret's token (as a digest, so no token is kept here).
pub fn fingerprint(spec: &ClusterSpec, token_digest: Option<u64>) -> u64 {
    let mut h = DefaultHasher::new();
    spec.api_endpoint.hash(&mut h);
    spec.ca_bundle.hash(&mut h);
    spec.secret_ref
        .as_ref()
        .map(|r| (&r.namespace, &r.name))
        .hash(&mut h);
    token_digest.hash(&mut h);
    h.finish()
}

/// A digest of a credentials Secret's token (so fingerprints never hold the token itself).
pub fn token_digest(secret: &Secret) -> u64 {
    let mut h = DefaultHasher::new();
    credentials::token_of(secret).hash(&mut h);
    h.finish()
}

/// What to do with a member task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start one.
    Start,
    /// Stop the running one and start another with the new settings.
    Restart,
    /// Keep it, handing it the latest object.
    Keep,
}

/// Decides a member task's fate from its running fingerprint and the desired one.
pub fn action(running: Option<u64>, desired: u64) -> Action {
    match running {
        None => Action::Start,
        Some(r) if r != desired => Action::Restart,
        Some(_) => Action::Keep,
    }
}

/// One item from either federation watch (boxed: Cluster and Secret events differ in size).
enum Input {
    Cluster(Box<Result<Event<Cluster>, watcher::Error>>),
    Secret(Box<Result<Event<Secret>, watcher::Error>>),
}

/// The supervisor's state.
struct Supervisor {
    shared: Shared,
    members: HashMap<String, MemberHandle>,
    /// Clusters seen before both initial lists completed, and during re-lists.
    pending: HashMap<String, Arc<Cluster>>,
    secrets: HashMap<SecretKey, u64>,
    cluster_relist: Option<HashSet<String>>,
    secret_relist: Option<HashSet<SecretKey>>,
    clusters_synced: bool,
    secrets_synced: bool,
}

impl Supervisor {
    fn synced(&self) -> bool {
        self.clusters_synced && self.secrets_synced
    }

    fn desired_fingerprint(&self, c: &Cluster) -> u64 {
        let digest = c.spec.secret_ref.as_ref().and_then(|r| {
            self.secrets
                .get(&(r.namespace.clone(), r.name.clone()))
                .copied()
        });
        fingerprint(&c.spec, digest)
    }

    fn reconcile(&mut self, c: Arc<Cluster>) {
        let name = c.name_any();
        if !self.synced() {
            self.pending.insert(name, c);
            return;
        }
        let desired = self.desired_fingerprint(&c);
        match action(self.members.get(&name).map(|h| h.fingerprint), desired) {
            Action::Keep => {
                if let Some(h) = self.members.get(&name) {
                    h.update(c);
                }
            }
            a => {
                tracing::info!(cluster = %name, action = ?a, "member task");
                // Dropping the old handle aborts the old task and everything it spawned.
                self.members
                    .insert(name, member::spawn(self.shared.clone(), c, desired));
            }
        }
    }

    fn stop(&mut self, name: &str) {
        if self.members.remove(name).is_some() {
            tracing::info!(cluster = %name, "member task stopped");
        }
        self.pending.remove(name);
        self.shared.board.remove(name);
        self.shared.metrics.forget_cluster(name);
    }

    /// Re-checks every Cluster that references the Secret.
    fn secret_changed(&mut self, key: &SecretKey) {
        let affected: Vec<Arc<Cluster>> = self
            .members
            .values()
            .map(MemberHandle::cluster)
            .filter(|c| {
                c.spec
                    .secret_ref
                    .as_ref()
                    .is_some_and(|r| r.namespace == key.0 && r.name == key.1)
            })
            .collect();
        for c in affected {
            self.reconcile(c);
        }
    }

    fn on_cluster(&mut self, ev: Event<Cluster>) {
        match ev {
            Event::Init => self.cluster_relist = Some(HashSet::new()),
            Event::InitApply(c) => {
                if let Some(seen) = self.cluster_relist.as_mut() {
                    seen.insert(c.name_any());
                }
                self.pending.insert(c.name_any(), Arc::new(c));
            }
            Event::InitDone => {
                let seen = self.cluster_relist.take().unwrap_or_default();
                let gone: Vec<String> = self
                    .members
                    .keys()
                    .filter(|n| !seen.contains(*n))
                    .cloned()
                    .collect();
                for n in gone {
                    self.stop(&n);
                }
                self.clusters_synced = true;
                self.flush();
            }
            Event::Apply(c) => self.reconcile(Arc::new(c)),
            Event::Delete(c) => self.stop(&c.name_any()),
        }
    }

    fn on_secret(&mut self, ev: Event<Secret>) {
        let key = |s: &Secret| (s.namespace().unwrap_or_default(), s.name_any());
        match ev {
            Event::Init => self.secret_relist = Some(HashSet::new()),
            Event::InitApply(s) => {
                let k = key(&s);
                let changed =
                    self.secrets.insert(k.clone(), token_digest(&s)) != Some(token_digest(&s));
                if let Some(seen) = self.secret_relist.as_mut() {
                    seen.insert(k.clone());
                }
                if changed && self.synced() {
                    self.secret_changed(&k);
                }
            }
            Event::InitDone => {
                let seen = self.secret_relist.take().unwrap_or_default();
                let gone: Vec<SecretKey> = self
                    .secrets
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    self.secrets.remove(&k);
                    if self.synced() {
                        self.secret_changed(&k);
                    }
                }
                self.secrets_synced = true;
                self.flush();
            }
            Event::Apply(s) => {
                let k = key(&s);
                let d = token_digest(&s);
                if self.secrets.insert(k.clone(), d) != Some(d) {
                    self.secret_changed(&k);
                }
            }
            Event::Delete(s) => {
                let k = key(&s);
                if self.secrets.remove(&k).is_some() {
                    self.secret_changed(&k);
                }
            }
        }
    }

    /// Once both lists are in, (re)starts members for every Cluster held back.
    fn flush(&mut self) {
        if !self.synced() {
            return;
        }
        let pending: Vec<Arc<Cluster>> = self.pending.drain().map(|(_, c)| c).collect();
        for c in pending {
            self.reconcile(c);
        }
        self.shared.board.mark_synced();
    }
}

/// Member connection limits derived from the probe settings: connecting counts against
/// the probe's deadline, and a connection whose peer vanished is noticed within about two
/// probe periods (probes themselves time out sooner; this frees the dead connection).
pub fn member_limits(s: &Settings) -> Limits {
    Limits {
        connect_timeout: s.probe_timeout,
        keep_alive_interval: s.probe_period.max(Duration::from_secs(1)),
        keep_alive_timeout: s.probe_period.max(s.probe_timeout),
        ..Limits::default()
    }
}

/// Runs the cluster controller until the federation watches fail for good (they retry
/// with backoff, so in practice until the task is dropped).
pub async fn run(
    fed: Client,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    events: Recorder,
    ready: Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), ControllerError> {
    let events = events.for_component(super::events::COMPONENT);
    super::events::ensure_namespace(fed.clone(), super::events::CLUSTER_EVENT_NAMESPACE).await;
    super::events::ensure_namespace(fed.clone(), lease::NAMESPACE).await;
    let board = Arc::new(Board::default());
    let shared = Shared {
        fed: fed.clone(),
        settings: Arc::new(config.settings.clone()),
        metrics: metrics.clone(),
        board: board.clone(),
        clients: config.clients.clone(),
        lists: Arc::new(tokio::sync::Semaphore::new(
            config.settings.concurrent_lists.max(1),
        )),
        events: events.clone(),
    };
    let guard_task = tokio::spawn(guard::run(
        fed.clone(),
        board,
        config.mass_failure_share,
        Duration::from_secs(1),
        metrics,
        events,
    ));
    let _guard = AbortOnDropHandle::new(guard_task);

    let clusters = watcher::watcher(Api::<Cluster>::all(fed.clone()), watcher::Config::default())
        .default_backoff()
        .map(|e| Input::Cluster(Box::new(e)));
    let secrets = watcher::watcher(Api::<Secret>::all(fed), watcher::Config::default())
        .default_backoff()
        .map(|e| Input::Secret(Box::new(e)));
    let mut inputs = std::pin::pin!(futures::stream::select(clusters, secrets));

    let mut sup = Supervisor {
        shared,
        members: HashMap::new(),
        pending: HashMap::new(),
        secrets: HashMap::new(),
        cluster_relist: None,
        secret_relist: None,
        clusters_synced: false,
        secrets_synced: false,
    };
    while let Some(input) = inputs.next().await {
        match input {
            Input::Cluster(r) => match *r {
                Ok(ev) => sup.on_cluster(ev),
                Err(error) => {
                    tracing::warn!(error = %Report(&error), "federation Cluster watch failed; retrying")
                }
            },
            Input::Secret(r) => match *r {
                Ok(ev) => sup.on_secret(ev),
                Err(error) => {
                    tracing::warn!(error = %Report(&error), "federation Secret watch failed; retrying")
                }
            },
        }
        if sup.synced() {
            ready.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    Err(ControllerError::WatchEnded("Cluster/Secret"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fed_api::common::NamespacedName;

    fn spec(ep: &str, secret: &str) -> ClusterSpec {
        ClusterSpec {
            api_endpoint: ep.into(),
            ca_bundle: Some("Y2E=".into()),
            secret_ref: Some(NamespacedName {
                namespace: "meridian-system".into(),
                name: secret.into(),
            }),
            region: Some("eu".into()),
            ..Default::default()
        }
    }

    #[test]
    fn lifecycle_table() {
        let base = fingerprint(&spec("https://a", "s"), Some(1));
        let mut relabelled = spec("https://a", "s");
        relabelled.region = Some("us".into());
        relabelled.taints.push(fed_api::cluster::Taint {
            key: "k".into(),
            value: None,
            effect: fed_api::cluster::TaintEffect::NoSchedule,
        });
        let cases = [
            ("new cluster", None, base, Action::Start),
            ("same settings", Some(base), base, Action::Keep),
            (
                "region/taints do not restart",
                Some(base),
                fingerprint(&relabelled, Some(1)),
                Action::Keep,
            ),
            (
                "endpoint change restarts",
                Some(base),
                fingerprint(&spec("https://b", "s"), Some(1)),
                Action::Restart,
            ),
            (
                "secret ref change restarts",
                Some(base),
                fingerprint(&spec("https://a", "t"), Some(1)),
                Action::Restart,
            ),
            (
                "rotated token restarts",
                Some(base),
                fingerprint(&spec("https://a", "s"), Some(2)),
                Action::Restart,
            ),
            (
                "deleted secret restarts",
                Some(base),
                fingerprint(&spec("https://a", "s"), None),
                Action::Restart,
            ),
        ];
        for (name, running, desired, want) in cases {
            assert_eq!(action(running, desired), want, "{name}");
        }
    }
}

//! The member tasks of one controller, one per Cluster: started when a Cluster appears,
//! restarted when its connection or credentials change, stopped when it goes; each
//! connects with backoff; and the one cleanup step both controllers take when a federated
//! object is deleted (every member that may hold a copy is told to remove it).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fed_api::Cluster;
use fed_api::common::NamespacedName;
use kube::ResourceExt;
use meridian_runtime::error::Report;
use meridian_runtime::sync::lock;
use tokio::task::JoinHandle;

use super::{Answering, Settings};
use crate::cluster::controller::fingerprint;
use crate::member_sync::{self, SyncError};

/// A running member task. Dropping it stops the task and everything the task started.
pub struct Handle<M> {
    task: JoinHandle<()>,
    /// What the member shares with central.
    pub shared: Arc<M>,
    /// Fingerprint of the connection settings it was started with.
    pub fingerprint: u64,
}

impl<M> Handle<M> {
    /// A handle of the member task `task`, started with connection `fingerprint`.
    pub fn new(task: JoinHandle<()>, shared: Arc<M>, fingerprint: u64) -> Self {
        Self {
            task,
            shared,
            fingerprint,
        }
    }
}

impl<M> Drop for Handle<M> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One controller's member tasks, keyed by cluster name.
pub struct Fleet<M> {
    members: Mutex<HashMap<String, Handle<M>>>,
}

impl<M> Default for Fleet<M> {
    fn default() -> Self {
        Self {
            members: Mutex::default(),
        }
    }
}

impl<M> Fleet<M> {
    /// Every running member.
    pub fn shared(&self) -> Vec<Arc<M>> {
        lock(&self.members)
            .values()
            .map(|h| h.shared.clone())
            .collect()
    }

    /// The member of cluster `name`, if one runs.
    pub fn get(&self, name: &str) -> Option<Arc<M>> {
        lock(&self.members).get(name).map(|h| h.shared.clone())
    }

    /// Starts, restarts or stops member tasks to match `clusters` and their credentials
    /// (`token_digest` of a credentials Secret, `None` while it is not cached); `spawn`
    /// starts one for a Cluster with its connection fingerprint. Says whether any member
    /// was started or stopped.
    pub fn sync(
        &self,
        controller: &str,
        clusters: Vec<Arc<Cluster>>,
        token_digest: impl Fn(&NamespacedName) -> Option<u64>,
        mut spawn: impl FnMut(Arc<Cluster>, u64) -> Handle<M>,
    ) -> bool {
        let mut members = lock(&self.members);
        let before = members.len();
        // A set, not a scan per member: called on every Cluster event, with a thousand
        // members a scan each made this a million comparisons.
        let wanted: HashSet<&str> = clusters
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        members.retain(|name, _| wanted.contains(name.as_str()));
        let mut changed = members.len() != before;
        for c in clusters {
            let digest = c.spec.secret_ref.as_ref().and_then(&token_digest);
            let fp = fingerprint(&c.spec, digest);
            let name = c.name_any();
            if members.get(&name).is_some_and(|h| h.fingerprint == fp) {
                continue;
            }
            tracing::info!(cluster = %name, "{controller} member task (re)started");
            members.insert(name, spawn(c, fp));
            changed = true;
        }
        changed
    }
}

/// Namespaces known to exist in one member: Meridian removes none, so each is asked for
/// once, by the first write into it.
#[derive(Default)]
pub struct KnownNamespaces(Mutex<HashSet<String>>);

impl KnownNamespaces {
    /// Runs `make` (which makes sure `ns` exists) unless `ns` is known to exist; known
    /// from then on if it succeeds.
    pub async fn ensure<E, F>(&self, ns: &str, make: impl FnOnce() -> F) -> Result<(), E>
    where
        F: Future<Output = Result<(), E>>,
    {
        if lock(&self.0).contains(ns) {
            return Ok(());
        }
        make().await?;
        lock(&self.0).insert(ns.to_owned());
        Ok(())
    }
}

/// A member's connection: made once per member task, retried with backoff until it
/// works (until then, why not is the member's error for everything it reports); and the
/// deadline every request to the member runs under.
pub struct Connection {
    cluster: String,
    timeout: Duration,
    error: Mutex<Option<String>>,
    /// Namespaces known to exist in the member.
    namespaces: KnownNamespaces,
    /// Whether the member answered this path's last request.
    answering: Answering,
}

impl Connection {
    /// The connection to member `cluster`, not made yet.
    pub fn new(cluster: String, settings: &Settings) -> Self {
        Self {
            cluster,
            timeout: settings.sync_timeout,
            error: Mutex::default(),
            namespaces: KnownNamespaces::default(),
            answering: Answering::default(),
        }
    }

    /// Whether the member answered the last request made through this connection.
    pub fn answering(&self) -> &Answering {
        &self.answering
    }

    /// Makes sure namespace `ns` exists in the member (see
    /// [`member_sync::ensure_namespace`]), asking the member only the first time.
    pub async fn ensure_namespace(
        &self,
        client: &kube::Client,
        ns: &str,
        record_create: impl FnOnce(&str, f64),
    ) -> Result<(), SyncError> {
        self.namespaces
            .ensure(ns, || async {
                let r = member_sync::ensure_namespace(
                    client,
                    &self.cluster,
                    self.timeout,
                    ns,
                    record_create,
                )
                .await;
                self.answering.heard(&r);
                r
            })
            .await
    }

    /// Runs one member request with the deadline; the error names the operation and
    /// the member.
    pub async fn timed<T>(
        &self,
        op: &str,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, SyncError> {
        let r = member_sync::timed(&self.cluster, self.timeout, op, f).await;
        self.answering.heard(&r);
        r
    }

    /// Connects to `cluster`, retrying with the settings' backoff until it works;
    /// `failed` runs after each failure (the member reports the new error).
    pub async fn connect(
        &self,
        settings: &Settings,
        fed: &kube::Client,
        cluster: &Cluster,
        failed: impl Fn(),
    ) -> kube::Client {
        let backoff = settings.backoff();
        let mut attempt = 0;
        loop {
            match settings
                .clients
                .connect(fed, &cluster.spec, settings.sync_timeout)
                .await
            {
                Ok(c) => {
                    *lock(&self.error) = None;
                    return c;
                }
                Err(e) => {
                    attempt += 1;
                    tracing::warn!(error = %Report(&e), "member client not configured; retrying");
                    *lock(&self.error) = Some(format!("not connected: {}", Report(&e)));
                    failed();
                    tokio::time::sleep(backoff.delay(attempt)).await;
                }
            }
        }
    }

    /// The error of a sync that has none of its own: why the member is not connected.
    pub fn error_or(&self, sync_error: String) -> String {
        match (&*lock(&self.error), sync_error.is_empty()) {
            (Some(e), true) => e.clone(),
            _ => sync_error,
        }
    }
}

/// Tells every member that holds, or may hold, a copy of a deleted object to remove it:
/// `members` by cluster name, `holds` whether one holds a copy (`None` while unknown),
/// `remove` tells it to. The answer names those members (empty once every copy is known
/// gone).
pub fn remove_copies<'a, M: 'a>(
    members: impl IntoIterator<Item = (&'a str, &'a M)>,
    holds: impl Fn(&M) -> Option<bool>,
    remove: impl Fn(&M),
) -> Vec<String> {
    let mut pending = Vec::new();
    for (name, m) in members {
        if holds(m) != Some(false) {
            remove(m);
            pending.push(name.to_string());
        }
    }
    pending
}

/// The Event reason and message once a deleted object's member copies are dealt with:
/// left in place (`orphan`), or removed (`removed` says what was).
pub fn cleaned(orphan: bool, removed: &'static str) -> (&'static str, &'static str) {
    if orphan {
        (
            "Orphaned",
            "member copies left in place (propagationPolicy=Orphan)",
        )
    } else {
        ("MembersCleaned", removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_namespace_is_asked_for_until_it_is_made_then_never_again() {
        let known = KnownNamespaces::default();
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let ask = |ok: bool| {
            asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            async move { if ok { Ok(()) } else { Err("forbidden") } }
        };
        assert_eq!(known.ensure("shop", || ask(false)).await, Err("forbidden"));
        assert_eq!(known.ensure("shop", || ask(true)).await, Ok(()));
        assert_eq!(known.ensure("shop", || ask(false)).await, Ok(()));
        assert_eq!(known.ensure("other", || ask(true)).await, Ok(()));
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[test]
    fn members_that_hold_or_may_hold_a_copy_are_told_and_waited_for() {
        let members = [("a", Some(true)), ("b", None), ("c", Some(false))];
        let removed = Mutex::new(Vec::new());
        let pending = remove_copies(
            members.iter().map(|(n, h)| (*n, h)),
            |h| *h,
            |h| lock(&removed).push(*h),
        );
        assert_eq!(pending, ["a", "b"]);
        assert_eq!(
            *lock(&removed),
            [Some(true), None],
            "c is known not to hold one"
        );
        let gone = [("c", Some(false))];
        assert!(remove_copies(gone.iter().map(|(n, h)| (*n, h)), |h| *h, |_| {}).is_empty());
    }

    #[test]
    fn cleanup_reasons() {
        assert_eq!(cleaned(true, "x").0, "Orphaned");
        assert_eq!(cleaned(false, "x"), ("MembersCleaned", "x"));
    }

    fn cluster(name: &str, endpoint: &str) -> Arc<Cluster> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {"apiEndpoint": endpoint}
            }))
            .expect("cluster"),
        )
    }

    #[tokio::test]
    async fn members_follow_the_clusters_and_their_connection_settings() {
        let fleet: Fleet<String> = Fleet::default();
        let started = Mutex::new(Vec::new());
        let sync = |clusters: Vec<Arc<Cluster>>| {
            fleet.sync(
                "test",
                clusters,
                |_| None,
                |c, fp| {
                    lock(&started).push(c.name_any());
                    Handle::new(tokio::spawn(async {}), Arc::new(c.name_any()), fp)
                },
            )
        };
        assert!(sync(vec![
            cluster("a", "https://a"),
            cluster("b", "https://b")
        ]));
        assert!(!sync(vec![
            cluster("a", "https://a"),
            cluster("b", "https://b")
        ]));
        assert!(sync(vec![cluster("a", "https://a2")]), "b gone, a moved");
        assert_eq!(*lock(&started), ["a", "b", "a"]);
        assert_eq!(fleet.shared(), [Arc::new("a".to_string())]);
        assert!(fleet.get("b").is_none());
    }
}

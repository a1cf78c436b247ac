//! Mass-failure guard: when too many members are Offline at once, it is more likely our
//! network than theirs, so the scheduler must stop failing workloads over.
//!
//! [`evaluate`] is the pure decision; [`run`] publishes it as the ConfigMap
//! `meridian-system/federation-status` (read by the scheduler) plus an Event.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use meridian_runtime::error::Report;
use meridian_runtime::events::{EventType, Recorder};
use meridian_runtime::namespace;
use meridian_runtime::sync::lock;
use tokio::sync::Notify;

use super::events;
use crate::metrics::Metrics;

/// Name of the ConfigMap the guard writes (in [`fed_api::names::SYSTEM_NAMESPACE`]).
pub const STATUS_CONFIGMAP: &str = "federation-status";
/// Key set to `"true"` / `"false"`.
pub const MASS_FAILURE_KEY: &str = "massFailure";
/// Key holding the comma-separated, sorted names of Offline clusters.
pub const OFFLINE_CLUSTERS_KEY: &str = "offlineClusters";

/// Errors publishing the guard's verdict.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The federation API rejected or failed a write.
    #[error("writing {what}")]
    Write {
        /// What was being written.
        what: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The federation API did not answer in time.
    #[error("writing {0}: timed out")]
    Timeout(&'static str),
}

/// Whether the federation is in mass failure: strictly more than `share` of the members
/// are Offline, and at least two of them (one dead cluster is never "mass", whatever
/// the share).
pub fn evaluate(offline: usize, total: usize, share: f64) -> bool {
    total > 0 && offline >= 2 && (offline as f64) > share * (total as f64)
}

/// Which members are Offline right now, shared by the member tasks (writers) and the
/// guard loop (reader).
#[derive(Debug, Default)]
pub struct Board {
    members: Mutex<BTreeMap<String, bool>>,
    changed: Notify,
    synced: std::sync::atomic::AtomicBool,
}

impl Board {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        lock(&self.members)
    }

    /// Sets a member's Offline flag (adding the member if new).
    pub fn set(&self, cluster: &str, offline: bool) {
        let prev = self.lock().insert(cluster.to_string(), offline);
        if prev != Some(offline) {
            self.changed.notify_one();
        }
    }

    /// Forgets a deleted member.
    pub fn remove(&self, cluster: &str) {
        if self.lock().remove(cluster).is_some() {
            self.changed.notify_one();
        }
    }

    /// Marks the initial list of Clusters as complete: only then is a verdict meaningful.
    pub fn mark_synced(&self) {
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
        self.changed.notify_one();
    }

    /// `(offline names, total members)`.
    pub fn snapshot(&self) -> (BTreeSet<String>, usize) {
        let m = self.lock();
        (
            m.iter()
                .filter(|(_, o)| **o)
                .map(|(n, _)| n.clone())
                .collect(),
            m.len(),
        )
    }
}

/// What the guard last published.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Verdict {
    mass_failure: bool,
    offline: BTreeSet<String>,
}

/// Publishes the verdict whenever it changes, until the task is dropped. Changes are
/// batched over `settle` so a failure hitting many members at once yields one write.
pub async fn run(
    client: Client,
    board: Arc<Board>,
    share: f64,
    settle: Duration,
    metrics: Arc<Metrics>,
    recorder: Recorder,
) {
    let mut published: Option<Verdict> = None;
    loop {
        board.changed.notified().await;
        if !board.synced.load(std::sync::atomic::Ordering::Acquire) {
            continue;
        }
        tokio::time::sleep(settle).await;
        let (offline, total) = board.snapshot();
        let verdict = Verdict {
            mass_failure: evaluate(offline.len(), total, share),
            offline,
        };
        metrics.set_fleet(total, verdict.offline.len(), verdict.mass_failure);
        if published.as_ref() == Some(&verdict) {
            continue;
        }
        match publish(&client, &recorder, &verdict, published.as_ref(), total).await {
            Ok(()) => published = Some(verdict),
            Err(error) => {
                tracing::warn!(error = %Report(&error), "publishing federation status failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                board.changed.notify_one();
            }
        }
    }
}

const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

async fn timed<T>(
    what: &'static str,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, GuardError> {
    match tokio::time::timeout(WRITE_TIMEOUT, f).await {
        Ok(r) => r.map_err(|source| GuardError::Write { what, source }),
        Err(_) => Err(GuardError::Timeout(what)),
    }
}

fn is_status(e: &GuardError, code: u16) -> bool {
    matches!(e, GuardError::Write { source: kube::Error::Api(s), .. } if s.code == code)
}

async fn publish(
    client: &Client,
    recorder: &Recorder,
    v: &Verdict,
    prev: Option<&Verdict>,
    total: usize,
) -> Result<(), GuardError> {
    let ns = fed_api::names::SYSTEM_NAMESPACE;
    let offline = v.offline.iter().cloned().collect::<Vec<_>>().join(",");
    let data = BTreeMap::from([
        (MASS_FAILURE_KEY.to_string(), v.mass_failure.to_string()),
        (OFFLINE_CLUSTERS_KEY.to_string(), offline.clone()),
    ]);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({ "data": data });
    let patched = timed(
        "ConfigMap",
        api.patch(
            STATUS_CONFIGMAP,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ),
    )
    .await;
    let cm = match patched {
        Ok(cm) => cm,
        Err(e) if is_status(&e, 404) => {
            let namespace = namespace::named(ns, []);
            timed("Namespace", namespace::ensure(client, &namespace)).await?;
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(STATUS_CONFIGMAP.into()),
                    namespace: Some(ns.into()),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            timed("ConfigMap", api.create(&PostParams::default(), &cm)).await?
        }
        Err(e) => return Err(e),
    };
    let was = prev.is_some_and(|p| p.mass_failure);
    if v.mass_failure != was && (v.mass_failure || prev.is_some()) {
        tracing::warn!(mass_failure = v.mass_failure, offline = %offline, total, "mass-failure state changed");
        let (reason, type_, message) = if v.mass_failure {
            (
                "MassFailure",
                EventType::Warning,
                format!(
                    "{} of {total} member clusters Offline: {offline}; failovers paused",
                    v.offline.len()
                ),
            )
        } else {
            (
                "MassFailureResolved",
                EventType::Normal,
                format!("{} of {total} member clusters Offline", v.offline.len()),
            )
        };
        recorder.record(events::for_config_map(&cm, reason, type_, &message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_table() {
        // (offline, total, share, mass failure)
        let cases = [
            (0, 0, 0.5, false),
            (1, 1, 0.5, false), // one cluster is never mass
            (1, 2, 0.5, false),
            (2, 2, 0.5, true),
            (2, 4, 0.5, false), // exactly half is not "more than"
            (3, 4, 0.5, true),
            (2, 3, 0.5, true),
            (1, 3, 0.2, false), // below two
            (2, 10, 0.1, true),
            (5, 10, 0.9, false),
        ];
        for (offline, total, share, want) in cases {
            assert_eq!(
                evaluate(offline, total, share),
                want,
                "{offline}/{total} share {share}"
            );
        }
    }

    #[test]
    fn board_tracks_members() {
        let b = Board::default();
        b.set("a", true);
        b.set("b", false);
        b.set("c", true);
        b.remove("c");
        let (offline, total) = b.snapshot();
        assert_eq!(
            (offline.into_iter().collect::<Vec<_>>(), total),
            (vec!["a".to_string()], 2)
        );
    }
}

//! One workload's turn: read the caches, decide with the pure core, rate-limit evictions,
//! write the Placement where it differs, and say when to look again.
//!
//! Reads come from the index and the Placement reflector, never from the API. Because the
//! reflector lags our own writes by a watch round trip, the Placement each write returned
//! is remembered until the cache has caught up (or moved past it), so a quick second turn
//! neither re-creates the Placement nor writes status over a stale resourceVersion.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fed_api::Placement;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use meridian_runtime::events::{EventSpec, EventType, Recorder};
use meridian_runtime::sync::lock;

use crate::explain::{self, Outcome};
use crate::policy_match::govern;
use crate::schedule;
use crate::types::{TargetCluster, UnschedulableReason, UnschedulableStatus};

use super::desired::{self, Plan, SCHEDULED};
use super::evictions::Evictions;
use super::index::Index;
use super::key::WorkloadKey;
use super::metrics::Metrics;
use super::writer::{WriteError, Writer};

/// Why a turn failed (the worker retries it with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A Placement write failed.
    #[error("writing placement {placement}")]
    Write {
        /// `namespace/name` of the Placement.
        placement: String,
        /// What went wrong.
        #[source]
        source: WriteError,
    },
}

/// What a turn did and when to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    /// `unchanged`, `written` or `gone` (for metrics).
    pub result: &'static str,
    /// Look again after this long (toleration expiry, throttled eviction).
    pub requeue: Option<Duration>,
}

#[derive(Debug)]
struct Written {
    /// resourceVersion the cache showed when we wrote (`None`: absent).
    base: Option<String>,
    obj: Arc<Placement>,
}

/// Whether a cache showing `cached_rv` has caught up with write `w`: it shows the written
/// version, or any version other than the one the write was based on (it moved past).
fn caught_up(w: &Written, cached_rv: Option<&str>) -> bool {
    let written_rv = w.obj.metadata.resource_version.as_deref();
    (cached_rv.is_some() && cached_rv == written_rv) || cached_rv != w.base.as_deref()
}

/// Decides and writes; shared by every worker.
pub struct Reconciler {
    index: Arc<Index>,
    placements: Store<Placement>,
    writer: Writer,
    events: Recorder,
    evictions: Arc<Evictions>,
    recent: Mutex<HashMap<WorkloadKey, Written>>,
    metrics: Arc<Metrics>,
}

fn unix_seconds(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn scheduled_condition(p: &Placement) -> Option<(&str, &str)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == SCHEDULED)
        .map(|c| (c.reason.as_str(), c.message.as_str()))
}

fn dest_text(dest: &[TargetCluster]) -> String {
    if dest.is_empty() {
        return "none".to_owned();
    }
    dest.iter()
        .map(|t| format!("{}:{}", t.cluster, t.replicas))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Reconciler {
    /// A reconciler over these caches and clients.
    pub fn new(
        index: Arc<Index>,
        placements: Store<Placement>,
        writer: Writer,
        events: Recorder,
        evictions: Arc<Evictions>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            index,
            placements,
            writer,
            events,
            evictions,
            recent: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, HashMap<WorkloadKey, Written>> {
        lock(&self.recent)
    }

    /// Drops what we remember writing for `key` (its Placement was deleted or a write
    /// conflicted), so the next turn trusts the cache.
    pub fn forget_written(&self, key: &WorkloadKey) {
        self.recent().remove(key);
    }

    /// The Placement as the cache shows it, or as we last wrote it if the cache has not
    /// caught up yet; and the cache's resourceVersion.
    fn current(&self, key: &WorkloadKey) -> (Option<Arc<Placement>>, Option<String>) {
        let r = ObjectRef::new(&key.placement_name()).within(&key.namespace);
        let cached = self.placements.get(&r);
        let cached_rv = cached.as_ref().and_then(|p| p.resource_version());
        let mut recent = self.recent();
        if let Some(w) = recent.get(key) {
            if !caught_up(w, cached_rv.as_deref()) {
                return (Some(w.obj.clone()), cached_rv);
            }
            recent.remove(key);
        }
        (cached, cached_rv)
    }

    /// Forgets what we wrote for `key` once the cache shows that write or a later version:
    /// called on each Placement watch event, so what is remembered lasts a watch round
    /// trip, not until the key's next turn (which may never come).
    pub fn settle(&self, key: &WorkloadKey) {
        let r = ObjectRef::new(&key.placement_name()).within(&key.namespace);
        let cached_rv = self.placements.get(&r).and_then(|p| p.resource_version());
        let mut recent = self.recent();
        if recent
            .get(key)
            .is_some_and(|w| caught_up(w, cached_rv.as_deref()))
        {
            recent.remove(key);
        }
    }

    fn remember(
        &self,
        key: &WorkloadKey,
        base: Option<String>,
        mut obj: Placement,
    ) -> Arc<Placement> {
        desired::slim(&mut obj);
        let obj = Arc::new(obj);
        self.recent().insert(
            key.clone(),
            Written {
                base,
                obj: obj.clone(),
            },
        );
        obj
    }

    /// One turn for `key`.
    pub async fn reconcile(&self, key: &WorkloadKey) -> Result<Reconciled, ReconcileError> {
        let Some(entry) = self.index.workload(key) else {
            // Deleted: the API server's garbage collector removes the owned Placement.
            self.forget_written(key);
            return Ok(Reconciled {
                result: "gone",
                requeue: None,
            });
        };
        let now = SystemTime::now();
        let now_unix = unix_seconds(now);
        let (current, cached_rv) = self.current(key);
        let previous: Vec<TargetCluster> = current
            .as_ref()
            .map(|p| desired::dest(&p.spec.dest_clusters))
            .unwrap_or_default();

        let mut requeue: Option<Duration> = None;
        let mut choice = None;
        let (dest, outcome, unschedulable, wanting) = match &entry.workload {
            Err(problem) => (
                Vec::new(),
                Outcome {
                    scheduled: false,
                    reason: "InvalidWorkload",
                    message: problem.clone(),
                },
                UnschedulableStatus::default(),
                false,
            ),
            Ok(w) => {
                let guarded = self.index.mass_failure();
                let policies = self.index.policies(&key.namespace);
                let cluster_policies = self.index.cluster_policies();
                let governance = govern(&policies, &cluster_policies, w);
                choice = governance.as_ref().map(|g| g.choice());
                let policy = governance.map(|g| g.winner.policy);
                let snapshot = self.index.snapshot(now_unix, guarded);
                let mut result = schedule(&snapshot, w, policy, Some(&previous));
                if !guarded
                    && !explain::evictions(&result, &previous).is_empty()
                    && let Err(wait) = self.evictions.admit()
                {
                    // Over the eviction rate: decide as if evictions were paused and come
                    // back when a token is due.
                    let held = self.index.snapshot(now_unix, true);
                    result = schedule(&held, w, policy, Some(&previous));
                    requeue = Some(wait);
                }
                if let Some(secs) = explain::toleration_expiry(&result) {
                    // The core counts whole seconds on the snapshot's clock.
                    let due = UNIX_EPOCH
                        + Duration::from_secs(u64::try_from(now_unix).unwrap_or(0) + secs);
                    let wait = due.duration_since(now).unwrap_or_default();
                    requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
                }
                let wanting = match &result {
                    Ok(d) => d.unschedulable.replicas > 0,
                    Err(u) => matches!(
                        u.reason,
                        UnschedulableReason::NoCandidates
                            | UnschedulableReason::SpreadUnsatisfiable { .. }
                    ),
                };
                (
                    explain::dest_clusters(&result),
                    explain::outcome(&result),
                    explain::unschedulable(&result, w.replicas),
                    wanting,
                )
            }
        };

        let want = desired::desired(key, &entry.uid, &dest, outcome, &unschedulable, choice);
        let stamp = jiff::Timestamp::now();
        let now_text = stamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let before_condition = current
            .as_deref()
            .and_then(scheduled_condition)
            .map(|(r, m)| (r.to_owned(), m.to_owned()));
        let fail = |source| ReconcileError::Write {
            placement: format!("{}/{}", key.namespace, key.placement_name()),
            source,
        };
        let mut wrote = false;
        let obj = match desired::plan(key, current.as_deref(), &want, &now_text) {
            Plan::Create(mut p) => {
                p.status = desired::status(None, &want, &now_text);
                let created = self.writer.create(&p).await.map_err(|e| {
                    self.metrics.write("create", "error");
                    self.forget_written(key);
                    fail(e)
                })?;
                self.metrics.write("create", "ok");
                wrote = true;
                self.remember(key, cached_rv.clone(), created)
            }
            Plan::Update { spec_patch, .. } => {
                let Some(cur) = current.clone() else {
                    return Ok(Reconciled {
                        result: "unchanged",
                        requeue,
                    });
                };
                match spec_patch {
                    Some(patch) => {
                        let patched = self
                            .writer
                            .patch(&key.namespace, &key.placement_name(), &patch)
                            .await
                            .map_err(|e| {
                                self.metrics.write("patch", "error");
                                self.forget_written(key);
                                fail(e)
                            })?;
                        self.metrics.write("patch", "ok");
                        wrote = true;
                        self.remember(key, cached_rv.clone(), patched)
                    }
                    None => cur,
                }
            }
        };
        let status = desired::status(obj.status.as_ref(), &want, &now_text);
        if wrote && status.is_some() {
            // destClusters first: when many Placements must move at once (a failover),
            // every one of them moves before any condition text is written; this key's
            // next turn, at the back of the queue, writes its status and Events.
            self.index.record(key, dest, wanting);
            return Ok(Reconciled {
                result: "written",
                requeue: Some(Duration::ZERO),
            });
        }
        let spec_only = wrote;
        if let Some(status) = status {
            let mut next = (*obj).clone();
            next.status = Some(status);
            let updated = self.writer.write_status(&next).await.map_err(|e| {
                self.metrics.write("status", "error");
                self.forget_written(key);
                fail(e)
            })?;
            self.metrics.write("status", "ok");
            wrote = true;
            self.remember(key, cached_rv.clone(), updated);
        }
        self.index.record(key, dest.clone(), wanting);

        // An Event per recorded outcome: with the status write, or with a spec change
        // that moves the workload to other clusters while the condition text stays the
        // same. A scale within the same clusters is told by `destClusters` alone: an Event
        // per scale would be a federation write per scale that says nothing new.
        let after_condition = (want.outcome.reason.to_owned(), want.outcome.message.clone());
        let status_written = wrote && !spec_only;
        if status_written
            || (spec_only
                && (before_condition.as_ref() != Some(&after_condition)
                    || !same_clusters(&previous, &dest)))
        {
            self.emit(key, &entry.uid, &want.outcome, &dest);
        }
        tracing::debug!(workload = %key, dest = %dest_text(&dest), wrote, "decided");
        Ok(Reconciled {
            result: if wrote { "written" } else { "unchanged" },
            requeue,
        })
    }

    /// One Event per decision, on the workload: where `kubectl describe` is run and where
    /// kube-scheduler puts its own (on the Pod). The Placement carries the same outcome as
    /// its `Scheduled` condition, so a second Event there would only double the writes.
    fn emit(&self, key: &WorkloadKey, uid: &str, outcome: &Outcome, dest: &[TargetCluster]) {
        let (type_, reason) = if outcome.scheduled {
            (EventType::Normal, "Scheduled")
        } else {
            (EventType::Warning, "FailedScheduling")
        };
        self.events.record(EventSpec {
            regarding: ObjectReference {
                api_version: Some(key.kind.api_version().to_owned()),
                kind: Some(key.kind.as_str().to_owned()),
                namespace: Some(key.namespace.clone()),
                name: Some(key.name.clone()),
                uid: Some(uid.to_owned()),
                ..Default::default()
            },
            type_,
            reason: reason.to_owned(),
            message: format!("destClusters {}: {}", dest_text(dest), outcome.message),
        });
    }
}

/// Whether two decisions name the same clusters, whatever their shares and order.
fn same_clusters(a: &[TargetCluster], b: &[TargetCluster]) -> bool {
    let names =
        |d: &[TargetCluster]| -> BTreeSet<String> { d.iter().map(|t| t.cluster.clone()).collect() };
    a.len() == b.len() && names(a) == names(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_do_not_make_other_clusters() {
        let d = |v: &[(&str, u32)]| -> Vec<TargetCluster> {
            v.iter()
                .map(|(c, r)| TargetCluster::new((*c).to_owned(), *r))
                .collect()
        };
        assert!(same_clusters(
            &d(&[("a", 3), ("b", 7)]),
            &d(&[("a", 7), ("b", 13)])
        ));
        assert!(!same_clusters(&d(&[("a", 3), ("b", 7)]), &d(&[("a", 10)])));
        assert!(!same_clusters(&d(&[("a", 3)]), &d(&[("b", 3)])));
        assert!(!same_clusters(&[], &d(&[("a", 1)])));
        assert!(same_clusters(
            &d(&[("b", 1), ("a", 2)]),
            &d(&[("a", 1), ("b", 2)])
        ));
    }

    fn written(base: Option<&str>, rv: &str) -> Written {
        let mut p = Placement::new("deployment-web", Default::default());
        p.metadata.resource_version = Some(rv.to_owned());
        Written {
            base: base.map(str::to_owned),
            obj: Arc::new(p),
        }
    }

    #[test]
    fn a_write_is_remembered_until_the_cache_shows_it_or_moves_past() {
        let w = written(Some("5"), "9");
        assert!(!caught_up(&w, Some("5")), "the cache still shows the base");
        assert!(caught_up(&w, Some("9")), "the cache shows the write");
        assert!(caught_up(&w, Some("12")), "the cache moved past it");
        assert!(caught_up(&w, None), "deleted since");
        let created = written(None, "3");
        assert!(!caught_up(&created, None), "the create is not back yet");
        assert!(caught_up(&created, Some("3")));
        // A write that changed nothing keeps the version: the cache already shows it.
        assert!(caught_up(&written(Some("7"), "7"), Some("7")));
    }
}

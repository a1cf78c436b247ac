//! The Job controller: runs a Job's pods (up to `parallelism` at once) until `completions`
//! of them succeeded, or until more than `backoffLimit` failed, and reports `active`,
//! `ready`, `succeeded`, `failed`, `startTime`, `completionTime` and the conditions
//! `SuccessCriteriaMet` → `Complete`, `FailureTarget` → `Failed` (upstream 1.31+ order) and
//! `Suspended`.
//!
//! Pods are simulated by the kubelet ([`super::kubelet`]): they run for the cluster's
//! `job_pod_duration`, then succeed, or fail while the Job is switched to fail
//! ([`JobFailures`], `cluster-sim ctl job-fail`). Pod names are `{job}-{5 chars}` derived
//! from the Job's uid and a count (no random draw). Memory per Job: none (the counts are
//! read from the pods and the Job's status).
//!
//! Approximations of upstream: `completionMode: Indexed` is run as `NonIndexed` (no
//! completion index annotation); without `completions` (the "work queue" pattern) the Job
//! stops creating pods once one succeeded and completes when none is left running; failed
//! pods are replaced at once (no exponential back-off), and a failing pod with
//! `restartPolicy: OnFailure` ends `Failed` rather than restarting in place; `podFailurePolicy`,
//! `successPolicy` and `ttlSecondsAfterFinished` are not acted on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use meridian_apiserver::cache::Cached;
use meridian_apiserver::engine::{DeleteOptions, WriteOptions};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::util::{self, condition, condition_true, i64_at, lock, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// Most pods created or deleted per reconcile; the rest follow in the next pass.
const BURST: usize = 500;
/// The labels upstream's Job controller (through the API server's generated selector) puts
/// on a Job's pods.
const JOB_NAME_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];
const CONTROLLER_UID_LABELS: [&str; 2] = ["batch.kubernetes.io/controller-uid", "controller-uid"];

/// The Jobs whose pods fail (fault injection), by `namespace/name`: their running pods exit 1
/// when they finish, and so do the pods created afterwards, until the switch is cleared.
#[derive(Default)]
pub struct JobFailures(Mutex<HashSet<String>>);

impl JobFailures {
    /// Switches failing on or off for one Job.
    pub fn set(&self, namespace: &str, job: &str, failing: bool) {
        let key = ns_key(namespace, job);
        let mut set = lock(&self.0);
        if failing {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }

    /// Whether the Job's pods fail.
    pub fn failing(&self, namespace: &str, job: &str) -> bool {
        lock(&self.0).contains(&ns_key(namespace, job))
    }
}

/// What the decision needs of a Job's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobSpec {
    /// Most pods running at once.
    pub parallelism: i64,
    /// Successful pods needed (`None`: the work-queue pattern, one success is enough).
    pub completions: Option<i64>,
    /// Failures tolerated; one more fails the Job.
    pub backoff_limit: i64,
    /// No pods run while suspended.
    pub suspend: bool,
    /// Seconds the Job may be active, from `startTime`.
    pub active_deadline: Option<i64>,
}

impl JobSpec {
    fn of(job: &Value) -> Self {
        Self {
            parallelism: i64_at(job, "/spec/parallelism").unwrap_or(1).max(0),
            completions: i64_at(job, "/spec/completions"),
            backoff_limit: i64_at(job, "/spec/backoffLimit").unwrap_or(6).max(0),
            suspend: job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true),
            active_deadline: i64_at(job, "/spec/activeDeadlineSeconds"),
        }
    }
}

/// A Job's pods, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Pods neither finished nor being deleted.
    pub active: i64,
    /// Active pods that are Ready.
    pub ready: i64,
    /// Pods that succeeded.
    pub succeeded: i64,
    /// Pods that failed.
    pub failed: i64,
}

/// How a Job ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Enough pods succeeded.
    Complete,
    /// Too many pods failed, or the deadline passed: the reason and message of `Failed`.
    Failed(&'static str, &'static str),
}

/// What the controller does next for one Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Pods to create.
    pub create: i64,
    /// Active pods to delete.
    pub delete: i64,
    /// Whether the Job is done, and how.
    pub finish: Option<Finish>,
}

/// The next step of a Job that has not finished, from its spec, its pods' counts and how
/// long it has been active (seconds since `startTime`, when started).
pub(crate) fn plan(spec: JobSpec, c: Counts, active_for: Option<i64>) -> Plan {
    let stop = |finish| Plan {
        create: 0,
        delete: c.active,
        finish: Some(finish),
    };
    if c.failed > spec.backoff_limit {
        return stop(Finish::Failed(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ));
    }
    if let (Some(limit), Some(t)) = (spec.active_deadline, active_for)
        && t >= limit
        && !spec.suspend
    {
        return stop(Finish::Failed(
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        ));
    }
    let want_active = match spec.completions {
        Some(n) if c.succeeded >= n => return stop(Finish::Complete),
        Some(n) => spec.parallelism.min(n - c.succeeded),
        // Work queue: any success means the work is done; the others finish on their own.
        None if c.succeeded > 0 => {
            if c.active == 0 {
                return stop(Finish::Complete);
            }
            c.active
        }
        None => spec.parallelism,
    };
    let want_active = if spec.suspend { 0 } else { want_active };
    Plan {
        create: (want_active - c.active).max(0),
        delete: (c.active - want_active).max(0),
        finish: None,
    }
}

/// The Job controller of one cluster.
pub(crate) struct JobController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

/// Whether the Job has finished (`Complete` or `Failed` is true).
fn finished(job: &Value) -> bool {
    condition_true(job, "Complete") || condition_true(job, "Failed")
}

/// The conditions after this pass: the existing ones, with the given ones set (each keeps its
/// `lastTransitionTime` unless its status changes).
fn set_conditions(job: &Value, set: &[(&str, &str, &str, &str)], now: &str) -> Value {
    let mut list: Vec<Value> = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for &(ty, status, reason, message) in set {
        let mut c = util::merge_condition(
            condition(job, ty),
            ty,
            status,
            Some(reason),
            Some(message),
            now,
            false,
        );
        c["lastProbeTime"] = Value::from(now);
        match list
            .iter_mut()
            .find(|x| x.get("type").and_then(Value::as_str) == Some(ty))
        {
            Some(x) => *x = c,
            None => list.push(c),
        }
    }
    Value::Array(list)
}

impl JobController {
    /// The Job a changed pod belongs to. A Job's pods carry its name as a label: other
    /// pods are not parsed at all (a pod that lost the label is still counted when its Job
    /// is reconciled for another reason).
    fn job_of_pod(seen: Seen<'_>) -> Option<String> {
        let obj = match seen {
            Seen::Upsert { obj, .. } | Seen::Deleted { obj } => obj,
            Seen::Reset | Seen::Synced => return None,
        };
        if obj.owners.is_empty() {
            return None;
        }
        let job = obj.labels.get(JOB_NAME_LABELS[0])?;
        Some(ns_key(obj.namespace(), job))
    }

    fn owned_pods(&self, ns: &str, uid: &str) -> Vec<Arc<Cached>> {
        self.sim.owned(&self.sim.kinds.pods, ns, uid)
    }

    /// A new pod of the Job from its template, with upstream's labels and owner reference.
    fn pod_for(job: &Value, name: &str) -> Value {
        let template = job
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null);
        let mut labels = template
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let job_name = str_at(job, "/metadata/name").unwrap_or("");
        let uid = str_at(job, "/metadata/uid").unwrap_or("");
        for k in JOB_NAME_LABELS {
            labels.insert(k.into(), Value::from(job_name));
        }
        for k in CONTROLLER_UID_LABELS {
            labels.insert(k.into(), Value::from(uid));
        }
        let meta = util::child_metadata(job, "batch/v1", "Job", name, &template, labels);
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
        })
    }
}

impl Reconciler<String> for JobController {
    const NAME: &'static str = "job";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self.sim.cache(&kinds.jobs).get(&kinds.jobs.key(ns, name)) else {
            return Ok(Requeue::No);
        };
        let job = cached.value();
        let pods: Vec<Value> = self
            .owned_pods(ns, &cached.uid)
            .iter()
            .map(|c| c.value())
            .collect();
        let mut counts = Counts::default();
        let mut active: Vec<&Value> = Vec::new();
        for p in &pods {
            match str_at(p, "/status/phase") {
                Some("Succeeded") => counts.succeeded += 1,
                Some("Failed") => counts.failed += 1,
                _ if util::is_deleting(p) => {}
                _ => {
                    counts.active += 1;
                    counts.ready += i64::from(condition_true(p, "Ready"));
                    active.push(p);
                }
            }
        }
        // Upstream keeps its counts with finalizers, so a finished pod deleted later still
        // counts; the counts already reported stand in for that here.
        let old = |f: &str| i64_at(&job, &format!("/status/{f}")).unwrap_or(0);
        counts.succeeded = counts.succeeded.max(old("succeeded"));
        counts.failed = counts.failed.max(old("failed"));

        let spec = JobSpec::of(&job);
        let now = self.sim.now();
        let now_s = util::format_time(now);
        let done = finished(&job) || util::is_deleting(&job);
        let start = str_at(&job, "/status/startTime").and_then(util::parse_time);
        let active_for = start.map(|t| now.as_second() - t.as_second());
        let step = if done {
            // A finished Job runs nothing more.
            Plan {
                create: 0,
                delete: counts.active,
                finish: None,
            }
        } else {
            plan(spec, counts, active_for)
        };

        let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
        // Deleting the newest first keeps the pods that have run longest.
        active.sort_by_key(|p| {
            std::cmp::Reverse(
                str_at(p, "/metadata/creationTimestamp")
                    .unwrap_or("")
                    .to_string(),
            )
        });
        for p in active.iter().take(step.delete.max(0) as usize).take(BURST) {
            let pod_name = str_at(p, "/metadata/name").unwrap_or("");
            super::done_unless_failed(
                self.sim
                    .engine
                    .delete(&kinds.pods, ns, pod_name, &DeleteOptions::default())
                    .await,
            )?;
        }
        let deleted = step.delete.min(BURST as i64);
        let mut created = 0;
        if step.create > 0 {
            let cache = self.sim.cache(&kinds.pods);
            let mut seq = pods.len();
            while created < step.create.min(BURST as i64) {
                let pod_name =
                    format!("{name}-{}", util::suffix5(&format!("{}#{seq}", cached.uid)));
                seq += 1;
                if cache.get(&kinds.pods.key(ns, &pod_name)).is_some() {
                    continue;
                }
                let pod = Self::pod_for(&job, &pod_name);
                match self.sim.engine.create(&kinds.pods, ns, pod, &opts).await {
                    Ok(_) => created += 1,
                    // Taken by a pod the cache has not shown yet: the next name is free.
                    Err(e) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }

        let mut status = Map::new();
        status.insert(
            "active".into(),
            Value::from(counts.active + created - deleted),
        );
        status.insert(
            "ready".into(),
            Value::from(counts.ready.min(counts.active - deleted).max(0)),
        );
        status.insert("succeeded".into(), Value::from(counts.succeeded));
        status.insert("failed".into(), Value::from(counts.failed));
        let was_suspended = condition_true(&job, "Suspended");
        let mut set: Vec<(&str, &str, &str, &str)> = Vec::new();
        if !done && spec.suspend && !was_suspended {
            set.push(("Suspended", "True", "JobSuspended", "Job suspended"));
        } else if !done && !spec.suspend && was_suspended {
            set.push(("Suspended", "False", "JobResumed", "Job resumed"));
        }
        if !done && !spec.suspend && (start.is_none() || was_suspended) {
            // Upstream restarts the clock of a resumed Job.
            status.insert("startTime".into(), Value::from(now_s.as_str()));
        }
        match step.finish {
            Some(Finish::Complete) => {
                set.push((
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
                set.push((
                    "Complete",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ));
                status.insert("completionTime".into(), Value::from(now_s.as_str()));
            }
            Some(Finish::Failed(reason, message)) => {
                set.push(("FailureTarget", "True", reason, message));
                set.push(("Failed", "True", reason, message));
            }
            None => {}
        }
        if !set.is_empty() {
            status.insert("conditions".into(), set_conditions(&job, &set, &now_s));
        }
        self.sim
            .write_status_fields(&kinds.jobs, ns, name, &job, Value::Object(status))
            .await?;
        // Time-based: the deadline.
        let deadline = match (spec.active_deadline, active_for, done || spec.suspend) {
            (Some(limit), Some(t), false) if t < limit => {
                Some(Duration::from_secs((limit - t) as u64))
            }
            (Some(limit), None, false) => Some(Duration::from_secs(limit.max(0) as u64)),
            _ => None,
        };
        let more = step.create > created || step.delete > deleted;
        Ok(match (more, deadline) {
            (true, _) => Requeue::After(Duration::ZERO),
            (false, Some(d)) => Requeue::After(d),
            (false, None) => Requeue::No,
        })
    }
}

/// Spawns the Job controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(JobController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let (jobs, pods, queue) = (
        sim.kinds.jobs.clone(),
        sim.kinds.pods.clone(),
        c.queue.clone(),
    );
    super::spawn_owner_loop(sim, &jobs, &pods, queue, c, JobController::job_of_pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(parallelism: i64, completions: Option<i64>) -> JobSpec {
        JobSpec {
            parallelism,
            completions,
            backoff_limit: 2,
            suspend: false,
            active_deadline: None,
        }
    }

    fn counts(active: i64, succeeded: i64, failed: i64) -> Counts {
        Counts {
            active,
            ready: 0,
            succeeded,
            failed,
        }
    }

    fn step(create: i64, delete: i64, finish: Option<Finish>) -> Plan {
        Plan {
            create,
            delete,
            finish,
        }
    }

    #[test]
    fn plans() {
        let backoff = Finish::Failed(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        );
        let suspended = JobSpec {
            suspend: true,
            ..spec(2, Some(4))
        };
        let deadline = JobSpec {
            active_deadline: Some(10),
            ..spec(1, Some(1))
        };
        let cases = [
            // name, spec, counts, active for, plan
            (
                "fresh",
                spec(2, Some(4)),
                counts(0, 0, 0),
                None,
                step(2, 0, None),
            ),
            (
                "last ones",
                spec(2, Some(4)),
                counts(0, 3, 0),
                None,
                step(1, 0, None),
            ),
            (
                "running",
                spec(2, Some(4)),
                counts(2, 1, 0),
                None,
                step(0, 0, None),
            ),
            (
                "parallelism lowered",
                spec(1, Some(4)),
                counts(3, 0, 0),
                None,
                step(0, 2, None),
            ),
            (
                "complete",
                spec(2, Some(4)),
                counts(0, 4, 0),
                None,
                step(0, 0, Some(Finish::Complete)),
            ),
            (
                "replaces failures",
                spec(1, Some(1)),
                counts(0, 0, 2),
                None,
                step(1, 0, None),
            ),
            (
                "backoff limit",
                spec(2, Some(4)),
                counts(1, 0, 3),
                None,
                step(0, 1, Some(backoff)),
            ),
            (
                "work queue",
                spec(3, None),
                counts(0, 0, 0),
                None,
                step(3, 0, None),
            ),
            (
                "work queue draining",
                spec(3, None),
                counts(2, 1, 0),
                None,
                step(0, 0, None),
            ),
            (
                "work queue done",
                spec(3, None),
                counts(0, 1, 0),
                None,
                step(0, 0, Some(Finish::Complete)),
            ),
            (
                "suspended",
                suspended,
                counts(2, 1, 0),
                None,
                step(0, 2, None),
            ),
            (
                "before deadline",
                deadline,
                counts(1, 0, 0),
                Some(9),
                step(0, 0, None),
            ),
            (
                "deadline",
                deadline,
                counts(1, 0, 0),
                Some(10),
                step(
                    0,
                    1,
                    Some(Finish::Failed(
                        "DeadlineExceeded",
                        "Job was active longer than specified deadline",
                    )),
                ),
            ),
        ];
        for (name, s, c, t, want) in cases {
            assert_eq!(plan(s, c, t), want, "{name}");
        }
    }

    #[test]
    fn failure_switch() {
        let f = JobFailures::default();
        assert!(!f.failing("default", "pi"));
        f.set("default", "pi", true);
        assert!(f.failing("default", "pi"));
        assert!(!f.failing("other", "pi"));
        f.set("default", "pi", false);
        assert!(!f.failing("default", "pi"));
    }
}

//! The CronJob controller: creates a Job from `jobTemplate` at each scheduled time
//! ([`super::cron`], in `spec.timeZone`), named `{cronjob}-{scheduled minute since the
//! epoch}` as upstream names them, honouring `suspend`, `concurrencyPolicy` (`Allow`,
//! `Forbid`: skip while one runs, `Replace`: delete the running ones first) and
//! `startingDeadlineSeconds` (a run missed by more is skipped); keeps
//! `successfulJobsHistoryLimit` / `failedJobsHistoryLimit` finished Jobs; reports
//! `lastScheduleTime`, `lastSuccessfulTime` and the `active` Jobs.
//!
//! Time is the simulation clock ([`Sim::now`]): a reconcile asks to look again at the next
//! run, so tests on a paused tokio clock see runs without waiting. Of several missed runs
//! only the latest starts, as upstream. Memory per CronJob: none.

use std::sync::Arc;
use std::time::Duration;

use meridian_apiserver::engine::{DeleteOptions, WriteOptions};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::cron::{Schedule, time_zone};
use super::util::{self, condition_true, i64_at, str_at};
use super::{Reconciler, Requeue, Sim, SimError, WorkQueue, split_key};

/// Upstream stops counting missed runs here (and only warns).
const MISSED_LIMIT: usize = 100;
/// The annotation upstream puts on a CronJob's Jobs: the scheduled time.
const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// How concurrent runs are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Concurrency {
    /// Runs may overlap.
    Allow,
    /// A run is skipped while another is active.
    Forbid,
    /// A run replaces the active ones.
    Replace,
}

/// What to do at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing is due.
    Wait,
    /// The run at this time is skipped (too late, or forbidden while another runs).
    Skip(jiff::Timestamp),
    /// Start the run of this time, deleting the active Jobs first when `replace`.
    Start {
        /// The scheduled time.
        at: jiff::Timestamp,
        /// Delete the active Jobs first.
        replace: bool,
    },
}

/// The decision for a CronJob last scheduled at (or created at) `since`, at `now`.
pub(crate) fn decide(
    schedule: &Schedule,
    tz: &jiff::tz::TimeZone,
    since: jiff::Timestamp,
    now: jiff::Timestamp,
    starting_deadline: Option<i64>,
    policy: Concurrency,
    active: usize,
) -> Decision {
    // Runs older than the starting deadline are not looked at at all.
    let earliest = match starting_deadline {
        Some(d) => since.max(
            now.checked_sub(jiff::SignedDuration::from_secs(d))
                .unwrap_or(since),
        ),
        None => since,
    };
    let (latest, _) = schedule.latest_between(earliest, now, tz, MISSED_LIMIT);
    let Some(at) = latest else {
        return Decision::Wait;
    };
    if let Some(d) = starting_deadline
        && now.as_second() - at.as_second() > d
    {
        return Decision::Skip(at);
    }
    match policy {
        Concurrency::Forbid if active > 0 => Decision::Skip(at),
        Concurrency::Replace => Decision::Start {
            at,
            replace: active > 0,
        },
        _ => Decision::Start { at, replace: false },
    }
}

/// The CronJob controller of one cluster.
pub(crate) struct CronJobController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

/// Whether a Job has finished, and whether it succeeded.
fn outcome(job: &Value) -> Option<bool> {
    if condition_true(job, "Complete") {
        Some(true)
    } else if condition_true(job, "Failed") {
        Some(false)
    } else {
        None
    }
}

/// The Job of one run.
fn job_for(cj: &Value, name: &str, at: &jiff::Zoned) -> Value {
    let template = cj
        .pointer("/spec/jobTemplate")
        .cloned()
        .unwrap_or(Value::Null);
    let mut meta = Map::new();
    meta.insert("name".into(), Value::from(name));
    meta.insert(
        "namespace".into(),
        Value::from(str_at(cj, "/metadata/namespace").unwrap_or("")),
    );
    if let Some(l) = template.pointer("/metadata/labels") {
        meta.insert("labels".into(), l.clone());
    }
    let mut annotations = template
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.insert(
        SCHEDULED_ANNOTATION.into(),
        Value::from(at.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()),
    );
    meta.insert("annotations".into(), Value::Object(annotations));
    meta.insert(
        "ownerReferences".into(),
        json!([util::owner_ref("batch/v1", "CronJob", cj)]),
    );
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

impl CronJobController {
    async fn delete_job(&self, ns: &str, name: &str) -> Result<(), SimError> {
        // Background propagation: the garbage collector removes the Job's pods.
        super::done_unless_failed(
            self.sim
                .engine
                .delete(&self.sim.kinds.jobs, ns, name, &DeleteOptions::default())
                .await,
        )
    }
}

impl Reconciler<String> for CronJobController {
    const NAME: &'static str = "cronjob";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self
            .sim
            .cache(&kinds.cron_jobs)
            .get(&kinds.cron_jobs.key(ns, name))
        else {
            return Ok(Requeue::No);
        };
        let cj = cached.value();
        if util::is_deleting(&cj) {
            return Ok(Requeue::No);
        }
        let jobs_def = &kinds.jobs;
        let uid: &str = &cached.uid;
        let mut jobs: Vec<Value> = self
            .sim
            .cache(jobs_def)
            .list(&jobs_def.namespace_prefix(Some(ns)), None, None, 0, |c| {
                c.owners.iter().any(|o| **o == *uid)
            })
            .items
            .iter()
            .map(|c| c.value())
            .filter(|j| !util::is_deleting(j))
            .collect();
        // Oldest first (names end in the scheduled minute; creation time breaks ties).
        jobs.sort_by_key(|j| {
            (
                str_at(j, "/metadata/creationTimestamp")
                    .unwrap_or("")
                    .to_string(),
                str_at(j, "/metadata/name").unwrap_or("").to_string(),
            )
        });

        // History: keep the newest finished Jobs up to each limit.
        let limit = |f: &str, default: i64| i64_at(&cj, &format!("/spec/{f}")).unwrap_or(default);
        let keep_ok = limit("successfulJobsHistoryLimit", 3).max(0) as usize;
        let keep_failed = limit("failedJobsHistoryLimit", 1).max(0) as usize;
        for (want, keep) in [(true, keep_ok), (false, keep_failed)] {
            let done: Vec<&Value> = jobs.iter().filter(|j| outcome(j) == Some(want)).collect();
            for j in done.iter().take(done.len().saturating_sub(keep)) {
                self.delete_job(ns, str_at(j, "/metadata/name").unwrap_or(""))
                    .await?;
            }
        }
        let last_success = jobs
            .iter()
            .filter(|j| outcome(j) == Some(true))
            .filter_map(|j| str_at(j, "/status/completionTime"))
            .max()
            .map(str::to_string);
        let mut active: Vec<&Value> = jobs.iter().filter(|j| outcome(j).is_none()).collect();

        let parsed = Schedule::parse(str_at(&cj, "/spec/schedule").unwrap_or(""))
            .and_then(|s| Ok((s, time_zone(str_at(&cj, "/spec/timeZone"))?)));
        let (schedule, tz) = match parsed {
            Ok(p) => p,
            Err(e) => {
                // Nothing to retry: a change of the CronJob queues it again.
                tracing::warn!(cronjob = %key, error = %e, "cannot schedule");
                return Ok(Requeue::No);
            }
        };
        let now = self.sim.now();
        let since = str_at(&cj, "/status/lastScheduleTime")
            .or_else(|| str_at(&cj, "/metadata/creationTimestamp"))
            .and_then(util::parse_time)
            .unwrap_or(now);
        let policy = match str_at(&cj, "/spec/concurrencyPolicy") {
            Some("Forbid") => Concurrency::Forbid,
            Some("Replace") => Concurrency::Replace,
            _ => Concurrency::Allow,
        };
        let suspended = cj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
        let decision = if suspended {
            Decision::Wait
        } else {
            decide(
                &schedule,
                &tz,
                since,
                now,
                i64_at(&cj, "/spec/startingDeadlineSeconds"),
                policy,
                active.len(),
            )
        };
        let mut last_schedule = str_at(&cj, "/status/lastScheduleTime").map(str::to_string);
        let mut created: Option<Value> = None;
        match decision {
            Decision::Wait => {}
            // Not recorded, as upstream: once the active run ends, the skipped one is found
            // again and starts late (unless the starting deadline has passed by then).
            Decision::Skip(at) => tracing::debug!(cronjob = %key, %at, "run skipped"),
            Decision::Start { at, replace } => {
                if replace {
                    for j in active.drain(..) {
                        self.delete_job(ns, str_at(j, "/metadata/name").unwrap_or(""))
                            .await?;
                    }
                }
                let job_name = format!("{name}-{}", at.as_second() / 60);
                let job = job_for(&cj, &job_name, &at.to_zoned(tz.clone()));
                let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
                match self.sim.engine.create(jobs_def, ns, job, &opts).await {
                    Ok(w) => created = Some(w.obj),
                    // Created already (a pass whose status write was lost).
                    Err(e) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
                last_schedule = Some(util::format_time(at));
            }
        }

        let refs: Vec<Value> = active
            .iter()
            .copied()
            .chain(created.as_ref())
            .map(|j| {
                json!({
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": str_at(j, "/metadata/name").unwrap_or(""),
                    "namespace": ns,
                    "uid": str_at(j, "/metadata/uid").unwrap_or(""),
                    "resourceVersion": str_at(j, "/metadata/resourceVersion").unwrap_or(""),
                })
            })
            .collect();
        let mut status = Map::new();
        // An empty list is left out, as upstream's omitempty does.
        status.insert(
            "active".into(),
            if refs.is_empty() {
                Value::Null
            } else {
                Value::Array(refs)
            },
        );
        if let Some(t) = &last_schedule {
            status.insert("lastScheduleTime".into(), Value::from(t.as_str()));
        }
        if let Some(t) = &last_success {
            status.insert("lastSuccessfulTime".into(), Value::from(t.as_str()));
        }
        self.sim
            .write_status_fields(&kinds.cron_jobs, ns, name, &cj, Value::Object(status))
            .await?;
        if suspended {
            return Ok(Requeue::No);
        }
        // Look again at the next run (just after it: the clock has second precision).
        let from = last_schedule
            .as_deref()
            .and_then(util::parse_time)
            .map_or(now, |t| t.max(now));
        Ok(match schedule.next_after(from, &tz) {
            Some(next) => {
                let wait = next.as_second() - now.as_second();
                Requeue::After(Duration::from_secs(wait.max(0) as u64 + 1))
            }
            None => Requeue::No,
        })
    }
}

/// Spawns the CronJob controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(CronJobController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let (cron_jobs, jobs, queue) = (
        sim.kinds.cron_jobs.clone(),
        sim.kinds.jobs.clone(),
        c.queue.clone(),
    );
    super::spawn_owner_loop(sim, &cron_jobs, &jobs, queue, c, |e| {
        super::controlling_owner(e, "CronJob", None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn decisions() {
        let every10 = Schedule::parse("*/10 * * * *").unwrap();
        let utc = jiff::tz::TimeZone::UTC;
        let since = t("2026-03-01T10:00:00Z");
        let at = |s: &str| t(s);
        let cases = [
            // name, now, deadline, policy, active, decision
            (
                "nothing due",
                "2026-03-01T10:09:59Z",
                None,
                Concurrency::Allow,
                0,
                Decision::Wait,
            ),
            (
                "due",
                "2026-03-01T10:10:00Z",
                None,
                Concurrency::Allow,
                1,
                Decision::Start {
                    at: at("2026-03-01T10:10:00Z"),
                    replace: false,
                },
            ),
            (
                "latest of missed runs",
                "2026-03-01T10:45:00Z",
                None,
                Concurrency::Allow,
                0,
                Decision::Start {
                    at: at("2026-03-01T10:40:00Z"),
                    replace: false,
                },
            ),
            (
                "within the deadline",
                "2026-03-01T10:10:30Z",
                Some(60),
                Concurrency::Allow,
                0,
                Decision::Start {
                    at: at("2026-03-01T10:10:00Z"),
                    replace: false,
                },
            ),
            (
                "past the deadline",
                "2026-03-01T10:12:00Z",
                Some(60),
                Concurrency::Allow,
                0,
                Decision::Wait,
            ),
            (
                "forbidden while active",
                "2026-03-01T10:10:00Z",
                None,
                Concurrency::Forbid,
                1,
                Decision::Skip(at("2026-03-01T10:10:00Z")),
            ),
            (
                "forbid, none active",
                "2026-03-01T10:10:00Z",
                None,
                Concurrency::Forbid,
                0,
                Decision::Start {
                    at: at("2026-03-01T10:10:00Z"),
                    replace: false,
                },
            ),
            (
                "replace",
                "2026-03-01T10:10:00Z",
                None,
                Concurrency::Replace,
                2,
                Decision::Start {
                    at: at("2026-03-01T10:10:00Z"),
                    replace: true,
                },
            ),
        ];
        for (name, now, deadline, policy, active, want) in cases {
            assert_eq!(
                decide(&every10, &utc, since, t(now), deadline, policy, active),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn jobs_carry_the_template_and_the_scheduled_time() {
        let cj = json!({
            "metadata": {"name": "report", "namespace": "ns", "uid": "u1"},
            "spec": {"jobTemplate": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}},
            }},
        });
        let at = t("2026-03-01T10:10:00Z").to_zoned(jiff::tz::TimeZone::UTC);
        let j = job_for(&cj, "report-29540170", &at);
        assert_eq!(j["metadata"]["labels"]["team"], "a");
        assert_eq!(
            j["metadata"]["annotations"][SCHEDULED_ANNOTATION],
            "2026-03-01T10:10:00+00:00"
        );
        assert_eq!(j["metadata"]["ownerReferences"][0]["kind"], "CronJob");
        assert_eq!(j["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }
}

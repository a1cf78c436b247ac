//! A federated Job's `status` from its members' Jobs: pods summed, the earliest start,
//! and the terminal conditions `kubectl wait --for=condition=complete` (or `failed`)
//! reads. `Complete` comes only once every destination's share has completed, with the
//! latest completion time; `Failed` as soon as one member's Job failed, naming the
//! cluster. Like a Job's own, either condition is final once written.

use serde_json::{Value, json};

use super::status::{JobCopyStatus, Reports};

/// Reason of the federated `Complete` condition (the Job controller's own).
const COMPLETE_REASON: &str = "CompletionsReached";

/// The earliest (`earliest`) or latest of some RFC 3339 times; unreadable ones are left out.
fn pick_time<'a>(times: impl Iterator<Item = &'a str>, earliest: bool) -> Option<&'a str> {
    let parsed = times.filter_map(|t| t.parse::<jiff::Timestamp>().ok().map(|ts| (ts, t)));
    let picked = if earliest {
        parsed.min_by_key(|(ts, _)| *ts)
    } else {
        parsed.max_by_key(|(ts, _)| *ts)
    };
    picked.map(|(_, t)| t)
}

/// The previous status's condition of `type_` when True: terminal conditions stay.
fn terminal<'a>(prev: &'a Value, type_: &str) -> Option<&'a Value> {
    prev.get("conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
}

fn condition(type_: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": reason, "message": message,
           "lastProbeTime": now, "lastTransitionTime": now})
}

/// The federated Job's `status` (see the module documentation). Counts come from every
/// member holding a Job (one leaving the destinations still runs its pods); completion
/// is judged over the destinations only.
pub fn federated(fed: &Value, reports: &Reports<'_>, now: &str) -> Value {
    let prev = &fed["status"];
    let jobs: Vec<(&str, &JobCopyStatus)> = reports
        .entries
        .iter()
        .zip(reports.copies)
        .filter_map(|(e, c)| Some((e.cluster.as_str(), c.as_ref()?.job.as_deref()?)))
        .collect();
    let sum = |f: fn(&JobCopyStatus) -> i32| jobs.iter().map(|(_, j)| f(j)).sum::<i32>();
    let mut s = json!({
        "active": sum(|j| j.active),
        "ready": sum(|j| j.ready),
        "succeeded": sum(|j| j.succeeded),
        "failed": sum(|j| j.failed),
    });
    if let Some(t) = pick_time(
        jobs.iter().filter_map(|(_, j)| j.start_time.as_deref()),
        true,
    ) {
        s["startTime"] = json!(t);
    }
    // Final once written, as a Job's own conditions are.
    if let Some(c) = terminal(prev, "Failed").or_else(|| terminal(prev, "Complete")) {
        s["conditions"] = json!([c]);
        if let Some(t) = prev.get("completionTime").filter(|t| !t.is_null()) {
            s["completionTime"] = t.clone();
        }
        return s;
    }
    let failures: Vec<String> = jobs
        .iter()
        .filter_map(|(cluster, j)| {
            let (reason, message) = j.failure.as_ref()?;
            Some(format!("member cluster {cluster}: {reason}: {message}"))
        })
        .collect();
    if let Some((reason, _)) = jobs.iter().find_map(|(_, j)| j.failure.as_ref()) {
        let message = format!("Job failed in {}", failures.join("; "));
        s["conditions"] = json!([condition("Failed", reason, &message, now)]);
        return s;
    }
    let destinations: Vec<Option<&JobCopyStatus>> = reports
        .destination_copies()
        .map(|c| c.and_then(|c| c.job.as_deref()))
        .collect();
    let complete =
        !destinations.is_empty() && destinations.iter().all(|j| j.is_some_and(|j| j.complete));
    if complete {
        let message = format!(
            "Job completed in every member cluster ({})",
            reports.destinations
        );
        s["conditions"] = json!([condition("Complete", COMPLETE_REASON, &message, now)]);
        let ends = destinations
            .iter()
            .flatten()
            .filter_map(|j| j.completion_time.as_deref());
        s["completionTime"] = json!(pick_time(ends, false).unwrap_or(now));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::status::{CopyStatus, MemberReport, cluster_status};

    /// A member Job's status: active, succeeded, failed, start, and its condition.
    fn member(
        active: i32,
        succeeded: i32,
        failed: i32,
        start: &str,
        cond: Option<&str>,
    ) -> CopyStatus {
        let mut status = json!({"active": active, "ready": active, "succeeded": succeeded,
                                "failed": failed, "startTime": start});
        match cond {
            Some("Complete") => {
                status["conditions"] = json!([{"type": "Complete", "status": "True"}]);
                status["completionTime"] = json!(start.replace("T10", "T11"));
            }
            Some("Failed") => {
                status["conditions"] = json!([{"type": "Failed", "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit"}]);
            }
            _ => {}
        }
        CopyStatus::of_object(
            &json!({"kind": "Job", "metadata": {"generation": 1}, "status": status}),
        )
    }

    fn run(prev: Value, copies: &[Option<&CopyStatus>], destinations: usize) -> Value {
        let entries: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .zip(copies)
            .map(|(c, s)| {
                cluster_status(
                    c,
                    &MemberReport {
                        copy: *s,
                        ..Default::default()
                    },
                )
            })
            .collect();
        let r = Reports {
            entries: &entries,
            copies,
            destinations,
            all_observed: true,
        };
        federated(&json!({"status": prev}), &r, "2026-11-27T12:00:00Z")
    }

    fn types(s: &Value) -> Vec<&str> {
        s["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str())
            .collect()
    }

    #[test]
    fn job_status_table() {
        let running = member(1, 1, 0, "2026-11-27T10:00:05Z", None);
        let early = member(1, 0, 1, "2026-11-27T10:00:01Z", None);
        let done_a = member(0, 2, 0, "2026-11-27T10:00:03Z", Some("Complete"));
        let done_b = member(0, 2, 1, "2026-11-27T10:00:09Z", Some("Complete"));
        let failed = member(0, 0, 7, "2026-11-27T10:00:02Z", Some("Failed"));
        type Case<'a> = (&'a str, Vec<Option<&'a CopyStatus>>, usize, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                "running",
                vec![Some(&running), Some(&early), Some(&done_a)],
                3,
                vec![],
            ),
            (
                "all done",
                vec![Some(&done_a), Some(&done_b), Some(&done_a)],
                3,
                vec!["Complete"],
            ),
            (
                "one member missing",
                vec![Some(&done_a), None, Some(&done_b)],
                3,
                vec![],
            ),
            (
                "one failed",
                vec![Some(&running), Some(&failed), Some(&done_a)],
                3,
                vec!["Failed"],
            ),
            (
                "failed beats done",
                vec![Some(&done_a), Some(&failed), Some(&done_b)],
                3,
                vec!["Failed"],
            ),
            // A member that left the destinations counts pods but not completion.
            (
                "leaving member",
                vec![Some(&done_a), Some(&done_b), Some(&running)],
                2,
                vec!["Complete"],
            ),
            ("no destinations", vec![], 0, vec![]),
        ];
        for (case, copies, destinations, want) in cases {
            let s = run(Value::Null, &copies, destinations);
            assert_eq!(types(&s), want, "{case}");
            assert_eq!(
                s.get("completionTime").is_some(),
                want == ["Complete"],
                "{case}"
            );
        }
        let s = run(
            Value::Null,
            &[Some(&running), Some(&early), Some(&done_b)],
            3,
        );
        assert_eq!(
            (&s["active"], &s["ready"], &s["succeeded"], &s["failed"]),
            (&json!(2), &json!(2), &json!(3), &json!(2))
        );
        assert_eq!(s["startTime"], "2026-11-27T10:00:01Z");
        let done = run(Value::Null, &[Some(&done_a), Some(&done_b)], 2);
        assert_eq!(done["completionTime"], "2026-11-27T11:00:09Z");
        assert_eq!(done["conditions"][0]["reason"], COMPLETE_REASON);
        let failed = run(Value::Null, &[Some(&running), Some(&failed)], 2);
        assert_eq!(failed["conditions"][0]["reason"], "BackoffLimitExceeded");
        assert_eq!(
            failed["conditions"][0]["message"],
            "Job failed in member cluster b: BackoffLimitExceeded: Job has reached the specified backoff limit"
        );
    }

    #[test]
    fn terminal_conditions_stay() {
        let running = member(1, 0, 0, "2026-11-27T10:00:00Z", None);
        let done = run(
            Value::Null,
            &[Some(&member(
                0,
                1,
                0,
                "2026-11-27T10:00:00Z",
                Some("Complete"),
            ))],
            1,
        );
        // A member runs again (say a new destination): the federated Job stays complete.
        let again = run(done.clone(), &[Some(&running)], 1);
        assert_eq!(again["conditions"], done["conditions"]);
        assert_eq!(again["completionTime"], done["completionTime"]);
        assert_eq!(again["active"], 1);
        // A steady state writes the same status.
        let steady = run(
            done.clone(),
            &[Some(&member(
                0,
                1,
                0,
                "2026-11-27T10:00:00Z",
                Some("Complete"),
            ))],
            1,
        );
        assert_eq!(steady, done);
    }
}

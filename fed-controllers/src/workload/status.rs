//! Status aggregation: each member's copy → a `Placement.status.clusters` entry, and the
//! entries → the federated workload's own `status` (sums, observedGeneration, conditions),
//! so `kubectl rollout status` and `kubectl wait` work against the federation.

use fed_api::common::Condition;
use fed_api::placement::ClusterWorkloadStatus;
use serde_json::{Value, json};

use crate::copies::status::member_conditions;

use super::drift;
use super::kinds::Kind;

fn int(v: &Value, ptr: &str) -> i32 {
    v.pointer(ptr)
        .and_then(Value::as_i64)
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(0)
}

/// The counts a member's copy reports, read once when its watch event arrives, so status
/// aggregation never parses the copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CopyStatus {
    /// `metadata.generation` (bumped by the member's API server on every spec change).
    pub generation: Option<i64>,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// Pods (a Job's active pods).
    pub replicas: i32,
    /// Ready pods.
    pub ready: i32,
    /// Available pods (a Job's ready ones).
    pub available: i32,
    /// Pods of the current template (a Job's active ones: its template never changes).
    pub updated: i32,
    /// A StatefulSet's pods of its current revision.
    pub current: i32,
    /// Whether a StatefulSet's current revision is its update revision: its rollout is done.
    pub revision_current: bool,
    /// A Job's own status (`None` for other kinds).
    pub job: Option<Box<JobCopyStatus>>,
    /// The copy's own `status.conditions`, bounded, as its Placement entry shows them
    /// ([`member_conditions`]).
    pub conditions: Vec<Condition>,
}

/// What a member's Job reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct JobCopyStatus {
    /// Running pods.
    pub active: i32,
    /// Ready pods.
    pub ready: i32,
    /// Pods that succeeded.
    pub succeeded: i32,
    /// Pods that failed.
    pub failed: i32,
    /// `status.startTime` (RFC 3339).
    pub start_time: Option<String>,
    /// `status.completionTime` (RFC 3339).
    pub completion_time: Option<String>,
    /// Whether its `Complete` condition is True.
    pub complete: bool,
    /// Reason and message of its `Failed` condition when True.
    pub failure: Option<(String, String)>,
}

impl JobCopyStatus {
    /// A Job's `status`.
    pub fn of(status: &Value) -> Self {
        let condition = |type_: &str| {
            status
                .get("conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| c["type"] == type_ && c["status"] == "True")
        };
        let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).map(String::from);
        JobCopyStatus {
            active: int(status, "/active"),
            ready: int(status, "/ready"),
            succeeded: int(status, "/succeeded"),
            failed: int(status, "/failed"),
            start_time: text(status, "startTime"),
            completion_time: text(status, "completionTime"),
            complete: condition("Complete").is_some(),
            failure: condition("Failed").map(|c| {
                (
                    text(c, "reason").unwrap_or_default(),
                    text(c, "message").unwrap_or_default(),
                )
            }),
        }
    }
}

impl CopyStatus {
    /// The counts of a workload of `kind` with `generation` and `status` (zero where it
    /// reports none).
    pub fn of(kind: &str, generation: Option<i64>, status: &Value) -> Self {
        let observed_generation = status.get("observedGeneration").and_then(Value::as_i64);
        if kind == Kind::Job.as_str() {
            let job = JobCopyStatus::of(status);
            return Self {
                generation,
                // A Job's status has no observedGeneration: only its parallelism changes
                // after creation, and the Job controller acts on it at once.
                observed_generation: generation,
                replicas: job.active,
                ready: job.ready,
                available: job.ready,
                updated: job.active,
                job: Some(Box::new(job)),
                conditions: member_conditions(status),
                ..Self::default()
            };
        }
        let revision = |f: &str| {
            status
                .get(f)
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
        };
        Self {
            generation,
            observed_generation,
            replicas: int(status, "/replicas"),
            ready: int(status, "/readyReplicas"),
            available: int(status, "/availableReplicas"),
            updated: int(status, "/updatedReplicas"),
            current: int(status, "/currentReplicas"),
            revision_current: revision("currentRevision")
                .is_some_and(|c| Some(c) == revision("updateRevision")),
            job: None,
            conditions: member_conditions(status),
        }
    }

    /// [`CopyStatus::of`] a whole object.
    #[cfg(test)]
    pub(super) fn of_object(o: &Value) -> Self {
        Self::of(
            o["kind"].as_str().unwrap_or("Deployment"),
            o.pointer("/metadata/generation").and_then(Value::as_i64),
            &o["status"],
        )
    }

    /// Whether the member's controller has seen the copy's current generation.
    pub fn caught_up(&self) -> bool {
        self.observed_generation.is_some() && self.observed_generation >= self.generation
    }
}

/// Whether a copy is a Job that has completed: its share is done, so it counts as ready
/// when a member that left the destinations waits for the replacements.
pub fn completed(copy: Option<&CopyStatus>) -> bool {
    copy.and_then(|c| c.job.as_deref())
        .is_some_and(|j| j.complete)
}

/// What one member reports for a workload. It borrows the counts from the member's cache
/// entry: a look at a workload over a thousand members reads a thousand of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberReport<'a> {
    /// The counts of the member's copy, if it holds one of ours.
    pub copy: Option<&'a CopyStatus>,
    /// The last sync error ("" when fine).
    pub error: String,
    /// Whether that error is a name conflict: the member holds an object of that name
    /// that is not Meridian's.
    pub conflict: bool,
    /// When the member was last found or made in sync (RFC 3339).
    pub last_sync_time: Option<String>,
}

/// A `Placement.status.clusters` entry from a member's report.
pub fn cluster_status(cluster: &str, report: &MemberReport) -> ClusterWorkloadStatus {
    let none = CopyStatus::default();
    let c = report.copy.unwrap_or(&none);
    ClusterWorkloadStatus {
        cluster: cluster.to_string(),
        replicas: c.replicas,
        ready_replicas: c.ready,
        available_replicas: c.available,
        updated_replicas: c.updated,
        observed_generation: report.copy.and_then(|c| c.observed_generation),
        last_sync_time: report.last_sync_time.clone(),
        error: report.error.clone(),
        conditions: c.conditions.clone(),
        ..Default::default()
    }
}

/// Whether a member has observed the current federated spec: its controller has seen the
/// copy's generation (checked first: it needs no parse) and the copy, read by `actual`,
/// matches what we want.
pub fn observed(copy: &CopyStatus, actual: impl FnOnce() -> Value, desired: &Value) -> bool {
    copy.caught_up() && drift::in_sync(&actual(), desired)
}

/// The Placement's `Propagated` condition, `(status, reason, message)`: a conflict in any
/// member first (it needs a person), then an override policy that cannot make some
/// member's copy (it needs the policy fixed), then any other error, then whether every
/// member has observed the current spec.
pub fn propagated(
    entries: &[ClusterWorkloadStatus],
    conflict: bool,
    override_failed: bool,
    all_observed: bool,
) -> (&'static str, &'static str, String) {
    let errors = crate::fleet::status::member_errors(entries);
    if conflict {
        ("False", "Conflict", errors.join("; "))
    } else if override_failed {
        ("False", "OverrideFailed", errors.join("; "))
    } else if !errors.is_empty() {
        ("False", "SyncFailed", errors.join("; "))
    } else if all_observed {
        ("True", "InSync", String::new())
    } else {
        (
            "False",
            "Progressing",
            "waiting for members to observe the current spec".to_string(),
        )
    }
}

/// Sums over member entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Pods.
    pub replicas: i32,
    /// Ready pods.
    pub ready: i32,
    /// Available pods.
    pub available: i32,
    /// Pods of the current template.
    pub updated: i32,
}

/// Clears an entry's counts: the member's copy is being removed, its pods terminating.
pub fn count_nothing(e: &mut ClusterWorkloadStatus) {
    e.replicas = 0;
    e.ready_replicas = 0;
    e.available_replicas = 0;
    e.updated_replicas = 0;
}

/// Whether an entry says nothing yet: no copy counted, no sync finished, no error.
pub fn nothing_reported(e: &ClusterWorkloadStatus) -> bool {
    e.replicas == 0
        && e.ready_replicas == 0
        && e.available_replicas == 0
        && e.updated_replicas == 0
        && e.observed_generation.is_none()
        && e.last_sync_time.is_none()
        && e.error.is_empty()
}

/// Sums the entries (members that are leaving count until their copy's removal starts:
/// their pods still run).
pub fn sum(entries: &[ClusterWorkloadStatus]) -> Totals {
    entries.iter().fold(Totals::default(), |t, e| Totals {
        replicas: t.replicas + e.replicas,
        ready: t.ready + e.ready_replicas,
        available: t.available + e.available_replicas,
        updated: t.updated + e.updated_replicas,
    })
}

/// Whether every member reports its whole share ready, available and updated, without
/// error: the end of a rollout, which a user sees the moment `kubectl rollout status` returns.
pub fn settled(entries: &[ClusterWorkloadStatus]) -> bool {
    entries.iter().all(|e| {
        e.error.is_empty()
            && e.ready_replicas == e.replicas
            && e.available_replicas == e.replicas
            && e.updated_replicas == e.replicas
    })
}

/// `maxUnavailable` of a Deployment's rolling update, resolved against `replicas`
/// (percentages round down, as Kubernetes does); Recreate allows none.
pub fn max_unavailable(spec: &Value, replicas: i32) -> i32 {
    if spec.pointer("/strategy/type").and_then(Value::as_str) == Some("Recreate") {
        return 0;
    }
    match spec.pointer("/strategy/rollingUpdate/maxUnavailable") {
        Some(Value::Number(n)) => n.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0),
        Some(Value::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
            Some(p) => i32::try_from(i64::from(replicas) * p / 100).unwrap_or(0),
            None => 0,
        },
        _ => replicas / 4,
    }
}

pub(super) fn condition(
    prev: &Value,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> Value {
    let old = prev
        .pointer("/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let same = old
        .is_some_and(|c| c["status"] == status && c["reason"] == reason && c["message"] == message);
    if same && let Some(c) = old {
        // Unchanged: keep the times, so a steady state writes nothing.
        return c.clone();
    }
    let transition = match old {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": transition})
}

/// What the members report of one workload, for its federated status.
#[derive(Clone, Copy, Debug)]
pub struct Reports<'a> {
    /// The members' entries: the destinations' first, then those of members outside the
    /// destinations that still hold a copy.
    pub entries: &'a [ClusterWorkloadStatus],
    /// The copy behind each entry, in the same order (`None` where a member holds none).
    pub copies: &'a [Option<&'a CopyStatus>],
    /// How many of the entries are destinations'.
    pub destinations: usize,
    /// Whether every destination has observed the spec it should hold.
    pub all_observed: bool,
}

impl Reports<'_> {
    /// The destinations' copies.
    pub fn destination_copies(&self) -> impl Iterator<Item = Option<&CopyStatus>> {
        self.copies.iter().take(self.destinations).copied()
    }
}

/// The federated workload's `status`, by kind: the sums of [`apps_status`] for
/// Deployments and ReplicaSets, [`stateful_set_status`], and a Job's
/// ([`super::job_status::federated`]).
pub fn federated(kind: Kind, fed: &Value, reports: &Reports<'_>, now: &str) -> Value {
    match kind {
        Kind::Deployment | Kind::ReplicaSet => {
            apps_status(kind, fed, sum(reports.entries), reports.all_observed, now)
        }
        Kind::StatefulSet => stateful_set_status(fed, reports),
        Kind::Job => super::job_status::federated(fed, reports, now),
    }
}

/// `observedGeneration` of the federated status: the federated generation once every
/// member has observed the current spec, else the value already written (so rollout
/// status waits).
fn observed_generation(fed: &Value, all_observed: bool) -> Option<i64> {
    if all_observed {
        fed.pointer("/metadata/generation").and_then(Value::as_i64)
    } else {
        fed.pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
    }
}

/// A federated StatefulSet's `status`: member sums and `observedGeneration` as for a
/// Deployment, and revisions named after the federated generation. `updateRevision` is
/// the current generation's; `currentRevision` becomes it only once every destination
/// has observed its copy and finished its own rollout (its current revision is its update
/// revision), so `kubectl rollout status`, which waits for the two to be equal, returns
/// exactly when every member's rollout is done. Until then it keeps the revision it had,
/// or is empty.
pub fn stateful_set_status(fed: &Value, reports: &Reports<'_>) -> Value {
    let totals = sum(reports.entries);
    let current: i32 = reports.copies.iter().flatten().map(|c| c.current).sum();
    let name = fed
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let generation = fed
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let update_revision = format!("{name}-{generation}");
    let done = reports.all_observed
        && reports.destinations > 0
        && reports
            .destination_copies()
            .all(|c| c.is_some_and(|c| c.revision_current));
    let current_revision = if done {
        update_revision.clone()
    } else {
        fed.pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .filter(|r| *r != update_revision)
            .unwrap_or_default()
            .to_string()
    };
    let mut s = json!({
        "replicas": totals.replicas,
        "readyReplicas": totals.ready,
        "currentReplicas": current,
        "updatedReplicas": totals.updated,
        "availableReplicas": totals.available,
        "currentRevision": current_revision,
        "updateRevision": update_revision,
    });
    if let Some(g) = observed_generation(fed, reports.all_observed) {
        s["observedGeneration"] = json!(g);
    }
    s
}

/// A federated Deployment's or ReplicaSet's `status`: member sums; `observedGeneration`
/// becomes the federated generation only once every member has observed the current spec
/// (else the previous value stays, so rollout status waits); Available/Progressing for
/// Deployments.
pub fn apps_status(
    kind: Kind,
    fed: &Value,
    totals: Totals,
    all_observed: bool,
    now: &str,
) -> Value {
    let prev = &fed["status"];
    let desired = int(fed, "/spec/replicas");
    let observed = observed_generation(fed, all_observed);
    let mut s = json!({
        "replicas": totals.replicas,
        "readyReplicas": totals.ready,
        "availableReplicas": totals.available,
    });
    if let Some(g) = observed {
        s["observedGeneration"] = json!(g);
    }
    if kind == Kind::ReplicaSet {
        s["fullyLabeledReplicas"] = json!(totals.replicas);
        return s;
    }
    s["updatedReplicas"] = json!(totals.updated);
    s["unavailableReplicas"] = json!((desired - totals.available).max(0));
    let min_available = desired - max_unavailable(&fed["spec"], desired);
    let available = if totals.available >= min_available {
        condition(
            prev,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    } else {
        condition(
            prev,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    };
    let complete = all_observed
        && totals.updated == desired
        && totals.replicas == desired
        && totals.available == desired;
    let progressing = if complete {
        condition(
            prev,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            "Replicas in every member cluster are updated and available.",
            now,
        )
    } else {
        condition(
            prev,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            "Member clusters are progressing.",
            now,
        )
    };
    s["conditions"] = json!([available, progressing]);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::placements;

    fn entry(c: &str, r: i32, ready: i32, avail: i32, upd: i32) -> ClusterWorkloadStatus {
        ClusterWorkloadStatus {
            cluster: c.into(),
            replicas: r,
            ready_replicas: ready,
            available_replicas: avail,
            updated_replicas: upd,
            ..Default::default()
        }
    }

    #[test]
    fn nothing_reported_until_a_count_a_sync_or_an_error() {
        assert!(nothing_reported(&entry("a", 0, 0, 0, 0)));
        assert!(!nothing_reported(&entry("a", 1, 0, 0, 0)));
        assert!(!nothing_reported(&entry("a", 0, 0, 0, 1)));
        let mut synced = entry("a", 0, 0, 0, 0);
        synced.last_sync_time = Some("2026-11-25T12:00:00Z".into());
        assert!(!nothing_reported(&synced));
        let mut observed = entry("a", 0, 0, 0, 0);
        observed.observed_generation = Some(1);
        assert!(!nothing_reported(&observed));
        let mut failing = entry("a", 0, 0, 0, 0);
        failing.error = "not connected".into();
        assert!(!nothing_reported(&failing));
    }

    #[test]
    fn settled_when_every_share_is_ready_available_and_updated() {
        assert!(settled(&[entry("a", 3, 3, 3, 3), entry("b", 0, 0, 0, 0)]));
        assert!(settled(&[]));
        assert!(!settled(&[entry("a", 3, 3, 3, 3), entry("b", 7, 6, 7, 7)]));
        assert!(!settled(&[entry("a", 3, 3, 2, 3)]));
        assert!(!settled(&[entry("a", 3, 3, 3, 2)]));
        assert!(
            !settled(&[entry("old", 2, 2, 2, 0)]),
            "a leaving member still rolls"
        );
        let mut failing = entry("a", 3, 3, 3, 3);
        failing.error = "timed out".into();
        assert!(!settled(&[failing]));
    }

    #[test]
    fn sums() {
        let t = sum(&[
            entry("a", 3, 3, 2, 3),
            entry("b", 7, 6, 6, 5),
            entry("old", 2, 2, 2, 0),
        ]);
        assert_eq!(
            t,
            Totals {
                replicas: 12,
                ready: 11,
                available: 10,
                updated: 8
            }
        );
        assert_eq!(sum(&[]), Totals::default());
    }

    #[test]
    fn cluster_entry_from_member_object() {
        let copy = CopyStatus::of_object(&json!({"metadata": {"generation": 2},
            "status": {"replicas": 3, "readyReplicas": 2, "availableReplicas": 1, "updatedReplicas": 3, "observedGeneration": 2}}));
        let r = MemberReport {
            copy: Some(&copy),
            error: String::new(),
            conflict: false,
            last_sync_time: Some("t".into()),
        };
        let e = cluster_status("a", &r);
        assert_eq!(
            (
                e.replicas,
                e.ready_replicas,
                e.available_replicas,
                e.updated_replicas
            ),
            (3, 2, 1, 3)
        );
        assert_eq!(e.observed_generation, Some(2));
        let missing = cluster_status(
            "b",
            &MemberReport {
                error: "down".into(),
                ..Default::default()
            },
        );
        assert_eq!((missing.replicas, missing.error.as_str()), (0, "down"));
        assert!(missing.conditions.is_empty());
    }

    /// A member Deployment's conditions as the controller there writes them.
    fn deployment(progressing_message: &str, updated_at: &str, available: &str) -> Value {
        json!({"kind": "Deployment", "metadata": {"generation": 2},
        "status": {"replicas": 3, "observedGeneration": 2, "conditions": [
            {"type": "Available", "status": available, "reason": "MinimumReplicasAvailable",
             "lastUpdateTime": updated_at, "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
             "message": progressing_message,
             "lastUpdateTime": updated_at, "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}})
    }

    #[test]
    fn a_copys_conditions_show_on_its_entry_and_change_only_with_what_matters() {
        let entry = |o: &Value| {
            cluster_status(
                "a",
                &MemberReport {
                    copy: Some(&CopyStatus::of_object(o)),
                    ..Default::default()
                },
            )
        };
        let base = deployment(
            "ReplicaSet \"web-1\" is progressing.",
            "2026-01-01T00:00:05Z",
            "True",
        );
        let e = entry(&base);
        let types: Vec<_> = e
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(types, [("Available", "True"), ("Progressing", "True")]);
        assert_eq!(
            e.conditions[1].message,
            "ReplicaSet \"web-1\" is progressing."
        );
        assert_eq!(
            e.conditions[0].last_transition_time.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        // (what, the member's copy, whether its entry (and so the Placement) changes)
        let cases = [
            (
                "only lastUpdateTime moved",
                deployment(
                    "ReplicaSet \"web-1\" is progressing.",
                    "2026-01-01T00:09:00Z",
                    "True",
                ),
                false,
            ),
            (
                "the rollout moved on",
                deployment(
                    "ReplicaSet \"web-1\" has successfully progressed.",
                    "2026-01-01T00:09:00Z",
                    "True",
                ),
                true,
            ),
            (
                "availability lost",
                deployment(
                    "ReplicaSet \"web-1\" is progressing.",
                    "2026-01-01T00:05:00Z",
                    "False",
                ),
                true,
            ),
        ];
        for (what, copy, changes) in cases {
            let other = entry(&copy);
            assert_eq!(
                placements::entries_digest(&[other])
                    != placements::entries_digest(std::slice::from_ref(&e)),
                changes,
                "{what}"
            );
            assert_eq!(
                CopyStatus::of_object(&copy) != CopyStatus::of_object(&base),
                changes,
                "{what}: the member's report"
            );
        }
        // Bounded: a runaway list does not grow the Placement.
        let many: Vec<Value> = (0..50)
            .map(|i| json!({"type": format!("T{i}"), "status": "True"}))
            .collect();
        let long = entry(&json!({"status": {"conditions": many}}));
        assert!(!long.conditions.is_empty() && long.conditions.len() < 50);
    }

    #[test]
    fn propagated_condition_table() {
        let mut failing = entry("a", 3, 3, 3, 3);
        failing.error = "creating Deployment shop/web in a: timed out".into();
        let fine = entry("b", 1, 1, 1, 1);
        let two = [failing, fine.clone()];
        assert_eq!(
            propagated(&two, true, false, false),
            (
                "False",
                "Conflict",
                "a: creating Deployment shop/web in a: timed out".into()
            )
        );
        assert_eq!(propagated(&two, false, false, true).1, "SyncFailed");
        assert_eq!(propagated(&two, false, true, true).1, "OverrideFailed");
        // An error text that mentions a conflict is not one.
        let mut worded = entry("c", 0, 0, 0, 0);
        worded.error = "conflict: made up".into();
        assert_eq!(propagated(&[worded], false, false, false).1, "SyncFailed");
        assert_eq!(
            propagated(std::slice::from_ref(&fine), false, false, true),
            ("True", "InSync", String::new())
        );
        assert_eq!(propagated(&[fine], false, false, false).1, "Progressing");
    }

    #[test]
    fn max_unavailable_table() {
        for (spec, replicas, want) in [
            (json!({}), 10, 2),
            (json!({"strategy": {"type": "Recreate"}}), 10, 0),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": 3}}}),
                10,
                3,
            ),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": "50%"}}}),
                5,
                2,
            ),
            (
                json!({"strategy": {"rollingUpdate": {"maxUnavailable": "0%"}}}),
                5,
                0,
            ),
        ] {
            assert_eq!(max_unavailable(&spec, replicas), want, "{spec}");
        }
    }

    #[test]
    fn observed_generation_waits_for_every_member() {
        let fed = json!({"metadata": {"generation": 5}, "spec": {"replicas": 10},
                         "status": {"observedGeneration": 4}});
        let t = Totals {
            replicas: 10,
            ready: 10,
            available: 10,
            updated: 10,
        };
        let waiting = apps_status(Kind::Deployment, &fed, t, false, "now");
        assert_eq!(waiting["observedGeneration"], 4);
        assert_eq!(waiting["conditions"][1]["reason"], "ReplicaSetUpdated");
        let done = apps_status(Kind::Deployment, &fed, t, true, "now");
        assert_eq!(done["observedGeneration"], 5);
        assert_eq!(done["conditions"][0]["status"], "True");
        assert_eq!(done["conditions"][1]["reason"], "NewReplicaSetAvailable");
        assert_eq!(done["readyReplicas"], 10);
        // A steady state rewrites nothing: conditions keep their times.
        let mut again = fed.clone();
        again["status"] = done.clone();
        assert_eq!(
            apps_status(Kind::Deployment, &again, t, true, "later"),
            done
        );
    }

    #[test]
    fn availability_uses_max_unavailable() {
        let fed = json!({"metadata": {"generation": 1}, "spec": {"replicas": 10}});
        let t = |a| Totals {
            replicas: 10,
            ready: a,
            available: a,
            updated: 10,
        };
        assert_eq!(
            apps_status(Kind::Deployment, &fed, t(8), true, "n")["conditions"][0]["status"],
            "True"
        );
        assert_eq!(
            apps_status(Kind::Deployment, &fed, t(7), true, "n")["conditions"][0]["status"],
            "False"
        );
        let rs = apps_status(Kind::ReplicaSet, &fed, t(7), true, "n");
        assert!(rs.get("conditions").is_none());
        assert_eq!(rs["observedGeneration"], 1);
    }

    #[test]
    fn observed_needs_sync_and_generation() {
        let desired = json!({"metadata": {}, "spec": {"replicas": 3}});
        let member = |replicas: i32, gen_: i64, obs: i64| {
            json!({"metadata": {"generation": gen_},
            "spec": {"replicas": replicas}, "status": {"observedGeneration": obs}})
        };
        let check = |m: Value| observed(&CopyStatus::of_object(&m), || m.clone(), &desired);
        assert!(check(member(3, 2, 2)));
        assert!(!check(member(3, 3, 2)));
        assert!(!check(member(4, 2, 2)));
        // A copy whose controller is behind is not parsed at all.
        let behind = CopyStatus::of_object(&member(3, 3, 2));
        assert!(!observed(&behind, || unreachable!(), &desired));
    }

    fn sts_copy(replicas: i32, ready: i32, updated: i32, current: i32, done: bool) -> CopyStatus {
        let update = if done { "db-a" } else { "db-b" };
        CopyStatus::of_object(
            &json!({"kind": "StatefulSet", "metadata": {"generation": 2},
            "status": {"observedGeneration": 2, "replicas": replicas, "readyReplicas": ready,
                       "availableReplicas": ready, "updatedReplicas": updated,
                       "currentReplicas": current, "currentRevision": "db-a",
                       "updateRevision": update}}),
        )
    }

    #[test]
    fn stateful_set_status_table() {
        let fed = json!({"metadata": {"name": "db", "generation": 4}, "spec": {"replicas": 3},
                         "status": {"observedGeneration": 3, "currentRevision": "db-3"}});
        let done = sts_copy(1, 1, 1, 1, true);
        let rolling = sts_copy(1, 1, 0, 1, false);
        let entry_of = |c: &str, s: &CopyStatus| {
            cluster_status(
                c,
                &MemberReport {
                    copy: Some(s),
                    ..Default::default()
                },
            )
        };
        // (case, copies of a, b, c, all observed) → (currentRevision, observedGeneration)
        type Case<'a> = (&'a str, [Option<&'a CopyStatus>; 3], bool, &'a str, i64);
        let cases: [Case; 5] = [
            (
                "every member done",
                [Some(&done), Some(&done), Some(&done)],
                true,
                "db-4",
                4,
            ),
            (
                "one member rolling",
                [Some(&done), Some(&rolling), Some(&done)],
                true,
                "db-3",
                4,
            ),
            (
                "one member missing",
                [Some(&done), None, Some(&done)],
                true,
                "db-3",
                4,
            ),
            (
                "not observed yet",
                [Some(&done), Some(&done), Some(&done)],
                false,
                "db-3",
                3,
            ),
            ("nothing yet", [None, None, None], false, "db-3", 3),
        ];
        for (case, copies, all_observed, current, observed) in cases {
            let entries: Vec<_> = ["a", "b", "c"]
                .iter()
                .zip(&copies)
                .map(|(c, s)| entry_of(c, s.unwrap_or(&CopyStatus::default())))
                .collect();
            let r = Reports {
                entries: &entries,
                copies: &copies,
                destinations: 3,
                all_observed,
            };
            let st = federated(Kind::StatefulSet, &fed, &r, "now");
            assert_eq!(st["updateRevision"], "db-4", "{case}");
            assert_eq!(st["currentRevision"], current, "{case}");
            assert_eq!(st["observedGeneration"], observed, "{case}");
        }
        let entries: Vec<_> = [("a", &done), ("b", &rolling)]
            .iter()
            .map(|(c, s)| entry_of(c, s))
            .collect();
        let copies = [Some(&done), Some(&rolling)];
        let r = Reports {
            entries: &entries,
            copies: &copies,
            destinations: 2,
            all_observed: true,
        };
        let st = stateful_set_status(&fed, &r);
        assert_eq!(
            (
                &st["replicas"],
                &st["readyReplicas"],
                &st["currentReplicas"],
                &st["updatedReplicas"],
                &st["availableReplicas"]
            ),
            (&json!(2), &json!(2), &json!(2), &json!(1), &json!(2))
        );
        // Once done at a generation, a member that starts rolling again (an edit made in
        // it, reverted) takes the current revision away until it is done.
        let mut settled = fed.clone();
        settled["status"]["currentRevision"] = json!("db-4");
        assert_eq!(stateful_set_status(&settled, &r)["currentRevision"], "");
    }

    #[test]
    fn a_member_jobs_counts() {
        let c = CopyStatus::of_object(&json!({"kind": "Job", "metadata": {"generation": 3},
            "status": {"active": 2, "ready": 1, "succeeded": 4, "failed": 1,
                       "startTime": "2026-11-27T10:00:00Z",
                       "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                       "message": "Job was active longer than specified deadline"}]}}));
        // A Job reports no observedGeneration: its generation counts as observed.
        assert!(c.caught_up());
        assert_eq!((c.replicas, c.ready, c.available, c.updated), (2, 1, 1, 2));
        let job = c.job.as_deref().expect("a Job's status");
        assert_eq!((job.succeeded, job.failed, job.complete), (4, 1, false));
        assert_eq!(
            job.failure.as_ref().map(|(r, _)| r.as_str()),
            Some("DeadlineExceeded")
        );
        assert_eq!(job.start_time.as_deref(), Some("2026-11-27T10:00:00Z"));
        assert!(!completed(Some(&c)));
        assert!(completed(Some(&CopyStatus::of_object(
            &json!({"kind": "Job",
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}})
        ))));
        assert!(!completed(None));
        let sts = sts_copy(2, 2, 2, 2, false);
        assert!(sts.job.is_none());
        assert!(!sts.revision_current);
        assert!(sts_copy(2, 2, 2, 2, true).revision_current);
    }
}

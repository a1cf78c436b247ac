//! What a Placement's status says of the copies: one entry per destination cluster
//! (synced, or the error with its reason) and the `Propagated` condition over them.

use std::collections::BTreeMap;

use fed_api::common::Condition;
use fed_api::placement::{ClusterWorkloadStatus, TargetCluster};

/// The `Propagated` condition type (the workload controller writes the same one).
pub const PROPAGATED: &str = "Propagated";

/// Why a copy could not be written in a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// The member does not serve the kind (a custom resource whose CRD it lacks).
    KindNotServed,
    /// Someone else's object holds the name in the member.
    Conflict,
    /// The member's API server refused the object (validation, admission, quota).
    Rejected,
    /// The member could not be reached or answered with a server error.
    Unreachable,
    /// An override policy's rule could not change the copy for this member: nothing is
    /// pushed there until the policy is fixed.
    OverrideFailed,
}

impl FailReason {
    /// The CamelCase reason written in the per-cluster error and the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::KindNotServed => "KindNotServed",
            FailReason::Conflict => "Conflict",
            FailReason::Rejected => "Rejected",
            FailReason::Unreachable => "Unreachable",
            FailReason::OverrideFailed => "OverrideFailed",
        }
    }
}

/// The last result of syncing one member's copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The member holds the copy as wanted, since `at` (RFC 3339).
    Synced {
        /// When it was last seen in sync.
        at: String,
    },
    /// The last attempt failed.
    Failed {
        /// Why, as a reason.
        reason: FailReason,
        /// Detail from the member or the decision.
        message: String,
    },
}

/// `status.clusters` for copies placed on `dest`, from the members' last `outcomes`
/// (a destination with none yet is pending: an entry with neither time nor error).
pub fn cluster_entries(
    dest: &[TargetCluster],
    outcomes: &BTreeMap<String, Outcome>,
) -> Vec<ClusterWorkloadStatus> {
    let mut out: Vec<ClusterWorkloadStatus> = dest
        .iter()
        .map(|t| {
            let mut e = ClusterWorkloadStatus {
                cluster: t.cluster.clone(),
                ..Default::default()
            };
            match outcomes.get(&t.cluster) {
                Some(Outcome::Synced { at }) => e.last_sync_time = Some(at.clone()),
                Some(Outcome::Failed { reason, message }) => {
                    e.error = format!("{}: {message}", reason.as_str());
                }
                None => {}
            }
            e
        })
        .collect();
    out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    out
}

/// The `Propagated` condition (without times) over `dest` and the members' `outcomes`.
pub fn propagated(dest: &[TargetCluster], outcomes: &BTreeMap<String, Outcome>) -> Condition {
    let mut failed: Vec<String> = Vec::new();
    let mut reasons: Vec<FailReason> = Vec::new();
    let mut pending = 0usize;
    for t in dest {
        match outcomes.get(&t.cluster) {
            Some(Outcome::Synced { .. }) => {}
            Some(Outcome::Failed { reason, message }) => {
                failed.push(format!("{}: {}: {message}", t.cluster, reason.as_str()));
                reasons.push(*reason);
            }
            None => pending += 1,
        }
    }
    reasons.sort_by_key(|r| r.as_str());
    reasons.dedup();
    let (status, reason, message) = match (failed.is_empty(), pending) {
        (true, 0) if dest.is_empty() => ("False", "NoDestination", "no cluster is selected".into()),
        (true, 0) => (
            "True",
            "InSync",
            format!("{} of {} clusters in sync", dest.len(), dest.len()),
        ),
        (true, n) => (
            "False",
            "Progressing",
            format!("{n} of {} clusters not yet synced", dest.len()),
        ),
        // One reason when every failure shares it, so `kubectl wait` and alerts can key on it.
        (false, _) => (
            "False",
            match reasons.as_slice() {
                [one] => one.as_str(),
                _ => "MemberErrors",
            },
            failed.join("; "),
        ),
    };
    Condition {
        type_: PROPAGATED.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        ..Default::default()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn dest(clusters: &[&str]) -> Vec<TargetCluster> {
        clusters.iter().map(|c| TargetCluster::new(*c, 0)).collect()
    }

    /// An outcome synced at a fixed time (shared with the other copy-path tests).
    pub(in crate::copies) fn synced() -> Outcome {
        Outcome::Synced {
            at: "2026-01-01T00:00:00Z".into(),
        }
    }

    /// A failed outcome (shared with the other copy-path tests).
    pub(in crate::copies) fn failed(reason: FailReason, message: &str) -> Outcome {
        Outcome::Failed {
            reason,
            message: message.into(),
        }
    }

    /// (destinations, outcomes, condition status, reason)
    type Case = (
        Vec<&'static str>,
        Vec<(&'static str, Outcome)>,
        &'static str,
        &'static str,
    );

    #[test]
    fn condition_table() {
        let crd_missing = failed(
            FailReason::KindNotServed,
            "example.com/v1 widgets is not served",
        );
        let cases: Vec<Case> = vec![
            (vec![], vec![], "False", "NoDestination"),
            (
                vec!["a", "b"],
                vec![("a", synced()), ("b", synced())],
                "True",
                "InSync",
            ),
            (
                vec!["a", "b"],
                vec![("a", synced())],
                "False",
                "Progressing",
            ),
            // An outcome of a cluster that left the placement does not count.
            (
                vec!["a"],
                vec![("a", synced()), ("z", crd_missing.clone())],
                "True",
                "InSync",
            ),
            (
                vec!["a", "b"],
                vec![("a", synced()), ("b", crd_missing.clone())],
                "False",
                "KindNotServed",
            ),
            (
                vec!["a", "b"],
                vec![
                    ("a", failed(FailReason::Conflict, "not Meridian's")),
                    ("b", crd_missing),
                ],
                "False",
                "MemberErrors",
            ),
        ];
        for (i, (d, o, status, reason)) in cases.into_iter().enumerate() {
            let outcomes: BTreeMap<String, Outcome> =
                o.into_iter().map(|(c, o)| (c.to_owned(), o)).collect();
            let c = propagated(&dest(&d), &outcomes);
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                (status, reason),
                "case {i}: {c:?}"
            );
        }
    }

    #[test]
    fn entries_per_destination() {
        let outcomes: BTreeMap<String, Outcome> = [
            ("b".to_owned(), synced()),
            (
                "a".to_owned(),
                failed(FailReason::KindNotServed, "no widgets"),
            ),
            ("gone".to_owned(), synced()),
        ]
        .into();
        let e = cluster_entries(&dest(&["b", "a", "c"]), &outcomes);
        let got: Vec<(&str, Option<&str>, &str)> = e
            .iter()
            .map(|e| {
                (
                    e.cluster.as_str(),
                    e.last_sync_time.as_deref(),
                    e.error.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", None, "KindNotServed: no widgets"),
                ("b", Some("2026-01-01T00:00:00Z"), ""),
                ("c", None, ""),
            ]
        );
    }
}

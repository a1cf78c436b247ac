//! Turns a decision into the words users read: the `Scheduled` condition, unschedulable
//! reasons and per-cluster "why (not)" lines, shared by the live loop and `fedctl plan`.
//!
//! Texts here are stable for a stable decision: durations that grow with the clock
//! ("offline for 42s") are left out, so re-deciding an unchanged workload rewrites nothing.

use std::fmt::Write as _;

use serde::Serialize;

use crate::types::{
    ClusterOutcome, ClusterVerdict, Decision, Reason, TargetCluster, Unschedulable,
    UnschedulableCause, UnschedulableReason, UnschedulableStatus,
};

/// Distinct "why not" texts listed in one message before the rest are only counted: a
/// 1,000-cluster fleet must not produce a megabyte condition.
pub const MAX_REASONS_LISTED: usize = 10;
/// Clusters named with a shared "why not" text; a larger group is only counted ("98
/// clusters: ClusterAffinity: …"), as kube-scheduler counts nodes per reason.
pub const MAX_CLUSTERS_NAMED: usize = 3;

/// What the `Scheduled` condition says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Condition status: every requested replica was placed.
    pub scheduled: bool,
    /// CamelCase reason: `Scheduled`, `Unschedulable`, `NoPolicy`, `NoCandidates`,
    /// `InvalidPreferences` or `SpreadConstraintUnsatisfiable`.
    pub reason: &'static str,
    /// One line: where replicas went (counted only when some are left over) and why not
    /// the other clusters.
    pub message: String,
}

/// A reason's text without clock-dependent numbers.
pub fn reason_text(r: &Reason) -> String {
    match r {
        Reason::NotReady { .. } => "not Ready".to_owned(),
        Reason::OfflineTolerated { toleration, .. } => {
            format!("offline within the {toleration}s toleration: replicas kept in place")
        }
        Reason::OfflineBeyondToleration { toleration, .. } => {
            format!("offline beyond the {toleration}s toleration: replicas moved")
        }
        other => other.to_string(),
    }
}

/// Plugins whose verdict follows from the policy and the cluster's identity alone.
const POLICY_PLUGINS: [&str; 3] = ["APIEnablement", "ClusterAffinity", "TaintToleration"];

/// `cluster: Plugin: reason, Plugin: reason` for one verdict.
pub fn verdict_text(v: &ClusterVerdict) -> String {
    format!("{}:{}", cluster_label(v), reasons_text(v))
}

/// The cluster's name, with the replicas it keeps for now.
fn cluster_label(v: &ClusterVerdict) -> String {
    if v.outcome == ClusterOutcome::Kept {
        format!("{} (keeps {})", v.cluster, v.replicas)
    } else {
        v.cluster.clone()
    }
}

/// ` Plugin: reason, Plugin: reason` for one verdict. When the policy itself rules the
/// cluster out, only those reasons are given: they answer "why not?" for good, and the
/// text then stays the same while the cluster's health or capacity moves, so unrelated
/// clusters failing rewrites no condition.
fn reasons_text(v: &ClusterVerdict) -> String {
    let mut s = String::new();
    let by_policy = v.reasons.iter().any(|r| POLICY_PLUGINS.contains(&r.plugin));
    let shown = v
        .reasons
        .iter()
        .filter(|r| !by_policy || POLICY_PLUGINS.contains(&r.plugin));
    for (i, r) in shown.enumerate() {
        let sep = if i == 0 { " " } else { ", " };
        let _ = write!(s, "{sep}{}: {}", r.plugin, reason_text(&r.reason));
    }
    s
}

/// Verdicts worth explaining: clusters left without replicas or kept only for now, and
/// when replicas are left over, every cluster with a reason (e.g. full at 8).
fn explained(verdicts: &[ClusterVerdict], short: bool) -> impl Iterator<Item = &ClusterVerdict> {
    verdicts.iter().filter(move |v| {
        !v.reasons.is_empty() && (short || v.replicas == 0 || v.outcome == ClusterOutcome::Kept)
    })
}

/// Appends `; a, b: why` per distinct "why not" text, in the order clusters come, with
/// large groups counted instead of named: on a 100-cluster fleet a policy naming two
/// clusters rules out 98 for one reason, and the condition says so in one clause.
fn push_clusters(m: &mut String, verdicts: &[ClusterVerdict], short: bool) {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for v in explained(verdicts, short) {
        let why = reasons_text(v);
        let label = cluster_label(v);
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, labels)) => labels.push(label),
            None => groups.push((why, vec![label])),
        }
    }
    for (why, labels) in groups.iter().take(MAX_REASONS_LISTED) {
        if labels.len() <= MAX_CLUSTERS_NAMED {
            let _ = write!(m, "; {}:{why}", labels.join(", "));
        } else {
            let _ = write!(m, "; {} clusters:{why}", labels.len());
        }
    }
    let rest: usize = groups
        .iter()
        .skip(MAX_REASONS_LISTED)
        .map(|(_, l)| l.len())
        .sum();
    if rest > 0 {
        let _ = write!(m, "; and {rest} more clusters");
    }
}

/// Condition reason for a failed decision.
pub fn failure_code(reason: &UnschedulableReason) -> &'static str {
    match reason {
        UnschedulableReason::NoPolicy => "NoPolicy",
        UnschedulableReason::InvalidPreferences(_) => "InvalidPreferences",
        UnschedulableReason::NoCandidates => "NoCandidates",
        UnschedulableReason::SpreadUnsatisfiable { .. } => "SpreadConstraintUnsatisfiable",
    }
}

/// The `Scheduled` condition for a decision.
pub fn outcome(result: &Result<Decision, Unschedulable>) -> Outcome {
    match result {
        Ok(d) => {
            let unplaced = d.unschedulable.replicas;
            // Counts only while replicas are left over: a scale that places every replica
            // (in as many clusters as before) rewrites no condition, and `destClusters`
            // already says how many go where.
            let mut message = if unplaced == 0 {
                format!(
                    "all replicas placed in {} clusters ({:?})",
                    d.targets.len(),
                    d.strategy
                )
            } else {
                format!(
                    "{}/{} replicas placed in {} clusters ({:?}); {unplaced} unschedulable",
                    d.requested - unplaced.min(d.requested),
                    d.requested,
                    d.targets.len(),
                    d.strategy
                )
            };
            push_clusters(&mut message, &d.clusters, unplaced > 0);
            Outcome {
                scheduled: unplaced == 0,
                reason: if unplaced == 0 {
                    "Scheduled"
                } else {
                    "Unschedulable"
                },
                message,
            }
        }
        Err(u) => {
            let mut message = u.reason.to_string();
            push_clusters(&mut message, &u.clusters, false);
            Outcome {
                scheduled: false,
                reason: failure_code(&u.reason),
                message,
            }
        }
    }
}

/// `destClusters`: the decision's targets, or nothing when unschedulable.
pub fn dest_clusters(result: &Result<Decision, Unschedulable>) -> Vec<TargetCluster> {
    match result {
        Ok(d) => d.targets.clone(),
        Err(_) => Vec::new(),
    }
}

/// `status.unschedulable` with stable messages; a failed decision leaves all `requested`
/// replicas unplaced, each cluster's reasons attached.
pub fn unschedulable(
    result: &Result<Decision, Unschedulable>,
    requested: u32,
) -> UnschedulableStatus {
    let (replicas, verdicts, listed): (u32, &[ClusterVerdict], Vec<&str>) = match result {
        Ok(d) => (
            d.unschedulable.replicas,
            &d.clusters,
            d.unschedulable
                .reasons
                .iter()
                .map(|c| c.cluster.as_str())
                .collect(),
        ),
        Err(u) => (
            requested,
            &u.clusters,
            u.clusters.iter().map(|v| v.cluster.as_str()).collect(),
        ),
    };
    if replicas == 0 {
        return UnschedulableStatus::default();
    }
    let reasons = listed
        .into_iter()
        .filter_map(|name| {
            let v = verdicts.iter().find(|v| v.cluster == name)?;
            let r = v.reasons.last()?;
            Some(UnschedulableCause {
                cluster: v.cluster.clone(),
                reason: r.reason.code().to_owned(),
                message: format!("{}: {}", r.plugin, reason_text(&r.reason)),
            })
        })
        .collect();
    UnschedulableStatus { replicas, reasons }
}

/// The earliest moment, in seconds from the snapshot's `now`, at which a cluster that is
/// offline within its toleration passes it, so the caller can re-decide right then.
pub fn toleration_expiry(result: &Result<Decision, Unschedulable>) -> Option<u64> {
    let verdicts = match result {
        Ok(d) => &d.clusters,
        Err(u) => &u.clusters,
    };
    verdicts
        .iter()
        .flat_map(|v| &v.reasons)
        .filter_map(|r| match r.reason {
            // The filter evicts once `offline_for > toleration`, one second after equality.
            Reason::OfflineTolerated {
                offline_for: Some(s),
                toleration,
            } => Some((toleration + 1).saturating_sub(u64::try_from(s).unwrap_or(0))),
            _ => None,
        })
        .min()
}

/// Clusters whose replicas the decision takes away because they are offline beyond
/// their toleration (an eviction, which the caller may rate-limit).
pub fn evictions<'a>(
    result: &'a Result<Decision, Unschedulable>,
    previous: &[TargetCluster],
) -> Vec<&'a str> {
    let verdicts = match result {
        Ok(d) => &d.clusters,
        Err(u) => &u.clusters,
    };
    verdicts
        .iter()
        .filter(|v| {
            v.reasons
                .iter()
                .any(|r| matches!(r.reason, Reason::OfflineBeyondToleration { .. }))
                && previous
                    .iter()
                    .any(|t| t.cluster == v.cluster && t.replicas > v.replicas)
        })
        .map(|v| v.cluster.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{PluginReason, Strategy};

    fn verdict(
        cluster: &str,
        outcome: ClusterOutcome,
        replicas: u32,
        reasons: Vec<Reason>,
    ) -> ClusterVerdict {
        ClusterVerdict {
            cluster: cluster.into(),
            outcome,
            replicas,
            capacity: None,
            reasons: reasons
                .into_iter()
                .map(|reason| PluginReason {
                    plugin: "P",
                    reason,
                })
                .collect(),
        }
    }

    fn decision(clusters: Vec<ClusterVerdict>, unplaced: u32) -> Decision {
        Decision {
            targets: clusters
                .iter()
                .filter(|v| v.replicas > 0)
                .map(|v| TargetCluster::new(v.cluster.clone(), v.replicas))
                .collect(),
            requested: 10,
            unschedulable: UnschedulableStatus {
                replicas: unplaced,
                reasons: if unplaced > 0 {
                    vec![UnschedulableCause {
                        cluster: "c".into(),
                        reason: "InsufficientCapacity".into(),
                        message: "x".into(),
                    }]
                } else {
                    vec![]
                },
            },
            strategy: Strategy::StaticWeight,
            policy: None,
            clusters,
        }
    }

    #[test]
    fn outcome_messages_are_stable_and_explain() {
        let tolerated = |s| Reason::OfflineTolerated {
            offline_for: Some(s),
            toleration: 300,
        };
        let d1 = decision(
            vec![
                verdict("a", ClusterOutcome::Selected, 4, vec![]),
                verdict("b", ClusterOutcome::Kept, 6, vec![tolerated(10)]),
                verdict("c", ClusterOutcome::Filtered, 0, vec![Reason::Excluded]),
            ],
            0,
        );
        let mut d2 = d1.clone();
        d2.clusters[1].reasons[0].reason = tolerated(20);
        let mut d3 = d1.clone();
        d3.clusters[2].reasons.insert(
            0,
            PluginReason {
                plugin: "ClusterHealth",
                reason: Reason::NotReady { offline_for: None },
            },
        );
        d3.clusters[2].reasons[1].plugin = "ClusterAffinity";
        let mut d4 = d1.clone();
        d4.clusters[2].reasons[0].plugin = "ClusterAffinity";
        assert_eq!(
            outcome(&Ok(d3)),
            outcome(&Ok(d4)),
            "health of a cluster the policy excludes must not change the text"
        );
        let o = outcome(&Ok(d1));
        assert_eq!(o, outcome(&Ok(d2)), "clock must not change the text");
        assert!(o.scheduled);
        assert_eq!(o.reason, "Scheduled");
        assert_eq!(
            o.message,
            "all replicas placed in 2 clusters (StaticWeight); b (keeps 6): P: offline within \
             the 300s toleration: replicas kept in place; c: P: excluded by clusterAffinity.exclude"
        );
    }

    #[test]
    fn a_scale_within_the_same_clusters_keeps_the_text() {
        let placed = |a, b| {
            let mut d = decision(
                vec![
                    verdict("a", ClusterOutcome::Selected, a, vec![]),
                    verdict("b", ClusterOutcome::Selected, b, vec![]),
                ],
                0,
            );
            d.requested = a + b;
            outcome(&Ok(d))
        };
        assert_eq!(placed(3, 7), placed(7, 13));
        assert_eq!(
            placed(3, 7).message,
            "all replicas placed in 2 clusters (StaticWeight)"
        );
        assert_ne!(placed(3, 7), placed(3, 0), "one cluster fewer is news");
    }

    #[test]
    fn partial_and_failed() {
        let d = decision(
            vec![
                verdict("a", ClusterOutcome::Selected, 7, vec![]),
                verdict(
                    "c",
                    ClusterOutcome::Filtered,
                    0,
                    vec![Reason::NotReady {
                        offline_for: Some(5),
                    }],
                ),
            ],
            3,
        );
        let r = Ok(d);
        let o = outcome(&r);
        assert!(!o.scheduled);
        assert_eq!(o.reason, "Unschedulable");
        assert!(o.message.starts_with("7/10 replicas placed in 1 clusters (StaticWeight); 3 unschedulable; c: P: not Ready"), "{}", o.message);
        let u = unschedulable(&r, 10);
        assert_eq!(u.replicas, 3);
        assert_eq!(u.reasons[0].reason, "ClusterNotReady");
        assert_eq!(u.reasons[0].message, "P: not Ready");

        let err: Result<Decision, Unschedulable> = Err(Unschedulable {
            reason: UnschedulableReason::NoPolicy,
            clusters: vec![],
        });
        let o = outcome(&err);
        assert_eq!((o.scheduled, o.reason), (false, "NoPolicy"));
        assert!(dest_clusters(&err).is_empty());
        assert_eq!(unschedulable(&err, 4).replicas, 4);
        let many: Vec<ClusterVerdict> = (0..15)
            .map(|i| {
                verdict(
                    &format!("m{i:02}"),
                    ClusterOutcome::Filtered,
                    0,
                    vec![Reason::Excluded],
                )
            })
            .collect();
        let o = outcome(&Err(Unschedulable {
            reason: UnschedulableReason::NoCandidates,
            clusters: many,
        }));
        assert_eq!(o.reason, "NoCandidates");
        // One reason for all fifteen: one clause, counted, not fifteen named.
        assert_eq!(
            o.message,
            format!(
                "{}; 15 clusters: P: {}",
                o.message.split(';').next().unwrap(),
                Reason::Excluded
            ),
        );
        // Three with one reason are named; past ten distinct reasons the rest are counted.
        let mixed: Vec<ClusterVerdict> = (0..3)
            .map(|i| {
                verdict(
                    &format!("x{i}"),
                    ClusterOutcome::Filtered,
                    0,
                    vec![Reason::Excluded],
                )
            })
            .chain((0..12).map(|i| {
                verdict(
                    &format!("t{i:02}"),
                    ClusterOutcome::Filtered,
                    0,
                    vec![Reason::OfflineBeyondToleration {
                        offline_for: None,
                        toleration: i,
                    }],
                )
            }))
            .collect();
        let o = outcome(&Err(Unschedulable {
            reason: UnschedulableReason::NoCandidates,
            clusters: mixed,
        }));
        assert!(o.message.contains("; x0, x1, x2: P: "), "{}", o.message);
        assert!(
            o.message.contains("; t08: P: offline beyond the 8s"),
            "{}",
            o.message
        );
        assert!(!o.message.contains("t09"), "{}", o.message);
        assert!(
            o.message.ends_with("; and 3 more clusters"),
            "{}",
            o.message
        );
    }

    #[test]
    fn expiry_and_evictions() {
        let d = decision(
            vec![
                verdict("a", ClusterOutcome::Selected, 10, vec![]),
                verdict(
                    "b",
                    ClusterOutcome::Kept,
                    0,
                    vec![Reason::OfflineTolerated {
                        offline_for: Some(1),
                        toleration: 2,
                    }],
                ),
                verdict(
                    "c",
                    ClusterOutcome::Filtered,
                    0,
                    vec![Reason::OfflineBeyondToleration {
                        offline_for: Some(9),
                        toleration: 2,
                    }],
                ),
            ],
            0,
        );
        let r = Ok(d);
        assert_eq!(toleration_expiry(&r), Some(2));
        let prev = vec![TargetCluster::new("a", 4), TargetCluster::new("c", 6)];
        assert_eq!(evictions(&r, &prev), vec!["c"]);
        assert!(evictions(&r, &[TargetCluster::new("a", 10)]).is_empty());
    }
}

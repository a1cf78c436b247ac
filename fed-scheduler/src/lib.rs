//! Meridian's federation scheduler core: pure placement decisions over plain types.
//!
//! [`schedule`] runs the pipeline filter → score → select → divide for one workload over a
//! [`Snapshot`] of the fleet and returns a [`Decision`] with per-cluster reasons, or
//! [`Unschedulable`] when nothing can be placed. [`select_policy`] picks the policy that
//! applies to a workload; [`copies::place_copies`] places kinds without replicas (a copy in
//! every selected cluster). [`plan_offline`] runs the same decisions over objects read from
//! YAML. Nothing in the core talks to Kubernetes, the network or the clock: the caller
//! passes `now` in the snapshot and applies the result. [`runtime`] is that caller — the
//! watch loop and API writes of the `fed-scheduler` binary; the core never imports it.

pub mod capacity;
pub mod copies;
pub mod explain;
pub mod fedv1;
pub mod offline;
pub mod plugins;
pub mod policy_match;
pub mod runtime;
mod time;
pub mod types;

use std::collections::HashMap;

use plugins::divide::{Divide, FederationV1, Shares};
use plugins::filter::{self as f, Filter, Severity};
use plugins::score::score_all;
use plugins::select::SpreadConstraints;
use plugins::{Candidate, Ctx};

pub use fed_api::quantity::QuantityError;
pub use fedv1::{PREFERENCES_ANNOTATION, Preferences};
pub use offline::{PlanError, PlanInput, PlanOptions, PlanReport, placement_name, plan_offline};
pub use policy_match::select_policy;
pub use time::TimeError;
pub use types::*;

/// Decides where `workload`'s replicas run.
///
/// `policy` is the policy chosen by [`select_policy`] (if any); a Federation v1
/// `replica-set-preferences` annotation on the workload decides the division even when a
/// policy also matches (the policy still filters clusters). `previous` is the current
/// `destClusters`, used for stability, failover and Federation v1's `rebalance: false`.
pub fn schedule(
    snapshot: &Snapshot,
    workload: &Workload,
    policy: Option<&PropagationPolicy>,
    previous: Option<&[TargetCluster]>,
) -> Result<Decision, Unschedulable> {
    decide(snapshot, workload, policy, previous, false)
}

/// [`schedule`], or with `copies` the placement of an object without pods (see
/// [`copies::place_copies`]): no cluster is filtered for capacity.
pub(crate) fn decide(
    snapshot: &Snapshot,
    workload: &Workload,
    policy: Option<&PropagationPolicy>,
    previous: Option<&[TargetCluster]>,
    copies: bool,
) -> Result<Decision, Unschedulable> {
    let fail = |reason, clusters| Err(Unschedulable { reason, clusters });
    let prefs = match workload.annotations.get(PREFERENCES_ANNOTATION) {
        None => None,
        Some(json) => match Preferences::parse(json) {
            Ok(p) => Some(p),
            Err(e) => {
                let detail = match std::error::Error::source(&e) {
                    Some(src) => format!("{e}: {src}"),
                    None => e.to_string(),
                };
                return fail(UnschedulableReason::InvalidPreferences(detail), Vec::new());
            }
        },
    };
    if policy.is_none() && prefs.is_none() {
        return fail(UnschedulableReason::NoPolicy, Vec::new());
    }
    let default_placement = PlacementRules::default();
    let placement = policy.map_or(&default_placement, |p| &p.spec.placement);
    let default_rs = ReplicaScheduling::default();
    let rs = placement.replica_scheduling.as_ref().unwrap_or(&default_rs);
    let strategy = match (&prefs, rs.type_, rs.division) {
        (Some(_), _, _) => Strategy::FederationV1,
        (None, ReplicaSchedulingType::Duplicated, _) => Strategy::Duplicated,
        (None, ReplicaSchedulingType::Divided, Some(Division::DynamicWeight)) => {
            Strategy::DynamicWeight
        }
        (None, ReplicaSchedulingType::Divided, _) => Strategy::StaticWeight,
    };
    let mut prev_map: HashMap<&str, u32> = HashMap::new();
    for t in previous.unwrap_or_default() {
        *prev_map.entry(t.cluster.as_str()).or_default() += t.replicas;
    }
    let resource = plugins::plural(&workload.kind);
    let ctx = Ctx {
        workload,
        placement,
        api: snapshot.api_id(&workload.api_version, &resource),
        resource,
        previous: prev_map,
        mass_failure_guard: snapshot.mass_failure_guard,
        duplicated: strategy == Strategy::Duplicated,
        copies,
    };

    // Filter.
    let mut verdicts: Vec<ClusterVerdict> = Vec::with_capacity(snapshot.clusters.len());
    let mut cands: Vec<Candidate<'_>> = Vec::with_capacity(snapshot.clusters.len());
    let mut kept: Vec<usize> = Vec::new();
    for (index, c) in snapshot.clusters.iter().enumerate() {
        let mut reasons = Vec::new();
        let mut worst: Option<Severity> = None;
        let mut run = |plugin: &'static str, r: Option<(Severity, Reason)>| {
            if let Some((sev, reason)) = r {
                worst = worst.max(Some(sev));
                reasons.push(PluginReason { plugin, reason });
            }
        };
        run(f::ClusterHealth::NAME, f::ClusterHealth::filter(&ctx, c));
        run(f::ApiEnablement::NAME, f::ApiEnablement::filter(&ctx, c));
        run(
            f::ClusterAffinity::NAME,
            f::ClusterAffinity::filter(&ctx, c),
        );
        run(
            f::TaintToleration::NAME,
            f::TaintToleration::filter(&ctx, c),
        );
        run(
            f::ClusterCapacity::NAME,
            f::ClusterCapacity::filter(&ctx, c),
        );
        let previous = ctx.previous(&c.name);
        let estimate = f::ClusterCapacity::capacity(&ctx, c).ok();
        let outcome = match worst {
            None => {
                // Copies take no room, so an unknown capacity does not filter them.
                let e = estimate.unwrap_or(capacity::Estimate {
                    replicas: 0,
                    limited_by: "unknown",
                });
                cands.push(Candidate {
                    index,
                    cluster: c,
                    capacity: e.replicas,
                    limited_by: e.limited_by,
                    previous,
                    score: 0,
                });
                ClusterOutcome::Selected
            }
            Some(Severity::NoNew) if previous > 0 => {
                kept.push(index);
                ClusterOutcome::Kept
            }
            Some(_) => ClusterOutcome::Filtered,
        };
        verdicts.push(ClusterVerdict {
            cluster: c.name.clone(),
            outcome,
            replicas: 0,
            capacity: estimate.map(|e| e.replicas),
            reasons,
        });
    }
    if cands.is_empty() && kept.is_empty() {
        return fail(UnschedulableReason::NoCandidates, verdicts);
    }

    // Replicas kept in place count first; trim from the end of the name order if the
    // workload shrank below them.
    let total = workload.replicas;
    let mut kept_sum: u32 = 0;
    for &i in &kept {
        let want = ctx.previous(&snapshot.clusters[i].name).min(total);
        verdicts[i].replicas = want;
        if strategy != Strategy::Duplicated {
            kept_sum += want;
        }
    }
    if strategy != Strategy::Duplicated {
        for &i in kept.iter().rev() {
            let excess = kept_sum.saturating_sub(total).min(verdicts[i].replicas);
            verdicts[i].replicas -= excess;
            kept_sum -= excess;
        }
    }
    let remaining = total - kept_sum.min(total);

    // Score and select.
    score_all(&ctx, &mut cands);
    let selection = match SpreadConstraints::select(&ctx, &cands) {
        Ok(s) => s,
        Err(reason) => return fail(reason, verdicts),
    };
    for (pos, reason) in selection.left_out {
        let v = &mut verdicts[cands[pos].index];
        v.outcome = ClusterOutcome::NotSelected;
        v.reasons.push(PluginReason {
            plugin: SpreadConstraints::NAME,
            reason,
        });
    }
    let selected: Vec<&Candidate<'_>> = cands
        .iter()
        .zip(&selection.chosen)
        .filter(|(_, c)| **c)
        .map(|(c, _)| c)
        .collect();
    if selected.is_empty() && kept.is_empty() {
        return fail(UnschedulableReason::NoCandidates, verdicts);
    }

    // Divide.
    let (plugin, division) = match (&prefs, strategy) {
        (Some(p), _) => (
            FederationV1::NAME,
            FederationV1::divide(&ctx, &selected, remaining, p),
        ),
        (None, Strategy::Duplicated) => (Divide::NAME, Divide::duplicated(&selected, total)),
        (None, _) => (
            Divide::NAME,
            Divide::divided(&ctx, &selected, remaining, rs),
        ),
    };
    let Shares {
        replicas,
        notes,
        unplaced,
    } = division;
    for (c, r) in selected.iter().zip(replicas) {
        verdicts[c.index].replicas = r;
    }
    for (pos, reason) in notes {
        verdicts[selected[pos].index]
            .reasons
            .push(PluginReason { plugin, reason });
    }

    let mut unschedulable = UnschedulableStatus {
        replicas: unplaced,
        reasons: Vec::new(),
    };
    if unplaced > 0 {
        for v in &verdicts {
            if v.outcome == ClusterOutcome::Kept {
                continue;
            }
            if let Some(r) = v.reasons.last() {
                unschedulable.reasons.push(UnschedulableCause {
                    cluster: v.cluster.clone(),
                    reason: r.reason.code().to_owned(),
                    message: r.to_string(),
                });
            }
        }
    }
    let targets = verdicts
        .iter()
        .filter(|v| v.replicas > 0)
        .map(|v| TargetCluster {
            cluster: v.cluster.clone(),
            replicas: v.replicas,
        })
        .collect();
    Ok(Decision {
        targets,
        requested: total,
        unschedulable,
        strategy,
        policy: policy.map(|p| format!("{}/{}", p.metadata.namespace, p.metadata.name)),
        clusters: verdicts,
    })
}

#[cfg(test)]
mod tests;

//! Divide plugins: how many replicas each selected cluster runs.
//!
//! `Divided` uses Webster (see [`webster`]) with per-cluster bounds `[min, min(max,
//! capacity)]` and weights from the static rules or from capacity (dynamic). Stability
//! with a previous placement:
//! - clusters absent from the previous placement (new, or returning after failover) only
//!   gain replicas through growth or eviction elsewhere unless `rebalanceOnRecovery`;
//! - static weights otherwise give the exact Webster result, which is a pure function of
//!   weights, bounds and total, so unrelated changes never reshuffle;
//! - dynamic weights keep the previous placement (adjusted by the replicas added/removed)
//!   while every cluster stays within 10% (at least 1) of the fresh result, so small
//!   capacity shifts move nothing.

pub mod webster;

use std::collections::HashMap;

use crate::fedv1::{self, Preferences};
use crate::types::{Division as DivisionKind, Reason, ReplicaScheduling};

use super::{Candidate, Ctx};
use webster::Seat;

/// What a divide plugin decided for the selected clusters.
#[derive(Debug)]
pub(crate) struct Shares {
    /// Parallel to the selected candidates.
    pub replicas: Vec<u32>,
    /// (selected position, reason) explaining short or zero shares.
    pub notes: Vec<(usize, Reason)>,
    /// Replicas that fit nowhere.
    pub unplaced: u32,
}

/// Static/dynamic Webster division and duplication.
pub(crate) struct Divide;

fn to_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl Divide {
    pub const NAME: &'static str = "Divide";

    /// Every selected cluster runs all replicas (filters already checked room).
    pub fn duplicated(sel: &[&Candidate<'_>], total: u32) -> Shares {
        Shares {
            replicas: vec![total; sel.len()],
            notes: Vec::new(),
            unplaced: 0,
        }
    }

    /// Divides `total` among `sel` (in name order).
    pub fn divided(
        ctx: &Ctx<'_>,
        sel: &[&Candidate<'_>],
        total: u32,
        rs: &ReplicaScheduling,
    ) -> Shares {
        let dynamic = rs.division == Some(DivisionKind::DynamicWeight);
        let bounds: HashMap<&str, (u32, Option<u32>)> = rs
            .clusters
            .iter()
            .map(|b| (b.name.as_str(), (b.min_replicas, b.max_replicas)))
            .collect();
        let seats: Vec<Seat> = sel
            .iter()
            .map(|c| {
                let (min, max) = bounds
                    .get(c.cluster.name.as_str())
                    .copied()
                    .unwrap_or((0, None));
                let min = if rs.at_least_one_per_cluster {
                    min.max(1)
                } else {
                    min
                };
                let weight = if dynamic {
                    c.capacity.min(u64::from(u32::MAX))
                } else if rs.weights.is_empty() {
                    1
                } else {
                    rs.weights
                        .iter()
                        .find(|r| r.matches(&c.cluster.name, &c.cluster.labels))
                        .map_or(0, |r| u64::from(r.weight))
                };
                Seat {
                    weight,
                    min: u64::from(min),
                    max: max.map_or(c.capacity, |m| u64::from(m).min(c.capacity)),
                }
            })
            .collect();
        let total64 = u64::from(total);
        let fresh = webster::divide(&seats, total64);
        let has_previous = sel.iter().any(|c| c.previous > 0);
        // Replicas stay where they are, newcomers getting only growth
        // (`rebalanceOnRecovery: false`).
        let stay_in_place = has_previous
            && sel.iter().any(|c| c.previous == 0)
            && !ctx.placement.rebalance_on_recovery();
        // Then the newcomers a fresh division would have given replicas are told as such,
        // not as "no replicas left".
        let fresh_gives: Vec<bool> = if stay_in_place {
            fresh.iter().map(|&f| f > 0).collect()
        } else {
            Vec::new()
        };
        let result = if !has_previous {
            fresh
        } else {
            let from: Vec<u64> = sel.iter().map(|c| u64::from(c.previous)).collect();
            let kept = webster::adjust(&seats, &from, total64);
            if stay_in_place {
                kept
            } else if !dynamic {
                fresh
            } else if kept
                .iter()
                .zip(&fresh)
                .all(|(&k, &f)| k.abs_diff(f) <= (f / 10).max(1))
                && kept.iter().sum::<u64>() == fresh.iter().sum::<u64>()
            {
                kept
            } else {
                fresh
            }
        };

        let placed: u64 = result.iter().sum();
        let short = placed < total64;
        let mut notes = Vec::new();
        for (i, (s, &r)) in seats.iter().zip(&result).enumerate() {
            let c = sel[i];
            if s.weight == 0 && (r == 0 || short) {
                notes.push((
                    i,
                    if dynamic {
                        Reason::InsufficientCapacity {
                            fits: 0,
                            needed: 1,
                            limited_by: c.limited_by,
                        }
                    } else {
                        Reason::ZeroWeight
                    },
                ));
            } else if short && r >= s.max {
                notes.push((
                    i,
                    if r >= c.capacity {
                        Reason::InsufficientCapacity {
                            fits: c.capacity,
                            needed: r + 1,
                            limited_by: c.limited_by,
                        }
                    } else {
                        Reason::AtMaxReplicas { max: s.max }
                    },
                ));
            } else if r == 0 {
                let kept_out = stay_in_place && c.previous == 0 && fresh_gives[i];
                notes.push((
                    i,
                    if kept_out {
                        Reason::NotRebalanced
                    } else {
                        Reason::NoReplicasLeft
                    },
                ));
            }
        }
        Shares {
            replicas: result.into_iter().map(to_u32).collect(),
            notes,
            unplaced: to_u32(total64 - placed),
        }
    }
}

/// Shares by Federation v1's planner, from the workload's preferences annotation.
pub(crate) struct FederationV1;

impl FederationV1 {
    pub const NAME: &'static str = "FederationV1";

    /// Runs the v1 planner over `sel`; previous replicas stand in for v1's current counts
    /// and our capacity estimates for its estimated capacity.
    pub fn divide(
        ctx: &Ctx<'_>,
        sel: &[&Candidate<'_>],
        total: u32,
        prefs: &Preferences,
    ) -> Shares {
        let names: Vec<&str> = sel.iter().map(|c| c.cluster.name.as_str()).collect();
        let current: Vec<Option<i64>> = sel
            .iter()
            .map(|c| (c.previous > 0).then_some(i64::from(c.previous)))
            .collect();
        let capacity: Vec<Option<i64>> = sel
            .iter()
            .map(|c| Some(i64::try_from(c.capacity).unwrap_or(i64::MAX)))
            .collect();
        let (plan, overflow) = fedv1::plan_indexed(
            prefs,
            i64::from(total),
            &names,
            &current,
            &capacity,
            &ctx.workload.key(),
        );
        let mut replicas = Vec::with_capacity(sel.len());
        let mut notes = Vec::new();
        for (i, c) in sel.iter().enumerate() {
            let r = plan[i].max(0);
            replicas.push(u32::try_from(r).unwrap_or(u32::MAX));
            let pref = prefs.for_cluster(names[i]);
            if pref.is_none() {
                notes.push((i, Reason::NotInPreferences));
            } else if let Some(over) = overflow[i] {
                notes.push((
                    i,
                    Reason::InsufficientCapacity {
                        fits: c.capacity,
                        needed: c.capacity.saturating_add(over.unsigned_abs()),
                        limited_by: c.limited_by,
                    },
                ));
            } else if let Some(max) = pref
                .and_then(|p| p.max_replicas)
                .filter(|&m| r >= m && r > 0)
            {
                notes.push((
                    i,
                    Reason::AtMaxReplicas {
                        max: max.unsigned_abs(),
                    },
                ));
            } else if r == 0 {
                notes.push((
                    i,
                    if pref.is_some_and(|p| p.weight == 0) {
                        Reason::ZeroWeight
                    } else {
                        Reason::NoReplicasLeft
                    },
                ));
            }
        }
        let placed: u64 = replicas.iter().map(|&r| u64::from(r)).sum();
        Shares {
            replicas,
            notes,
            unplaced: to_u32(u64::from(total).saturating_sub(placed)),
        }
    }
}

//! Score plugins: rank candidates so `select` keeps replicas where they are and prefers room.
//!
//! Scores only matter when the select step has to choose (spread `maxGroups`); divisions
//! use weights, not scores. Each plugin scores 0–100; the total is their sum.

use super::{Candidate, Ctx};

/// A score plugin.
pub(crate) trait Score {
    /// Name, for explanations.
    const NAME: &'static str;
    /// Score of one candidate, 0–100; `max_capacity` is the largest capacity among candidates.
    fn score(ctx: &Ctx<'_>, c: &Candidate<'_>, max_capacity: u64) -> u64;
}

/// More room for this pod shape scores higher.
pub(crate) struct CapacityScore;

impl Score for CapacityScore {
    const NAME: &'static str = "CapacityScore";
    fn score(_: &Ctx<'_>, c: &Candidate<'_>, max_capacity: u64) -> u64 {
        if max_capacity == 0 {
            return 0;
        }
        u64::try_from(u128::from(c.capacity) * 100 / u128::from(max_capacity)).unwrap_or(100)
    }
}

/// Clusters already running replicas score higher, so unrelated changes do not reshuffle.
pub(crate) struct StabilityScore;

impl Score for StabilityScore {
    const NAME: &'static str = "StabilityScore";
    fn score(_: &Ctx<'_>, c: &Candidate<'_>, _: u64) -> u64 {
        if c.previous > 0 { 100 } else { 0 }
    }
}

/// Names of the score plugins, in the order they run.
pub const SCORE_PLUGINS: &[&str] = &[CapacityScore::NAME, StabilityScore::NAME];

/// Runs every score plugin and stores the sum in each candidate.
pub(crate) fn score_all(ctx: &Ctx<'_>, cands: &mut [Candidate<'_>]) {
    let max_capacity = cands.iter().map(|c| c.capacity).max().unwrap_or(0);
    for c in cands.iter_mut() {
        c.score = CapacityScore::score(ctx, c, max_capacity)
            + StabilityScore::score(ctx, c, max_capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ClusterState, Health, PlacementRules, ServedApis, Workload};

    #[test]
    fn score_table() {
        let state = ClusterState {
            name: "a".into(),
            labels: Default::default(),
            region: None,
            zone: None,
            taints: vec![],
            health: Health::Ready,
            apis: ServedApis::Unreported,
            resources: Err(String::new()),
        };
        let w = Workload::default();
        let p = PlacementRules::default();
        let ctx = Ctx::plain(&w, &p);
        let cand = |capacity, previous| Candidate {
            index: 0,
            cluster: &state,
            capacity,
            limited_by: "cpu",
            previous,
            score: 0,
        };
        // (capacity, previous) → total score
        let cases: &[(u64, u32, u64)] = &[
            (100, 0, 100),
            (50, 0, 50),
            (0, 0, 0),
            (50, 3, 150),
            (u64::MAX, 0, 100),
        ];
        let mut cands: Vec<_> = cases.iter().map(|&(c, p, _)| cand(c, p)).collect();
        cands.pop();
        score_all(&ctx, &mut cands);
        for (c, want) in cands.iter().zip(cases) {
            assert_eq!(c.score, want.2, "{:?}", (c.capacity, c.previous));
        }
        assert_eq!(
            CapacityScore::score(&ctx, &cand(u64::MAX, 0), u64::MAX),
            100
        );
        assert_eq!(CapacityScore::score(&ctx, &cand(5, 0), 0), 0);
    }
}

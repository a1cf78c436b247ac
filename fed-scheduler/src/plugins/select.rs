//! Select plugin: apply spread constraints (region → zone → cluster) to the scored candidates.
//!
//! Groups are ranked by: already holding replicas (stability), then total score, then
//! name; clusters by score then name. With a cluster-level `maxGroups`, the best cluster of
//! every chosen region/zone is taken first so the coarser spread survives.

use std::collections::BTreeMap;

use crate::types::{Reason, SpreadConstraint, SpreadField, UnschedulableReason};

use super::{Candidate, Ctx};

/// Which candidates were chosen, and why the others were not.
#[derive(Debug, Default)]
pub(crate) struct Selection {
    /// Parallel to the candidates.
    pub chosen: Vec<bool>,
    /// (candidate position, reason) for those left out.
    pub left_out: Vec<(usize, Reason)>,
}

/// Candidates sharing a region or zone.
#[derive(Default)]
struct Group {
    /// Some member already holds replicas.
    holds: bool,
    /// Sum of member scores.
    score: u64,
    /// Candidate positions.
    members: Vec<usize>,
}

/// The spread-constraint select plugin.
pub(crate) struct SpreadConstraints;

impl SpreadConstraints {
    pub const NAME: &'static str = "SpreadConstraint";

    fn field_value<'c>(c: &'c Candidate<'_>, field: SpreadField) -> Option<&'c str> {
        match field {
            SpreadField::Region => c.cluster.region.as_deref(),
            SpreadField::Zone => c.cluster.zone.as_deref(),
            SpreadField::Cluster => Some(&c.cluster.name),
        }
    }

    pub fn select(
        ctx: &Ctx<'_>,
        cands: &[Candidate<'_>],
    ) -> Result<Selection, UnschedulableReason> {
        let mut sel = Selection {
            chosen: vec![true; cands.len()],
            left_out: Vec::new(),
        };
        let constraint = |f| -> Option<&SpreadConstraint> {
            ctx.placement
                .spread_constraints
                .iter()
                .find(|c| c.spread_by_field == f)
        };
        let mut finest_group: Option<SpreadField> = None;

        for field in [SpreadField::Region, SpreadField::Zone] {
            let Some(sc) = constraint(field) else {
                continue;
            };
            finest_group = Some(field);
            let mut groups: BTreeMap<&str, Group> = BTreeMap::new();
            for (i, c) in cands.iter().enumerate() {
                if !sel.chosen[i] {
                    continue;
                }
                match Self::field_value(c, field) {
                    Some(v) => {
                        let g = groups.entry(v).or_default();
                        g.holds |= c.previous > 0;
                        g.score += c.score;
                        g.members.push(i);
                    }
                    None => {
                        sel.chosen[i] = false;
                        sel.left_out.push((i, Reason::MissingSpreadField { field }));
                    }
                }
            }
            let available = u32::try_from(groups.len()).unwrap_or(u32::MAX);
            if available < sc.min_groups {
                return Err(UnschedulableReason::SpreadUnsatisfiable {
                    field,
                    available,
                    min: sc.min_groups,
                });
            }
            let mut ranked: Vec<(&str, Group)> = groups.into_iter().collect();
            ranked.sort_by(|a, b| {
                b.1.holds
                    .cmp(&a.1.holds)
                    .then(b.1.score.cmp(&a.1.score))
                    .then(a.0.cmp(b.0))
            });
            if let Some(max) = sc.max_groups {
                for (group, g) in ranked.iter().skip(max as usize) {
                    for &i in &g.members {
                        sel.chosen[i] = false;
                        sel.left_out.push((
                            i,
                            Reason::SpreadLimit {
                                field,
                                group: (*group).to_owned(),
                                max_groups: max,
                            },
                        ));
                    }
                }
            }
        }

        if let Some(sc) = constraint(SpreadField::Cluster) {
            let mut order: Vec<usize> = (0..cands.len()).filter(|&i| sel.chosen[i]).collect();
            let available = u32::try_from(order.len()).unwrap_or(u32::MAX);
            if available < sc.min_groups {
                return Err(UnschedulableReason::SpreadUnsatisfiable {
                    field: SpreadField::Cluster,
                    available,
                    min: sc.min_groups,
                });
            }
            if let Some(max) = sc.max_groups.filter(|&m| (m as usize) < order.len()) {
                // Holding replicas first (stability), then score, then name.
                order.sort_by(|&a, &b| {
                    let (ca, cb) = (&cands[a], &cands[b]);
                    (cb.previous > 0)
                        .cmp(&(ca.previous > 0))
                        .then(cb.score.cmp(&ca.score))
                        .then(a.cmp(&b))
                });
                let mut picked: Vec<usize> = Vec::with_capacity(max as usize);
                if let Some(field) = finest_group {
                    let mut seen: Vec<&str> = Vec::new();
                    for &i in &order {
                        let g = Self::field_value(&cands[i], field).unwrap_or_default();
                        if !seen.contains(&g) && picked.len() < max as usize {
                            seen.push(g);
                            picked.push(i);
                        }
                    }
                }
                for &i in &order {
                    if picked.len() >= max as usize {
                        break;
                    }
                    if !picked.contains(&i) {
                        picked.push(i);
                    }
                }
                for &i in &order {
                    if !picked.contains(&i) {
                        sel.chosen[i] = false;
                        sel.left_out.push((
                            i,
                            Reason::SpreadLimit {
                                field: SpreadField::Cluster,
                                group: cands[i].cluster.name.clone(),
                                max_groups: max,
                            },
                        ));
                    }
                }
            }
        }
        sel.left_out.sort_by_key(|(i, _)| *i);
        Ok(sel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ClusterState, Health, PlacementRules, ServedApis, Workload};

    fn state(name: &str, region: Option<&str>, zone: &str) -> ClusterState {
        ClusterState {
            name: name.into(),
            labels: Default::default(),
            region: region.map(Into::into),
            zone: Some(zone.into()),
            taints: vec![],
            health: Health::Ready,
            apis: ServedApis::Unreported,
            resources: Err(String::new()),
        }
    }

    fn run(
        constraints: Vec<SpreadConstraint>,
        specs: &[(&ClusterState, u64, u32)],
    ) -> Result<Vec<String>, UnschedulableReason> {
        let w = Workload::default();
        let p = PlacementRules {
            spread_constraints: constraints,
            ..Default::default()
        };
        let ctx = Ctx::plain(&w, &p);
        let cands: Vec<Candidate<'_>> = specs
            .iter()
            .enumerate()
            .map(|(index, &(cluster, score, previous))| Candidate {
                index,
                cluster,
                capacity: 10,
                limited_by: "cpu",
                previous,
                score,
            })
            .collect();
        let sel = SpreadConstraints::select(&ctx, &cands)?;
        Ok(cands
            .iter()
            .zip(&sel.chosen)
            .filter(|(_, c)| **c)
            .map(|(c, _)| c.cluster.name.clone())
            .collect())
    }

    fn sc(field: SpreadField, min: u32, max: Option<u32>) -> SpreadConstraint {
        SpreadConstraint {
            spread_by_field: field,
            min_groups: min,
            max_groups: max,
        }
    }

    /// (name, constraints, (cluster, score, previous), expected)
    type Case<'a> = (
        &'a str,
        Vec<SpreadConstraint>,
        Vec<(&'a ClusterState, u64, u32)>,
        Result<Vec<&'a str>, UnschedulableReason>,
    );

    #[test]
    fn spread_table() {
        let a = state("a", Some("eu"), "eu-1");
        let b = state("b", Some("eu"), "eu-2");
        let c = state("c", Some("us"), "us-1");
        let d = state("d", Some("ap"), "ap-1");
        let e = state("e", None, "x");
        use SpreadField::*;
        let all = [(&a, 50, 0), (&b, 40, 0), (&c, 30, 0), (&d, 90, 0)];
        let cases: Vec<Case<'_>> = vec![
            (
                "no constraints: everything",
                vec![],
                all.to_vec(),
                Ok(vec!["a", "b", "c", "d"]),
            ),
            (
                "two regions by score",
                vec![sc(Region, 1, Some(2))],
                all.to_vec(),
                Ok(vec!["a", "b", "d"]),
            ),
            (
                "previous region kept",
                vec![sc(Region, 1, Some(1))],
                vec![(&a, 50, 0), (&c, 10, 3), (&d, 90, 0)],
                Ok(vec!["c"]),
            ),
            (
                "min regions unsatisfied",
                vec![sc(Region, 4, None)],
                all.to_vec(),
                Err(UnschedulableReason::SpreadUnsatisfiable {
                    field: Region,
                    available: 3,
                    min: 4,
                }),
            ),
            (
                "no region dropped",
                vec![sc(Region, 1, None)],
                vec![(&a, 1, 0), (&e, 1, 0)],
                Ok(vec!["a"]),
            ),
            (
                "max clusters by score",
                vec![sc(Cluster, 1, Some(2))],
                all.to_vec(),
                Ok(vec!["a", "d"]),
            ),
            (
                "cluster max keeps region coverage",
                vec![sc(Region, 3, Some(3)), sc(Cluster, 1, Some(3))],
                all.to_vec(),
                Ok(vec!["a", "c", "d"]),
            ),
            (
                "zones",
                vec![sc(Zone, 2, Some(2))],
                all.to_vec(),
                Ok(vec!["a", "d"]),
            ),
            (
                "min clusters",
                vec![sc(Cluster, 5, None)],
                all.to_vec(),
                Err(UnschedulableReason::SpreadUnsatisfiable {
                    field: Cluster,
                    available: 4,
                    min: 5,
                }),
            ),
        ];
        for (name, constraints, specs, want) in cases {
            let got = run(constraints, &specs);
            let want = want.map(|v| v.into_iter().map(String::from).collect::<Vec<_>>());
            assert_eq!(got, want, "{name}");
        }
    }
}

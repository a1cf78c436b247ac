//! Filter plugins: which clusters may run the workload, and what happens to replicas already there.
//!
//! A failing filter says how hard it fails. `Evict` means the cluster must not run the
//! workload at all (its replicas move); `NoNew` means it takes no new replicas but may keep
//! the ones it has (offline within toleration, NoSchedule taint, eviction paused) — as in
//! Kubernetes, where NoSchedule does not evict running pods.

use crate::capacity::{self, Estimate};
use fed_api::policy::AffinityMismatch;

use crate::types::{ClusterState, Health, Reason, TaintEffect};

use super::Ctx;

/// How hard a filter rejects a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// No new replicas; existing ones stay.
    NoNew,
    /// No replicas at all; existing ones move.
    Evict,
}

/// A filter's verdict on one cluster: `None` passes.
pub type FilterResult = Option<(Severity, Reason)>;

/// A filter plugin.
pub(crate) trait Filter {
    /// Name shown in reasons.
    const NAME: &'static str;
    /// Judges one cluster.
    fn filter(ctx: &Ctx<'_>, c: &ClusterState) -> FilterResult;
}

/// Only Ready clusters take replicas; offline ones keep theirs until the toleration expires.
pub(crate) struct ClusterHealth;

impl Filter for ClusterHealth {
    const NAME: &'static str = "ClusterHealth";
    fn filter(ctx: &Ctx<'_>, c: &ClusterState) -> FilterResult {
        let Health::Offline { offline_for } = c.health else {
            return None;
        };
        if ctx.previous(&c.name) == 0 {
            return Some((Severity::Evict, Reason::NotReady { offline_for }));
        }
        let toleration = ctx.placement.toleration_seconds();
        let within = offline_for.is_some_and(|s| u64::try_from(s).is_ok_and(|s| s <= toleration));
        Some(if within {
            (
                Severity::NoNew,
                Reason::OfflineTolerated {
                    offline_for,
                    toleration,
                },
            )
        } else if ctx.mass_failure_guard {
            (Severity::NoNew, Reason::EvictionPaused)
        } else {
            (
                Severity::Evict,
                Reason::OfflineBeyondToleration {
                    offline_for,
                    toleration,
                },
            )
        })
    }
}

/// The cluster must serve the workload's group-version and resource.
pub(crate) struct ApiEnablement;

impl Filter for ApiEnablement {
    const NAME: &'static str = "APIEnablement";
    fn filter(ctx: &Ctx<'_>, c: &ClusterState) -> FilterResult {
        let gv = &ctx.workload.api_version;
        // An unreported list means discovery has not reported yet (a just-joined cluster),
        // not that the cluster serves nothing: filtering it would pin first placements elsewhere.
        (!c.apis.serves(ctx.api)).then(|| {
            (
                Severity::Evict,
                Reason::KindNotServed {
                    group_version: gv.clone(),
                    resource: ctx.resource.clone(),
                },
            )
        })
    }
}

/// `clusterAffinity`: names, exclusions, labels, regions, zones.
pub(crate) struct ClusterAffinity;

impl Filter for ClusterAffinity {
    const NAME: &'static str = "ClusterAffinity";
    fn filter(ctx: &Ctx<'_>, c: &ClusterState) -> FilterResult {
        let a = ctx.placement.cluster_affinity.as_ref()?;
        let mismatch = a.mismatch(&c.name, &c.labels, c.region.as_deref(), c.zone.as_deref())?;
        let reason = match mismatch {
            AffinityMismatch::Excluded => Reason::Excluded,
            AffinityMismatch::NotInClusterNames => Reason::NotInClusterNames,
            AffinityMismatch::LabelSelector => Reason::LabelSelectorMismatch,
            AffinityMismatch::Region => Reason::RegionMismatch {
                region: c.region.clone(),
            },
            AffinityMismatch::Zone => Reason::ZoneMismatch {
                zone: c.zone.clone(),
            },
        };
        Some((Severity::Evict, reason))
    }
}

/// Cluster taints must be tolerated; NoExecute evicts, NoSchedule only blocks new replicas.
pub(crate) struct TaintToleration;

impl Filter for TaintToleration {
    const NAME: &'static str = "TaintToleration";
    fn filter(ctx: &Ctx<'_>, c: &ClusterState) -> FilterResult {
        let tolerations = &ctx.placement.cluster_tolerations;
        c.taints
            .iter()
            .filter(|taint| {
                !tolerations
                    .iter()
                    .any(|t| t.tolerates(&taint.key, taint.value.as_deref(), taint.effect))
            })
            .map(|taint| {
                let severity = match taint.effect {
                    TaintEffect::NoExecute => Severity::Evict,
                    TaintEffect::NoSchedule => Severity::NoNew,
                };
                (
                    severity,
                    Reason::TaintNotTolerated {
                        key: taint.key.clone(),
                        effect: taint.effect,
                    },
                )
            })
            .max_by_key(|(s, _)| *s)
    }
}

/// Room for the pod shape; `Duplicated` needs room for every replica.
pub(crate) struct ClusterCapacity;

impl ClusterCapacity {
    /// Capacity for this workload: estimate plus replicas it already holds.
    pub fn capacity(ctx: &Ctx<'_>, c: &ClusterState) -> Result<Estimate, Reason> {
        let r = c
            .resources
            .as_ref()
            .map_err(|detail| Reason::CapacityUnknown {
                detail: detail.clone(),
            })?;
        let mut e = capacity::estimate(r, ctx.workload.requests);
        e.replicas = e.replicas.saturating_add(u64::from(ctx.previous(&c.name)));
        Ok(e)
    }
}

impl Filter for ClusterCapacity {
    const NAME: &'static str = "ClusterCapacity";
    fn filter(ctx: &Ctx<'_>, c: &ClusterState) -> FilterResult {
        if ctx.copies {
            return None;
        }
        let e = match Self::capacity(ctx, c) {
            Ok(e) => e,
            Err(reason) => return Some((Severity::NoNew, reason)),
        };
        let needed = if ctx.duplicated {
            u64::from(ctx.workload.replicas).max(1)
        } else {
            1
        };
        (e.replicas < needed).then_some((
            Severity::NoNew,
            Reason::InsufficientCapacity {
                fits: e.replicas,
                needed,
                limited_by: e.limited_by,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::types::{
        ClusterAffinity as Affinity, LabelSelector, PlacementRules, Resources, ServedApis, Taint,
        Toleration, TolerationOperator, Workload,
    };

    fn cluster(name: &str) -> ClusterState {
        ClusterState {
            name: name.into(),
            labels: BTreeMap::from([("env".to_owned(), "prod".to_owned())]),
            region: Some("eu".into()),
            zone: Some("eu-1a".into()),
            taints: vec![],
            health: Health::Ready,
            // Id 0 is the workload's pair (apps/v1 deployments) in these tests' contexts.
            apis: ServedApis::Ids(vec![0]),
            resources: Ok(Resources {
                free_cpu_milli: Some(4000),
                free_memory: Some(8 << 30),
                free_pods: Some(100),
                ..Default::default()
            }),
        }
    }

    fn workload(replicas: u32) -> Workload {
        Workload {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "ns".into(),
            name: "w".into(),
            replicas,
            requests: crate::types::PodRequests {
                cpu_milli: 1000,
                memory_bytes: 1 << 30,
            },
            ..Default::default()
        }
    }

    fn ctx<'a>(
        w: &'a Workload,
        p: &'a PlacementRules,
        prev: &[(&'a str, u32)],
        guard: bool,
        duplicated: bool,
    ) -> Ctx<'a> {
        Ctx {
            workload: w,
            placement: p,
            resource: "deployments".into(),
            api: Some(0),
            previous: prev.iter().copied().collect(),
            mass_failure_guard: guard,
            duplicated,
            copies: false,
        }
    }

    /// (name, cluster, previous, guard, expected)
    type HealthCase<'a> = (
        &'a str,
        ClusterState,
        &'a [(&'a str, u32)],
        bool,
        FilterResult,
    );
    /// (name, taints, tolerations, expected severity)
    type TaintCase<'a> = (&'a str, Vec<Taint>, Vec<Toleration>, Option<Severity>);
    /// (name, replicas, duplicated, previous, passes)
    type CapacityCase<'a> = (&'a str, u32, bool, &'a [(&'a str, u32)], bool);

    #[test]
    fn health_table() {
        let w = workload(3);
        let p = PlacementRules::default(); // toleration 300s
        let offline = |secs| ClusterState {
            health: Health::Offline { offline_for: secs },
            ..cluster("a")
        };
        let cases: Vec<HealthCase<'_>> = vec![
            ("ready", cluster("a"), &[], false, None),
            (
                "offline, nothing held",
                offline(Some(10)),
                &[],
                false,
                Some((
                    Severity::Evict,
                    Reason::NotReady {
                        offline_for: Some(10),
                    },
                )),
            ),
            (
                "within toleration keeps",
                offline(Some(300)),
                &[("a", 2)],
                false,
                Some((
                    Severity::NoNew,
                    Reason::OfflineTolerated {
                        offline_for: Some(300),
                        toleration: 300,
                    },
                )),
            ),
            (
                "beyond toleration evicts",
                offline(Some(301)),
                &[("a", 2)],
                false,
                Some((
                    Severity::Evict,
                    Reason::OfflineBeyondToleration {
                        offline_for: Some(301),
                        toleration: 300,
                    },
                )),
            ),
            (
                "unknown time evicts",
                offline(None),
                &[("a", 2)],
                false,
                Some((
                    Severity::Evict,
                    Reason::OfflineBeyondToleration {
                        offline_for: None,
                        toleration: 300,
                    },
                )),
            ),
            (
                "guard pauses eviction",
                offline(Some(9999)),
                &[("a", 2)],
                true,
                Some((Severity::NoNew, Reason::EvictionPaused)),
            ),
        ];
        for (name, c, prev, guard, want) in cases {
            assert_eq!(
                ClusterHealth::filter(&ctx(&w, &p, prev, guard, false), &c),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn api_enablement_table() {
        let w = workload(1);
        let p = PlacementRules::default();
        let c = ctx(&w, &p, &[], false, false);
        assert_eq!(ApiEnablement::filter(&c, &cluster("a")), None);
        let mut other = cluster("b");
        // Serves another pair only (apps/v1 replicasets, say).
        other.apis = ServedApis::Ids(vec![1]);
        assert!(matches!(
            ApiEnablement::filter(&c, &other),
            Some((Severity::Evict, Reason::KindNotServed { .. }))
        ));
        // Not yet discovered: not a reason to filter.
        other.apis = ServedApis::Unreported;
        assert_eq!(ApiEnablement::filter(&c, &other), None);
        // A pair no cluster serves has no id: every reporting cluster filters it.
        let unserved = Ctx {
            api: None,
            ..ctx(&w, &p, &[], false, false)
        };
        assert!(ApiEnablement::filter(&unserved, &cluster("a")).is_some());
    }

    #[test]
    fn affinity_table() {
        let w = workload(1);
        let aff = |a: Affinity| PlacementRules {
            cluster_affinity: Some(a),
            ..Default::default()
        };
        let cases: Vec<(&str, PlacementRules, Option<Reason>)> = vec![
            ("none", PlacementRules::default(), None),
            (
                "named",
                aff(Affinity {
                    cluster_names: vec!["a".into()],
                    ..Default::default()
                }),
                None,
            ),
            (
                "not named",
                aff(Affinity {
                    cluster_names: vec!["b".into()],
                    ..Default::default()
                }),
                Some(Reason::NotInClusterNames),
            ),
            (
                "excluded wins",
                aff(Affinity {
                    cluster_names: vec!["a".into()],
                    exclude: vec!["a".into()],
                    ..Default::default()
                }),
                Some(Reason::Excluded),
            ),
            (
                "labels",
                aff(Affinity {
                    label_selector: Some(LabelSelector::from_labels([("env", "dev")]).unwrap()),
                    ..Default::default()
                }),
                Some(Reason::LabelSelectorMismatch),
            ),
            (
                "labels ok",
                aff(Affinity {
                    label_selector: Some(LabelSelector::from_labels([("env", "prod")]).unwrap()),
                    ..Default::default()
                }),
                None,
            ),
            (
                "region",
                aff(Affinity {
                    regions: vec!["us".into()],
                    ..Default::default()
                }),
                Some(Reason::RegionMismatch {
                    region: Some("eu".into()),
                }),
            ),
            (
                "zone",
                aff(Affinity {
                    zones: vec!["eu-1b".into()],
                    ..Default::default()
                }),
                Some(Reason::ZoneMismatch {
                    zone: Some("eu-1a".into()),
                }),
            ),
            (
                "zone ok",
                aff(Affinity {
                    regions: vec!["eu".into()],
                    zones: vec!["eu-1a".into()],
                    ..Default::default()
                }),
                None,
            ),
        ];
        for (name, p, want) in cases {
            let got = ClusterAffinity::filter(&ctx(&w, &p, &[], false, false), &cluster("a"))
                .map(|(_, r)| r);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn taint_table() {
        let w = workload(1);
        let taint = |key: &str, value: Option<&str>, effect| Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
        };
        let tol = |key: Option<&str>, op, value: Option<&str>, effect| Toleration {
            key: key.map(Into::into),
            operator: op,
            value: value.map(Into::into),
            effect,
        };
        use TaintEffect::*;
        use TolerationOperator::*;
        let cases: Vec<TaintCase<'_>> = vec![
            ("no taints", vec![], vec![], None),
            (
                "NoSchedule untolerated",
                vec![taint("m", Some("true"), NoSchedule)],
                vec![],
                Some(Severity::NoNew),
            ),
            (
                "NoExecute untolerated",
                vec![taint("m", None, NoExecute)],
                vec![],
                Some(Severity::Evict),
            ),
            (
                "worst wins",
                vec![taint("a", None, NoSchedule), taint("b", None, NoExecute)],
                vec![],
                Some(Severity::Evict),
            ),
            (
                "exists tolerates",
                vec![taint("m", Some("true"), NoSchedule)],
                vec![tol(Some("m"), Exists, None, Some(NoSchedule))],
                None,
            ),
            (
                "wrong effect",
                vec![taint("m", Some("true"), NoExecute)],
                vec![tol(Some("m"), Exists, None, Some(NoSchedule))],
                Some(Severity::Evict),
            ),
            (
                "equal value",
                vec![taint("m", Some("true"), NoSchedule)],
                vec![tol(Some("m"), Equal, Some("true"), None)],
                None,
            ),
            (
                "equal wrong value",
                vec![taint("m", Some("true"), NoSchedule)],
                vec![tol(Some("m"), Equal, Some("false"), None)],
                Some(Severity::NoNew),
            ),
            (
                "wildcard",
                vec![taint("x", None, NoExecute), taint("y", None, NoSchedule)],
                vec![tol(None, Exists, None, None)],
                None,
            ),
        ];
        for (name, taints, tolerations, want) in cases {
            let p = PlacementRules {
                cluster_tolerations: tolerations,
                ..Default::default()
            };
            let c = ClusterState {
                taints,
                ..cluster("a")
            };
            let got = TaintToleration::filter(&ctx(&w, &p, &[], false, false), &c).map(|(s, _)| s);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn capacity_table() {
        let p = PlacementRules::default();
        // 4 CPUs free, 1 CPU per pod → 4 fit.
        let cases: &[CapacityCase<'_>] = &[
            ("divided fits", 10, false, &[], true),
            ("duplicated 4 fits", 4, true, &[], true),
            ("duplicated 5 does not", 5, true, &[], false),
            ("held replicas count as room", 6, true, &[("a", 2)], true),
        ];
        for (name, replicas, dup, prev, pass) in cases {
            let w = workload(*replicas);
            let got = ClusterCapacity::filter(&ctx(&w, &p, prev, false, *dup), &cluster("a"));
            assert_eq!(got.is_none(), *pass, "{name}: {got:?}");
        }
        let w = workload(1);
        let full = ClusterState {
            resources: Ok(Resources {
                free_cpu_milli: Some(999),
                ..Default::default()
            }),
            ..cluster("a")
        };
        assert!(matches!(
            ClusterCapacity::filter(&ctx(&w, &p, &[], false, false), &full),
            Some((
                Severity::NoNew,
                Reason::InsufficientCapacity {
                    fits: 0,
                    needed: 1,
                    limited_by: "cpu"
                }
            ))
        ));
        let unknown = ClusterState {
            resources: Err("nope".into()),
            ..cluster("a")
        };
        assert!(matches!(
            ClusterCapacity::filter(&ctx(&w, &p, &[], false, false), &unknown),
            Some((Severity::NoNew, Reason::CapacityUnknown { .. }))
        ));
    }
}

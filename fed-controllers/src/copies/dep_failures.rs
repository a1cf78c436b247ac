//! An interpreted object's dependency override failures on its Placement, as a built-in
//! workload's: a ConfigMap, Secret, ServiceAccount or PersistentVolumeClaim its pod template
//! references whose override policy cannot make that dependency's copy for a cluster is held
//! back there (its own sync says so, [`override_failures`]), and the object's entry for the
//! cluster says `OverrideFailed: <Kind> <name>: <error>` ([`with_dep_failures`]), so the
//! Propagated condition is `OverrideFailed` too. Pure.

use std::collections::{BTreeMap, BTreeSet};

use fed_api::placement::TargetCluster;

use super::report::{FailReason, Outcome};
use crate::dep_writers::DepRef;
use crate::workload::dep_wants::failure;

/// Where a dependency object's override failed in its last sync: the message of each
/// cluster whose outcome is `OverrideFailed`.
pub fn override_failures(outcomes: &BTreeMap<String, Outcome>) -> BTreeMap<String, String> {
    outcomes
        .iter()
        .filter_map(|(cluster, o)| match o {
            Outcome::Failed {
                reason: FailReason::OverrideFailed,
                message,
            } => Some((cluster.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

/// Per cluster, why the dependencies `refs` cannot be copied there, in `refs` order, as a
/// built-in workload's Placement says it; `failures_of` gives a dependency's
/// [`override_failures`].
pub fn per_cluster<'a>(
    refs: &BTreeSet<DepRef>,
    failures_of: impl Fn(&DepRef) -> Option<&'a BTreeMap<String, String>>,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in refs {
        for (cluster, message) in failures_of(r).into_iter().flatten() {
            out.entry(cluster.clone())
                .or_default()
                .push(failure(r.kind, &r.name, message));
        }
    }
    out
}

/// The `outcomes` the Placement of an object placed on `dest` shows, with its dependencies'
/// failures (`deps`, [`per_cluster`]): a destination where some dependency failed is
/// `OverrideFailed`, after the object's own override failure there if any (the object
/// itself may be in sync there: only the dependency is held back). Other clusters are as
/// they were.
pub fn with_dep_failures(
    outcomes: &BTreeMap<String, Outcome>,
    dest: &[TargetCluster],
    deps: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Outcome> {
    let mut out = outcomes.clone();
    for t in dest {
        let Some(of_deps) = deps.get(&t.cluster).filter(|f| !f.is_empty()) else {
            continue;
        };
        let own = match outcomes.get(&t.cluster) {
            Some(Outcome::Failed {
                reason: FailReason::OverrideFailed,
                message,
            }) => Some(message.clone()),
            _ => None,
        };
        let message = own
            .into_iter()
            .chain(of_deps.iter().cloned())
            .collect::<Vec<_>>()
            .join("; ");
        out.insert(
            t.cluster.clone(),
            Outcome::Failed {
                reason: FailReason::OverrideFailed,
                message,
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copies::report::tests::{failed, synced};
    use crate::copies::report::{cluster_entries, propagated};
    use crate::workload::kinds::DepKind;

    fn outcomes(o: &[(&str, Outcome)]) -> BTreeMap<String, Outcome> {
        o.iter().map(|(c, o)| (c.to_string(), o.clone())).collect()
    }

    fn dep(kind: DepKind, name: &str) -> DepRef {
        DepRef {
            kind,
            namespace: "shop".into(),
            name: name.into(),
        }
    }

    const RULE: &str = "OverridePolicy shop/env rule 0: plaintext[0]: no /data/missing";

    #[test]
    fn a_dependency_fails_where_its_override_failed() {
        let o = outcomes(&[
            ("a", failed(FailReason::OverrideFailed, RULE)),
            ("b", synced()),
            ("c", failed(FailReason::Unreachable, "connection refused")),
        ]);
        assert_eq!(
            override_failures(&o),
            BTreeMap::from([("a".to_string(), RULE.to_string())])
        );
        assert!(override_failures(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn failures_per_cluster_name_each_dependency() {
        let env = dep(DepKind::ConfigMap, "env");
        let tls = dep(DepKind::Secret, "tls");
        let sa = dep(DepKind::ServiceAccount, "web");
        let failures: BTreeMap<DepRef, BTreeMap<String, String>> = BTreeMap::from([
            (
                env.clone(),
                BTreeMap::from([("a".into(), "e1".into()), ("b".into(), "e2".into())]),
            ),
            (tls.clone(), BTreeMap::from([("a".into(), "e3".into())])),
        ]);
        let refs = BTreeSet::from([env, tls, sa]);
        let got = per_cluster(&refs, |r| failures.get(r));
        assert_eq!(
            got,
            BTreeMap::from([
                (
                    "a".to_string(),
                    vec![
                        "ConfigMap env: e1".to_string(),
                        "Secret tls: e3".to_string()
                    ]
                ),
                ("b".to_string(), vec!["ConfigMap env: e2".to_string()]),
            ])
        );
        assert!(per_cluster(&BTreeSet::new(), |r| failures.get(r)).is_empty());
    }

    /// (case, the object's outcomes, its dependencies' failures per cluster, each
    /// destination's entry error, the condition's status and reason)
    type Case = (
        &'static str,
        Vec<(&'static str, Outcome)>,
        Vec<(&'static str, Vec<&'static str>)>,
        Vec<(&'static str, &'static str)>,
        (&'static str, &'static str),
    );

    #[test]
    fn the_placement_shows_dependency_failures_as_override_failed() {
        let dest: Vec<TargetCluster> = ["a", "b"]
            .iter()
            .map(|c| TargetCluster::new(*c, 0))
            .collect();
        let cases: Vec<Case> = vec![
            (
                "no dependency failure: as the object's own outcomes",
                vec![("a", synced()), ("b", synced())],
                vec![],
                vec![("a", ""), ("b", "")],
                ("True", "InSync"),
            ),
            (
                "a dependency fails in a: a only, though the object is in sync there",
                vec![("a", synced()), ("b", synced())],
                vec![("a", vec!["ConfigMap env: e1"])],
                vec![("a", "OverrideFailed: ConfigMap env: e1"), ("b", "")],
                ("False", "OverrideFailed"),
            ),
            (
                "the object's own override failure comes first",
                vec![
                    ("a", failed(FailReason::OverrideFailed, "own")),
                    ("b", synced()),
                ],
                vec![("a", vec!["ConfigMap env: e1", "Secret tls: e2"])],
                vec![
                    (
                        "a",
                        "OverrideFailed: own; ConfigMap env: e1; Secret tls: e2",
                    ),
                    ("b", ""),
                ],
                ("False", "OverrideFailed"),
            ),
            (
                "another failure there gives way, as on a built-in workload's entry",
                vec![
                    ("a", failed(FailReason::Unreachable, "refused")),
                    ("b", synced()),
                ],
                vec![("a", vec!["ConfigMap env: e1"])],
                vec![("a", "OverrideFailed: ConfigMap env: e1"), ("b", "")],
                ("False", "OverrideFailed"),
            ),
            (
                "a cluster not yet synced still shows the failure",
                vec![("b", synced())],
                vec![("a", vec!["ConfigMap env: e1"])],
                vec![("a", "OverrideFailed: ConfigMap env: e1"), ("b", "")],
                ("False", "OverrideFailed"),
            ),
            (
                "a cluster outside the destinations adds nothing",
                vec![("a", synced()), ("b", synced())],
                vec![("z", vec!["ConfigMap env: e1"])],
                vec![("a", ""), ("b", "")],
                ("True", "InSync"),
            ),
        ];
        for (case, own, deps, want_entries, want_condition) in cases {
            let deps: BTreeMap<String, Vec<String>> = deps
                .into_iter()
                .map(|(c, f)| (c.to_string(), f.into_iter().map(String::from).collect()))
                .collect();
            let shown = with_dep_failures(&outcomes(&own), &dest, &deps);
            let entries: Vec<(String, String)> = cluster_entries(&dest, &shown)
                .into_iter()
                .map(|e| (e.cluster, e.error))
                .collect();
            let want: Vec<(String, String)> = want_entries
                .into_iter()
                .map(|(c, e)| (c.to_string(), e.to_string()))
                .collect();
            assert_eq!(entries, want, "{case}");
            let c = propagated(&dest, &shown);
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                want_condition,
                "{case}: {c:?}"
            );
        }
    }
}

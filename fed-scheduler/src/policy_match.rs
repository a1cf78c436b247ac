//! Chooses the PropagationPolicy for a workload by the precedence every component shares
//! ([`fed_api::governance`]): priority, then namespaced over cluster-wide, then the most
//! specific selector, then name.

pub use fed_api::governance::Specificity;
use fed_api::governance::{self, Governance, PolicyKind, Subject};

use crate::types::{PropagationPolicy, Workload};

/// The workload as policy selection reads it (workloads are namespaced).
pub fn subject(w: &Workload) -> Subject<'_> {
    Subject {
        api_version: &w.api_version,
        kind: &w.kind,
        namespace: Some(&w.namespace),
        name: &w.name,
        labels: &w.labels,
    }
}

/// How specifically a namespaced policy matches a workload (its best selector); policies
/// only apply inside their own namespace.
pub fn policy_matches(p: &PropagationPolicy, w: &Workload) -> Option<Specificity> {
    governance::policy_matches(PolicyKind::PropagationPolicy, p, &subject(w))
}

/// The policy that governs `w` among namespaced `policies` and `cluster_wide` ones, with
/// the candidates it overruled.
pub fn govern<'a>(
    policies: &'a [PropagationPolicy],
    cluster_wide: &'a [PropagationPolicy],
    w: &Workload,
) -> Option<Governance<'a>> {
    governance::govern(policies, cluster_wide, &subject(w))
}

/// The policy for `w` among namespaced `policies`: higher priority, then the most specific
/// match, then the smaller name.
pub fn select_policy<'a>(
    policies: &'a [PropagationPolicy],
    w: &Workload,
) -> Option<&'a PropagationPolicy> {
    govern(policies, &[], w).map(|g| g.winner.policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LabelSelector, ResourceSelector};

    fn workload() -> Workload {
        Workload {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "web".into(),
            labels: [("tier".to_owned(), "front".to_owned())].into(),
            replicas: 3,
            ..Default::default()
        }
    }

    fn policy(name: &str, priority: i32, sel: ResourceSelector) -> PropagationPolicy {
        let mut p = PropagationPolicy::default();
        p.metadata.name = name.into();
        p.metadata.namespace = "shop".into();
        p.spec.priority = priority;
        p.spec.resource_selectors = vec![sel];
        p
    }

    fn kind() -> ResourceSelector {
        ResourceSelector {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            ..Default::default()
        }
    }
    fn named(n: &str) -> ResourceSelector {
        ResourceSelector {
            name: Some(n.into()),
            ..kind()
        }
    }
    fn labelled(k: &str, v: &str) -> ResourceSelector {
        ResourceSelector {
            label_selector: Some(LabelSelector::from_labels([(k, v)]).unwrap()),
            ..kind()
        }
    }

    #[test]
    fn priority_then_most_specific_then_name() {
        let w = workload();
        // (policies, expected winner)
        let cases: Vec<(Vec<PropagationPolicy>, Option<&str>)> = vec![
            (vec![], None),
            (vec![policy("a", 0, named("other"))], None),
            (vec![policy("a", 0, kind())], Some("a")),
            (
                vec![
                    policy("kind", 0, kind()),
                    policy("labels", 0, labelled("tier", "front")),
                ],
                Some("labels"),
            ),
            // Explicit priority comes before specificity.
            (
                vec![
                    policy("kind", 100, kind()),
                    policy("labels", 0, labelled("tier", "front")),
                ],
                Some("kind"),
            ),
            (
                vec![
                    policy("labels", 0, labelled("tier", "front")),
                    policy("name", 0, named("web")),
                ],
                Some("name"),
            ),
            (
                vec![
                    policy("x", 0, labelled("tier", "back")),
                    policy("y", 0, kind()),
                ],
                Some("y"),
            ),
            (
                vec![policy("b", 1, kind()), policy("a", 0, kind())],
                Some("b"),
            ),
            (
                vec![policy("b", 0, kind()), policy("a", 0, kind())],
                Some("a"),
            ),
            (
                vec![policy(
                    "n",
                    0,
                    ResourceSelector {
                        api_version: "apps/v1".into(),
                        kind: "ReplicaSet".into(),
                        ..Default::default()
                    },
                )],
                None,
            ),
        ];
        for (policies, want) in cases {
            let got = select_policy(&policies, &w).map(|p| p.metadata.name.as_str());
            assert_eq!(
                got,
                want,
                "{:?}",
                policies
                    .iter()
                    .map(|p| &p.metadata.name)
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn other_namespace_never_matches() {
        let mut p = policy("a", 0, kind());
        p.metadata.namespace = "other".into();
        assert!(select_policy(std::slice::from_ref(&p), &workload()).is_none());
    }

    #[test]
    fn best_selector_of_a_policy_counts() {
        let mut p = policy("multi", 0, kind());
        p.spec.resource_selectors.push(named("web"));
        let q = policy("labels", 0, labelled("tier", "front"));
        assert_eq!(
            select_policy(&[q, p], &workload()).unwrap().metadata.name,
            "multi"
        );
    }
}

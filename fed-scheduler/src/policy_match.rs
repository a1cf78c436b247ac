//! Chooses the PropagationPolicy for a workload: the most specific selector wins.

use crate::types::{PropagationPolicy, ResourceSelector, Workload};

/// How specifically a selector names a workload; higher is more specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Specificity {
    /// apiVersion/kind only.
    Kind = 1,
    /// apiVersion/kind and a label selector.
    Labels = 2,
    /// apiVersion/kind and the exact name.
    Name = 3,
}

/// How specifically `sel` matches `w`, or `None` when it does not match.
pub fn selector_matches(sel: &ResourceSelector, w: &Workload) -> Option<Specificity> {
    if sel.api_version != w.api_version || sel.kind != w.kind {
        return None;
    }
    if let Some(name) = &sel.name
        && name != &w.name
    {
        return None;
    }
    if let Some(ls) = &sel.label_selector
        && !ls.matches(&w.labels)
    {
        return None;
    }
    Some(if sel.name.is_some() {
        Specificity::Name
    } else if sel.label_selector.is_some() {
        Specificity::Labels
    } else {
        Specificity::Kind
    })
}

/// How specifically a policy matches a workload (its best selector); policies only
/// apply inside their own namespace.
pub fn policy_matches(p: &PropagationPolicy, w: &Workload) -> Option<Specificity> {
    if !p.metadata.namespace.is_empty() && p.metadata.namespace != w.namespace {
        return None;
    }
    p.spec
        .resource_selectors
        .iter()
        .filter_map(|s| selector_matches(s, w))
        .max()
}

/// The policy for `w`: most specific match, then higher priority, then smaller name.
pub fn select_policy<'a>(
    policies: &'a [PropagationPolicy],
    w: &Workload,
) -> Option<&'a PropagationPolicy> {
    policies
        .iter()
        .filter_map(|p| policy_matches(p, w).map(|s| (s, p)))
        .min_by(|(sa, a), (sb, b)| {
            sb.cmp(sa)
                .then_with(|| b.spec.priority.cmp(&a.spec.priority))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LabelSelector;

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
    fn most_specific_then_priority_then_name() {
        let w = workload();
        // (policies, expected winner)
        let cases: Vec<(Vec<PropagationPolicy>, Option<&str>)> = vec![
            (vec![], None),
            (vec![policy("a", 0, named("other"))], None),
            (vec![policy("a", 0, kind())], Some("a")),
            (
                vec![
                    policy("kind", 100, kind()),
                    policy("labels", 0, labelled("tier", "front")),
                ],
                Some("labels"),
            ),
            (
                vec![
                    policy("labels", 100, labelled("tier", "front")),
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
        let q = policy("labels", 50, labelled("tier", "front"));
        assert_eq!(
            select_policy(&[q, p], &workload()).unwrap().metadata.name,
            "multi"
        );
    }
}

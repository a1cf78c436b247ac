//! Which one policy governs an object, among the PropagationPolicies and
//! ClusterPropagationPolicies whose selectors match it.
//!
//! The scheduler and the controllers must agree on the answer, so it is decided once, here,
//! as a pure function of the policies and the object. The order (issue 26): the higher
//! explicit `priority` first; then a namespaced policy over a cluster-wide one; then the
//! most specific selector (name over label selector over kind-only); then the smaller name.
//! A cluster-scoped object is governed only by a ClusterPropagationPolicy; a namespaced
//! PropagationPolicy governs only objects in its own namespace.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::object::PropagationPolicy;
use crate::policy::ResourceSelector;

/// How specifically a selector names an object; higher is more specific.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Specificity {
    /// apiVersion/kind only.
    Kind = 1,
    /// apiVersion/kind and a label selector.
    Labels = 2,
    /// apiVersion/kind and the exact name.
    Name = 3,
}

/// The object a policy is chosen for, as far as selection reads it.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// e.g. `rbac.authorization.k8s.io/v1`.
    pub api_version: &'a str,
    /// e.g. `Role`.
    pub kind: &'a str,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<&'a str>,
    /// Object name.
    pub name: &'a str,
    /// Object labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// Whether a policy is a namespaced `PropagationPolicy` or a `ClusterPropagationPolicy`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum PolicyKind {
    /// A namespaced `PropagationPolicy`.
    PropagationPolicy,
    /// A cluster-scoped `ClusterPropagationPolicy`.
    ClusterPropagationPolicy,
}

impl PolicyKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::PropagationPolicy => "PropagationPolicy",
            PolicyKind::ClusterPropagationPolicy => "ClusterPropagationPolicy",
        }
    }
}

/// How specifically `sel` matches `s`, or `None` when it does not match.
pub fn selector_matches(sel: &ResourceSelector, s: &Subject<'_>) -> Option<Specificity> {
    if sel.api_version != s.api_version || sel.kind != s.kind {
        return None;
    }
    if sel.name.as_deref().is_some_and(|n| n != s.name) {
        return None;
    }
    if sel
        .label_selector
        .as_ref()
        .is_some_and(|ls| !ls.matches(s.labels))
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

/// How specifically a policy of `kind` matches `s` (its best selector), or `None` when it
/// cannot govern it: a namespaced policy never governs a cluster-scoped object nor one in
/// another namespace (a policy read without a namespace, as `fedctl plan` reads files,
/// applies to every namespace).
pub fn policy_matches(
    kind: PolicyKind,
    p: &PropagationPolicy,
    s: &Subject<'_>,
) -> Option<Specificity> {
    if kind == PolicyKind::PropagationPolicy {
        let ns = s.namespace?;
        if !p.metadata.namespace.is_empty() && p.metadata.namespace != ns {
            return None;
        }
    }
    p.spec
        .resource_selectors
        .iter()
        .filter_map(|sel| selector_matches(sel, s))
        .max()
}

/// One policy that matches an object.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// Namespaced or cluster-wide.
    pub kind: PolicyKind,
    /// The policy.
    pub policy: &'a PropagationPolicy,
    /// Its best selector's match.
    pub specificity: Specificity,
}

impl Candidate<'_> {
    /// The precedence order: `Less` means `self` wins over `other`.
    fn precedence(&self, other: &Self) -> Ordering {
        other
            .policy
            .spec
            .priority
            .cmp(&self.policy.spec.priority)
            .then_with(|| self.kind.cmp(&other.kind))
            .then_with(|| other.specificity.cmp(&self.specificity))
            .then_with(|| self.policy.metadata.name.cmp(&other.policy.metadata.name))
            .then_with(|| {
                self.policy
                    .metadata
                    .namespace
                    .cmp(&other.policy.metadata.namespace)
            })
    }

    /// How the candidate is shown on a Placement.
    pub fn reference(&self) -> PolicyRef {
        PolicyRef {
            kind: self.kind,
            namespace: Some(self.policy.metadata.namespace.clone()).filter(|n| !n.is_empty()),
            name: self.policy.metadata.name.clone(),
            priority: self.policy.spec.priority,
            matched_by: self.specificity,
        }
    }
}

/// Every policy that matches `s`, best first: the first governs it.
pub fn candidates<'a>(
    namespaced: &'a [PropagationPolicy],
    cluster_wide: &'a [PropagationPolicy],
    s: &Subject<'_>,
) -> Vec<Candidate<'a>> {
    let tagged = namespaced
        .iter()
        .map(|p| (PolicyKind::PropagationPolicy, p))
        .chain(
            cluster_wide
                .iter()
                .map(|p| (PolicyKind::ClusterPropagationPolicy, p)),
        );
    let mut found: Vec<Candidate<'a>> = tagged
        .filter_map(|(kind, policy)| {
            policy_matches(kind, policy, s).map(|specificity| Candidate {
                kind,
                policy,
                specificity,
            })
        })
        .collect();
    found.sort_by(Candidate::precedence);
    found
}

/// The policy that governs `s`, and the matching ones it overrules.
#[derive(Clone, Debug)]
pub struct Governance<'a> {
    /// The governing policy.
    pub winner: Candidate<'a>,
    /// The other matching policies, best first.
    pub overruled: Vec<Candidate<'a>>,
}

impl Governance<'_> {
    /// The choice as shown on the object's Placement.
    pub fn choice(&self) -> PolicyChoice {
        PolicyChoice {
            governing: self.winner.reference(),
            overruled: self.overruled.iter().map(Candidate::reference).collect(),
        }
    }
}

/// The policy that governs `s`, or `None` when no policy matches it.
pub fn govern<'a>(
    namespaced: &'a [PropagationPolicy],
    cluster_wide: &'a [PropagationPolicy],
    s: &Subject<'_>,
) -> Option<Governance<'a>> {
    let mut found = candidates(namespaced, cluster_wide, s).into_iter();
    let winner = found.next()?;
    Some(Governance {
        winner,
        overruled: found.collect(),
    })
}

/// A policy as shown on a Placement (`status.policy`).
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// `PropagationPolicy` or `ClusterPropagationPolicy`.
    pub kind: PolicyKind,
    /// Namespace of a `PropagationPolicy`.
    pub namespace: Option<String>,
    /// Policy name.
    pub name: String,
    /// Its `priority`.
    #[serde(default)]
    pub priority: i32,
    /// How specifically its best selector matched the object.
    pub matched_by: Specificity,
}

/// Which policy governs an object and which matching ones lost to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyChoice {
    /// The governing policy.
    pub governing: PolicyRef,
    /// The other matching policies, in precedence order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overruled: Vec<PolicyRef>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

    fn labels() -> BTreeMap<String, String> {
        [("tier".to_owned(), "front".to_owned())].into()
    }

    fn subject<'a>(labels: &'a BTreeMap<String, String>) -> Subject<'a> {
        Subject {
            api_version: "apps/v1",
            kind: "Deployment",
            namespace: Some("shop"),
            name: "web",
            labels,
        }
    }

    fn policy(ns: &str, name: &str, priority: i32, sel: ResourceSelector) -> PropagationPolicy {
        let mut p = PropagationPolicy::default();
        p.metadata.name = name.into();
        p.metadata.namespace = ns.into();
        p.spec.priority = priority;
        p.spec.resource_selectors = vec![sel];
        p
    }
    fn pp(name: &str, priority: i32, sel: ResourceSelector) -> PropagationPolicy {
        policy("shop", name, priority, sel)
    }
    fn cpp(name: &str, priority: i32, sel: ResourceSelector) -> PropagationPolicy {
        policy("", name, priority, sel)
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

    /// (namespaced, cluster-wide, expected order of names: winner first).
    type Case = (
        Vec<PropagationPolicy>,
        Vec<PropagationPolicy>,
        Vec<&'static str>,
    );

    #[test]
    fn precedence_table() {
        let l = labels();
        let s = subject(&l);
        let cases: Vec<Case> = vec![
            (vec![], vec![], vec![]),
            (vec![pp("a", 0, named("other"))], vec![], vec![]),
            (vec![pp("a", 0, kind())], vec![], vec!["a"]),
            // Specificity among equal priorities: name > labels > kind.
            (
                vec![
                    pp("kind", 0, kind()),
                    pp("labels", 0, labelled("tier", "front")),
                    pp("name", 0, named("web")),
                ],
                vec![],
                vec!["name", "labels", "kind"],
            ),
            // Explicit priority first, even over a more specific selector.
            (
                vec![pp("kind", 5, kind()), pp("name", 0, named("web"))],
                vec![],
                vec!["kind", "name"],
            ),
            // A namespaced policy over a cluster-wide one at equal priority, even when the
            // cluster-wide one names the object.
            (
                vec![pp("ns-kind", 0, kind())],
                vec![cpp("c-name", 0, named("web"))],
                vec!["ns-kind", "c-name"],
            ),
            // ... but priority still comes first.
            (
                vec![pp("ns-kind", 0, kind())],
                vec![cpp("c-kind", 1, kind())],
                vec!["c-kind", "ns-kind"],
            ),
            // Cluster-wide among themselves: specificity, then name.
            (
                vec![],
                vec![
                    cpp("b", 0, kind()),
                    cpp("a", 0, kind()),
                    cpp("z", 0, labelled("tier", "front")),
                ],
                vec!["z", "a", "b"],
            ),
            // Non-matching selectors are no candidates.
            (
                vec![pp("x", 9, labelled("tier", "back"))],
                vec![cpp("y", 0, kind())],
                vec!["y"],
            ),
            // Another namespace's policy never governs.
            (vec![policy("other", "o", 9, kind())], vec![], vec![]),
        ];
        for (i, (ns, cw, want)) in cases.iter().enumerate() {
            let got: Vec<&str> = candidates(ns, cw, &s)
                .iter()
                .map(|c| c.policy.metadata.name.as_str())
                .collect();
            assert_eq!(&got, want, "case {i}");
            let winner = govern(ns, cw, &s).map(|g| g.winner.policy.metadata.name.as_str());
            assert_eq!(winner, want.first().copied(), "case {i}");
        }
    }

    #[test]
    fn cluster_scoped_objects_only_through_cluster_policies() {
        let none = BTreeMap::new();
        let s = Subject {
            api_version: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRole",
            namespace: None,
            name: "reader",
            labels: &none,
        };
        let sel = ResourceSelector {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
            ..Default::default()
        };
        let namespaced = [
            pp("p", 100, sel.clone()),
            policy("", "unscoped", 100, sel.clone()),
        ];
        let cluster = [cpp("c", 0, sel)];
        let g = govern(&namespaced, &cluster, &s).expect("governed");
        assert_eq!(g.winner.kind, PolicyKind::ClusterPropagationPolicy);
        assert!(g.overruled.is_empty());
        assert!(govern(&namespaced, &[], &s).is_none());
    }

    #[test]
    fn the_choice_names_winner_and_losers() {
        let l = labels();
        let ns = [pp("web", 0, named("web"))];
        let cw = [cpp("all", 0, kind())];
        let choice = govern(&ns, &cw, &subject(&l)).unwrap().choice();
        assert_eq!(
            serde_json::to_value(&choice).unwrap(),
            serde_json::json!({
                "governing": {"kind": "PropagationPolicy", "namespace": "shop", "name": "web",
                              "priority": 0, "matchedBy": "Name"},
                "overruled": [{"kind": "ClusterPropagationPolicy", "name": "all",
                               "priority": 0, "matchedBy": "Kind"}],
            })
        );
    }

    #[test]
    fn best_selector_of_a_policy_counts() {
        let l = labels();
        let mut multi = pp("multi", 0, kind());
        multi.spec.resource_selectors.push(named("web"));
        let ns = [pp("labels", 0, labelled("tier", "front")), multi];
        let g = govern(&ns, &[], &subject(&l)).unwrap();
        assert_eq!(g.winner.policy.metadata.name, "multi");
        assert_eq!(g.winner.specificity, Specificity::Name);
    }
}

//! The dependency copies (what a pod template references, [`super::deps`]) each destination
//! of a workload gets: the federated object as a member copy ([`desired::dependency`]),
//! then changed by the override policies that select it for that cluster, exactly as a
//! copied object is ([`overridden`]).
//!
//! Built lazily and shared: one list for the clusters no rule on a dependency targets
//! (usually all), one per cluster a rule does. A rule that fails in a cluster holds back
//! only that dependency there: its entry stays in the list without a copy, so the member
//! leaves what it holds as it is (and does not collect it as unreferenced), and the failure
//! is reported on the workload's Placement entry for the cluster.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use fed_api::governance::Subject;
use fed_api::overrides::apply::{MemberCluster, Policy, changes_in, selecting};
use kube::ResourceExt;
use kube::api::DynamicObject;

use super::desired;
use super::kinds::DepKind;
use super::member::Dependency;
use super::wants::Variant;
use crate::compact::Compact;
use crate::copies::member_copy::overridden;

/// One federated dependency and the policies that select it.
struct Dep<'p> {
    kind: DepKind,
    name: String,
    object: Arc<DynamicObject>,
    selected: Vec<&'p Policy>,
}

/// The dependency copies of one workload in one reconcile.
pub struct DepWants<'p> {
    deps: Vec<Dep<'p>>,
    /// A digest of the policies selecting some dependency (0 without any).
    digest: u64,
    built: HashMap<Variant, Built>,
}

/// The list one variant gets, with the failures that hold some of its entries back.
#[derive(Clone, Default)]
struct Built {
    deps: Vec<Dependency>,
    failures: Vec<String>,
}

impl<'p> DepWants<'p> {
    /// The dependencies `objects` (of a workload in `namespace`) under `policies`.
    pub fn new(
        objects: Vec<(DepKind, String, Arc<DynamicObject>)>,
        namespace: &str,
        policies: &'p [Policy],
    ) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut any = false;
        let deps = objects
            .into_iter()
            .map(|(kind, name, object)| {
                let selected = if policies.is_empty() {
                    Vec::new()
                } else {
                    let s = Subject {
                        api_version: "v1",
                        kind: kind.as_str(),
                        namespace: Some(namespace),
                        name: &name,
                        labels: object.labels(),
                    };
                    selecting(&s, policies)
                };
                for p in &selected {
                    any = true;
                    (kind.as_str(), &name).hash(&mut h);
                    super::wants::hash_policy(p, &mut h);
                }
                Dep {
                    kind,
                    name,
                    object,
                    selected,
                }
            })
            .collect();
        DepWants {
            deps,
            digest: if any { h.finish() } else { 0 },
            built: HashMap::new(),
        }
    }

    /// Whether some policy selects some dependency: without one every cluster gets the
    /// plain copies and none needs looking up.
    pub fn any_policy(&self) -> bool {
        self.digest != 0
    }

    /// Which list `cluster` (`None` when unknown) gets.
    pub fn variant(&self, cluster: Option<&MemberCluster<'_>>) -> Variant {
        let c = cluster?;
        self.deps
            .iter()
            .any(|d| !d.selected.is_empty() && changes_in(&d.selected, c))
            .then(|| c.name.to_owned())
    }

    /// What the list `cluster` gets is built from beyond the dependencies' versions: for a
    /// targeted cluster, the policies and the cluster's labels, region and zone.
    pub fn source(&self, cluster: Option<&MemberCluster<'_>>) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        if let Some(c) = cluster.filter(|c| self.variant(Some(*c)).is_some()) {
            (c.name, c.labels, c.region, c.zone, self.digest).hash(&mut h);
        }
        h.finish()
    }

    fn build(&mut self, cluster: Option<&MemberCluster<'_>>) -> Result<&Built, serde_json::Error> {
        let variant = self.variant(cluster);
        if let Entry::Vacant(slot) = self.built.entry(variant.clone()) {
            let mut b = Built::default();
            for d in &self.deps {
                let v = serde_json::to_value(&*d.object)?;
                let uid = desired::uid_of(&v).unwrap_or_default().to_string();
                let plain = desired::dependency(&v, d.kind, &uid);
                let object = match cluster.filter(|_| variant.is_some()) {
                    Some(c) => match overridden(&plain, d.kind.as_str(), c, &d.selected, &uid) {
                        Ok(o) => Some(Compact::new(&o)),
                        Err(e) => {
                            b.failures.push(failure(d.kind, &d.name, &e));
                            None
                        }
                    },
                    None => Some(Compact::new(&plain)),
                };
                b.deps.push(Dependency {
                    kind: d.kind,
                    name: d.name.clone(),
                    object,
                });
            }
            slot.insert(b);
        }
        Ok(&self.built[&variant])
    }

    /// The dependency copies `cluster` gets, built on first use.
    pub fn get(
        &mut self,
        cluster: Option<&MemberCluster<'_>>,
    ) -> Result<Vec<Dependency>, serde_json::Error> {
        self.build(cluster).map(|b| b.deps.clone())
    }

    /// Why some dependency copy cannot be made for `cluster` (empty when all can).
    pub fn failures(
        &mut self,
        cluster: Option<&MemberCluster<'_>>,
    ) -> Result<Vec<String>, serde_json::Error> {
        if self.variant(cluster).is_none() {
            return Ok(Vec::new());
        }
        self.build(cluster).map(|b| b.failures.clone())
    }
}

/// A dependency's override failure as its workload's Placement entry says it (an
/// interpreted object's too, [`crate::copies::dep_failures`]).
pub fn failure(kind: DepKind, name: &str, e: &dyn std::fmt::Display) -> String {
    format!("{} {name}: {e}", kind.as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::copies::record;
    use crate::workload::wants::tests::cluster;

    fn cm(name: &str, labels: Value) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                             "resourceVersion": "4", "labels": labels},
                "data": {"mode": "fast"}
            }))
            .unwrap(),
        )
    }

    fn policy(name: &str, selector: Value, rules: Value) -> Policy {
        Policy {
            namespace: Some("shop".into()),
            name: name.into(),
            spec: serde_json::from_value(json!({
                "resourceSelectors": [selector],
                "overrideRules": rules,
            }))
            .unwrap(),
        }
    }

    fn objects() -> Vec<(DepKind, String, Arc<DynamicObject>)> {
        vec![
            (
                DepKind::ConfigMap,
                "env".into(),
                cm("env", json!({"app": "web"})),
            ),
            (DepKind::ConfigMap, "other".into(), cm("other", json!({}))),
        ]
    }

    #[test]
    fn a_rule_on_a_dependency_changes_it_in_its_clusters_only() {
        let policies = vec![policy(
            "env-labels",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "env"}),
            json!([{"targetCluster": {"regions": ["eu"]}, "overriders": {
                "labelsOverrider": [{"operator": "add", "value": {"tier": "edge"}}]
            }}]),
        )];
        let mut w = DepWants::new(objects(), "shop", &policies);
        assert!(w.any_policy());
        let (eu, us) = (cluster("eu-1", "eu"), cluster("us-1", "us"));
        let (eu, us) = (MemberCluster::of(&eu), MemberCluster::of(&us));
        assert_eq!(w.variant(Some(&eu)), Some("eu-1".to_owned()));
        assert_eq!(w.variant(Some(&us)), None);
        assert_eq!(w.source(Some(&us)), w.source(None));
        assert_ne!(w.source(Some(&eu)), w.source(None));
        let got = w.get(Some(&eu)).unwrap();
        let env = got[0].object.as_ref().expect("a copy").value();
        assert_eq!(env["metadata"]["labels"]["tier"], "edge");
        assert_eq!(
            env["metadata"]["labels"]["federation.meridian.dev/owner-uid"],
            "uid-env"
        );
        assert!(record::Record::read(&env).is_some());
        let other = got[1].object.as_ref().expect("a copy").value();
        assert!(other["metadata"]["labels"].get("tier").is_none());
        assert!(record::Record::read(&other).is_none(), "no rule changes it");
        let plain = w.get(Some(&us)).unwrap();
        let env = plain[0].object.as_ref().expect("a copy").value();
        assert!(env["metadata"]["labels"].get("tier").is_none());
        assert_eq!(
            env,
            w.get(None).unwrap()[0].object.as_ref().unwrap().value()
        );
        assert!(w.failures(Some(&eu)).unwrap().is_empty());
        // Without policies: the plain copies, nothing looked up.
        let none = DepWants::new(objects(), "shop", &[]);
        assert!(!none.any_policy());
        assert_eq!(none.variant(Some(&eu)), None);
    }

    #[test]
    fn a_failing_rule_holds_back_only_that_dependency_in_that_cluster() {
        let policies = vec![policy(
            "broken",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "env"}),
            json!([{"targetCluster": {"clusterNames": ["eu-1"]}, "overriders": {
                "plaintext": [{"path": "/data/missing", "operator": "remove"}]
            }}]),
        )];
        let mut w = DepWants::new(objects(), "shop", &policies);
        let (eu, eu2) = (cluster("eu-1", "eu"), cluster("eu-2", "eu"));
        let (eu, eu2) = (MemberCluster::of(&eu), MemberCluster::of(&eu2));
        let got = w.get(Some(&eu)).unwrap();
        assert_eq!(
            got.len(),
            2,
            "the held-back entry stays: it is still in use"
        );
        assert!(got[0].object.is_none());
        assert!(got[1].object.is_some());
        let failures = w.failures(Some(&eu)).unwrap();
        assert_eq!(failures.len(), 1);
        assert!(
            failures[0]
                .starts_with("ConfigMap env: OverridePolicy shop/broken rule 0: plaintext[0]"),
            "{failures:?}"
        );
        assert!(w.failures(Some(&eu2)).unwrap().is_empty());
        assert!(
            w.get(Some(&eu2))
                .unwrap()
                .iter()
                .all(|d| d.object.is_some())
        );
    }
}

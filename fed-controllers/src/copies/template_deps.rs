//! The ConfigMaps, Secrets, ServiceAccounts and PersistentVolumeClaims an interpreted
//! custom object's pod template references, and the clusters that need them: those
//! holding a copy of the object. The copy path writes them there as it writes a dependency
//! object with a copy Placement ([`crate::dep_writers`]). Pure.

use std::collections::BTreeSet;

use fed_api::interpreter::ResourceInterpreterSpec;
use fed_api::placement::TargetCluster;
use serde_json::Value;

use crate::dep_writers::DepRef;
use crate::workload::deps::of_pod_template;

/// What one interpreted object asks for: these dependency objects, in these clusters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateDeps {
    /// The objects its pod template references (in its namespace).
    pub refs: BTreeSet<DepRef>,
    /// The clusters holding a copy of it.
    pub clusters: BTreeSet<String>,
}

/// What the federated object `fed` (as cached, `None` when gone) in `namespace`, placed on
/// `dest`, asks for through the pod template its kind's `interpreter` names. Nothing when
/// it is gone, being deleted, without a uid yet (it has no copies then), cluster-scoped,
/// placed nowhere, or its kind names no template; every destination holds a copy (a
/// divided object's destinations are those with a share).
pub fn template_deps(
    fed: Option<&Value>,
    namespace: Option<&str>,
    dest: &[TargetCluster],
    interpreter: Option<&ResourceInterpreterSpec>,
) -> TemplateDeps {
    let (Some(fed), Some(namespace), Some(interpreter)) = (fed, namespace, interpreter) else {
        return TemplateDeps::default();
    };
    let meta = &fed["metadata"];
    let alive =
        meta["deletionTimestamp"].is_null() && meta["uid"].as_str().is_some_and(|u| !u.is_empty());
    let Some(template) = interpreter.pod_template_of(fed).filter(|_| alive) else {
        return TemplateDeps::default();
    };
    let refs: BTreeSet<DepRef> = of_pod_template(template)
        .refs
        .into_iter()
        .map(|(kind, name)| DepRef {
            kind,
            namespace: namespace.to_string(),
            name,
        })
        .collect();
    if refs.is_empty() || dest.is_empty() {
        return TemplateDeps::default();
    }
    TemplateDeps {
        refs,
        clusters: dest.iter().map(|t| t.cluster.clone()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use fed_api::interpreter::{FieldRef, InterpreterTarget};
    use serde_json::json;

    use super::*;
    use crate::workload::kinds::DepKind;

    fn interpreter(template: Option<&str>) -> ResourceInterpreterSpec {
        ResourceInterpreterSpec {
            target: InterpreterTarget {
                api_version: "example.com/v1".into(),
                kind: "Rollout".into(),
            },
            replicas: Some(FieldRef {
                path: ".spec.replicas".into(),
            }),
            pod_template: template.map(|p| FieldRef { path: p.into() }),
            ..Default::default()
        }
    }

    fn rollout(meta: Value) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Rollout", "metadata": meta,
        "spec": {"replicas": 3, "template": {"spec": {
            "serviceAccountName": "web",
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "env"}}]}],
            "volumes": [{"name": "tls", "secret": {"secretName": "tls"}}]
        }}}})
    }

    fn dest(clusters: &[(&str, u32)]) -> Vec<TargetCluster> {
        clusters
            .iter()
            .map(|(c, r)| TargetCluster::new(*c, *r))
            .collect()
    }

    fn names(d: &TemplateDeps) -> (Vec<String>, Vec<String>) {
        (
            d.refs
                .iter()
                .map(|r| format!("{} {}/{}", r.kind.as_str(), r.namespace, r.name))
                .collect(),
            d.clusters.iter().cloned().collect(),
        )
    }

    #[test]
    fn what_an_interpreted_object_asks_for_and_where() {
        let live = rollout(json!({"name": "web", "namespace": "shop", "uid": "u1"}));
        let deleting = rollout(json!({"name": "web", "namespace": "shop", "uid": "u1",
                                      "deletionTimestamp": "2026-01-01T00:00:00Z"}));
        let no_uid = rollout(json!({"name": "web", "namespace": "shop"}));
        let no_refs = json!({"metadata": {"name": "web", "uid": "u1"},
                             "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}});
        let every = vec![
            "ConfigMap shop/env".to_string(),
            "Secret shop/tls".to_string(),
            "ServiceAccount shop/web".to_string(),
        ];
        let both = vec!["sim-1".to_string(), "sim-2".to_string()];
        let with_template = interpreter(Some(".spec.template"));
        let without_template = interpreter(None);
        type Case<'a> = (
            &'a str,
            Option<&'a Value>,
            Option<&'a str>,
            Vec<TargetCluster>,
            Option<&'a ResourceInterpreterSpec>,
            (Vec<String>, Vec<String>),
        );
        let none = (Vec::new(), Vec::new());
        let cases: Vec<Case> = vec![
            (
                "divided: every cluster with a share",
                Some(&live),
                Some("shop"),
                dest(&[("sim-2", 4), ("sim-1", 2)]),
                Some(&with_template),
                (every.clone(), both.clone()),
            ),
            (
                "duplicated: every destination",
                Some(&live),
                Some("shop"),
                dest(&[("sim-1", 0), ("sim-2", 0)]),
                Some(&with_template),
                (every.clone(), both.clone()),
            ),
            (
                "placed nowhere",
                Some(&live),
                Some("shop"),
                dest(&[]),
                Some(&with_template),
                none.clone(),
            ),
            (
                "gone",
                None,
                Some("shop"),
                dest(&[("sim-1", 2)]),
                Some(&with_template),
                none.clone(),
            ),
            (
                "being deleted",
                Some(&deleting),
                Some("shop"),
                dest(&[("sim-1", 2)]),
                Some(&with_template),
                none.clone(),
            ),
            (
                "no uid yet",
                Some(&no_uid),
                Some("shop"),
                dest(&[("sim-1", 2)]),
                Some(&with_template),
                none.clone(),
            ),
            (
                "its interpreter names no template",
                Some(&live),
                Some("shop"),
                dest(&[("sim-1", 2)]),
                Some(&without_template),
                none.clone(),
            ),
            (
                "no interpreter",
                Some(&live),
                Some("shop"),
                dest(&[("sim-1", 2)]),
                None,
                none.clone(),
            ),
            (
                "cluster-scoped",
                Some(&live),
                None,
                dest(&[("sim-1", 2)]),
                Some(&with_template),
                none.clone(),
            ),
            (
                "a template that references nothing",
                Some(&no_refs),
                Some("shop"),
                dest(&[("sim-1", 2)]),
                Some(&with_template),
                none.clone(),
            ),
        ];
        for (what, fed, ns, dest, interpreter, want) in cases {
            let got = template_deps(fed, ns, &dest, interpreter);
            assert_eq!(names(&got), want, "{what}");
        }
        let got = template_deps(
            Some(&live),
            Some("shop"),
            &dest(&[("a", 1)]),
            Some(&with_template),
        );
        assert!(
            got.refs
                .iter()
                .any(|r| r.kind == DepKind::Secret && r.name == "tls")
        );
    }
}

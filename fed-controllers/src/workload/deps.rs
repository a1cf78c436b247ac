//! Which ConfigMaps, Secrets, ServiceAccounts and PersistentVolumeClaims a pod template
//! needs in a member: env `valueFrom`, `envFrom`, volumes (`configMap`, `secret`,
//! `projected`, `persistentVolumeClaim`), `imagePullSecrets` and `serviceAccountName`.

use std::collections::BTreeSet;

use serde_json::Value;

use super::kinds::DepKind;

/// The dependencies (names, in the workload's namespace) a pod template references.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependencies {
    /// `(kind, name)`, sorted, without duplicates.
    pub refs: BTreeSet<(DepKind, String)>,
}

impl Dependencies {
    fn add(&mut self, kind: DepKind, name: Option<&Value>) {
        if let Some(n) = name.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            self.refs.insert((kind, n.to_string()));
        }
    }

    /// Whether the template references `kind/name`.
    pub fn contains(&self, kind: DepKind, name: &str) -> bool {
        self.refs.contains(&(kind, name.to_string()))
    }
}

fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// The dependencies of a pod template (`spec.template` of a Deployment or ReplicaSet).
pub fn of_pod_template(template: &Value) -> Dependencies {
    let mut d = Dependencies::default();
    let Some(spec) = template.get("spec") else {
        return d;
    };
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in items(spec, list) {
            for e in items(c, "env") {
                let from = &e["valueFrom"];
                d.add(DepKind::ConfigMap, from.pointer("/configMapKeyRef/name"));
                d.add(DepKind::Secret, from.pointer("/secretKeyRef/name"));
            }
            for e in items(c, "envFrom") {
                d.add(DepKind::ConfigMap, e.pointer("/configMapRef/name"));
                d.add(DepKind::Secret, e.pointer("/secretRef/name"));
            }
        }
    }
    for v in items(spec, "volumes") {
        d.add(DepKind::ConfigMap, v.pointer("/configMap/name"));
        d.add(DepKind::Secret, v.pointer("/secret/secretName"));
        d.add(
            DepKind::PersistentVolumeClaim,
            v.pointer("/persistentVolumeClaim/claimName"),
        );
        if let Some(p) = v.get("projected") {
            for s in items(p, "sources") {
                d.add(DepKind::ConfigMap, s.pointer("/configMap/name"));
                d.add(DepKind::Secret, s.pointer("/secret/name"));
            }
        }
    }
    for s in items(spec, "imagePullSecrets") {
        d.add(DepKind::Secret, s.get("name"));
    }
    // `serviceAccount` is the deprecated name, read by Kubernetes when the other is unset.
    // Every namespace of a member has its own `default`: that one is not copied.
    let account = [spec.get("serviceAccountName"), spec.get("serviceAccount")]
        .into_iter()
        .flatten()
        .find(|v| v.as_str().is_some_and(|n| !n.is_empty()));
    if account.and_then(Value::as_str) != Some(DEFAULT_SERVICE_ACCOUNT) {
        d.add(DepKind::ServiceAccount, account);
    }
    d
}

/// The ServiceAccount pods run as when their template names none.
const DEFAULT_SERVICE_ACCOUNT: &str = "default";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_every_reference() {
        let t = json!({"spec": {
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-env"}}]}],
            "containers": [{
                "name": "c",
                "env": [
                    {"name": "A", "value": "x"},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                    {"name": "C", "valueFrom": {"secretKeyRef": {"name": "sec-env", "key": "k"}}},
                    {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                ],
                "envFrom": [{"configMapRef": {"name": "cm-from"}}, {"secretRef": {"name": "sec-from"}}]
            }],
            "volumes": [
                {"name": "v1", "configMap": {"name": "cm-vol"}},
                {"name": "v2", "secret": {"secretName": "sec-vol"}},
                {"name": "v3", "projected": {"sources": [
                    {"configMap": {"name": "cm-proj"}}, {"secret": {"name": "sec-proj"}},
                    {"serviceAccountToken": {"path": "t"}}
                ]}},
                {"name": "v4", "emptyDir": {}},
                {"name": "v5", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "v6", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
            ],
            "serviceAccountName": "web-sa",
            "imagePullSecrets": [{"name": "registry"}, {"name": "cm-env"}]
        }});
        let d = of_pod_template(&t);
        let want: Vec<(DepKind, &str)> = vec![
            (DepKind::ConfigMap, "cm-env"),
            (DepKind::ConfigMap, "cm-from"),
            (DepKind::ConfigMap, "cm-proj"),
            (DepKind::ConfigMap, "cm-vol"),
            (DepKind::Secret, "cm-env"),
            (DepKind::Secret, "init-env"),
            (DepKind::Secret, "registry"),
            (DepKind::Secret, "sec-env"),
            (DepKind::Secret, "sec-from"),
            (DepKind::Secret, "sec-proj"),
            (DepKind::Secret, "sec-vol"),
            (DepKind::ServiceAccount, "web-sa"),
            (DepKind::PersistentVolumeClaim, "data"),
        ];
        let got: Vec<(DepKind, &str)> = d.refs.iter().map(|(k, n)| (*k, n.as_str())).collect();
        assert_eq!(got, want);
        assert!(d.contains(DepKind::ConfigMap, "cm-vol"));
        assert!(!d.contains(DepKind::Secret, "cm-vol"));
    }

    #[test]
    fn service_accounts() {
        let sa = |spec: serde_json::Value| -> Vec<String> {
            of_pod_template(&json!({ "spec": spec }))
                .refs
                .into_iter()
                .filter(|(k, _)| *k == DepKind::ServiceAccount)
                .map(|(_, n)| n)
                .collect()
        };
        // (what, pod spec, the ServiceAccount copied)
        let cases: [(&str, serde_json::Value, &[&str]); 6] = [
            ("named", json!({"serviceAccountName": "web"}), &["web"]),
            (
                "every namespace has default",
                json!({"serviceAccountName": "default"}),
                &[],
            ),
            ("none named", json!({}), &[]),
            ("empty", json!({"serviceAccountName": ""}), &[]),
            (
                "the deprecated field alone",
                json!({"serviceAccount": "old"}),
                &["old"],
            ),
            (
                "the current field wins",
                json!({"serviceAccountName": "new", "serviceAccount": "old"}),
                &["new"],
            ),
        ];
        for (what, spec, want) in cases {
            assert_eq!(sa(spec), want, "{what}");
        }
    }

    #[test]
    fn empty_or_odd_templates() {
        assert!(of_pod_template(&json!({})).refs.is_empty());
        assert!(
            of_pod_template(&json!({"spec": {"containers": "nope"}}))
                .refs
                .is_empty()
        );
        assert!(
            of_pod_template(&json!({"spec": {"volumes": [{"configMap": {"name": ""}}]}}))
                .refs
                .is_empty()
        );
    }
}

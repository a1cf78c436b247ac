//! What a member gets of a federated object: the object as written in the federation,
//! minus what the federation's server set (identity, versions, bookkeeping, status), what
//! means nothing in a member (owner references to federation objects, finalizers) and the
//! fields a member's own controllers write (a ServiceAccount's token `secrets`, a bound
//! PVC's `volumeName`), plus Meridian's ownership labels; the share one member runs of a
//! divided custom object; and that copy as one member gets it once the override policies
//! that select the object have changed it.

use serde_json::{Map, Value};

use fed_api::interpreter::ResourceInterpreterSpec;
use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};
use fed_api::overrides::apply::{MemberCluster, OverrideError, Policy, apply_selected, changes_in};

use super::record;

/// Metadata the federation's API server sets or that refers to federation objects.
const SERVER_METADATA: [&str; 11] = [
    "uid",
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    // Federation uids, and the federation's own cleanup finalizer: meaningless in a member.
    "ownerReferences",
    "finalizers",
    "generateName",
];

/// Annotations a member's controllers write on objects they bind or schedule.
const MEMBER_ANNOTATIONS: [&str; 4] = [
    "pv.kubernetes.io/bind-completed",
    "pv.kubernetes.io/bound-by-controller",
    "volume.kubernetes.io/selected-node",
    "volume.kubernetes.io/storage-provisioner",
];

/// Fields of one kind that the member's own controllers own: `(group, kind, path)` with
/// the path as JSON object keys from the top.
const MEMBER_FIELDS: [(&str, &str, &[&str]); 2] = [
    // Written by the member's token controller (legacy token Secrets of its own).
    ("", "ServiceAccount", &["secrets"]),
    // Bound by the member's volume controller to one of its own PersistentVolumes.
    ("", "PersistentVolumeClaim", &["spec", "volumeName"]),
];

/// The group of an `apiVersion` (`""` for the core group `v1`).
pub fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map_or("", |(group, _version)| group)
}

/// The copy of `fed` a member holds, labelled as Meridian's copy of the object with `uid`.
pub fn member_copy(fed: &Value, uid: &str) -> Value {
    let mut out = fed.clone();
    let group = group_of(fed["apiVersion"].as_str().unwrap_or_default()).to_owned();
    let kind = fed["kind"].as_str().unwrap_or_default().to_owned();
    let Some(obj) = out.as_object_mut() else {
        return out;
    };
    obj.remove("status");
    without_member_fields(obj, &group, &kind);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in SERVER_METADATA {
            meta.remove(k);
        }
    }
    stamp(&mut out, uid);
    out
}

/// `copy` with `share` written where `interpreter` (the kind's, if any) says the replicas
/// are: what one destination of a divided custom object runs. A share of 0 is a
/// destination of a whole copy (a Duplicated placement's `destClusters` carry no shares; a
/// divided one lists no cluster without replicas), and leaves the copy as it is. Override
/// policies apply after this, so a rule may still set the field per cluster.
pub fn with_share(copy: Value, interpreter: Option<&ResourceInterpreterSpec>, share: u32) -> Value {
    match interpreter {
        Some(i) if share > 0 => i.with_share(copy, share),
        _ => copy,
    }
}

/// Removes from `obj` (of `group` and `kind`) the fields and annotations the member's own
/// controllers write: a copy that carried them would fight those controllers.
pub fn without_member_fields(obj: &mut Map<String, Value>, group: &str, kind: &str) {
    for (g, k, path) in MEMBER_FIELDS {
        if g == group && k == kind {
            remove_path(obj, path);
        }
    }
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            for k in MEMBER_ANNOTATIONS {
                a.remove(k);
            }
        }
        if meta
            .get("annotations")
            .and_then(Value::as_object)
            .is_some_and(Map::is_empty)
        {
            meta.remove("annotations");
        }
    }
}

/// `copy` (of `kind`, Meridian's copy of the object with `uid`) as cluster `c` gets it under
/// the `selected` override policies. Meridian's ownership labels are put back afterwards:
/// without them the copy would not be recognised as Meridian's, and never updated again.
/// A copy some rule targets carries the [`record`] of what was set on it, so what a rule
/// stops setting later leaves the member's copy.
pub fn overridden(
    copy: &Value,
    kind: &str,
    c: &MemberCluster<'_>,
    selected: &[&Policy],
    uid: &str,
) -> Result<Value, OverrideError> {
    if !changes_in(selected, c) {
        return Ok(copy.clone());
    }
    let mut out = apply_selected(copy, kind, c, selected)?;
    stamp(&mut out, uid);
    record::stamp(&mut out);
    Ok(out)
}

/// Sets Meridian's ownership labels on `obj`.
fn stamp(obj: &mut Value, uid: &str) {
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    let meta = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(l) = labels.as_object_mut() {
        l.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
        l.insert(OWNER_UID_LABEL.into(), uid.into());
    }
}

fn remove_path(obj: &mut Map<String, Value>, path: &[&str]) {
    match path {
        [] => {}
        [last] => {
            obj.remove(*last);
        }
        [first, rest @ ..] => {
            if let Some(inner) = obj.get_mut(*first).and_then(Value::as_object_mut) {
                remove_path(inner, rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn server_metadata() -> Value {
        json!({
            "name": "x", "namespace": "shop", "uid": "fed-uid", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "finalizers": ["federation.meridian.dev/member-cleanup"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "fed-o"}],
            "labels": {"app": "shop"},
            "annotations": {"note": "kept"}
        })
    }

    fn kept_metadata() -> Value {
        json!({
            "name": "x", "namespace": "shop",
            "labels": {"app": "shop", MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "fed-uid"},
            "annotations": {"note": "kept"}
        })
    }

    #[test]
    fn table() {
        // (what, federated object, expected member copy)
        let cases = [
            (
                "role: rules kept, server metadata dropped",
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": server_metadata(),
                       "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": kept_metadata(),
                       "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            ),
            (
                "service account: token secrets are the member's",
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": server_metadata(),
                       "secrets": [{"name": "x-token-abcde"}],
                       "imagePullSecrets": [{"name": "registry"}]}),
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": kept_metadata(),
                       "imagePullSecrets": [{"name": "registry"}]}),
            ),
            (
                "bound pvc: volume and binding annotations are the member's",
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "x", "uid": "fed-uid",
                                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                       "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1", "volumeMode": "Filesystem",
                                "resources": {"requests": {"storage": "1Gi"}}},
                       "status": {"phase": "Bound"}}),
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "x", "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "fed-uid"}},
                       "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                                "resources": {"requests": {"storage": "1Gi"}}}}),
            ),
            (
                "custom resource: spec kept, status dropped",
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": server_metadata(),
                       "spec": {"size": 3, "secrets": ["not a service account"]}, "status": {"ready": true}}),
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": kept_metadata(),
                       "spec": {"size": 3, "secrets": ["not a service account"]}}),
            ),
            (
                "a core-looking kind in another group is not the core kind",
                json!({"apiVersion": "example.com/v1", "kind": "ServiceAccount",
                       "metadata": {"name": "x", "uid": "fed-uid"}, "secrets": ["mine"]}),
                json!({"apiVersion": "example.com/v1", "kind": "ServiceAccount",
                       "metadata": {"name": "x", "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "fed-uid"}},
                       "secrets": ["mine"]}),
            ),
        ];
        for (what, fed, want) in cases {
            assert_eq!(member_copy(&fed, "fed-uid"), want, "{what}");
        }
    }

    #[test]
    fn overrides_apply_and_ownership_stays() {
        use std::collections::BTreeMap;
        let fed = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "cfg", "namespace": "shop", "uid": "u", "labels": {"app": "shop"}},
                         "data": {"a": "1"}});
        let copy = member_copy(&fed, "u");
        let policy = Policy {
            namespace: Some("shop".into()),
            name: "labels".into(),
            spec: serde_json::from_value(json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
                "overrideRules": [{"targetCluster": {"clusterNames": ["a"]}, "overriders": {"plaintext": [
                    {"path": "/metadata/labels", "operator": "replace", "value": {"tier": "edge"}}
                ]}}]
            }))
            .unwrap(),
        };
        let labels = BTreeMap::new();
        let at = |name| MemberCluster {
            name,
            labels: &labels,
            region: None,
            zone: None,
        };
        let got = overridden(&copy, "ConfigMap", &at("a"), &[&policy], "u").unwrap();
        assert_eq!(
            got["metadata"]["labels"],
            json!({"tier": "edge", MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "u"})
        );
        let r = record::Record::read(&got).expect("a targeted copy carries its record");
        assert_eq!(r, record::Record::of(&got));
        assert!(r.labels.contains("tier") && !r.labels.contains("app"));
        assert_eq!(
            overridden(&copy, "ConfigMap", &at("b"), &[&policy], "u").unwrap(),
            copy
        );
    }

    #[test]
    fn groups() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(
            group_of("rbac.authorization.k8s.io/v1"),
            "rbac.authorization.k8s.io"
        );
    }

    #[test]
    fn share_table() {
        let rollouts: ResourceInterpreterSpec = serde_json::from_value(json!({
            "target": {"apiVersion": "example.com/v1", "kind": "Rollout"},
            "replicas": {"path": ".spec.replicas"}
        }))
        .expect("interpreter");
        let copied_only = ResourceInterpreterSpec {
            replicas: None,
            ..rollouts.clone()
        };
        let copy = || json!({"kind": "Rollout", "spec": {"replicas": 6, "paused": false}});
        // (what, interpreter, share, expected)
        let cases = [
            (
                "a share is written",
                Some(&rollouts),
                2,
                json!({"kind": "Rollout", "spec": {"replicas": 2, "paused": false}}),
            ),
            ("a whole copy", Some(&rollouts), 0, copy()),
            ("no replicas named", Some(&copied_only), 2, copy()),
            ("no interpreter", None, 2, copy()),
        ];
        for (what, interpreter, share, want) in cases {
            assert_eq!(with_share(copy(), interpreter, share), want, "{what}");
        }
    }
}

//! What a member should hold for one federated workload: the sub-object with that member's
//! replica share, and copies of the ConfigMaps/Secrets its pod template references — all
//! labelled as Meridian's. Pure functions over JSON objects, so both kinds share one path.

use serde_json::{Map, Value, json};

use fed_api::names::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL, REPLICA_SET_PREFERENCES_ANNOTATION,
};

use super::kinds::{DepKind, Kind};

/// Annotations that describe the federated object itself and must not travel to members.
const LOCAL_ANNOTATIONS: [&str; 3] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    "deployment.kubernetes.io/revision",
    REPLICA_SET_PREFERENCES_ANNOTATION,
];

/// The labels on every object Meridian pushes, for the federated object with `uid`.
pub fn managed_labels(uid: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    m.insert(OWNER_UID_LABEL.into(), uid.into());
    m
}

/// The metadata a member copy carries: name, namespace, the federated labels plus ours,
/// and the federated annotations except the local ones.
pub fn member_metadata(fed: &Value, uid: &str) -> Value {
    let meta = &fed["metadata"];
    let mut labels = meta["labels"].as_object().cloned().unwrap_or_default();
    labels.extend(managed_labels(uid));
    let mut out = Map::new();
    out.insert("name".into(), meta["name"].clone());
    out.insert("namespace".into(), meta["namespace"].clone());
    out.insert("labels".into(), Value::Object(labels));
    let mut out = Value::Object(out);
    let annotations: Map<String, Value> = meta["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !LOCAL_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !annotations.is_empty() {
        out["annotations"] = Value::Object(annotations);
    }
    out
}

/// The uid of a federated object, if it has one.
pub fn uid_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid").and_then(Value::as_str)
}

/// The sub-object a member holds: the federated spec (template, selector, strategy, …)
/// with `spec.replicas` set to the member's share.
pub fn sub_object(fed: &Value, kind: Kind, replicas: i32, uid: &str) -> Value {
    let mut spec = fed["spec"].as_object().cloned().unwrap_or_default();
    spec.insert("replicas".into(), replicas.into());
    // Built field by field: `json!` would copy `spec` once more through a serializer.
    let mut o = Map::new();
    o.insert("apiVersion".into(), "apps/v1".into());
    o.insert("kind".into(), kind.as_str().into());
    o.insert("metadata".into(), member_metadata(fed, uid));
    o.insert("spec".into(), Value::Object(spec));
    Value::Object(o)
}

/// The member copy of a federated ConfigMap or Secret; it belongs to the federated
/// dependency (its uid), so workloads sharing it share one copy.
pub fn dependency(fed: &Value, kind: DepKind, uid: &str) -> Value {
    let mut out = json!({
        "apiVersion": "v1",
        "kind": kind.as_str(),
        "metadata": member_metadata(fed, uid),
    });
    for field in ["data", "binaryData", "type", "immutable"] {
        if let Some(v) = fed.get(field).filter(|v| !v.is_null()) {
            out[field] = v.clone();
        }
    }
    out
}

/// The namespace a workload lands in. Namespaces are shared with whatever else runs in the
/// member, so they carry only the managed-by label and are never removed by Meridian.
pub fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "shop", "uid": "u-1", "generation": 4,
                "resourceVersion": "77", "finalizers": ["federation.meridian.dev/member-cleanup"],
                "labels": {"app": "web"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "team": "blue"
                }
            },
            "spec": {
                "replicas": 10,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate"},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
            },
            "status": {"replicas": 10}
        })
    }

    #[test]
    fn sub_object_carries_the_share_and_our_labels_only() {
        let s = sub_object(&fed(), Kind::Deployment, 3, "u-1");
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(s["spec"]["template"], fed()["spec"]["template"]);
        assert_eq!(s["spec"]["strategy"], fed()["spec"]["strategy"]);
        assert_eq!(s["spec"]["selector"], fed()["spec"]["selector"]);
        assert_eq!(
            s["metadata"],
            json!({
                "name": "web", "namespace": "shop",
                "labels": {"app": "web", MANAGED_BY_LABEL: "meridian", OWNER_UID_LABEL: "u-1"},
                "annotations": {"team": "blue"}
            })
        );
        assert!(s.get("status").is_none());
        assert_eq!(uid_of(&fed()), Some("u-1"));
    }

    #[test]
    fn dependency_copies_data_not_server_fields() {
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "shop", "uid": "c-1", "resourceVersion": "5"},
            "data": {"a": "1"}
        });
        assert_eq!(
            dependency(&cm, DepKind::ConfigMap, "c-1"),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg", "namespace": "shop",
                             "labels": {MANAGED_BY_LABEL: "meridian", OWNER_UID_LABEL: "c-1"}},
                "data": {"a": "1"}
            })
        );
        let sec = json!({"metadata": {"name": "s", "namespace": "shop"}, "type": "Opaque", "data": {"k": "dg=="}});
        let d = dependency(&sec, DepKind::Secret, "s-1");
        assert_eq!(
            (d["type"].as_str(), d["data"]["k"].as_str()),
            (Some("Opaque"), Some("dg=="))
        );
    }
}

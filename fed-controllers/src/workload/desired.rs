//! What a member should hold for one federated workload: the sub-object with that member's
//! replica share, and copies of the dependencies its pod template references — all
//! labelled as Meridian's. Pure functions over JSON objects, so both kinds share one path.

use serde_json::{Map, Value};

use fed_api::names::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL, REPLICA_SET_PREFERENCES_ANNOTATION,
};

use super::job;
use super::kinds::{DepKind, Kind};
use crate::copies::member_copy::without_member_fields;

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

/// One member's part of a divided workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Share {
    /// Its replicas: the scheduler's share (a Job's parallelism).
    pub replicas: i32,
    /// A Job's completions there: `None` for other kinds and for a Job without any.
    pub completions: Option<i32>,
}

impl Share {
    /// A share of `replicas` alone.
    pub fn replicas(replicas: i32) -> Self {
        Share {
            replicas,
            completions: None,
        }
    }
}

/// Each destination's share of `fed`, in `dest` order: the scheduler's replicas, and for a
/// Job that states completions, those divided in the same proportion
/// ([`job::split_completions`]). A Job every destination runs whole (a `Duplicated`
/// policy: each share is the whole parallelism) keeps its completions whole everywhere.
pub fn shares(kind: Kind, fed: &Value, dest: &[(String, i32)]) -> Vec<Share> {
    let completions = (kind == Kind::Job)
        .then(|| fed.pointer("/spec/completions").and_then(Value::as_i64))
        .flatten()
        .map(|c| i32::try_from(c).unwrap_or(i32::MAX));
    let replicas: Vec<i32> = dest.iter().map(|(_, r)| *r).collect();
    let whole = fed
        .pointer("/spec/parallelism")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let duplicated = replicas.iter().all(|r| i64::from(*r) == whole);
    match completions {
        Some(c) if duplicated => replicas
            .iter()
            .map(|r| Share {
                replicas: *r,
                completions: Some(c),
            })
            .collect(),
        Some(c) => replicas
            .iter()
            .zip(job::split_completions(c, &replicas))
            .map(|(r, c)| Share {
                replicas: *r,
                completions: Some(c),
            })
            .collect(),
        None => replicas.into_iter().map(Share::replicas).collect(),
    }
}

/// Sets a member's share in a copy's `spec`: the count field of its kind and, for a Job,
/// its completions, without the fields the member's API server generates.
pub fn set_share(spec: &mut Map<String, Value>, kind: Kind, share: Share) {
    spec.insert(kind.count_field().into(), share.replicas.into());
    if kind == Kind::Job {
        job::member_spec(spec, share.completions);
    }
}

/// The sub-object a member holds: the federated spec (template, selector, strategy, …)
/// with the member's share ([`set_share`]). StatefulSets go as they are apart from their
/// replicas: each member's ordinals start where the federated spec says (0 unless
/// `spec.ordinals.start`), and its `volumeClaimTemplates` make claims in that member.
pub fn sub_object(fed: &Value, kind: Kind, share: Share, uid: &str) -> Value {
    let mut spec = fed["spec"].as_object().cloned().unwrap_or_default();
    set_share(&mut spec, kind, share);
    let mut metadata = member_metadata(fed, uid);
    if kind == Kind::Job
        && let Some(labels) = metadata["labels"].as_object_mut()
    {
        // Kubernetes copies a Job's template labels to a Job stated without labels.
        job::strip_generated_labels(labels);
    }
    // Built field by field: `json!` would copy `spec` once more through a serializer.
    let mut o = Map::new();
    o.insert("apiVersion".into(), kind.api_version().into());
    o.insert("kind".into(), kind.as_str().into());
    o.insert("metadata".into(), metadata);
    o.insert("spec".into(), Value::Object(spec));
    Value::Object(o)
}

/// The member copy of a federated dependency ([`DepKind`]); it belongs to the federated
/// dependency (its uid), so workloads sharing it share one copy. What the member's own
/// controllers write (a bound PVC's `volumeName`, its binding annotations) is left out,
/// as the copy path leaves it out ([`without_member_fields`]).
pub fn dependency(fed: &Value, kind: DepKind, uid: &str) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), "v1".into());
    out.insert("kind".into(), kind.as_str().into());
    out.insert("metadata".into(), member_metadata(fed, uid));
    for field in kind.copied_fields() {
        if let Some(v) = fed.get(*field).filter(|v| !v.is_null()) {
            out.insert((*field).into(), v.clone());
        }
    }
    without_member_fields(&mut out, "", kind.as_str());
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let s = sub_object(&fed(), Kind::Deployment, Share::replicas(3), "u-1");
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

    fn job() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "crunch", "namespace": "b", "uid": "fed-uid", "generation": 1,
                         "labels": {"team": "x", "controller-uid": "fed-uid"}},
            "spec": {
                "parallelism": 3, "completions": 6, "backoffLimit": 6, "suspend": false,
                "completionMode": "NonIndexed",
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "fed-uid"}},
                "template": {"metadata": {"labels": {"app": "crunch", "controller-uid": "fed-uid",
                    "batch.kubernetes.io/controller-uid": "fed-uid", "job-name": "crunch",
                    "batch.kubernetes.io/job-name": "crunch"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
            },
            "status": {"active": 3}
        })
    }

    #[test]
    fn a_member_job_gets_its_part_without_the_federations_selector() {
        let dest = [
            ("a".to_string(), 1),
            ("b".to_string(), 1),
            ("c".to_string(), 1),
        ];
        let parts = shares(Kind::Job, &job(), &dest);
        assert_eq!(
            parts,
            vec![
                Share {
                    replicas: 1,
                    completions: Some(2)
                };
                3
            ]
        );
        let s = sub_object(&job(), Kind::Job, parts[0], "fed-uid");
        assert_eq!(
            (s["apiVersion"].as_str(), s["kind"].as_str()),
            (Some("batch/v1"), Some("Job"))
        );
        assert_eq!(
            (
                s["spec"]["parallelism"].as_i64(),
                s["spec"]["completions"].as_i64()
            ),
            (Some(1), Some(2))
        );
        assert!(s["spec"].get("selector").is_none());
        assert!(s["spec"].get("replicas").is_none());
        let labels = &s["spec"]["template"]["metadata"]["labels"];
        assert!(labels.get("controller-uid").is_none());
        assert!(labels.get("batch.kubernetes.io/controller-uid").is_none());
        assert_eq!(labels["app"], "crunch");
        assert!(s["metadata"]["labels"].get("controller-uid").is_none());
        assert_eq!(s["metadata"]["labels"][OWNER_UID_LABEL], "fed-uid");
        assert_eq!(s["spec"]["backoffLimit"], 6);
        assert!(s.get("status").is_none());
        // A Job without completions keeps none; other kinds have none.
        let mut open_ended = job();
        if let Some(spec) = open_ended["spec"].as_object_mut() {
            spec.remove("completions");
        }
        assert_eq!(shares(Kind::Job, &open_ended, &dest)[1], Share::replicas(1));
        assert_eq!(
            shares(Kind::Deployment, &job(), &dest)[2],
            Share::replicas(1)
        );
        // Every cluster running the whole Job (a Duplicated policy) runs all of it.
        let whole = [("a".to_string(), 3), ("b".to_string(), 3)];
        assert_eq!(
            shares(Kind::Job, &job(), &whole),
            vec![
                Share {
                    replicas: 3,
                    completions: Some(6)
                };
                2
            ]
        );
        let uneven = [("a".to_string(), 2), ("b".to_string(), 1)];
        assert_eq!(
            shares(Kind::Job, &job(), &uneven)
                .iter()
                .map(|s| s.completions)
                .collect::<Vec<_>>(),
            vec![Some(4), Some(2)]
        );
        let s = sub_object(&open_ended, Kind::Job, Share::replicas(1), "fed-uid");
        assert!(s["spec"].get("completions").is_none());
    }

    #[test]
    fn a_member_stateful_set_keeps_its_claim_templates() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "shop", "uid": "s-1"},
            "spec": {"replicas": 3, "serviceName": "db",
                     "selector": {"matchLabels": {"app": "db"}},
                     "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "db", "image": "pg"}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"},
                         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
        });
        let s = sub_object(&sts, Kind::StatefulSet, Share::replicas(1), "s-1");
        assert_eq!(s["apiVersion"], "apps/v1");
        assert_eq!(s["spec"]["replicas"], 1);
        assert_eq!(
            s["spec"]["volumeClaimTemplates"],
            sts["spec"]["volumeClaimTemplates"]
        );
        assert_eq!(s["spec"]["selector"], sts["spec"]["selector"]);
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
        // (what, federated object, its member copy's fields besides apiVersion, kind, metadata)
        let cases = [
            (
                "service account: the token secrets are the member's",
                DepKind::ServiceAccount,
                json!({"metadata": {"name": "sa", "namespace": "shop"},
                       "secrets": [{"name": "sa-token-x1y2z"}],
                       "imagePullSecrets": [{"name": "registry"}],
                       "automountServiceAccountToken": false}),
                json!({"imagePullSecrets": [{"name": "registry"}],
                       "automountServiceAccountToken": false}),
            ),
            (
                "bound claim: the volume and the binding are the member's",
                DepKind::PersistentVolumeClaim,
                json!({"metadata": {"name": "data", "namespace": "shop",
                                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                       "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-7",
                                "resources": {"requests": {"storage": "1Gi"}}},
                       "status": {"phase": "Bound"}}),
                json!({"spec": {"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}}}}),
            ),
        ];
        for (what, kind, fed, want) in cases {
            let mut got = dependency(&fed, kind, "d-1");
            assert_eq!(got["kind"], kind.as_str(), "{what}");
            let meta = got
                .as_object_mut()
                .and_then(|o| o.remove("metadata"))
                .unwrap_or_default();
            assert!(meta.get("annotations").is_none(), "{what}: {meta}");
            assert_eq!(meta["labels"][OWNER_UID_LABEL], "d-1", "{what}");
            let o = got.as_object_mut().unwrap();
            o.remove("apiVersion");
            o.remove("kind");
            assert_eq!(got, want, "{what}");
        }
        let sec = json!({"metadata": {"name": "s", "namespace": "shop"}, "type": "Opaque", "data": {"k": "dg=="}});
        let d = dependency(&sec, DepKind::Secret, "s-1");
        assert_eq!(
            (d["type"].as_str(), d["data"]["k"].as_str()),
            (Some("Opaque"), Some("dg=="))
        );
    }
}

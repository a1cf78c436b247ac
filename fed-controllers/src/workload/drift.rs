//! Drift between what a member holds and what Meridian wants, over the fields Meridian owns
//! (our labels and annotations, `spec` of workloads, `data`/`binaryData`/`type` of
//! dependencies, a ServiceAccount's `imagePullSecrets`). Fields a member's API server
//! defaults, or fields nobody set, are not drift. Of a Job's spec only `parallelism` counts
//! ([`job`]), of a PersistentVolumeClaim's only its storage requests ([`dep_drift`]): the
//! rest is fixed at creation or the member's own.

use serde_json::{Map, Value};

use super::{dep_drift, job};
use crate::copies::record;

/// The top-level fields Meridian owns (metadata is handled separately: labels and annotations).
const OWNED: [&str; 7] = [
    "spec",
    "data",
    "binaryData",
    "type",
    "immutable",
    "imagePullSecrets",
    "automountServiceAccountToken",
];

/// Whether `actual` holds everything `want` says: objects key by key (extra keys in
/// `actual` are defaults, not drift), arrays element by element with equal lengths.
/// A `null` in `want` asks for nothing.
pub fn contains(actual: &Value, want: &Value) -> bool {
    match (actual, want) {
        (_, Value::Null) => true,
        (Value::Object(a), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| wv.is_null() || a.get(k).is_some_and(|av| contains(av, wv))),
        (Value::Array(a), Value::Array(w)) => {
            a.len() == w.len() && a.iter().zip(w).all(|(av, wv)| contains(av, wv))
        }
        (a, w) => a == w,
    }
}

/// `v.metadata.<k>`, or null.
fn meta<'a>(v: &'a Value, k: &str) -> &'a Value {
    v.get("metadata")
        .and_then(|m| m.get(k))
        .unwrap_or(&Value::Null)
}

/// Field `f` of `v` when it says something (present, not null, not an empty object).
fn set_field<'a>(v: &'a Value, f: &str) -> Option<&'a Value> {
    v.get(f)
        .filter(|x| !x.is_null() && x.as_object().is_none_or(|o| !o.is_empty()))
}

/// Whether a member object matches the desired one in every field Meridian owns, and was
/// made under the same override rules ([`record`]). Reads both in place: it runs on every
/// sync of every member copy.
pub fn in_sync(actual: &Value, desired: &Value) -> bool {
    record::same(actual, desired)
        && contains(meta(actual, "labels"), meta(desired, "labels"))
        && contains(meta(actual, "annotations"), meta(desired, "annotations"))
        && if job::is_job(desired) {
            job::spec_in_sync(actual, desired)
        } else if dep_drift::is_claim(desired) {
            dep_drift::claim_in_sync(actual, desired)
        } else {
            owned_in_sync(actual, desired)
        }
}

/// Whether `actual` holds every field of [`OWNED`] that `desired` sets.
fn owned_in_sync(actual: &Value, desired: &Value) -> bool {
    OWNED.iter().all(|f| {
        match (*f, set_field(desired, f), set_field(actual, f)) {
            // Values, not defaults: a key added in the member is drift too.
            ("data" | "binaryData", want, have) => want == have,
            // The member may add its own.
            ("imagePullSecrets", want, have) => dep_drift::pull_secrets_in_sync(have, want),
            // Not ours to set; the member's server may default it.
            (_, None, _) => true,
            (_, Some(want), Some(have)) => contains(have, want),
            (_, Some(_), None) => false,
        }
    })
}

/// The object to write over `actual`: its metadata (resourceVersion, others' labels and
/// annotations) kept, ours laid over it, the owned fields replaced wholesale, and what an
/// override rule set there before and no longer sets removed ([`record::drop_unwanted`]).
pub fn merged(actual: &Value, desired: &Value) -> Value {
    let mut out = actual.clone();
    for k in ["labels", "annotations"] {
        let mut m: Map<String, Value> = actual["metadata"][k]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if let Some(want) = desired["metadata"][k].as_object() {
            m.extend(want.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if !m.is_empty() {
            out["metadata"][k] = Value::Object(m);
        }
    }
    if job::is_job(desired) || dep_drift::is_claim(desired) {
        if job::is_job(desired) {
            job::merge_spec(&mut out, desired);
        } else {
            dep_drift::merge_claim(&mut out, desired);
        }
        if let Some(o) = out.as_object_mut() {
            o.remove("status");
        }
        return out;
    }
    if let Some(o) = out.as_object_mut() {
        for f in OWNED {
            match desired.get(f) {
                Some(v) if f == "imagePullSecrets" && !v.is_null() => {
                    let m = dep_drift::merged_pull_secrets(o.get(f), v);
                    o.insert(f.to_string(), m);
                }
                Some(v) if !v.is_null() => {
                    o.insert(f.to_string(), v.clone());
                }
                _ if f == "data" || f == "binaryData" => {
                    o.remove(f);
                }
                _ => {}
            }
        }
        // Status is the member's to write; sending it back would only be ignored.
        o.remove("status");
    }
    record::drop_unwanted(&mut out, actual, desired);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn desired() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web", "app.kubernetes.io/managed-by": "meridian"}},
            "spec": {"replicas": 3, "template": {"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                     "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}
        })
    }

    fn member() -> Value {
        // As a member's server returns it: defaults filled in, its own labels added.
        json!({
            "metadata": {"name": "web", "resourceVersion": "9",
                         "labels": {"app": "web", "app.kubernetes.io/managed-by": "meridian", "extra": "x"}},
            "spec": {"replicas": 3, "revisionHistoryLimit": 10,
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"restartPolicy": "Always",
                                           "containers": [{"name": "web", "image": "nginx:1", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"replicas": 3}
        })
    }

    #[test]
    fn defaults_are_not_drift() {
        assert!(in_sync(&member(), &desired()));
    }

    #[test]
    fn edits_to_owned_fields_are_drift() {
        type Edit = fn(&mut Value);
        let cases: [(&str, Edit); 5] = [
            ("replicas", |m| m["spec"]["replicas"] = json!(5)),
            ("image", |m| {
                m["spec"]["template"]["spec"]["containers"][0]["image"] = json!("evil")
            }),
            ("extra container", |m| {
                let c = m["spec"]["template"]["spec"]["containers"][0].clone();
                if let Some(a) = m["spec"]["template"]["spec"]["containers"].as_array_mut() {
                    a.push(c);
                }
            }),
            ("our label removed", |m| {
                m["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("x")
            }),
            ("template label", |m| {
                m["spec"]["template"]["metadata"]["labels"]["app"] = json!("other")
            }),
        ];
        for (name, edit) in cases {
            let mut m = member();
            edit(&mut m);
            assert!(!in_sync(&m, &desired()), "{name}");
            let fixed = merged(&m, &desired());
            assert!(
                in_sync(&fixed, &desired()),
                "{name}: merged must be in sync"
            );
            assert_eq!(fixed["metadata"]["resourceVersion"], "9", "{name}");
            assert!(fixed.get("status").is_none(), "{name}");
        }
    }

    #[test]
    fn dependency_data_is_exact() {
        let want = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        assert!(in_sync(
            &json!({"metadata": {"name": "c"}, "data": {"a": "1"}}),
            &want
        ));
        // A key added in the member is drift for data (it is a value, not a default).
        let extra = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        assert!(contains(&extra["data"], &want["data"]));
        assert!(!in_sync(&extra, &want));
        let m = merged(&extra, &want);
        assert_eq!(m["data"], json!({"a": "1"}));
        let unwanted = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        assert!(!in_sync(&unwanted, &json!({"metadata": {"name": "c"}})));
    }

    #[test]
    fn what_members_write_on_service_accounts_and_claims_is_not_drift() {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": "web", "labels": {"app.kubernetes.io/managed-by": "meridian"}},
                        "imagePullSecrets": [{"name": "registry"}],
                        "automountServiceAccountToken": false});
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": "data", "labels": {"app.kubernetes.io/managed-by": "meridian"}},
                         "spec": {"accessModes": ["ReadWriteOnce"],
                                  "resources": {"requests": {"storage": "1Gi"}}}});
        // (what, desired, the member's copy, in sync)
        let cases = [
            (
                "token secrets and a pull secret of the member's",
                &sa,
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "web", "resourceVersion": "3",
                                    "labels": {"app.kubernetes.io/managed-by": "meridian"}},
                       "secrets": [{"name": "web-token-abcde"}],
                       "imagePullSecrets": [{"name": "registry"}, {"name": "web-dockercfg"}],
                       "automountServiceAccountToken": false}),
                true,
            ),
            (
                "token mounting turned on in the member",
                &sa,
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "web", "resourceVersion": "3",
                                    "labels": {"app.kubernetes.io/managed-by": "meridian"}},
                       "secrets": [{"name": "web-token-abcde"}],
                       "imagePullSecrets": [{"name": "registry"}],
                       "automountServiceAccountToken": true}),
                false,
            ),
            (
                "our pull secret removed in the member",
                &sa,
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "web", "resourceVersion": "3",
                                    "labels": {"app.kubernetes.io/managed-by": "meridian"}},
                       "secrets": [{"name": "web-token-abcde"}],
                       "automountServiceAccountToken": false}),
                false,
            ),
            (
                "a bound claim",
                &pvc,
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "data", "resourceVersion": "8",
                                    "labels": {"app.kubernetes.io/managed-by": "meridian"},
                                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                       "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                                "storageClassName": "standard", "volumeMode": "Filesystem",
                                "resources": {"requests": {"storage": "1Gi"}}},
                       "status": {"phase": "Bound"}}),
                true,
            ),
            (
                "a claim resized in the member",
                &pvc,
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": "data", "resourceVersion": "8",
                                    "labels": {"app.kubernetes.io/managed-by": "meridian"}},
                       "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                                "resources": {"requests": {"storage": "5Gi"}}},
                       "status": {"phase": "Bound"}}),
                false,
            ),
        ];
        for (what, desired, actual, want) in cases {
            assert_eq!(in_sync(&actual, desired), want, "{what}");
            let fixed = merged(&actual, desired);
            assert!(in_sync(&fixed, desired), "{what}: {fixed}");
            assert!(fixed.get("status").is_none(), "{what}");
            // The member's own parts are written back as they are.
            for p in [
                "/secrets",
                "/spec/volumeName",
                "/spec/storageClassName",
                "/metadata/annotations",
                "/metadata/resourceVersion",
            ] {
                assert_eq!(fixed.pointer(p), actual.pointer(p), "{what}: {p}");
            }
            if let Some(mine) = actual.pointer("/imagePullSecrets/1") {
                assert_eq!(fixed.pointer("/imagePullSecrets/1"), Some(mine), "{what}");
            }
        }
    }

    #[test]
    fn a_field_an_override_stops_setting_goes() {
        // Pushed under a rule that added a nodeSelector and a label.
        let mut was = desired();
        was["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        was["metadata"]["labels"]["tier"] = json!("edge");
        record::stamp(&mut was);
        let mut actual = was.clone();
        actual["metadata"]["resourceVersion"] = json!("7");
        actual["metadata"]["labels"]["member-own"] = json!("x");
        assert!(in_sync(&actual, &was));
        // The rule is gone: what it set is drift now, though the plain copy is a subset.
        assert!(!in_sync(&actual, &desired()));
        let fixed = merged(&actual, &desired());
        assert!(in_sync(&fixed, &desired()), "{fixed}");
        assert!(
            fixed["spec"]["template"]["spec"]
                .get("nodeSelector")
                .is_none()
        );
        assert!(fixed["metadata"]["labels"].get("tier").is_none());
        assert_eq!(fixed["metadata"]["labels"]["member-own"], "x");
        assert_eq!(fixed["metadata"]["resourceVersion"], "7");
        // A rule that changes only a nested field still gives another record.
        let mut other = desired();
        other["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "hdd"});
        other["metadata"]["labels"]["tier"] = json!("edge");
        record::stamp(&mut other);
        assert!(!in_sync(&actual, &other));
        assert!(in_sync(&merged(&actual, &other), &other));
    }

    #[test]
    fn a_member_jobs_own_fields_are_not_drift() {
        let desired = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "crunch", "labels": {"app.kubernetes.io/managed-by": "meridian"}},
            "spec": {"parallelism": 1, "completions": 2,
                     "template": {"metadata": {"labels": {"app": "crunch"}},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
        });
        // As the member holds it: its selector and uid labels, its defaults, and the
        // completions of an earlier division (fixed at creation).
        let member = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "crunch", "resourceVersion": "4",
                         "labels": {"app.kubernetes.io/managed-by": "meridian"}},
            "spec": {"parallelism": 1, "completions": 3, "suspend": false, "backoffLimit": 6,
                     "completionMode": "NonIndexed", "podReplacementPolicy": "TerminatingOrFailed",
                     "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "m-1"}},
                     "template": {"metadata": {"labels": {"app": "crunch", "controller-uid": "m-1",
                                                          "batch.kubernetes.io/controller-uid": "m-1"}},
                                  "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}},
            "status": {"active": 1}
        });
        assert!(in_sync(&member, &desired));
        // A new division changes its parallelism, and only that.
        let mut wider = desired.clone();
        wider["spec"]["parallelism"] = json!(2);
        wider["spec"]["completions"] = json!(4);
        assert!(!in_sync(&member, &wider));
        let fixed = merged(&member, &wider);
        assert!(in_sync(&fixed, &wider));
        assert_eq!(fixed["spec"]["parallelism"], 2);
        assert_eq!(fixed["spec"]["completions"], 3);
        assert_eq!(fixed["spec"]["selector"], member["spec"]["selector"]);
        assert_eq!(
            fixed["spec"]["template"], member["spec"]["template"],
            "the template is immutable"
        );
        assert_eq!(fixed["metadata"]["resourceVersion"], "4");
        assert!(fixed.get("status").is_none());
        // Our labels are still ours to restore.
        let mut relabelled = member.clone();
        relabelled["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("x");
        assert!(!in_sync(&relabelled, &desired));
        assert!(in_sync(&merged(&relabelled, &desired), &desired));
    }
}

//! Whether a member's copy of an object of any kind still says what Meridian wants, and
//! what to write over it when it does not.
//!
//! Every top-level field but `apiVersion`, `kind`, `metadata` and `status` is Meridian's
//! (a Role's `rules`, a RoleBinding's `subjects`, a CRD's `spec`, ...), as are its labels
//! and annotations. A field the member's server defaulted, or one Meridian does not set, is
//! not drift; a ConfigMap's or Secret's `data` is a value, so a key added in the member is.

use serde_json::{Map, Value};

use super::record;
use crate::workload::drift::contains;

/// Top-level fields that are never Meridian's to write in a member.
const NOT_OWNED: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];
/// Top-level fields compared exactly: values, not specs a server defaults.
const EXACT: [&str; 2] = ["data", "binaryData"];

fn meta<'a>(v: &'a Value, k: &str) -> &'a Value {
    v.get("metadata")
        .and_then(|m| m.get(k))
        .unwrap_or(&Value::Null)
}

/// Whether `actual` (a member's copy) holds everything `desired` (from
/// [`super::member_copy::member_copy`]) says, made under the same override rules
/// ([`record`]).
pub fn in_sync(actual: &Value, desired: &Value) -> bool {
    if !record::same(actual, desired)
        || !contains(meta(actual, "labels"), meta(desired, "labels"))
        || !contains(meta(actual, "annotations"), meta(desired, "annotations"))
    {
        return false;
    }
    let (Some(a), Some(d)) = (actual.as_object(), desired.as_object()) else {
        return actual == desired;
    };
    let exact_ok = EXACT.iter().all(|f| {
        let nonempty = |o: &Map<String, Value>| {
            o.get(*f)
                .filter(|v| v.as_object().is_none_or(|m| !m.is_empty()) && !v.is_null())
                .cloned()
        };
        nonempty(a) == nonempty(d)
    });
    exact_ok
        && d.iter()
            .filter(|(k, _)| !NOT_OWNED.contains(&k.as_str()) && !EXACT.contains(&k.as_str()))
            .all(|(k, want)| want.is_null() || a.get(k).is_some_and(|have| contains(have, want)))
}

/// The object to write over `actual`: its metadata kept (resourceVersion, the member's
/// own labels and annotations) with Meridian's laid over it, every field Meridian owns
/// replaced wholesale, exact fields Meridian does not set removed, what an override rule
/// set before and no longer sets removed ([`record::drop_unwanted`]), and no status.
pub fn merged(actual: &Value, desired: &Value) -> Value {
    let mut out = actual.clone();
    let Some(o) = out.as_object_mut() else {
        return desired.clone();
    };
    o.remove("status");
    for f in EXACT {
        o.remove(f);
    }
    if let Some(d) = desired.as_object() {
        for (k, v) in d {
            if !NOT_OWNED.contains(&k.as_str()) {
                o.insert(k.clone(), v.clone());
            }
        }
    }
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    for k in ["labels", "annotations"] {
        let mut merged: Map<String, Value> = m[k].as_object().cloned().unwrap_or_default();
        if let Some(want) = desired["metadata"][k].as_object() {
            merged.extend(want.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if !merged.is_empty() {
            m[k] = Value::Object(merged);
        }
    }
    record::drop_unwanted(&mut out, actual, desired);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn desired() -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "rb", "namespace": "shop",
                            "labels": {"app.kubernetes.io/managed-by": "meridian", "federation.meridian.dev/owner-uid": "u"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "web", "namespace": "shop"}]})
    }

    fn member() -> Value {
        let mut m = desired();
        m["metadata"]["resourceVersion"] = json!("7");
        m["metadata"]["uid"] = json!("member-uid");
        m["metadata"]["labels"]["added-by-member"] = json!("x");
        m
    }

    #[test]
    fn drift_table() {
        type Edit = fn(&mut Value);
        // (what, edit of the member's copy, drift?)
        let cases: [(&str, Edit, bool); 7] = [
            ("untouched", |_| {}, false),
            (
                "a member label added",
                |m| m["metadata"]["labels"]["x"] = json!("y"),
                false,
            ),
            (
                "a field we do not set",
                |m| m["extra"] = json!({"a": 1}),
                false,
            ),
            (
                "subject changed",
                |m| m["subjects"][0]["name"] = json!("evil"),
                true,
            ),
            (
                "subject added",
                |m| {
                    let s = m["subjects"][0].clone();
                    m["subjects"].as_array_mut().expect("subjects").push(s);
                },
                true,
            ),
            (
                "roleRef removed",
                |m| {
                    m.as_object_mut().expect("object").remove("roleRef");
                },
                true,
            ),
            (
                "our label removed",
                |m| {
                    m["metadata"]["labels"]
                        .as_object_mut()
                        .expect("labels")
                        .remove("federation.meridian.dev/owner-uid");
                },
                true,
            ),
        ];
        for (what, edit, drift) in cases {
            let mut m = member();
            edit(&mut m);
            assert_eq!(!in_sync(&m, &desired()), drift, "{what}");
            let fixed = merged(&m, &desired());
            assert!(in_sync(&fixed, &desired()), "{what}: merged is in sync");
            assert_eq!(fixed["metadata"]["resourceVersion"], "7", "{what}");
            assert_eq!(
                fixed["metadata"]["labels"]["added-by-member"], "x",
                "{what}"
            );
        }
    }

    #[test]
    fn config_data_is_exact() {
        let want = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let mut extra = want.clone();
        extra["data"]["b"] = json!("2");
        assert!(in_sync(&want, &want));
        assert!(!in_sync(&extra, &want));
        assert_eq!(merged(&extra, &want)["data"], json!({"a": "1"}));
        // Data the federation dropped goes from the member too.
        let none = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert!(!in_sync(&want, &none));
        assert!(merged(&want, &none).get("data").is_none());
        assert!(in_sync(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}),
            &none
        ));
    }

    #[test]
    fn status_is_never_written() {
        let mut m = member();
        m["status"] = json!({"x": 1});
        assert!(in_sync(&m, &desired()));
        assert!(merged(&m, &desired()).get("status").is_none());
    }

    #[test]
    fn what_an_override_stops_setting_goes() {
        let mut was = desired();
        was["metadata"]["labels"]["tier"] = json!("edge");
        was["metadata"]["annotations"] = json!({"note": "x"});
        record::stamp(&mut was);
        let mut actual = was.clone();
        actual["metadata"]["resourceVersion"] = json!("7");
        actual["metadata"]["labels"]["added-by-member"] = json!("x");
        assert!(in_sync(&actual, &was));
        // The policy is deleted: the plain copy is wanted, without what the rule set.
        assert!(!in_sync(&actual, &desired()));
        let fixed = merged(&actual, &desired());
        assert!(in_sync(&fixed, &desired()), "{fixed}");
        assert!(fixed["metadata"]["labels"].get("tier").is_none());
        assert!(fixed["metadata"].get("annotations").is_none(), "{fixed}");
        assert_eq!(fixed["metadata"]["labels"]["added-by-member"], "x");
        assert_eq!(fixed["metadata"]["resourceVersion"], "7");
    }
}

//! Drift of the ServiceAccount and PersistentVolumeClaim dependency copies, parts of which
//! are their member's: a ServiceAccount's `imagePullSecrets` may gain entries the member
//! adds (its own registry credentials), and a claim's spec is fixed at creation except its
//! storage requests (expansion), while its `volumeName` and status are the member's binding.

use serde_json::{Map, Value};

use super::drift::contains;

/// Whether `o` is a `v1` PersistentVolumeClaim.
pub fn is_claim(o: &Value) -> bool {
    o.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim")
        && o.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

fn requests(o: &Value) -> &Value {
    o.pointer("/spec/resources/requests")
        .unwrap_or(&Value::Null)
}

/// Whether a member's claim asks for the storage the desired one does. The rest of a
/// claim's spec cannot change once created, so a difference there is not drift that a
/// write could repair.
pub fn claim_in_sync(actual: &Value, desired: &Value) -> bool {
    contains(requests(actual), requests(desired))
}

/// Lays the desired claim's storage requests over `out` (the member's claim), leaving the
/// rest of its spec as the member holds it.
pub fn merge_claim(out: &mut Value, desired: &Value) {
    let want = requests(desired);
    if want.is_null() {
        return;
    }
    let Some(o) = out.as_object_mut() else {
        return;
    };
    let mut at = o;
    for key in ["spec", "resources"] {
        let next = at.entry(key).or_insert_with(|| Value::Object(Map::new()));
        if !next.is_object() {
            *next = Value::Object(Map::new());
        }
        let Some(inner) = next.as_object_mut() else {
            return;
        };
        at = inner;
    }
    at.insert("requests".into(), want.clone());
}

/// Whether every pull secret `want` names is among `have`: entries the member added are
/// its own, not drift.
pub fn pull_secrets_in_sync(have: Option<&Value>, want: Option<&Value>) -> bool {
    let have = have
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    want.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|w| have.iter().any(|h| contains(h, w)))
}

/// The member's pull secrets followed by the wanted ones it lacks.
pub fn merged_pull_secrets(have: Option<&Value>, want: &Value) -> Value {
    let mut out: Vec<Value> = have.and_then(Value::as_array).cloned().unwrap_or_default();
    for w in want.as_array().into_iter().flatten() {
        if !out.iter().any(|h| contains(h, w)) {
            out.push(w.clone());
        }
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claim(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data"}, "spec": spec})
    }

    #[test]
    fn claims() {
        let want = claim(json!({"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "1Gi"}}}));
        assert!(is_claim(&want));
        assert!(!is_claim(
            &json!({"apiVersion": "v2", "kind": "PersistentVolumeClaim"})
        ));
        // (what, the member's claim spec, in sync)
        let cases = [
            (
                "bound: volume, class and mode are the member's",
                json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-3",
                       "storageClassName": "standard", "volumeMode": "Filesystem",
                       "resources": {"requests": {"storage": "1Gi"}}}),
                true,
            ),
            (
                "an immutable field differs: nothing a write could change",
                json!({"accessModes": ["ReadWriteMany"],
                       "resources": {"requests": {"storage": "1Gi"}}}),
                true,
            ),
            (
                "another size",
                json!({"accessModes": ["ReadWriteOnce"], "volumeName": "pv-3",
                       "resources": {"requests": {"storage": "2Gi"}}}),
                false,
            ),
            (
                "no requests",
                json!({"accessModes": ["ReadWriteOnce"]}),
                false,
            ),
        ];
        for (what, spec, in_sync) in cases {
            let mut actual = claim(spec);
            assert_eq!(claim_in_sync(&actual, &want), in_sync, "{what}");
            let before = actual["spec"].clone();
            merge_claim(&mut actual, &want);
            assert!(claim_in_sync(&actual, &want), "{what}");
            for keep in [
                "accessModes",
                "volumeName",
                "storageClassName",
                "volumeMode",
            ] {
                assert_eq!(actual["spec"].get(keep), before.get(keep), "{what}: {keep}");
            }
        }
        // A claim that asks for no size leaves the member's alone.
        let mut actual = claim(json!({"resources": {"requests": {"storage": "5Gi"}}}));
        let none = claim(json!({}));
        assert!(claim_in_sync(&actual, &none));
        merge_claim(&mut actual, &none);
        assert_eq!(actual["spec"]["resources"]["requests"]["storage"], "5Gi");
    }

    #[test]
    fn pull_secrets_the_member_adds_stay() {
        let want = json!([{"name": "registry"}]);
        // (what, the member's list, in sync)
        let cases = [
            ("same", json!([{"name": "registry"}]), true),
            (
                "the member added its own",
                json!([{"name": "registry"}, {"name": "member-dockercfg"}]),
                true,
            ),
            ("ours removed", json!([{"name": "member-dockercfg"}]), false),
            ("none", Value::Null, false),
        ];
        for (what, have, in_sync) in cases {
            let have = Some(&have).filter(|h| !h.is_null());
            assert_eq!(pull_secrets_in_sync(have, Some(&want)), in_sync, "{what}");
            let merged = merged_pull_secrets(have, &want);
            assert!(pull_secrets_in_sync(Some(&merged), Some(&want)), "{what}");
            for h in have.and_then(Value::as_array).into_iter().flatten() {
                assert!(merged.as_array().unwrap().contains(h), "{what}: {h} kept");
            }
        }
        assert!(pull_secrets_in_sync(None, None));
    }
}

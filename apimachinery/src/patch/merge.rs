//! RFC 7386 JSON merge patch.

use serde_json::{Map, Value};

/// Applies an RFC 7386 merge patch in place: objects merge recursively,
/// `null` deletes, anything else (including arrays) replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(obj) = target else {
        unreachable!("target was just made an object")
    };
    for (k, v) in patch {
        if v.is_null() {
            obj.remove(k);
        } else {
            merge_patch(obj.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The RFC 7386 merge patch that turns `old` into `new`: changed and added members as they
/// are in `new`, removed ones as `null`, nested objects diffed member by member (so a
/// writer that patches only what it computed leaves everything else of the target alone).
/// `None` when nothing differs. Members of `new` that are `null` cannot be expressed by a
/// merge patch (`null` means "remove") and are removed instead.
pub fn merge_patch_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(_) if nv.is_null() => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(ov) => {
                        if let Some(d) = merge_patch_diff(ov, nv) {
                            patch.insert(k.clone(), d);
                        }
                    }
                    None if nv.is_null() => {}
                    None => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::arbitrary_json;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn rfc7386_examples() {
        // The test table from RFC 7386 appendix A.
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (mut target, patch, want) in cases {
            merge_patch(&mut target, &patch);
            assert_eq!(target, want, "patch {patch}");
        }
    }

    #[test]
    fn diff_examples() {
        let old = json!({"a": 1, "b": {"c": [1], "d": "x"}, "e": "gone"});
        let new = json!({"a": 1, "b": {"c": [2], "d": "x"}, "f": {"g": 1}});
        assert_eq!(
            merge_patch_diff(&old, &new),
            Some(json!({"b": {"c": [2]}, "e": null, "f": {"g": 1}}))
        );
        assert_eq!(merge_patch_diff(&old, &old), None);
        assert_eq!(merge_patch_diff(&json!({}), &json!({"a": null})), None);
        assert_eq!(
            merge_patch_diff(&json!({"a": {"b": 1}}), &json!({"a": 2})),
            Some(json!({"a": 2}))
        );
    }

    /// `new` without `null` object members, which a merge patch cannot set.
    fn without_nulls(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), without_nulls(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn diff_applied_gives_new(old in arbitrary_json(), new in arbitrary_json()) {
            let mut target = old.clone();
            if let Some(patch) = merge_patch_diff(&old, &new) {
                merge_patch(&mut target, &patch);
            }
            prop_assert_eq!(target, without_nulls(&new));
        }

        #[test]
        fn idempotent(mut target in arbitrary_json(), patch in arbitrary_json()) {
            merge_patch(&mut target, &patch);
            let once = target.clone();
            merge_patch(&mut target, &patch);
            prop_assert_eq!(target, once);
        }
    }
}

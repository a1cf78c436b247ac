//! RFC 6902 JSON patch with RFC 6901 JSON pointers, applied atomically by the `json-patch`
//! crate; this module gives its errors the shape the API server reports: the index, name
//! and path of the operation that failed.

use json_patch::PatchOperation;
use serde::Deserialize;
use serde_json::Value;

use super::PatchError;

/// Applies RFC 6902 operations to a copy of `target`. On error the caller's document is
/// untouched and the error names the failing operation. Values compare as RFC 6902 and
/// kube-apiserver compare them in `test`: `1` and `1.0` differ.
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, PatchError> {
    let ops = ops.as_array().ok_or(PatchError::JsonPatchNotArray)?;
    // Each operation is decoded on its own so a malformed one is named by its index.
    let decoded = ops
        .iter()
        .enumerate()
        .map(|(index, op)| {
            PatchOperation::deserialize(op).map_err(|e| op_error(op, index, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut doc = target.clone();
    // A failure drops the copy, so the crate's undo log (`patch`) is not needed.
    json_patch::patch_unsafe(&mut doc, &decoded).map_err(|e| PatchError::JsonPatchOp {
        index: e.operation,
        op: op_name(&ops[e.operation]).to_string(),
        path: e.path.to_string(),
        reason: e.kind.to_string(),
    })?;
    Ok(doc)
}

/// The operation's name as written (`?` when it has none).
fn op_name(op: &Value) -> &str {
    op.get("op").and_then(Value::as_str).unwrap_or("?")
}

fn op_error(op: &Value, index: usize, reason: String) -> PatchError {
    PatchError::JsonPatchOp {
        index,
        op: op_name(op).to_string(),
        path: op
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{arbitrary_json, arbitrary_object};
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn operations_table() {
        let doc = json!({"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "obj": {"x": 1}});
        let cases = [
            (
                json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
                json!({"foo": ["bar", "qux", "baz"], "a/b": 1, "m~n": 2, "obj": {"x": 1}}),
            ),
            (
                json!([{"op": "add", "path": "/foo/-", "value": "end"}]),
                json!({"foo": ["bar", "baz", "end"], "a/b": 1, "m~n": 2, "obj": {"x": 1}}),
            ),
            (
                json!([{"op": "add", "path": "/obj/y", "value": null}]),
                json!({"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "obj": {"x": 1, "y": null}}),
            ),
            (
                json!([{"op": "remove", "path": "/a~1b"}, {"op": "remove", "path": "/m~0n"}]),
                json!({"foo": ["bar", "baz"], "obj": {"x": 1}}),
            ),
            (
                json!([{"op": "replace", "path": "/foo/0", "value": 7}]),
                json!({"foo": [7, "baz"], "a/b": 1, "m~n": 2, "obj": {"x": 1}}),
            ),
            (
                json!([{"op": "move", "from": "/obj/x", "path": "/x"}]),
                json!({"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "obj": {}, "x": 1}),
            ),
            (
                json!([{"op": "move", "from": "/foo/0", "path": "/foo/1"}]),
                json!({"foo": ["baz", "bar"], "a/b": 1, "m~n": 2, "obj": {"x": 1}}),
            ),
            (
                json!([{"op": "copy", "from": "/obj", "path": "/obj2"}]),
                json!({"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "obj": {"x": 1}, "obj2": {"x": 1}}),
            ),
            (
                json!([{"op": "test", "path": "/obj/x", "value": 1}, {"op": "test", "path": "/foo", "value": ["bar", "baz"]}]),
                doc.clone(),
            ),
            (
                json!([{"op": "replace", "path": "", "value": [1]}]),
                json!([1]),
            ),
            (json!([]), doc.clone()),
        ];
        for (ops, want) in cases {
            assert_eq!(json_patch(&doc, &ops).unwrap(), want, "{ops}");
        }
    }

    #[test]
    fn errors_table() {
        let doc = json!({"foo": ["bar"], "obj": {"x": 1}});
        assert_eq!(
            json_patch(&doc, &json!({"op": "add"})),
            Err(PatchError::JsonPatchNotArray)
        );
        // (operations, failing index, its path, words of the reason)
        let cases = [
            (
                json!([{"op": "add", "path": "/a/b", "value": 1}]),
                0,
                "/a/b",
                "path is invalid",
            ),
            (
                json!([{"op": "add", "path": "/foo/5", "value": 1}]),
                0,
                "/foo/5",
                "path is invalid",
            ),
            (
                json!([{"op": "add", "path": "/foo/01", "value": 1}]),
                0,
                "/foo/01",
                "path is invalid",
            ),
            (
                json!([{"op": "add", "path": "foo", "value": 1}]),
                0,
                "foo",
                "slash",
            ),
            (
                json!([{"op": "add", "path": "/foo~2", "value": 1}]),
                0,
                "/foo~2",
                "malformed",
            ),
            (
                json!([{"op": "add", "path": "/x"}]),
                0,
                "/x",
                "missing field `value`",
            ),
            (
                json!([{"op": "remove", "path": "/nope"}]),
                0,
                "/nope",
                "path is invalid",
            ),
            (
                json!([{"op": "remove", "path": "/foo/-"}]),
                0,
                "/foo/-",
                "path is invalid",
            ),
            (
                json!([{"op": "replace", "path": "/nope", "value": 1}]),
                0,
                "/nope",
                "path is invalid",
            ),
            (
                json!([{"op": "move", "from": "/obj", "path": "/obj/y"}]),
                0,
                "/obj/y",
                "inside itself",
            ),
            (
                json!([{"op": "add", "path": "/ok", "value": 1}, {"op": "test", "path": "/ok", "value": 2}]),
                1,
                "/ok",
                "did not match",
            ),
            // RFC 6902 compares numbers as JSON values, and so does kube-apiserver.
            (
                json!([{"op": "test", "path": "/obj/x", "value": 1.0}]),
                0,
                "/obj/x",
                "did not match",
            ),
            (
                json!([{"op": "frob", "path": "/x"}]),
                0,
                "/x",
                "unknown variant `frob`",
            ),
            (json!([{"path": "/x"}]), 0, "/x", "missing field `op`"),
            (
                json!([{"op": "add", "path": "/obj/x/y", "value": 1}]),
                0,
                "/obj/x/y",
                "path is invalid",
            ),
        ];
        for (ops, want_index, want_path, text) in cases {
            let err = json_patch(&doc, &ops).expect_err(&ops.to_string());
            let PatchError::JsonPatchOp {
                index,
                op,
                path,
                reason,
            } = err
            else {
                panic!("{ops}: unexpected {err}");
            };
            assert_eq!(index, want_index, "{ops}");
            assert_eq!(path, want_path, "{ops}");
            assert_eq!(op, ops[index]["op"].as_str().unwrap_or("?"), "{ops}");
            assert!(reason.contains(text), "{ops}: {reason}");
        }
    }

    proptest! {
        #[test]
        fn add_then_remove_restores(doc in arbitrary_object(), key in "[d-z~/]{1,4}", value in arbitrary_json()) {
            // Keys from d-z never collide with the generated a-c keys.
            let escaped = key.replace('~', "~0").replace('/', "~1");
            let ops = json!([
                {"op": "add", "path": format!("/{escaped}"), "value": value},
                {"op": "remove", "path": format!("/{escaped}")}
            ]);
            prop_assert_eq!(json_patch(&doc, &ops).unwrap(), doc);
        }

        #[test]
        fn failure_is_atomic(doc in arbitrary_json()) {
            // The first op succeeds, the second always fails: the input must be unchanged.
            let before = doc.clone();
            let ops = json!([
                {"op": "replace", "path": "", "value": {"a": 1}},
                {"op": "remove", "path": "/missing"}
            ]);
            prop_assert!(json_patch(&doc, &ops).is_err());
            prop_assert_eq!(doc, before);
        }
    }
}

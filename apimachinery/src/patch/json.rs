//! RFC 6902 JSON patch with RFC 6901 JSON pointers, applied atomically.

use serde_json::Value;

use super::PatchError;

/// Applies RFC 6902 operations to a copy of `target`. On error the caller's
/// document is untouched and the error names the failing operation index.
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, PatchError> {
    let ops = ops.as_array().ok_or(PatchError::JsonPatchNotArray)?;
    let mut doc = target.clone();
    for (index, op) in ops.iter().enumerate() {
        let name = op.get("op").and_then(Value::as_str).unwrap_or("?");
        apply(&mut doc, op, name).map_err(|reason| PatchError::JsonPatchOp {
            index,
            op: name.to_string(),
            reason,
        })?;
    }
    Ok(doc)
}

fn apply(doc: &mut Value, op: &Value, name: &str) -> Result<(), String> {
    if !op.is_object() {
        return Err("operation must be an object".into());
    }
    let pointer = |field: &str| -> Result<Vec<String>, String> {
        let p = op
            .get(field)
            .ok_or_else(|| format!("missing {field:?}"))?
            .as_str()
            .ok_or_else(|| format!("{field:?} must be a string"))?;
        parse_pointer(p)
    };
    // An explicit `"value": null` is a real value, so only absence is an error.
    let value = || {
        op.get("value")
            .cloned()
            .ok_or("missing \"value\"".to_string())
    };
    match name {
        "add" => add(doc, &pointer("path")?, value()?),
        "remove" => remove(doc, &pointer("path")?).map(drop),
        "replace" => {
            let path = pointer("path")?;
            let slot = get_mut(doc, &path).ok_or_else(|| missing(&path))?;
            *slot = value()?;
            Ok(())
        }
        "move" => {
            let (from, path) = (pointer("from")?, pointer("path")?);
            if from == path {
                return get_mut(doc, &from).map(drop).ok_or_else(|| missing(&from));
            }
            if path.len() > from.len() && path.starts_with(&from) {
                return Err("cannot move a value into one of its children".into());
            }
            let v = remove(doc, &from)?;
            add(doc, &path, v)
        }
        "copy" => {
            let (from, path) = (pointer("from")?, pointer("path")?);
            let v = get_mut(doc, &from).ok_or_else(|| missing(&from))?.clone();
            add(doc, &path, v)
        }
        "test" => {
            let path = pointer("path")?;
            let want = value()?;
            let have = get_mut(doc, &path).ok_or_else(|| missing(&path))?;
            if json_eq(have, &want) {
                Ok(())
            } else {
                Err(format!(
                    "test failed: value at {} is {have}, expected {want}",
                    render(&path)
                ))
            }
        }
        "?" => Err("missing \"op\"".into()),
        other => Err(format!("unsupported operation {other:?}")),
    }
}

/// Parses an RFC 6901 pointer into unescaped reference tokens.
fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!("path {p:?} must start with '/'"));
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err(format!("invalid escape in path {p:?}")),
                }
            }
            Ok(out)
        })
        .collect()
}

fn render(path: &[String]) -> String {
    if path.is_empty() {
        return "\"\"".into();
    }
    let mut out = String::new();
    for t in path {
        out.push('/');
        out.push_str(&t.replace('~', "~0").replace('/', "~1"));
    }
    format!("{out:?}")
}

fn missing(path: &[String]) -> String {
    format!("path {} does not exist", render(path))
}

/// Array index per RFC 6901: decimal digits without leading zeros.
fn parse_index(token: &str) -> Option<usize> {
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    if valid { token.parse().ok() } else { None }
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for t in path {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => a.get_mut(parse_index(t)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent_path)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    let parent = get_mut(doc, parent_path).ok_or_else(|| missing(parent_path))?;
    match parent {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if last == "-" {
                a.len()
            } else {
                parse_index(last).ok_or_else(|| format!("invalid array index {last:?}"))?
            };
            if idx > a.len() {
                return Err(format!(
                    "index {idx} out of bounds for array of length {}",
                    a.len()
                ));
            }
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(format!("parent {} is not a container", render(parent_path))),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, parent_path)) = path.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    let parent = get_mut(doc, parent_path).ok_or_else(|| missing(parent_path))?;
    let removed = match parent {
        Value::Object(m) => m.remove(last),
        Value::Array(a) => parse_index(last)
            .filter(|&i| i < a.len())
            .map(|i| a.remove(i)),
        _ => None,
    };
    removed.ok_or_else(|| missing(path))
}

/// RFC 6902 equality: numbers compare by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
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
                json!([{"op": "test", "path": "/obj/x", "value": 1.0}, {"op": "test", "path": "/foo", "value": ["bar", "baz"]}]),
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
        let cases = [
            (json!({"op": "add"}), None),
            (
                json!([{"op": "add", "path": "/a/b", "value": 1}]),
                Some((0, "does not exist")),
            ),
            (
                json!([{"op": "add", "path": "/foo/5", "value": 1}]),
                Some((0, "out of bounds")),
            ),
            (
                json!([{"op": "add", "path": "/foo/01", "value": 1}]),
                Some((0, "invalid array index")),
            ),
            (
                json!([{"op": "add", "path": "foo", "value": 1}]),
                Some((0, "must start with '/'")),
            ),
            (
                json!([{"op": "add", "path": "/foo~2", "value": 1}]),
                Some((0, "invalid escape")),
            ),
            (
                json!([{"op": "add", "path": "/x"}]),
                Some((0, "missing \"value\"")),
            ),
            (
                json!([{"op": "remove", "path": "/nope"}]),
                Some((0, "does not exist")),
            ),
            (
                json!([{"op": "remove", "path": "/foo/-"}]),
                Some((0, "does not exist")),
            ),
            (
                json!([{"op": "replace", "path": "/nope", "value": 1}]),
                Some((0, "does not exist")),
            ),
            (
                json!([{"op": "move", "from": "/obj", "path": "/obj/y"}]),
                Some((0, "children")),
            ),
            (
                json!([{"op": "add", "path": "/ok", "value": 1}, {"op": "test", "path": "/ok", "value": 2}]),
                Some((1, "test failed")),
            ),
            (
                json!([{"op": "frob", "path": "/x"}]),
                Some((0, "unsupported operation")),
            ),
            (json!([{"path": "/x"}]), Some((0, "missing \"op\""))),
            (
                json!([{"op": "add", "path": "/obj/x/y", "value": 1}]),
                Some((0, "not a container")),
            ),
        ];
        for (ops, want) in cases {
            let err = json_patch(&doc, &ops).expect_err(&ops.to_string());
            match (want, err) {
                (None, PatchError::JsonPatchNotArray) => {}
                (Some((idx, text)), PatchError::JsonPatchOp { index, reason, .. }) => {
                    assert_eq!(index, idx, "{ops}");
                    assert!(reason.contains(text), "{ops}: {reason}");
                }
                (_, other) => panic!("{ops}: unexpected {other}"),
            }
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

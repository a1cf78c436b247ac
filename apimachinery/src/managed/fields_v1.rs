//! The `FieldsV1` trie of `metadata.managedFields`: a JSON object whose keys are path
//! elements (`f:name`, `k:{"name":"x"}`, `v:"a"`, `i:0`) and `.` for "this node is a
//! member", each mapping to the subtree below.
//!
//! Decoding then encoding gives the canonical form: key fields sorted by name, values in
//! Go's JSON spelling (HTML-safe escapes, integral floats without a fraction), so two
//! API servers write byte-identical keys for the same set.

use serde_json::{Map, Value};

use super::path::PathElement;
use super::set::FieldSet;

/// Errors from decoding a `FieldsV1` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsV1Error {
    /// A node of the trie was not a JSON object.
    #[error("fieldsV1 node {key:?} must be an object")]
    NotAnObject {
        /// The key whose value was wrong (`""` for the root).
        key: String,
    },
    /// A key could not be read as a path element.
    #[error("invalid fieldsV1 key {key:?}: {reason}")]
    BadKey {
        /// The key as written.
        key: String,
        /// Why it was rejected.
        reason: &'static str,
    },
}

/// Reads a `FieldsV1` value. Keys of unknown element kinds are skipped, as upstream does,
/// so a set written by a newer server still decodes.
pub fn decode(value: &Value) -> Result<FieldSet, FieldsV1Error> {
    let Value::Object(m) = value else {
        return Err(FieldsV1Error::NotAnObject { key: String::new() });
    };
    decode_level(m)
}

fn decode_level(m: &Map<String, Value>) -> Result<FieldSet, FieldsV1Error> {
    let mut out = FieldSet::new();
    for (key, child) in m {
        if key == "." {
            continue;
        }
        let Some(pe) = parse_element(key)? else {
            continue;
        };
        let Value::Object(cm) = child else {
            return Err(FieldsV1Error::NotAnObject { key: key.clone() });
        };
        let children = decode_level(cm)?;
        // An empty node, or one marked `.`, is itself a member.
        let member = cm.contains_key(".") || cm.is_empty();
        out.push_node(pe, member, children);
    }
    Ok(out)
}

/// Reads a stored trie, leaving out keys that do not parse (and nodes that are not
/// objects): for tries an API server wrote, which have none.
pub(crate) fn decode_lenient(m: &Map<String, Value>) -> FieldSet {
    let mut out = FieldSet::new();
    for (key, child) in m {
        let (Ok(Some(pe)), Value::Object(cm)) = (parse_element(key), child) else {
            continue;
        };
        let member = cm.contains_key(".") || cm.is_empty();
        out.push_node(pe, member, decode_lenient(cm));
    }
    out
}

/// Parses one key; `Ok(None)` for an element kind this version does not know.
pub fn parse_element(key: &str) -> Result<Option<PathElement>, FieldsV1Error> {
    let bad = |reason| FieldsV1Error::BadKey {
        key: key.to_string(),
        reason,
    };
    let b = key.as_bytes();
    if b.len() < 2 {
        return Err(bad("too short"));
    }
    if b[1] != b':' {
        return Err(bad("missing colon"));
    }
    let body = &key[2..];
    Ok(Some(match b[0] {
        b'f' => PathElement::Field(body.into()),
        b'v' => {
            PathElement::Value(serde_json::from_str(body).map_err(|_| bad("invalid JSON value"))?)
        }
        b'k' => match serde_json::from_str::<Value>(body) {
            Ok(Value::Object(fields)) => PathElement::key(fields),
            _ => return Err(bad("key must be a JSON object")),
        },
        b'i' => PathElement::Index(body.parse().map_err(|_| bad("invalid index"))?),
        _ => return Ok(None),
    }))
}

/// Writes `set` as a `FieldsV1` value.
pub fn encode(set: &FieldSet) -> Value {
    Value::Object(encode_level(set, false))
}

fn encode_level(set: &FieldSet, member: bool) -> Map<String, Value> {
    let mut m = Map::new();
    if member && !set.is_empty() {
        m.insert(".".into(), Value::Object(Map::new()));
    }
    let mut key = String::new();
    for (pe, member, children) in set.entries() {
        key.clear();
        write_element(&mut key, pe);
        m.insert(key.clone(), Value::Object(encode_level(children, member)));
    }
    m
}

/// Appends the key spelling of `pe`.
pub fn write_element(out: &mut String, pe: &PathElement) {
    match pe {
        PathElement::Field(name) => {
            out.push_str("f:");
            out.push_str(name);
        }
        PathElement::Key(fields) => {
            out.push_str("k:{");
            for (i, (name, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, name);
                out.push(':');
                write_go_json(out, value);
            }
            out.push('}');
        }
        PathElement::Value(value) => {
            out.push_str("v:");
            write_go_json(out, value);
        }
        PathElement::Index(i) => {
            out.push_str("i:");
            out.push_str(&i.to_string());
        }
    }
}

/// Compact JSON as Go's `encoding/json` writes it: object keys sorted, `<`, `>`, `&`,
/// U+2028 and U+2029 escaped, integral floats without a fraction.
pub(crate) fn write_go_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 1e21 => {
                out.push_str(&format!("{f:.0}"));
            }
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => write_go_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, k);
                out.push(':');
                write_go_json(out, item);
            }
            out.push('}');
        }
    }
}

pub(crate) fn write_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managed::path::Path;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn decodes_upstream_example() {
        // As written by kube-apiserver for `kubectl apply --server-side` of a Deployment.
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":
                            {".": {}, "f:containerPort": {}}}}
                }}}
            }
        });
        let set = decode(&v).unwrap();
        let rendered: Vec<String> = set.paths().iter().map(Path::to_string).collect();
        assert_eq!(
            rendered,
            [
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.replicas",
                ".spec.selector",
                ".spec.template.spec.containers[name=\"nginx\"]",
                ".spec.template.spec.containers[name=\"nginx\"].image",
                ".spec.template.spec.containers[name=\"nginx\"].name",
                ".spec.template.spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"]",
                ".spec.template.spec.containers[name=\"nginx\"].ports[containerPort=80,protocol=\"TCP\"].containerPort",
            ]
        );
        assert_eq!(encode(&set), v);
    }

    #[test]
    fn element_spellings() {
        let cases = [
            (PathElement::field("a.b"), "f:a.b"),
            (
                PathElement::key([("protocol", json!("TCP")), ("port", json!(80))]),
                r#"k:{"port":80,"protocol":"TCP"}"#,
            ),
            (
                PathElement::Value(json!("<x&y>")),
                r#"v:"\u003cx\u0026y\u003e""#,
            ),
            (PathElement::Value(json!(80.0)), "v:80"),
            (PathElement::Value(json!(1.5)), "v:1.5"),
            (PathElement::Index(3), "i:3"),
        ];
        for (pe, key) in cases {
            let mut s = String::new();
            write_element(&mut s, &pe);
            assert_eq!(s, key);
            assert_eq!(parse_element(key).unwrap(), Some(pe));
        }
        assert_eq!(parse_element("z:whatever").unwrap(), None);
        for bad in ["f", "fx", "k:[1]", "k:{", "v:", "i:x"] {
            assert!(parse_element(bad).is_err(), "{bad}");
        }
        assert!(decode(&json!({"f:a": 1})).is_err());
        assert!(decode(&json!([])).is_err());
    }

    #[test]
    fn unknown_kinds_are_dropped_and_empty_set_is_empty_object() {
        let set = decode(&json!({"x:future": {}, "f:a": {}})).unwrap();
        assert_eq!(encode(&set), json!({"f:a": {}}));
        assert_eq!(encode(&FieldSet::new()), json!({}));
    }

    fn arbitrary_element() -> impl Strategy<Value = PathElement> {
        let scalar = prop_oneof![
            (-3i64..300).prop_map(Value::from),
            "[a-c<&]{0,3}".prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ];
        prop_oneof![
            "[a-d.]{1,3}".prop_map(|s| PathElement::field(&s)),
            proptest::collection::btree_map("[a-c]", scalar.clone(), 1..3)
                .prop_map(PathElement::key),
            scalar.prop_map(PathElement::Value),
            (0u64..4).prop_map(PathElement::Index),
        ]
    }

    fn arbitrary_set() -> impl Strategy<Value = FieldSet> {
        proptest::collection::vec(
            proptest::collection::vec(arbitrary_element(), 1..4).prop_map(Path),
            0..12,
        )
        .prop_map(|paths| paths.into_iter().collect())
    }

    proptest! {
        /// Decoding an encoded set gives the set back, and encoding is a function of the
        /// set alone (so re-encoding a decoded value is stable).
        #[test]
        fn fields_v1_round_trip(set in arbitrary_set()) {
            let encoded = encode(&set);
            let decoded = decode(&encoded).unwrap();
            prop_assert_eq!(&decoded, &set);
            prop_assert_eq!(encode(&decoded), encoded.clone());
            let text = serde_json::to_string(&encoded).unwrap();
            let reparsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(decode(&reparsed).unwrap(), set);
        }
    }
}

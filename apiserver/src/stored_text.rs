//! A stored object made ready for the watch cache without parsing all of it: the store
//! keeps objects without their resourceVersion, and the cache must add it to every object
//! it takes in. Only `metadata` (but its `managedFields`) and any top-level member a field
//! selector reads are parsed; the rest, usually most of the bytes (a workload's spec and
//! its field ownership), is copied as text.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// A stored object's text with its resourceVersion set, and the parts of it that were read.
pub struct Prepared {
    /// The object's JSON text, resourceVersion included.
    pub text: Vec<u8>,
    /// An object holding the parsed members only: `metadata` (without `managedFields`)
    /// and those asked for.
    pub partial: Value,
}

/// The top-level members of an object, each as its raw text, in their stored order.
struct Members<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                // A key with escapes cannot be borrowed: that fails, and the caller parses
                // the whole object instead.
                while let Some(entry) = map.next_entry::<&'de str, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The member of `metadata` left unparsed: `managedFields` is often the larger half of an
/// object's text, and the cache reads nothing in it.
const UNPARSED_META: &str = "managedFields";

/// `stored` with `metadata.resourceVersion` set to `rv`, parsing only `metadata` (but its
/// `managedFields`) and the top-level members `read` accepts. `None` when the text is not
/// an object of plainly named members with a `metadata` object of such members: the
/// caller then parses it whole.
pub fn prepare(stored: &[u8], rv: u64, read: impl Fn(&str) -> bool) -> Option<Prepared> {
    splice(stored, rv, read, true)
}

/// `stored` with `metadata.resourceVersion` set to `rv`: the text [`prepare`] writes (what
/// parsing the object, setting the version and writing it gives), with nothing parsed.
/// A write answers with it rather than serializing the object it just stored.
pub fn with_resource_version(stored: &[u8], rv: u64) -> Option<Vec<u8>> {
    splice(stored, rv, |_| false, false).map(|p| p.text)
}

/// [`prepare`]; `metadata` is parsed only with `parse_meta`.
fn splice(
    stored: &[u8],
    rv: u64,
    read: impl Fn(&str) -> bool,
    parse_meta: bool,
) -> Option<Prepared> {
    let Members(members) = serde_json::from_slice(stored).ok()?;
    let mut partial = Map::new();
    let mut has_meta = false;
    let mut text = Vec::with_capacity(stored.len() + 32);
    text.push(b'{');
    for (i, (key, raw)) in members.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        serde_json::to_writer(&mut text, key).ok()?;
        text.push(b':');
        if *key == "metadata" {
            let meta = metadata(raw, rv, &mut text, parse_meta)?;
            partial.insert("metadata".into(), Value::Object(meta));
            has_meta = true;
        } else {
            text.extend_from_slice(raw.get().as_bytes());
            if read(key) {
                partial.insert((*key).into(), serde_json::from_str(raw.get()).ok()?);
            }
        }
    }
    text.push(b'}');
    if !has_meta {
        return None;
    }
    Some(Prepared {
        text,
        partial: Value::Object(partial),
    })
}

/// Writes `metadata` with `resourceVersion` set to `rv` to `text`, its members in key
/// order as a whole parse writes them, and returns it parsed but for [`UNPARSED_META`]
/// (with `parse`; else empty). `None` when it is not an object of plainly named, distinct
/// members.
fn metadata(
    raw: &RawValue,
    rv: u64,
    text: &mut Vec<u8>,
    parse: bool,
) -> Option<Map<String, Value>> {
    let Members(mut members) = serde_json::from_str(raw.get()).ok()?;
    let version = RawValue::from_string(format!("\"{rv}\"")).ok()?;
    members.retain(|(k, _)| *k != "resourceVersion");
    members.push(("resourceVersion", &version));
    // Stored text is usually in key order already, so this sort costs a pass.
    members.sort_by(|a, b| a.0.cmp(b.0));
    if members.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    let mut parsed = Map::new();
    text.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        serde_json::to_writer(&mut *text, key).ok()?;
        text.push(b':');
        text.extend_from_slice(value.get().as_bytes());
        if parse && *key != UNPARSED_META {
            parsed.insert((*key).into(), serde_json::from_str(value.get()).ok()?);
        }
    }
    text.push(b'}');
    Some(parsed)
}

/// The top-level member a JSON pointer starts in (`/spec/nodeName` → `spec`).
pub fn top_member(pointer: &str) -> &str {
    let rest = pointer.strip_prefix('/').unwrap_or(pointer);
    rest.split('/').next().unwrap_or(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::JsonPointer;
    use serde_json::json;

    /// What the cache did before: parse everything, set the version, write it again.
    fn whole(stored: &[u8], rv: u64) -> Vec<u8> {
        let mut v: Value = serde_json::from_slice(stored).unwrap();
        v["metadata"]["resourceVersion"] = json!(rv.to_string());
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn the_text_is_what_a_whole_parse_writes() {
        let obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1",
                "labels": {"app": "web", "tier": "front \"quoted\""}, "generation": 3},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1.27", "args": ["a\nb", "é", 1.5, null]}]}}},
            "status": {"replicas": 2}
        });
        let stored = serde_json::to_vec(&obj).unwrap();
        let p = prepare(&stored, 42, |_| false).unwrap();
        assert_eq!(p.text, whole(&stored, 42));
        assert_eq!(p.partial["metadata"]["resourceVersion"], "42");
        assert_eq!(p.partial["metadata"]["labels"]["app"], "web");
        assert!(p.partial.get("spec").is_none(), "spec is not parsed");
    }

    #[test]
    fn an_old_resource_version_is_replaced() {
        let stored = br#"{"metadata":{"name":"a","resourceVersion":"7"},"spec":{}}"#;
        let p = prepare(stored, 9, |_| false).unwrap();
        assert_eq!(p.text, whole(stored, 9));
        assert_eq!(
            p.text,
            br#"{"metadata":{"name":"a","resourceVersion":"9"},"spec":{}}"#
        );
    }

    #[test]
    fn managed_fields_are_copied_as_text_and_not_parsed() {
        // Metadata's members out of key order (values are copied as stored, as other
        // members are): the text is still what a whole parse writes.
        let obj = br#"{"metadata":{"uid":"u","name":"a","managedFields":[{"fieldsV1":{"f:spec":{"f:replicas":{}}},"manager":"m","operation":"Update"}],"labels":{"x":"y"}},"spec":{"replicas":1}}"#;
        let p = prepare(obj, 5, |_| false).unwrap();
        assert_eq!(p.text, whole(obj, 5));
        assert!(p.partial["metadata"].get("managedFields").is_none());
        assert_eq!(p.partial["metadata"]["labels"]["x"], "y");
        assert_eq!(p.partial["metadata"]["resourceVersion"], "5");
    }

    #[test]
    fn members_a_field_selector_reads_are_parsed() {
        let stored =
            br#"{"metadata":{"name":"p"},"spec":{"nodeName":"n1"},"status":{"phase":"Running"}}"#;
        let p = prepare(stored, 1, |k| k == "spec").unwrap();
        assert_eq!(p.partial.at("/spec/nodeName"), Some(&json!("n1")));
        assert!(p.partial.get("status").is_none());
        assert_eq!(top_member("/spec/nodeName"), "spec");
        assert_eq!(top_member("/involvedObject/kind"), "involvedObject");
    }

    #[test]
    fn a_write_answers_with_what_serializing_the_object_gives() {
        // Stored without a resourceVersion, as the engine stores it; answered with the
        // text of the object with the new one set.
        let mut obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "uid": "u1", "labels": {"a": "<b> & \u{2028}"},
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}}, "time": "2026-01-01T00:00:00Z"}]},
            "spec": {"replicas": 3, "args": ["é", 1.5, -0.0, 1e300, null, 18446744073709551615u64]}
        });
        let stored = serde_json::to_vec(&obj).unwrap();
        let text = with_resource_version(&stored, 42).unwrap();
        obj["metadata"]["resourceVersion"] = json!("42");
        assert_eq!(
            String::from_utf8(text).unwrap(),
            serde_json::to_string(&obj).unwrap()
        );
        assert!(with_resource_version(br#"{"spec":{}}"#, 1).is_none());
    }

    #[test]
    fn text_it_cannot_split_is_left_to_a_whole_parse() {
        // No metadata, an escaped key, an escaped or repeated key in metadata, metadata
        // not an object, not an object, not JSON.
        for bad in [
            &br#"{"spec":{}}"#[..],
            br#"{"spe\u0063":{},"metadata":{}}"#,
            br#"{"metadata":{"n\u0061me":"a"}}"#,
            br#"{"metadata":{"name":"a","name":"b"}}"#,
            br#"{"metadata":"a"}"#,
            br#"[1,2]"#,
            br#"{"metadata":"#,
        ] {
            assert!(
                prepare(bad, 1, |_| false).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

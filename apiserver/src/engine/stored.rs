//! The form objects are stored in: JSON without `metadata.resourceVersion`, which is the
//! store's revision of the write and so never kept in the value.

use bytes::Bytes;
use serde_json::Value;

use crate::registry::ResourceDef;
use crate::status::ApiError;

/// The bytes stored for `obj`, written through `def` (converted to the stored form when
/// `def` serves another).
pub(super) fn encode(def: &ResourceDef, obj: &Value) -> Result<Bytes, ApiError> {
    if def.conversion.is_some() {
        let mut stored = obj.clone();
        crate::convert::to_stored(def, &mut stored);
        return encode_value(&stored);
    }
    encode_value(obj)
}

/// The JSON `def` serves for an object just stored as `stored` at revision `rv`: the
/// stored bytes with the resourceVersion set (byte for byte what serializing the object
/// gives), when `def` serves the stored form. A write answers with it.
pub(super) fn served_text(def: &ResourceDef, stored: &[u8], rv: u64) -> Option<Bytes> {
    if def.conversion.is_some() {
        return None;
    }
    crate::stored_text::with_resource_version(stored, rv).map(Bytes::from)
}

fn encode_value(obj: &Value) -> Result<Bytes, ApiError> {
    serde_json::to_vec(&WithoutResourceVersion(obj))
        .map(|mut v| {
            // The store's watch history keeps this buffer: without the growth slack.
            v.shrink_to_fit();
            Bytes::from(v)
        })
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// An object written without `metadata.resourceVersion`: the revision is the resourceVersion,
/// so the store never keeps a (soon stale) copy of it. Written as is, not copied first.
struct WithoutResourceVersion<'a>(&'a Value);

impl serde::Serialize for WithoutResourceVersion<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(obj) = self.0 else {
            return self.0.serialize(s);
        };
        let mut out = s.serialize_map(Some(obj.len()))?;
        for (k, v) in obj {
            match v {
                Value::Object(meta) if k == "metadata" => {
                    let fields = meta.iter().filter(|(f, _)| *f != "resourceVersion");
                    out.serialize_entry(k, &MapOf(fields))?;
                }
                _ => out.serialize_entry(k, v)?,
            }
        }
        out.end()
    }
}

/// Map entries written as a JSON object.
struct MapOf<I>(I);

impl<'a, I> serde::Serialize for MapOf<I>
where
    I: Iterator<Item = (&'a String, &'a Value)> + Clone,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_stored_form_leaves_out_only_the_resource_version() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "12", "labels": {"resourceVersion": "kept"}},
            "data": {"resourceVersion": "kept too"}});
        let stored: Value = serde_json::from_slice(&encode_value(&obj).unwrap()).unwrap();
        let mut want = obj.clone();
        want["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(stored, want);
        // The same bytes a copy without it would give.
        assert_eq!(
            &encode_value(&obj).unwrap()[..],
            &serde_json::to_vec(&want).unwrap()[..]
        );
        assert_eq!(&encode_value(&json!([1])).unwrap()[..], b"[1]");
    }
}

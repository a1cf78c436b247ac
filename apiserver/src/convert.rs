//! Conversion between the form a resource serves and the form its objects are stored in:
//! another version of the same kind (a CustomResourceDefinition's versions, converted as
//! kube-apiserver's `conversion: None` does: only `apiVersion` changes), or another group's
//! kind over the same objects (`events.k8s.io/v1` Events over core Events). Resources that
//! serve their stored form pass through untouched and uncopied.

use bytes::Bytes;
use serde_json::Value;

use crate::cache::{Cached, EventType, watch_frame};
use crate::registry::ResourceDef;

/// Converts a stored object to the form `def` serves, if it serves another.
pub fn to_served(def: &ResourceDef, obj: &mut Value) {
    if let Some(c) = &def.conversion
        && obj.is_object()
    {
        (c.to_served)(obj);
        obj["apiVersion"] = def.api_version().into();
    }
}

/// Converts an object in the form `def` serves to its stored form.
pub fn to_stored(def: &ResourceDef, obj: &mut Value) {
    if let Some(c) = &def.conversion
        && obj.is_object()
    {
        (c.to_stored)(obj);
        obj["apiVersion"] = c.stored_api_version.as_str().into();
    }
}

/// The JSON of a cached (stored-form) object as `def` serves it.
pub fn served_json(def: &ResourceDef, obj: &Cached) -> Bytes {
    if def.conversion.is_none() {
        return obj.json();
    }
    let mut v = obj.value();
    to_served(def, &mut v);
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// A watch frame of a cached object as `def` serves it.
pub fn served_frame(def: &ResourceDef, kind: EventType, obj: &Cached) -> Bytes {
    if def.conversion.is_none() {
        return obj.frame_as(kind);
    }
    watch_frame(kind.as_str(), &served_json(def, obj))
}

/// Renames top-level fields `from` → `to` for each pair (a field absent stays absent).
pub fn rename(obj: &mut Value, pairs: &[(&str, &str)]) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    for (from, to) in pairs {
        if let Some(v) = m.remove(*from) {
            m.insert((*to).to_string(), v);
        }
    }
}

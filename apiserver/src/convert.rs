//! Conversion between the versions of one stored resource, as kube-apiserver does for a
//! CustomResourceDefinition with `conversion: None`: an object is stored at the storage
//! version and read or written through any served version, only its `apiVersion` changing.
//! Resources served at their storage version pass through untouched (and uncopied).

use bytes::Bytes;
use serde_json::Value;

use crate::cache::{Cached, EventType, watch_frame};
use crate::registry::ResourceDef;

/// Sets `obj`'s apiVersion to the one `def` serves, if it is stored at another.
pub fn to_served(def: &ResourceDef, obj: &mut Value) {
    if def.stored_api_version().is_some()
        && let Some(o) = obj.as_object_mut()
    {
        o.insert("apiVersion".into(), def.api_version().into());
    }
}

/// The JSON of a cached (stored-version) object as `def` serves it.
pub fn served_json(def: &ResourceDef, obj: &Cached) -> Bytes {
    if def.stored_api_version().is_none() {
        return obj.json();
    }
    let mut v = obj.value();
    to_served(def, &mut v);
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

/// A watch frame of a cached object as `def` serves it.
pub fn served_frame(def: &ResourceDef, kind: EventType, obj: &Cached) -> Bytes {
    if def.stored_api_version().is_none() {
        return obj.frame_as(kind);
    }
    watch_frame(kind.as_str(), &served_json(def, obj))
}

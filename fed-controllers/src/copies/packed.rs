//! The copy path's cached objects, packed. It caches every federated object of each copied
//! kind and every member's copy of it: as `DynamicObject`s those are JSON trees, about ten
//! times their text, and were a third of the controllers' heap with 10,000 objects over 100
//! members. The metadata stays decoded (the caches and the queue read names, uids and
//! labels); the rest is packed text ([`Compact`]), parsed when a pass reads the object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, TypeMeta};
use serde_json::{Map, Value};

use crate::compact::Compact;

/// A dynamic object with everything but its metadata packed.
#[derive(Clone, Debug)]
pub struct PackedObject {
    types: Option<TypeMeta>,
    metadata: ObjectMeta,
    /// The object's fields besides `apiVersion`, `kind` and `metadata`, as one JSON object.
    data: Compact,
}

impl PackedObject {
    /// Packs `o`.
    pub fn of(o: DynamicObject) -> Self {
        let kind = o.types.as_ref().map_or("", |t| t.kind.as_str());
        let data = match o.data {
            Value::Object(m) => Value::Object(m),
            _ => Value::Object(Map::new()),
        };
        Self {
            data: Compact::from_json(kind, data.to_string()),
            types: o.types,
            metadata: o.metadata,
        }
    }

    /// The whole object as JSON, as `serde_json::to_value` gives a `DynamicObject`.
    pub fn to_value(&self) -> Value {
        let mut v = match self.data.value() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(t) = &self.types {
            v.insert("apiVersion".into(), t.api_version.clone().into());
            v.insert("kind".into(), t.kind.clone().into());
        }
        v.insert(
            "metadata".into(),
            serde_json::to_value(&self.metadata).unwrap_or_default(),
        );
        Value::Object(v)
    }
}

meridian_runtime::dynamic_resource!(PackedObject, o => o.metadata);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unpacks_to_the_object_it_packed() {
        for v in [
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "web", "namespace": "shop", "uid": "u-1",
                                "labels": {"app": "web"}, "resourceVersion": "7"},
                   "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
                   "status": {"disruptionsAllowed": 1}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "app", "namespace": "shop"}}),
        ] {
            let o: DynamicObject = serde_json::from_value(v.clone()).expect("object");
            let expected = serde_json::to_value(&o).expect("encodes");
            let packed = PackedObject::of(o);
            assert_eq!(packed.to_value(), expected);
            assert_eq!(packed.to_value(), v);
            assert_eq!(
                Some(kube::ResourceExt::name_any(&packed).as_str()),
                v["metadata"]["name"].as_str()
            );
        }
    }
}

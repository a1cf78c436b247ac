//! Watch events of dynamic objects decoded in one pass. kube's `DynamicObject` flattens its
//! type fields and its data, which makes serde buffer every object into an intermediate
//! tree before building the real one; the controller decodes every federated workload and
//! every copy it pushes as it comes back from its member, so [`Decoded`] reads the same
//! object field by field, and skips `metadata.managedFields` (often the larger part of a
//! small object) without building it: nothing here reads it.

use std::fmt;

use kube::api::{DynamicObject, TypeMeta};
use kube::runtime::watcher::Event;
use meridian_runtime::lean::LeanMeta;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

/// A [`DynamicObject`] that decodes without buffering and without its managedFields; watch
/// it, then take the object.
#[derive(Clone, Debug)]
pub struct Decoded(pub DynamicObject);

impl<'de> Deserialize<'de> for Decoded {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Decoded;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let (mut api_version, mut kind) = (None, None);
        let mut metadata = None;
        let mut data = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => api_version = Some(map.next_value::<String>()?),
                "kind" => kind = Some(map.next_value::<String>()?),
                "metadata" => metadata = Some(map.next_value::<LeanMeta>()?.0),
                _ => {
                    data.insert(key, map.next_value::<Value>()?);
                }
            }
        }
        // As `DynamicObject` decodes: type fields only as a pair (a lone one is dropped).
        let types = match (api_version, kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        Ok(Decoded(DynamicObject {
            types,
            metadata: metadata.unwrap_or_default(),
            data: Value::Object(data),
        }))
    }
}

meridian_runtime::dynamic_resource!(Decoded, o => o.0.metadata);

/// The event with its objects taken out of their wrappers.
pub fn into_dynamic(ev: Event<Decoded>) -> Event<DynamicObject> {
    meridian_runtime::lean::map(ev, |o| o.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_as_dynamic_object_does() {
        for v in [
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "namespace": "shop", "labels": {"a": "b"},
                                "generation": 2, "resourceVersion": "7"},
                   "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c"}]}}},
                   "status": {"readyReplicas": 1}}),
            json!({"metadata": {"name": "no-types"}, "data": {"k": "v"}}),
            json!({"kind": "ConfigMap", "data": {"k": "v"}}),
            json!({}),
        ] {
            let ours: Decoded = serde_json::from_value(v.clone()).unwrap();
            let theirs: DynamicObject = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(ours.0, theirs, "{v}");
            let text = v.to_string();
            let ours: Decoded = serde_json::from_str(&text).unwrap();
            assert_eq!(ours.0, theirs, "{v}");
        }
    }

    #[test]
    fn managed_fields_are_left_out_and_the_rest_of_the_metadata_kept() {
        let v = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop",
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
                "labels": {"a": "b"}, "resourceVersion": "7"},
            "spec": {"replicas": 3}});
        let ours: Decoded = serde_json::from_str(&v.to_string()).unwrap();
        let mut theirs: DynamicObject = serde_json::from_value(v).unwrap();
        assert!(theirs.metadata.managed_fields.is_some());
        theirs.metadata.managed_fields = None;
        assert_eq!(ours.0, theirs);
        // Still a type error where ObjectMeta would give one.
        let bad = r#"{"metadata": {"managedFields": [], "labels": 3}}"#;
        assert!(serde_json::from_str::<Decoded>(bad).is_err());
    }

    #[test]
    fn a_watch_event_decodes() {
        let line = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"type":"Opaque"}}"#;
        let ev: kube::api::WatchEvent<Decoded> = serde_json::from_str(line).unwrap();
        let kube::api::WatchEvent::Added(o) = ev else {
            panic!("not ADDED")
        };
        assert_eq!(o.0.metadata.name.as_deref(), Some("s"));
        assert_eq!(o.0.data, json!({"type": "Opaque"}));
        assert_eq!(o.0.types.unwrap().kind, "Secret");
    }

    #[test]
    fn a_watch_event_with_the_object_first_decodes() {
        // serde buffers the object when the event's type comes after it.
        let line = r#"{"object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","generation":2},"spec":{"replicas":3}},"type":"MODIFIED"}"#;
        let ev: kube::api::WatchEvent<Decoded> = serde_json::from_str(line).unwrap();
        let kube::api::WatchEvent::Modified(o) = ev else {
            panic!("not MODIFIED")
        };
        assert_eq!(o.0.metadata.generation, Some(2));
        assert_eq!(o.0.data, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn a_non_object_is_refused() {
        assert!(serde_json::from_str::<Decoded>("[1]").is_err());
        assert!(serde_json::from_str::<Decoded>(r#"{"metadata": 3}"#).is_err());
    }
}

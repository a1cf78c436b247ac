//! Watched objects decoded without their `metadata.managedFields`. Since server-side apply
//! every object carries them, often more text than the rest of a small object, and no
//! controller decision reads them; client-go's informers drop them after decoding, these
//! are never built. [`Lean`] wraps any typed object (its own `Deserialize` does the
//! decoding, its `managedFields` entry passed over); [`LeanMeta`] is the metadata alone, for
//! decoders of their own.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher::Event;
use serde::de::{
    Deserialize, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, Visitor,
};

/// `K` decoded without its managedFields; watch it, then [`unwrap`] the events.
#[derive(Clone, Debug, PartialEq)]
pub struct Lean<K>(pub K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(Object(d)).map(Lean)
    }
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// The event with its objects taken out of their wrappers.
pub fn unwrap<K>(ev: Event<Lean<K>>) -> Event<K> {
    map(ev, |o| o.0)
}

/// The event with `f` applied to its objects (kube's `Event` has no `map`).
pub fn map<A, B>(ev: Event<A>, f: impl FnOnce(A) -> B) -> Event<B> {
    match ev {
        Event::Apply(o) => Event::Apply(f(o)),
        Event::Delete(o) => Event::Delete(f(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(f(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// A map whose `managedFields` entry is passed over (the object's metadata).
struct SkipManagedFields<A>(A);

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SkipManagedFields<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.0.next_key::<String>()? {
            if key == "managedFields" {
                self.0.next_value::<IgnoredAny>()?;
                continue;
            }
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.0.next_value_seed(seed)
    }
}

/// The object: a map whose `metadata` value is decoded through [`Metadata`].
struct Object<D>(D);

/// An object's `metadata`: a map decoded through [`SkipManagedFields`].
struct Metadata<D>(D);

/// Forwards every request of a typed object's decoder to a map visitor wrapped by `$wrap`.
macro_rules! map_deserializer {
    ($name:ident, $wrap:ident, $some:ident) => {
        impl<'de, D: Deserializer<'de>> Deserializer<'de> for $name<D> {
            type Error = D::Error;

            fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
                self.0.deserialize_map($wrap(v))
            }

            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _name: &'static str,
                _fields: &'static [&'static str],
                v: V,
            ) -> Result<V::Value, D::Error> {
                self.0.deserialize_map($wrap(v))
            }

            fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
                self.0.deserialize_map($wrap(v))
            }

            // Typed decoders read their fields as `Option`s.
            fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
                self.0.deserialize_option($some(v))
            }

            fn is_human_readable(&self) -> bool {
                self.0.is_human_readable()
            }

            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
                bytes byte_buf unit unit_struct newtype_struct seq tuple
                tuple_struct enum identifier ignored_any
            }
        }

        /// An `Option`'s visitor whose `Some` is decoded through the same wrapper.
        struct $some<V>(V);

        impl<'de, V: Visitor<'de>> Visitor<'de> for $some<V> {
            type Value = V::Value;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                self.0.expecting(f)
            }

            fn visit_none<E: serde::de::Error>(self) -> Result<V::Value, E> {
                self.0.visit_none()
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<V::Value, E> {
                self.0.visit_unit()
            }

            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
                self.0.visit_some($name(d))
            }
        }
    };
}

map_deserializer!(Object, ObjectVisitor, SomeObject);
map_deserializer!(Metadata, MetadataVisitor, SomeMetadata);

struct ObjectVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for ObjectVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(ObjectMap {
            map,
            metadata_next: false,
        })
    }
}

struct MetadataVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for MetadataVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(SkipManagedFields(map))
    }
}

/// The object's map: its `metadata` value goes through [`Metadata`].
struct ObjectMap<A> {
    map: A,
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for ObjectMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.map.next_key::<String>()? else {
            return Ok(None);
        };
        self.metadata_next = key == "metadata";
        seed.deserialize(key.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.map.next_value_seed(MetadataSeed(seed))
        } else {
            self.map.next_value_seed(seed)
        }
    }
}

struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Metadata(d))
    }
}

/// An object's `metadata` decoded as `ObjectMeta` decodes it, without its managedFields (for
/// decoders of their own).
#[derive(Clone, Debug, PartialEq)]
pub struct LeanMeta(pub ObjectMeta);

impl<'de> Deserialize<'de> for LeanMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(Metadata(d)).map(LeanMeta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn managed() -> serde_json::Value {
        json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}])
    }

    #[test]
    fn typed_objects_decode_as_they_do_without_their_managed_fields() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "labels": {"a": "b"},
                         "managedFields": managed(), "resourceVersion": "7", "generation": 2},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"readyReplicas": 1}});
        let lean: Lean<Deployment> = serde_json::from_str(&d.to_string()).unwrap();
        let mut whole: Deployment = serde_json::from_value(d).unwrap();
        assert!(whole.metadata.managed_fields.is_some());
        whole.metadata.managed_fields = None;
        assert_eq!(lean.0, whole);

        // Metadata first or last, with or without managedFields.
        let c = r#"{"data": {"k": "v"}, "metadata": {"managedFields": [], "name": "c"}, "kind": "ConfigMap", "apiVersion": "v1"}"#;
        let lean: Lean<ConfigMap> = serde_json::from_str(c).unwrap();
        assert_eq!(lean.0.metadata.name.as_deref(), Some("c"));
        assert_eq!(lean.0.metadata.managed_fields, None);
        assert_eq!(lean.0.data.unwrap()["k"], "v");
        let plain: Lean<ConfigMap> = serde_json::from_str(
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}"#,
        )
        .unwrap();
        assert_eq!(plain.0.metadata.name.as_deref(), Some("c"));
    }

    #[test]
    fn errors_surface_as_the_typed_decoder_gives_them() {
        for bad in [
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": 3}}"#,
            r#"{"apiVersion": "v1", "kind": "Secret", "metadata": {}}"#,
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"managedFields": [}}"#,
            "[1]",
        ] {
            assert!(
                serde_json::from_str::<Lean<ConfigMap>>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn watch_events_decode_and_unwrap() {
        let line = json!({"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "managedFields": managed()}}})
        .to_string();
        let ev: kube::api::WatchEvent<Lean<ConfigMap>> = serde_json::from_str(&line).unwrap();
        let kube::api::WatchEvent::Modified(o) = ev else {
            panic!("not MODIFIED")
        };
        assert_eq!(Lean::<ConfigMap>::kind(&()), "ConfigMap");
        let Event::Apply(c) = unwrap(Event::Apply(o)) else {
            panic!("not Apply")
        };
        assert_eq!(c.metadata.name.as_deref(), Some("c"));
        assert_eq!(c.metadata.managed_fields, None);
    }
}

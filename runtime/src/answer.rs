//! A write's answer decoded for what a controller reads of it: its identity and
//! resourceVersion. kube's `Api<K>` decodes every answer into `K`; for a status or
//! finalizer patch that is the whole object, managedFields and all (often more text than
//! the rest), built only to be dropped. `Api<Written>` sends the same request and passes
//! the rest of the answer over without building it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::ApiResource;
use serde::{Deserialize, Deserializer};

/// The answer to a write: the object's metadata, of which only name, namespace, uid,
/// resourceVersion and generation are kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Written {
    /// The metadata kept.
    pub metadata: ObjectMeta,
}

impl Written {
    /// The object's resourceVersion after the write.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

/// An `Api` for writes of objects of `ar` whose answers are read as [`Written`]:
/// namespaced when `namespace` is given, cluster-wide otherwise.
pub fn api(client: Client, namespace: Option<&str>, ar: &ApiResource) -> kube::Api<Written> {
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client, ns, ar),
        None => kube::Api::all_with(client, ar),
    }
}

/// The object as decoded: every other field is skipped unbuilt.
#[derive(Deserialize)]
struct Raw {
    #[serde(default)]
    metadata: RawMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
}

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let RawMeta {
            name,
            namespace,
            uid,
            resource_version,
            generation,
        } = Raw::deserialize(d)?.metadata;
        Ok(Written {
            metadata: ObjectMeta {
                name,
                namespace,
                uid,
                resource_version,
                generation,
                ..ObjectMeta::default()
            },
        })
    }
}

crate::dynamic_resource!(Written, o => o.metadata);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_identity_and_version_and_skips_the_rest() {
        let answer = r#"{"apiVersion":"apps/v1","kind":"Deployment",
            "metadata":{"name":"web","namespace":"shop","uid":"u1","resourceVersion":"42",
                "generation":3,"labels":{"a":"b"},
                "managedFields":[{"manager":"m","operation":"Update","fieldsType":"FieldsV1",
                    "fieldsV1":{"f:spec":{"f:replicas":{}}}}]},
            "spec":{"replicas":2},"status":{"replicas":2}}"#;
        let w: Written = serde_json::from_str(answer).expect("decodes");
        assert_eq!(w.resource_version(), Some("42"));
        assert_eq!(w.metadata.name.as_deref(), Some("web"));
        assert_eq!(w.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(w.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(w.metadata.generation, Some(3));
        assert!(w.metadata.labels.is_none() && w.metadata.managed_fields.is_none());
    }

    #[test]
    fn a_malformed_answer_is_an_error() {
        assert!(serde_json::from_str::<Written>(r#"{"metadata":{"resourceVersion":7}}"#).is_err());
        assert!(serde_json::from_str::<Written>("\"text\"").is_err());
        let empty: Written = serde_json::from_str("{}").expect("no metadata");
        assert_eq!(empty, Written::default());
    }
}

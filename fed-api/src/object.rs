//! Kube-free envelopes of Meridian's objects — the `metadata` pure code reads, the spec and
//! the status — for code that decides without a client: the scheduler's core, `fedctl plan`.
//!
//! They read the same JSON and YAML as the kube wrappers (unknown metadata is ignored), and
//! with the `kube` feature a wrapper converts into its envelope by moving its spec and
//! status: no serde round trip, and a field added to a spec is there on both sides.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::{ClusterSpec, ClusterStatus};
use crate::policy::PropagationPolicySpec;

/// The part of an object's `metadata` decisions read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default)]
    pub name: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// UID (empty until the API server assigned one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// The status of a kind that has none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoStatus {}

/// An object of one of Meridian's kinds, without kube's types.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "Spec: Serialize, Status: Serialize + Default + PartialEq",
    deserialize = "Spec: Deserialize<'de> + Default, Status: Deserialize<'de> + Default"
))]
pub struct Object<Spec, Status = NoStatus> {
    /// Name, namespace, labels, annotations, uid.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired state.
    #[serde(default)]
    pub spec: Spec,
    /// Observed state (default when not reported).
    #[serde(default, skip_serializing_if = "is_default")]
    pub status: Status,
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

/// A member cluster.
pub type Cluster = Object<ClusterSpec, ClusterStatus>;
/// A namespaced propagation policy.
pub type PropagationPolicy = Object<PropagationPolicySpec>;
/// A cluster-wide propagation policy: the same spec, an empty namespace.
pub type ClusterPropagationPolicy = Object<PropagationPolicySpec>;

#[cfg(feature = "kube")]
mod from_kube {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

    use super::{Object, ObjectMeta};

    impl From<meta::ObjectMeta> for ObjectMeta {
        fn from(m: meta::ObjectMeta) -> Self {
            Self {
                name: m.name.unwrap_or_default(),
                namespace: m.namespace.unwrap_or_default(),
                labels: m.labels.unwrap_or_default(),
                annotations: m.annotations.unwrap_or_default(),
                uid: m.uid.unwrap_or_default(),
            }
        }
    }

    impl From<crate::Cluster> for super::Cluster {
        fn from(c: crate::Cluster) -> Self {
            Object {
                metadata: c.metadata.into(),
                spec: c.spec,
                status: c.status.unwrap_or_default(),
            }
        }
    }

    impl From<crate::PropagationPolicy> for super::PropagationPolicy {
        fn from(p: crate::PropagationPolicy) -> Self {
            Object {
                metadata: p.metadata.into(),
                spec: p.spec,
                status: super::NoStatus {},
            }
        }
    }

    impl From<crate::ClusterPropagationPolicy> for super::ClusterPropagationPolicy {
        fn from(p: crate::ClusterPropagationPolicy) -> Self {
            Object {
                metadata: p.metadata.into(),
                spec: p.spec.0,
                status: super::NoStatus {},
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_objects_as_served_and_skips_what_it_does_not_use() {
        let c: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "eu-1", "labels": {"env": "prod"}, "resourceVersion": "7",
                         "managedFields": [{"manager": "fedctl"}]},
            "spec": {"apiEndpoint": "https://10.0.0.1:6443", "region": "eu"},
        }))
        .unwrap();
        assert_eq!(c.metadata.name, "eu-1");
        assert_eq!(c.spec.region.as_deref(), Some("eu"));
        assert_eq!(c.status, ClusterStatus::default());
        // An unreported status is left out again, as the API server would.
        let back = serde_json::to_value(&c).unwrap();
        assert!(back.get("status").is_none(), "{back}");
        let p: PropagationPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}
        }))
        .unwrap();
        assert_eq!(p.metadata.namespace, "shop");
        assert_eq!(p.spec.resource_selectors[0].kind, "Deployment");
    }

    #[cfg(feature = "kube")]
    #[test]
    fn kube_wrappers_move_into_their_envelopes() {
        let mut kube_cluster = crate::Cluster::new(
            "eu-1",
            ClusterSpec {
                api_endpoint: "https://10.0.0.1:6443".into(),
                region: Some("eu".into()),
                ..Default::default()
            },
        );
        kube_cluster.metadata.labels = Some([("env".to_owned(), "prod".to_owned())].into());
        kube_cluster.metadata.uid = Some("u-1".into());
        let spec = kube_cluster.spec.clone();
        let c = Cluster::from(kube_cluster);
        assert_eq!(
            (c.metadata.name.as_str(), c.metadata.uid.as_str()),
            ("eu-1", "u-1")
        );
        assert_eq!(c.metadata.labels["env"], "prod");
        assert_eq!(c.spec, spec);

        let mut cpp = crate::ClusterPropagationPolicy::new(
            "crds",
            crate::ClusterPropagationPolicySpec(PropagationPolicySpec {
                priority: 3,
                ..Default::default()
            }),
        );
        cpp.metadata.namespace = None;
        let p = ClusterPropagationPolicy::from(cpp);
        assert_eq!((p.metadata.namespace.as_str(), p.spec.priority), ("", 3));
    }
}

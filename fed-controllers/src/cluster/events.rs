//! What the cluster controller's Events are about: member transitions (on the Cluster)
//! and the mass-failure guard (on its ConfigMap). They are written through the process's
//! Event recorder, best effort.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::{Client, Resource, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::events::{EventSpec, EventType};
use meridian_runtime::namespace::{self, Ensured};

/// The component name on every Event this controller writes.
pub const COMPONENT: &str = "meridian-cluster-controller";
/// Clusters are cluster-scoped; their Events live here.
pub const CLUSTER_EVENT_NAMESPACE: &str = "default";

/// An Event about a Cluster (written to the `default` namespace).
pub fn for_cluster(
    name: &str,
    uid: Option<&str>,
    reason: &str,
    type_: EventType,
    message: &str,
) -> EventSpec {
    EventSpec {
        regarding: ObjectReference {
            api_version: Some(fed_api::API_VERSION.to_string()),
            kind: Some("Cluster".to_string()),
            name: Some(name.to_string()),
            uid: uid.map(str::to_string),
            ..Default::default()
        },
        type_,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

/// An Event about a ConfigMap (in its namespace).
pub fn for_config_map(cm: &ConfigMap, reason: &str, type_: EventType, message: &str) -> EventSpec {
    EventSpec {
        regarding: ObjectReference {
            api_version: Some(ConfigMap::api_version(&()).to_string()),
            kind: Some(ConfigMap::kind(&()).to_string()),
            name: Some(cm.name_any()),
            namespace: Some(
                cm.namespace()
                    .unwrap_or_else(|| fed_api::names::SYSTEM_NAMESPACE.to_string()),
            ),
            uid: cm.uid(),
            resource_version: cm.resource_version(),
            ..Default::default()
        },
        type_,
        reason: reason.to_string(),
        message: message.to_string(),
    }
}

/// Creates a namespace if it is missing (Events for Clusters go to `default`, which a
/// fresh federation API server does not create). Best effort: errors are logged.
pub async fn ensure_namespace(client: Client, ns: &str) {
    let ensured = tokio::time::timeout(
        Duration::from_secs(10),
        namespace::ensure(&client, &namespace::named(ns, [])),
    )
    .await;
    match ensured {
        Ok(Ok(Ensured::Created)) => tracing::info!(namespace = ns, "created namespace"),
        Ok(Ok(Ensured::Existed)) => {}
        Ok(Err(error)) => {
            tracing::warn!(error = %Report(&error), namespace = ns, "ensuring namespace failed")
        }
        Err(_) => tracing::warn!(namespace = ns, "ensuring namespace timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_event_refers_to_the_cluster() {
        let e = for_cluster("eu-1", Some("u-1"), "Offline", EventType::Warning, "gone");
        let o = &e.regarding;
        assert_eq!(
            o.namespace, None,
            "cluster-scoped: the recorder's default namespace"
        );
        assert_eq!(
            (
                o.kind.as_deref(),
                o.name.as_deref(),
                o.api_version.as_deref(),
                o.uid.as_deref()
            ),
            (
                Some("Cluster"),
                Some("eu-1"),
                Some("federation.meridian.dev/v1alpha1"),
                Some("u-1")
            )
        );
        assert_eq!(
            (e.reason.as_str(), e.type_),
            ("Offline", EventType::Warning)
        );
    }
}

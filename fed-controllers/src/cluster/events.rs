//! Kubernetes Events for member transitions and the mass-failure guard (best effort).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Event, EventSource, Namespace, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, Resource, ResourceExt};

/// The component name on every Event this controller writes.
pub const COMPONENT: &str = "meridian-cluster-controller";
/// Clusters are cluster-scoped; their Events live here.
pub const CLUSTER_EVENT_NAMESPACE: &str = "default";

fn event(
    namespace: &str,
    involved: ObjectReference,
    reason: &str,
    type_: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Event {
    let base = involved.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            // Unique without a server round trip: object name plus a random suffix, as
            // client-go's recorder does with a timestamp.
            name: Some(format!("{base}.{:016x}", rand::random::<u64>())),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        involved_object: involved,
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some(type_.to_string()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource {
            component: Some(COMPONENT.to_string()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_string()),
        ..Default::default()
    }
}

/// An Event about a Cluster (written to the `default` namespace).
pub fn for_cluster(
    name: &str,
    uid: Option<&str>,
    reason: &str,
    type_: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Event {
    let involved = ObjectReference {
        api_version: Some(fed_api::API_VERSION.to_string()),
        kind: Some("Cluster".to_string()),
        name: Some(name.to_string()),
        uid: uid.map(str::to_string),
        ..Default::default()
    };
    event(
        CLUSTER_EVENT_NAMESPACE,
        involved,
        reason,
        type_,
        message,
        now,
    )
}

/// An Event about a ConfigMap (in its namespace).
pub fn for_config_map(
    cm: &ConfigMap,
    reason: &str,
    type_: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Event {
    let involved = ObjectReference {
        api_version: Some(ConfigMap::api_version(&()).to_string()),
        kind: Some(ConfigMap::kind(&()).to_string()),
        name: Some(cm.name_any()),
        namespace: cm.namespace(),
        uid: cm.uid(),
        resource_version: cm.resource_version(),
        ..Default::default()
    };
    let ns = cm
        .namespace()
        .unwrap_or_else(|| fed_api::names::SYSTEM_NAMESPACE.to_string());
    event(&ns, involved, reason, type_, message, now)
}

/// Creates a namespace if it is missing (Events for Clusters go to `default`, which a
/// fresh federation API server does not create). Best effort: errors are logged.
pub async fn ensure_namespace(client: Client, ns: &str) {
    let api: Api<Namespace> = Api::all(client);
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match tokio::time::timeout(
        Duration::from_secs(10),
        api.create(&PostParams::default(), &obj),
    )
    .await
    {
        Ok(Ok(_)) => tracing::info!(namespace = ns, "created namespace"),
        Ok(Err(kube::Error::Api(s))) if s.code == 409 => {}
        Ok(Err(error)) => tracing::warn!(%error, namespace = ns, "ensuring namespace failed"),
        Err(_) => tracing::warn!(namespace = ns, "ensuring namespace timed out"),
    }
}

/// Writes an Event; failures are logged, never propagated (Events are informational and
/// must not hold up probes or status).
pub async fn publish(client: Client, event: Event) {
    let ns = event
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| CLUSTER_EVENT_NAMESPACE.to_string());
    let api: Api<Event> = Api::namespaced(client, &ns);
    let reason = event.reason.clone().unwrap_or_default();
    match tokio::time::timeout(
        Duration::from_secs(10),
        api.create(&PostParams::default(), &event),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::warn!(%error, %reason, "writing event failed"),
        Err(_) => tracing::warn!(%reason, "writing event timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_event_refers_to_the_cluster() {
        let now = jiff::Timestamp::from_second(1_700_000_000).expect("ts");
        let e = for_cluster("eu-1", Some("u-1"), "Offline", "Warning", "gone", now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("eu-1."))
        );
        let o = &e.involved_object;
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
        assert_eq!(e.reason.as_deref(), Some("Offline"));
    }
}

//! Kubernetes Events on federated objects, shared by the controllers (best effort: a lost
//! Event never blocks propagation).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

/// Whether an Event reports normal progress or a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An Event about `involved` (which must name a namespace and a name), written by `component`.
pub fn build(
    involved: ObjectReference,
    component: &str,
    severity: Severity,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Event {
    let name = involved.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            // Unique without a round trip, as client-go's recorder does.
            name: Some(format!("{name}.{:016x}", rand::random::<u64>())),
            namespace: involved.namespace.clone(),
            ..Default::default()
        },
        involved_object: involved,
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(match severity {
            Severity::Normal => "Normal".into(),
            Severity::Warning => "Warning".into(),
        }),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource {
            component: Some(component.into()),
            host: None,
        }),
        reporting_component: Some(component.into()),
        ..Default::default()
    }
}

/// Writes an Event, logging (not returning) a failure.
pub async fn record(fed: &Client, event: Event) {
    let ns = event.metadata.namespace.clone().unwrap_or_default();
    let reason = event.reason.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(fed.clone(), &ns);
    match tokio::time::timeout(
        Duration::from_secs(5),
        api.create(&PostParams::default(), &event),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => tracing::debug!(%error, reason, "event not written"),
        Err(_) => tracing::debug!(reason, "event write timed out"),
    }
}

/// Event writes in flight at most: beyond that, recording waits (back-pressure on the
/// caller) instead of piling up unbounded tasks.
static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(256);

/// Like [`record`], but the caller does not wait for the federation's answer, only for a
/// free slot among the writes in flight.
pub async fn record_in_background(fed: &Client, event: Event) {
    let Ok(permit) = IN_FLIGHT.acquire().await else {
        return;
    };
    let fed = fed.clone();
    tokio::spawn(async move {
        record(&fed, event).await;
        drop(permit);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_shape() {
        let e = build(
            ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Service".into()),
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            "c",
            Severity::Warning,
            "Conflict",
            "m",
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(e.involved_object.kind.as_deref(), Some("Service"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reporting_component.as_deref(), Some("c"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web."))
        );
    }
}

//! Kubernetes Events on federated workloads: pushes, drift reverts, conflicts, failures and
//! member cleanup (best effort: a lost Event never blocks propagation).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use super::kinds::WorkloadKey;

/// The component name on every Event this controller writes.
pub const COMPONENT: &str = "meridian-workload-controller";

/// Whether an Event reports normal progress or a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An Event about a federated workload.
pub fn build(
    key: &WorkloadKey,
    uid: &str,
    severity: Severity,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Event {
    Event {
        metadata: ObjectMeta {
            // Unique without a round trip, as client-go's recorder does.
            name: Some(format!("{}.{:016x}", key.name, rand::random::<u64>())),
            namespace: Some(key.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some(key.kind.as_str().into()),
            name: Some(key.name.clone()),
            namespace: Some(key.namespace.clone()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            ..Default::default()
        },
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
            component: Some(COMPONENT.into()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.into()),
        ..Default::default()
    }
}

/// Event writes in flight at most: beyond that, recording waits (back-pressure on the
/// worker) instead of piling up unbounded tasks.
static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(256);

/// Writes an Event in the background, logging (not returning) a failure: the worker that
/// records it does not wait for the federation's answer.
pub async fn record(
    fed: &Client,
    key: &WorkloadKey,
    uid: &str,
    severity: Severity,
    reason: &str,
    message: &str,
) {
    let ev = build(key, uid, severity, reason, message, jiff::Timestamp::now());
    let Ok(permit) = IN_FLIGHT.acquire().await else {
        return;
    };
    let api: Api<Event> = Api::namespaced(fed.clone(), &key.namespace);
    let key = key.to_string();
    let reason = reason.to_string();
    tokio::spawn(async move {
        match tokio::time::timeout(
            Duration::from_secs(5),
            api.create(&PostParams::default(), &ev),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::debug!(%key, %error, reason, "event not written"),
            Err(_) => tracing::debug!(%key, reason, "event write timed out"),
        }
        drop(permit);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::kinds::Kind;

    #[test]
    fn event_shape() {
        let key = WorkloadKey::new(Kind::Deployment, "shop", "web");
        let e = build(
            &key,
            "u",
            Severity::Warning,
            "Conflict",
            "m",
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(e.involved_object.kind.as_deref(), Some("Deployment"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("u"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("web."))
        );
    }
}

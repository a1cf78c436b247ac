//! Kubernetes Events on federated workloads: pushes, drift reverts, conflicts, failures and
//! member cleanup (best effort: a lost Event never blocks propagation).

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use kube::Client;

use super::kinds::WorkloadKey;
pub use crate::events::Severity;

/// The component name on every Event this controller writes.
pub const COMPONENT: &str = "meridian-workload-controller";

/// An Event about a federated workload.
pub fn build(
    key: &WorkloadKey,
    uid: &str,
    severity: Severity,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Event {
    let involved = ObjectReference {
        api_version: Some("apps/v1".into()),
        kind: Some(key.kind.as_str().into()),
        name: Some(key.name.clone()),
        namespace: Some(key.namespace.clone()),
        uid: (!uid.is_empty()).then(|| uid.to_string()),
        ..Default::default()
    };
    crate::events::build(involved, COMPONENT, severity, reason, message, now)
}

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
    crate::events::record_in_background(fed, ev).await;
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

//! The Events both controllers write about the federated objects they look after.

use k8s_openapi::api::core::v1::ObjectReference;
use meridian_runtime::events::{EventSpec, EventType};

/// A reference to the namespaced federated object `namespace/name` of `kind`
/// (`api_version`); `uid` is left out when empty (not known yet).
pub fn regarding(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: &str,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: (!uid.is_empty()).then(|| uid.to_string()),
        ..Default::default()
    }
}

/// An Event about `regarding`.
pub fn event(
    regarding: ObjectReference,
    type_: EventType,
    reason: &str,
    message: &str,
) -> EventSpec {
    EventSpec {
        regarding,
        type_,
        reason: reason.into(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_uid_is_left_out() {
        let r = regarding("v1", "Service", "shop", "web", "");
        assert_eq!(r.uid, None);
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref()),
            (Some("Service"), Some("shop"), Some("web"))
        );
        let e = event(
            regarding("apps/v1", "Deployment", "shop", "web", "u1"),
            EventType::Warning,
            "SyncFailed",
            "boom",
        );
        assert_eq!(e.regarding.uid.as_deref(), Some("u1"));
        assert_eq!(
            (e.reason.as_str(), e.message.as_str()),
            ("SyncFailed", "boom")
        );
    }
}

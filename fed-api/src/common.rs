//! Small value types shared by several kinds: conditions and references.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// A condition in the Kubernetes style (`type`, `status`, `reason`, `message`, times).
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, e.g. `Ready` or `Scheduled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason for the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the condition was last checked (RFC 3339).
    pub last_probe_time: Option<String>,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: Option<String>,
}

impl Condition {
    /// This condition as an entry of a strategic merge patch: every field named, `null` for
    /// the empty ones. Conditions merge by `type`, and a field the patch leaves out is kept,
    /// so without the `null`s a condition going from `Progressing` to `InSync` would keep
    /// the old message.
    pub fn patch_entry(&self) -> serde_json::Value {
        fn text(s: &str) -> Option<&str> {
            (!s.is_empty()).then_some(s)
        }
        serde_json::json!({
            "type": self.type_,
            "status": self.status,
            "reason": text(&self.reason),
            "message": text(&self.message),
            "lastProbeTime": self.last_probe_time,
            "lastTransitionTime": self.last_transition_time,
        })
    }
}

/// A reference to a namespaced object by namespace and name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedName {
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::Condition;

    #[test]
    fn a_patch_entry_names_every_field() {
        let c = Condition {
            type_: "Propagated".into(),
            status: "True".into(),
            reason: "InSync".into(),
            last_transition_time: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        assert_eq!(
            c.patch_entry(),
            serde_json::json!({"type": "Propagated", "status": "True", "reason": "InSync",
                "message": null, "lastProbeTime": null,
                "lastTransitionTime": "2026-01-01T00:00:00Z"})
        );
    }
}

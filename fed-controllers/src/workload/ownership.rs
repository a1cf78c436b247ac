//! Whether Meridian may write an object found in a member: only when it carries both of
//! Meridian's labels. Anything else is someone else's and is reported as a conflict.

use serde_json::Value;

use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};

/// Who holds a name in a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Nothing there: Meridian may create it.
    Absent,
    /// Meridian's, for the federated object with this uid.
    Managed {
        /// The owner-uid label's value.
        owner_uid: String,
    },
    /// Someone else's: never overwritten.
    Foreign,
}

/// Classifies what a member holds under the name Meridian wants.
pub fn check(existing: Option<&Value>) -> Ownership {
    let Some(obj) = existing else {
        return Ownership::Absent;
    };
    let labels = &obj["metadata"]["labels"];
    let managed = labels[MANAGED_BY_LABEL].as_str() == Some(MANAGED_BY_VALUE);
    match labels[OWNER_UID_LABEL].as_str() {
        Some(uid) if managed && !uid.is_empty() => Ownership::Managed {
            owner_uid: uid.to_string(),
        },
        _ => Ownership::Foreign,
    }
}

/// Whether an object in a member is Meridian's copy of the federated object with `uid`.
pub fn owned_by(obj: &Value, uid: &str) -> bool {
    matches!(check(Some(obj)), Ownership::Managed { owner_uid } if owner_uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table() {
        let with = |labels: Value| json!({"metadata": {"name": "web", "labels": labels}});
        let cases = [
            ("absent", None, Ownership::Absent),
            (
                "no labels",
                Some(json!({"metadata": {"name": "web"}})),
                Ownership::Foreign,
            ),
            (
                "managed by someone else",
                Some(with(
                    json!({MANAGED_BY_LABEL: "helm", OWNER_UID_LABEL: "u"}),
                )),
                Ownership::Foreign,
            ),
            (
                "ours without owner",
                Some(with(json!({MANAGED_BY_LABEL: "meridian"}))),
                Ownership::Foreign,
            ),
            (
                "owner without managed-by",
                Some(with(json!({OWNER_UID_LABEL: "u"}))),
                Ownership::Foreign,
            ),
            (
                "empty owner",
                Some(with(
                    json!({MANAGED_BY_LABEL: "meridian", OWNER_UID_LABEL: ""}),
                )),
                Ownership::Foreign,
            ),
            (
                "ours",
                Some(with(
                    json!({MANAGED_BY_LABEL: "meridian", OWNER_UID_LABEL: "u"}),
                )),
                Ownership::Managed {
                    owner_uid: "u".into(),
                },
            ),
        ];
        for (name, obj, want) in cases {
            assert_eq!(check(obj.as_ref()), want, "{name}");
        }
        let ours = with(json!({MANAGED_BY_LABEL: "meridian", OWNER_UID_LABEL: "u"}));
        assert!(owned_by(&ours, "u"));
        assert!(!owned_by(&ours, "v"));
    }
}

//! The part of `Cluster.status` this controller owns, and the merge patch that writes it.
//!
//! `lbAgent` and condition types other than `Ready`/`Offline` belong to others and are
//! left as they are.

use fed_api::ClusterStatus;
use fed_api::cluster::{ApiEnablement, NodeSummary, ResourceSummary};
use fed_api::common::Condition;

use super::conditions::{OFFLINE, READY};

/// The fields of `Cluster.status` written here. `None` means "not known yet": it is
/// left out of the patch, so an unreachable member keeps its last known version and
/// capacity instead of having them blanked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owned {
    /// All conditions (ours replaced, others' kept).
    pub conditions: Vec<Condition>,
    /// `/version` gitVersion.
    pub kubernetes_version: Option<String>,
    /// Served group-versions.
    pub api_enablements: Option<Vec<ApiEnablement>>,
    /// Node counts.
    pub nodes: Option<NodeSummary>,
    /// Capacity.
    pub resource_summary: Option<ResourceSummary>,
}

impl Owned {
    /// What an existing status holds of the owned fields.
    pub fn of(status: Option<&ClusterStatus>) -> Owned {
        let Some(s) = status else {
            return Owned::default();
        };
        Owned {
            conditions: s.conditions.clone(),
            kubernetes_version: s.kubernetes_version.clone(),
            api_enablements: (!s.api_enablements.is_empty()).then(|| s.api_enablements.clone()),
            nodes: s.nodes,
            resource_summary: s.resource_summary.clone(),
        }
    }

    /// Whether writing `self` would change `current` (fields we do not know yet are
    /// not written, so they do not count).
    pub fn differs_from(&self, current: &Owned) -> bool {
        self.conditions != current.conditions
            || (self.kubernetes_version.is_some()
                && self.kubernetes_version != current.kubernetes_version)
            || (self.api_enablements.is_some() && self.api_enablements != current.api_enablements)
            || (self.nodes.is_some() && self.nodes != current.nodes)
            || (self.resource_summary.is_some()
                && self.resource_summary != current.resource_summary)
    }

    /// The JSON merge patch for the `/status` subresource. Conditions are a list, which
    /// merge patch replaces whole: that is why they carry others' conditions too.
    pub fn patch(&self) -> serde_json::Value {
        let mut status = serde_json::Map::new();
        status.insert("conditions".into(), serde_json::json!(self.conditions));
        if let Some(v) = &self.kubernetes_version {
            status.insert("kubernetesVersion".into(), serde_json::json!(v));
        }
        if let Some(v) = &self.api_enablements {
            status.insert("apiEnablements".into(), serde_json::json!(v));
        }
        if let Some(v) = &self.nodes {
            status.insert("nodes".into(), serde_json::json!(v));
        }
        if let Some(v) = &self.resource_summary {
            status.insert("resourceSummary".into(), serde_json::json!(v));
        }
        serde_json::json!({ "status": status })
    }
}

/// The object's conditions with our `Ready` and `Offline` put in place (order kept).
pub fn merge_conditions(current: &[Condition], ours: &[Condition]) -> Vec<Condition> {
    let mine = |t: &str| t == READY || t == OFFLINE;
    let mut out: Vec<Condition> = current
        .iter()
        .map(|c| {
            if mine(&c.type_) {
                ours.iter()
                    .find(|o| o.type_ == c.type_)
                    .unwrap_or(c)
                    .clone()
            } else {
                c.clone()
            }
        })
        .collect();
    for o in ours {
        if !out.iter().any(|c| c.type_ == o.type_) {
            out.push(o.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(t: &str, s: &str) -> Condition {
        Condition {
            type_: t.into(),
            status: s.into(),
            ..Default::default()
        }
    }

    #[test]
    fn conditions_merge_keeps_others() {
        let current = vec![c("Custom", "True"), c(READY, "False")];
        let ours = vec![c(READY, "True"), c(OFFLINE, "False")];
        assert_eq!(
            merge_conditions(&current, &ours),
            vec![c("Custom", "True"), c(READY, "True"), c(OFFLINE, "False")]
        );
    }

    #[test]
    fn unknown_fields_are_not_written_or_compared() {
        let current = Owned {
            kubernetes_version: Some("v1.34.2".into()),
            ..Default::default()
        };
        let desired = Owned::default();
        assert!(!desired.differs_from(&current));
        let patch = desired.patch();
        assert!(patch["status"].get("kubernetesVersion").is_none());
        assert!(patch["status"].get("lbAgent").is_none());
        let newer = Owned {
            kubernetes_version: Some("v1.35.0".into()),
            ..Default::default()
        };
        assert!(newer.differs_from(&current));
        assert_eq!(newer.patch()["status"]["kubernetesVersion"], "v1.35.0");
    }

    #[test]
    fn patch_uses_api_field_names() {
        let o = Owned {
            conditions: vec![c(READY, "True")],
            nodes: Some(NodeSummary { total: 3, ready: 2 }),
            resource_summary: Some(ResourceSummary::default()),
            api_enablements: Some(vec![ApiEnablement {
                group_version: "apps/v1".into(),
                resources: vec!["deployments".into()],
            }]),
            kubernetes_version: None,
        };
        let p = o.patch();
        assert_eq!(
            p["status"]["nodes"],
            serde_json::json!({"total": 3, "ready": 2})
        );
        assert_eq!(p["status"]["apiEnablements"][0]["groupVersion"], "apps/v1");
        assert_eq!(p["status"]["conditions"][0]["type"], "Ready");
        assert!(p["status"]["resourceSummary"].get("allocatable").is_some());
    }
}

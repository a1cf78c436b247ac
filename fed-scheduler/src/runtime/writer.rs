//! Placement writes against the federation API, each bounded by a timeout, with the
//! outcomes the reconciler acts on (409 and 404 mean "re-read and try again").

use std::time::Duration;

use fed_api::Placement;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::desired::SCHEDULED;

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// 409: the object changed (or already exists) since it was read.
    #[error("{0}: conflict")]
    Conflict(&'static str),
    /// 404: the object is gone.
    #[error("{0}: not found")]
    NotFound(&'static str),
    /// The API did not answer within the timeout.
    #[error("{0}: timed out")]
    Timeout(&'static str),
    /// Any other failure.
    #[error("{op}")]
    Api {
        /// The operation.
        op: &'static str,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Writes Placements.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    timeout: Duration,
}

impl Writer {
    /// A writer using `client`, giving each request `timeout`.
    pub fn new(client: Client, timeout: Duration) -> Self {
        Self { client, timeout }
    }

    fn api(&self, namespace: &str) -> Api<Placement> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn run<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, WriteError> {
        match tokio::time::timeout(self.timeout, f).await {
            Err(_) => Err(WriteError::Timeout(op)),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => Err(WriteError::Conflict(op)),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Err(WriteError::NotFound(op)),
            Ok(Err(source)) => Err(WriteError::Api { op, source }),
        }
    }

    /// Creates a Placement with its first status: the federation keeps a Placement's status
    /// on create, so the decision and the condition explaining it are one write.
    pub async fn create(&self, p: &Placement) -> Result<Placement, WriteError> {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let api = self.api(&ns);
        self.run("create", api.create(&PostParams::default(), p))
            .await
    }

    /// Merge-patches metadata/spec (the scheduler owns both parts it patches).
    pub async fn patch(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<Placement, WriteError> {
        let api = self.api(namespace);
        self.run(
            "patch",
            api.patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )
        .await
    }

    /// Deletes a Placement (one for an object no policy governs any more).
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<(), WriteError> {
        let api = self.api(namespace);
        self.run(
            "delete",
            api.delete(name, &kube::api::DeleteParams::default()),
        )
        .await
        .map(|_| ())
    }

    /// Writes the scheduler's part of `p.status`: its `Scheduled` condition,
    /// `unschedulable` and `policy`. A strategic merge patch merges conditions by type, so the workload
    /// controller's condition and per-cluster entries stay as they are whatever version
    /// either writer last saw; nothing to pin, nothing to conflict.
    pub async fn write_status(&self, p: &Placement) -> Result<Placement, WriteError> {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let patch = status_patch(p);
        let api = self.api(&ns);
        self.run(
            "status",
            api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)),
        )
        .await
    }
}

/// The strategic merge patch of [`Writer::write_status`]: the `Scheduled` condition,
/// `unschedulable` and `policy` (`null` removes them), nothing else.
fn status_patch(p: &Placement) -> serde_json::Value {
    let status = p.status.as_ref();
    let ours: Vec<_> = status
        .into_iter()
        .flat_map(|s| &s.conditions)
        .filter(|c| c.type_ == SCHEDULED)
        .map(|c| c.patch_entry())
        .collect();
    // Named in full (an empty reasons list too), so nothing of the previous one is kept.
    let unschedulable = status
        .and_then(|s| s.unschedulable.as_ref())
        .map(|u| serde_json::json!({"replicas": u.replicas, "reasons": u.reasons}));
    // Replaced whole (`null` removes it): the choice is recomputed on every decision.
    let policy = status.and_then(|s| s.policy.as_ref());
    serde_json::json!({
        "status": {"conditions": ours, "unschedulable": unschedulable, "policy": policy},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn the_status_patch_holds_only_the_schedulers_fields() {
        let p: Placement = serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Placement",
            "metadata": {"name": "deployment-web", "namespace": "shop", "resourceVersion": "41"},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1"}},
            "status": {"conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"},
                                      {"type": "Propagated", "status": "True", "reason": "InSync"}],
                       "clusters": [{"cluster": "a", "replicas": 3}]}
        }))
        .unwrap();
        let patch = status_patch(&p);
        assert!(patch.get("metadata").is_none(), "unpinned: {patch}");
        let conditions = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(
            conditions.len(),
            1,
            "the Propagated condition is not ours: {patch}"
        );
        assert_eq!(conditions[0]["type"], "Scheduled");
        assert!(
            conditions[0]["message"].is_null() && conditions[0].get("message").is_some(),
            "an empty field is named as null, so the stored one is dropped: {patch}"
        );
        assert_eq!(patch["status"]["unschedulable"], Value::Null);
        assert!(
            patch["status"].get("clusters").is_none(),
            "the entries are the workload controller's: {patch}"
        );
    }
}

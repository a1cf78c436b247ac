//! The bench's side of the members: watching their Deployments cheaply, and playing their
//! controllers where they are API-only (writing the status a copy reports once its pods
//! are Ready).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::core::Object;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

/// A Deployment's `spec.replicas` and `status.readyReplicas`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replicas {
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
}

/// A Deployment decoded only as far as the benches read it, so decoding every member
/// write costs the bench little beside the processes it measures.
pub type SlimDeployment = Object<Replicas, Replicas>;

/// The resource of [`SlimDeployment`].
pub fn deployments() -> ApiResource {
    ApiResource::erase::<Deployment>(&())
}

/// `(spec.replicas, status.readyReplicas)` of a Deployment, with Kubernetes' defaults.
pub fn counts(d: &SlimDeployment) -> (i32, i32) {
    let ready = d.status.as_ref().and_then(|s| s.ready_replicas);
    (d.spec.replicas.unwrap_or(1), ready.unwrap_or(0))
}

/// A copy that appeared in a member: which member, its name, generation and replicas.
pub type Appeared = (usize, String, i64, i32);

/// In API-only runs, plays the members' controllers for each copy that appears until
/// [`ReadyResponder::stop`]: a delay after the copy appears (its pods starting), it writes
/// the status the member's Deployment controller would once they are Ready. Each member's
/// watch holds a clone.
#[derive(Clone)]
pub struct ReadyResponder {
    on: Arc<AtomicBool>,
    tx: tokio::sync::mpsc::UnboundedSender<Appeared>,
}

impl ReadyResponder {
    /// Answers for `members` (indexed as [`Appeared`]'s member) in namespace `ns`, at most
    /// `concurrency` status writes in flight.
    pub fn start(
        members: Vec<kube::Client>,
        ns: &str,
        delay: Duration,
        concurrency: usize,
    ) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Appeared>();
        let apis: Vec<Api<Deployment>> = members
            .into_iter()
            .map(|c| Api::namespaced(c, ns))
            .collect();
        let sem = Arc::new(Semaphore::new(concurrency));
        tokio::spawn(async move {
            while let Some((member, name, generation, replicas)) = rx.recv().await {
                let due = tokio::time::Instant::now() + delay;
                let api = apis[member].clone();
                let sem = sem.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(due).await;
                    let _permit = sem.acquire().await.unwrap();
                    let status = json!({"status": {
                        "observedGeneration": generation, "replicas": replicas,
                        "updatedReplicas": replicas, "readyReplicas": replicas,
                        "availableReplicas": replicas}});
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                        .await
                        .unwrap_or_else(|e| panic!("status of {name} in member {member}: {e}"));
                });
            }
        });
        Self {
            on: Arc::new(AtomicBool::new(true)),
            tx,
        }
    }

    /// Copies that appear from now on are left as they are.
    pub fn stop(&self) {
        self.on.store(false, Ordering::Relaxed);
    }

    /// Called by a member's watch for each copy it sees for the first time.
    pub fn appeared(&self, copy: Appeared) {
        if self.on.load(Ordering::Relaxed) {
            let _ = self.tx.send(copy);
        }
    }
}

/// A Deployment in `ns` of `replicas` small pods, labelled `group` (what the benches'
/// policies select).
pub fn deployment(ns: &str, name: &str, group: &str, replicas: i32) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name, "group": group}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "app:1",
                                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}
    }))
    .unwrap()
}

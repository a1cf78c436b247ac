//! The bench's side of the members: watching their Deployments cheaply, and playing their
//! controllers where they are API-only (writing the status a copy reports once its pods
//! are Ready).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::core::Object;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

/// A Deployment's `spec.replicas`, and `status.readyReplicas` and `observedGeneration`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replicas {
    pub replicas: Option<i32>,
    pub ready_replicas: Option<i32>,
    pub observed_generation: Option<i64>,
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

/// A copy generation to answer: which member, the copy's name, generation and replicas.
type Unobserved = (usize, String, i64, i32);

/// In API-only runs, plays the members' controllers until [`ReadyResponder::stop`]: a delay
/// after a copy appears or its spec changes (its pods starting), it writes the status the
/// member's Deployment controller would once they are Ready, for that generation. Each
/// member's watch holds a clone.
#[derive(Clone)]
pub struct ReadyResponder {
    on: Arc<AtomicBool>,
    tx: tokio::sync::mpsc::UnboundedSender<Unobserved>,
    /// The generations answered, so each gets one status write.
    answered: Arc<Mutex<HashSet<(usize, String, i64)>>>,
}

impl ReadyResponder {
    /// Answers for `members` (indexed as the watches name them) in namespace `ns`, at most
    /// `concurrency` status writes in flight.
    pub fn start(
        members: Vec<kube::Client>,
        ns: &str,
        delay: Duration,
        concurrency: usize,
    ) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Unobserved>();
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
            answered: Arc::default(),
        }
    }

    /// Copies that appear from now on are left as they are.
    pub fn stop(&self) {
        self.on.store(false, Ordering::Relaxed);
    }

    /// Called by `member`'s watch for every copy it sees: a generation the member's
    /// controller has not observed yet (a new copy, or a changed spec) is answered once.
    pub fn observe(&self, member: usize, d: &SlimDeployment) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let generation = d.metadata.generation.unwrap_or(1);
        let observed = d.status.as_ref().and_then(|s| s.observed_generation);
        if observed.is_some_and(|o| o >= generation) {
            return;
        }
        let name = d.metadata.name.clone().unwrap_or_default();
        if !self
            .answered
            .lock()
            .unwrap()
            .insert((member, name.clone(), generation))
        {
            return;
        }
        let _ = self.tx.send((member, name, generation, counts(d).0));
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

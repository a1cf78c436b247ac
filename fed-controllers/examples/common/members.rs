//! The bench's side of the members: watching their Deployments cheaply, and playing their
//! controllers where they are API-only (writing the status a Deployment, StatefulSet or
//! Job copy reports once its pods are Ready).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::Object;
use serde::Deserialize;
use serde_json::{Value, json};
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

/// A workload kind whose pods become Ready: what the benches measure status lag of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    Deployment,
    StatefulSet,
    Job,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Deployment, Workload::StatefulSet, Workload::Job];

    /// The workload kind named `kind`, if it is one.
    pub fn of(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|w| w.as_str() == kind)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Deployment => "Deployment",
            Workload::StatefulSet => "StatefulSet",
            Workload::Job => "Job",
        }
    }

    pub fn resource(self) -> ApiResource {
        match self {
            Workload::Deployment => ApiResource::erase::<Deployment>(&()),
            Workload::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
            Workload::Job => ApiResource::erase::<Job>(&()),
        }
    }

    /// `(pods wanted, pods ready)` of an object of this kind, with Kubernetes' defaults:
    /// `spec.replicas` and `status.readyReplicas`, a Job's `spec.parallelism` and
    /// `status.ready`.
    pub fn counts(self, o: &Value) -> (i32, i32) {
        let int = |v: &Value| v.as_i64().map(|n| n as i32);
        let (wanted, ready) = match self {
            Workload::Job => (&o["spec"]["parallelism"], &o["status"]["ready"]),
            _ => (&o["spec"]["replicas"], &o["status"]["readyReplicas"]),
        };
        (int(wanted).unwrap_or(1), int(ready).unwrap_or(0))
    }

    /// Whether the member's controller has answered the object's current generation: a
    /// Job's status has no `observedGeneration`, so its ready pods say it.
    fn answered(self, o: &Value) -> bool {
        match self {
            Workload::Job => {
                let (wanted, ready) = self.counts(o);
                ready == wanted
            }
            _ => {
                let generation = o["metadata"]["generation"].as_i64().unwrap_or(1);
                o["status"]["observedGeneration"]
                    .as_i64()
                    .is_some_and(|g| g >= generation)
            }
        }
    }

    /// The status the member's controller writes once `pods` pods of `generation` are
    /// Ready.
    fn ready_status(self, generation: i64, pods: i32) -> Value {
        match self {
            Workload::Deployment => json!({
                "observedGeneration": generation, "replicas": pods,
                "updatedReplicas": pods, "readyReplicas": pods, "availableReplicas": pods}),
            Workload::StatefulSet => json!({
                "observedGeneration": generation, "replicas": pods, "currentReplicas": pods,
                "updatedReplicas": pods, "readyReplicas": pods, "availableReplicas": pods}),
            Workload::Job => json!({"active": pods, "ready": pods}),
        }
    }
}

/// A copy generation to answer: which member, the copy's kind, name, generation and pods.
type Unobserved = (usize, Workload, String, i64, i32);

/// A copy generation answered: which member, the copy's kind, name and generation.
type Answered = (usize, Workload, String, i64);

/// In API-only runs, plays the members' controllers until [`ReadyResponder::stop`]: a delay
/// after a copy appears or its spec changes (its pods starting), it writes the status the
/// member's Deployment controller would once they are Ready, for that generation. Each
/// member's watch holds a clone.
#[derive(Clone)]
pub struct ReadyResponder {
    on: Arc<AtomicBool>,
    tx: tokio::sync::mpsc::UnboundedSender<Unobserved>,
    /// The generations answered, so each gets one status write.
    answered: Arc<Mutex<HashSet<Answered>>>,
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
        let ns = ns.to_owned();
        let sem = Arc::new(Semaphore::new(concurrency));
        tokio::spawn(async move {
            while let Some((member, kind, name, generation, pods)) = rx.recv().await {
                let due = tokio::time::Instant::now() + delay;
                let api: Api<DynamicObject> =
                    Api::namespaced_with(members[member].clone(), &ns, &kind.resource());
                let sem = sem.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(due).await;
                    let _permit = sem.acquire().await.unwrap();
                    let status = json!({"status": kind.ready_status(generation, pods)});
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                        .await
                        .unwrap_or_else(|e| {
                            panic!("status of {} {name} in member {member}: {e}", kind.as_str())
                        });
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
        self.answer(member, Workload::Deployment, name, generation, counts(d).0);
    }

    /// [`ReadyResponder::observe`] for a copy of any [`Workload`] kind, as its member's
    /// watch decoded it.
    pub fn observe_workload(&self, member: usize, kind: Workload, o: &Value) {
        if !self.on.load(Ordering::Relaxed) || kind.answered(o) {
            return;
        }
        let generation = o["metadata"]["generation"].as_i64().unwrap_or(1);
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.answer(member, kind, name, generation, kind.counts(o).0);
    }

    /// Answers generation `generation` of `member`'s copy `name` once: `pods` Ready.
    fn answer(&self, member: usize, kind: Workload, name: String, generation: i64, pods: i32) {
        if !self
            .answered
            .lock()
            .unwrap()
            .insert((member, kind, name.clone(), generation))
        {
            return;
        }
        let _ = self.tx.send((member, kind, name, generation, pods));
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

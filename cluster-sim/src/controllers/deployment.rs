//! The Deployment controller: one ReplicaSet per pod template (`{deploy}-{pod-template-hash}`),
//! rolled out with `RollingUpdate` (maxSurge rounded up, maxUnavailable rounded down, counted
//! on available pods) or `Recreate`, old ReplicaSets pruned beyond `revisionHistoryLimit`,
//! and the Deployment's status and `Available`/`Progressing` conditions as
//! `kubectl rollout status` reads them.
//!
//! The rollout arithmetic follows kube-controller-manager, with one deliberate difference:
//! pods are counted as the larger of a ReplicaSet's desired and observed replicas, so pods
//! still being removed from a scaled-down ReplicaSet never let the surge limit be exceeded.

use std::sync::Arc;

use apimachinery::selector::LabelSelector;
use meridian_apiserver::engine::{DeleteOptions, PatchType, Target, WriteOptions};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::util::{self, controller_of, i64_at, merge_condition, owner_ref, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// The label (and selector term) that ties a ReplicaSet and its pods to one template.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation with a ReplicaSet's (and its Deployment's) revision.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// The Deployment controller of one cluster.
pub(crate) struct DeploymentController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

/// What the controller needs of one owned ReplicaSet.
struct Rs {
    name: String,
    hash: Option<String>,
    revision: i64,
    spec: i64,
    replicas: i64,
    ready: i64,
    available: i64,
    deleting: bool,
    /// Whether the status reflects the current spec (`observedGeneration`).
    synced: bool,
}

impl Rs {
    fn from_value(v: &Value) -> Self {
        let st = |f: &str| i64_at(v, &format!("/status/{f}")).unwrap_or(0);
        Self {
            name: str_at(v, "/metadata/name").unwrap_or("").to_string(),
            hash: str_at(v, &format!("/metadata/labels/{POD_TEMPLATE_HASH}")).map(String::from),
            revision: v
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(REVISION))
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            spec: i64_at(v, "/spec/replicas").unwrap_or(0),
            replicas: st("replicas"),
            ready: st("readyReplicas"),
            available: st("availableReplicas"),
            deleting: util::is_deleting(v),
            synced: i64_at(v, "/status/observedGeneration").unwrap_or(0)
                >= i64_at(v, "/metadata/generation").unwrap_or(0),
        }
    }

    /// Pods this ReplicaSet may have now: desired or still present, whichever is more.
    fn pods(&self) -> i64 {
        self.spec.max(self.replicas)
    }
}

/// The `pod-template-hash` of a template: FNV-1a of its canonical JSON, safe-encoded.
pub fn pod_template_hash(template: &Value) -> String {
    util::safe_encode_hash(util::hash_value(template))
}

/// Resolves an int-or-percent against `total` (percentages round up or down).
pub(crate) fn int_or_percent(v: Option<&Value>, total: i64, round_up: bool, default: &str) -> i64 {
    let pct = |s: &str| -> Option<i64> {
        let p: i64 = s.strip_suffix('%')?.trim().parse().ok()?;
        let x = p * total;
        Some(if round_up {
            (x + 99).div_euclid(100)
        } else {
            x.div_euclid(100)
        })
    };
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => pct(s).or_else(|| s.parse().ok()).unwrap_or(0),
        _ => pct(default).unwrap_or(0),
    }
    .max(0)
}

/// `(maxSurge, maxUnavailable)` of a RollingUpdate Deployment with `replicas` replicas.
fn surge_and_unavailable(deploy: &Value, replicas: i64) -> (i64, i64) {
    let ru = deploy.pointer("/spec/strategy/rollingUpdate");
    let surge = int_or_percent(ru.and_then(|r| r.get("maxSurge")), replicas, true, "25%");
    let mut unavailable = int_or_percent(
        ru.and_then(|r| r.get("maxUnavailable")),
        replicas,
        false,
        "25%",
    );
    if surge == 0 && unavailable == 0 {
        // Both zero could never make progress; Kubernetes allows one unavailable.
        unavailable = 1;
    }
    (surge, unavailable.min(replicas))
}

/// Replicas the new ReplicaSet should have now during a rolling update.
fn new_rs_replicas(replicas: i64, surge: i64, new_spec: i64, all_pods: i64) -> i64 {
    if new_spec > replicas {
        return replicas;
    }
    let max_total = replicas + surge;
    if all_pods >= max_total {
        return new_spec;
    }
    new_spec + (max_total - all_pods).min(replicas - new_spec).max(0)
}

/// New `spec.replicas` for each old ReplicaSet (oldest first) during a rolling update:
/// unhealthy replicas go first, then available ones down to `replicas - maxUnavailable`.
fn scale_down_old(replicas: i64, unavailable: i64, new: Option<&Rs>, old: &[&Rs]) -> Vec<i64> {
    let mut specs: Vec<i64> = old.iter().map(|r| r.spec).collect();
    let old_pods: i64 = specs.iter().sum();
    if old_pods == 0 {
        return specs;
    }
    let min_available = replicas - unavailable;
    let new_spec = new.map_or(0, |r| r.spec);
    let all_pods = old.iter().map(|r| r.pods()).sum::<i64>() + new.map_or(0, Rs::pods);
    let new_unavailable = (new_spec - new.map_or(0, |r| r.available)).max(0);
    let mut budget = all_pods - min_available - new_unavailable;
    if budget <= 0 {
        return specs;
    }
    // Unhealthy replicas of old sets first: removing them costs no availability.
    for (i, r) in old.iter().enumerate() {
        if budget <= 0 {
            break;
        }
        let unhealthy = (specs[i] - r.available).max(0).min(budget);
        specs[i] -= unhealthy;
        budget -= unhealthy;
    }
    let available: i64 =
        old.iter().map(|r| r.available).sum::<i64>() + new.map_or(0, |r| r.available);
    let mut can_remove = (available - min_available).max(0);
    for (i, r) in old.iter().enumerate() {
        if can_remove <= 0 {
            break;
        }
        // Unhealthy ones removed above are not counted in `available`.
        let healthy = specs[i].min(r.available);
        let n = healthy.min(can_remove);
        specs[i] -= n;
        can_remove -= n;
    }
    specs
}

impl DeploymentController {
    fn on_deploy(&self, seen: Seen<'_>) {
        if let Seen::Upsert { obj, .. } = seen {
            self.queue.add(ns_key(obj.namespace(), obj.name()));
        }
    }

    fn on_rs(&self, seen: Seen<'_>) {
        if let Some(key) = super::controlling_owner(seen, "Deployment", None) {
            self.queue.add(key);
        }
    }

    async fn scale(
        &self,
        ns: &str,
        rs: &str,
        replicas: i64,
        extra: Option<Value>,
    ) -> Result<(), SimError> {
        let mut patch = json!({"spec": {"replicas": replicas}});
        if let Some(annotations) = extra {
            patch["metadata"] = json!({ "annotations": annotations });
        }
        self.sim
            .merge_patch(&self.sim.kinds.replica_sets, ns, rs, &patch, Target::Main)
            .await?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn create_rs(
        &self,
        deploy: &Value,
        ns: &str,
        name: &str,
        hash: &str,
        revision: i64,
        replicas: i64,
        max_replicas: i64,
    ) -> Result<(), SimError> {
        let mut template = deploy
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({}));
        template["metadata"]["labels"][POD_TEMPLATE_HASH] = Value::from(hash);
        let labels = template["metadata"]["labels"].clone();
        let mut selector = deploy
            .pointer("/spec/selector")
            .cloned()
            .unwrap_or_else(|| json!({}));
        selector["matchLabels"][POD_TEMPLATE_HASH] = Value::from(hash);
        let desired = i64_at(deploy, "/spec/replicas").unwrap_or(1);
        let mut spec = json!({
            "replicas": replicas,
            "selector": selector,
            "template": template,
        });
        if let Some(m) = deploy.pointer("/spec/minReadySeconds") {
            spec["minReadySeconds"] = m.clone();
        }
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{name}-{hash}"),
                "namespace": ns,
                "labels": labels,
                "annotations": {
                    REVISION: revision.to_string(),
                    DESIRED_REPLICAS: desired.to_string(),
                    MAX_REPLICAS: max_replicas.to_string(),
                },
                "ownerReferences": [owner_ref("apps/v1", "Deployment", deploy)],
            },
            "spec": spec,
        });
        self.sim
            .engine
            .create(
                &self.sim.kinds.replica_sets,
                ns,
                rs,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await?;
        Ok(())
    }

    /// Scales the rollout one step; returns whether anything was written.
    async fn rollout(
        &self,
        deploy: &Value,
        ns: &str,
        name: &str,
        hash: &str,
        new: Option<&Rs>,
        old: &[&Rs],
    ) -> Result<bool, SimError> {
        let replicas = i64_at(deploy, "/spec/replicas").unwrap_or(1).max(0);
        let max_old_revision = old.iter().map(|r| r.revision).max().unwrap_or(0);
        let recreate = str_at(deploy, "/spec/strategy/type") == Some("Recreate");
        let (surge, unavailable) = if recreate {
            (0, 0)
        } else {
            surge_and_unavailable(deploy, replicas)
        };
        // A new ReplicaSet, whichever strategy makes it, is the revision after every old one.
        let create_new = async |replicas: i64, max_replicas: i64| {
            let revision = max_old_revision + 1;
            self.create_rs(deploy, ns, name, hash, revision, replicas, max_replicas)
                .await
        };
        let desired_annotations = |revision: i64| {
            json!({
                REVISION: revision.to_string(),
                DESIRED_REPLICAS: replicas.to_string(),
                MAX_REPLICAS: (replicas + surge).to_string(),
            })
        };
        if recreate {
            let mut wrote = false;
            for r in old.iter().filter(|r| r.spec > 0) {
                self.scale(ns, &r.name, 0, None).await?;
                wrote = true;
            }
            if wrote || old.iter().any(|r| r.replicas > 0) {
                // Recreate: the new pods start only once every old pod is gone.
                return Ok(wrote);
            }
            return match new {
                None => {
                    create_new(replicas, replicas).await?;
                    Ok(true)
                }
                Some(n) if n.spec != replicas => {
                    self.scale(ns, &n.name, replicas, Some(desired_annotations(n.revision)))
                        .await?;
                    Ok(true)
                }
                Some(_) => Ok(false),
            };
        }
        let all_pods: i64 = old.iter().map(|r| r.pods()).sum::<i64>() + new.map_or(0, Rs::pods);
        match new {
            None => {
                let n = new_rs_replicas(replicas, surge, 0, all_pods);
                create_new(n, replicas + surge).await?;
                return Ok(true);
            }
            Some(n) => {
                let target = new_rs_replicas(replicas, surge, n.spec, all_pods);
                if target != n.spec {
                    self.scale(ns, &n.name, target, Some(desired_annotations(n.revision)))
                        .await?;
                    if target > n.spec {
                        return Ok(true);
                    }
                }
            }
        }
        let specs = scale_down_old(replicas, unavailable, new, old);
        let mut wrote = false;
        for (r, s) in old.iter().zip(specs) {
            if s != r.spec {
                self.scale(ns, &r.name, s, None).await?;
                wrote = true;
            }
        }
        Ok(wrote)
    }

    /// Deletes fully scaled-down old ReplicaSets beyond `revisionHistoryLimit`, oldest first.
    async fn prune(&self, deploy: &Value, ns: &str, old: &[&Rs]) -> Result<(), SimError> {
        let limit = i64_at(deploy, "/spec/revisionHistoryLimit")
            .unwrap_or(10)
            .max(0) as usize;
        let mut idle: Vec<&&Rs> = old
            .iter()
            .filter(|r| r.spec == 0 && r.replicas == 0 && !r.deleting)
            .collect();
        if idle.len() <= limit {
            return Ok(());
        }
        idle.sort_by(|a, b| (a.revision, &a.name).cmp(&(b.revision, &b.name)));
        for r in &idle[..idle.len() - limit] {
            let deleted = self
                .sim
                .engine
                .delete(
                    &self.sim.kinds.replica_sets,
                    ns,
                    &r.name,
                    &DeleteOptions::default(),
                )
                .await;
            super::done_unless_failed(deleted)?;
        }
        Ok(())
    }
}

/// The Deployment's status from its ReplicaSets.
fn deployment_status(deploy: &Value, new: Option<&Rs>, all: &[Rs], now: &str) -> Value {
    let replicas = i64_at(deploy, "/spec/replicas").unwrap_or(1).max(0);
    let sum = |f: fn(&Rs) -> i64| all.iter().map(f).sum::<i64>();
    let total = sum(|r| r.replicas);
    let updated = new.map_or(0, |r| r.replicas);
    let ready = sum(|r| r.ready);
    let available = sum(|r| r.available);
    let unavailable = (sum(|r| r.spec) - available).max(0);
    let generation = i64_at(deploy, "/metadata/generation").unwrap_or(0);
    let recreate = str_at(deploy, "/spec/strategy/type") == Some("Recreate");
    let max_unavailable = if recreate {
        replicas
    } else {
        surge_and_unavailable(deploy, replicas).1
    };
    let old = |t: &str| util::condition(deploy, t);
    let available_cond = if available >= replicas - max_unavailable {
        merge_condition(
            old("Available"),
            "Available",
            "True",
            Some("MinimumReplicasAvailable"),
            Some("Deployment has minimum availability."),
            now,
            true,
        )
    } else {
        merge_condition(
            old("Available"),
            "Available",
            "False",
            Some("MinimumReplicasUnavailable"),
            Some("Deployment does not have minimum availability."),
            now,
            true,
        )
    };
    let rs_name = new.map_or("", |r| r.name.as_str());
    let complete = updated == replicas && total == replicas && available == replicas;
    let progressing = if complete {
        merge_condition(
            old("Progressing"),
            "Progressing",
            "True",
            Some("NewReplicaSetAvailable"),
            Some(&format!(
                "ReplicaSet \"{rs_name}\" has successfully progressed."
            )),
            now,
            true,
        )
    } else {
        merge_condition(
            old("Progressing"),
            "Progressing",
            "True",
            Some("ReplicaSetUpdated"),
            Some(&format!("ReplicaSet \"{rs_name}\" is progressing.")),
            now,
            true,
        )
    };
    json!({
        "observedGeneration": generation,
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": unavailable,
        "conditions": [available_cond, progressing],
    })
}

impl Reconciler<String> for DeploymentController {
    const NAME: &'static str = "deployment";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self
            .sim
            .cache(&kinds.deployments)
            .get(&kinds.deployments.key(ns, name))
        else {
            return Ok(Requeue::No);
        };
        let deploy = cached.value();
        if util::is_deleting(&deploy) {
            return Ok(Requeue::No);
        }
        let selector =
            LabelSelector::from_json(deploy.pointer("/spec/selector").unwrap_or(&Value::Null))
                .map_err(|e| SimError::Invalid(format!("deployment {key} selector: {e}")))?;
        if selector.is_empty() {
            return Ok(Requeue::No);
        }
        let rs_cache = self.sim.cache(&kinds.replica_sets);
        let owned: Vec<Rs> = rs_cache
            .list(
                &kinds.replica_sets.namespace_prefix(Some(ns)),
                None,
                None,
                0,
                |c| c.owners.iter().any(|o| *o == cached.uid),
            )
            .items
            .iter()
            .map(|c| c.value())
            .filter(|v| controller_of(v, "Deployment").is_some_and(|(_, uid)| uid == &*cached.uid))
            .map(|v| Rs::from_value(&v))
            .collect();
        let template = deploy
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null);
        let hash = pod_template_hash(&template);
        let new = owned
            .iter()
            .find(|r| r.hash.as_deref() == Some(hash.as_str()));
        let mut old: Vec<&Rs> = owned
            .iter()
            .filter(|r| r.hash.as_deref() != Some(hash.as_str()))
            .collect();
        old.sort_by(|a, b| (a.revision, &a.name).cmp(&(b.revision, &b.name)));
        let paused = deploy.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);

        // Counting on a ReplicaSet status that predates its last scale would let a second
        // pass remove the same pods again; its status event brings us back.
        let settled = owned.iter().all(|r| r.synced);
        if !paused && settled {
            // A template seen before (a rollback) becomes the newest revision again.
            let max_old = old.iter().map(|r| r.revision).max().unwrap_or(0);
            if let Some(n) = new
                && n.revision <= max_old
            {
                let patch =
                    json!({"metadata": {"annotations": {REVISION: (max_old + 1).to_string()}}});
                self.sim
                    .engine
                    .patch(
                        &kinds.replica_sets,
                        ns,
                        &n.name,
                        PatchType::Merge,
                        &patch,
                        Target::Main,
                        &WriteOptions::by(super::CONTROLLER_MANAGER),
                    )
                    .await?;
                return Ok(Requeue::No);
            }
            if self.rollout(&deploy, ns, name, &hash, new, &old).await? {
                // Our writes come back as ReplicaSet events; status follows then.
                return Ok(Requeue::No);
            }
            let complete_rollout = old.iter().all(|r| r.spec == 0 && r.replicas == 0);
            if complete_rollout {
                self.prune(&deploy, ns, &old).await?;
            }
            if let Some(n) = new {
                let current = deploy
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(REVISION))
                    .and_then(Value::as_str);
                let want = n.revision.to_string();
                if current != Some(want.as_str()) {
                    let patch = json!({"metadata": {"annotations": {REVISION: want}}});
                    self.sim
                        .merge_patch(&kinds.deployments, ns, name, &patch, Target::Main)
                        .await?;
                    return Ok(Requeue::No);
                }
            }
        }

        let status = deployment_status(&deploy, new, &owned, &self.sim.now_rfc3339());
        if deploy.get("status") != Some(&status) {
            let patch = json!({ "status": status });
            let written = self
                .sim
                .merge_patch(&kinds.deployments, ns, name, &patch, Target::Status)
                .await;
            super::done_unless_failed(written)?;
        }
        Ok(Requeue::No)
    }
}

/// Spawns the Deployment controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(DeploymentController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let (a, b) = (c.clone(), c.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.deployments), move |e| a.on_deploy(e)),
        super::spawn_watch(sim.cache(&sim.kinds.replica_sets), move |e| b.on_rs(e)),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(spec: i64, replicas: i64, available: i64) -> Rs {
        Rs {
            name: format!("rs-{spec}-{available}"),
            hash: None,
            revision: 1,
            spec,
            replicas,
            ready: available,
            available,
            deleting: false,
            synced: true,
        }
    }

    #[test]
    fn percentages_round_as_kubernetes() {
        let d = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}}});
        assert_eq!(surge_and_unavailable(&d, 5), (2, 1));
        assert_eq!(surge_and_unavailable(&d, 1), (1, 0));
        let zero =
            json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}}});
        assert_eq!(surge_and_unavailable(&zero, 3), (0, 1));
        assert_eq!(surge_and_unavailable(&json!({}), 10), (3, 2));
    }

    #[test]
    fn new_set_grows_within_surge() {
        assert_eq!(new_rs_replicas(5, 2, 0, 5), 2);
        assert_eq!(new_rs_replicas(5, 2, 2, 7), 2);
        assert_eq!(new_rs_replicas(5, 2, 0, 0), 5);
        assert_eq!(new_rs_replicas(5, 2, 7, 7), 5);
    }

    #[test]
    fn old_sets_shrink_within_unavailability() {
        // 5 replicas, maxUnavailable 1: old has 5 available, new 2 not yet available.
        let new = rs(2, 2, 0);
        let old = rs(5, 5, 5);
        assert_eq!(scale_down_old(5, 1, Some(&new), &[&old]), vec![4]);
        // New pods available: old can shrink by what stays above 4 available.
        let new = rs(2, 2, 2);
        assert_eq!(scale_down_old(5, 1, Some(&new), &[&old]), vec![2]);
        // Unhealthy old replicas go first.
        let sick = rs(3, 3, 1);
        assert_eq!(scale_down_old(3, 0, Some(&rs(1, 1, 1)), &[&sick]), vec![2]);
    }

    #[test]
    fn template_hash_is_stable() {
        let t = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        assert_eq!(pod_template_hash(&t), pod_template_hash(&t.clone()));
        let mut t2 = t.clone();
        t2["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert_ne!(pod_template_hash(&t), pod_template_hash(&t2));
    }
}

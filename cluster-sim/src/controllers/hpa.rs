//! The horizontal pod autoscaler: for each `autoscaling/v2` HorizontalPodAutoscaler (v1 ones
//! are the same stored objects) it reads its `scaleTargetRef` workload's replicas (a
//! Deployment, StatefulSet or ReplicaSet of `apps/v1`), recommends a count, scales the target
//! when they differ and reports `currentReplicas`, `desiredReplicas`, `lastScaleTime`,
//! `observedGeneration` and the conditions `AbleToScale`, `ScalingActive` and
//! `ScalingLimited` with upstream's reasons.
//!
//! The sim has no metrics: the recommendation is the target's current count unless a
//! simulated load forces one ([`HpaRecommendations`], `cluster-sim ctl hpa-desired`), and
//! either is clamped into `[minReplicas, maxReplicas]`. Upstream's scaling rates and
//! stabilization windows (`spec.behavior`) are not simulated: a forced count is reached in
//! one step. Memory per HPA: its forced count, if any.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::util::{self, condition, i64_at, lock, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};
use meridian_apiserver::engine::Target;

/// Recommendations forced on HPAs (a stand-in for metrics), by `namespace/name`.
#[derive(Default)]
pub struct HpaRecommendations {
    forced: Mutex<HashMap<String, i64>>,
    /// The HPA loop's queue, once it runs: a changed recommendation is acted on at once.
    queue: OnceLock<Arc<WorkQueue<String>>>,
}

impl HpaRecommendations {
    /// Forces the recommendation of one HPA (`None`: back to the target's own count).
    pub fn set(&self, namespace: &str, hpa: &str, replicas: Option<i64>) {
        let key = ns_key(namespace, hpa);
        {
            let mut forced = lock(&self.forced);
            match replicas {
                Some(n) => forced.insert(key.clone(), n),
                None => forced.remove(&key),
            };
        }
        if let Some(q) = self.queue.get() {
            q.add(key);
        }
    }

    /// The recommendation forced on an HPA, if any.
    pub fn forced(&self, namespace: &str, hpa: &str) -> Option<i64> {
        lock(&self.forced).get(&ns_key(namespace, hpa)).copied()
    }
}

/// One condition as the decision states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cond {
    pub ty: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

fn cond(ty: &'static str, status: &'static str, reason: &'static str, message: String) -> Cond {
    Cond {
        ty,
        status,
        reason,
        message,
    }
}

/// What one pass of an HPA decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// The target's count as read (`None`: no target to read, status counts unchanged).
    pub current: Option<i64>,
    /// The count the HPA wants.
    pub desired: Option<i64>,
    /// Whether to write `desired` into the target.
    pub rescale: bool,
    /// The conditions to set (others are kept as they are).
    pub conditions: Vec<Cond>,
}

/// The decision for an HPA with `min` (default 1) and `max` replicas whose target has
/// `current` replicas (`Err`: why its scale could not be read), with a `forced`
/// recommendation or none. Upstream's order: a target at zero disables scaling; otherwise
/// the recommendation is clamped, and the target is scaled when the result differs.
pub(crate) fn decide(
    min: i64,
    max: i64,
    current: Result<i64, String>,
    forced: Option<i64>,
) -> Decision {
    let current = match current {
        Ok(n) => n,
        Err(why) => {
            return Decision {
                current: None,
                desired: None,
                rescale: false,
                conditions: vec![cond(
                    "AbleToScale",
                    "False",
                    "FailedGetScale",
                    format!(
                        "the HPA controller was unable to get the target's current scale: {why}"
                    ),
                )],
            };
        }
    };
    if current == 0 && min != 0 {
        return Decision {
            current: Some(0),
            desired: Some(0),
            rescale: false,
            conditions: vec![cond(
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            )],
        };
    }
    let recommended = forced.unwrap_or(current);
    let (desired, limited) = if recommended < min {
        (
            min,
            cond(
                "ScalingLimited",
                "True",
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count".into(),
            ),
        )
    } else if recommended > max {
        (
            max,
            cond(
                "ScalingLimited",
                "True",
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count".into(),
            ),
        )
    } else {
        (
            recommended,
            cond(
                "ScalingLimited",
                "False",
                "DesiredWithinRange",
                "the desired count is within the acceptable range".into(),
            ),
        )
    };
    let rescale = desired != current;
    let able = if rescale {
        cond(
            "AbleToScale",
            "True",
            "SucceededRescale",
            format!("the HPA controller was able to update the target scale to {desired}"),
        )
    } else {
        cond(
            "AbleToScale",
            "True",
            "ReadyForNewScale",
            "recommended size matches current size".into(),
        )
    };
    let active = cond(
        "ScalingActive",
        "True",
        "ValidMetricFound",
        "the HPA was able to successfully calculate a replica count".into(),
    );
    Decision {
        current: Some(current),
        desired: Some(desired),
        rescale,
        conditions: vec![able, active, limited],
    }
}

/// The HPA controller of one cluster.
pub(crate) struct HpaController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

/// The `(kind, name)` an HPA scales.
fn target_of(hpa: &Value) -> (&str, &str, &str) {
    (
        str_at(hpa, "/spec/scaleTargetRef/apiVersion").unwrap_or(""),
        str_at(hpa, "/spec/scaleTargetRef/kind").unwrap_or(""),
        str_at(hpa, "/spec/scaleTargetRef/name").unwrap_or(""),
    )
}

impl HpaController {
    /// The resource of a scalable target kind the sim serves.
    fn target_def(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Option<&Arc<meridian_apiserver::registry::ResourceDef>> {
        let k = &self.sim.kinds;
        match (api_version, kind) {
            ("apps/v1", "Deployment") => Some(&k.deployments),
            ("apps/v1", "StatefulSet") => Some(&k.stateful_sets),
            ("apps/v1", "ReplicaSet") => Some(&k.replica_sets),
            _ => None,
        }
    }

    /// Queues the HPAs in `namespace` that scale `kind/name`.
    fn queue_scaling(&self, namespace: &str, kind: &str, name: &str) {
        let def = &self.sim.kinds.hpas;
        let hpas = self
            .sim
            .cache(def)
            .list(
                &def.namespace_prefix(Some(namespace)),
                None,
                None,
                0,
                |_| true,
            )
            .items;
        for h in hpas {
            let v = h.value();
            let (_, k, n) = target_of(&v);
            if k == kind && n == name {
                self.queue.add(ns_key(namespace, h.name()));
            }
        }
    }

    fn on_target(&self, kind: &str, seen: Seen<'_>) {
        let obj = match seen {
            Seen::Upsert { obj, prev } => {
                // Status-only changes of the target do not move the HPA.
                let replicas =
                    |c: &meridian_apiserver::cache::Cached| i64_at(&c.value(), "/spec/replicas");
                if prev.is_some_and(|p| replicas(p) == replicas(obj)) {
                    return;
                }
                obj
            }
            Seen::Deleted { obj } => obj,
            Seen::Reset | Seen::Synced => return,
        };
        self.queue_scaling(obj.namespace(), kind, obj.name());
    }
}

impl Reconciler<String> for HpaController {
    const NAME: &'static str = "horizontal-pod-autoscaler";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.hpas;
        let (ns, name) = split_key(key);
        let Some(hpa) = self.sim.cached(def, ns, name) else {
            return Ok(Requeue::No);
        };
        if util::is_deleting(&hpa) {
            return Ok(Requeue::No);
        }
        let (api_version, kind, target_name) = target_of(&hpa);
        let target = self
            .target_def(api_version, kind)
            .ok_or_else(|| format!("no matches for kind {kind:?} in version {api_version:?}"))
            .and_then(|d| {
                self.sim
                    .cache(d)
                    .get(&d.key(ns, target_name))
                    .map(|c| (d.clone(), c.value()))
                    .ok_or_else(|| format!("{} {target_name:?} not found", d.plural))
            });
        let current = target
            .as_ref()
            .map(|(_, t)| i64_at(t, "/spec/replicas").unwrap_or(1))
            .map_err(Clone::clone);
        let min = i64_at(&hpa, "/spec/minReplicas").unwrap_or(1);
        let max = i64_at(&hpa, "/spec/maxReplicas").unwrap_or(min);
        let d = decide(
            min,
            max,
            current,
            self.sim.hpa_recommendations.forced(ns, name),
        );
        let now = self.sim.now_rfc3339();
        if d.rescale
            && let (Ok((tdef, _)), Some(n)) = (&target, d.desired)
        {
            // What upstream writes through the target's `/scale`.
            let written = self
                .sim
                .merge_patch(
                    tdef,
                    ns,
                    target_name,
                    &json!({"spec": {"replicas": n}}),
                    Target::Main,
                )
                .await;
            super::done_unless_failed(written)?;
        }
        let mut conditions: Vec<Value> = ["AbleToScale", "ScalingActive", "ScalingLimited"]
            .iter()
            .filter_map(|ty| {
                let old = condition(&hpa, ty);
                match d.conditions.iter().find(|c| c.ty == *ty) {
                    Some(c) => Some(util::merge_condition(
                        old,
                        c.ty,
                        c.status,
                        Some(c.reason),
                        Some(&c.message),
                        &now,
                        false,
                    )),
                    None => old.cloned(),
                }
            })
            .collect();
        conditions.retain(|c| !c.is_null());
        let mut status = json!({
            "conditions": conditions,
            "observedGeneration": i64_at(&hpa, "/metadata/generation"),
        });
        if let (Some(c), Some(w)) = (d.current, d.desired) {
            status["currentReplicas"] = json!(c);
            status["desiredReplicas"] = json!(w);
        }
        if d.rescale {
            status["lastScaleTime"] = json!(now);
        }
        self.sim
            .write_status_fields(def, ns, name, &hpa, status)
            .await?;
        Ok(Requeue::No)
    }
}

/// Spawns the HPA controller's watches (HPAs, and the kinds it scales) and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(HpaController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    // Only the first loop of a Sim registers (tests start one per Sim).
    let _ = sim.hpa_recommendations.queue.set(c.queue.clone());
    let q = c.queue.clone();
    let mut handles = vec![super::spawn_watch(sim.cache(&sim.kinds.hpas), move |e| {
        if let Seen::Upsert { obj, .. } = e {
            q.add(ns_key(obj.namespace(), obj.name()));
        }
    })];
    for (def, kind) in [
        (&sim.kinds.deployments, "Deployment"),
        (&sim.kinds.stateful_sets, "StatefulSet"),
        (&sim.kinds.replica_sets, "ReplicaSet"),
    ] {
        let c = c.clone();
        handles.push(super::spawn_watch(sim.cache(def), move |e| {
            c.on_target(kind, e)
        }));
    }
    handles.push(super::spawn_worker(sim, c.queue.clone(), c));
    handles
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let reasons = |d: &Decision| -> Vec<(&str, &str, &str)> {
            d.conditions
                .iter()
                .map(|c| (c.ty, c.status, c.reason))
                .collect()
        };
        let within = [
            ("AbleToScale", "True", "ReadyForNewScale"),
            ("ScalingActive", "True", "ValidMetricFound"),
            ("ScalingLimited", "False", "DesiredWithinRange"),
        ];
        // name, min, max, current, forced, desired, rescale, conditions
        type Conds = Vec<(&'static str, &'static str, &'static str)>;
        type Case = (
            &'static str,
            i64,
            i64,
            Result<i64, String>,
            Option<i64>,
            Option<i64>,
            bool,
            Conds,
        );
        let cases: [Case; 7] = [
            (
                "steady",
                2,
                10,
                Ok(3),
                None,
                Some(3),
                false,
                within.to_vec(),
            ),
            (
                "forced up",
                2,
                10,
                Ok(3),
                Some(7),
                Some(7),
                true,
                vec![
                    ("AbleToScale", "True", "SucceededRescale"),
                    within[1],
                    within[2],
                ],
            ),
            (
                "forced above max",
                2,
                10,
                Ok(3),
                Some(20),
                Some(10),
                true,
                vec![
                    ("AbleToScale", "True", "SucceededRescale"),
                    within[1],
                    ("ScalingLimited", "True", "TooManyReplicas"),
                ],
            ),
            (
                "below min",
                2,
                10,
                Ok(1),
                None,
                Some(2),
                true,
                vec![
                    ("AbleToScale", "True", "SucceededRescale"),
                    within[1],
                    ("ScalingLimited", "True", "TooFewReplicas"),
                ],
            ),
            (
                "forced to what it has",
                1,
                10,
                Ok(7),
                Some(7),
                Some(7),
                false,
                within.to_vec(),
            ),
            (
                "target at zero",
                1,
                10,
                Ok(0),
                Some(4),
                Some(0),
                false,
                vec![("ScalingActive", "False", "ScalingDisabled")],
            ),
            (
                "no target",
                1,
                10,
                Err("gone".into()),
                Some(4),
                None,
                false,
                vec![("AbleToScale", "False", "FailedGetScale")],
            ),
        ];
        for (name, min, max, current, forced, desired, rescale, conditions) in cases {
            let d = decide(min, max, current, forced);
            assert_eq!(d.desired, desired, "{name}");
            assert_eq!(d.rescale, rescale, "{name}");
            assert_eq!(reasons(&d), conditions, "{name}");
        }
    }
}

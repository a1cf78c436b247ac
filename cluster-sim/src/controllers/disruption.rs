//! The disruption controller: PodDisruptionBudget status from the pods its selector
//! matches: `expectedPods`, `currentHealthy` (Ready pods not being deleted),
//! `desiredHealthy`, `disruptionsAllowed`, the `DisruptionAllowed` condition and
//! `observedGeneration`.
//!
//! As upstream, a budget with an integer `minAvailable` expects the pods there are, and one
//! with a percentage or `maxUnavailable` expects the replicas of the pods' controllers
//! (ReplicaSets and StatefulSets by `spec.replicas`; a pod of any other owner, or of none,
//! counts as itself, where upstream would report an error). Memory per budget: none.

use std::collections::BTreeMap;
use std::sync::Arc;

use apimachinery::selector::LabelSelector;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::deployment::int_or_percent;
use super::util::{self, condition_true, i64_at, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// The budget's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Pods the budget expects.
    pub expected: i64,
    /// Healthy pods it wants at least.
    pub desired: i64,
    /// Healthy pods there are.
    pub current: i64,
    /// Evictions allowed now.
    pub allowed: i64,
}

/// The numbers of a budget with spec `spec`, given the matching pods (`pods`) and what their
/// controllers expect (`scale`: the expected count for percentage and `maxUnavailable`
/// budgets), `healthy` of them Ready.
pub(crate) fn budget(spec: &Value, pods: i64, scale: i64, healthy: i64) -> Budget {
    let min = spec.get("minAvailable").filter(|v| !v.is_null());
    let max = spec.get("maxUnavailable").filter(|v| !v.is_null());
    let (expected, desired) = match (min, max) {
        (Some(Value::Number(n)), _) => (pods, n.as_i64().unwrap_or(0)),
        (Some(m), _) => (scale, int_or_percent(Some(m), scale, true, "0%")),
        (None, Some(m)) => (scale, scale - int_or_percent(Some(m), scale, true, "0%")),
        // Neither (the API server rejects that): nothing may go.
        (None, None) => (pods, pods),
    };
    let desired = desired.max(0);
    Budget {
        expected,
        desired,
        current: healthy,
        allowed: (healthy - desired).max(0),
    }
}

/// The disruption controller of one cluster.
pub(crate) struct DisruptionController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

impl DisruptionController {
    fn on_budget(&self, seen: Seen<'_>) {
        if let Seen::Upsert { obj, .. } = seen {
            self.queue.add(ns_key(obj.namespace(), obj.name()));
        }
    }

    /// A pod change may change any budget of its namespace: they are few, so all look again.
    fn on_pod(&self, seen: Seen<'_>) {
        let obj = match seen {
            Seen::Upsert { obj, .. } | Seen::Deleted { obj } => obj,
            Seen::Reset | Seen::Synced => return,
        };
        let def = &self.sim.kinds.pdbs;
        for c in self
            .sim
            .cache(def)
            .list(
                &def.namespace_prefix(Some(obj.namespace())),
                None,
                None,
                0,
                |_| true,
            )
            .items
        {
            self.queue.add(ns_key(c.namespace(), c.name()));
        }
    }

    /// The replicas a pod's controller wants, keyed by the controller's uid.
    fn controller_scale(&self, ns: &str, pod: &Value) -> Option<(String, i64)> {
        let refs = pod.pointer("/metadata/ownerReferences")?.as_array()?;
        let owner = refs
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
        let def = match owner.get("kind").and_then(Value::as_str)? {
            "ReplicaSet" => &self.sim.kinds.replica_sets,
            "StatefulSet" => &self.sim.kinds.stateful_sets,
            _ => return None,
        };
        let name = owner.get("name").and_then(Value::as_str)?;
        let obj = self.sim.cached(def, ns, name)?;
        Some((
            str_at(&obj, "/metadata/uid")?.to_string(),
            i64_at(&obj, "/spec/replicas").unwrap_or(1),
        ))
    }
}

impl Reconciler<String> for DisruptionController {
    const NAME: &'static str = "disruption";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self.sim.cache(&kinds.pdbs).get(&kinds.pdbs.key(ns, name)) else {
            return Ok(Requeue::No);
        };
        let pdb = cached.value();
        let selector = match pdb.pointer("/spec/selector").map(LabelSelector::from_json) {
            Some(Ok(s)) => Some(s),
            // An absent selector selects nothing (policy/v1).
            None => None,
            Some(Err(e)) => {
                tracing::warn!(pdb = %key, error = %e, "bad selector");
                return Ok(Requeue::No);
            }
        };
        let pods: Vec<Value> = match &selector {
            None => Vec::new(),
            Some(sel) => self
                .sim
                .cache(&kinds.pods)
                .list(&kinds.pods.namespace_prefix(Some(ns)), None, None, 0, |c| {
                    c.labels.matches(sel)
                })
                .items
                .iter()
                .map(|c| c.value())
                .filter(|p| !matches!(str_at(p, "/status/phase"), Some("Succeeded" | "Failed")))
                .collect(),
        };
        let healthy = pods
            .iter()
            .filter(|p| !util::is_deleting(p) && condition_true(p, "Ready"))
            .count() as i64;
        let mut controllers: BTreeMap<String, i64> = BTreeMap::new();
        let mut own = 0;
        for p in &pods {
            match self.controller_scale(ns, p) {
                Some((uid, n)) => {
                    controllers.insert(uid, n);
                }
                None => own += 1,
            }
        }
        let scale = controllers.values().sum::<i64>() + own;
        let spec = pdb.get("spec").cloned().unwrap_or_else(|| json!({}));
        let b = budget(&spec, pods.len() as i64, scale, healthy);
        let now = self.sim.now_rfc3339();
        let (status, reason) = if b.allowed > 0 {
            ("True", "SufficientPods")
        } else {
            ("False", "InsufficientPods")
        };
        let cond = util::merge_condition(
            util::condition(&pdb, "DisruptionAllowed"),
            "DisruptionAllowed",
            status,
            Some(reason),
            Some(""),
            &now,
            false,
        );
        let new = json!({
            "expectedPods": b.expected,
            "desiredHealthy": b.desired,
            "currentHealthy": b.current,
            "disruptionsAllowed": b.allowed,
            "observedGeneration": i64_at(&pdb, "/metadata/generation").unwrap_or(0),
            "conditions": [cond],
        });
        self.sim
            .write_status_fields(&kinds.pdbs, ns, name, &pdb, new)
            .await?;
        Ok(Requeue::No)
    }
}

/// Spawns the disruption controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(DisruptionController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let (a, b) = (c.clone(), c.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.pdbs), move |e| a.on_budget(e)),
        super::spawn_watch(sim.cache(&sim.kinds.pods), move |e| b.on_pod(e)),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets() {
        let b = |expected, desired, current, allowed| Budget {
            expected,
            desired,
            current,
            allowed,
        };
        let cases = [
            // spec, pods, controllers' scale, healthy, budget
            (json!({"minAvailable": 2}), 3, 5, 3, b(3, 2, 3, 1)),
            (json!({"minAvailable": 2}), 3, 5, 2, b(3, 2, 2, 0)),
            (json!({"minAvailable": "50%"}), 3, 5, 3, b(5, 3, 3, 0)),
            (json!({"minAvailable": "50%"}), 4, 4, 4, b(4, 2, 4, 2)),
            (json!({"maxUnavailable": 1}), 3, 3, 3, b(3, 2, 3, 1)),
            (json!({"maxUnavailable": 1}), 3, 3, 2, b(3, 2, 2, 0)),
            (json!({"maxUnavailable": "25%"}), 4, 4, 4, b(4, 3, 4, 1)),
            (json!({"maxUnavailable": 0}), 2, 2, 2, b(2, 2, 2, 0)),
        ];
        for (spec, pods, scale, healthy, want) in cases {
            assert_eq!(budget(&spec, pods, scale, healthy), want, "{spec}");
        }
    }
}

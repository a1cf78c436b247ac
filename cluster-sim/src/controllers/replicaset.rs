//! The ReplicaSet controller: creates and deletes pods to match `spec.replicas` and reports
//! `replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`
//! (`minReadySeconds` on the simulation clock) and `observedGeneration`.
//!
//! Pod names are `{rs}-{5 chars}` drawn from a per-ReplicaSet sequence, so the same requests
//! on a fresh cluster give the same names. Surplus pods go unscheduled first, then pending,
//! then not ready, then the most recently ready, then the newest.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apimachinery::selector::LabelSelector;
use meridian_apiserver::cache::Cached;
use meridian_apiserver::engine::{DeleteOptions, PatchType, Target, WriteOptions};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::util::{self, condition, condition_true, i64_at, lock, owner_ref, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// Most pods created or deleted per reconcile; the rest follow in the next pass.
const BURST: usize = 500;

/// The ReplicaSet controller of one cluster.
pub(crate) struct ReplicaSetController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
    /// Next name sequence number per ReplicaSet key (only numbers, dropped with the RS).
    sequence: Mutex<HashMap<String, u64>>,
}

/// Whether the pod counts toward a ReplicaSet (not finished, not being deleted).
pub(crate) fn is_active(pod: &Value) -> bool {
    let phase = str_at(pod, "/status/phase").unwrap_or("Pending");
    !util::is_deleting(pod) && phase != "Succeeded" && phase != "Failed"
}

/// When the pod's `Ready` condition last turned true, if it is true.
fn ready_since(pod: &Value) -> Option<jiff::Timestamp> {
    let c = condition(pod, "Ready")?;
    if c.get("status").and_then(Value::as_str) != Some("True") {
        return None;
    }
    c.get("lastTransitionTime")
        .and_then(Value::as_str)
        .and_then(util::parse_time)
        .or(Some(jiff::Timestamp::UNIX_EPOCH))
}

/// Whether the pod has been ready for `min_ready` seconds at `now`; if it is ready but not
/// yet long enough, how long remains.
pub(crate) fn availability(
    pod: &Value,
    min_ready: i64,
    now: jiff::Timestamp,
) -> (bool, Option<Duration>) {
    let Some(since) = ready_since(pod) else {
        return (false, None);
    };
    if min_ready <= 0 {
        return (true, None);
    }
    let elapsed = now.as_second() - since.as_second();
    if elapsed >= min_ready {
        (true, None)
    } else {
        (
            false,
            Some(Duration::from_secs((min_ready - elapsed) as u64)),
        )
    }
}

/// Deletion rank: smaller goes first.
fn deletion_rank(pod: &Value) -> (u8, u8, u8, Reverse<i64>, Reverse<String>, Reverse<String>) {
    let assigned = u8::from(str_at(pod, "/spec/nodeName").is_some_and(|n| !n.is_empty()));
    let phase = match str_at(pod, "/status/phase").unwrap_or("Pending") {
        "Pending" => 0,
        "Unknown" => 1,
        _ => 2,
    };
    let ready = u8::from(condition_true(pod, "Ready"));
    let since = ready_since(pod).map_or(0, |t| t.as_second());
    (
        assigned,
        phase,
        ready,
        Reverse(since),
        Reverse(
            str_at(pod, "/metadata/creationTimestamp")
                .unwrap_or("")
                .to_string(),
        ),
        Reverse(str_at(pod, "/metadata/name").unwrap_or("").to_string()),
    )
}

impl ReplicaSetController {
    fn on_rs(&self, seen: Seen<'_>) {
        match seen {
            Seen::Upsert { obj, .. } => self.queue.add(ns_key(obj.namespace(), obj.name())),
            Seen::Deleted { obj } => {
                let key = ns_key(obj.namespace(), obj.name());
                lock(&self.sequence).remove(&key);
            }
            Seen::Reset | Seen::Synced => {}
        }
    }

    fn on_pod(&self, seen: Seen<'_>) {
        if let Some(key) = super::controlling_owner(seen, "ReplicaSet", None) {
            self.queue.add(key);
        }
    }

    /// The next unused pod name of a ReplicaSet.
    fn next_name(&self, key: &str, rs_name: &str, taken: &dyn Fn(&str) -> bool) -> String {
        let mut seqs = lock(&self.sequence);
        let seq = seqs.entry(key.to_string()).or_insert(0);
        loop {
            let name = format!("{rs_name}-{}", util::suffix5(&format!("{key}#{seq}")));
            *seq += 1;
            if !taken(&name) {
                return name;
            }
        }
    }

    fn owned_pods(&self, ns: &str, uid: &str) -> Vec<Arc<Cached>> {
        self.sim.owned(&self.sim.kinds.pods, ns, uid)
    }
}

impl Reconciler<String> for ReplicaSetController {
    const NAME: &'static str = "replicaset";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self
            .sim
            .cache(&kinds.replica_sets)
            .get(&kinds.replica_sets.key(ns, name))
        else {
            return Ok(Requeue::No);
        };
        let rs = cached.value();
        let want = i64_at(&rs, "/spec/replicas").unwrap_or(1).max(0) as usize;
        let min_ready = i64_at(&rs, "/spec/minReadySeconds").unwrap_or(0);
        let selector = rs
            .pointer("/spec/selector")
            .map(LabelSelector::from_json)
            .transpose()
            .map_err(|e| SimError::Invalid(format!("replicaset {key} selector: {e}")))?
            .unwrap_or_default();
        let mut pods: Vec<Value> = self
            .owned_pods(ns, &cached.uid)
            .iter()
            .map(|c| c.value())
            .filter(is_active)
            .collect();
        let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
        let deleting = util::is_deleting(&rs);
        if pods.len() < want && !deleting {
            let template = rs.pointer("/spec/template").cloned().unwrap_or(Value::Null);
            let labels = template
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let owner = owner_ref("apps/v1", "ReplicaSet", &rs);
            let pods_def = &kinds.pods;
            let cache = self.sim.cache(pods_def);
            for _ in 0..(want - pods.len()).min(BURST) {
                let taken = |n: &str| cache.get(&pods_def.key(ns, n)).is_some();
                let pod_name = self.next_name(key, name, &taken);
                let mut meta = Map::new();
                meta.insert("name".into(), Value::from(pod_name.as_str()));
                meta.insert("namespace".into(), Value::from(ns));
                meta.insert("labels".into(), labels.clone());
                if let Some(a) = template.pointer("/metadata/annotations") {
                    meta.insert("annotations".into(), a.clone());
                }
                meta.insert("ownerReferences".into(), json!([owner]));
                let pod = json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": meta,
                    "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
                });
                match self.sim.engine.create(pods_def, ns, pod, &opts).await {
                    Ok(w) => pods.push(w.obj),
                    // Name taken by a pod the cache has not shown yet: the next one is free.
                    Err(e) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        } else if pods.len() > want {
            let surplus = (pods.len() - want).min(BURST);
            pods.sort_by_cached_key(deletion_rank);
            let doomed: Vec<Value> = pods.drain(..surplus).collect();
            for p in doomed {
                let pod_name = str_at(&p, "/metadata/name").unwrap_or("");
                match self
                    .sim
                    .engine
                    .delete(&kinds.pods, ns, pod_name, &DeleteOptions::default())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // Status from the pods as they are after this pass.
        let now = self.sim.now();
        let mut ready = 0;
        let mut available = 0;
        let mut labeled = 0;
        let mut recheck: Option<Duration> = None;
        for p in &pods {
            if condition_true(p, "Ready") {
                ready += 1;
            }
            let (ok, wait) = availability(p, min_ready, now);
            if ok {
                available += 1;
            }
            if let Some(w) = wait {
                recheck = Some(recheck.map_or(w, |r| r.min(w)));
            }
            let empty = Map::new();
            let labels = p
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            if selector.matches(labels) {
                labeled += 1;
            }
        }
        let mut status = json!({
            "replicas": pods.len(),
            "fullyLabeledReplicas": labeled,
            "readyReplicas": ready,
            "availableReplicas": available,
            "observedGeneration": i64_at(&rs, "/metadata/generation").unwrap_or(0),
        });
        if let Some(c) = rs.pointer("/status/conditions") {
            status["conditions"] = c.clone();
        }
        let old = rs.get("status").cloned().unwrap_or_else(|| json!({}));
        let same = [
            "replicas",
            "fullyLabeledReplicas",
            "readyReplicas",
            "availableReplicas",
            "observedGeneration",
        ]
        .iter()
        .all(|f| {
            old.get(*f).and_then(Value::as_i64).unwrap_or(0) == status[*f].as_i64().unwrap_or(0)
        }) && old.get("observedGeneration").is_some();
        if !same {
            let patch = json!({ "status": status });
            match self
                .sim
                .engine
                .patch(
                    &kinds.replica_sets,
                    ns,
                    name,
                    PatchType::Merge,
                    &patch,
                    Target::Status,
                    &opts,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.code == 404 => return Ok(Requeue::No),
                Err(e) => return Err(e.into()),
            }
        }
        let more = pods.len() != want && !deleting;
        Ok(match (more, recheck) {
            (true, _) => Requeue::After(Duration::ZERO),
            (false, Some(d)) => Requeue::After(d),
            (false, None) => Requeue::No,
        })
    }
}

/// Spawns the ReplicaSet controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(ReplicaSetController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
        sequence: Mutex::new(HashMap::new()),
    });
    let (a, b) = (c.clone(), c.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.replica_sets), move |e| a.on_rs(e)),
        super::spawn_watch(sim.cache(&sim.kinds.pods), move |e| b.on_pod(e)),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surplus_order_prefers_unscheduled_then_unready_then_newest() {
        let pod = |name: &str, node: Option<&str>, ready: bool, created: &str| {
            let mut p = json!({"metadata": {"name": name, "creationTimestamp": created},
                "spec": {}, "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            } else {
                p["status"]["phase"] = json!("Pending");
            }
            p
        };
        let mut pods = [
            pod("old-ready", Some("n"), true, "2024-01-01T00:00:00Z"),
            pod("new-ready", Some("n"), true, "2024-01-02T00:00:00Z"),
            pod("unready", Some("n"), false, "2024-01-01T00:00:00Z"),
            pod("unscheduled", None, false, "2024-01-01T00:00:00Z"),
        ];
        pods.sort_by_cached_key(deletion_rank);
        let names: Vec<&str> = pods
            .iter()
            .filter_map(|p| str_at(p, "/metadata/name"))
            .collect();
        assert_eq!(names, ["unscheduled", "unready", "new-ready", "old-ready"]);
    }

    #[test]
    fn min_ready_seconds_delays_availability() {
        let p = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        let t0: jiff::Timestamp = "2024-01-01T00:00:03Z".parse().unwrap();
        assert_eq!(availability(&p, 0, t0), (true, None));
        assert_eq!(
            availability(&p, 5, t0),
            (false, Some(Duration::from_secs(2)))
        );
        let t1: jiff::Timestamp = "2024-01-01T00:00:05Z".parse().unwrap();
        assert_eq!(availability(&p, 5, t1), (true, None));
    }
}

//! The DaemonSet controller: one pod per eligible node, bound to its node directly
//! (`spec.nodeName`, plus upstream's `metadata.name` node affinity), with upstream's
//! automatic tolerations; a rolling update replaces outdated pods at most `maxUnavailable`
//! at a time; status as `kubectl rollout status daemonset` reads it.
//!
//! A node should run the pod when it is Ready, the pod's `nodeSelector` and required node
//! affinity match it and its `NoSchedule`/`NoExecute` taints are tolerated (a cordoned node
//! is, through the automatic toleration). A pod keeps running on a node that turned NotReady
//! (upstream taints such a node `not-ready:NoSchedule`, which the pod does not tolerate, but
//! only `NoExecute` taints evict); it is deleted when its node no longer matches, is gone, or
//! has a `NoExecute` taint it does not tolerate. Pod names are `{name}-{5 chars}` derived
//! from the set's uid, template hash, node and a count (a pod replaced for a new template
//! gets a new name). Memory per DaemonSet: none.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use meridian_apiserver::cache::Cached;
use meridian_apiserver::engine::{DeleteOptions, WriteOptions};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::deployment::{int_or_percent, pod_template_hash};
use super::scheduler::tolerates;
use super::util::{self, condition_true, i64_at, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// The pod label holding the template hash the pod was created from.
const REVISION_LABEL: &str = "controller-revision-hash";
/// The pod label holding the DaemonSet generation the pod was created at.
const GENERATION_LABEL: &str = "pod-template-generation";

/// Where a node stands for a DaemonSet's pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct NodeFit {
    /// A pod should be placed there.
    pub should_run: bool,
    /// A pod already there may stay.
    pub may_stay: bool,
}

/// One pod of the set, as the decision sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DaemonPod {
    /// The pod's name.
    pub name: String,
    /// Its node.
    pub node: String,
    /// Created from the current template.
    pub updated: bool,
    /// Ready (and available).
    pub available: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Succeeded or Failed.
    pub finished: bool,
}

/// One step of the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Create a pod on this node.
    Create(String),
    /// Delete this pod.
    Delete(String),
}

/// The next steps: pods for nodes that should run one and have none, away from nodes where
/// they may not stay (and duplicates, finished pods), and outdated pods replaced while fewer
/// than `max_unavailable` nodes lack an available pod.
pub(crate) fn plan(
    nodes: &BTreeMap<String, NodeFit>,
    pods: &[DaemonPod],
    max_unavailable: i64,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut per_node: BTreeMap<&str, Vec<&DaemonPod>> = BTreeMap::new();
    for p in pods.iter().filter(|p| !p.terminating) {
        if p.finished {
            actions.push(Action::Delete(p.name.clone()));
        } else {
            per_node.entry(p.node.as_str()).or_default().push(p);
        }
    }
    let terminating = |node: &str| pods.iter().any(|p| p.terminating && p.node == node);
    let mut unavailable = 0;
    let mut outdated: Vec<&DaemonPod> = Vec::new();
    for (node, fit) in nodes {
        let here = per_node.remove(node.as_str()).unwrap_or_default();
        if !fit.may_stay {
            actions.extend(here.iter().map(|p| Action::Delete(p.name.clone())));
            continue;
        }
        // One pod per node: an updated, available one is the one to keep.
        let mut here = here;
        here.sort_by_key(|p| (!p.updated, !p.available, p.name.clone()));
        actions.extend(here.iter().skip(1).map(|p| Action::Delete(p.name.clone())));
        match here.first() {
            None if fit.should_run => {
                unavailable += 1;
                if !terminating(node) {
                    actions.push(Action::Create(node.clone()));
                }
            }
            None => {}
            Some(p) => {
                if !p.available {
                    unavailable += 1;
                }
                if !p.updated {
                    outdated.push(p);
                }
            }
        }
    }
    // Pods on nodes that are gone.
    for p in per_node.into_values().flatten() {
        actions.push(Action::Delete(p.name.clone()));
    }
    // Rolling update: outdated pods that are not available cost nothing to replace; the
    // others only while the budget allows.
    outdated.sort_by_key(|p| (p.available, p.node.clone()));
    let mut budget = max_unavailable.max(1) - unavailable;
    for p in outdated {
        if !p.available {
            actions.push(Action::Delete(p.name.clone()));
        } else if budget > 0 {
            budget -= 1;
            actions.push(Action::Delete(p.name.clone()));
        }
    }
    actions
}

/// Upstream's automatic tolerations of daemon pods.
fn daemon_tolerations(host_network: bool) -> Vec<Value> {
    let mut t = vec![
        json!({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}),
        json!({"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"}),
        json!({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}),
    ];
    if host_network {
        t.push(json!({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"}));
    }
    t
}

/// The pod spec's tolerations with the automatic ones added (those already present kept).
fn tolerations_of(pod_spec: &Value) -> Vec<Value> {
    let mut list: Vec<Value> = pod_spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let host_network = pod_spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for t in daemon_tolerations(host_network) {
        let same = |x: &Value| x.get("key") == t.get("key") && x.get("effect") == t.get("effect");
        if !list.iter().any(same) {
            list.push(t);
        }
    }
    list
}

/// Whether a node selector requirement (`matchExpressions` or `matchFields` entry) holds
/// for the value `v` (absent: the label is not set).
fn requirement_holds(req: &Value, v: Option<&str>) -> bool {
    let values: Vec<&str> = req
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let num = |s: &str| s.parse::<i64>().ok();
    match req.get("operator").and_then(Value::as_str).unwrap_or("") {
        "In" => v.is_some_and(|v| values.contains(&v)),
        "NotIn" => v.is_none_or(|v| !values.contains(&v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" => {
            matches!((v.and_then(num), values.first().copied().and_then(num)), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((v.and_then(num), values.first().copied().and_then(num)), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Whether the pod spec's `nodeSelector` and required node affinity select the node.
pub(crate) fn selects(pod_spec: &Value, node: &Value) -> bool {
    let label = |k: &str| {
        node.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
    };
    let selector_ok = pod_spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    if !selector_ok {
        return false;
    }
    let terms = pod_spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    let Some(terms) = terms else {
        return true;
    };
    let name = str_at(node, "/metadata/name");
    // Terms are ORed, the requirements within one ANDed.
    terms.iter().any(|term| {
        let exprs = term
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .all(|r| requirement_holds(r, r.get("key").and_then(Value::as_str).and_then(label)));
        let fields = term
            .get("matchFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .all(|r| {
                let v = match r.get("key").and_then(Value::as_str) {
                    Some("metadata.name") => name,
                    _ => None,
                };
                requirement_holds(r, v)
            });
        exprs && fields
    })
}

/// Where `node` stands for pods of spec `pod_spec` (with the automatic tolerations).
pub(crate) fn fit(pod_spec: &Value, node: &Value) -> NodeFit {
    let tolerations = tolerations_of(pod_spec);
    let taints: Vec<(&str, &str, &str)> = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| {
            let s = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("");
            (s("key"), s("value"), s("effect"))
        })
        .collect();
    let untolerated = |effect: &str| {
        taints
            .iter()
            .any(|(k, v, e)| *e == effect && !tolerates(&tolerations, k, v, e))
    };
    let mut taints_ok = !untolerated("NoSchedule") && !untolerated("NoExecute");
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        taints_ok &= tolerates(
            &tolerations,
            "node.kubernetes.io/unschedulable",
            "",
            "NoSchedule",
        );
    }
    let selected = selects(pod_spec, node);
    NodeFit {
        should_run: selected && taints_ok && condition_true(node, "Ready"),
        may_stay: selected && !untolerated("NoExecute"),
    }
}

/// The pod of a DaemonSet for one node.
fn pod_for(ds: &Value, node: &str, name: &str, hash: &str) -> Value {
    let template = ds.pointer("/spec/template").cloned().unwrap_or(Value::Null);
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(REVISION_LABEL.into(), Value::from(hash));
    labels.insert(
        GENERATION_LABEL.into(),
        Value::from(i64_at(ds, "/metadata/generation").unwrap_or(1).to_string()),
    );
    let meta = util::child_metadata(ds, "apps/v1", "DaemonSet", name, &template, labels);
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["tolerations"] = Value::Array(tolerations_of(&spec));
    // Upstream pins the pod with required affinity on the node's name and lets the
    // scheduler bind it; binding it here directly is what the scheduler would do.
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}],
    });
    spec["nodeName"] = Value::from(node);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// The DaemonSet controller of one cluster.
pub(crate) struct DaemonSetController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

impl DaemonSetController {
    /// Any node change may change every set's nodes: all sets look again.
    fn on_node(&self, seen: Seen<'_>) {
        if matches!(seen, Seen::Reset) {
            return;
        }
        let def = &self.sim.kinds.daemon_sets;
        for c in self
            .sim
            .cache(def)
            .list(&def.prefix(), None, None, 0, |_| true)
            .items
        {
            self.queue.add(ns_key(c.namespace(), c.name()));
        }
    }

    fn owned_pods(&self, ns: &str, uid: &str) -> Vec<Arc<Cached>> {
        self.sim.owned(&self.sim.kinds.pods, ns, uid)
    }
}

impl Reconciler<String> for DaemonSetController {
    const NAME: &'static str = "daemonset";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self
            .sim
            .cache(&kinds.daemon_sets)
            .get(&kinds.daemon_sets.key(ns, name))
        else {
            return Ok(Requeue::No);
        };
        let ds = cached.value();
        let pod_spec = ds
            .pointer("/spec/template/spec")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let hash = pod_template_hash(ds.pointer("/spec/template").unwrap_or(&Value::Null));
        let nodes: BTreeMap<String, NodeFit> = self
            .sim
            .cache(&kinds.nodes)
            .list(&kinds.nodes.prefix(), None, None, 0, |_| true)
            .items
            .iter()
            .map(|n| (n.name().to_string(), fit(&pod_spec, &n.value())))
            .collect();
        let pod_values: Vec<Value> = self
            .owned_pods(ns, &cached.uid)
            .iter()
            .map(|c| c.value())
            .collect();
        let pods: Vec<DaemonPod> = pod_values
            .iter()
            .map(|p| DaemonPod {
                name: str_at(p, "/metadata/name").unwrap_or("").to_string(),
                node: str_at(p, "/spec/nodeName").unwrap_or("").to_string(),
                updated: str_at(p, &format!("/metadata/labels/{REVISION_LABEL}"))
                    == Some(hash.as_str()),
                available: condition_true(p, "Ready"),
                terminating: util::is_deleting(p),
                finished: matches!(str_at(p, "/status/phase"), Some("Succeeded" | "Failed")),
            })
            .collect();
        let desired = nodes.values().filter(|f| f.should_run).count() as i64;
        let on_delete = str_at(&ds, "/spec/updateStrategy/type") == Some("OnDelete");
        let max_unavailable = if on_delete {
            0
        } else {
            int_or_percent(
                ds.pointer("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
                desired,
                true,
                // Absent only without a RollingUpdate strategy; the plan replaces at least one.
                "0%",
            )
        };
        let mut actions = plan(&nodes, &pods, max_unavailable);
        if on_delete {
            // Outdated pods are replaced only when the user deletes them.
            actions.retain(|a| match a {
                Action::Delete(n) => pods.iter().find(|p| p.name == *n).is_none_or(|p| {
                    p.updated || p.finished || !nodes.get(&p.node).is_some_and(|f| f.may_stay)
                }),
                Action::Create(_) => true,
            });
        }
        if !util::is_deleting(&ds) {
            let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
            let cache = self.sim.cache(&kinds.pods);
            let mut seq = pods.len();
            for a in actions {
                match a {
                    Action::Create(node) => loop {
                        let pod_name = format!(
                            "{name}-{}",
                            util::suffix5(&format!("{}#{hash}#{node}#{seq}", cached.uid))
                        );
                        seq += 1;
                        if cache.get(&kinds.pods.key(ns, &pod_name)).is_some() {
                            continue;
                        }
                        let pod = pod_for(&ds, &node, &pod_name, &hash);
                        match self.sim.engine.create(&kinds.pods, ns, pod, &opts).await {
                            Ok(_) => break,
                            Err(e) if e.code == 409 => {}
                            Err(e) => return Err(e.into()),
                        }
                    },
                    Action::Delete(pod) => super::done_unless_failed(
                        self.sim
                            .engine
                            .delete(&kinds.pods, ns, &pod, &DeleteOptions::default())
                            .await,
                    )?,
                }
            }
        }

        // Status from the pods as they were at the start of this pass.
        let live: Vec<&DaemonPod> = pods
            .iter()
            .filter(|p| !p.terminating && !p.finished)
            .collect();
        let on_should_run = |p: &DaemonPod| nodes.get(&p.node).is_some_and(|f| f.should_run);
        let scheduled_nodes: BTreeSet<&str> = live
            .iter()
            .filter(|p| on_should_run(p))
            .map(|p| p.node.as_str())
            .collect();
        let current = scheduled_nodes.len() as i64;
        let misscheduled = live.iter().filter(|p| !on_should_run(p)).count() as i64;
        let ready = live
            .iter()
            .filter(|p| on_should_run(p) && p.available)
            .count() as i64;
        let updated = live
            .iter()
            .filter(|p| on_should_run(p) && p.updated)
            .count() as i64;
        let status = json!({
            "desiredNumberScheduled": desired,
            "currentNumberScheduled": current,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": (desired - ready).max(0),
            "updatedNumberScheduled": updated,
            "observedGeneration": i64_at(&ds, "/metadata/generation").unwrap_or(0),
        });
        self.sim
            .write_status_fields(&kinds.daemon_sets, ns, name, &ds, status)
            .await?;
        Ok(Requeue::No)
    }
}

/// Spawns the DaemonSet controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(DaemonSetController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let n = c.clone();
    let nodes = super::spawn_watch(sim.cache(&sim.kinds.nodes), move |e| n.on_node(e));
    let (sets, pods, queue) = (
        sim.kinds.daemon_sets.clone(),
        sim.kinds.pods.clone(),
        c.queue.clone(),
    );
    // Only a set's pods carry the template-generation label: other pods are not parsed.
    let mut tasks = super::spawn_owner_loop(sim, &sets, &pods, queue, c, |e| {
        super::controlling_owner(e, "DaemonSet", Some(GENERATION_LABEL))
    });
    tasks.push(nodes);
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, labels: Value, taints: Value) -> Value {
        json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        })
    }

    #[test]
    fn node_fit() {
        let plain = json!({"containers": []});
        let gpu_only = json!({"nodeSelector": {"gpu": "yes"}});
        let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
        ]}}}});
        let tolerant = json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]});
        let n = |name: &str| node(name, true, json!({}), json!([]));
        let run = NodeFit {
            should_run: true,
            may_stay: true,
        };
        let stay = NodeFit {
            should_run: false,
            may_stay: true,
        };
        let neither = NodeFit::default();
        let tainted = |effect: &str| {
            node(
                "t",
                true,
                json!({}),
                json!([{"key": "dedicated", "value": "x", "effect": effect}]),
            )
        };
        let cordoned = json!({"metadata": {"name": "c"}, "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let cases = [
            ("plain", &plain, n("a"), run),
            (
                "not ready",
                &plain,
                node("a", false, json!({}), json!([])),
                stay,
            ),
            ("selector miss", &gpu_only, n("a"), neither),
            (
                "selector hit",
                &gpu_only,
                node("a", true, json!({"gpu": "yes"}), json!([])),
                run,
            ),
            (
                "affinity expression",
                &affinity,
                node("a", true, json!({"zone": "b"}), json!([])),
                run,
            ),
            ("affinity field", &affinity, n("special"), run),
            (
                "affinity miss",
                &affinity,
                node("a", true, json!({"zone": "c"}), json!([])),
                neither,
            ),
            ("NoSchedule taint", &plain, tainted("NoSchedule"), stay),
            ("NoExecute taint", &plain, tainted("NoExecute"), neither),
            (
                "PreferNoSchedule taint",
                &plain,
                tainted("PreferNoSchedule"),
                run,
            ),
            ("tolerated taint", &tolerant, tainted("NoExecute"), run),
            ("cordoned", &plain, cordoned, run),
        ];
        for (name, spec, node, want) in cases {
            assert_eq!(fit(spec, &node), want, "{name}");
        }
    }

    /// Name, nodes, pods, maxUnavailable, expected plan.
    type Case = (
        &'static str,
        BTreeMap<String, NodeFit>,
        Vec<DaemonPod>,
        i64,
        Vec<Action>,
    );

    fn pod(name: &str, node: &str, updated: bool, available: bool) -> DaemonPod {
        DaemonPod {
            name: name.into(),
            node: node.into(),
            updated,
            available,
            terminating: false,
            finished: false,
        }
    }

    #[test]
    fn plans() {
        use Action::{Create, Delete};
        let run = NodeFit {
            should_run: true,
            may_stay: true,
        };
        let gone = NodeFit::default();
        let nodes = |list: &[(&str, NodeFit)]| -> BTreeMap<String, NodeFit> {
            list.iter().map(|(n, f)| (n.to_string(), *f)).collect()
        };
        let three = nodes(&[("a", run), ("b", run), ("c", run)]);
        let going = DaemonPod {
            terminating: true,
            ..pod("pa", "a", false, false)
        };
        let cases: Vec<Case> = vec![
            (
                "fresh",
                three.clone(),
                vec![],
                1,
                vec![Create("a".into()), Create("b".into()), Create("c".into())],
            ),
            (
                "steady",
                three.clone(),
                vec![
                    pod("pa", "a", true, true),
                    pod("pb", "b", true, true),
                    pod("pc", "c", true, true),
                ],
                1,
                vec![],
            ),
            (
                "node no longer fits",
                nodes(&[("a", run), ("b", gone)]),
                vec![pod("pa", "a", true, true), pod("pb", "b", true, true)],
                1,
                vec![Delete("pb".into())],
            ),
            (
                "node deleted",
                nodes(&[("a", run)]),
                vec![pod("pa", "a", true, true), pod("px", "x", true, true)],
                1,
                vec![Delete("px".into())],
            ),
            (
                "duplicate",
                nodes(&[("a", run)]),
                vec![pod("p1", "a", false, true), pod("p2", "a", true, true)],
                1,
                vec![Delete("p1".into())],
            ),
            (
                "waits for the old pod to go",
                nodes(&[("a", run)]),
                vec![going],
                1,
                vec![],
            ),
            (
                "update one at a time",
                three.clone(),
                vec![
                    pod("pa", "a", false, true),
                    pod("pb", "b", false, true),
                    pod("pc", "c", false, true),
                ],
                1,
                vec![Delete("pa".into())],
            ),
            (
                "update budget used",
                three.clone(),
                vec![
                    pod("pa", "a", true, false),
                    pod("pb", "b", false, true),
                    pod("pc", "c", false, true),
                ],
                1,
                vec![],
            ),
            (
                "update two at a time",
                three.clone(),
                vec![
                    pod("pa", "a", false, true),
                    pod("pb", "b", false, true),
                    pod("pc", "c", false, true),
                ],
                2,
                vec![Delete("pa".into()), Delete("pb".into())],
            ),
            (
                "unavailable outdated is free",
                three,
                vec![
                    pod("pa", "a", true, false),
                    pod("pb", "b", false, false),
                    pod("pc", "c", true, true),
                ],
                1,
                vec![Delete("pb".into())],
            ),
        ];
        for (name, n, p, max, want) in cases {
            assert_eq!(plan(&n, &p, max), want, "{name}");
        }
    }
}

//! The scheduler: binds pending pods to Ready, schedulable nodes whose free CPU, memory and
//! pod slots fit the pod, honouring `NoSchedule`/`NoExecute` taints, preferring the
//! least-allocated node and breaking ties by name, so the same inputs give the same placement.
//!
//! Node capacity and per-node request sums live in a numeric index fed by node and pod
//! events; binding updates the index at once so later pods in the same pass see it. Pods that
//! fit nowhere get `PodScheduled=False/Unschedulable` and wait until capacity changes
//! (a node added or changed, a pod gone) before they are tried again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use meridian_apiserver::engine::{PatchType, Target, WriteOptions};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::util::{condition, condition_true, cpu_milli, lock, str_at, whole_units};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// The scheduler's name in `spec.schedulerName`.
const SCHEDULER_NAME: &str = "default-scheduler";
/// Requests assumed for scoring when a pod asks for none (as kube-scheduler does), so
/// request-less pods still spread.
const DEFAULT_CPU_MILLI: i64 = 100;
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

/// A queue key: first-seen revision (arrival order), then the pod key.
type PodKey = (u64, String);

#[derive(Default)]
struct NodeInfo {
    name: String,
    live: bool,
    /// Reset generation in which the node was last listed.
    seen: u64,
    ready: bool,
    schedulable: bool,
    /// `NoSchedule`/`NoExecute` taints as (key, value, effect).
    taints: Vec<(String, String, String)>,
    cpu: i64,
    memory: i64,
    pods: i64,
    req_cpu: i64,
    req_memory: i64,
    req_pods: i64,
    score_cpu: i64,
    score_memory: i64,
}

/// What a bound pod takes from its node.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Usage {
    node: usize,
    cpu: i64,
    memory: i64,
    score_cpu: i64,
    score_memory: i64,
}

#[derive(Default)]
struct State {
    nodes: Vec<NodeInfo>,
    by_name: HashMap<String, usize>,
    node_gen: u64,
    bound: HashMap<String, Usage>,
    /// Unbound pods known to the scheduler → first-seen revision.
    pending: HashMap<String, u64>,
    /// Pods that fit nowhere, waiting for a capacity change.
    unschedulable: BTreeSet<PodKey>,
    /// Live nodes.
    live_nodes: usize,
    /// Where the next node scan starts (only moves in clusters large enough to sample).
    next_start: usize,
}

impl State {
    fn slot(&mut self, name: &str) -> usize {
        if let Some(i) = self.by_name.get(name) {
            return *i;
        }
        self.nodes.push(NodeInfo {
            name: name.to_string(),
            ..NodeInfo::default()
        });
        let i = self.nodes.len() - 1;
        self.by_name.insert(name.to_string(), i);
        i
    }

    /// Records a pod as bound; returns whether anything changed.
    fn account(&mut self, key: &str, usage: Usage) -> bool {
        if self.bound.get(key) == Some(&usage) {
            return false;
        }
        self.unaccount(key);
        let n = &mut self.nodes[usage.node];
        n.req_cpu += usage.cpu;
        n.req_memory += usage.memory;
        n.req_pods += 1;
        n.score_cpu += usage.score_cpu;
        n.score_memory += usage.score_memory;
        self.bound.insert(key.to_string(), usage);
        true
    }

    /// Forgets a bound pod; returns whether it was bound.
    fn unaccount(&mut self, key: &str) -> bool {
        let Some(u) = self.bound.remove(key) else {
            return false;
        };
        let n = &mut self.nodes[u.node];
        n.req_cpu -= u.cpu;
        n.req_memory -= u.memory;
        n.req_pods -= 1;
        n.score_cpu -= u.score_cpu;
        n.score_memory -= u.score_memory;
        true
    }
}

/// A pod's resource requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Requests {
    /// CPU in millicores.
    pub cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
}

/// Sum of the containers' requests (limits when no request), or the largest init container's
/// if that is more: what the pod occupies on its node.
pub(crate) fn pod_requests(pod: &Value) -> Requests {
    let one = |c: &Value, res: &str| -> Option<Value> {
        c.pointer(&format!("/resources/requests/{res}"))
            .or_else(|| c.pointer(&format!("/resources/limits/{res}")))
            .cloned()
    };
    let list = |p: &str| {
        pod.pointer(p)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut r = Requests { cpu: 0, memory: 0 };
    for c in list("/spec/containers") {
        r.cpu += cpu_milli(one(&c, "cpu").as_ref());
        r.memory += whole_units(one(&c, "memory").as_ref());
    }
    for c in list("/spec/initContainers") {
        r.cpu = r.cpu.max(cpu_milli(one(&c, "cpu").as_ref()));
        r.memory = r.memory.max(whole_units(one(&c, "memory").as_ref()));
    }
    r
}

fn usage(node: usize, r: Requests) -> Usage {
    Usage {
        node,
        cpu: r.cpu,
        memory: r.memory,
        score_cpu: if r.cpu == 0 { DEFAULT_CPU_MILLI } else { r.cpu },
        score_memory: if r.memory == 0 {
            DEFAULT_MEMORY
        } else {
            r.memory
        },
    }
}

/// Whether one of `tolerations` tolerates the taint `key=value:effect`.
pub(crate) fn tolerates(tolerations: &[Value], key: &str, value: &str, effect: &str) -> bool {
    tolerations.iter().any(|t| {
        let s = |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("");
        let effect_ok = s("effect").is_empty() || s("effect") == effect;
        let exists = s("operator") == "Exists";
        let key_ok = (s("key").is_empty() && exists) || s("key") == key;
        let value_ok = exists || s("value") == value;
        effect_ok && key_ok && value_ok
    })
}

/// The outcome of filtering and scoring every node for one pod.
enum Decision {
    Bind(usize),
    NoFit(String),
}

/// How many feasible nodes to find before scoring stops: all of them in small clusters, a
/// shrinking share (at least 100) in large ones, as kube-scheduler's
/// `percentageOfNodesToScore` default does; this keeps a pod's cost flat in 5,000-node
/// clusters.
fn feasible_wanted(nodes: usize) -> usize {
    if nodes < 100 {
        return nodes;
    }
    let pct = (50 - (nodes / 125) as i64).max(5) as usize;
    (nodes * pct / 100).max(100)
}

/// Filters and scores nodes for one pod. The scan starts at `st.next_start` (rotating, so
/// sampling in large clusters covers every node over time) and stops after enough feasible
/// nodes; returns the decision and how many node slots were looked at.
fn decide(st: &State, r: Requests, tolerations: &[Value]) -> (Decision, usize) {
    let want = usage(0, r);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0;
    let mut feasible = 0;
    let wanted = feasible_wanted(st.live_nodes);
    let mut best: Option<(i128, &str, usize)> = None;
    let len = st.nodes.len();
    let mut scanned = 0;
    for step in 0..len {
        if feasible >= wanted && wanted > 0 {
            break;
        }
        scanned = step + 1;
        let i = (st.next_start + step) % len;
        let n = &st.nodes[i];
        if !n.live {
            continue;
        }
        total += 1;
        let mut fail = |why: String| *reasons.entry(why).or_default() += 1;
        if !n.schedulable {
            fail("node(s) were unschedulable".into());
            continue;
        }
        if !n.ready
            && !tolerates(
                tolerations,
                "node.kubernetes.io/not-ready",
                "",
                "NoSchedule",
            )
        {
            fail("node(s) had untolerated taint {node.kubernetes.io/not-ready: }".into());
            continue;
        }
        if let Some((k, v, _)) = n
            .taints
            .iter()
            .find(|(k, v, e)| !tolerates(tolerations, k, v, e))
        {
            fail(format!("node(s) had untolerated taint {{{k}: {v}}}"));
            continue;
        }
        let mut fits = true;
        if n.req_pods + 1 > n.pods {
            fail("Too many pods".into());
            fits = false;
        }
        if r.cpu > 0 && n.req_cpu + r.cpu > n.cpu {
            fail("Insufficient cpu".into());
            fits = false;
        }
        if r.memory > 0 && n.req_memory + r.memory > n.memory {
            fail("Insufficient memory".into());
            fits = false;
        }
        if !fits {
            continue;
        }
        feasible += 1;
        // LeastAllocated: mean free fraction of CPU and memory after placing the pod.
        let free = |cap: i64, used: i64| -> i128 {
            if cap <= 0 {
                return 0;
            }
            (i128::from(cap - used).max(0) * 10_000) / i128::from(cap)
        };
        let score = free(n.cpu, n.score_cpu + want.score_cpu)
            + free(n.memory, n.score_memory + want.score_memory);
        let better = match &best {
            None => true,
            Some((s, name, _)) => score > *s || (score == *s && n.name.as_str() < *name),
        };
        if better {
            best = Some((score, &n.name, i));
        }
    }
    let decision = match best {
        Some((_, _, i)) => Decision::Bind(i),
        None => {
            let mut parts: Vec<String> = reasons.iter().map(|(r, c)| format!("{c} {r}")).collect();
            parts.sort();
            let detail = if parts.is_empty() {
                String::new()
            } else {
                format!(" {}", parts.join(", "))
            };
            Decision::NoFit(format!("0/{total} nodes are available:{detail}."))
        }
    };
    (decision, scanned)
}

/// The scheduler of one cluster.
pub(crate) struct Scheduler {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<PodKey>>,
    state: Mutex<State>,
}

impl Scheduler {
    /// Puts every waiting pod back in the queue: capacity changed.
    fn wake(&self, st: &mut State) {
        for k in std::mem::take(&mut st.unschedulable) {
            self.queue.add(k);
        }
    }

    fn on_pod(&self, seen: Seen<'_>) {
        let mut st = lock(&self.state);
        match seen {
            Seen::Reset => {
                st.bound.clear();
                st.pending.clear();
                st.unschedulable.clear();
                for n in &mut st.nodes {
                    (n.req_cpu, n.req_memory, n.req_pods) = (0, 0, 0);
                    (n.score_cpu, n.score_memory) = (0, 0);
                }
            }
            Seen::Synced => {}
            Seen::Deleted { obj } => {
                let key = ns_key(obj.namespace(), obj.name());
                st.pending.remove(&key);
                if st.unaccount(&key) {
                    self.wake(&mut st);
                }
            }
            Seen::Upsert { obj, .. } => {
                let key = ns_key(obj.namespace(), obj.name());
                let pod = obj.value();
                let phase = str_at(&pod, "/status/phase").unwrap_or("Pending");
                let done = phase == "Succeeded" || phase == "Failed";
                match str_at(&pod, "/spec/nodeName").filter(|n| !n.is_empty()) {
                    Some(node) if !done => {
                        st.pending.remove(&key);
                        let i = st.slot(node);
                        let u = usage(i, pod_requests(&pod));
                        st.account(&key, u);
                    }
                    Some(_) => {
                        if st.unaccount(&key) {
                            self.wake(&mut st);
                        }
                    }
                    None => {
                        let ours =
                            str_at(&pod, "/spec/schedulerName").is_none_or(|s| s == SCHEDULER_NAME);
                        if ours && !super::util::is_deleting(&pod) && !st.pending.contains_key(&key)
                        {
                            st.pending.insert(key.clone(), obj.rv);
                            self.queue.add((obj.rv, key));
                        }
                    }
                }
            }
        }
    }

    fn on_node(&self, seen: Seen<'_>) {
        let mut st = lock(&self.state);
        self.apply_node(&mut st, seen);
        st.live_nodes = st.nodes.iter().filter(|n| n.live).count();
    }

    fn apply_node(&self, st: &mut State, seen: Seen<'_>) {
        match seen {
            Seen::Reset => st.node_gen += 1,
            Seen::Synced => {
                let g = st.node_gen;
                let mut changed = false;
                for n in &mut st.nodes {
                    if n.live && n.seen != g {
                        n.live = false;
                        changed = true;
                    }
                }
                if changed {
                    self.wake(st);
                }
            }
            Seen::Deleted { obj } => {
                if let Some(i) = st.by_name.get(obj.name()).copied() {
                    st.nodes[i].live = false;
                }
            }
            Seen::Upsert { obj, .. } => {
                let node = obj.value();
                let alloc = |r: &str| {
                    node.pointer(&format!("/status/allocatable/{r}"))
                        .or_else(|| node.pointer(&format!("/status/capacity/{r}")))
                };
                let taints = node
                    .pointer("/spec/taints")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|t| {
                        let s =
                            |f: &str| t.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                        let e = s("effect");
                        (e == "NoSchedule" || e == "NoExecute").then(|| (s("key"), s("value"), e))
                    })
                    .collect::<Vec<_>>();
                let (cpu, memory, pods) = (
                    cpu_milli(alloc("cpu")),
                    whole_units(alloc("memory")),
                    whole_units(alloc("pods")),
                );
                let ready = condition_true(&node, "Ready");
                let schedulable =
                    node.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true);
                let g = st.node_gen;
                let i = st.slot(obj.name());
                let n = &mut st.nodes[i];
                n.seen = g;
                let changed = !n.live
                    || n.ready != ready
                    || n.schedulable != schedulable
                    || n.taints != taints
                    || (n.cpu, n.memory, n.pods) != (cpu, memory, pods);
                n.live = true;
                n.ready = ready;
                n.schedulable = schedulable;
                n.taints = taints;
                (n.cpu, n.memory, n.pods) = (cpu, memory, pods);
                if changed {
                    self.wake(st);
                }
            }
        }
    }
}

impl Reconciler<PodKey> for Scheduler {
    const NAME: &'static str = "scheduler";

    async fn reconcile(&self, key: &PodKey) -> Result<Requeue, SimError> {
        let (seq, pod_key) = key;
        let def = &self.sim.kinds.pods;
        let (ns, name) = split_key(pod_key);
        let Some(cached) = self.sim.cache(def).get(&def.key(ns, name)) else {
            lock(&self.state).pending.remove(pod_key);
            return Ok(Requeue::No);
        };
        let pod = cached.value();
        let bound = str_at(&pod, "/spec/nodeName").is_some_and(|n| !n.is_empty());
        if bound || super::util::is_deleting(&pod) {
            return Ok(Requeue::No);
        }
        let requests = pod_requests(&pod);
        let tolerations = pod
            .pointer("/spec/tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let (decision, node_name) = {
            let mut st = lock(&self.state);
            if st.pending.get(pod_key) != Some(seq) {
                // Superseded by a newer sighting (after a re-list) or already handled.
                return Ok(Requeue::No);
            }
            let (d, scanned) = decide(&st, requests, &tolerations);
            if st.live_nodes >= 100 && !st.nodes.is_empty() {
                st.next_start = (st.next_start + scanned) % st.nodes.len();
            }
            match d {
                Decision::Bind(i) => {
                    // Reserve now so the next pod in this pass sees the node as fuller.
                    st.account(pod_key, usage(i, requests));
                    st.pending.remove(pod_key);
                    let n = st.nodes[i].name.clone();
                    (Decision::Bind(i), n)
                }
                Decision::NoFit(msg) => {
                    // Parked before writing, so a capacity change during the write wakes it.
                    st.unschedulable.insert(key.clone());
                    (Decision::NoFit(msg), String::new())
                }
            }
        };
        let opts = WriteOptions::by(super::SCHEDULER);
        match decision {
            Decision::Bind(_) => {
                let bind = json!({"spec": {"nodeName": node_name}});
                if let Err(e) = self
                    .sim
                    .engine
                    .patch(def, ns, name, PatchType::Merge, &bind, Target::Main, &opts)
                    .await
                {
                    let mut st = lock(&self.state);
                    st.unaccount(pod_key);
                    if e.code == 404 {
                        return Ok(Requeue::No);
                    }
                    st.pending.insert(pod_key.clone(), *seq);
                    return Err(e.into());
                }
                let now = self.sim.now_rfc3339();
                let status = json!({"status": {"conditions": [
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}
                ]}});
                match self.patch_status(def, ns, name, &status, &opts).await {
                    Ok(_) => Ok(Requeue::No),
                    Err(e) if e.code == 404 => Ok(Requeue::No),
                    // The binding stands; the kubelet writes the full status anyway.
                    Err(e) => {
                        tracing::debug!(pod = %pod_key, error = %e, "PodScheduled condition not written");
                        Ok(Requeue::No)
                    }
                }
            }
            Decision::NoFit(message) => {
                let current = condition(&pod, "PodScheduled");
                let same = current.is_some_and(|c| {
                    c.get("status").and_then(Value::as_str) == Some("False")
                        && c.get("message").and_then(Value::as_str) == Some(message.as_str())
                });
                if same {
                    return Ok(Requeue::No);
                }
                let now = self.sim.now_rfc3339();
                let status = json!({"status": {"phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": null, "lastTransitionTime": now,
                }]}});
                match self.patch_status(def, ns, name, &status, &opts).await {
                    Ok(_) => Ok(Requeue::No),
                    Err(e) if e.code == 404 => Ok(Requeue::No),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }
}

impl Scheduler {
    /// Patches a pod's status with a strategic merge patch, as kube-scheduler does: its
    /// conditions merge by `type`, so a `PodScheduled` written after the kubelet reported
    /// the pod Ready keeps the kubelet's conditions (a merge patch would replace the list).
    async fn patch_status(
        &self,
        def: &meridian_apiserver::registry::ResourceDef,
        ns: &str,
        name: &str,
        status: &Value,
        opts: &meridian_apiserver::engine::WriteOptions,
    ) -> Result<(), meridian_apiserver::status::ApiError> {
        self.sim
            .engine
            .patch(
                def,
                ns,
                name,
                PatchType::Strategic,
                status,
                Target::Status,
                opts,
            )
            .await
            .map(|_| ())
    }
}

/// Spawns the scheduler's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let s = Arc::new(Scheduler {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
        state: Mutex::new(State::default()),
    });
    let (a, b) = (s.clone(), s.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.nodes), move |e| a.on_node(e)),
        super::spawn_watch(sim.cache(&sim.kinds.pods), move |e| b.on_pod(e)),
        super::spawn_worker(sim, s.queue.clone(), s),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: i64, memory: i64) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            live: true,
            ready: true,
            schedulable: true,
            cpu,
            memory,
            pods: 110,
            ..NodeInfo::default()
        }
    }

    #[test]
    fn requests_sum_containers_and_take_init_max() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
                {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "2"}}}],
        }});
        let r = pod_requests(&pod);
        assert_eq!(r.cpu, 2000);
        assert_eq!(r.memory, (64 << 20) + (1 << 30));
    }

    #[test]
    fn least_allocated_then_name() {
        let mut st = State::default();
        for n in [node("b", 4000, 8 << 30), node("a", 4000, 8 << 30)] {
            st.by_name.insert(n.name.clone(), st.nodes.len());
            st.nodes.push(n);
        }
        let r = Requests {
            cpu: 1000,
            memory: 1 << 30,
        };
        let (Decision::Bind(first), _) = decide(&st, r, &[]) else {
            panic!("no fit")
        };
        assert_eq!(st.nodes[first].name, "a");
        st.account("p1", usage(first, r));
        let (Decision::Bind(second), _) = decide(&st, r, &[]) else {
            panic!("no fit")
        };
        assert_eq!(st.nodes[second].name, "b");
    }

    #[test]
    fn no_fit_message_counts_reasons() {
        let mut st = State::default();
        st.nodes.push(node("a", 1000, 1 << 30));
        st.nodes.push(node("b", 4000, 1 << 20));
        let mut tainted = node("c", 8000, 8 << 30);
        tainted
            .taints
            .push(("dedicated".into(), "gpu".into(), "NoSchedule".into()));
        st.nodes.push(tainted);
        let r = Requests {
            cpu: 2000,
            memory: 512 << 20,
        };
        let (Decision::NoFit(msg), _) = decide(&st, r, &[]) else {
            panic!("fit")
        };
        assert_eq!(
            msg,
            "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 node(s) had untolerated taint {dedicated: gpu}."
        );
        let tol = vec![
            json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}),
        ];
        assert!(matches!(decide(&st, r, &tol), (Decision::Bind(2), _)));
    }

    #[test]
    fn large_clusters_sample_and_rotate() {
        assert_eq!(feasible_wanted(50), 50);
        assert_eq!(feasible_wanted(5000), 500);
        assert_eq!(feasible_wanted(100_000), 5000);
        let mut st = State::default();
        for i in 0..1000 {
            let n = node(&format!("n{i:04}"), 4000, 8 << 30);
            st.by_name.insert(n.name.clone(), st.nodes.len());
            st.nodes.push(n);
        }
        st.live_nodes = 1000;
        let r = Requests {
            cpu: 100,
            memory: 1 << 20,
        };
        let (Decision::Bind(_), scanned) = decide(&st, r, &[]) else {
            panic!("no fit")
        };
        assert_eq!(scanned, feasible_wanted(1000));
    }
}

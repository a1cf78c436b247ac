//! The kubelets of every node, as one loop: a bound pod becomes `Running` and Ready after the
//! cluster's `ready_delay` (a tokio timer, never a blocking wait), with a pod IP from its
//! node's pod CIDR (see [`crate::podnet`]), the node's InternalIP as host IP and running
//! container statuses.
//!
//! With `serve_pods`, a pod's listeners are started (see [`super::containers`]) before its
//! `Ready=True` is written, so the API never reports a Ready pod that does not answer.
//!
//! A pod that runs to completion (`restartPolicy` `Never` or `OnFailure`, as a Job's or a
//! `helm test` hook's) is simulated as containers that exit 0 after running for the cluster's
//! `job_pod_duration`: it turns `Succeeded` and its address is freed. A Job's pod whose Job is
//! switched to fail ([`super::job::JobFailures`]) exits 1 instead and turns `Failed`.
//!
//! Pods on a node that turns NotReady get `Ready=False` (as the node lifecycle controller
//! marks them) and `True` again when it recovers. Pods being deleted are left to the engine.
//! The index holds per node only its CIDR index, address, readiness and a 256-bit map of
//! used pod addresses.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::containers::PodAddress;
use super::util::{self, condition, condition_true, lock, merge_condition, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// How long to wait before trying again when a node has no free pod address.
const NO_ADDRESS_RETRY: Duration = Duration::from_secs(5);
/// How long to wait before trying again when a pod's ports cannot be bound.
const START_RETRY: Duration = Duration::from_secs(1);

struct KNode {
    index: u32,
    /// The node's pod `/24` (`None`: past the pod network's limits, no pod addresses).
    base: Option<Ipv4Addr>,
    host_ip: String,
    ready: bool,
    /// Used host octets of the node's `/24`.
    used: [u64; 4],
}

impl KNode {
    fn mark(&mut self, ip: &str, used: bool) {
        let Ok(addr) = ip.parse::<Ipv4Addr>() else {
            return;
        };
        let Some(base) = self.base else {
            return;
        };
        if u32::from(addr) & !0xff != u32::from(base) {
            return;
        }
        let o = usize::from(addr.octets()[3]);
        if used {
            self.used[o / 64] |= 1 << (o % 64);
        } else {
            self.used[o / 64] &= !(1 << (o % 64));
        }
    }

    /// A free pod address (`.2` to `.254`; `.1` is the node's bridge). The search starts at a
    /// slot derived from the pod's key, so the same pods get the same addresses whatever order
    /// the kubelet happens to see them in (first-free would depend on that order).
    fn allocate(&mut self, pod_key: &str) -> Option<String> {
        let base = self.base?;
        let start = (util::fnv32a(pod_key.as_bytes()) % 253) as usize;
        let o = (0..253)
            .map(|i| 2 + (start + i) % 253)
            .find(|o| self.used[o / 64] & (1 << (o % 64)) == 0)?;
        self.used[o / 64] |= 1 << (o % 64);
        Some(util::ipv4_add(base, o as u32).to_string())
    }
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, KNode>,
    /// Bound pods waiting out `ready_delay` → when they start.
    starts: HashMap<String, Instant>,
    /// Running run-to-completion pods → when their containers exit.
    finishes: HashMap<String, Instant>,
}

/// The simulated kubelets of one cluster.
pub(crate) struct Kubelet {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
    state: Mutex<State>,
}

fn node_ip(node: &Value) -> String {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
        .and_then(|a| a.get("address").and_then(Value::as_str))
        .unwrap_or("")
        .to_string()
}

impl Kubelet {
    /// Pods bound to `node`: by the cache's `spec.nodeName` field, no parsing.
    fn pods_on(&self, node: &str) -> Vec<Arc<meridian_apiserver::cache::Cached>> {
        let def = &self.sim.kinds.pods;
        self.sim
            .cache(def)
            .list(&def.prefix(), None, None, 0, |c| {
                c.field("spec.nodeName") == Some(node)
            })
            .items
    }

    fn on_node(&self, seen: Seen<'_>) {
        match seen {
            Seen::Reset | Seen::Synced => {}
            Seen::Deleted { obj } => {
                lock(&self.state).nodes.remove(obj.name());
            }
            Seen::Upsert { obj, .. } => {
                let node = obj.value();
                let ready = condition_true(&node, "Ready");
                let host_ip = node_ip(&node);
                let (net, cluster) = (self.sim.config.pod_network, self.sim.config.index);
                let cidr_index =
                    str_at(&node, "/spec/podCIDR").and_then(|c| net.node_index(cluster, c));
                let mut st = lock(&self.state);
                let (is_new, flipped) = match st.nodes.get_mut(obj.name()) {
                    Some(n) => {
                        let flipped = n.ready != ready;
                        n.ready = ready;
                        n.host_ip = host_ip;
                        (false, flipped)
                    }
                    None => {
                        // Nodes created elsewhere without a pod CIDR get the first free index.
                        let index = cidr_index.unwrap_or_else(|| {
                            let used: std::collections::HashSet<u32> =
                                st.nodes.values().map(|n| n.index).collect();
                            (0..).find(|i| !used.contains(i)).unwrap_or(0)
                        });
                        st.nodes.insert(
                            obj.name().to_string(),
                            KNode {
                                index,
                                base: net.node_cidr_base(cluster, index),
                                host_ip,
                                ready,
                                used: [0; 4],
                            },
                        );
                        (true, false)
                    }
                };
                drop(st);
                if is_new || flipped {
                    let pods = self.pods_on(obj.name());
                    let mut st = lock(&self.state);
                    for p in pods {
                        if is_new {
                            let v = p.value();
                            if let (Some(ip), Some(n)) =
                                (str_at(&v, "/status/podIP"), st.nodes.get_mut(obj.name()))
                            {
                                n.mark(ip, true);
                            }
                        }
                        self.queue.add(ns_key(p.namespace(), p.name()));
                    }
                }
            }
        }
    }

    fn on_pod(&self, seen: Seen<'_>) {
        let mut st = lock(&self.state);
        match seen {
            Seen::Reset => {
                for n in st.nodes.values_mut() {
                    n.used = [0; 4];
                }
            }
            Seen::Synced => {}
            Seen::Deleted { obj } => {
                let key = ns_key(obj.namespace(), obj.name());
                st.starts.remove(&key);
                st.finishes.remove(&key);
                let pod = obj.value();
                // A finished pod's address was freed when it finished (and may be another's now).
                if let (Some(node), Some(ip)) = (
                    str_at(&pod, "/spec/nodeName"),
                    str_at(&pod, "/status/podIP").filter(|_| !is_finished(&pod)),
                ) && let Some(n) = st.nodes.get_mut(node)
                {
                    n.mark(ip, false);
                }
            }
            Seen::Upsert { obj, .. } => {
                let pod = obj.value();
                let Some(node) = str_at(&pod, "/spec/nodeName").filter(|n| !n.is_empty()) else {
                    return;
                };
                let finished = is_finished(&pod);
                let ip = str_at(&pod, "/status/podIP").filter(|_| !finished);
                let node_ready = match st.nodes.get_mut(node) {
                    Some(n) => {
                        if let Some(ip) = ip {
                            n.mark(ip, true);
                        }
                        Some(n.ready)
                    }
                    None => None,
                };
                if util::is_deleting(&pod) || finished {
                    return;
                }
                let running = str_at(&pod, "/status/phase") == Some("Running") && ip.is_some();
                let settled = running
                    && node_ready == Some(condition_true(&pod, "Ready"))
                    && !runs_to_completion(&pod);
                if !settled {
                    self.queue.add(ns_key(obj.namespace(), obj.name()));
                }
            }
        }
    }

    fn release(&self, node: &str, ip: &str) {
        if let Some(n) = lock(&self.state).nodes.get_mut(node) {
            n.mark(ip, false);
        }
    }
}

/// Whether the pod's containers are not restarted when they exit (a Job's, a test hook's).
fn runs_to_completion(pod: &Value) -> bool {
    matches!(
        str_at(pod, "/spec/restartPolicy"),
        Some("Never" | "OnFailure")
    )
}

/// Whether a bound, not supervised pod of a runc cluster is simulated rather than run with
/// runc: only with `serve_pods`, where a pod whose images are not all in the image directory
/// (`images_local` false) is simulated and serves on its ports, so that a runc cluster can
/// host workloads whose images are not built locally next to the ones it runs; one the
/// simulation already started (`started`: Running with an address) stays so whatever the
/// directory holds now. Without `serve_pods` runc takes every pod (`ErrImagePull` for a
/// missing image).
fn simulated_in_runc_cluster(
    started: bool,
    serve_pods: bool,
    images_local: impl FnOnce() -> bool,
) -> bool {
    serve_pods && (started || !images_local())
}

/// The images of a pod's init containers and containers.
fn pod_images(pod: &Value) -> impl Iterator<Item = &str> {
    ["/spec/initContainers", "/spec/containers"]
        .into_iter()
        .filter_map(|p| pod.pointer(p).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| str_at(c, "/image"))
}

/// Whether the pod has finished for good.
fn is_finished(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// The `status` of a pod whose containers all exited, from its running status: not ready
/// (reason `PodCompleted` or `PodFailed`, as the kubelet writes), each container terminated
/// `Completed` (exit 0) or, when `failed`, `Error` (exit 1).
fn finished_status(pod: &Value, now: &str, failed: bool) -> Value {
    let (phase, pod_reason, exit_code, container_reason) = if failed {
        ("Failed", "PodFailed", 1, "Error")
    } else {
        ("Succeeded", "PodCompleted", 0, "Completed")
    };
    let mut status = pod.get("status").cloned().unwrap_or_else(|| json!({}));
    status["phase"] = Value::from(phase);
    let started = str_at(pod, "/status/startTime").unwrap_or(now).to_string();
    for t in ["Ready", "ContainersReady"] {
        let c = merge_condition(
            condition(pod, t),
            t,
            "False",
            Some(pod_reason),
            None,
            now,
            false,
        );
        if let Some(list) = status["conditions"].as_array_mut() {
            list.retain(|c| c.get("type").and_then(Value::as_str) != Some(t));
            list.push(c);
        }
    }
    if let Some(list) = status["containerStatuses"].as_array_mut() {
        for c in list {
            let id = c.get("containerID").cloned().unwrap_or(Value::Null);
            c["ready"] = Value::from(false);
            c["started"] = Value::from(false);
            c["state"] = json!({"terminated": {
                "exitCode": exit_code, "reason": container_reason, "startedAt": started,
                "finishedAt": now, "containerID": id,
            }});
        }
    }
    status
}

/// The `status` of a running pod on a node of the given readiness.
fn running_status(pod: &Value, ip: &str, host_ip: &str, ready: bool, now: &str) -> Value {
    let old = |t: &str| condition(pod, t);
    let r = if ready { "True" } else { "False" };
    let cond = |t: &str, s: &str| merge_condition(old(t), t, s, None, None, now, false);
    let started = str_at(pod, "/status/startTime").unwrap_or(now);
    let ns_name = format!(
        "{}/{}",
        str_at(pod, "/metadata/namespace").unwrap_or(""),
        str_at(pod, "/metadata/name").unwrap_or("")
    );
    let statuses = |list: &str, init: bool| -> Vec<Value> {
        pod.pointer(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                let id = format!(
                    "containerd://{:08x}{:08x}",
                    util::fnv32a(ns_name.as_bytes()),
                    util::fnv32a(name.as_bytes())
                );
                let state = if init {
                    json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started, "containerID": id}})
                } else {
                    json!({"running": {"startedAt": started}})
                };
                json!({
                    "name": name, "image": image, "imageID": format!("{image}@sha256:{:064x}", u128::from(util::fnv32a(image.as_bytes()))),
                    "containerID": id, "ready": !init, "started": !init, "restartCount": 0, "state": state,
                })
            })
            .collect()
    };
    let mut status = json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": started,
        "conditions": [
            cond("PodReadyToStartContainers", "True"),
            cond("Initialized", "True"),
            cond("Ready", r),
            cond("ContainersReady", "True"),
            cond("PodScheduled", "True"),
        ],
        "containerStatuses": statuses("/spec/containers", false),
    });
    let init = statuses("/spec/initContainers", true);
    if !init.is_empty() {
        status["initContainerStatuses"] = Value::Array(init);
    }
    if let Some(q) = pod.pointer("/status/qosClass") {
        status["qosClass"] = q.clone();
    }
    status
}

impl Kubelet {
    /// Writes a pod's whole `status`, as the kubelet does, through the status subresource.
    async fn write_status(
        &self,
        key: &str,
        status: Value,
    ) -> Result<meridian_apiserver::engine::Written, meridian_apiserver::status::ApiError> {
        self.sim.write_pod_status(key, &status).await
    }

    /// Reports a started run-to-completion pod `Succeeded` (or `Failed`, when its Job is
    /// switched to fail) once it has run for `job_pod_duration`, and frees its address.
    async fn complete(
        &self,
        key: &str,
        pod: &Value,
        node: &str,
        ip: &str,
    ) -> Result<Requeue, SimError> {
        {
            let mut st = lock(&self.state);
            let run_for = self.sim.config.job_pod_duration;
            let due = *st
                .finishes
                .entry(key.to_string())
                .or_insert_with(|| Instant::now() + run_for);
            let now = Instant::now();
            if now < due {
                return Ok(Requeue::After(due - now));
            }
        }
        let failed = super::util::controller_of(pod, "Job").is_some_and(|(job, _)| {
            self.sim
                .job_failures
                .failing(str_at(pod, "/metadata/namespace").unwrap_or(""), job)
        });
        let status = finished_status(pod, &self.sim.now_rfc3339(), failed);
        match self.write_status(key, status).await {
            Ok(_) => {
                lock(&self.state).finishes.remove(key);
                self.release(node, ip);
                Ok(Requeue::No)
            }
            Err(e) if e.code == 404 => {
                lock(&self.state).finishes.remove(key);
                Ok(Requeue::No)
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl Reconciler<String> for Kubelet {
    const NAME: &'static str = "kubelet";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.pods;
        let (ns, name) = split_key(key);
        let Some(cached) = self.sim.cache(def).get(&def.key(ns, name)) else {
            let mut st = lock(&self.state);
            st.starts.remove(key);
            st.finishes.remove(key);
            return Ok(Requeue::No);
        };
        let pod = cached.value();
        let Some(node) = str_at(&pod, "/spec/nodeName").filter(|n| !n.is_empty()) else {
            return Ok(Requeue::No);
        };
        let phase = str_at(&pod, "/status/phase").unwrap_or("Pending");
        if util::is_deleting(&pod) || phase == "Succeeded" || phase == "Failed" {
            return Ok(Requeue::No);
        }
        // On a runc cluster the pod's supervisor owns its status once it is started.
        if let Some(rt) = &self.sim.runc {
            match rt.supervises(key, &cached.uid) {
                Some(true) => return Ok(Requeue::No),
                // An older pod of the same name is still stopping.
                Some(false) => return Ok(Requeue::After(START_RETRY)),
                None => {}
            }
        }
        let existing_ip = str_at(&pod, "/status/podIP").map(str::to_string);
        let runc = self.sim.runc.as_ref().filter(|rt| {
            // Not supervised (looked at above): Running with an address means simulated.
            let started = phase == "Running" && existing_ip.is_some();
            !simulated_in_runc_cluster(started, self.sim.config.serve_pods, || {
                rt.images
                    .has_all(pod_images(&pod))
                    .inspect_err(|e| tracing::warn!(pod = %key, error = %e, "cannot read the image directory"))
                    // Runc reports the error as the pod's waiting reason.
                    .unwrap_or(true)
            })
        });
        if runc.is_none()
            && phase == "Running"
            && runs_to_completion(&pod)
            && let Some(ip) = &existing_ip
        {
            return self.complete(key, &pod, node, ip).await;
        }
        let (ip, host_ip, ready, fresh) = {
            let mut st = lock(&self.state);
            let started = phase == "Running" && existing_ip.is_some();
            if !started {
                let delay = self.sim.config.ready_delay;
                let due = *st
                    .starts
                    .entry(key.clone())
                    .or_insert_with(|| Instant::now() + delay);
                let now = Instant::now();
                if now < due {
                    return Ok(Requeue::After(due - now));
                }
            }
            let Some(n) = st.nodes.get_mut(node) else {
                // The node's own event re-queues its pods.
                return Ok(Requeue::No);
            };
            let (ip, fresh) = match existing_ip {
                Some(ip) => (ip, false),
                None => match n.allocate(key) {
                    Some(ip) => (ip, true),
                    None => {
                        tracing::warn!(node, pod = %key, "no free pod address on the node");
                        return Ok(Requeue::After(NO_ADDRESS_RETRY));
                    }
                },
            };
            (ip, n.host_ip.clone(), n.ready, fresh)
        };
        if let Some(rt) = runc {
            let task = crate::runc::pod::spawn(self.sim.clone(), rt.clone(), key, pod, ip, host_ip);
            rt.supervise(key, &cached.uid, task);
            lock(&self.state).starts.remove(key);
            return Ok(Requeue::No);
        }
        let now = self.sim.now_rfc3339();
        let status = running_status(&pod, &ip, &host_ip, ready, &now);
        let unchanged = [
            "phase",
            "podIP",
            "hostIP",
            "conditions",
            "containerStatuses",
        ]
        .iter()
        .all(|f| pod.pointer(&format!("/status/{f}")) == status.get(*f));
        if unchanged {
            lock(&self.state).starts.remove(key);
            return Ok(Requeue::No);
        }
        // A pod reported Ready must already answer on its ports.
        if ready
            && let Some(rt) = &self.sim.containers
            && let Some(address) = PodAddress::of(&pod, &ip)
            && let Err(e) = rt.start(key, address, cached.rv).await
        {
            if fresh {
                self.release(node, &ip);
            }
            tracing::warn!(pod = %key, error = %e, "cannot start the pod's server; retrying");
            return Ok(Requeue::After(START_RETRY));
        }
        match self.write_status(key, status).await {
            Ok(_) => {
                lock(&self.state).starts.remove(key);
                Ok(Requeue::No)
            }
            Err(e) => {
                if fresh {
                    self.release(node, &ip);
                }
                if e.code == 404 {
                    lock(&self.state).starts.remove(key);
                    return Ok(Requeue::No);
                }
                Err(e.into())
            }
        }
    }
}

/// Spawns the kubelet loop's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let k = Arc::new(Kubelet {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
        state: Mutex::new(State::default()),
    });
    let (a, b) = (k.clone(), k.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.nodes), move |e| a.on_node(e)),
        super::spawn_watch(sim.cache(&sim.kinds.pods), move |e| b.on_pod(e)),
        super::spawn_worker(sim, k.queue.clone(), k),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_runs_a_runc_clusters_pod() {
        // (started, serve_pods, images local) → simulated.
        for (started, serve, local, simulated) in [
            (false, false, false, false),
            (false, false, true, false),
            (false, true, true, false),
            (false, true, false, true),
            (true, false, true, false),
            (true, true, true, true),
        ] {
            assert_eq!(
                simulated_in_runc_cluster(started, serve, || local),
                simulated,
                "started {started}, servePods {serve}, images local {local}"
            );
        }
        let pod = json!({"spec": {
            "initContainers": [{"name": "i", "image": "busybox"}],
            "containers": [{"name": "a", "image": "nginx:1.27"}, {"name": "b"}],
        }});
        assert_eq!(
            pod_images(&pod).collect::<Vec<_>>(),
            ["busybox", "nginx:1.27"]
        );
    }

    #[test]
    fn addresses_are_stable_per_pod_and_stay_in_the_node_cidr() {
        let node = || KNode {
            index: 3,
            base: crate::podnet::PodNetwork::Overlay.node_cidr_base(0, 3),
            host_ip: String::new(),
            ready: true,
            used: [0; 4],
        };
        let (mut a, mut b) = (node(), node());
        // Same pods, opposite order: same addresses.
        let a1 = a.allocate("ns/p1").unwrap();
        let a2 = a.allocate("ns/p2").unwrap();
        let b2 = b.allocate("ns/p2").unwrap();
        let b1 = b.allocate("ns/p1").unwrap();
        assert_eq!((a1.clone(), a2.clone()), (b1, b2));
        assert_ne!(a1, a2);
        for ip in [&a1, &a2] {
            let last: u32 = ip.strip_prefix("10.244.3.").unwrap().parse().unwrap();
            assert!((2..=254).contains(&last), "{ip}");
        }
        // A taken slot is skipped; a released one is reused.
        let mut c = node();
        c.mark(&a1, true);
        let other = c.allocate("ns/p1").unwrap();
        assert_ne!(other, a1);
        c.mark(&a1, false);
        assert_eq!(c.allocate("ns/p1").unwrap(), a1);
        // Addresses outside the node's range are ignored.
        c.mark("10.244.4.9", true);
        let mut full = node();
        for i in 0..253 {
            assert!(full.allocate(&format!("ns/x{i}")).is_some());
        }
        assert_eq!(full.allocate("ns/one-too-many"), None);
    }
}

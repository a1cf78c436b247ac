//! Service plumbing: ClusterIP allocation (first free in the cluster's
//! [`ServiceNet`](crate::podnet::ServiceNet), `10.96.0.0/16` unless its pods really run, so a
//! fresh cluster gives the same addresses to the same Services) and, for every Service with a selector,
//! the `v1` Endpoints and `discovery.k8s.io/v1` EndpointSlice that follow pod readiness.
//!
//! Named target ports resolve against each pod's container ports; pods that resolve to
//! different port sets land in different Endpoints subsets and EndpointSlices. The index
//! holds each Service's selector (to map pod events to Services) and the used ClusterIPs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use meridian_apiserver::cache::Cached;
use meridian_apiserver::engine::{DeleteOptions, PatchType, Target, WriteOptions};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use crate::podnet::ServiceNet;

use super::util::{self, condition_true, lock, owner_ref, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// Label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming a slice's manager.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// A resolved port: (name, port, protocol).
type Port = (String, i64, String);

#[derive(Default)]
struct State {
    /// namespace → service name → selector.
    selectors: HashMap<String, BTreeMap<String, Map<String, Value>>>,
    /// Offsets in the Service CIDR in use.
    cluster_ips: BTreeSet<u32>,
}

/// The Endpoints/EndpointSlice controller (and ClusterIP allocator) of one cluster.
pub(crate) struct EndpointsController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
    state: Mutex<State>,
    /// Where ClusterIPs come from.
    net: ServiceNet,
}

impl EndpointsController {
    fn service_offset(&self, ip: &str) -> Option<u32> {
        self.net.offset(ip)
    }

    fn on_service(&self, seen: Seen<'_>) {
        let mut st = lock(&self.state);
        match seen {
            Seen::Reset => *st = State::default(),
            Seen::Synced => {}
            Seen::Deleted { obj } => {
                let svc = obj.value();
                if let Some(o) =
                    str_at(&svc, "/spec/clusterIP").and_then(|ip| self.service_offset(ip))
                {
                    st.cluster_ips.remove(&o);
                }
                if let Some(m) = st.selectors.get_mut(obj.namespace()) {
                    m.remove(obj.name());
                }
                self.queue.add(ns_key(obj.namespace(), obj.name()));
            }
            Seen::Upsert { obj, prev } => {
                let svc = obj.value();
                if let Some(p) = prev
                    && let Some(o) =
                        str_at(&p.value(), "/spec/clusterIP").and_then(|ip| self.service_offset(ip))
                {
                    st.cluster_ips.remove(&o);
                }
                if let Some(o) =
                    str_at(&svc, "/spec/clusterIP").and_then(|ip| self.service_offset(ip))
                {
                    st.cluster_ips.insert(o);
                }
                let selector = svc
                    .pointer("/spec/selector")
                    .and_then(Value::as_object)
                    .filter(|s| !s.is_empty())
                    .cloned();
                let by_ns = st.selectors.entry(obj.namespace().to_string()).or_default();
                match selector {
                    Some(s) => {
                        by_ns.insert(obj.name().to_string(), s);
                    }
                    None => {
                        by_ns.remove(obj.name());
                    }
                }
                self.queue.add(ns_key(obj.namespace(), obj.name()));
            }
        }
    }

    fn on_pod(&self, seen: Seen<'_>) {
        let (obj, prev) = match seen {
            Seen::Upsert { obj, prev } => (obj, prev),
            Seen::Deleted { obj } => (obj, None),
            Seen::Reset | Seen::Synced => return,
        };
        let st = lock(&self.state);
        let Some(services) = st.selectors.get(obj.namespace()) else {
            return;
        };
        for (name, sel) in services {
            let hit = obj.labels.has_all(sel) || prev.is_some_and(|p| p.labels.has_all(sel));
            if hit {
                self.queue.add(ns_key(obj.namespace(), name));
            }
        }
    }

    /// An Endpoints object or slice removed by someone else is put back.
    fn on_owned(&self, seen: Seen<'_>, by_label: bool) {
        if let Seen::Deleted { obj } = seen {
            let svc = if by_label {
                match obj.labels.get(SERVICE_NAME_LABEL) {
                    Some(s) => s.to_string(),
                    None => return,
                }
            } else {
                obj.name().to_string()
            };
            self.queue.add(ns_key(obj.namespace(), &svc));
        }
    }

    async fn allocate_cluster_ip(&self, ns: &str, name: &str) -> Result<(), SimError> {
        let offset = {
            let mut st = lock(&self.state);
            // .0 is the network address; the first Service gets .1, as on kubeadm clusters.
            let Some(o) = (1..self.net.size - 1).find(|o| !st.cluster_ips.contains(o)) else {
                return Err(SimError::Invalid("the Service CIDR is exhausted".into()));
            };
            st.cluster_ips.insert(o);
            o
        };
        let ip = self.net.addr(offset).to_string();
        let patch = json!({"spec": {"clusterIP": ip, "clusterIPs": [ip]}});
        let res = self
            .sim
            .engine
            .patch(
                &self.sim.kinds.services,
                ns,
                name,
                PatchType::Merge,
                &patch,
                Target::Main,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await;
        if let Err(e) = res {
            lock(&self.state).cluster_ips.remove(&offset);
            if e.code != 404 {
                return Err(e.into());
            }
        }
        Ok(())
    }

    async fn write(
        &self,
        def: &meridian_apiserver::registry::ResourceDef,
        ns: &str,
        name: &str,
        existing: Option<&Arc<Cached>>,
        desired: Value,
        fields: &[&str],
    ) -> Result<(), SimError> {
        let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
        match existing {
            None => match self.sim.engine.create(def, ns, desired, &opts).await {
                Ok(_) => Ok(()),
                Err(e) => Err(e.into()),
            },
            Some(c) => {
                let mut cur = c.value();
                let same = fields.iter().all(|f| cur.pointer(f) == desired.pointer(f));
                if same {
                    return Ok(());
                }
                for f in fields {
                    let key = f.trim_start_matches('/');
                    if let Some((parent, leaf)) = key.rsplit_once('/') {
                        let slot = &mut cur[parent];
                        match desired.pointer(f) {
                            Some(v) => slot[leaf] = v.clone(),
                            None => {
                                if let Some(m) = slot.as_object_mut() {
                                    m.remove(leaf);
                                }
                            }
                        }
                    } else {
                        match desired.pointer(f) {
                            Some(v) => cur[key] = v.clone(),
                            None => {
                                if let Some(m) = cur.as_object_mut() {
                                    m.remove(key);
                                }
                            }
                        }
                    }
                }
                let written = self
                    .sim
                    .engine
                    .update(def, ns, name, cur, Target::Main, &opts)
                    .await;
                super::done_unless_failed(written)
            }
        }
    }
}

/// Resolves the Service's ports for one pod (named target ports via container ports).
fn resolve_ports(svc_ports: &[Value], pod: &Value) -> Vec<Port> {
    let container_ports: Vec<&Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|c| {
            c.get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .collect();
    let mut out = Vec::new();
    for p in svc_ports {
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let proto = p
            .get("protocol")
            .and_then(Value::as_str)
            .unwrap_or("TCP")
            .to_string();
        let target = p.get("targetPort").or_else(|| p.get("port"));
        let port = match target {
            Some(Value::Number(n)) => n.as_i64(),
            Some(Value::String(s)) => match s.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => container_ports
                    .iter()
                    .find(|cp| cp.get("name").and_then(Value::as_str) == Some(s.as_str()))
                    .and_then(|cp| cp.get("containerPort").and_then(Value::as_i64)),
            },
            _ => None,
        };
        if let Some(port) = port {
            out.push((name, port, proto));
        }
    }
    out
}

struct PodEndpoint {
    ip: String,
    ready: bool,
    terminating: bool,
    node: Option<String>,
    zone: Option<String>,
    /// The pod's `spec.hostname` when its `spec.subdomain` names this Service: what the
    /// cluster DNS answers `<hostname>.<svc>.<ns>.svc.<domain>` with.
    hostname: Option<String>,
    target: Value,
}

impl Reconciler<String> for EndpointsController {
    const NAME: &'static str = "endpoints";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let ep_cache = self.sim.cache(&kinds.endpoints);
        let existing_ep = ep_cache.get(&kinds.endpoints.key(ns, name));
        let Some(cached) = self
            .sim
            .cache(&kinds.services)
            .get(&kinds.services.key(ns, name))
        else {
            // Slices are owned by the Service and collected with it; Endpoints are not.
            if existing_ep.is_some() {
                let deleted = self
                    .sim
                    .engine
                    .delete(&kinds.endpoints, ns, name, &DeleteOptions::default())
                    .await;
                super::done_unless_failed(deleted)?;
            }
            return Ok(Requeue::No);
        };
        let svc = cached.value();
        if util::is_deleting(&svc) || str_at(&svc, "/spec/type") == Some("ExternalName") {
            return Ok(Requeue::No);
        }
        if str_at(&svc, "/spec/clusterIP").is_none_or(str::is_empty) {
            self.allocate_cluster_ip(ns, name).await?;
        }
        let Some(selector) = svc
            .pointer("/spec/selector")
            .and_then(Value::as_object)
            .filter(|s| !s.is_empty())
        else {
            // Without a selector, endpoints are the user's to manage.
            return Ok(Requeue::No);
        };
        let publish_not_ready = svc
            .pointer("/spec/publishNotReadyAddresses")
            .and_then(Value::as_bool)
            == Some(true);
        let svc_ports: Vec<Value> = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let pods_def = &kinds.pods;
        let pods = self
            .sim
            .cache(pods_def)
            .list(&pods_def.namespace_prefix(Some(ns)), None, None, 0, |c| {
                c.labels.has_all(selector)
            })
            .items;
        let nodes = self.sim.cache(&kinds.nodes);
        // Port set → endpoints with it.
        let mut groups: BTreeMap<Vec<Port>, Vec<PodEndpoint>> = BTreeMap::new();
        for c in &pods {
            let pod = c.value();
            let phase = str_at(&pod, "/status/phase").unwrap_or("Pending");
            let Some(ip) = str_at(&pod, "/status/podIP").filter(|s| !s.is_empty()) else {
                continue;
            };
            if phase == "Succeeded" || phase == "Failed" {
                continue;
            }
            let terminating = util::is_deleting(&pod);
            let node = str_at(&pod, "/spec/nodeName").map(String::from);
            let zone = node.as_ref().and_then(|n| {
                nodes.get(&kinds.nodes.key("", n)).and_then(|c| {
                    c.labels
                        .get("topology.kubernetes.io/zone")
                        .map(String::from)
                })
            });
            let ports = resolve_ports(&svc_ports, &pod);
            let hostname = str_at(&pod, "/spec/hostname")
                .filter(|h| !h.is_empty() && str_at(&pod, "/spec/subdomain") == Some(name))
                .map(String::from);
            groups.entry(ports).or_default().push(PodEndpoint {
                ip: ip.to_string(),
                ready: condition_true(&pod, "Ready"),
                terminating,
                node,
                zone,
                hostname,
                target: json!({"kind": "Pod", "namespace": ns, "name": c.name(), "uid": &*c.uid}),
            });
        }
        for eps in groups.values_mut() {
            eps.sort_by(|a, b| a.ip.cmp(&b.ip));
        }
        let port_json = |ports: &[Port], named: bool| -> Vec<Value> {
            ports
                .iter()
                .map(|(n, p, proto)| {
                    let mut v = json!({"port": p, "protocol": proto});
                    if named || !n.is_empty() {
                        v["name"] = Value::from(n.as_str());
                    }
                    v
                })
                .collect()
        };

        // v1 Endpoints.
        let mut subsets = Vec::new();
        for (ports, eps) in &groups {
            if ports.is_empty() {
                continue;
            }
            let addr = |e: &PodEndpoint| {
                let mut a = json!({"ip": e.ip, "targetRef": e.target});
                if let Some(n) = &e.node {
                    a["nodeName"] = Value::from(n.as_str());
                }
                if let Some(h) = &e.hostname {
                    a["hostname"] = Value::from(h.as_str());
                }
                a
            };
            let live = eps.iter().filter(|e| !e.terminating);
            let ready: Vec<Value> = live
                .clone()
                .filter(|e| e.ready || publish_not_ready)
                .map(addr)
                .collect();
            let not_ready: Vec<Value> = live
                .filter(|e| !(e.ready || publish_not_ready))
                .map(addr)
                .collect();
            if ready.is_empty() && not_ready.is_empty() {
                continue;
            }
            let mut s = json!({"ports": port_json(ports, false)});
            if !ready.is_empty() {
                s["addresses"] = Value::Array(ready);
            }
            if !not_ready.is_empty() {
                s["notReadyAddresses"] = Value::Array(not_ready);
            }
            subsets.push(s);
        }
        let labels = svc
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let mut endpoints = json!({
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
        });
        if !subsets.is_empty() {
            endpoints["subsets"] = Value::Array(subsets);
        }
        self.write(
            &kinds.endpoints,
            ns,
            name,
            existing_ep.as_ref(),
            endpoints,
            &["/metadata/labels", "/subsets"],
        )
        .await?;

        // discovery.k8s.io/v1 EndpointSlices: one per port set (one in the usual case).
        let slice_def = &kinds.endpoint_slices;
        let slice_cache = self.sim.cache(slice_def);
        let existing: Vec<Arc<Cached>> = slice_cache
            .list(&slice_def.namespace_prefix(Some(ns)), None, None, 0, |c| {
                c.labels.get(SERVICE_NAME_LABEL) == Some(name)
                    && c.labels.get(MANAGED_BY_LABEL) == Some(MANAGED_BY)
            })
            .items;
        if groups.is_empty() {
            groups.insert(Vec::new(), Vec::new());
        }
        let mut keep = BTreeSet::new();
        for (i, (ports, eps)) in groups.iter().enumerate() {
            let seed = if i == 0 {
                key.clone()
            } else {
                format!("{key}#{ports:?}")
            };
            let slice_name = format!("{name}-{}", util::suffix5(&seed));
            keep.insert(slice_name.clone());
            let endpoints: Vec<Value> = eps
                .iter()
                .map(|e| {
                    let mut v = json!({
                        "addresses": [e.ip],
                        "conditions": {
                            "ready": e.ready && !e.terminating,
                            "serving": e.ready,
                            "terminating": e.terminating,
                        },
                        "targetRef": e.target,
                    });
                    if let Some(n) = &e.node {
                        v["nodeName"] = Value::from(n.as_str());
                    }
                    if let Some(z) = &e.zone {
                        v["zone"] = Value::from(z.as_str());
                    }
                    if let Some(h) = &e.hostname {
                        v["hostname"] = Value::from(h.as_str());
                    }
                    v
                })
                .collect();
            let mut slice_labels = labels.as_object().cloned().unwrap_or_default();
            slice_labels.insert(SERVICE_NAME_LABEL.into(), Value::from(name));
            slice_labels.insert(MANAGED_BY_LABEL.into(), Value::from(MANAGED_BY));
            let slice = json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name,
                    "namespace": ns,
                    "labels": slice_labels,
                    "ownerReferences": [owner_ref("v1", "Service", &svc)],
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": port_json(ports, true),
            });
            let current = existing.iter().find(|c| c.name() == slice_name);
            self.write(
                slice_def,
                ns,
                &slice_name,
                current,
                slice,
                &["/metadata/labels", "/addressType", "/endpoints", "/ports"],
            )
            .await?;
        }
        for c in existing.iter().filter(|c| !keep.contains(c.name())) {
            let deleted = self
                .sim
                .engine
                .delete(slice_def, ns, c.name(), &DeleteOptions::default())
                .await;
            super::done_unless_failed(deleted)?;
        }
        Ok(Requeue::No)
    }
}

/// Spawns the Endpoints controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(EndpointsController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
        state: Mutex::new(State::default()),
        net: ServiceNet::of(sim.runc.is_some(), sim.config.index),
    });
    let (a, b, d, e) = (c.clone(), c.clone(), c.clone(), c.clone());
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.services), move |ev| a.on_service(ev)),
        super::spawn_watch(sim.cache(&sim.kinds.pods), move |ev| b.on_pod(ev)),
        super::spawn_watch(sim.cache(&sim.kinds.endpoints), move |ev| {
            d.on_owned(ev, false)
        }),
        super::spawn_watch(sim.cache(&sim.kinds.endpoint_slices), move |ev| {
            e.on_owned(ev, true)
        }),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_target_ports_resolve_per_pod() {
        let svc_ports = vec![
            json!({"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}),
            json!({"name": "metrics", "port": 9000, "targetPort": 9100, "protocol": "TCP"}),
        ];
        let pod =
            json!({"spec": {"containers": [{"ports": [{"name": "web", "containerPort": 8080}]}]}});
        assert_eq!(
            resolve_ports(&svc_ports, &pod),
            vec![
                ("http".to_string(), 8080, "TCP".to_string()),
                ("metrics".to_string(), 9100, "TCP".to_string())
            ]
        );
        let other = json!({"spec": {"containers": [{"ports": []}]}});
        assert_eq!(resolve_ports(&svc_ports, &other).len(), 1);
    }
}

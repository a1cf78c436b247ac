//! Simulated nodes: creating Node objects as a kubelet registering itself would (labels,
//! capacity, addresses, a pod CIDR, `Ready`), and fault injection that flips readiness or
//! changes capacity the way a failing or resized machine would.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use meridian_apiserver::engine::{Target, WriteOptions};
use serde_json::{Map, Value, json};

use super::util::{self, ipv4_add, str_at};
use super::{Sim, SimError};

/// Default InternalIP base: node `i` gets `172.18.0.2 + i` unless its spec names one.
const NODE_NET: Ipv4Addr = Ipv4Addr::new(172, 18, 0, 2);
/// Kubelet version reported by default.
const KUBELET_VERSION: &str = "v1.34.0";

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// What a simulated node looks like.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    /// Node name (also `kubernetes.io/hostname`).
    pub name: String,
    /// Extra labels.
    pub labels: BTreeMap<String, String>,
    /// `topology.kubernetes.io/region`.
    pub region: Option<String>,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// CPU capacity, e.g. `4` or `3500m`.
    pub cpu: String,
    /// Memory capacity, e.g. `16Gi`.
    pub memory: String,
    /// Pod capacity.
    pub pods: u32,
    /// InternalIP (derived from the node's index when absent).
    pub internal_ip: Option<Ipv4Addr>,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: String,
}

impl NodeSpec {
    /// A node with the given capacity, 110 pods and no labels, zone or taints.
    pub fn new(name: impl Into<String>, cpu: impl Into<String>, memory: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            labels: BTreeMap::new(),
            region: None,
            zone: None,
            taints: Vec::new(),
            cpu: cpu.into(),
            memory: memory.into(),
            pods: 110,
            internal_ip: None,
            kubelet_version: KUBELET_VERSION.into(),
        }
    }

    /// Sets region and zone.
    pub fn in_zone(mut self, region: impl Into<String>, zone: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self.zone = Some(zone.into());
        self
    }

    /// Adds a taint.
    pub fn with_taint(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
        effect: impl Into<String>,
    ) -> Self {
        self.taints.push(Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        });
        self
    }
}

fn node_object(spec: &NodeSpec, cidr_base: Ipv4Addr, cluster: &str) -> Value {
    let mut labels: Map<String, Value> = Map::new();
    labels.insert(
        "kubernetes.io/hostname".into(),
        Value::from(spec.name.as_str()),
    );
    labels.insert("kubernetes.io/os".into(), Value::from("linux"));
    labels.insert("kubernetes.io/arch".into(), Value::from("amd64"));
    if let Some(r) = &spec.region {
        labels.insert(
            "topology.kubernetes.io/region".into(),
            Value::from(r.as_str()),
        );
    }
    if let Some(z) = &spec.zone {
        labels.insert(
            "topology.kubernetes.io/zone".into(),
            Value::from(z.as_str()),
        );
    }
    for (k, v) in &spec.labels {
        labels.insert(k.clone(), Value::from(v.as_str()));
    }
    let cidr = format!("{cidr_base}/24");
    let mut spec_obj = json!({
        "podCIDR": cidr,
        "podCIDRs": [cidr],
        "providerID": format!("sim://{cluster}/{}", spec.name),
    });
    if !spec.taints.is_empty() {
        spec_obj["taints"] = Value::Array(
            spec.taints
                .iter()
                .map(|t| {
                    let mut m = json!({"key": t.key, "effect": t.effect});
                    if !t.value.is_empty() {
                        m["value"] = Value::from(t.value.as_str());
                    }
                    m
                })
                .collect(),
        );
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": spec_obj,
    })
}

fn node_status(spec: &NodeSpec, index: u32, now: &str) -> Value {
    let ip = spec
        .internal_ip
        .unwrap_or_else(|| ipv4_add(NODE_NET, index));
    let resources = json!({
        "cpu": spec.cpu,
        "memory": spec.memory,
        "pods": spec.pods.to_string(),
        "ephemeral-storage": "100Gi",
    });
    let cond = |ty: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": ty, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    let machine = format!(
        "{:032x}",
        u128::from(util::fnv32a(spec.name.as_bytes())) << 64 | u128::from(index)
    );
    json!({
        "capacity": resources,
        "allocatable": resources,
        "addresses": [
            {"type": "InternalIP", "address": ip.to_string()},
            {"type": "Hostname", "address": spec.name},
        ],
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": machine,
            "systemUUID": machine,
            "bootID": machine,
            "kernelVersion": "6.8.0-sim",
            "osImage": "Meridian cluster-sim",
            "containerRuntimeVersion": "containerd://1.7.0",
            "kubeletVersion": spec.kubelet_version,
            "kubeProxyVersion": spec.kubelet_version,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "phase": "Running",
    })
}

/// Creates Node objects as registering kubelets would, each Ready, with a pod CIDR from the
/// first free node index (so the same calls on a fresh cluster give the same addresses).
pub async fn create_nodes(sim: &Sim, specs: &[NodeSpec]) -> Result<(), SimError> {
    let def = &sim.kinds.nodes;
    let net = sim.config.pod_network;
    sim.engine.sync().await?;
    let mut used: BTreeSet<u32> = sim
        .cache(def)
        .list(&def.prefix(), None, None, 0, |_| true)
        .items
        .iter()
        .filter_map(|n| {
            let v = n.value();
            str_at(&v, "/spec/podCIDR").and_then(|c| net.node_index(sim.config.index, c))
        })
        .collect();
    let mut next = 0u32;
    for spec in specs {
        while used.contains(&next) {
            next += 1;
        }
        let index = next;
        used.insert(index);
        let cidr_base = net.node_cidr_base(sim.config.index, index).ok_or_else(|| {
            SimError::Invalid(format!(
                "node {}: the {net:?} pod network has no address range for node number {index} of cluster number {}",
                spec.name, sim.config.index
            ))
        })?;
        for (what, q) in [("cpu", &spec.cpu), ("memory", &spec.memory)] {
            apimachinery::quantity::parse_quantity(q)
                .map_err(|e| SimError::Invalid(format!("node {} {what}: {e}", spec.name)))?;
        }
        let created = sim
            .engine
            .create(
                def,
                "",
                node_object(spec, cidr_base, &sim.config.name),
                &WriteOptions::by(super::KUBELET),
            )
            .await?;
        // Status is a subresource: creation drops it, as for a real kubelet's registration.
        let mut obj = created.obj;
        obj["status"] = node_status(spec, index, &sim.now_rfc3339());
        sim.engine
            .update(
                def,
                "",
                &spec.name,
                obj,
                Target::Status,
                &WriteOptions::by(super::KUBELET),
            )
            .await?;
    }
    Ok(())
}

/// Read-modify-write of a node's status, retried on conflicts.
async fn edit_node_status(
    sim: &Sim,
    name: &str,
    edit: impl Fn(&mut Value, &str),
) -> Result<(), SimError> {
    let def = &sim.kinds.nodes;
    let mut last = None;
    for _ in 0..8 {
        let mut obj = sim.engine.current(def, "", name).await?.value();
        let now = sim.now_rfc3339();
        edit(&mut obj, &now);
        match sim
            .engine
            .update(
                def,
                "",
                name,
                obj,
                Target::Status,
                &WriteOptions::by(super::KUBELET),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.code == 409 => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(
        || SimError::Invalid("node update kept conflicting".into()),
        Into::into,
    ))
}

/// Flips a node's `Ready` condition (fault injection: a failed or recovered kubelet).
pub async fn set_node_ready(sim: &Sim, name: &str, ready: bool) -> Result<(), SimError> {
    edit_node_status(sim, name, |obj, now| {
        let (status, reason, message) = if ready {
            ("True", "KubeletReady", "kubelet is posting ready status")
        } else {
            ("False", "KubeletNotReady", "container runtime is down")
        };
        let conds = obj
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut);
        let Some(conds) = conds else {
            obj["status"]["conditions"] = json!([{
                "type": "Ready", "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }]);
            return;
        };
        match conds
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        {
            Some(c) => {
                if c.get("status").and_then(Value::as_str) != Some(status) {
                    c["lastTransitionTime"] = Value::from(now);
                }
                c["status"] = Value::from(status);
                c["reason"] = Value::from(reason);
                c["message"] = Value::from(message);
                c["lastHeartbeatTime"] = Value::from(now);
            }
            None => conds.push(json!({
                "type": "Ready", "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            })),
        }
    })
    .await
}

/// Changes a node's CPU and/or memory capacity and allocatable (fault injection: a resized or
/// degraded machine). Quantities use Kubernetes syntax (`4`, `500m`, `8Gi`); `None` keeps
/// the current value.
pub async fn set_node_capacity(
    sim: &Sim,
    name: &str,
    cpu: Option<&str>,
    memory: Option<&str>,
) -> Result<(), SimError> {
    let changes: Vec<(&str, &str)> = [("cpu", cpu), ("memory", memory)]
        .into_iter()
        .filter_map(|(what, q)| q.map(|q| (what, q)))
        .collect();
    for (what, q) in &changes {
        apimachinery::quantity::parse_quantity(q)
            .map_err(|e| SimError::Invalid(format!("node {name} {what}: {e}")))?;
    }
    edit_node_status(sim, name, |obj, _| {
        for field in ["capacity", "allocatable"] {
            for (what, q) in &changes {
                obj["status"][field][*what] = Value::from(*q);
            }
        }
    })
    .await
}

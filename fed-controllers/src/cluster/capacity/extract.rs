//! Reads the few numbers the tracker keeps out of member Node and Pod objects.

use apimachinery::quantity::parse_quantity;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

use super::{NodeCapacity, PodRequests};

/// Millicores of a quantity, 0 when absent or malformed (members validate quantities,
/// so malformed ones do not occur in practice), saturated at `u32::MAX` (4.29 million cores).
fn cpu_milli(q: Option<&Quantity>) -> u32 {
    q.and_then(|q| parse_quantity(&q.0).ok())
        .map(|q| q.as_milli().clamp(0, i128::from(u32::MAX)) as u32)
        .unwrap_or(0)
}

/// Whole units (bytes, counts) of a quantity, rounded up like upstream `Value()`.
fn value(q: Option<&Quantity>) -> u64 {
    q.and_then(|q| parse_quantity(&q.0).ok())
        .map(|q| q.as_value_ceil().clamp(0, i128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

/// A node's allocatable (falling back to capacity when a kubelet reports none) and readiness.
pub fn node_capacity(node: &Node) -> NodeCapacity {
    let status = node.status.as_ref();
    let list = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
    let get = |k: &str| list.and_then(|l| l.get(k));
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    NodeCapacity {
        cpu_milli: cpu_milli(get("cpu")),
        memory: value(get("memory")),
        pods: u32::try_from(value(get("pods"))).unwrap_or(u32::MAX),
        ready,
    }
}

fn container_requests(c: &Container) -> PodRequests {
    let reqs: Option<&BTreeMap<String, Quantity>> =
        c.resources.as_ref().and_then(|r| r.requests.as_ref());
    PodRequests {
        cpu_milli: cpu_milli(reqs.and_then(|r| r.get("cpu"))),
        memory: value(reqs.and_then(|r| r.get("memory"))),
    }
}

fn add(a: PodRequests, b: PodRequests) -> PodRequests {
    PodRequests {
        cpu_milli: a.cpu_milli.saturating_add(b.cpu_milli),
        memory: a.memory.saturating_add(b.memory),
    }
}

fn max(a: PodRequests, b: PodRequests) -> PodRequests {
    PodRequests {
        cpu_milli: a.cpu_milli.max(b.cpu_milli),
        memory: a.memory.max(b.memory),
    }
}

/// A pod's effective requests, as the scheduler computes them (upstream
/// `resourcehelper.PodRequests`): the sum of its containers, or — per resource — the
/// largest init container if that is more, where restartable init containers
/// (sidecars) run alongside everything after them; plus `spec.overhead`.
pub fn pod_requests(spec: &PodSpec) -> PodRequests {
    let mut sum = spec
        .containers
        .iter()
        .map(container_requests)
        .fold(PodRequests::default(), add);
    let mut sidecars = PodRequests::default();
    let mut init_max = PodRequests::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        let during = if c.restart_policy.as_deref() == Some("Always") {
            sum = add(sum, r);
            sidecars = add(sidecars, r);
            sidecars
        } else {
            add(r, sidecars)
        };
        init_max = max(init_max, during);
    }
    let mut total = max(sum, init_max);
    if let Some(overhead) = spec.overhead.as_ref() {
        total = add(
            total,
            PodRequests {
                cpu_milli: cpu_milli(overhead.get("cpu")),
                memory: value(overhead.get("memory")),
            },
        );
    }
    total
}

/// Where a pod counts and with what: `Some` for a pod bound to a node and not in a
/// terminal phase (Succeeded/Failed pods hold no resources), `None` otherwise.
pub fn pod_placement(pod: &Pod) -> Option<(&str, PodRequests)> {
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.as_deref().filter(|n| !n.is_empty())?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    Some((node, pod_requests(spec)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, PodStatus, ResourceRequirements};

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    fn container(cpu: &str, mem: &str, restart: Option<&str>) -> Container {
        let mut requests = BTreeMap::new();
        if !cpu.is_empty() {
            requests.insert("cpu".to_string(), q(cpu));
        }
        if !mem.is_empty() {
            requests.insert("memory".to_string(), q(mem));
        }
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(requests),
                ..Default::default()
            }),
            restart_policy: restart.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn pod_requests_table() {
        // (containers, init containers, overhead cpu, want cpu milli, want memory)
        type C = (&'static str, &'static str, Option<&'static str>);
        type Case = (&'static str, Vec<C>, Vec<C>, Option<&'static str>, u32, u64);
        let cases: Vec<Case> = vec![
            (
                "sum of containers",
                vec![("250m", "64Mi", None), ("1", "1Gi", None)],
                vec![],
                None,
                1250,
                (1 << 30) + (64 << 20),
            ),
            ("no requests", vec![("", "", None)], vec![], None, 0, 0),
            (
                "init max wins per resource",
                vec![("500m", "1Gi", None)],
                vec![("2", "100Mi", None), ("1", "200Mi", None)],
                None,
                2000,
                1 << 30,
            ),
            (
                "sidecar adds to containers",
                vec![("500m", "100Mi", None)],
                vec![("100m", "10Mi", Some("Always"))],
                None,
                600,
                110 << 20,
            ),
            (
                "init after sidecar runs beside it",
                vec![("100m", "1Mi", None)],
                vec![("200m", "1Mi", Some("Always")), ("1", "1Mi", None)],
                None,
                1200,
                2 << 20,
            ),
            (
                "overhead added",
                vec![("100m", "1Mi", None)],
                vec![],
                Some("50m"),
                150,
                1 << 20,
            ),
            (
                "decimal memory exact",
                vec![("0.1", "100M", None)],
                vec![],
                None,
                100,
                100_000_000,
            ),
            (
                "fractional millicores round up",
                vec![("0.0001", "1", None)],
                vec![],
                None,
                1,
                1,
            ),
        ];
        for (name, cs, inits, overhead, cpu, mem) in cases {
            let spec = PodSpec {
                containers: cs.iter().map(|c| container(c.0, c.1, c.2)).collect(),
                init_containers: Some(inits.iter().map(|c| container(c.0, c.1, c.2)).collect()),
                overhead: overhead.map(|o| BTreeMap::from([("cpu".to_string(), q(o))])),
                ..Default::default()
            };
            assert_eq!(
                pod_requests(&spec),
                PodRequests {
                    cpu_milli: cpu,
                    memory: mem
                },
                "{name}"
            );
        }
    }

    #[test]
    fn placement_only_for_bound_live_pods() {
        let mk = |node: Option<&str>, phase: Option<&str>| Pod {
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                containers: vec![container("1", "1Mi", None)],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: phase.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(pod_placement(&mk(None, Some("Pending"))).is_none());
        assert!(pod_placement(&mk(Some(""), Some("Pending"))).is_none());
        assert!(pod_placement(&mk(Some("n1"), Some("Succeeded"))).is_none());
        assert!(pod_placement(&mk(Some("n1"), Some("Failed"))).is_none());
        assert_eq!(
            pod_placement(&mk(Some("n1"), Some("Running"))).map(|p| p.0),
            Some("n1")
        );
        assert_eq!(
            pod_placement(&mk(Some("n1"), None)).map(|p| p.1.cpu_milli),
            Some(1000)
        );
    }

    #[test]
    fn node_capacity_reads_allocatable_and_ready() {
        let node = Node {
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_string(), q("7910m")),
                    ("memory".to_string(), q("31Gi")),
                    ("pods".to_string(), q("110")),
                ])),
                capacity: Some(BTreeMap::from([("cpu".to_string(), q("8"))])),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            node_capacity(&node),
            NodeCapacity {
                cpu_milli: 7910,
                memory: 31 << 30,
                pods: 110,
                ready: true
            }
        );
        let not_ready = Node {
            status: Some(NodeStatus {
                capacity: Some(BTreeMap::from([("cpu".to_string(), q("2"))])),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            node_capacity(&not_ready),
            NodeCapacity {
                cpu_milli: 2000,
                memory: 0,
                pods: 0,
                ready: false
            }
        );
    }
}

//! The digested snapshot of the fleet the scheduler decides on: every Cluster read once,
//! its quantities and health turned into numbers, so per-workload decisions never re-parse.

use std::collections::{BTreeMap, HashMap};

use fed_api::cluster::{ApiEnablement, NodeSummary, ResourceSummary, Taint};
use fed_api::object::Cluster;
use fed_api::quantity::QuantityError;

use crate::time;

/// Parsed resource numbers of one cluster (milli-CPU, bytes, pods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Resources {
    pub free_cpu_milli: Option<u64>,
    pub free_memory: Option<u64>,
    pub free_pods: Option<u64>,
    pub largest_cpu_milli: Option<u64>,
    pub largest_memory: Option<u64>,
    pub ready_nodes: Option<u64>,
}

/// Health of a cluster at snapshot time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// `Ready=True`.
    Ready,
    /// Not ready; `offline_for` seconds since the transition, `None` when unknown.
    Offline { offline_for: Option<i64> },
}

/// A cluster digested once per snapshot so per-workload decisions never re-parse strings.
#[derive(Debug, Clone)]
pub(crate) struct ClusterState {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub taints: Vec<Taint>,
    pub health: Health,
    pub apis: ServedApis,
    /// `Err` carries why capacity cannot be estimated.
    pub resources: Result<Resources, String>,
}

/// The group-version/resource pairs a cluster serves, as ids the snapshot hands out, so the
/// per-workload check is a binary search over a few integers held beside the cluster rather
/// than string comparisons through pointers (at 1,000 clusters that difference shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServedApis {
    /// The cluster reported an empty list: discovery has not run yet (a just-joined cluster).
    Unreported,
    /// Sorted ids from [`Snapshot::api_id`].
    Ids(Vec<u32>),
}

impl ServedApis {
    /// Whether the pair with this id is served; `None` is a pair no cluster serves.
    pub fn serves(&self, id: Option<u32>) -> bool {
        match self {
            Self::Unreported => true,
            Self::Ids(ids) => id.is_some_and(|id| ids.binary_search(&id).is_ok()),
        }
    }
}

/// Ids by groupVersion, then plural resource (nested so a lookup borrows its keys).
type ApiIds = HashMap<String, HashMap<String, u32>>;

/// Everything the scheduler knows about the fleet at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub(crate) clusters: Vec<ClusterState>,
    pub(crate) mass_failure_guard: bool,
    /// Ids of the (groupVersion, resource) pairs any cluster serves.
    api_ids: ApiIds,
}

impl Snapshot {
    /// Digests `clusters` as seen at `now_unix` (seconds). Order of input does not matter.
    pub fn new(clusters: impl IntoIterator<Item = Cluster>, now_unix: i64) -> Self {
        let mut api_ids = HashMap::new();
        let mut clusters: Vec<ClusterState> = clusters
            .into_iter()
            .map(|c| ClusterState::digest(c, now_unix, &mut api_ids))
            .collect();
        // Name order is the deterministic tie-break everywhere downstream.
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        clusters.dedup_by(|a, b| a.name == b.name);
        Self {
            clusters,
            mass_failure_guard: false,
            api_ids,
        }
    }

    /// The id of a (groupVersion, plural resource) pair, `None` when no cluster serves it.
    pub(crate) fn api_id(&self, group_version: &str, resource: &str) -> Option<u32> {
        self.api_ids.get(group_version)?.get(resource).copied()
    }

    /// Sets the "mass failure guard active" flag, which pauses evictions.
    pub fn with_mass_failure_guard(mut self, active: bool) -> Self {
        self.mass_failure_guard = active;
        self
    }

    /// Number of clusters.
    pub fn len(&self) -> usize {
        self.clusters.len()
    }

    /// Whether there are no clusters.
    pub fn is_empty(&self) -> bool {
        self.clusters.is_empty()
    }
}

impl ClusterState {
    fn digest(c: Cluster, now: i64, api_ids: &mut ApiIds) -> Self {
        let ready = c.status.conditions.iter().find(|c| c.type_ == "Ready");
        let health = match ready {
            Some(cond) if cond.status == "True" => Health::Ready,
            Some(cond) => Health::Offline {
                offline_for: cond
                    .last_transition_time
                    .as_deref()
                    .and_then(|t| time::parse_rfc3339(t).ok())
                    .map(|since| (now - since).max(0)),
            },
            None => Health::Offline { offline_for: None },
        };
        let resources = match &c.status.resource_summary {
            None => Err("resource summary not reported".to_owned()),
            Some(rs) => parse_resources(rs, c.status.nodes),
        };
        Self {
            name: c.metadata.name,
            labels: c.metadata.labels,
            region: c.spec.region,
            zone: c.spec.zone,
            taints: c.spec.taints,
            health,
            apis: served_apis(c.status.api_enablements, api_ids),
            resources,
        }
    }
}

/// Interns a cluster's reported pairs into `api_ids` and returns its sorted ids.
fn served_apis(reported: Vec<ApiEnablement>, api_ids: &mut ApiIds) -> ServedApis {
    if reported.is_empty() {
        return ServedApis::Unreported;
    }
    let mut next =
        u32::try_from(api_ids.values().map(HashMap::len).sum::<usize>()).unwrap_or(u32::MAX);
    let mut ids = Vec::new();
    for api in reported {
        let by_resource = api_ids.entry(api.group_version).or_default();
        for resource in api.resources {
            let id = *by_resource.entry(resource).or_insert_with(|| {
                next += 1;
                next - 1
            });
            ids.push(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ServedApis::Ids(ids)
}

fn parse_resources(rs: &ResourceSummary, nodes: Option<NodeSummary>) -> Result<Resources, String> {
    let read = |field: &str, v: Result<Option<u64>, QuantityError>| {
        v.map_err(|e| format!("resourceSummary.{field}: {e}"))
    };
    let free = |field: &str,
                alloc: Result<Option<u64>, QuantityError>,
                used: Result<Option<u64>, QuantityError>|
     -> Result<Option<u64>, String> {
        let Some(alloc) = read(&format!("allocatable.{field}"), alloc)? else {
            return Ok(None);
        };
        let used = read(&format!("allocated.{field}"), used)?.unwrap_or(0);
        Ok(Some(alloc.saturating_sub(used)))
    };
    let (alloc, used) = (&rs.allocatable, &rs.allocated);
    let largest = rs.largest_free.as_ref();
    Ok(Resources {
        free_cpu_milli: free("cpu", alloc.cpu_milli(), used.cpu_milli())?,
        free_memory: free("memory", alloc.memory_bytes(), used.memory_bytes())?,
        free_pods: free("pods", alloc.pod_count(), used.pod_count())?,
        largest_cpu_milli: largest
            .map(|l| read("largestFree.cpu", l.cpu_milli()))
            .transpose()?
            .flatten(),
        largest_memory: largest
            .map(|l| read("largestFree.memory", l.memory_bytes()))
            .transpose()?
            .flatten(),
        // A negative count is no count: the cluster controller never writes one.
        ready_nodes: nodes.map(|n| u64::try_from(n.ready).unwrap_or(0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_api_md_example() {
        let obj = serde_json::json!({
            "apiVersion": "federation.meridian.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "eu-west-1", "labels": {"env": "prod", "provider": "onprem"}},
            "spec": {
                "apiEndpoint": "https://10.0.0.10:6443",
                "region": "eu-west", "zone": "eu-west-1a",
                "taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "ProbeFailed",
                                "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                "kubernetesVersion": "v1.34.2",
                "apiEnablements": [{"groupVersion": "apps/v1", "resources": ["deployments", "replicasets"]}],
                "nodes": {"total": 20, "ready": 20},
                "resourceSummary": {
                    "allocatable": {"cpu": "160", "memory": "640Gi", "pods": "2200"},
                    "allocated": {"cpu": "41500m", "memory": "120Gi", "pods": "310"},
                    "largestFree": {"cpu": "7", "memory": "30Gi"}
                },
                "lbAgent": {"address": "203.0.113.10", "dnsPort": 53}
            }
        });
        let c: Cluster = serde_json::from_value(obj).unwrap();
        let snap = Snapshot::new([c], 1_735_689_600 + 42);
        let st = &snap.clusters[0];
        assert_eq!(
            st.health,
            Health::Offline {
                offline_for: Some(42)
            }
        );
        let r = st.resources.as_ref().unwrap();
        assert_eq!(r.free_cpu_milli, Some(118_500));
        assert_eq!(r.free_memory, Some(520 << 30));
        assert_eq!(r.free_pods, Some(1890));
        assert_eq!(r.largest_cpu_milli, Some(7000));
        assert_eq!(r.ready_nodes, Some(20));
    }

    #[test]
    fn bad_quantity_is_reported_not_fatal() {
        let mut c = Cluster::default();
        c.metadata.name = "x".into();
        c.status.resource_summary = Some(ResourceSummary {
            allocatable: fed_api::cluster::ResourceList {
                cpu: Some("lots".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        let snap = Snapshot::new([c], 0);
        assert_eq!(
            snap.clusters[0].resources,
            Err(r#"resourceSummary.allocatable.cpu: "lots" is not a quantity"#.to_owned())
        );
    }
}

//! Member clusters as the scheduler sees them, and the digested snapshot it decides on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::quantity::{self, QuantityError};
use crate::time;

/// The subset of `metadata` the scheduler reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default)]
    pub name: String,
    /// Namespace (empty for cluster-scoped objects).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A `Cluster` object (the fields placement needs); unknown fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// Name and labels.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired shape.
    #[serde(default)]
    pub spec: ClusterSpec,
    /// Observed state, written by the cluster controller.
    #[serde(default)]
    pub status: ClusterStatus,
}

/// `Cluster.spec` subset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Region, matched by affinity and spread constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Zone, matched by affinity and spread constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Taints that policies must tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

/// A cluster taint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// What the taint does to workloads that do not tolerate it.
    pub effect: TaintEffect,
}

/// Effect of a taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaintEffect {
    /// No new replicas; replicas already there stay.
    NoSchedule,
    /// No replicas at all; replicas already there are moved away.
    NoExecute,
}

/// `Cluster.status` subset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Conditions; `Ready` decides health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Group-versions and resources the member serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_enablements: Vec<ApiEnablement>,
    /// Node counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeCount>,
    /// Resource totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_summary: Option<ResourceSummary>,
}

/// A status condition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the last probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    /// RFC 3339 time the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// Resources served under one group-version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiEnablement {
    /// e.g. `apps/v1`.
    pub group_version: String,
    /// Plural resource names, e.g. `deployments`.
    #[serde(default)]
    pub resources: Vec<String>,
}

/// Node counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCount {
    /// All nodes.
    #[serde(default)]
    pub total: u32,
    /// Ready nodes.
    #[serde(default)]
    pub ready: u32,
}

/// `status.resourceSummary`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSummary {
    /// Sum of node allocatable.
    #[serde(default)]
    pub allocatable: ResourceList,
    /// Sum of pod requests.
    #[serde(default)]
    pub allocated: ResourceList,
    /// The largest free slot on any single Ready node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_free: Option<ResourceList>,
}

/// Quantities as Kubernetes strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceList {
    /// CPU, e.g. `41500m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory, e.g. `120Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Pod count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<String>,
}

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
    pub apis: Vec<ApiEnablement>,
    /// `Err` carries why capacity cannot be estimated.
    pub resources: Result<Resources, String>,
}

/// Everything the scheduler knows about the fleet at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub(crate) clusters: Vec<ClusterState>,
    pub(crate) mass_failure_guard: bool,
}

impl Snapshot {
    /// Digests `clusters` as seen at `now_unix` (seconds). Order of input does not matter.
    pub fn new(clusters: impl IntoIterator<Item = Cluster>, now_unix: i64) -> Self {
        let mut clusters: Vec<ClusterState> = clusters
            .into_iter()
            .map(|c| ClusterState::digest(c, now_unix))
            .collect();
        // Name order is the deterministic tie-break everywhere downstream.
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        clusters.dedup_by(|a, b| a.name == b.name);
        Self {
            clusters,
            mass_failure_guard: false,
        }
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
    fn digest(c: Cluster, now: i64) -> Self {
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
            Some(rs) => parse_resources(rs, c.status.nodes).map_err(|e| e.to_string()),
        };
        Self {
            name: c.metadata.name,
            labels: c.metadata.labels,
            region: c.spec.region,
            zone: c.spec.zone,
            taints: c.spec.taints,
            health,
            apis: c.status.api_enablements,
            resources,
        }
    }
}

fn parse_resources(
    rs: &ResourceSummary,
    nodes: Option<NodeCount>,
) -> Result<Resources, QuantityError> {
    fn free(
        alloc: &Option<String>,
        used: &Option<String>,
        parse: fn(&str) -> Result<u64, QuantityError>,
    ) -> Result<Option<u64>, QuantityError> {
        let Some(alloc) = alloc else { return Ok(None) };
        let used = used.as_deref().map(parse).transpose()?.unwrap_or(0);
        Ok(Some(parse(alloc)?.saturating_sub(used)))
    }
    let opt = |v: &Option<String>, parse: fn(&str) -> Result<u64, QuantityError>| {
        v.as_deref().map(parse).transpose()
    };
    let largest = rs.largest_free.as_ref();
    Ok(Resources {
        free_cpu_milli: free(
            &rs.allocatable.cpu,
            &rs.allocated.cpu,
            quantity::parse_cpu_milli,
        )?,
        free_memory: free(
            &rs.allocatable.memory,
            &rs.allocated.memory,
            quantity::parse_units,
        )?,
        free_pods: free(
            &rs.allocatable.pods,
            &rs.allocated.pods,
            quantity::parse_units,
        )?,
        largest_cpu_milli: largest
            .map(|l| opt(&l.cpu, quantity::parse_cpu_milli))
            .transpose()?
            .flatten(),
        largest_memory: largest
            .map(|l| opt(&l.memory, quantity::parse_units))
            .transpose()?
            .flatten(),
        ready_nodes: nodes.map(|n| u64::from(n.ready)),
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
        assert_eq!(c.spec.taints[0].effect, TaintEffect::NoSchedule);
        let spec: ClusterSpec = serde_json::from_value(serde_json::json!({"region": "r"})).unwrap();
        assert_eq!(spec.region.as_deref(), Some("r"));
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
            allocatable: ResourceList {
                cpu: Some("lots".into()),
                ..Default::default()
            },
            ..Default::default()
        });
        let snap = Snapshot::new([c], 0);
        assert!(snap.clusters[0].resources.is_err());
    }
}

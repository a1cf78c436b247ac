//! Offline planning ("what would the scheduler do?"): the live loop's decision code run
//! over objects read from YAML, with no server, optionally with some clusters failed.
//!
//! [`PlanInput::add_yaml`] reads multi-document YAML (and `kind: List`) holding Cluster
//! objects with status, workloads, objects of any other kind, PropagationPolicies and
//! ClusterPropagationPolicies, ResourceInterpreters, existing Placements and the
//! `meridian-system/federation-status` ConfigMap; [`plan_offline`] decides every workload,
//! and every other object a policy governs, exactly as `fed-scheduler` does (workloads
//! with [`schedule`], the rest with [`crate::copies::place`]), existing Placements serving
//! as the previous decision. The input format is documented in `docs/plan.md`.

use std::collections::BTreeMap;

use serde::Serialize;
use thiserror::Error;

use fed_api::copies::{Path, path, placement_of};
use fed_api::governance::{Subject, govern};
use fed_api::interpreter::{ResourceInterpreterSpec, interpreter_for};

use crate::copies::{CopiedObject, interpret, place};
use crate::explain::{self, Outcome};
use crate::types::{
    Cluster, Condition, Decision, PropagationPolicy, TargetCluster, Unschedulable,
    UnschedulableStatus, Workload, WorkloadError,
};
use crate::{schedule, select_policy};

/// Name of the ConfigMap (in `meridian-system`) holding the mass-failure flag.
pub const FEDERATION_STATUS_CONFIGMAP: &str = "federation-status";
/// Key of that ConfigMap set to `"true"` while the mass-failure guard is engaged.
pub const MASS_FAILURE_KEY: &str = "massFailure";
/// Namespace of Meridian's own objects in the federation.
pub const SYSTEM_NAMESPACE: &str = "meridian-system";

/// Why planning input could not be used.
#[derive(Debug, Error)]
pub enum PlanError {
    /// A document is not valid YAML.
    #[error("{source_name}: document {index}")]
    Yaml {
        /// File (or other source) name.
        source_name: String,
        /// 1-based document number.
        index: usize,
        /// Parser error.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A known kind whose content does not fit its schema.
    #[error("{source_name}: document {index} ({kind} {name:?})")]
    Object {
        /// File (or other source) name.
        source_name: String,
        /// 1-based document number.
        index: usize,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// What was wrong.
        #[source]
        source: serde_json::Error,
    },
    /// A Deployment/ReplicaSet the scheduler cannot read.
    #[error("{source_name}: document {index} ({kind} {name:?})")]
    Workload {
        /// File (or other source) name.
        source_name: String,
        /// 1-based document number.
        index: usize,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// What was wrong (boxed: it carries a quantity error and is rare).
        #[source]
        source: Box<WorkloadError>,
    },
    /// `without` names clusters that are not in the input.
    #[error("unknown clusters in --without: {}", .0.join(", "))]
    UnknownClusters(Vec<String>),
}

/// An existing Placement, reduced to what planning needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousPlacement {
    /// Namespace of the Placement and its workload.
    pub namespace: String,
    /// The Placement's name.
    pub placement: String,
    /// Workload kind (`spec.resource.kind`).
    pub kind: String,
    /// Workload name (`spec.resource.name`).
    pub name: String,
    /// `spec.destClusters`.
    pub dest_clusters: Vec<TargetCluster>,
}

/// Everything a plan reads.
#[derive(Debug, Clone, Default)]
pub struct PlanInput {
    /// Member clusters, with status.
    pub clusters: Vec<Cluster>,
    /// Policies.
    pub policies: Vec<PropagationPolicy>,
    /// ClusterPropagationPolicies (as policies without a namespace).
    pub cluster_policies: Vec<PropagationPolicy>,
    /// Federated workloads.
    pub workloads: Vec<Workload>,
    /// Objects of the kinds placed through the copy path (ServiceAccounts, RBAC, Ingresses,
    /// custom resources, ...), as written.
    pub copies: Vec<serde_json::Value>,
    /// ResourceInterpreters by name.
    pub interpreters: BTreeMap<String, ResourceInterpreterSpec>,
    /// Existing decisions.
    pub placements: Vec<PreviousPlacement>,
    /// `massFailure: "true"` in the federation-status ConfigMap.
    pub mass_failure: bool,
    /// `kind` of documents that were not used, e.g. Services.
    pub ignored: Vec<String>,
}

/// How to plan.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// Clusters to treat as Offline beyond any toleration ("what if they fail?").
    pub without: Vec<String>,
    /// The clock, Unix seconds (offline durations are measured against it).
    pub now_unix: i64,
}

/// The plan for one workload.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    /// Namespace.
    pub namespace: String,
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`, `Role`.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// Name of its Placement (`deployment-web`, `role.rbac.authorization.k8s.io-web`).
    pub placement: String,
    /// `namespace/name` of the policy used, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Replicas requested (0 for an object copied whole).
    pub replicas: u32,
    /// The existing Placement's `destClusters`.
    pub previous: Vec<TargetCluster>,
    /// The planned `destClusters`.
    pub dest_clusters: Vec<TargetCluster>,
    /// Whether the plan differs from `previous`.
    pub changed: bool,
    /// The `Scheduled` condition the scheduler would write.
    pub scheduled: Outcome,
    /// Replicas that fit nowhere, and why.
    pub unschedulable: UnschedulableStatus,
    /// The full decision of a workload, for library callers (`None` for other kinds).
    #[serde(skip)]
    pub decision: Option<Result<Decision, Unschedulable>>,
}

/// The plan for every workload, in namespace, kind, name order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    /// Clusters treated as failed.
    pub without: Vec<String>,
    /// Whether the mass-failure guard was engaged (evictions paused).
    pub mass_failure: bool,
    /// One entry per workload and per other governed object.
    pub workloads: Vec<PlanEntry>,
}

/// `{kind-lowercase}-{name}`: the Placement the scheduler writes for a workload.
pub use fed_api::workload::placement_name;

fn str_at<'a>(v: &'a serde_json::Value, ptr: &str) -> &'a str {
    v.pointer(ptr)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

impl PlanInput {
    /// Adds every document of a multi-document YAML text; `source_name` labels errors.
    pub fn add_yaml(&mut self, source_name: &str, text: &str) -> Result<(), PlanError> {
        use serde::Deserialize as _;
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let index = i + 1;
            let value = serde_json::Value::deserialize(doc).map_err(|source| PlanError::Yaml {
                source_name: source_name.to_owned(),
                index,
                source,
            })?;
            self.add_object(source_name, index, value)?;
        }
        Ok(())
    }

    /// Adds one object (or the items of a `List`).
    pub fn add_object(
        &mut self,
        source_name: &str,
        index: usize,
        obj: serde_json::Value,
    ) -> Result<(), PlanError> {
        if obj.is_null() {
            return Ok(()); // an empty document, e.g. a trailing `---`
        }
        let kind = str_at(&obj, "/kind").to_owned();
        let api_version = str_at(&obj, "/apiVersion");
        let name = str_at(&obj, "/metadata/name").to_owned();
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        let object_err = |source| PlanError::Object {
            source_name: source_name.to_owned(),
            index,
            kind: kind.clone(),
            name: name.clone(),
            source,
        };
        match (group, kind.as_str()) {
            (_, "List") => {
                if let Some(items) = obj.get("items").and_then(serde_json::Value::as_array) {
                    for item in items {
                        self.add_object(source_name, index, item.clone())?;
                    }
                }
            }
            ("federation.meridian.dev", "Cluster") => {
                self.clusters
                    .push(serde_json::from_value(obj).map_err(object_err)?);
            }
            ("federation.meridian.dev", "PropagationPolicy") => {
                let mut p: PropagationPolicy = serde_json::from_value(obj).map_err(object_err)?;
                if p.metadata.namespace.is_empty() {
                    "default".clone_into(&mut p.metadata.namespace);
                }
                self.policies.push(p);
            }
            ("federation.meridian.dev", "ClusterPropagationPolicy") => {
                let mut p: PropagationPolicy = serde_json::from_value(obj).map_err(object_err)?;
                p.metadata.namespace.clear();
                self.cluster_policies.push(p);
            }
            ("federation.meridian.dev", "ResourceInterpreter") => {
                let spec = serde_json::from_value(obj["spec"].clone()).map_err(object_err)?;
                self.interpreters.insert(name, spec);
            }
            ("federation.meridian.dev", "Placement") => {
                let dest = obj
                    .pointer("/spec/destClusters")
                    .cloned()
                    .unwrap_or(serde_json::Value::Array(Vec::new()));
                let dest_clusters: Vec<TargetCluster> =
                    serde_json::from_value(dest).map_err(object_err)?;
                self.placements.push(PreviousPlacement {
                    namespace: str_at(&obj, "/metadata/namespace").to_owned(),
                    placement: name.clone(),
                    kind: str_at(&obj, "/spec/resource/kind").to_owned(),
                    name: str_at(&obj, "/spec/resource/name").to_owned(),
                    dest_clusters,
                });
            }
            (g, k) if fed_api::workload::WorkloadKind::of_group(g, k).is_some() => {
                let mut w = Workload::from_object(&obj).map_err(|source| PlanError::Workload {
                    source_name: source_name.to_owned(),
                    index,
                    kind: kind.clone(),
                    name: name.clone(),
                    source: Box::new(source),
                })?;
                if w.namespace.is_empty() {
                    "default".clone_into(&mut w.namespace);
                }
                self.workloads.push(w);
            }
            ("", "ConfigMap")
                if name == FEDERATION_STATUS_CONFIGMAP
                    && str_at(&obj, "/metadata/namespace") == SYSTEM_NAMESPACE =>
            {
                self.mass_failure = str_at(&obj, &format!("/data/{MASS_FAILURE_KEY}")) == "true";
            }
            _ if path(api_version, &kind) == Path::Copy && !name.is_empty() => {
                self.copies.push(obj);
            }
            _ => self.ignored.push(kind),
        }
        Ok(())
    }
}

/// Kinds whose objects have no namespace, among those a policy may name; any other object
/// written without one is in `default`, as kubectl would create it.
const CLUSTER_SCOPED: [&str; 8] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "Namespace",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
];

/// The namespace of an object of a copied kind as read from a file: its own, `default`
/// when it has none, or `None` for a kind without namespaces ([`CLUSTER_SCOPED`]).
pub fn copy_namespace(obj: &serde_json::Value) -> Option<&str> {
    match str_at(obj, "/metadata/namespace") {
        "" if CLUSTER_SCOPED.contains(&str_at(obj, "/kind")) => None,
        "" => Some("default"),
        ns => Some(ns),
    }
}

/// The plan of one object of a copied kind, when a policy of the input governs it:
/// placed by the live loop's [`place`], divided when an interpreter of the input names its
/// replicas and the policy divides them.
fn plan_copy(
    input: &PlanInput,
    snapshot: &crate::Snapshot,
    obj: &serde_json::Value,
    previous: &BTreeMap<(String, String), &[TargetCluster]>,
) -> Option<PlanEntry> {
    let api_version = str_at(obj, "/apiVersion");
    let kind = str_at(obj, "/kind");
    let name = str_at(obj, "/metadata/name");
    let namespace = copy_namespace(obj);
    let labels: BTreeMap<String, String> =
        serde_json::from_value(obj["metadata"]["labels"].clone()).unwrap_or_default();
    let namespaced: Vec<PropagationPolicy> = namespace
        .map(|ns| {
            input
                .policies
                .iter()
                .filter(|p| p.metadata.namespace == ns)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let governance = govern(
        &namespaced,
        &input.cluster_policies,
        &Subject {
            api_version,
            kind,
            namespace,
            name,
            labels: &labels,
        },
    )?;
    let policy = governance.winner.policy;
    let interpreted = interpreter_for(
        input.interpreters.iter().map(|(n, s)| (n.as_str(), s)),
        api_version,
        kind,
    )
    .and_then(|spec| interpret(obj, spec));
    let (pns, placement) = placement_of(api_version, kind, namespace, name);
    let mut before = previous
        .get(&(pns, placement.clone()))
        .copied()
        .unwrap_or_default()
        .to_vec();
    before.sort();
    let object = CopiedObject {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        namespace: namespace.unwrap_or_default().to_owned(),
        name: name.to_owned(),
    };
    let placed = place(snapshot, &object, interpreted.as_ref(), policy, &before);
    let replicas = match (&interpreted, crate::copies::divides(policy)) {
        (Some(Ok(w)), true) => w.replicas,
        _ => 0,
    };
    Some(PlanEntry {
        namespace: object.namespace,
        api_version: object.api_version,
        kind: object.kind,
        name: object.name,
        placement,
        policy: Some(if policy.metadata.namespace.is_empty() {
            policy.metadata.name.clone()
        } else {
            format!("{}/{}", policy.metadata.namespace, policy.metadata.name)
        }),
        replicas,
        changed: before != placed.dest,
        previous: before,
        scheduled: placed.outcome,
        unschedulable: placed.unschedulable,
        dest_clusters: placed.dest,
        decision: None,
    })
}

/// A Ready condition that has been `False` since the epoch: beyond every toleration.
fn failed_ready() -> Condition {
    Condition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: "PlannedFailure".into(),
        message: "treated as failed by the plan".into(),
        last_probe_time: None,
        last_transition_time: Some("1970-01-01T00:00:00Z".into()),
    }
}

/// Decides every workload of `input` as the live scheduler would.
pub fn plan_offline(input: &PlanInput, opts: &PlanOptions) -> Result<PlanReport, PlanError> {
    let unknown: Vec<String> = opts
        .without
        .iter()
        .filter(|w| !input.clusters.iter().any(|c| &c.metadata.name == *w))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(PlanError::UnknownClusters(unknown));
    }
    let clusters = input.clusters.iter().cloned().map(|mut c| {
        if opts.without.contains(&c.metadata.name) {
            c.status.conditions.retain(|x| x.type_ != "Ready");
            c.status.conditions.push(failed_ready());
        }
        c
    });
    let snapshot =
        crate::Snapshot::new(clusters, opts.now_unix).with_mass_failure_guard(input.mass_failure);
    let previous: BTreeMap<(&str, &str, &str), &[TargetCluster]> = input
        .placements
        .iter()
        .map(|p| {
            (
                (
                    if p.namespace.is_empty() {
                        "default"
                    } else {
                        p.namespace.as_str()
                    },
                    p.kind.as_str(),
                    p.name.as_str(),
                ),
                p.dest_clusters.as_slice(),
            )
        })
        .collect();
    // Copied objects' Placements by their own namespace and name (a cluster-scoped
    // object's are in meridian-system).
    let previous_copies: BTreeMap<(String, String), &[TargetCluster]> = input
        .placements
        .iter()
        .map(|p| {
            (
                (p.namespace.clone(), p.placement.clone()),
                p.dest_clusters.as_slice(),
            )
        })
        .collect();
    let mut workloads: Vec<&Workload> = input.workloads.iter().collect();
    workloads
        .sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    let entries = workloads
        .into_iter()
        .map(|w| {
            let policy = select_policy(&input.policies, w);
            let prev = previous
                .get(&(w.namespace.as_str(), w.kind.as_str(), w.name.as_str()))
                .copied();
            let decision = schedule(&snapshot, w, policy, prev);
            let dest_clusters = explain::dest_clusters(&decision);
            let mut before = prev.unwrap_or_default().to_vec();
            before.sort();
            PlanEntry {
                namespace: w.namespace.clone(),
                api_version: w.api_version.clone(),
                kind: w.kind.clone(),
                name: w.name.clone(),
                placement: placement_name(&w.kind, &w.name),
                policy: policy.map(|p| format!("{}/{}", p.metadata.namespace, p.metadata.name)),
                replicas: w.replicas,
                changed: before != dest_clusters,
                previous: before,
                scheduled: explain::outcome(&decision),
                unschedulable: explain::unschedulable(&decision, w.replicas),
                dest_clusters,
                decision: Some(decision),
            }
        })
        .chain(
            input
                .copies
                .iter()
                .filter_map(|obj| plan_copy(input, &snapshot, obj, &previous_copies)),
        )
        .collect::<Vec<_>>();
    let mut entries = entries;
    entries.sort_by(|a, b| {
        (&a.namespace, &a.kind, &a.name, &a.api_version).cmp(&(
            &b.namespace,
            &b.kind,
            &b.name,
            &b.api_version,
        ))
    });
    Ok(PlanReport {
        without: opts.without.clone(),
        mass_failure: input.mass_failure,
        workloads: entries,
    })
}

#[cfg(test)]
mod tests;

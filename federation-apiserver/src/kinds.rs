//! The kinds the federation serves: Meridian's own (Cluster, the propagation policies,
//! Placement; the override policies in `override_kinds`), with their schemas from
//! `fed-api`, beside the engine's built-in kinds.

use std::collections::HashSet;

use apimachinery::JsonPointer;
use kube::CustomResourceExt;
use meridian_apiserver::kinds::validate::{self, NameRule, invalid, not_supported, required};
use meridian_apiserver::kinds::{
    self, FnHooks, column, int_at, int_column, no_default, no_prepare, reference_at, str_column,
};
use meridian_apiserver::openapi::merge_lists_by_key;
use meridian_apiserver::registry::{Column, Registry, ResourceDef};
use meridian_apiserver::status::Cause;
use serde_json::Value;

/// The admission plugins of the federation API server, each on unless turned off with
/// `--disable-admission-plugins`.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    /// `MemberCleanup`: every federated workload gets the member-cleanup finalizer on
    /// create ([`crate::member_cleanup`]).
    pub member_cleanup: bool,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            member_cleanup: true,
        }
    }
}

/// The kinds of the federation API server, with every admission plugin on.
pub fn federation_registry() -> Registry {
    registry_with(Admission::default())
}

/// The kinds of the federation API server, with the admission plugins `admission` turns on.
pub fn registry_with(admission: Admission) -> Registry {
    // Every built-in kind the engine defines: a kind the federation does not propagate
    // yet is stored and served like any other, so manifests holding it apply as they do
    // to one cluster.
    let mut defs = kinds::builtin();
    if admission.member_cleanup {
        crate::member_cleanup::for_workloads(&mut defs);
    }
    defs.extend([
        clusters(),
        propagation_policies(),
        cluster_propagation_policies(),
        crate::override_kinds::override_policies(),
        crate::override_kinds::cluster_override_policies(),
        crate::interpreter_kind::resource_interpreters(),
        placements(),
    ]);
    Registry::new(defs)
        // Kinds whose objects run in member clusters. A namespace being deleted takes these
        // down first and everything else (the policies that placed them, the ConfigMaps and
        // Secrets their pods read) only once they are gone: a user's `kubectl delete -f` of a
        // namespace and its contents then finds the later objects still there while the
        // members are cleaned up.
        .with_deleted_first(&[
            ("apps", "deployments"),
            ("apps", "replicasets"),
            ("apps", "statefulsets"),
            ("batch", "jobs"),
            ("", "services"),
        ])
}

/// A Meridian kind (a resource of `fed_api`'s group and version) shown with `short` names
/// and `columns`: status subresource, generation tracking, category `meridian`.
pub(crate) fn meridian(
    mut d: ResourceDef,
    short: &'static [&'static str],
    columns: Vec<Column>,
) -> ResourceDef {
    d.short_names = short;
    d.categories = &["meridian"];
    d.status_subresource = true;
    d.tracks_generation = true;
    d.columns = columns;
    d
}

/// The structural schema of a CRD's first version, described by `description`, its
/// single-key map-lists merging by key under strategic merge patch (see
/// [`merge_lists_by_key`]). The CRD is built from Rust types, so it always has one.
pub(crate) fn crd_schema(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    description: &str,
) -> Value {
    let schema = crd
        .spec
        .versions
        .into_iter()
        .next()
        .and_then(|v| v.schema?.open_api_v3_schema)
        .and_then(|s| serde_json::to_value(s).ok());
    let mut schema = schema.unwrap_or_else(|| serde_json::json!({"type": "object"}));
    merge_lists_by_key(&mut schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("description".into(), description.into());
    }
    schema
}

/// Deserializes `spec` and `status` into the Rust types to report type errors.
pub(crate) fn typed_parts<S: serde::de::DeserializeOwned, T: serde::de::DeserializeOwned>(
    o: &Value,
) -> Result<(), String> {
    if let Some(spec) = o.get("spec") {
        S::deserialize(spec).map_err(|e| format!("spec: {e}"))?;
    }
    if let Some(status) = o.get("status").filter(|s| !s.is_null()) {
        T::deserialize(status).map_err(|e| format!("status: {e}"))?;
    }
    Ok(())
}

/// The typed check of a kind whose validation runs too: skipped when `validate` already
/// finds causes, since those come back as a 422 naming each field. `fed-api`'s types reject
/// much of what validation reports (an unknown taint effect is not a `TaintEffect`), and
/// the typed check runs first; without this the user would get a 400 naming a Rust type.
pub(crate) fn after_validation(
    validate: fn(&Value, Option<&Value>) -> Vec<Cause>,
    typed: fn(&Value) -> Result<(), String>,
    o: &Value,
) -> Result<(), String> {
    if validate(o, None).is_empty() {
        typed(o)
    } else {
        Ok(())
    }
}

/// Parses a quantity into milli-units for display, if valid.
fn milli(q: Option<&Value>) -> Option<i64> {
    let s = q?.as_str()?;
    apimachinery::quantity::parse_quantity(s)
        .ok()
        .map(|q| q.as_milli() as i64)
}

fn capacity_cell(o: &Value, resource: &str) -> Value {
    let alloc = milli(o.at(&format!("/status/resourceSummary/allocatable/{resource}")));
    let used = milli(o.at(&format!("/status/resourceSummary/allocated/{resource}")));
    let Some(alloc) = alloc else {
        return Value::from("<unknown>");
    };
    let avail = alloc - used.unwrap_or(0);
    let fmt = |m: i64| {
        if resource == "cpu" {
            apimachinery::quantity::format_cpu_milli(m)
        } else {
            apimachinery::quantity::format_bytes(m / 1000)
        }
    };
    Value::from(format!("{}/{}", fmt(avail), fmt(alloc)))
}

fn ready_cell(o: &Value) -> Value {
    let ready = o
        .at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .and_then(|c| c.get("status").and_then(Value::as_str))
        .unwrap_or("Unknown");
    Value::from(ready)
}

fn validate_cluster(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, false);
    match o.at("/spec/apiEndpoint").and_then(Value::as_str) {
        None | Some("") => errs.push(required("spec.apiEndpoint")),
        Some(url) if !url.starts_with("https://") => errs.push(invalid(
            "spec.apiEndpoint",
            &Value::from(url),
            "must be an https:// URL",
        )),
        Some(_) => {}
    }
    for (i, t) in o
        .at("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if t.get("key")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(required(&format!("spec.taints[{i}].key")));
        }
        let effect = t.get("effect").cloned().unwrap_or(Value::Null);
        if !matches!(effect.as_str(), Some("NoSchedule" | "NoExecute")) {
            errs.push(not_supported(
                &format!("spec.taints[{i}].effect"),
                &effect,
                &["NoExecute", "NoSchedule"],
            ));
        }
    }
    errs
}

/// `Cluster` (cluster-scoped).
pub fn clusters() -> ResourceDef {
    let mut d = meridian(
        ResourceDef::new(
            fed_api::GROUP,
            fed_api::VERSION,
            "Cluster",
            "clusters",
            "cluster",
            false,
            FnHooks {
                default: no_default,
                validate: validate_cluster,
                check_types: |o| {
                    after_validation(
                        validate_cluster,
                        typed_parts::<fed_api::ClusterSpec, fed_api::ClusterStatus>,
                        o,
                    )
                },
                prepare_create: no_prepare,
            },
        ),
        &["fc"],
        vec![
            column(
                "Ready",
                "string",
                "Whether the cluster answers its health probes",
                false,
                ready_cell,
            ),
            str_column("Region", "Region of the cluster", "/spec/region"),
            str_column("Zone", "Zone of the cluster", "/spec/zone"),
            str_column(
                "Version",
                "Kubernetes version of the member",
                "/status/kubernetesVersion",
            ),
            column(
                "Nodes",
                "string",
                "Ready nodes over all nodes",
                false,
                |o| {
                    if o.at("/status/nodes").is_none() {
                        return Value::from("");
                    }
                    let r = int_at(o, "/status/nodes/ready");
                    let t = int_at(o, "/status/nodes/total");
                    Value::from(format!("{r}/{t}"))
                },
            ),
            column(
                "CPU(avail/alloc)",
                "string",
                "Available over allocatable CPU of Ready nodes",
                false,
                |o| capacity_cell(o, "cpu"),
            ),
            column(
                "Mem(avail/alloc)",
                "string",
                "Available over allocatable memory of Ready nodes",
                false,
                |o| capacity_cell(o, "memory"),
            ),
            str_column(
                "Endpoint",
                "API endpoint of the member",
                "/spec/apiEndpoint",
            )
            .wide(),
        ],
    );
    d.definition = "dev.meridian.federation.v1alpha1.Cluster";
    d.schema = Some(|| {
        crd_schema(
            fed_api::Cluster::crd(),
            "Cluster is a member cluster joined to the federation: how to reach it, where it sits and what Meridian last observed of it.",
        )
    });
    d
}

fn validate_policy(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    policy_causes(o, true)
}

fn validate_cluster_policy(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    policy_causes(o, false)
}

/// What is wrong with a policy's `spec.resourceSelectors` (every policy kind has them):
/// at least one, each with apiVersion and kind, label selectors well formed.
pub(crate) fn resource_selector_causes(o: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    let sels = o.at("/spec/resourceSelectors").and_then(Value::as_array);
    if sels.is_none_or(|s| s.is_empty()) {
        errs.push(required("spec.resourceSelectors"));
    }
    for (i, s) in sels.into_iter().flatten().enumerate() {
        for f in ["apiVersion", "kind"] {
            if s.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                errs.push(required(&format!("spec.resourceSelectors[{i}].{f}")));
            }
        }
        if let Some(ls) = s.get("labelSelector") {
            errs.extend(validate::label_selector(
                ls,
                &format!("spec.resourceSelectors[{i}].labelSelector"),
            ));
        }
    }
    errs
}

/// What is wrong with a PropagationPolicy (`namespaced`) or a ClusterPropagationPolicy:
/// both have the same spec.
fn policy_causes(o: &Value, namespaced: bool) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, namespaced);
    errs.extend(resource_selector_causes(o));
    let p = "/spec/placement";
    if let Some(ls) = o.at(&format!("{p}/clusterAffinity/labelSelector")) {
        errs.extend(validate::label_selector(
            ls,
            "spec.placement.clusterAffinity.labelSelector",
        ));
    }
    for (i, t) in o
        .at(&format!("{p}/clusterTolerations"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(op) = t.get("operator")
            && !matches!(op.as_str(), Some("Equal" | "Exists"))
        {
            errs.push(not_supported(
                &format!("spec.placement.clusterTolerations[{i}].operator"),
                op,
                &["Equal", "Exists"],
            ));
        }
        if let Some(e) = t.get("effect")
            && !matches!(e.as_str(), Some("NoSchedule" | "NoExecute" | ""))
        {
            errs.push(not_supported(
                &format!("spec.placement.clusterTolerations[{i}].effect"),
                e,
                &["NoExecute", "NoSchedule"],
            ));
        }
    }
    for (i, s) in o
        .at(&format!("{p}/spreadConstraints"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = |x: &str| format!("spec.placement.spreadConstraints[{i}].{x}");
        let by = s.get("spreadByField").cloned().unwrap_or(Value::Null);
        if !matches!(by.as_str(), Some("region" | "zone" | "cluster")) {
            errs.push(not_supported(
                &f("spreadByField"),
                &by,
                &["cluster", "region", "zone"],
            ));
        }
        let min = s.get("minGroups").and_then(Value::as_i64);
        let max = s.get("maxGroups").and_then(Value::as_i64);
        if min.is_some_and(|m| m < 0) {
            errs.push(invalid(
                &f("minGroups"),
                &s["minGroups"],
                "must be greater than or equal to 0",
            ));
        }
        if let (Some(a), Some(b)) = (min, max)
            && a > b
        {
            errs.push(invalid(
                &f("maxGroups"),
                &s["maxGroups"],
                "must be greater than or equal to minGroups",
            ));
        }
    }
    if let Some(rs) = o.at(&format!("{p}/replicaScheduling")) {
        let ty = rs.get("type").cloned().unwrap_or(Value::Null);
        if !matches!(ty.as_str(), Some("Duplicated" | "Divided")) {
            errs.push(not_supported(
                "spec.placement.replicaScheduling.type",
                &ty,
                &["Divided", "Duplicated"],
            ));
        }
        if let Some(d) = rs.get("division")
            && !matches!(d.as_str(), Some("StaticWeight" | "DynamicWeight"))
        {
            errs.push(not_supported(
                "spec.placement.replicaScheduling.division",
                d,
                &["DynamicWeight", "StaticWeight"],
            ));
        }
        for (i, w) in rs
            .get("weights")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if w.get("weight")
                .and_then(Value::as_i64)
                .is_none_or(|n| n < 0)
            {
                errs.push(invalid(
                    &format!("spec.placement.replicaScheduling.weights[{i}].weight"),
                    w.get("weight").unwrap_or(&Value::Null),
                    "must be greater than or equal to 0",
                ));
            }
        }
        let mut seen = HashSet::new();
        for (i, c) in rs
            .get("clusters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let f = |x: &str| format!("spec.placement.replicaScheduling.clusters[{i}].{x}");
            if let Some(n) = c.get("name").and_then(Value::as_str)
                && !seen.insert(n.to_string())
            {
                errs.push(validate::duplicate(&f("name"), &c["name"]));
            }
            let min = c.get("minReplicas").and_then(Value::as_i64);
            let max = c.get("maxReplicas").and_then(Value::as_i64);
            if min.is_some_and(|m| m < 0) {
                errs.push(invalid(
                    &f("minReplicas"),
                    &c["minReplicas"],
                    "must be greater than or equal to 0",
                ));
            }
            if let (Some(a), Some(b)) = (min, max)
                && a > b
            {
                errs.push(invalid(
                    &f("maxReplicas"),
                    &c["maxReplicas"],
                    "must be greater than or equal to minReplicas",
                ));
            }
        }
    }
    errs.extend(validate::min_int(
        o,
        &format!("{p}/failover/tolerationSeconds"),
        "spec.placement.failover.tolerationSeconds",
        0,
    ));
    errs
}

/// A Meridian policy kind: a `spec` checked by `$validate` and read as `$spec`, no
/// status, a short name and columns, its OpenAPI from the fed-api type `$crd`. The four
/// policy kinds differ only in these.
macro_rules! policy_kind {
    (
        $kind:literal, $plural:literal, $singular:literal, namespaced: $namespaced:literal,
        spec: $spec:ty, validate: $validate:path, short: $short:literal,
        columns: $columns:expr, crd: $crd:ty, about: $about:literal $(,)?
    ) => {{
        let mut d = $crate::kinds::meridian(
            meridian_apiserver::registry::ResourceDef::new(
                fed_api::GROUP,
                fed_api::VERSION,
                $kind,
                $plural,
                $singular,
                $namespaced,
                meridian_apiserver::kinds::FnHooks {
                    default: meridian_apiserver::kinds::no_default,
                    validate: $validate,
                    check_types: |o| {
                        $crate::kinds::after_validation(
                            $validate,
                            $crate::kinds::typed_parts::<$spec, serde_json::Value>,
                            o,
                        )
                    },
                    prepare_create: meridian_apiserver::kinds::no_prepare,
                },
            ),
            &[$short],
            $columns,
        );
        d.definition = concat!("dev.meridian.federation.v1alpha1.", $kind);
        d.schema =
            Some(|| $crate::kinds::crd_schema(<$crd as kube::CustomResourceExt>::crd(), $about));
        d.status_subresource = false;
        d
    }};
}
pub(crate) use policy_kind;

/// `PropagationPolicy` (namespaced).
pub fn propagation_policies() -> ResourceDef {
    policy_kind!(
        "PropagationPolicy", "propagationpolicies", "propagationpolicy", namespaced: true,
        spec: fed_api::PropagationPolicySpec, validate: validate_policy, short: "pp",
        columns: policy_columns(), crd: fed_api::PropagationPolicy,
        about: "PropagationPolicy selects workloads and says which member clusters they go to and how their replicas divide.",
    )
}

/// The `kubectl get` columns of both policy kinds.
fn policy_columns() -> Vec<Column> {
    vec![
        int_column(
            "Priority",
            "Priority among matching policies",
            "/spec/priority",
        ),
        column(
            "Scheduling",
            "string",
            "Duplicated or Divided (and how)",
            false,
            |o| {
                let ty = o
                    .at("/spec/placement/replicaScheduling/type")
                    .and_then(Value::as_str);
                let div = o
                    .at("/spec/placement/replicaScheduling/division")
                    .and_then(Value::as_str);
                Value::from(match (ty, div) {
                    (Some(t), Some(d)) if t == "Divided" => format!("{t}/{d}"),
                    (Some(t), _) => t.to_string(),
                    _ => "Duplicated".into(),
                })
            },
        ),
    ]
}

/// `ClusterPropagationPolicy` (cluster-scoped): the same spec, for cluster-scoped kinds and
/// namespaced kinds in every namespace.
pub fn cluster_propagation_policies() -> ResourceDef {
    policy_kind!(
        "ClusterPropagationPolicy", "clusterpropagationpolicies", "clusterpropagationpolicy",
        namespaced: false, spec: fed_api::ClusterPropagationPolicySpec,
        validate: validate_cluster_policy, short: "cpp", columns: policy_columns(),
        crd: fed_api::ClusterPropagationPolicy,
        about: "ClusterPropagationPolicy selects objects of any namespace, and cluster-scoped ones, and says which member clusters they go to.",
    )
}

fn validate_placement(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    for f in ["apiVersion", "kind", "name"] {
        if o.at(&format!("/spec/resource/{f}"))
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(required(&format!("spec.resource.{f}")));
        }
    }
    let mut seen = HashSet::new();
    for (i, t) in o
        .at("/spec/destClusters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let c = t.get("cluster").cloned().unwrap_or(Value::Null);
        match c.as_str() {
            None | Some("") => errs.push(required(&format!("spec.destClusters[{i}].cluster"))),
            Some(n) => {
                if !seen.insert(n.to_string()) {
                    errs.push(validate::duplicate(
                        &format!("spec.destClusters[{i}].cluster"),
                        &c,
                    ));
                }
            }
        }
        errs.extend(validate::min_int(
            t,
            "/replicas",
            &format!("spec.destClusters[{i}].replicas"),
            0,
        ));
    }
    errs
}

/// `Placement` (namespaced).
pub fn placements() -> ResourceDef {
    let mut d = meridian(
        ResourceDef::new(
            fed_api::GROUP,
            fed_api::VERSION,
            "Placement",
            "placements",
            "placement",
            true,
            FnHooks {
                default: no_default,
                validate: validate_placement,
                check_types: |o| {
                    after_validation(
                        validate_placement,
                        typed_parts::<fed_api::PlacementSpec, fed_api::PlacementStatus>,
                        o,
                    )
                },
                prepare_create: no_prepare,
            },
        ),
        &["pl"],
        vec![
            column("Workload", "string", "The federated workload", false, |o| {
                reference_at(o, "/spec/resource")
            }),
            column(
                "Clusters",
                "string",
                "Replicas per destination cluster",
                false,
                |o| {
                    let parts: Vec<String> = o
                        .at("/spec/destClusters")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|t| {
                            format!(
                                "{}:{}",
                                t.get("cluster").and_then(Value::as_str).unwrap_or(""),
                                t.get("replicas").and_then(Value::as_i64).unwrap_or(0)
                            )
                        })
                        .collect();
                    Value::from(if parts.is_empty() {
                        "<none>".into()
                    } else {
                        parts.join(",")
                    })
                },
            ),
            column(
                "Scheduled",
                "string",
                "The Scheduled condition",
                false,
                |o| {
                    let s = o
                        .at("/status/conditions")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some("Scheduled"))
                        .and_then(|c| c.get("status").and_then(Value::as_str))
                        .unwrap_or("Unknown");
                    Value::from(s)
                },
            ),
        ],
    );
    d.definition = "dev.meridian.federation.v1alpha1.Placement";
    // The scheduler creates each Placement with its decision and the `Scheduled` condition
    // that explains it, in one write; later status changes go through `/status` as usual.
    d.status_on_create = true;
    d.schema = Some(|| {
        crd_schema(
            fed_api::Placement::crd(),
            "Placement is the scheduler's decision for one federated workload and its state in each member cluster.",
        )
    });
    d
}

#[cfg(test)]
mod tests {
    use meridian_apiserver::openapi::OpenApi;
    use serde_json::{Value, json};

    use super::federation_registry;

    const V3_REF: &str = "#/components/schemas/";
    const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

    fn doc(api: &OpenApi, gv: &str) -> Value {
        let (_, bytes) = api.v3_doc(gv).expect("document exists");
        serde_json::from_slice(bytes).expect("valid JSON")
    }

    #[test]
    fn the_openapi_documents_carry_meridian_kinds() {
        let api = OpenApi::build(&federation_registry());
        let fed = doc(&api, "apis/federation.meridian.dev/v1alpha1");
        let cluster = &fed["components"]["schemas"]["dev.meridian.federation.v1alpha1.Cluster"];
        assert_eq!(
            cluster["x-kubernetes-group-version-kind"][0],
            json!({"group": "federation.meridian.dev", "kind": "Cluster", "version": "v1alpha1"})
        );
        assert!(
            cluster["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("Cluster is a member cluster")),
            "{}",
            cluster["description"]
        );
        assert_eq!(
            cluster["properties"]["spec"]["properties"]["apiEndpoint"]["type"],
            "string"
        );
        assert_eq!(
            cluster["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("{V3_REF}{OBJECT_META}")
        );
        let item = &fed["paths"]["/apis/federation.meridian.dev/v1alpha1/clusters/{name}"];
        let content = item["patch"]["requestBody"]["content"].as_object().unwrap();
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(content.contains_key("application/strategic-merge-patch+json"));
        let defs = api.definitions();
        assert!(
            defs["dev.meridian.federation.v1alpha1.PlacementList"]["properties"]["items"]
                .is_object()
        );
        assert!(
            defs["dev.meridian.federation.v1alpha1.PropagationPolicy"]["properties"]["spec"]
                .is_object()
        );
        let status = &defs["dev.meridian.federation.v1alpha1.Placement"]["properties"]["status"];
        let conditions = &status["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(conditions["x-kubernetes-patch-merge-key"], "type");
        let clusters = &status["properties"]["clusters"];
        assert!(
            clusters.get("x-kubernetes-patch-strategy").is_none(),
            "the workload controller replaces its entries whole: {clusters}"
        );
    }

    #[test]
    fn discovery_lists_meridian_kinds_in_their_category() {
        let reg = federation_registry();
        let names = |reg: &meridian_apiserver::registry::Registry| -> Vec<String> {
            meridian_apiserver::discovery::api_group_list(reg)["groups"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|g| Some(g["name"].as_str()?.to_owned()))
                .collect()
        };
        // The engine's built-in groups (the engine's own tests name them), then Meridian's.
        let mut want = names(&meridian_apiserver::registry::Registry::new(
            meridian_apiserver::kinds::builtin(),
        ));
        assert!(want.contains(&"apps".to_owned()), "{want:?}");
        want.push("federation.meridian.dev".to_owned());
        assert_eq!(names(&reg), want);
        let fed = meridian_apiserver::discovery::resource_list(
            &reg,
            "federation.meridian.dev",
            "v1alpha1",
        )
        .unwrap();
        let cluster = &fed["resources"][0];
        assert_eq!(cluster["name"], "clusters");
        assert_eq!(cluster["categories"], json!(["meridian"]));
    }
}

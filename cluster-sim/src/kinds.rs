//! The kinds a member cluster serves: the engine's built-in kinds plus Node and Pod, which
//! only members have (the federation places workloads, it runs no pods).

use apimachinery::JsonPointer;
use k8s_openapi::api::core::v1::{Node, Pod};
use meridian_apiserver::kinds::apps::default_pod_spec;
use meridian_apiserver::kinds::core::def;
use meridian_apiserver::kinds::validate::{self, NameRule, required};
use meridian_apiserver::kinds::{self, FnHooks, column, no_default, no_prepare, str_at, typed};
use meridian_apiserver::registry::{Registry, ResourceDef};
use meridian_apiserver::status::Cause;
use serde_json::{Value, json};

use crate::controllers::util::condition;

/// The kinds a member cluster serves (what `cluster-sim` simulates): the engine's built-in
/// kinds, with Node and Pod after Namespace.
pub fn member_registry() -> Registry {
    let mut defs = kinds::builtin();
    defs.splice(1..1, [nodes(), pods()]);
    // Workloads and Services go before what they read, as in the federation, so a member
    // tears a namespace down in the same order the federation does.
    Registry::new(defs).with_deleted_first(&[
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("", "services"),
    ])
}

/// `v1` Node (cluster-scoped).
pub fn nodes() -> ResourceDef {
    let mut d = def(
        "Node",
        "nodes",
        "node",
        false,
        &["no"],
        FnHooks {
            default: no_default,
            validate: |o, _| validate::metadata(o, NameRule::Subdomain, false),
            check_types: typed::<Node>,
            prepare_create: no_prepare,
        },
        vec![
            column(
                "Status",
                "string",
                "Ready, NotReady or Unknown",
                false,
                |o| {
                    let mut s = match condition(o, "Ready")
                        .and_then(|c| c.get("status"))
                        .and_then(Value::as_str)
                    {
                        Some("True") => "Ready".to_string(),
                        Some("False") => "NotReady".to_string(),
                        _ => "Unknown".to_string(),
                    };
                    if o.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                        s.push_str(",SchedulingDisabled");
                    }
                    Value::from(s)
                },
            ),
            column("Version", "string", "Kubelet version", false, |o| {
                str_at(o, "/status/nodeInfo/kubeletVersion")
            }),
            column("Internal-IP", "string", "Internal address", true, |o| {
                let ip = o
                    .at("/status/addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
                    .and_then(|a| a.get("address").and_then(Value::as_str))
                    .unwrap_or("<none>");
                Value::from(ip)
            }),
        ],
    );
    d.definition = "io.k8s.api.core.v1.Node";
    d.status_subresource = true;
    d.field_selectors = &[("spec.unschedulable", "/spec/unschedulable")];
    d
}

fn validate_pod(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    match o.at("/spec/containers").and_then(Value::as_array) {
        None => errs.push(required("spec.containers")),
        Some(cs) if cs.is_empty() => errs.push(required("spec.containers")),
        Some(cs) => {
            for (i, c) in cs.iter().enumerate() {
                if c.get("name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.push(required(&format!("spec.containers[{i}].name")));
                }
                if c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.push(required(&format!("spec.containers[{i}].image")));
                }
            }
        }
    }
    if let Some(old) = old {
        // Only a few pod spec fields may change; the binding is set once.
        let (a, b) = (old.at("/spec/nodeName"), o.at("/spec/nodeName"));
        if a.is_some_and(|v| !v.is_null()) && a != b {
            errs.push(validate::invalid(
                "spec.nodeName",
                b.unwrap_or(&Value::Null),
                "field is immutable once set",
            ));
        }
    }
    errs
}

/// `v1` Pod.
pub fn pods() -> ResourceDef {
    let mut d = def(
        "Pod",
        "pods",
        "pod",
        true,
        &["po"],
        FnHooks {
            default: |o| {
                if let Some(spec) = o.get_mut("spec") {
                    default_pod_spec(spec);
                }
            },
            validate: validate_pod,
            check_types: typed::<Pod>,
            prepare_create: |o| {
                o["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            },
        },
        vec![
            column(
                "Ready",
                "string",
                "Ready containers over all containers",
                false,
                |o| {
                    let total = o
                        .at("/spec/containers")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len);
                    let ready = o
                        .at("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                        .count();
                    Value::from(format!("{ready}/{total}"))
                },
            ),
            column(
                "Status",
                "string",
                "The pod's phase, or why it is not running, as kubectl prints it",
                false,
                |o| Value::from(crate::pod_status::status_column(o)),
            ),
            column("Restarts", "integer", "Container restarts", false, |o| {
                let n: i64 = o
                    .at("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .sum();
                Value::from(n)
            }),
            column("IP", "string", "Pod IP", true, |o| {
                Value::from(
                    o.at("/status/podIP")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>"),
                )
            }),
            column("Node", "string", "Node the pod is bound to", true, |o| {
                Value::from(
                    o.at("/spec/nodeName")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>"),
                )
            }),
        ],
    );
    d.definition = "io.k8s.api.core.v1.Pod";
    d.status_subresource = true;
    d.categories = &["all"];
    d.field_selectors = &[
        ("spec.nodeName", "/spec/nodeName"),
        ("spec.restartPolicy", "/spec/restartPolicy"),
        ("spec.schedulerName", "/spec/schedulerName"),
        ("spec.serviceAccountName", "/spec/serviceAccountName"),
        ("status.phase", "/status/phase"),
        ("status.podIP", "/status/podIP"),
    ];
    d
}

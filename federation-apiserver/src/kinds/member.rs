//! Kinds only member clusters serve (and so `cluster-sim`): Node, Pod, Endpoints,
//! ServiceAccount, EndpointSlice and RBAC.

use apimachinery::JsonPointer;
use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, ServiceAccount};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{Value, json};

use super::apps::default_pod_spec;
use super::core::def;
use super::validate::{self, NameRule, required};
use super::{FnHooks, no_default, no_prepare, str_at, typed};
use crate::registry::{Column, ResourceDef};
use crate::status::Cause;

fn condition(o: &Value, ty: &str) -> Option<String> {
    o.at("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))?
        .get("status")?
        .as_str()
        .map(String::from)
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
            Column {
                name: "Status",
                type_: "string",
                format: "",
                description: "Ready, NotReady or Unknown",
                priority: 0,
                cell: |o| {
                    let mut s = match condition(o, "Ready").as_deref() {
                        Some("True") => "Ready".to_string(),
                        Some("False") => "NotReady".to_string(),
                        _ => "Unknown".to_string(),
                    };
                    if o.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                        s.push_str(",SchedulingDisabled");
                    }
                    Value::from(s)
                },
            },
            Column {
                name: "Version",
                type_: "string",
                format: "",
                description: "Kubelet version",
                priority: 0,
                cell: |o| str_at(o, "/status/nodeInfo/kubeletVersion"),
            },
            Column {
                name: "Internal-IP",
                type_: "string",
                format: "",
                description: "Internal address",
                priority: 1,
                cell: |o| {
                    let ip = o
                        .at("/status/addresses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
                        .and_then(|a| a.get("address").and_then(Value::as_str))
                        .unwrap_or("<none>");
                    Value::from(ip)
                },
            },
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
            Column {
                name: "Ready",
                type_: "string",
                format: "",
                description: "Ready containers over all containers",
                priority: 0,
                cell: |o| {
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
            },
            Column {
                name: "Status",
                type_: "string",
                format: "",
                description: "The pod's phase",
                priority: 0,
                cell: |o| {
                    if crate::object::is_deleting(o) {
                        return Value::from("Terminating");
                    }
                    str_at(o, "/status/phase")
                },
            },
            Column {
                name: "Restarts",
                type_: "integer",
                format: "",
                description: "Container restarts",
                priority: 0,
                cell: |o| {
                    let n: i64 = o
                        .at("/status/containerStatuses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                        .sum();
                    Value::from(n)
                },
            },
            Column {
                name: "IP",
                type_: "string",
                format: "",
                description: "Pod IP",
                priority: 1,
                cell: |o| {
                    Value::from(
                        o.at("/status/podIP")
                            .and_then(Value::as_str)
                            .unwrap_or("<none>"),
                    )
                },
            },
            Column {
                name: "Node",
                type_: "string",
                format: "",
                description: "Node the pod is bound to",
                priority: 1,
                cell: |o| {
                    Value::from(
                        o.at("/spec/nodeName")
                            .and_then(Value::as_str)
                            .unwrap_or("<none>"),
                    )
                },
            },
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

/// `v1` Endpoints.
pub fn endpoints() -> ResourceDef {
    let mut d = def(
        "Endpoints",
        "endpoints",
        "endpoints",
        true,
        &["ep"],
        FnHooks {
            default: no_default,
            validate: |o, _| validate::metadata(o, NameRule::Subdomain, true),
            check_types: typed::<Endpoints>,
            prepare_create: no_prepare,
        },
        vec![Column {
            name: "Endpoints",
            type_: "string",
            format: "",
            description: "Ready addresses and ports",
            priority: 0,
            cell: |o| {
                let mut out = Vec::new();
                for s in o
                    .get("subsets")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let ports: Vec<i64> = s
                        .get("ports")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.get("port").and_then(Value::as_i64))
                        .collect();
                    for a in s
                        .get("addresses")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
                        for p in &ports {
                            out.push(format!("{ip}:{p}"));
                        }
                    }
                }
                Value::from(if out.is_empty() {
                    "<none>".to_string()
                } else {
                    out.join(",")
                })
            },
        }],
    );
    d.definition = "io.k8s.api.core.v1.Endpoints";
    d
}

/// `v1` ServiceAccount.
pub fn service_accounts() -> ResourceDef {
    let mut d = def(
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        true,
        &["sa"],
        FnHooks {
            default: no_default,
            validate: |o, _| validate::metadata(o, NameRule::Subdomain, true),
            check_types: typed::<ServiceAccount>,
            prepare_create: no_prepare,
        },
        vec![],
    );
    d.definition = "io.k8s.api.core.v1.ServiceAccount";
    d
}

/// `discovery.k8s.io/v1` EndpointSlice.
pub fn endpoint_slices() -> ResourceDef {
    let mut d = def(
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        true,
        &[],
        FnHooks {
            default: no_default,
            validate: |o, _| {
                let mut errs = validate::metadata(o, NameRule::Subdomain, true);
                if o.get("addressType").and_then(Value::as_str).is_none() {
                    errs.push(required("addressType"));
                }
                errs
            },
            check_types: typed::<EndpointSlice>,
            prepare_create: no_prepare,
        },
        vec![
            Column {
                name: "AddressType",
                type_: "string",
                format: "",
                description: "IPv4, IPv6 or FQDN",
                priority: 0,
                cell: |o| str_at(o, "/addressType"),
            },
            Column {
                name: "Endpoints",
                type_: "string",
                format: "",
                description: "Addresses of the endpoints",
                priority: 0,
                cell: |o| {
                    let addrs: Vec<&str> = o
                        .get("endpoints")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .flat_map(|e| {
                            e.get("addresses")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                        })
                        .filter_map(Value::as_str)
                        .collect();
                    Value::from(if addrs.is_empty() {
                        "<unset>".to_string()
                    } else {
                        addrs.join(",")
                    })
                },
            },
        ],
    );
    d.group = "discovery.k8s.io";
    d.definition = "io.k8s.api.discovery.v1.EndpointSlice";
    d
}

fn rbac(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    definition: &'static str,
    check: fn(&Value) -> Result<(), String>,
) -> ResourceDef {
    let mut d = def(
        kind,
        plural,
        singular,
        namespaced,
        &[],
        FnHooks {
            default: no_default,
            validate: if namespaced {
                |o, _| validate::metadata(o, NameRule::PathSegment, true)
            } else {
                |o, _| validate::metadata(o, NameRule::PathSegment, false)
            },
            check_types: check,
            prepare_create: no_prepare,
        },
        if kind.ends_with("Binding") {
            vec![Column {
                name: "Role",
                type_: "string",
                format: "",
                description: "The role bound",
                priority: 0,
                cell: |o| {
                    let k = o.at("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
                    let n = o.at("/roleRef/name").and_then(Value::as_str).unwrap_or("");
                    Value::from(format!("{k}/{n}"))
                },
            }]
        } else {
            vec![]
        },
    );
    d.group = "rbac.authorization.k8s.io";
    d.definition = definition;
    d
}

/// RBAC kinds.
pub fn rbac_kinds() -> Vec<ResourceDef> {
    vec![
        rbac(
            "Role",
            "roles",
            "role",
            true,
            "io.k8s.api.rbac.v1.Role",
            typed::<Role>,
        ),
        rbac(
            "ClusterRole",
            "clusterroles",
            "clusterrole",
            false,
            "io.k8s.api.rbac.v1.ClusterRole",
            typed::<ClusterRole>,
        ),
        rbac(
            "RoleBinding",
            "rolebindings",
            "rolebinding",
            true,
            "io.k8s.api.rbac.v1.RoleBinding",
            typed::<RoleBinding>,
        ),
        rbac(
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            false,
            "io.k8s.api.rbac.v1.ClusterRoleBinding",
            typed::<ClusterRoleBinding>,
        ),
    ]
}

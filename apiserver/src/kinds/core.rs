//! Core (`v1`) kinds and `coordination.k8s.io` Lease.

use apimachinery::JsonPointer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Secret, Service, ServiceAccount};
use serde_json::{Value, json};

use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, column, default_at, int_column, no_default, no_prepare, str_column, typed};
use crate::registry::{Column, ResourceDef};
use crate::status::Cause;

/// A `v1` resource with its short names, hooks and table columns.
pub fn def(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    hooks: FnHooks,
    columns: Vec<Column>,
) -> ResourceDef {
    let mut d = ResourceDef::new("", "v1", kind, plural, singular, namespaced, hooks);
    d.short_names = short;
    d.columns = columns;
    d
}

/// `v1` Namespace.
pub fn namespaces() -> ResourceDef {
    let mut d = def(
        "Namespace",
        "namespaces",
        "namespace",
        false,
        &["ns"],
        FnHooks {
            default: no_default,
            validate: |o, _| validate::metadata(o, NameRule::Label, false),
            check_types: typed::<Namespace>,
            prepare_create: |o| {
                let name = crate::object::name(o).to_string();
                default_at(o, &["spec", "finalizers"], json!(["kubernetes"]));
                o["status"] = json!({"phase": "Active"});
                let labels = crate::object::meta_mut(o)
                    .entry("labels")
                    .or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), Value::from(name));
                }
            },
        },
        vec![str_column(
            "Status",
            "The phase of the namespace",
            "/status/phase",
        )],
    );
    d.definition = "io.k8s.api.core.v1.Namespace";
    d.status_subresource = true;
    d
}

fn default_service(o: &mut Value) {
    default_at(o, &["spec", "type"], json!("ClusterIP"));
    default_at(o, &["spec", "sessionAffinity"], json!("None"));
    if let Some(ports) = o.at_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ports {
            default_at(p, &["protocol"], json!("TCP"));
            if p.get("targetPort").is_none_or(Value::is_null) {
                let port = p.get("port").cloned().unwrap_or(Value::Null);
                p["targetPort"] = port;
            }
        }
    }
}

fn validate_service(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Dns1035, true);
    let ty = o
        .at("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    const TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !TYPES.contains(&ty) {
        errs.push(not_supported("spec.type", &Value::from(ty), TYPES));
    }
    let ports = o.at("/spec/ports").and_then(Value::as_array);
    if ty != "ExternalName" && ports.is_none_or(|p| p.is_empty()) {
        errs.push(required("spec.ports"));
    }
    let many = ports.is_some_and(|p| p.len() > 1);
    let mut names = std::collections::HashSet::new();
    for (i, p) in ports.into_iter().flatten().enumerate() {
        let f = |x: &str| format!("spec.ports[{i}].{x}");
        match p.get("port").and_then(Value::as_i64) {
            Some(n) if (1..=65535).contains(&n) => {}
            Some(_) => errs.push(invalid(
                &f("port"),
                &p["port"],
                "must be between 1 and 65535, inclusive",
            )),
            None => errs.push(required(&f("port"))),
        }
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if many && name.is_empty() {
            errs.push(required(&f("name")));
        }
        if !name.is_empty() && !names.insert(name.to_string()) {
            errs.push(validate::duplicate(&f("name"), &p["name"]));
        }
        if let Some(proto) = p.get("protocol").and_then(Value::as_str)
            && !["TCP", "UDP", "SCTP"].contains(&proto)
        {
            errs.push(not_supported(
                &f("protocol"),
                &p["protocol"],
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if let Some(tp) = p.get("targetPort") {
            let ok = match tp {
                Value::Number(n) => n.as_i64().is_some_and(|n| (1..=65535).contains(&n)),
                Value::String(s) => validate::dns1035_label(s).is_ok() || s.len() <= 15,
                _ => false,
            };
            if !ok {
                errs.push(invalid(
                    &f("targetPort"),
                    tp,
                    "must be a port number or name",
                ));
            }
        }
    }
    if let Some(old) = old
        && let (Some(a), Some(b)) = (
            o.at("/spec/clusterIP").and_then(Value::as_str),
            old.at("/spec/clusterIP").and_then(Value::as_str),
        )
        && a != b
    {
        errs.push(invalid(
            "spec.clusterIP",
            &Value::from(a),
            "field is immutable",
        ));
    }
    errs
}

fn ports_cell(o: &Value) -> Value {
    let ports: Vec<String> = o
        .at("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) => format!("{port}:{np}/{proto}"),
                None => format!("{port}/{proto}"),
            }
        })
        .collect();
    Value::from(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

/// `v1` Service.
pub fn services() -> ResourceDef {
    let mut d = def(
        "Service",
        "services",
        "service",
        true,
        &["svc"],
        FnHooks::typed::<Service>(default_service, validate_service),
        vec![
            str_column("Type", "The type of the service", "/spec/type"),
            column(
                "Cluster-IP",
                "string",
                "The cluster IP of the service",
                false,
                |o| {
                    let ip = o
                        .at("/spec/clusterIP")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>");
                    Value::from(ip)
                },
            ),
            column(
                "External-IP",
                "string",
                "Load-balancer addresses of the service",
                false,
                |o| {
                    let ips = super::load_balancer_addresses(o);
                    let ty = o.at("/spec/type").and_then(Value::as_str).unwrap_or("");
                    Value::from(match (ips.is_empty(), ty) {
                        (false, _) => ips.join(","),
                        (true, "LoadBalancer") => "<pending>".into(),
                        _ => "<none>".into(),
                    })
                },
            ),
            column(
                "Port(s)",
                "string",
                "The ports of the service",
                false,
                ports_cell,
            ),
            column("Selector", "string", "The pod selector", true, |o| {
                selector_cell(o.at("/spec/selector"))
            }),
        ],
    );
    d.definition = "io.k8s.api.core.v1.Service";
    d.status_subresource = true;
    d.categories = &["all"];
    d
}

/// `k=v,k2=v2` or `<none>` for a map selector.
pub fn selector_cell(sel: Option<&Value>) -> Value {
    let parts: Vec<String> = sel
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    Value::from(if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    })
}

fn data_keys(o: &Value, field: &str, errs: &mut Vec<Cause>) {
    if let Some(m) = o.get(field).and_then(Value::as_object) {
        for k in m.keys() {
            let ok = !k.is_empty()
                && k.len() <= 253
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
            if !ok {
                errs.push(invalid(
                    field,
                    &Value::from(k.as_str()),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ));
            }
        }
    }
}

fn count_data(o: &Value) -> Value {
    let n = ["data", "binaryData"]
        .iter()
        .filter_map(|f| o.get(*f).and_then(Value::as_object))
        .map(|m| m.len())
        .sum::<usize>();
    Value::from(n)
}

/// `v1` ConfigMap.
pub fn configmaps() -> ResourceDef {
    let mut d = def(
        "ConfigMap",
        "configmaps",
        "configmap",
        true,
        &["cm"],
        FnHooks {
            default: no_default,
            validate: |o, _| {
                let mut errs = validate::metadata(o, NameRule::Subdomain, true);
                data_keys(o, "data", &mut errs);
                data_keys(o, "binaryData", &mut errs);
                errs
            },
            check_types: typed::<ConfigMap>,
            prepare_create: no_prepare,
        },
        vec![column(
            "Data",
            "integer",
            "Number of data keys",
            false,
            count_data,
        )],
    );
    d.definition = "io.k8s.api.core.v1.ConfigMap";
    d
}

fn default_secret(o: &mut Value) {
    use base64::Engine;
    default_at(o, &["type"], json!("Opaque"));
    // stringData is write-only: fold it into data, as Kubernetes does.
    if let Some(Value::Object(sd)) = o.as_object_mut().and_then(|m| m.remove("stringData")) {
        let data = o
            .as_object_mut()
            .expect("object")
            .entry("data")
            .or_insert_with(|| json!({}));
        if data.is_null() {
            *data = json!({});
        }
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let s = v.as_str().unwrap_or("").as_bytes().to_vec();
                d.insert(
                    k,
                    Value::from(base64::engine::general_purpose::STANDARD.encode(s)),
                );
            }
        }
    }
}

/// `v1` Secret.
pub fn secrets() -> ResourceDef {
    let mut d = def(
        "Secret",
        "secrets",
        "secret",
        true,
        &[],
        FnHooks {
            default: default_secret,
            validate: |o, _| {
                use base64::Engine;
                let mut errs = validate::metadata(o, NameRule::Subdomain, true);
                data_keys(o, "data", &mut errs);
                for (k, v) in o
                    .get("data")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    let ok = v.as_str().is_some_and(|s| {
                        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                    });
                    if !ok {
                        errs.push(invalid(
                            &format!("data[{k}]"),
                            &json!("<hidden>"),
                            "must be base64-encoded",
                        ));
                    }
                }
                errs
            },
            check_types: typed::<Secret>,
            prepare_create: no_prepare,
        },
        vec![
            str_column("Type", "The type of the secret", "/type"),
            column("Data", "integer", "Number of data keys", false, count_data),
        ],
    );
    d.definition = "io.k8s.api.core.v1.Secret";
    d.field_selectors = &[("type", "/type")];
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
        FnHooks::typed::<ServiceAccount>(no_default, |o, _| {
            validate::metadata(o, NameRule::Subdomain, true)
        }),
        vec![],
    );
    d.definition = "io.k8s.api.core.v1.ServiceAccount";
    d
}

/// `v1` Event.
pub fn events() -> ResourceDef {
    let mut d = def(
        "Event",
        "events",
        "event",
        true,
        &["ev"],
        FnHooks {
            default: |o| {
                default_at(o, &["type"], json!("Normal"));
                default_at(o, &["count"], json!(1));
            },
            validate: |o, _| {
                let mut errs = validate::metadata(o, NameRule::Subdomain, true);
                if o.at("/involvedObject/kind").is_none() {
                    errs.push(required("involvedObject"));
                }
                errs
            },
            check_types: typed::<Event>,
            prepare_create: no_prepare,
        },
        vec![
            str_column("Type", "Normal or Warning", "/type"),
            str_column("Reason", "Why the event happened", "/reason"),
            column(
                "Object",
                "string",
                "The object the event is about",
                false,
                |o| super::reference_at(o, "/involvedObject"),
            ),
            int_column("Count", "How often it happened", "/count").wide(),
            str_column("Message", "What happened", "/message"),
        ],
    );
    d.definition = "io.k8s.api.core.v1.Event";
    // `kubectl describe` finds an object's events with these.
    d.field_selectors = &[
        ("involvedObject.kind", "/involvedObject/kind"),
        ("involvedObject.namespace", "/involvedObject/namespace"),
        ("involvedObject.name", "/involvedObject/name"),
        ("involvedObject.uid", "/involvedObject/uid"),
        ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
        (
            "involvedObject.resourceVersion",
            "/involvedObject/resourceVersion",
        ),
        ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
        ("reason", "/reason"),
        ("reportingComponent", "/reportingComponent"),
        ("source", "/source/component"),
        ("type", "/type"),
    ];
    d
}

/// How `events.k8s.io/v1` names the fields of a core Event (served name, stored name), as
/// upstream's conversion maps them; the others (`action`, `reason`, `type`, `eventTime`,
/// `series`, `related`, `reportingInstance`) keep their names.
const EVENTS_V1_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// `events.k8s.io/v1` Event: the same objects as core Events (one store, so `kubectl get
/// events` and `kubectl describe` show what kube-rs and client-go's `events` recorders
/// write), served with that group's field names. Its table shows the core Event columns,
/// read from the stored form.
pub fn events_v1() -> ResourceDef {
    use crate::convert::rename;
    use crate::registry::Conversion;
    let mut d = ResourceDef::new(
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        "event",
        true,
        FnHooks {
            default: no_default,
            validate: |o, _| {
                let mut errs = validate::metadata(o, NameRule::Subdomain, true);
                for f in [
                    "eventTime",
                    "reportingController",
                    "reportingInstance",
                    "action",
                ] {
                    if o.get(f).is_none_or(|v| v.is_null() || v == "") {
                        errs.push(required(f));
                    }
                }
                match o.get("type") {
                    Some(t) if t == "Normal" || t == "Warning" => {}
                    Some(t) => errs.push(not_supported("type", t, &["Normal", "Warning"])),
                    None => errs.push(required("type")),
                }
                errs
            },
            check_types: typed::<k8s_openapi::api::events::v1::Event>,
            prepare_create: no_prepare,
        },
    );
    d.definition = "io.k8s.api.events.v1.Event";
    d.columns = events().columns;
    d.conversion = Some(std::sync::Arc::new(Conversion {
        stored_group: "",
        stored_api_version: "v1".into(),
        to_served: |o| {
            let back: Vec<(&str, &str)> = EVENTS_V1_FIELDS.iter().map(|&(s, t)| (t, s)).collect();
            rename(o, &back);
        },
        to_stored: |o| rename(o, &EVENTS_V1_FIELDS),
        status_annotations: &[],
    }));
    d
}

/// `coordination.k8s.io/v1` Lease.
pub fn leases() -> ResourceDef {
    let mut d = def(
        "Lease",
        "leases",
        "lease",
        true,
        &[],
        FnHooks::typed::<Lease>(no_default, |o, _| {
            validate::metadata(o, NameRule::Subdomain, true)
        }),
        vec![str_column(
            "Holder",
            "The current holder",
            "/spec/holderIdentity",
        )],
    );
    d.group = "coordination.k8s.io";
    d.definition = "io.k8s.api.coordination.v1.Lease";
    d
}

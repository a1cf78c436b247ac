//! `apps/v1` Deployment and ReplicaSet, with the pod-template rules they share.

use std::collections::HashSet;

use apimachinery::JsonPointer;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use serde_json::{Value, json};

use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, column, default_at, int_column};
use crate::registry::{Column, ResourceDef};
use crate::status::Cause;

/// Pod-spec defaults kubectl users see on a real cluster.
pub fn default_pod_spec(spec: &mut Value) {
    default_at(spec, &["restartPolicy"], json!("Always"));
    default_pod_spec_but_restart(spec);
}

/// The pod-spec defaults other than `restartPolicy`, which a Job's template must state
/// itself (there is no default that is valid for it).
pub fn default_pod_spec_but_restart(spec: &mut Value) {
    default_at(spec, &["terminationGracePeriodSeconds"], json!(30));
    default_at(spec, &["dnsPolicy"], json!("ClusterFirst"));
    default_at(spec, &["securityContext"], json!({}));
    default_at(spec, &["schedulerName"], json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                // Kubernetes pulls `:latest` (or untagged) images always.
                let last = image.rsplit('/').next().unwrap_or("");
                let policy =
                    if image.contains('@') || (last.contains(':') && !last.ends_with(":latest")) {
                        "IfNotPresent"
                    } else {
                        "Always"
                    };
                default_at(c, &["imagePullPolicy"], json!(policy));
                default_at(
                    c,
                    &["terminationMessagePath"],
                    json!("/dev/termination-log"),
                );
                default_at(c, &["terminationMessagePolicy"], json!("File"));
                default_at(c, &["resources"], json!({}));
                if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        default_at(p, &["protocol"], json!("TCP"));
                    }
                }
            }
        }
    }
}

/// Validates `spec.template` of a workload whose pods restart `Always`.
pub fn validate_template(obj: &Value, errs: &mut Vec<Cause>) {
    validate_pod_template(obj.at("/spec/template"), "spec.template", &["Always"], errs);
}

/// Validates a pod template found at `field` (e.g. `spec.jobTemplate.spec.template`):
/// its containers, their ports, and a `restartPolicy` among `restart` (the first being
/// the only one allowed when it is `Always`; otherwise it must be stated).
pub fn validate_pod_template(
    tpl: Option<&Value>,
    field: &str,
    restart: &[&str],
    errs: &mut Vec<Cause>,
) {
    let Some(tpl) = tpl else {
        errs.push(required(field));
        return;
    };
    let containers = tpl.at("/spec/containers").and_then(Value::as_array);
    match containers {
        None => errs.push(required(&format!("{field}.spec.containers"))),
        Some(cs) if cs.is_empty() => errs.push(required(&format!("{field}.spec.containers"))),
        Some(cs) => {
            let mut names = HashSet::new();
            for (i, c) in cs.iter().enumerate() {
                let f = |x: &str| format!("{field}.spec.containers[{i}].{x}");
                match c.get("name").and_then(Value::as_str) {
                    None | Some("") => errs.push(required(&f("name"))),
                    Some(n) => {
                        if let Err(msgs) = apimachinery::validation::dns1123_label(n) {
                            for m in msgs {
                                errs.push(invalid(&f("name"), &c["name"], &m));
                            }
                        }
                        if !names.insert(n.to_string()) {
                            errs.push(validate::duplicate(&f("name"), &c["name"]));
                        }
                    }
                }
                if c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(|s| s.trim().is_empty())
                {
                    errs.push(required(&f("image")));
                }
                let mut port_names = HashSet::new();
                for (j, p) in c
                    .get("ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let pf = |x: &str| format!("{field}.spec.containers[{i}].ports[{j}].{x}");
                    match p.get("containerPort").and_then(Value::as_i64) {
                        Some(n) if (1..=65535).contains(&n) => {}
                        Some(_) => errs.push(invalid(
                            &pf("containerPort"),
                            &p["containerPort"],
                            "must be between 1 and 65535, inclusive",
                        )),
                        None => errs.push(required(&pf("containerPort"))),
                    }
                    if let Some(n) = p.get("name").and_then(Value::as_str)
                        && !port_names.insert(n.to_string())
                    {
                        errs.push(validate::duplicate(&pf("name"), &p["name"]));
                    }
                    if let Some(proto) = p.get("protocol").and_then(Value::as_str)
                        && !["TCP", "UDP", "SCTP"].contains(&proto)
                    {
                        errs.push(not_supported(
                            &pf("protocol"),
                            &p["protocol"],
                            &["SCTP", "TCP", "UDP"],
                        ));
                    }
                }
            }
        }
    }
    let rp = tpl.at("/spec/restartPolicy");
    let field = format!("{field}.spec.restartPolicy");
    match rp {
        Some(v) if !v.as_str().is_some_and(|p| restart.contains(&p)) => {
            errs.push(not_supported(&field, v, restart))
        }
        None if restart != ["Always"] => errs.push(Cause {
            message: format!(
                "Required value: valid values: {}",
                restart
                    .iter()
                    .map(|r| format!("\"{r}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            ..required(&field)
        }),
        _ => {}
    }
}

/// Validates the selector and that it matches the template labels.
pub fn validate_selector(obj: &Value, errs: &mut Vec<Cause>) {
    let Some(sel) = obj.at("/spec/selector") else {
        errs.push(required("spec.selector"));
        return;
    };
    let parsed = match apimachinery::selector::LabelSelector::from_json(sel) {
        Ok(s) => s,
        Err(e) => {
            errs.push(invalid("spec.selector", sel, &e.to_string()));
            return;
        }
    };
    if parsed.is_empty() {
        errs.push(invalid(
            "spec.selector",
            sel,
            "empty selector is invalid for deployment",
        ));
        return;
    }
    let empty = serde_json::Map::new();
    let labels = obj
        .at("/spec/template/metadata/labels")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if !parsed.matches(labels) {
        errs.push(invalid(
            "spec.template.metadata.labels",
            &Value::Object(labels.clone()),
            "`selector` does not match template `labels`",
        ));
    }
}

/// The rules every `apps/v1` workload shares: metadata, replicas, selector matching the
/// template, the template itself, and an immutable selector.
pub fn validate_workload(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    errs.extend(validate::min_int(o, "/spec/replicas", "spec.replicas", 0));
    errs.extend(validate::min_int(
        o,
        "/spec/minReadySeconds",
        "spec.minReadySeconds",
        0,
    ));
    validate_selector(o, &mut errs);
    validate_template(o, &mut errs);
    errs.extend(validate::unchanged(o, old, &["spec.selector"]));
    errs
}

fn validate_deployment(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate_workload(o, old);
    errs.extend(validate::min_int(
        o,
        "/spec/revisionHistoryLimit",
        "spec.revisionHistoryLimit",
        0,
    ));
    if let Some(ty) = o.at("/spec/strategy/type") {
        match ty.as_str() {
            Some("RollingUpdate") => {}
            Some("Recreate") => {
                if o.at("/spec/strategy/rollingUpdate")
                    .is_some_and(|v| !v.is_null())
                {
                    errs.push(validate::forbidden(
                        "spec.strategy.rollingUpdate",
                        "may not be specified when strategy `type` is 'Recreate'",
                    ));
                }
            }
            _ => errs.push(not_supported(
                "spec.strategy.type",
                ty,
                &["Recreate", "RollingUpdate"],
            )),
        }
    }
    if let (Some(p), Some(m)) = (
        o.at("/spec/progressDeadlineSeconds")
            .and_then(Value::as_i64),
        o.at("/spec/minReadySeconds").and_then(Value::as_i64),
    ) && p <= m
    {
        errs.push(invalid(
            "spec.progressDeadlineSeconds",
            &Value::from(p),
            "must be greater than minReadySeconds",
        ));
    }
    errs
}

fn default_deployment(o: &mut Value) {
    default_at(o, &["spec", "replicas"], json!(1));
    let recreate = o.at("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate");
    if !recreate {
        default_at(o, &["spec", "strategy", "type"], json!("RollingUpdate"));
        default_at(
            o,
            &["spec", "strategy", "rollingUpdate", "maxUnavailable"],
            json!("25%"),
        );
        default_at(
            o,
            &["spec", "strategy", "rollingUpdate", "maxSurge"],
            json!("25%"),
        );
    }
    default_at(o, &["spec", "revisionHistoryLimit"], json!(10));
    default_at(o, &["spec", "progressDeadlineSeconds"], json!(600));
    if let Some(spec) = o.at_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

fn default_replicaset(o: &mut Value) {
    default_at(o, &["spec", "replicas"], json!(1));
    if let Some(spec) = o.at_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

/// The `field` (`name` or `image`) of each container of the template at `/spec/template`.
pub fn images(o: &Value, field: &str) -> Value {
    template_images(o, "/spec/template", field)
}

/// The `field` of each container of the pod template at `template` (a JSON pointer),
/// comma-separated, as kubectl's wide columns show them.
pub fn template_images(o: &Value, template: &str, field: &str) -> Value {
    let v: Vec<&str> = o
        .at(&format!("{template}/spec/containers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get(field).and_then(Value::as_str))
        .collect();
    Value::from(v.join(","))
}

/// `spec.selector` as a label-selector string.
pub fn selector_string(o: &Value) -> Value {
    let sel = o.at("/spec/selector").cloned().unwrap_or(Value::Null);
    match apimachinery::selector::LabelSelector::from_json(&sel) {
        Ok(s) => Value::from(s.to_string()),
        Err(_) => Value::from(""),
    }
}

/// The `-o wide` columns of a workload: containers, images, selector.
pub fn wide_columns() -> Vec<Column> {
    vec![
        column(
            "Containers",
            "string",
            "Names of each container in the template",
            true,
            |o| images(o, "name"),
        ),
        column(
            "Images",
            "string",
            "Images referenced by each container in the template",
            true,
            |o| images(o, "image"),
        ),
        column(
            "Selector",
            "string",
            "Label selector for pods",
            true,
            selector_string,
        ),
    ]
}

/// An `apps/v1` workload: namespaced, in category `all`, with `status` and `scale`
/// subresources and a generation.
fn workload(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    hooks: FnHooks,
    columns: Vec<Column>,
) -> ResourceDef {
    let mut d = ResourceDef::new("apps", "v1", kind, plural, singular, true, hooks);
    d.categories = &["all"];
    d.status_subresource = true;
    d.scale_subresource = true;
    d.tracks_generation = true;
    d.columns = columns;
    d
}

/// `apps/v1` Deployment.
pub fn deployments() -> ResourceDef {
    let mut columns = vec![
        column(
            "Ready",
            "string",
            "Number of ready pods over desired",
            false,
            super::workloads::ready_over_desired,
        ),
        int_column(
            "Up-to-date",
            "Replicas updated to the current template",
            "/status/updatedReplicas",
        ),
        int_column(
            "Available",
            "Replicas available to users",
            "/status/availableReplicas",
        ),
    ];
    columns.extend(wide_columns());
    let hooks = FnHooks::typed::<Deployment>(default_deployment, validate_deployment);
    let mut d = workload("Deployment", "deployments", "deployment", hooks, columns);
    d.short_names = &["deploy"];
    d.definition = "io.k8s.api.apps.v1.Deployment";
    d
}

/// `apps/v1` ReplicaSet.
pub fn replicasets() -> ResourceDef {
    let mut columns = vec![
        int_column("Desired", "Desired replicas", "/spec/replicas"),
        int_column("Current", "Observed replicas", "/status/replicas"),
        int_column("Ready", "Ready replicas", "/status/readyReplicas"),
    ];
    columns.extend(wide_columns());
    let hooks = FnHooks::typed::<ReplicaSet>(default_replicaset, validate_workload);
    let mut d = workload("ReplicaSet", "replicasets", "replicaset", hooks, columns);
    d.short_names = &["rs"];
    d.definition = "io.k8s.api.apps.v1.ReplicaSet";
    d
}

//! `ResourceInterpreter` (cluster-scoped): how Meridian reads a custom kind, served with
//! validation that names each bad field and why before an interpreter reaches the
//! controllers.

use apimachinery::JsonPointer;
use meridian_apiserver::kinds::validate::{self, NameRule, invalid, not_supported, required};
use meridian_apiserver::kinds::{column, str_column};
use meridian_apiserver::registry::{Column, ResourceDef};
use meridian_apiserver::status::Cause;
use serde_json::Value;

use crate::kinds::policy_kind;

const OPS: [&str; 3] = ["Max", "Min", "Sum"];

/// Whether `path` is a dotted field path from the object's root (`.spec.replicas`).
fn is_dotted_path(path: &str) -> bool {
    path.strip_prefix('.')
        .is_some_and(|rest| !rest.is_empty() && rest.split('.').all(|s| !s.is_empty()))
}

/// The cause of a bad path at `field` (`None` when it is a dotted path under `under`).
fn path_cause(o: &Value, pointer: &str, field: &str, under: &str) -> Option<Cause> {
    match o.at(pointer) {
        None => Some(required(field)),
        Some(Value::String(p)) if is_dotted_path(p) && p.starts_with(under) => None,
        Some(other) => Some(invalid(
            field,
            other,
            &format!("must be a dotted field path under {under} (e.g. {under}replicas)"),
        )),
    }
}

fn validate_interpreter(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, false);
    match o.at("/spec/target/apiVersion").and_then(Value::as_str) {
        None | Some("") => errs.push(required("spec.target.apiVersion")),
        Some(av) => {
            let group = av.rsplit_once('/').map(|(g, _)| g);
            if !group.is_some_and(|g| g.contains('.')) {
                errs.push(invalid(
                    "spec.target.apiVersion",
                    &Value::from(av),
                    "must be group/version of a custom resource (built-in kinds are understood without an interpreter)",
                ));
            }
        }
    }
    if o.at("/spec/target/kind")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        errs.push(required("spec.target.kind"));
    }
    for (field, under) in [("replicas", ".spec."), ("podTemplate", ".spec.")] {
        if o.at(&format!("/spec/{field}")).is_some() {
            errs.extend(path_cause(
                o,
                &format!("/spec/{field}/path"),
                &format!("spec.{field}.path"),
                under,
            ));
        }
    }
    let aggregations = o
        .at("/spec/statusAggregation")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate();
    for (i, _) in aggregations {
        let at = format!("spec.statusAggregation[{i}]");
        errs.extend(path_cause(
            o,
            &format!("/spec/statusAggregation/{i}/path"),
            &format!("{at}.path"),
            ".status.",
        ));
        match o.at(&format!("/spec/statusAggregation/{i}/op")) {
            Some(Value::String(op)) if OPS.contains(&op.as_str()) => {}
            Some(other) => errs.push(not_supported(&format!("{at}.op"), other, &OPS)),
            None => errs.push(required(&format!("{at}.op"))),
        }
    }
    if o.at("/spec/health").is_some()
        && o.at("/spec/health/conditionType")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        errs.push(required("spec.health.conditionType"));
    }
    errs
}

/// `ResourceInterpreter` (cluster-scoped).
pub fn resource_interpreters() -> ResourceDef {
    policy_kind!(
        "ResourceInterpreter", "resourceinterpreters", "resourceinterpreter",
        namespaced: false, spec: fed_api::ResourceInterpreterSpec,
        validate: validate_interpreter, short: "ri",
        columns: interpreter_columns(), crd: fed_api::ResourceInterpreter,
        about: "ResourceInterpreter tells Meridian where a custom kind keeps its replicas and pod template, how its members' status fields combine into the federated object's status, and when a member's copy is healthy.",
    )
}

/// The `kubectl get` columns.
fn interpreter_columns() -> Vec<Column> {
    vec![
        column(
            "Target",
            "string",
            "The custom kind (apiVersion, kind)",
            false,
            |o| {
                let s = |p: &str| o.at(p).and_then(Value::as_str).unwrap_or("").to_owned();
                Value::from(format!(
                    "{} {}",
                    s("/spec/target/apiVersion"),
                    s("/spec/target/kind")
                ))
            },
        ),
        str_column("Replicas", "Where the replicas are", "/spec/replicas/path"),
        str_column(
            "Health",
            "The condition that says a copy is healthy",
            "/spec/health/conditionType",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn interpreter(spec: Value) -> Value {
        json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "ResourceInterpreter",
            "metadata": {"name": "rollouts"},
            "spec": spec,
        })
    }

    fn fields(causes: &[Cause]) -> Vec<(String, String)> {
        causes
            .iter()
            .map(|c| (c.field.clone(), c.reason.clone()))
            .collect()
    }

    #[test]
    fn validation_names_each_bad_field() {
        let good = json!({
            "target": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout"},
            "replicas": {"path": ".spec.replicas"},
            "podTemplate": {"path": ".spec.template"},
            "statusAggregation": [{"path": ".status.readyReplicas", "op": "Sum"}],
            "health": {"conditionType": "Available"},
        });
        assert_eq!(
            fields(&validate_interpreter(&interpreter(good.clone()), None)),
            vec![]
        );
        let with = |pointer: &str, v: Value| {
            let mut s = good.clone();
            *s.pointer_mut(pointer).expect("pointer") = v;
            s
        };
        let cases = [
            (
                with("/target/apiVersion", json!("apps/v1")),
                ("spec.target.apiVersion", "FieldValueInvalid"),
            ),
            (
                with("/target/apiVersion", json!("v1")),
                ("spec.target.apiVersion", "FieldValueInvalid"),
            ),
            (
                with("/target/kind", json!("")),
                ("spec.target.kind", "FieldValueRequired"),
            ),
            (
                with("/replicas/path", json!("spec.replicas")),
                ("spec.replicas.path", "FieldValueInvalid"),
            ),
            (
                with("/replicas/path", json!(".status.replicas")),
                ("spec.replicas.path", "FieldValueInvalid"),
            ),
            (
                with("/statusAggregation/0/path", json!(".status..ready")),
                ("spec.statusAggregation[0].path", "FieldValueInvalid"),
            ),
            (
                with("/statusAggregation/0/path", json!(".spec.replicas")),
                ("spec.statusAggregation[0].path", "FieldValueInvalid"),
            ),
            (
                with("/statusAggregation/0/op", json!("Average")),
                ("spec.statusAggregation[0].op", "FieldValueNotSupported"),
            ),
            (
                with("/health", json!({})),
                ("spec.health.conditionType", "FieldValueRequired"),
            ),
        ];
        for (spec, (field, reason)) in cases {
            assert_eq!(
                fields(&validate_interpreter(&interpreter(spec.clone()), None)),
                vec![(field.to_owned(), reason.to_owned())],
                "{spec}"
            );
        }
    }
}

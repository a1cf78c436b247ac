//! `v1` ResourceQuota and LimitRange: a namespace's resource bounds.

use apimachinery::JsonPointer;
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use serde_json::Value;

use super::validate::{self, NameRule, not_supported, required};
use super::{FnHooks, age_column, column, no_default};
use crate::registry::ResourceDef;
use crate::status::Cause;

fn validate_quota(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    errs.extend(validate::quantities(o, "/spec/hard", "spec.hard"));
    for (i, s) in o
        .at("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        const SCOPES: &[&str] = &[
            "BestEffort",
            "CrossNamespacePodAffinity",
            "NotBestEffort",
            "NotTerminating",
            "PriorityClass",
            "Terminating",
            "VolumeAttributesClass",
        ];
        if !s.as_str().is_some_and(|s| SCOPES.contains(&s)) {
            errs.push(not_supported(&format!("spec.scopes[{i}]"), s, SCOPES));
        }
    }
    errs
}

/// `used/hard` for the quota's resources whose names start (or not) with `limits.`,
/// sorted by name, as kubectl's REQUEST and LIMIT columns show them.
fn usage(o: &Value, limits: bool) -> Value {
    let Some(hard) = o.at("/status/hard").or(o.at("/spec/hard")) else {
        return Value::from("");
    };
    let mut names: Vec<&String> = hard
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("limits.") == limits)
        .collect();
    names.sort();
    let cell: Vec<String> = names
        .into_iter()
        .map(|k| {
            let h = hard[k.as_str()].as_str().map(str::to_string);
            let u = o
                .at("/status/used")
                .and_then(|u| u.get(k.as_str()))
                .and_then(Value::as_str)
                .unwrap_or("0");
            format!("{k}: {u}/{}", h.unwrap_or_default())
        })
        .collect();
    Value::from(cell.join(", "))
}

/// `v1` ResourceQuota: `status` subresource.
pub fn resource_quotas() -> ResourceDef {
    let mut d = ResourceDef::new(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        "resourcequota",
        true,
        FnHooks::typed::<ResourceQuota>(no_default, validate_quota),
    );
    d.short_names = &["quota"];
    d.definition = "io.k8s.api.core.v1.ResourceQuota";
    d.status_subresource = true;
    // Upstream prints AGE right after the name here.
    d.columns = vec![
        age_column(),
        column(
            "Request",
            "string",
            "Request represents a minimum amount of cpu/memory that a container may consume.",
            false,
            |o| usage(o, false),
        ),
        column(
            "Limit",
            "string",
            "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            false,
            |o| usage(o, true),
        ),
    ];
    d
}

const LIMIT_TYPES: &[&str] = &["Container", "PersistentVolumeClaim", "Pod"];

fn validate_limit_range(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    match o.at("/spec/limits").and_then(Value::as_array) {
        None => errs.push(required("spec.limits")),
        Some(limits) => {
            for (i, l) in limits.iter().enumerate() {
                let f = format!("spec.limits[{i}]");
                match l.get("type") {
                    None => errs.push(required(&format!("{f}.type"))),
                    Some(t) if !t.as_str().is_some_and(|t| LIMIT_TYPES.contains(&t)) => {
                        errs.push(not_supported(&format!("{f}.type"), t, LIMIT_TYPES))
                    }
                    Some(_) => {}
                }
                for m in [
                    "max",
                    "min",
                    "default",
                    "defaultRequest",
                    "maxLimitRequestRatio",
                ] {
                    errs.extend(validate::quantities(
                        l,
                        &format!("/{m}"),
                        &format!("{f}.{m}"),
                    ));
                }
            }
        }
    }
    errs
}

/// `v1` LimitRange.
pub fn limit_ranges() -> ResourceDef {
    let mut d = ResourceDef::new(
        "",
        "v1",
        "LimitRange",
        "limitranges",
        "limitrange",
        true,
        FnHooks::typed::<LimitRange>(no_default, validate_limit_range),
    );
    d.short_names = &["limits"];
    d.definition = "io.k8s.api.core.v1.LimitRange";
    // Upstream's LimitRange table shows the creation time itself, not an age.
    d.columns = vec![
        column(
            "Created At",
            "date",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            false,
            |o| super::str_at(o, "/metadata/creationTimestamp"),
        ),
        age_column_hidden(),
    ];
    d
}

/// An AGE column at `-o wide` only: LimitRange's table has none by default.
fn age_column_hidden() -> crate::registry::Column {
    age_column().wide()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_quota_needs_quantities_and_shows_usage() {
        let mut q = json!({"metadata": {"name": "q", "namespace": "shop"},
            "spec": {"hard": {"requests.cpu": "2", "limits.memory": "4Gi", "pods": "10"}}});
        assert!(validate_quota(&q, None).is_empty());
        q["status"] = json!({"hard": q["spec"]["hard"].clone(), "used": {"pods": "3"}});
        assert_eq!(usage(&q, false), "pods: 3/10, requests.cpu: 0/2");
        assert_eq!(usage(&q, true), "limits.memory: 0/4Gi");
        q["spec"]["hard"]["pods"] = json!("ten");
        assert_eq!(fields(&validate_quota(&q, None)), ["spec.hard[pods]"]);
    }

    #[test]
    fn a_limit_range_needs_known_types() {
        let lr = json!({"metadata": {"name": "l", "namespace": "shop"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}},
                {"type": "Node", "max": {"memory": "lots"}}]}});
        assert_eq!(
            fields(&validate_limit_range(&lr, None)),
            ["spec.limits[1].type", "spec.limits[1].max[memory]"]
        );
    }
}

//! `policy/v1` PodDisruptionBudget and `autoscaling/v2` HorizontalPodAutoscaler: the
//! availability and scaling policies a chart ships beside its workload.

use apimachinery::JsonPointer;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, column, default_at, int_at, int_column, no_default};
use crate::registry::ResourceDef;
use crate::status::Cause;

fn validate_pdb(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    let min = o.at("/spec/minAvailable");
    let max = o.at("/spec/maxUnavailable");
    if min.is_some() && max.is_some() {
        errs.push(invalid(
            "spec",
            o.get("spec").unwrap_or(&Value::Null),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    errs.extend(validate::int_or_percent(
        o,
        "/spec/minAvailable",
        "spec.minAvailable",
    ));
    errs.extend(validate::int_or_percent(
        o,
        "/spec/maxUnavailable",
        "spec.maxUnavailable",
    ));
    if let Some(sel) = o.at("/spec/selector") {
        errs.extend(validate::label_selector(sel, "spec.selector"));
    }
    if let Some(p) = o.at("/spec/unhealthyPodEvictionPolicy")
        && !matches!(p.as_str(), Some("IfHealthyBudget" | "AlwaysAllow"))
    {
        errs.push(not_supported(
            "spec.unhealthyPodEvictionPolicy",
            p,
            &["AlwaysAllow", "IfHealthyBudget"],
        ));
    }
    errs
}

fn int_or_string_cell(o: &Value, pointer: &str) -> Value {
    Value::from(match o.at(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "N/A".to_string(),
    })
}

/// `policy/v1` PodDisruptionBudget: `status` subresource.
pub fn pod_disruption_budgets() -> ResourceDef {
    let mut d = ResourceDef::new(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        true,
        FnHooks::typed::<PodDisruptionBudget>(no_default, validate_pdb),
    );
    d.short_names = &["pdb"];
    d.definition = "io.k8s.api.policy.v1.PodDisruptionBudget";
    d.status_subresource = true;
    d.tracks_generation = true;
    d.columns = vec![
        column(
            "Min Available",
            "string",
            "The minimum number of pods that must be available.",
            false,
            |o| int_or_string_cell(o, "/spec/minAvailable"),
        ),
        column(
            "Max Unavailable",
            "string",
            "The maximum number of pods that may be unavailable.",
            false,
            |o| int_or_string_cell(o, "/spec/maxUnavailable"),
        ),
        int_column(
            "Allowed Disruptions",
            "Calculated number of pods that may be disrupted at this time.",
            "/status/disruptionsAllowed",
        ),
    ];
    d
}

/// `autoscaling/v2`'s defaults (v1 objects are stored as v2 and get them too).
pub(super) fn default_hpa(o: &mut Value) {
    // The annotations v1's conversion writes are not v2's: upstream drops them from every
    // v2 object it decodes, so a v2 client cannot store them.
    if let Some(a) = o
        .at_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        for k in super::hpa_v1::convert::ROUND_TRIP {
            a.remove(k);
        }
        if a.is_empty()
            && let Some(m) = o.at_mut("/metadata").and_then(Value::as_object_mut)
        {
            m.remove("annotations");
        }
    }
    default_at(o, &["spec", "minReplicas"], json!(1));
    // No metrics: scale on CPU at 80% of requests, as the v1 API did.
    let empty = o
        .at("/spec/metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if empty && let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    // Scaling rules are filled in only when the user gave a behavior.
    if o.at("/spec/behavior").is_some_and(Value::is_object) {
        default_at(
            o,
            &["spec", "behavior", "scaleUp", "stabilizationWindowSeconds"],
            json!(0),
        );
        default_at(
            o,
            &["spec", "behavior", "scaleUp", "selectPolicy"],
            json!("Max"),
        );
        default_at(
            o,
            &["spec", "behavior", "scaleUp", "policies"],
            json!([{"type": "Pods", "value": 4, "periodSeconds": 15},
                   {"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
        default_at(
            o,
            &["spec", "behavior", "scaleDown", "selectPolicy"],
            json!("Max"),
        );
        default_at(
            o,
            &["spec", "behavior", "scaleDown", "policies"],
            json!([{"type": "Percent", "value": 100, "periodSeconds": 15}]),
        );
    }
}

const METRIC_TYPES: &[&str] = &[
    "ContainerResource",
    "External",
    "Object",
    "Pods",
    "Resource",
];

/// `autoscaling/v2`'s rules (v1 objects are checked by them once converted).
pub(super) fn validate_hpa(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    for f in ["kind", "name"] {
        if o.at(&format!("/spec/scaleTargetRef/{f}"))
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            errs.push(required(&format!("spec.scaleTargetRef.{f}")));
        }
    }
    let min = o.at("/spec/minReplicas").and_then(Value::as_i64);
    match o.at("/spec/maxReplicas") {
        None => errs.push(required("spec.maxReplicas")),
        Some(v) => match v.as_i64() {
            Some(max) if max < 1 => {
                errs.push(invalid("spec.maxReplicas", v, "must be greater than 0"))
            }
            Some(max) if min.is_some_and(|m| m > max) => errs.push(invalid(
                "spec.maxReplicas",
                v,
                "must be greater than or equal to `minReplicas`",
            )),
            _ => {}
        },
    }
    if let Some(m) = o.at("/spec/minReplicas")
        && m.as_i64().is_some_and(|n| n < 1)
    {
        errs.push(invalid(
            "spec.minReplicas",
            m,
            "must be greater than or equal to 1",
        ));
    }
    for (i, m) in o
        .at("/spec/metrics")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let ty = m.get("type").unwrap_or(&Value::Null);
        if !ty.as_str().is_some_and(|t| METRIC_TYPES.contains(&t)) {
            errs.push(not_supported(
                &format!("spec.metrics[{i}].type"),
                ty,
                METRIC_TYPES,
            ));
        }
        for source in ["resource", "containerResource"] {
            if let Some(u) = m.pointer(&format!("/{source}/target/averageUtilization"))
                && u.as_i64().is_some_and(|u| u < 1)
            {
                errs.push(invalid(
                    &format!("spec.metrics[{i}].{source}.target.averageUtilization"),
                    u,
                    "must be greater than 0",
                ));
            }
        }
    }
    for dir in ["scaleUp", "scaleDown"] {
        errs.extend(validate::min_int(
            o,
            &format!("/spec/behavior/{dir}/stabilizationWindowSeconds"),
            &format!("spec.behavior.{dir}.stabilizationWindowSeconds"),
            0,
        ));
    }
    errs
}

/// `current/target` for each metric, as kubectl prints HPA targets.
fn hpa_targets(o: &Value) -> Value {
    let metrics = o.at("/spec/metrics").and_then(Value::as_array);
    let current = o.at("/status/currentMetrics").and_then(Value::as_array);
    let mut out = Vec::new();
    for (i, m) in metrics.into_iter().flatten().enumerate() {
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        let key = match ty {
            "Resource" => "resource",
            "ContainerResource" => "containerResource",
            "Pods" => "pods",
            "Object" => "object",
            "External" => "external",
            _ => "",
        };
        let target = m.get(key).and_then(|s| s.get("target"));
        let cur = current
            .and_then(|c| c.get(i))
            .and_then(|c| c.get(key))
            .and_then(|s| s.get("current"));
        let (want, have) = match target.and_then(|t| t.get("averageUtilization")) {
            Some(u) => (
                format!("{u}%"),
                cur.and_then(|c| c.get("averageUtilization"))
                    .map(|u| format!("{u}%")),
            ),
            None => {
                let field = |v: Option<&Value>| {
                    v.and_then(|t| t.get("averageValue").or(t.get("value")))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                };
                (field(target).unwrap_or_default(), field(cur))
            }
        };
        let have = have.unwrap_or_else(|| "<unknown>".into());
        let name = if ty == "Resource" || ty == "ContainerResource" {
            m.get(key)
                .and_then(|s| s.get("name"))
                .and_then(Value::as_str)
                .map(|n| format!("{n}: "))
                .unwrap_or_default()
        } else {
            String::new()
        };
        out.push(format!("{name}{have}/{want}"));
    }
    Value::from(if out.is_empty() {
        "<none>".to_string()
    } else {
        out.join(", ")
    })
}

/// `autoscaling/v2` HorizontalPodAutoscaler: `status` subresource, category `all`. The
/// stored form, which `autoscaling/v1` also serves ([`super::hpa_v1`]).
pub fn horizontal_pod_autoscalers() -> ResourceDef {
    let mut d = ResourceDef::new(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        true,
        FnHooks::typed::<HorizontalPodAutoscaler>(default_hpa, validate_hpa),
    );
    d.short_names = &["hpa"];
    d.categories = &["all"];
    d.definition = "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler";
    d.status_subresource = true;
    d.tracks_generation = true;
    d.columns = vec![
        column(
            "Reference",
            "string",
            "The reference to the autoscaled resource.",
            false,
            // `Kind/name`, the kind as written (unlike an event's object reference).
            |o| {
                let f = |k: &str| {
                    o.at(&format!("/spec/scaleTargetRef/{k}"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                };
                Value::from(format!("{}/{}", f("kind"), f("name")))
            },
        ),
        column(
            "Targets",
            "string",
            "The target and current value for the autoscaling metrics.",
            false,
            hpa_targets,
        ),
        column(
            "MinPods",
            "string",
            "Lower limit for the number of pods that can be set by the autoscaler, default 1.",
            false,
            |o| int_at(o, "/spec/minReplicas"),
        ),
        int_column(
            "MaxPods",
            "Upper limit for the number of pods that can be set by the autoscaler.",
            "/spec/maxReplicas",
        ),
        int_column(
            "Replicas",
            "Current number of replicas of pods managed by this autoscaler.",
            "/status/currentReplicas",
        ),
    ];
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_pdb_takes_one_bound_as_a_count_or_percentage() {
        let mut pdb = json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}});
        assert!(validate_pdb(&pdb, None).is_empty());
        assert_eq!(int_or_string_cell(&pdb, "/spec/minAvailable"), "50%");
        assert_eq!(int_or_string_cell(&pdb, "/spec/maxUnavailable"), "N/A");
        pdb["spec"]["maxUnavailable"] = json!(1);
        assert_eq!(fields(&validate_pdb(&pdb, None)), ["spec"]);
        pdb["spec"].as_object_mut().unwrap().remove("minAvailable");
        pdb["spec"]["maxUnavailable"] = json!("half");
        assert_eq!(fields(&validate_pdb(&pdb, None)), ["spec.maxUnavailable"]);
    }

    #[test]
    fn an_hpa_defaults_to_cpu_and_bounds_its_replicas() {
        let mut hpa = json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "maxReplicas": 5}});
        default_hpa(&mut hpa);
        assert_eq!(hpa["spec"]["minReplicas"], 1);
        assert_eq!(
            hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert!(hpa["spec"].get("behavior").is_none());
        assert!(validate_hpa(&hpa, None).is_empty());
        // v1's round-trip annotations do not stay on a v2 object; others do.
        hpa["metadata"]["annotations"] = json!({"autoscaling.alpha.kubernetes.io/behavior": "{}"});
        default_hpa(&mut hpa);
        assert!(hpa["metadata"].get("annotations").is_none(), "{hpa}");
        hpa["metadata"]["annotations"] =
            json!({"autoscaling.alpha.kubernetes.io/metrics": "[]", "team": "web"});
        default_hpa(&mut hpa);
        assert_eq!(hpa["metadata"]["annotations"], json!({"team": "web"}));
        assert_eq!(hpa_targets(&hpa), "cpu: <unknown>/80%");
        hpa["spec"]["minReplicas"] = json!(6);
        assert_eq!(fields(&validate_hpa(&hpa, None)), ["spec.maxReplicas"]);
        hpa["spec"]["behavior"] = json!({"scaleDown": {"stabilizationWindowSeconds": 60}});
        default_hpa(&mut hpa);
        assert_eq!(
            hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
            60
        );
        assert_eq!(
            hpa["spec"]["behavior"]["scaleUp"]["policies"][0]["value"],
            4
        );
    }
}

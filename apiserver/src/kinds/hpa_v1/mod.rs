//! `autoscaling/v1` HorizontalPodAutoscaler: served over the same stored objects as
//! `autoscaling/v2`, as kube-apiserver serves it, with upstream's field mapping
//! ([`convert`]), v1's defaults and validation named in v1's fields.

pub mod convert;

use std::sync::Arc;

use apimachinery::JsonPointer;
use k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler;
use serde_json::{Value, json};

use super::FnHooks;
use super::policy::{default_hpa, horizontal_pod_autoscalers, validate_hpa};
use super::validate::invalid;
use crate::registry::{Conversion, ResourceDef};
use crate::status::Cause;

/// v1's defaults (`minReplicas` 1), then what the stored v2 object gets from v2's (the
/// CPU target at 80% when no metric is given, a behavior's missing rules), shown in v1
/// form: the object a client gets back is the one it reads later, as upstream, where
/// the v2 object read back from storage is defaulted before it is converted.
fn default_v1(o: &mut Value) {
    super::default_at(o, &["spec", "minReplicas"], json!(1));
    // An annotation that does not parse is left for validation to report.
    if !convert::annotation_errors(o).is_empty() {
        return;
    }
    let mut v2 = o.clone();
    convert::to_v2(&mut v2);
    default_hpa(&mut v2);
    convert::to_v1(&mut v2);
    *o = v2;
}

/// v2's rules over the object converted, with the CPU target's causes named by the v1
/// field; metrics from the annotation keep their v2 paths, as upstream names them.
fn validate_v1(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs: Vec<Cause> = convert::annotation_errors(o)
        .into_iter()
        .map(|(key, why)| {
            let field = format!("metadata.annotations[{key}]");
            let value = o
                .at("/metadata/annotations")
                .and_then(|a| a.get(key))
                .unwrap_or(&Value::Null);
            invalid(&field, value, why)
        })
        .collect();
    let mut v2 = o.clone();
    convert::to_v2(&mut v2);
    let old_v2 = old.map(|old| {
        let mut v = old.clone();
        convert::to_v2(&mut v);
        v
    });
    // The CPU target converts to the last metric.
    let cpu_metric = o
        .at("/spec/targetCPUUtilizationPercentage")
        .filter(|t| !t.is_null())
        .and_then(|_| v2.at("/spec/metrics").and_then(Value::as_array))
        .map(|m| format!("spec.metrics[{}]", m.len() - 1));
    for mut cause in validate_hpa(&v2, old_v2.as_ref()) {
        if let Some(prefix) = &cpu_metric
            && (cause.field == *prefix || cause.field.starts_with(&format!("{prefix}.")))
        {
            cause.field = "spec.targetCPUUtilizationPercentage".into();
        }
        errs.push(cause);
    }
    errs
}

/// `autoscaling/v1` HorizontalPodAutoscaler over the `autoscaling/v2` objects (which
/// must be registered first): `status` subresource, category `all`, the v2 table (its
/// cells read the stored form, as upstream prints both versions from one internal type).
pub fn horizontal_pod_autoscalers_v1() -> ResourceDef {
    let v2 = horizontal_pod_autoscalers();
    let mut d = ResourceDef::new(
        v2.group,
        "v1",
        v2.kind,
        v2.plural,
        v2.singular,
        true,
        FnHooks::typed::<HorizontalPodAutoscaler>(default_v1, validate_v1),
    );
    d.short_names = v2.short_names;
    d.categories = v2.categories;
    d.definition = "io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler";
    d.status_subresource = true;
    d.tracks_generation = true;
    d.conversion = Some(Arc::new(Conversion {
        stored_group: v2.group,
        stored_api_version: v2.api_version(),
        to_served: convert::to_v1,
        to_stored: convert::to_v2,
        status_annotations: convert::STATUS_ANNOTATIONS,
    }));
    d.columns = v2.columns;
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    fn hpa(spec: Value) -> Value {
        json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": spec})
    }

    const TARGET: &str = r#"{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}"#;

    fn target() -> Value {
        serde_json::from_str(TARGET).unwrap()
    }

    #[test]
    fn v1_defaults_the_minimum_and_shows_the_stored_cpu_default() {
        let mut o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 5}));
        default_v1(&mut o);
        assert_eq!(o["spec"]["minReplicas"], 1);
        // v2's default metric, seen through v1.
        assert_eq!(o["spec"]["targetCPUUtilizationPercentage"], 80);
        assert!(o["metadata"].get("annotations").is_none(), "{o}");
        assert!(validate_v1(&o, None).is_empty());
        // Defaulting again changes nothing: a re-applied manifest is unchanged.
        let again = {
            let mut a = o.clone();
            default_v1(&mut a);
            a
        };
        assert_eq!(again, o);

        // Other metrics in the annotation: no CPU default.
        let mut o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 5}));
        o["metadata"]["annotations"] = json!({convert::METRICS:
            r#"[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10"}}]"#});
        default_v1(&mut o);
        assert!(o["spec"].get("targetCPUUtilizationPercentage").is_none());
    }

    #[test]
    fn v1_causes_name_v1_fields() {
        let o = hpa(
            json!({"scaleTargetRef": {"kind": "Deployment"}, "minReplicas": 0,
            "targetCPUUtilizationPercentage": 0}),
        );
        let errs = validate_v1(&o, None);
        let got = fields(&errs);
        for want in [
            "spec.scaleTargetRef.name",
            "spec.maxReplicas",
            "spec.minReplicas",
            "spec.targetCPUUtilizationPercentage",
        ] {
            assert!(got.contains(&want), "{want} not in {got:?}");
        }
        assert!(
            !got.iter().any(|f| f.starts_with("spec.metrics")),
            "{got:?}"
        );

        let mut o = hpa(json!({"scaleTargetRef": target(), "maxReplicas": 5}));
        o["metadata"]["annotations"] = json!({convert::METRICS: "not json",
            convert::CONDITIONS: r#"[{"type":"AbleToScale","status":"True"}]"#});
        assert_eq!(
            fields(&validate_v1(&o, None)),
            ["metadata.annotations[autoscaling.alpha.kubernetes.io/metrics]"]
        );
        // A metric from the annotation keeps its v2 path, as upstream.
        o["metadata"]["annotations"] =
            json!({convert::METRICS: r#"[{"type":"Memory","resource":{"name":"memory"}}]"#});
        assert_eq!(fields(&validate_v1(&o, None)), ["spec.metrics[0].type"]);
    }

    #[test]
    fn v1_is_served_over_the_v2_objects() {
        let d = horizontal_pod_autoscalers_v1();
        let v2 = horizontal_pod_autoscalers();
        assert_eq!(d.prefix(), v2.prefix());
        assert_eq!(d.api_version(), "autoscaling/v1");
        let c = d.conversion.as_ref().unwrap();
        assert_eq!(c.stored_api_version, "autoscaling/v2");
        let names = |d: &ResourceDef| d.columns.iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(names(&d), names(&v2));
    }
}

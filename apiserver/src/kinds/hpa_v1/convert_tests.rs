//! The v1 ↔ v2 mapping: round trips both ways, and upstream's own quirks kept.

use serde_json::{Value, json};

use super::*;

/// A v2 HPA using every metric source, a behavior and a status, with the CPU
/// utilization metric last (where the v1 round trip puts it back).
fn full_v2() -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop",
            "annotations": {"team": "payments"}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 2,
            "maxReplicas": 10,
            "metrics": [
                {"type": "Pods", "pods": {
                    "metric": {"name": "qps", "selector": {"matchLabels": {"tier": "web"}}},
                    "target": {"type": "AverageValue", "averageValue": "10"}}},
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "AverageValue", "averageValue": "200Mi"}}},
                {"type": "ContainerResource", "containerResource": {"name": "cpu",
                    "container": "sidecar",
                    "target": {"type": "Utilization", "averageUtilization": 50}}},
                {"type": "Object", "object": {
                    "describedObject": {"apiVersion": "networking.k8s.io/v1",
                        "kind": "Ingress", "name": "main"},
                    "metric": {"name": "requests-per-second"},
                    "target": {"type": "Value", "value": "2k"}}},
                {"type": "External", "external": {
                    "metric": {"name": "queue", "selector": {"matchExpressions": [
                        {"key": "queue", "operator": "In", "values": ["jobs"]}]}},
                    "target": {"type": "AverageValue", "averageValue": "30"}}},
                {"type": "External", "external": {"metric": {"name": "lag"},
                    "target": {"type": "Value", "value": "100"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}},
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Min",
                    "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
                    "tolerance": "50m"},
            },
        },
        "status": {
            "observedGeneration": 3,
            "lastScaleTime": "2026-01-01T10:00:00Z",
            "currentReplicas": 4,
            "desiredReplicas": 5,
            "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageValue": "120m", "averageUtilization": 72}}},
                {"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "current": {"averageValue": "12"}}},
                {"type": "External", "external": {"metric": {"name": "lag"},
                    "current": {"value": "90", "averageValue": "22500m"}}},
                {"type": "Object", "object": {"metric": {"name": "requests-per-second"},
                    "describedObject": {"kind": "Ingress", "name": "main"},
                    "current": {"value": "1500"}}},
            ],
            "conditions": [
                {"type": "AbleToScale", "status": "True",
                    "lastTransitionTime": "2026-01-01T09:00:00Z",
                    "reason": "ReadyForNewScale", "message": "recommended size matches current size"},
                {"type": "ScalingActive", "status": "True",
                    "lastTransitionTime": "2026-01-01T09:00:00Z", "reason": "ValidMetricFound"},
            ],
        },
    })
}

fn annotation(o: &Value, key: &str) -> Value {
    let text = o["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {o}"));
    serde_json::from_str(text).unwrap()
}

#[test]
fn v2_read_and_written_back_through_v1_keeps_everything() {
    let v2 = full_v2();
    let mut v1 = v2.clone();
    to_v1(&mut v1);

    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 72);
    for gone in ["metrics", "behavior"] {
        assert!(v1["spec"].get(gone).is_none(), "{gone}: {v1}");
    }
    for gone in ["currentMetrics", "conditions"] {
        assert!(v1["status"].get(gone).is_none(), "{gone}: {v1}");
    }
    assert_eq!(v1["status"]["currentReplicas"], 4);
    assert_eq!(v1["metadata"]["annotations"]["team"], "payments");
    // The metrics v1 cannot express, in v1's shapes.
    let others = annotation(&v1, METRICS);
    assert_eq!(others.as_array().unwrap().len(), 6, "{others}");
    assert_eq!(
        others[0],
        json!({"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10",
            "selector": {"matchLabels": {"tier": "web"}}}})
    );
    assert_eq!(
        others[2],
        json!({"type": "ContainerResource", "containerResource": {"name": "cpu",
            "targetAverageUtilization": 50, "container": "sidecar"}})
    );
    assert_eq!(
        others[3]["object"],
        json!({"target": {"kind": "Ingress", "name": "main", "apiVersion": "networking.k8s.io/v1"},
            "metricName": "requests-per-second", "targetValue": "2k"})
    );
    // Upstream's text: Go field order, the behavior in the internal type's names.
    let text = v1["metadata"]["annotations"][METRICS].as_str().unwrap();
    assert!(
        text.starts_with(r#"[{"type":"Pods","pods":{"metricName":"qps","targetAverageValue":"10","selector":{"matchLabels":{"tier":"web"}}}}"#),
        "{text}"
    );
    assert_eq!(
        v1["metadata"]["annotations"][BEHAVIOR],
        concat!(
            r#"{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":"#,
            r#"[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,"PeriodSeconds":15}],"#,
            r#""Tolerance":null},"ScaleDown":{"StabilizationWindowSeconds":300,"SelectPolicy":"Min","#,
            r#""Policies":[{"Type":"Percent","Value":10,"PeriodSeconds":60}],"Tolerance":"50m"}}"#
        )
    );
    // Every current metric is kept, the CPU one too (its raw value is only there).
    let current = annotation(&v1, CURRENT_METRICS);
    assert_eq!(
        current[0],
        json!({"type": "Resource", "resource": {"name": "cpu",
            "currentAverageUtilization": 72, "currentAverageValue": "120m"}})
    );
    assert_eq!(annotation(&v1, CONDITIONS).as_array().unwrap().len(), 2);

    let mut back = v1.clone();
    to_v2(&mut back);
    assert_eq!(back, v2);
}

#[test]
fn v1_written_and_read_back_through_v2_keeps_everything() {
    let behavior = concat!(
        r#"{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":60,"SelectPolicy":null,"#,
        r#""Policies":[{"Type":"Pods","Value":1,"PeriodSeconds":30}],"Tolerance":null}}"#
    );
    let metrics =
        r#"[{"type":"External","external":{"metricName":"queue","targetAverageValue":"5"}}]"#;
    let current = r#"[{"type":"Resource","resource":{"name":"cpu","currentAverageUtilization":40,"currentAverageValue":"80m"}}]"#;
    let conditions = r#"[{"type":"AbleToScale","status":"False","lastTransitionTime":null,"reason":"FailedGetScale"}]"#;
    let v1 = json!({
        "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {
            "team": "payments", METRICS: metrics, BEHAVIOR: behavior,
            CURRENT_METRICS: current, CONDITIONS: conditions}},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 4, "targetCPUUtilizationPercentage": 70},
        "status": {"currentReplicas": 1, "desiredReplicas": 2,
            "currentCPUUtilizationPercentage": 40},
    });
    let mut v2 = v1.clone();
    to_v2(&mut v2);
    assert_eq!(
        v2["spec"]["metrics"],
        json!([
            {"type": "External", "external": {"metric": {"name": "queue"},
                "target": {"type": "AverageValue", "averageValue": "5"}}},
            {"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 70}}},
        ])
    );
    assert_eq!(
        v2["spec"]["behavior"],
        json!({"scaleDown": {"stabilizationWindowSeconds": 60,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]}})
    );
    assert_eq!(
        v2["status"]["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageValue": "80m", "averageUtilization": 40}}}])
    );
    assert_eq!(
        v2["status"]["conditions"],
        json!([{"type": "AbleToScale", "status": "False", "reason": "FailedGetScale"}])
    );
    assert_eq!(v2["metadata"]["annotations"], json!({"team": "payments"}));
    assert!(v2["spec"].get("targetCPUUtilizationPercentage").is_none());
    assert!(
        v2["status"]
            .get("currentCPUUtilizationPercentage")
            .is_none()
    );

    let mut back = v2;
    to_v1(&mut back);
    assert_eq!(back, v1);
}

#[test]
fn plain_objects_convert_without_annotations() {
    let v1 = json!({"metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3,
            "targetCPUUtilizationPercentage": 50},
        "status": {"currentReplicas": 1, "desiredReplicas": 1, "currentCPUUtilizationPercentage": 20}});
    let mut v2 = v1.clone();
    to_v2(&mut v2);
    assert_eq!(
        v2["status"]["currentMetrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "current": {"averageUtilization": 20}}}])
    );
    let mut back = v2;
    to_v1(&mut back);
    // The reading's raw value is part of the annotation once it went through v2.
    assert_eq!(
        annotation(&back, CURRENT_METRICS),
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "currentAverageUtilization": 20, "currentAverageValue": "0"}}])
    );
    back["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(back, v1);

    // Without anything to carry, no annotation appears, and none is left empty.
    let mut bare = json!({"metadata": {"name": "web", "annotations": {
            METRICS: "[]", CONDITIONS: "[]"}},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3}});
    to_v2(&mut bare);
    assert!(bare["metadata"].get("annotations").is_none(), "{bare}");
    assert!(bare["spec"].get("metrics").is_none(), "{bare}");
    assert!(bare.get("status").is_none(), "{bare}");
}

#[test]
fn upstream_quirks_are_kept() {
    // The CPU metric moves after the others; an object metric's average target gains a
    // zero value (v1's `targetValue` is not optional); both as kube-apiserver does.
    let mut v2 = json!({"spec": {"metrics": [
        {"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 60}}},
        {"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"},
            "metric": {"name": "m"}, "target": {"type": "AverageValue", "averageValue": "3"}}},
    ]}});
    to_v1(&mut v2);
    to_v2(&mut v2);
    let metrics = v2["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics[1]["resource"]["name"], "cpu");
    assert_eq!(
        metrics[0]["object"]["target"],
        json!({"type": "AverageValue", "value": "0", "averageValue": "3"})
    );

    // Round-trip annotations a v2 client set are not v1's: they are replaced.
    let mut stale = json!({"metadata": {"annotations": {BEHAVIOR: "{\"ScaleUp\":{}}"}},
        "spec": {"maxReplicas": 2}});
    to_v1(&mut stale);
    assert!(stale["metadata"].get("annotations").is_none(), "{stale}");

    // Go's decoder matches field names without regard to case; a behavior that sets
    // neither direction is none.
    let mut v1 = json!({"metadata": {"annotations": {
        BEHAVIOR: r#"{"scaleUp":{"selectPolicy":"Disabled"}}"#}}, "spec": {}});
    to_v2(&mut v1);
    assert_eq!(
        v1["spec"]["behavior"],
        json!({"scaleUp": {"selectPolicy": "Disabled"}})
    );
    let mut v1 = json!({"metadata": {"annotations": {BEHAVIOR: "{}"}}, "spec": {}});
    to_v2(&mut v1);
    assert!(v1["spec"].get("behavior").is_none());
}

#[test]
fn unreadable_annotations_are_reported() {
    let o = json!({"metadata": {"annotations": {
        METRICS: "{}", CURRENT_METRICS: "[1]", CONDITIONS: "[]", BEHAVIOR: "nonsense"}}});
    let keys: Vec<&str> = annotation_errors(&o).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [METRICS, CURRENT_METRICS]);
}

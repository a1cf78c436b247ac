//! `autoscaling/v1` HorizontalPodAutoscalers at the HTTP level: the same objects as
//! `autoscaling/v2`, written and read through either version, listed, watched, refused
//! with v1's field names, and applied server-side.

use std::sync::Arc;

use meridian_store::MemoryStore;
use serde_json::{Value, json};

use super::ApiServer;
use super::test_api::{self, Answer};
use crate::kinds::hpa_v1::convert::{BEHAVIOR, CONDITIONS, METRICS};

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const V1: &str = "/apis/autoscaling/v1/namespaces/shop/horizontalpodautoscalers";
const V2: &str = "/apis/autoscaling/v2/namespaces/shop/horizontalpodautoscalers";

struct Api(Arc<ApiServer>);

impl Api {
    /// A server over a memory store with the built-in kinds and namespace `shop`.
    async fn new() -> Self {
        let api = Api(test_api::server(Arc::new(MemoryStore::new())).await);
        let ns = api
            .send(
                "POST",
                "/api/v1/namespaces",
                JSON,
                r#"{"metadata":{"name":"shop"}}"#,
            )
            .await;
        assert_eq!(ns.code, 201, "{}", ns.body);
        api
    }

    async fn send_as(&self, method: &str, uri: &str, ct: &str, accept: &str, body: &str) -> Answer {
        test_api::send(&self.0, method, uri, ct, accept, body).await
    }

    async fn send(&self, method: &str, uri: &str, ct: &str, body: &str) -> Answer {
        self.send_as(method, uri, ct, JSON, body).await
    }

    async fn get(&self, base: &str) -> Value {
        let a = self.send("GET", &format!("{base}/web"), JSON, "").await;
        assert_eq!(a.code, 200, "GET {base}/web: {}", a.body);
        a.body
    }
}

fn annotation(o: &Value, key: &str) -> Value {
    let text = o["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {o}"));
    serde_json::from_str(text).expect("annotation JSON")
}

const V1_HPA: &str = r#"{"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "web"},
    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}}"#;

#[tokio::test]
async fn one_object_through_both_versions() {
    let api = Api::new().await;
    let created = api.send("POST", V1, JSON, V1_HPA).await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["apiVersion"], "autoscaling/v1");
    assert_eq!(created.body["spec"]["minReplicas"], 1);
    assert_eq!(created.body["spec"]["targetCPUUtilizationPercentage"], 70);

    let v2 = api.get(V2).await;
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 70}}}])
    );
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");

    // What only v2 can say: a second metric and a behavior.
    let patch = json!({"spec": {
        "metrics": [
            {"type": "Pods", "pods": {"metric": {"name": "qps"},
                "target": {"type": "AverageValue", "averageValue": "10"}}},
            {"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 70}}},
        ],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
    }});
    let patched = api
        .send("PATCH", &format!("{V2}/web"), MERGE, &patch.to_string())
        .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    let v2 = patched.body;

    let v1 = api.get(V1).await;
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
    assert!(v1["spec"].get("metrics").is_none(), "{v1}");
    assert_eq!(annotation(&v1, METRICS)[0]["pods"]["metricName"], "qps");
    assert_eq!(
        annotation(&v1, BEHAVIOR)["ScaleDown"]["StabilizationWindowSeconds"],
        60
    );

    // Read through v1, changed and written back whole (as `kubectl edit` does): the v2
    // parts come through.
    let mut edited = v1.clone();
    edited["spec"]["maxReplicas"] = json!(8);
    let put = api
        .send("PUT", &format!("{V1}/web"), JSON, &edited.to_string())
        .await;
    assert_eq!(put.code, 200, "{}", put.body);
    let after = api.get(V2).await;
    assert_eq!(after["spec"]["maxReplicas"], 8);
    assert_eq!(after["spec"]["metrics"], v2["spec"]["metrics"]);
    assert_eq!(after["spec"]["behavior"], v2["spec"]["behavior"]);
    assert_eq!(after["metadata"]["generation"], 3);

    // The table is v2's, whichever version asks.
    for base in [V1, V2] {
        let t = api
            .send_as("GET", &format!("{base}/web"), JSON, TABLE, "")
            .await;
        assert_eq!(t.code, 200, "{}", t.body);
        let names: Vec<&str> = t.body["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Reference",
                "Targets",
                "MinPods",
                "MaxPods",
                "Replicas",
                "Age"
            ]
        );
        assert_eq!(
            t.body["rows"][0]["cells"][2],
            "<unknown>/10, cpu: <unknown>/70%"
        );
    }
    let t = api
        .send_as(
            "GET",
            &format!("{V1}?includeObject=Object"),
            JSON,
            TABLE,
            "",
        )
        .await;
    assert_eq!(
        t.body["rows"][0]["object"]["apiVersion"], "autoscaling/v1",
        "{}",
        t.body
    );
}

#[tokio::test]
async fn status_travels_with_the_status_writes() {
    let api = Api::new().await;
    assert_eq!(api.send("POST", V1, JSON, V1_HPA).await.code, 201);
    let status = |reason: &str, utilization: i64| {
        json!({"status": {"currentReplicas": 2, "desiredReplicas": 3,
            "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": utilization, "averageValue": "150m"}}}],
            "conditions": [{"type": "AbleToScale", "status": "True", "reason": reason,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
        .to_string()
    };
    let s = api
        .send(
            "PATCH",
            &format!("{V2}/web/status"),
            MERGE,
            &status("First", 90),
        )
        .await;
    assert_eq!(s.code, 200, "{}", s.body);

    let v1 = api.get(V1).await;
    assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 90);
    assert_eq!(v1["status"]["desiredReplicas"], 3);
    assert_eq!(annotation(&v1, CONDITIONS)[0]["reason"], "First");

    // The status moves on; a client then writes back the v1 object it read before.
    let s = api
        .send(
            "PATCH",
            &format!("{V2}/web/status"),
            MERGE,
            &status("Second", 95),
        )
        .await;
    assert_eq!(s.code, 200, "{}", s.body);
    let mut stale = v1.clone();
    stale["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    stale["spec"]["minReplicas"] = json!(2);
    let put = api
        .send("PUT", &format!("{V1}/web"), JSON, &stale.to_string())
        .await;
    assert_eq!(put.code, 200, "{}", put.body);
    let v2 = api.get(V2).await;
    assert_eq!(v2["spec"]["minReplicas"], 2);
    assert_eq!(v2["status"]["conditions"][0]["reason"], "Second", "{v2}");
    assert_eq!(
        v2["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"],
        95
    );

    // Through v1's /status, the status annotations are the client's.
    let mut v1 = api.get(V1).await;
    v1["status"]["currentReplicas"] = json!(3);
    v1["metadata"]["annotations"][CONDITIONS] = Value::from(
        json!([{"type": "ScalingActive", "status": "False", "reason": "Third"}]).to_string(),
    );
    let put = api
        .send("PUT", &format!("{V1}/web/status"), JSON, &v1.to_string())
        .await;
    assert_eq!(put.code, 200, "{}", put.body);
    let v2 = api.get(V2).await;
    assert_eq!(v2["status"]["currentReplicas"], 3);
    assert_eq!(
        v2["status"]["conditions"],
        json!([{"type": "ScalingActive", "status": "False", "reason": "Third"}])
    );
}

#[tokio::test]
async fn v1_lists_and_watches_v1_objects() {
    let api = Api::new().await;
    assert_eq!(api.send("POST", V1, JSON, V1_HPA).await.code, 201);
    let list = api.send("GET", V1, JSON, "").await;
    assert_eq!(list.code, 200, "{}", list.body);
    assert_eq!(list.body["kind"], "HorizontalPodAutoscalerList");
    assert_eq!(list.body["apiVersion"], "autoscaling/v1");
    let item = &list.body["items"][0];
    assert_eq!(item["apiVersion"], "autoscaling/v1");
    assert_eq!(item["spec"]["targetCPUUtilizationPercentage"], 70);
    let rv = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // A change made through v2 reaches a v1 watcher in v1 form.
    let patch = json!({"spec": {"metrics": [{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": 55}}}]}});
    let patched = api
        .send("PATCH", &format!("{V2}/web"), MERGE, &patch.to_string())
        .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    let watch = api
        .send(
            "GET",
            &format!("{V1}?watch=true&resourceVersion={rv}&timeoutSeconds=1"),
            JSON,
            "",
        )
        .await;
    let events: Vec<Value> = String::from_utf8_lossy(&watch.raw)
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    let modified = events
        .iter()
        .find(|e| e["type"] == "MODIFIED")
        .unwrap_or_else(|| panic!("no MODIFIED event in {events:?}"));
    assert_eq!(modified["object"]["apiVersion"], "autoscaling/v1");
    assert_eq!(
        modified["object"]["spec"]["targetCPUUtilizationPercentage"],
        55
    );
}

#[tokio::test]
async fn a_bad_v1_object_is_refused_naming_v1_fields() {
    let api = Api::new().await;
    let bad = r#"{"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 5, "targetCPUUtilizationPercentage": 0}}"#;
    let a = api.send("POST", V1, JSON, bad).await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(
        a.body["details"]["causes"][0]["field"],
        "spec.targetCPUUtilizationPercentage"
    );
    let message = a.body["message"].as_str().unwrap();
    assert!(
        message.starts_with("HorizontalPodAutoscaler.autoscaling \"web\" is invalid: spec.targetCPUUtilizationPercentage: Invalid value: 0"),
        "{message}"
    );
    let none = api.send("GET", &format!("{V2}/web"), JSON, "").await;
    assert_eq!(none.code, 404, "nothing is written: {}", none.body);
}

#[tokio::test]
async fn server_side_apply_through_v1() {
    let api = Api::new().await;
    let config = |cpu: i64| {
        format!(
            "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: web\nspec:\n  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n  maxReplicas: 5\n  targetCPUUtilizationPercentage: {cpu}\n"
        )
    };
    let uri = |manager: &str, force: bool| format!("{V1}/web?fieldManager={manager}&force={force}");
    let created = api
        .send("PATCH", &uri("ops", false), APPLY, &config(60))
        .await;
    assert_eq!(created.code, 201, "{}", created.body);
    let entries = created.body["metadata"]["managedFields"]
        .as_array()
        .unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["manager"], "ops");
    assert_eq!(entries[0]["apiVersion"], "autoscaling/v1");
    assert!(
        entries[0]["fieldsV1"]["f:spec"]
            .get("f:targetCPUUtilizationPercentage")
            .is_some(),
        "{entries:?}"
    );

    // Applying the same again changes nothing.
    let again = api
        .send("PATCH", &uri("ops", false), APPLY, &config(60))
        .await;
    assert_eq!(again.code, 200, "{}", again.body);
    assert_eq!(
        again.body["metadata"]["resourceVersion"],
        created.body["metadata"]["resourceVersion"]
    );

    let conflict = api
        .send("PATCH", &uri("other", false), APPLY, &config(75))
        .await;
    assert_eq!(conflict.code, 409, "{}", conflict.body);
    assert_eq!(
        conflict.body["details"]["causes"][0]["field"],
        ".spec.targetCPUUtilizationPercentage"
    );
    let forced = api
        .send("PATCH", &uri("other", true), APPLY, &config(75))
        .await;
    assert_eq!(forced.code, 200, "{}", forced.body);
    let v2 = api.get(V2).await;
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        75
    );
}

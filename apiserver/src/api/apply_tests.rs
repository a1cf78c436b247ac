//! Server-side apply and `managedFields` at the HTTP level: requests as kubectl and
//! client-go send them, answers (codes, `Status` bodies, stored objects) as
//! kube-apiserver gives them.

use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use meridian_store::MemoryStore;
use serde_json::{Value, json};

use super::ApiServer;
use crate::auth::{TokenAuthenticator, UserInfo};
use crate::metrics::Metrics;
use crate::registry::Registry;

const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";
const JSON: &str = "application/json";
const KUBECTL: &str = "kubectl/v1.37.0 (linux/amd64) kubernetes/abcdef0";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/shop/deployments";

struct Api(Arc<ApiServer>);

struct Answer {
    code: u16,
    body: Value,
}

impl Api {
    /// A server over a memory store with the built-in kinds and namespace `shop`.
    async fn new() -> Self {
        let registry = Registry::new(crate::kinds::builtin());
        let store = Arc::new(MemoryStore::new());
        let engine = crate::server::build_engine(registry, store, 100)
            .await
            .expect("engine");
        let api = crate::server::api_server(
            engine,
            TokenAuthenticator::default(),
            "127.0.0.1:6443".into(),
            Arc::new(Metrics::default()),
        );
        let api = Api(api);
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

    async fn send(&self, method: &str, uri: &str, content_type: &str, body: &str) -> Answer {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .header("user-agent", KUBECTL)
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let user = UserInfo {
            name: "admin".into(),
            uid: String::new(),
            groups: vec!["system:masters".into()],
        };
        let resp = self.0.clone().handle(req, Some(user)).await;
        let code = resp.status().as_u16();
        let raw = resp.into_body().collect().await.expect("body").to_bytes();
        let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Answer { code, body }
    }

    async fn apply(&self, manager: &str, query: &str, config: &str) -> Answer {
        let uri = format!("{DEPLOYS}/web?fieldManager={manager}{query}");
        self.send("PATCH", &uri, APPLY, config).await
    }

    async fn get(&self) -> Answer {
        self.send("GET", &format!("{DEPLOYS}/web"), JSON, "").await
    }
}

/// A Deployment apply configuration with `replicas` and extra labels.
fn config(replicas: Option<i64>, labels: &[(&str, &str)]) -> String {
    let mut labels_map = serde_json::Map::new();
    labels_map.insert("app".into(), json!("web"));
    for (k, v) in labels {
        labels_map.insert((*k).into(), json!(v));
    }
    let mut spec = json!({
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}},
    });
    if let Some(r) = replicas {
        spec["replicas"] = json!(r);
    }
    // YAML: JSON is YAML too, but kubectl sends block YAML; send that.
    let obj = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": labels_map},
        "spec": spec,
    });
    serde_yaml_ng::to_string(&obj).expect("yaml")
}

/// `(manager, operation, subresource)` of each managedFields entry.
fn owners(obj: &Value) -> Vec<(String, String, String)> {
    let entries = obj["metadata"]["managedFields"].as_array().cloned();
    entries
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("manager"), s("operation"), s("subresource"))
        })
        .collect()
}

/// The entry of `manager`.
fn entry<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    let entries = obj["metadata"]["managedFields"].as_array();
    let found = entries.and_then(|a| a.iter().find(|e| e["manager"] == manager));
    found.unwrap_or_else(|| panic!("no entry of {manager}: {obj}"))
}

#[tokio::test]
async fn apply_creates_and_a_second_identical_apply_changes_nothing() {
    let api = Api::new().await;
    let created = api.apply("alice", "", &config(Some(2), &[])).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let obj = &created.body;
    assert_eq!(obj["spec"]["replicas"], 2);
    assert_eq!(
        owners(obj),
        [("alice".into(), "Apply".into(), String::new())]
    );
    let alice = entry(obj, "alice");
    assert_eq!(alice["apiVersion"], "apps/v1");
    assert_eq!(alice["fieldsType"], "FieldsV1");
    assert!(alice["time"].is_string(), "{alice}");
    let fields = &alice["fieldsV1"];
    assert_eq!(fields["f:spec"]["f:replicas"], json!({}), "{fields}");
    assert!(
        fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"]["f:image"]
            .is_object(),
        "containers are a map keyed by name: {fields}"
    );
    // Defaults the server filled are nobody's.
    assert!(fields["f:spec"].get("f:strategy").is_none(), "{fields}");

    let again = api.apply("alice", "", &config(Some(2), &[])).await;
    assert_eq!(again.code, 200, "{}", again.body);
    assert_eq!(
        again.body["metadata"]["resourceVersion"], obj["metadata"]["resourceVersion"],
        "a no-op apply leaves the resourceVersion"
    );
    assert_eq!(
        again.body["metadata"]["managedFields"],
        obj["metadata"]["managedFields"]
    );
}

#[tokio::test]
async fn a_conflict_is_409_naming_manager_and_field_until_forced() {
    let api = Api::new().await;
    assert_eq!(
        api.apply("alice", "", &config(Some(2), &[])).await.code,
        201
    );
    let clash = api.apply("bob", "", &config(Some(3), &[])).await;
    assert_eq!(clash.code, 409, "{}", clash.body);
    assert_eq!(
        clash.body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas",
            "reason": "Conflict",
            "details": {"causes": [{
                "reason": "FieldManagerConflict",
                "message": "conflict with \"alice\"",
                "field": ".spec.replicas",
            }]},
            "code": 409,
        })
    );
    assert_eq!(
        api.get().await.body["spec"]["replicas"],
        2,
        "nothing written"
    );

    let forced = api.apply("bob", "&force=true", &config(Some(3), &[])).await;
    assert_eq!(forced.code, 200, "{}", forced.body);
    assert_eq!(forced.body["spec"]["replicas"], 3);
    let alice = &entry(&forced.body, "alice")["fieldsV1"];
    assert!(alice["f:spec"].get("f:replicas").is_none(), "{alice}");
    let bob = &entry(&forced.body, "bob")["fieldsV1"];
    assert!(bob["f:spec"].get("f:replicas").is_some(), "{bob}");
    // Both applied the same image: shared, no conflict, both own it.
    assert!(alice["f:spec"]["f:template"].is_object(), "{alice}");
}

#[tokio::test]
async fn a_field_its_only_applier_drops_goes_a_shared_one_stays() {
    let api = Api::new().await;
    let both = [("tier", "front"), ("team", "shop")];
    assert_eq!(
        api.apply("alice", "", &config(Some(2), &both)).await.code,
        201
    );
    // bob applies the same `team` label: shared ownership.
    let bob = api
        .apply("bob", "", &config(None, &[("team", "shop")]))
        .await;
    assert_eq!(bob.code, 200, "{}", bob.body);
    let dropped = api.apply("alice", "", &config(Some(2), &[])).await;
    assert_eq!(dropped.code, 200, "{}", dropped.body);
    let labels = &dropped.body["metadata"]["labels"];
    assert!(
        labels.get("tier").is_none(),
        "alice's own label removed: {labels}"
    );
    assert_eq!(labels["team"], "shop", "bob still applies it: {labels}");
}

#[tokio::test]
async fn apply_to_status_is_recorded_under_the_status_subresource() {
    let api = Api::new().await;
    assert_eq!(
        api.apply("alice", "", &config(Some(2), &[])).await.code,
        201
    );
    let status = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nstatus:\n  replicas: 2\n  observedGeneration: 1\n";
    let uri = format!("{DEPLOYS}/web/status?fieldManager=ctrl");
    let w = api.send("PATCH", &uri, APPLY, status).await;
    assert_eq!(w.code, 200, "{}", w.body);
    assert_eq!(w.body["status"]["replicas"], 2);
    let ctrl = entry(&w.body, "ctrl");
    assert_eq!(ctrl["subresource"], "status");
    assert_eq!(ctrl["operation"], "Apply");
    assert!(ctrl["fieldsV1"].get("f:spec").is_none(), "{ctrl}");

    // The main resource resets status: an apply there does not take it over.
    let main = api
        .apply("alice", "&force=true", &config(Some(2), &[]))
        .await;
    assert_eq!(main.body["status"]["replicas"], 2, "{}", main.body);
}

#[tokio::test]
async fn a_dry_run_apply_stores_nothing() {
    let api = Api::new().await;
    let dry = api
        .apply("alice", "&dryRun=All", &config(Some(2), &[]))
        .await;
    assert_eq!(dry.code, 201, "{}", dry.body);
    assert_eq!(dry.body["spec"]["replicas"], 2);
    assert_eq!(owners(&dry.body).len(), 1);
    assert_eq!(api.get().await.code, 404);

    assert_eq!(
        api.apply("alice", "", &config(Some(2), &[])).await.code,
        201
    );
    let dry = api
        .apply("alice", "&dryRun=All", &config(Some(5), &[]))
        .await;
    assert_eq!(dry.body["spec"]["replicas"], 5);
    assert_eq!(api.get().await.body["spec"]["replicas"], 2);
}

#[tokio::test]
async fn bad_applies_answer_as_upstream() {
    let api = Api::new().await;
    let uri = format!("{DEPLOYS}/web");
    let body = config(Some(2), &[]);

    let no_manager = api.send("PATCH", &uri, APPLY, &body).await;
    assert_eq!(no_manager.code, 422, "{}", no_manager.body);
    assert_eq!(
        no_manager.body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(
        no_manager.body["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );

    let forced_merge = format!("{uri}?force=true");
    let merge = api.send("PATCH", &forced_merge, MERGE, "{}").await;
    assert_eq!(merge.code, 422, "{}", merge.body);
    assert_eq!(
        merge.body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );

    let cbor = format!("{uri}?fieldManager=a");
    let cbor = api
        .send("PATCH", &cbor, "application/apply-patch+cbor", "")
        .await;
    assert_eq!(cbor.code, 415, "{}", cbor.body);
    assert_eq!(cbor.body["reason"], "UnsupportedMediaType");

    let long = "m".repeat(129);
    let too_long = api.apply(&long, "", &body).await;
    assert_eq!(too_long.code, 422, "{}", too_long.body);
    assert_eq!(
        too_long.body["details"]["causes"][0]["field"],
        "fieldManager"
    );

    let with_mf =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  managedFields: []\n";
    let mf = api.apply("a", "", with_mf).await;
    assert_eq!(mf.code, 400, "{}", mf.body);
    assert_eq!(mf.body["message"], "metadata.managedFields must be nil");

    let wrong_kind = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n";
    let wk = api.apply("a", "", wrong_kind).await;
    assert_eq!(wk.code, 400, "{}", wk.body);
    assert_eq!(
        wk.body["message"],
        "invalid object type: /v1, Kind=ConfigMap"
    );

    let bad_type =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: [1]\n";
    let bt = api.apply("a", "", bad_type).await;
    assert_eq!(bt.code, 422, "{}", bt.body);
    assert_eq!(bt.body["details"]["causes"][0]["field"], ".spec.replicas");

    let other_name = body.replace("name: web", "name: other");
    let on = api.apply("a", "", &other_name).await;
    assert_eq!(on.code, 400, "{}", on.body);

    let not_yaml = api.apply("a", "", "{: [").await;
    assert_eq!(not_yaml.code, 400, "{}", not_yaml.body);
    assert_eq!(
        api.get().await.code,
        404,
        "nothing created by a refused apply"
    );
}

#[tokio::test]
async fn every_write_records_its_manager() {
    let api = Api::new().await;
    let create = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
    });
    // The manager from the User-Agent: `kubectl/v1.37.0 ...` records `kubectl`.
    let c = api.send("POST", DEPLOYS, JSON, &create.to_string()).await;
    assert_eq!(c.code, 201, "{}", c.body);
    assert_eq!(
        owners(&c.body),
        [("kubectl".into(), "Update".into(), String::new())]
    );
    assert!(entry(&c.body, "kubectl")["fieldsV1"]["f:spec"]["f:replicas"].is_object());

    let label = format!("{DEPLOYS}/web?fieldManager=kubectl-label");
    let patch = r#"{"metadata":{"labels":{"tier":"front"}}}"#;
    let l = api.send("PATCH", &label, MERGE, patch).await;
    assert_eq!(l.code, 200, "{}", l.body);
    let lab = &entry(&l.body, "kubectl-label")["fieldsV1"];
    assert_eq!(lab, &json!({"f:metadata": {"f:labels": {"f:tier": {}}}}));

    // A read-modify-write that sends the entries back unchanged keeps them.
    let mut edited = l.body.clone();
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    let edit = format!("{DEPLOYS}/web?fieldManager=kubectl-edit");
    let e = api.send("PUT", &edit, JSON, &edited.to_string()).await;
    assert_eq!(e.code, 200, "{}", e.body);
    let mut managers: Vec<String> = owners(&e.body).into_iter().map(|o| o.0).collect();
    managers.sort();
    assert_eq!(managers, ["kubectl", "kubectl-edit", "kubectl-label"]);

    let scale = format!("{DEPLOYS}/web/scale?fieldManager=kubectl-scale");
    let s = api
        .send("PATCH", &scale, MERGE, r#"{"spec":{"replicas":4}}"#)
        .await;
    assert_eq!(s.code, 200, "{}", s.body);
    let obj = api.get().await.body;
    let sc = entry(&obj, "kubectl-scale");
    assert_eq!(sc["subresource"], "scale");
    assert_eq!(sc["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    let first = &entry(&obj, "kubectl")["fieldsV1"];
    assert!(
        first["f:spec"].get("f:replicas").is_none(),
        "scale took it: {first}"
    );

    // A later apply by another manager conflicts with the updater, named with its version.
    let clash = api.apply("alice", "", &config(Some(9), &[])).await;
    assert_eq!(clash.code, 409, "{}", clash.body);
    let causes = clash.body["details"]["causes"].as_array().cloned();
    let replicas = causes
        .unwrap_or_default()
        .into_iter()
        .find(|c| c["field"] == ".spec.replicas");
    let replicas = replicas.expect("a cause for .spec.replicas");
    let expected = "conflict with \"kubectl-scale\" with subresource \"scale\" using apps/v1";
    assert_eq!(replicas["message"], expected);
}

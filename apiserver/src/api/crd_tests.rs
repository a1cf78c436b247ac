//! CustomResourceDefinitions at the HTTP level: a definition served at once (discovery,
//! OpenAPI), its objects validated, pruned and defaulted, its printer columns, its
//! kinds served again after a restart, and its objects deleted with it.

use std::sync::Arc;
use std::time::Duration;

use meridian_store::{MemoryStore, Storage};
use serde_json::{Value, json};

use super::ApiServer;
use super::test_api::{self, Answer};

const JSON: &str = "application/json";
const APPLY: &str = "application/apply-patch+yaml";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/shop/widgets";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

struct Api(Arc<ApiServer>);

impl Api {
    async fn over(store: Arc<dyn Storage>) -> Self {
        Api(test_api::server(store).await)
    }

    async fn send_as(&self, method: &str, uri: &str, ct: &str, accept: &str, body: &str) -> Answer {
        test_api::send(&self.0, method, uri, ct, accept, body).await
    }

    async fn send(&self, method: &str, uri: &str, body: &str) -> Answer {
        self.send_as(method, uri, JSON, JSON, body).await
    }

    /// Polls `uri` until `pred` holds on the answer, for at most five seconds.
    async fn until(&self, uri: &str, pred: impl Fn(&Answer) -> bool) -> Answer {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let a = self.send("GET", uri, "").await;
            if pred(&a) {
                return a;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{uri}: condition not met in time; last answer {} {}",
                a.code,
                a.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn widget_crd() -> Value {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "description": "What a widget should be.",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "description": "The image to run."},
                    "size": {"type": "integer", "maximum": 10},
                    "replicas": {"type": "integer", "default": 1},
                    "limits": {
                        "type": "object",
                        "x-kubernetes-validations": [{"rule": "self.min <= self.max"}],
                        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}
                    }
                }
            },
            "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}
        }
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Image", "type": "string", "jsonPath": ".spec.image"},
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}
                ]
            }]
        }
    })
}

fn condition(crd: &Value, t: &str) -> Option<String> {
    crd["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

async fn setup(store: Arc<dyn Storage>) -> Api {
    let api = Api::over(store).await;
    let ns = api
        .send(
            "POST",
            "/api/v1/namespaces",
            r#"{"metadata":{"name":"shop"}}"#,
        )
        .await;
    assert_eq!(ns.code, 201, "{}", ns.body);
    let created = api.send("POST", CRDS, &widget_crd().to_string()).await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert!(
        created.body["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("customresourcecleanup.apiextensions.k8s.io"))
    );
    api.until(&format!("{CRDS}/widgets.example.com"), |a| {
        condition(&a.body, "Established").as_deref() == Some("True")
    })
    .await;
    api
}

#[tokio::test]
async fn a_definition_is_served_at_once_and_its_objects_follow_its_schema() {
    let api = setup(Arc::new(MemoryStore::new())).await;
    let crd = api
        .send("GET", &format!("{CRDS}/widgets.example.com"), "")
        .await;
    assert_eq!(
        condition(&crd.body, "NamesAccepted").as_deref(),
        Some("True")
    );
    assert_eq!(crd.body["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd.body["status"]["storedVersions"], json!(["v1"]));

    // Discovery.
    let groups = api.send("GET", "/apis", "").await;
    assert!(contains(&groups.raw, b"example.com"));
    let resources = api.send("GET", "/apis/example.com/v1", "").await;
    assert_eq!(resources.code, 200);
    let widgets = &resources.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets")
        .cloned()
        .expect("widgets listed");
    assert_eq!(widgets["shortNames"], json!(["wd"]));
    assert_eq!(widgets["namespaced"], true);

    // OpenAPI v2 (JSON and protobuf) and v3 describe the kind.
    let v2 = api.send("GET", "/openapi/v2", "").await;
    assert_eq!(
        v2.body["definitions"]["com.example.v1.Widget"]["properties"]["spec"]["properties"]["image"]
            ["description"],
        "The image to run."
    );
    let proto = api
        .send_as(
            "GET",
            "/openapi/v2",
            JSON,
            crate::openapi::proto_v2::ACCEPT,
            "",
        )
        .await;
    assert_eq!(proto.code, 200);
    assert!(contains(&proto.raw, b"com.example.v1.Widget"));
    let v3 = api.send("GET", "/openapi/v3/apis/example.com/v1", "").await;
    assert_eq!(v3.code, 200);
    assert!(v3.body["components"]["schemas"]["com.example.v1.Widget"].is_object());

    // A valid object: unknown fields pruned (with a warning), defaults filled.
    let ok = api
        .send(
            "POST",
            WIDGETS,
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"nginx","size":3,"bogus":true}}"#,
        )
        .await;
    assert_eq!(ok.code, 201, "{}", ok.body);
    assert_eq!(ok.body["spec"]["replicas"], 1);
    assert!(ok.body["spec"].get("bogus").is_none());
    assert_eq!(ok.body["metadata"]["generation"], 1);

    // Invalid objects: 422 naming the field as kube-apiserver does.
    let bad = api
        .send(
            "POST",
            WIDGETS,
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"b"},"spec":{"image":"nginx","size":20}}"#,
        )
        .await;
    assert_eq!(bad.code, 422, "{}", bad.body);
    assert_eq!(bad.body["details"]["causes"][0]["field"], "spec.size");
    assert_eq!(
        bad.body["message"],
        "Widget.example.com \"b\" is invalid: spec.size: Invalid value: 20: spec.size in body should be less than or equal to 10"
    );
    let ruled = api
        .send(
            "POST",
            WIDGETS,
            r#"{"metadata":{"name":"c"},"spec":{"image":"nginx","limits":{"min":3,"max":2}}}"#,
        )
        .await;
    assert_eq!(ruled.code, 422, "{}", ruled.body);
    assert_eq!(ruled.body["details"]["causes"][0]["field"], "spec.limits");
    assert_eq!(
        ruled.body["details"]["causes"][0]["message"],
        "Invalid value: \"object\": failed rule: self.min <= self.max"
    );
    // The rule holds: stored.
    let held = api
        .send(
            "POST",
            WIDGETS,
            r#"{"metadata":{"name":"e"},"spec":{"image":"nginx","limits":{"min":1,"max":2}}}"#,
        )
        .await;
    assert_eq!(held.code, 201, "{}", held.body);

    // Printer columns.
    let table = api.send_as("GET", WIDGETS, JSON, TABLE, "").await;
    let names: Vec<&str> = table.body["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Image", "Replicas"]);
    assert_eq!(table.body["rows"][0]["cells"], json!(["a", "nginx", 1]));
    assert_eq!(table.body["rows"].as_array().unwrap().len(), 2);

    // A custom object is replaced only at a named resourceVersion, as upstream.
    let put = api
        .send(
            "PUT",
            &format!("{WIDGETS}/a"),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"redis"}}"#,
        )
        .await;
    assert_eq!(put.code, 422, "{}", put.body);

    // The status subresource.
    let status = api
        .send_as(
            "PATCH",
            &format!("{WIDGETS}/a/status"),
            "application/merge-patch+json",
            JSON,
            r#"{"status":{"replicas":1}}"#,
        )
        .await;
    assert_eq!(status.code, 200, "{}", status.body);
    assert_eq!(status.body["status"]["replicas"], 1);

    // Server-side apply records managedFields on custom objects.
    let applied = api
        .send_as(
            "PATCH",
            &format!("{WIDGETS}/d?fieldManager=tester"),
            APPLY,
            JSON,
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: d\nspec:\n  image: redis\n",
        )
        .await;
    assert_eq!(applied.code, 201, "{}", applied.body);
    assert_eq!(
        applied.body["metadata"]["managedFields"][0]["manager"],
        "tester"
    );
}

#[tokio::test]
async fn definitions_are_served_again_after_a_restart_and_deleting_one_deletes_its_objects() {
    let store: Arc<dyn Storage> = Arc::new(MemoryStore::new());
    let api = setup(store.clone()).await;
    let ok = api
        .send(
            "POST",
            WIDGETS,
            r#"{"metadata":{"name":"a"},"spec":{"image":"nginx"}}"#,
        )
        .await;
    assert_eq!(ok.code, 201, "{}", ok.body);
    drop(api);

    // A new server over the same store serves the kind before it loads the object.
    let api = Api::over(store.clone()).await;
    let list = api.send("GET", WIDGETS, "").await;
    assert_eq!(list.code, 200, "{}", list.body);
    assert_eq!(list.body["items"][0]["metadata"]["name"], "a");

    let del = api
        .send("DELETE", &format!("{CRDS}/widgets.example.com"), "")
        .await;
    assert_eq!(del.code, 200, "{}", del.body);
    api.until(&format!("{CRDS}/widgets.example.com"), |a| a.code == 404)
        .await;
    api.until("/apis/example.com/v1", |a| a.code == 404).await;
    let left = store.list("/example.com/").await.expect("list");
    assert!(left.items.is_empty(), "objects left: {}", left.items.len());
}

/// A definition serving two versions with `conversion: None`: one stored object, read and
/// written through either version, always says the version it was asked through (as
/// kube-apiserver's no-op converter does), and is stored at the storage version.
#[tokio::test]
async fn every_served_version_reads_and_writes_the_same_objects() {
    let store: Arc<dyn Storage> = Arc::new(MemoryStore::new());
    let api = setup(store.clone()).await;
    let mut crd = api
        .send("GET", &format!("{CRDS}/widgets.example.com"), "")
        .await
        .body;
    let mut beta = crd["spec"]["versions"][0].clone();
    beta["name"] = "v1beta1".into();
    beta["storage"] = false.into();
    crd["spec"]["versions"]
        .as_array_mut()
        .expect("versions")
        .push(beta);
    let updated = api
        .send(
            "PUT",
            &format!("{CRDS}/widgets.example.com"),
            &crd.to_string(),
        )
        .await;
    assert_eq!(updated.code, 200, "{}", updated.body);
    let beta_widgets = "/apis/example.com/v1beta1/namespaces/shop/widgets";
    api.until(beta_widgets, |a| a.code == 200).await;

    let made = api
        .send(
            "POST",
            beta_widgets,
            r#"{"apiVersion":"example.com/v1beta1","kind":"Widget","metadata":{"name":"w"},"spec":{"image":"nginx"}}"#,
        )
        .await;
    assert_eq!(made.code, 201, "{}", made.body);
    assert_eq!(made.body["apiVersion"], "example.com/v1beta1");
    let stored = store
        .get("/example.com/widgets/shop/w")
        .await
        .expect("read")
        .expect("stored");
    let stored: Value = serde_json::from_slice(&stored.value).expect("json");
    assert_eq!(
        stored["apiVersion"], "example.com/v1",
        "stored at the storage version"
    );

    for (path, version) in [(WIDGETS, "v1"), (beta_widgets, "v1beta1")] {
        let want = format!("example.com/{version}");
        let got = api.send("GET", &format!("{path}/w"), "").await;
        assert_eq!(got.code, 200, "{}", got.body);
        assert_eq!(
            got.body["apiVersion"],
            want.as_str(),
            "GET through {version}"
        );
        let list = api.send("GET", path, "").await;
        assert_eq!(
            list.body["apiVersion"],
            want.as_str(),
            "LIST through {version}"
        );
        assert_eq!(list.body["items"][0]["apiVersion"], want.as_str());
        let patched = api
            .send_as(
                "PATCH",
                &format!("{path}/w"),
                "application/merge-patch+json",
                JSON,
                r#"{"spec":{"size":3}}"#,
            )
            .await;
        assert_eq!(patched.code, 200, "{}", patched.body);
        assert_eq!(
            patched.body["apiVersion"],
            want.as_str(),
            "PATCH through {version}"
        );
        let watch = api
            .send(
                "GET",
                &format!("{path}?watch=true&resourceVersion=0&timeoutSeconds=1"),
                "",
            )
            .await;
        let first = String::from_utf8_lossy(&watch.raw)
            .lines()
            .next()
            .map(|l| serde_json::from_str::<Value>(l).expect("event"))
            .expect("an event");
        assert_eq!(
            first["object"]["apiVersion"],
            want.as_str(),
            "WATCH through {version}"
        );
    }

    // Ownership spans versions: a field applied through one is another manager's conflict
    // through the other.
    let applied = api
        .send_as(
            "PATCH",
            &format!("{WIDGETS}/w?fieldManager=alpha&force=true"),
            APPLY,
            JSON,
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"image":"redis"}}"#,
        )
        .await;
    assert_eq!(applied.code, 200, "{}", applied.body);
    let conflict = api
        .send_as(
            "PATCH",
            &format!("{beta_widgets}/w?fieldManager=beta"),
            APPLY,
            JSON,
            r#"{"apiVersion":"example.com/v1beta1","kind":"Widget","metadata":{"name":"w"},"spec":{"image":"httpd"}}"#,
        )
        .await;
    assert_eq!(conflict.code, 409, "{}", conflict.body);
    assert_eq!(
        conflict.body["details"]["causes"][0]["field"],
        ".spec.image"
    );
    let message = conflict.body["details"]["causes"][0]["message"]
        .as_str()
        .unwrap_or("");
    assert!(message.contains("\"alpha\""), "{message}");
}

/// A custom kind's `scale` subresource reads and writes where its definition says
/// (`specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`), as `kubectl scale` and
/// HorizontalPodAutoscalers use it.
#[tokio::test]
async fn the_scale_subresource_follows_the_definitions_paths() {
    let api = setup(Arc::new(MemoryStore::new())).await;
    let mut crd = api
        .send("GET", &format!("{CRDS}/widgets.example.com"), "")
        .await
        .body;
    let version = &mut crd["spec"]["versions"][0];
    version["subresources"]["scale"] = json!({
        "specReplicasPath": ".spec.size",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    });
    version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["selector"] =
        json!({"type": "string"});
    let updated = api
        .send(
            "PUT",
            &format!("{CRDS}/widgets.example.com"),
            &crd.to_string(),
        )
        .await;
    assert_eq!(updated.code, 200, "{}", updated.body);
    let made = api
        .send(
            "POST",
            WIDGETS,
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"s"},"spec":{"image":"nginx","size":2}}"#,
        )
        .await;
    assert_eq!(made.code, 201, "{}", made.body);
    let status = api
        .send_as(
            "PATCH",
            &format!("{WIDGETS}/s/status"),
            "application/merge-patch+json",
            JSON,
            r#"{"status":{"replicas":2,"selector":"app=s"}}"#,
        )
        .await;
    assert_eq!(status.code, 200, "{}", status.body);

    let scale = api
        .until(&format!("{WIDGETS}/s/scale"), |a| a.code == 200)
        .await
        .body;
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"], json!({"replicas": 2, "selector": "app=s"}));

    let patched = api
        .send_as(
            "PATCH",
            &format!("{WIDGETS}/s/scale"),
            "application/merge-patch+json",
            JSON,
            r#"{"spec":{"replicas":5}}"#,
        )
        .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    assert_eq!(patched.body["spec"]["replicas"], 5);
    let widget = api.send("GET", &format!("{WIDGETS}/s"), "").await.body;
    assert_eq!(widget["spec"]["size"], 5, "{widget}");
    assert!(
        widget["spec"].get("replicas").is_none_or(|r| r == 1),
        "{widget}"
    );
    // The object's own validation still applies through /scale.
    let too_big = api
        .send_as(
            "PATCH",
            &format!("{WIDGETS}/s/scale"),
            "application/merge-patch+json",
            JSON,
            r#"{"spec":{"replicas":20}}"#,
        )
        .await;
    assert_eq!(too_big.code, 422, "{}", too_big.body);
}

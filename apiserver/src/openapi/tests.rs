//! The documents of the built-in kinds: what kubectl reads in them, and their integrity.

use std::collections::BTreeSet;

use super::operations::id_part;
use super::schemas::gvk;
use super::*;
use crate::registry::ResourceDef;

fn builtin_registry() -> Registry {
    Registry::new(crate::kinds::builtin())
}

fn doc(api: &OpenApi, gv: &str) -> Value {
    let (_, bytes) = api.v3_doc(gv).expect("document exists");
    serde_json::from_slice(bytes).expect("valid JSON")
}

fn all_refs(v: &Value, acc: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                acc.push(r.to_string());
            }
            m.values().for_each(|x| all_refs(x, acc));
        }
        Value::Array(a) => a.iter().for_each(|x| all_refs(x, acc)),
        _ => {}
    }
}

#[test]
fn index_lists_served_group_versions() {
    let api = OpenApi::build(&builtin_registry());
    let index: Value = serde_json::from_slice(&api.v3_index()).unwrap();
    for gv in [
        "api/v1",
        "apis/apps/v1",
        "apis/coordination.k8s.io/v1",
        "apis/discovery.k8s.io/v1",
        "apis/rbac.authorization.k8s.io/v1",
    ] {
        let url = index["paths"][gv]["serverRelativeURL"].as_str().unwrap();
        let (hash, _) = api.v3_doc(gv).unwrap();
        assert_eq!(url, format!("/openapi/v3/{gv}?hash={hash}"));
    }
    assert!(api.v3_doc("/openapi/v3/apis/apps/v1").is_some());
    assert!(api.v3_doc("apis/batch/v1").is_some());
    assert!(api.v3_doc("apis/flowcontrol.apiserver.k8s.io/v1").is_none());
}

#[test]
fn apps_document_serves_deployments() {
    let api = OpenApi::build(&builtin_registry());
    let apps = doc(&api, "apis/apps/v1");
    let schemas = apps["components"]["schemas"].as_object().unwrap();
    let deployment = schemas
        .values()
        .find(|s| {
            s["x-kubernetes-group-version-kind"]
                .as_array()
                .is_some_and(|l| l.contains(&gvk("apps", "v1", "Deployment")))
        })
        .expect("a component for apps/v1 Deployment");
    assert!(deployment["properties"]["spec"]["allOf"][0]["$ref"].is_string());
    assert_eq!(
        schemas["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["replicas"]["type"],
        "integer"
    );
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    let max_surge =
        &schemas["io.k8s.api.apps.v1.RollingUpdateDeployment"]["properties"]["maxSurge"];
    assert_eq!(
        max_surge["allOf"][0]["$ref"],
        format!("{V3_REF}{INT_OR_STRING}")
    );
    assert_eq!(schemas[INT_OR_STRING]["x-kubernetes-int-or-string"], true);
    assert!(schemas.contains_key(SCALE));
    assert!(!schemas.contains_key("io.k8s.api.core.v1.Node"));

    let mut patches = 0;
    for (path, item) in apps["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert!(op["x-kubernetes-action"].is_string(), "{method} {path}");
            assert!(
                op["x-kubernetes-group-version-kind"].is_object(),
                "{method} {path}"
            );
            if matches!(method.as_str(), "patch" | "post" | "put") {
                let names: Vec<&str> = op["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str())
                    .collect();
                assert!(names.contains(&"fieldValidation"), "{method} {path}");
            }
            if method == "patch" {
                patches += 1;
                assert!(
                    op["requestBody"]["content"]
                        .get("application/strategic-merge-patch+json")
                        .is_some()
                );
            }
        }
    }
    // deployments, replicasets and statefulsets: item, status and scale each; daemonsets:
    // item and status; controllerrevisions: item.
    assert_eq!(patches, 12);
    let item = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    assert_eq!(
        item["patch"]["operationId"],
        "patchAppsV1NamespacedDeployment"
    );
    assert_eq!(
        item["get"]["x-kubernetes-group-version-kind"],
        gvk("apps", "v1", "Deployment")
    );
    let scale = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
    assert_eq!(
        scale["put"]["x-kubernetes-group-version-kind"]["kind"],
        "Scale"
    );
}

#[test]
fn a_supplied_schema_is_published_with_object_metadata() {
    let mut widget = ResourceDef::new(
        "example.dev",
        "v1",
        "Widget",
        "widgets",
        "widget",
        true,
        crate::registry::NoHooks,
    );
    widget.definition = "dev.example.v1.Widget";
    widget.schema = Some(|| {
        json!({
            "type": "object",
            "description": "Widget does one thing.",
            "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
        })
    });
    let mut defs = crate::kinds::builtin();
    defs.push(widget);
    let api = OpenApi::build(&Registry::new(defs));
    let widgets = doc(&api, "apis/example.dev/v1");
    let schema = &widgets["components"]["schemas"]["dev.example.v1.Widget"];
    assert_eq!(schema["description"], "Widget does one thing.");
    assert_eq!(
        schema["properties"]["spec"]["properties"]["size"]["type"],
        "integer"
    );
    assert_eq!(
        schema["properties"]["metadata"]["allOf"][0]["$ref"],
        format!("{V3_REF}{OBJECT_META}")
    );
    assert_eq!(
        schema["x-kubernetes-group-version-kind"][0],
        gvk("example.dev", "v1", "Widget")
    );
    let list = &api.definitions()["dev.example.v1.WidgetList"];
    assert!(list["properties"]["items"].is_object());
    // A kind with neither a vendored definition nor a schema is an open object.
    let mut gadget = ResourceDef::new(
        "example.dev",
        "v1",
        "Gadget",
        "gadgets",
        "gadget",
        true,
        crate::registry::NoHooks,
    );
    gadget.definition = "";
    let api = OpenApi::build(&Registry::new(vec![gadget]));
    let open = &api.definitions()["example.dev.v1.Gadget"];
    assert_eq!(open["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(open["description"], "Gadget is a example.dev/v1 object.");
}

#[test]
fn every_reference_resolves() {
    let api = OpenApi::build(&builtin_registry());
    let index: Value = serde_json::from_slice(&api.v3_index()).unwrap();
    for gv in index["paths"].as_object().unwrap().keys() {
        let d = doc(&api, gv);
        let mut refs = Vec::new();
        all_refs(&d, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let name = r
                .strip_prefix(V3_REF)
                .unwrap_or_else(|| panic!("{gv}: stray ref {r}"));
            assert!(d["components"]["schemas"].get(name).is_some(), "{gv}: {r}");
        }
    }
    let v2: Value = serde_json::from_slice(&api.v2()).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    let mut refs = Vec::new();
    all_refs(&v2, &mut refs);
    for r in refs {
        let name = r
            .strip_prefix(V2_REF)
            .unwrap_or_else(|| panic!("v2: stray ref {r}"));
        assert!(v2["definitions"].get(name).is_some(), "v2: {r}");
    }
    let list = &v2["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["get"];
    assert_eq!(list["x-kubernetes-action"], "list");
    assert_eq!(list["operationId"], "listCoreV1NamespacedConfigMap");
}

#[test]
fn operation_ids_are_unique() {
    let api = OpenApi::build(&builtin_registry());
    let v2: Value = serde_json::from_slice(&api.v2()).unwrap();
    let mut seen = BTreeSet::new();
    for item in v2["paths"].as_object().unwrap().values() {
        for op in item.as_object().unwrap().values() {
            let id = op["operationId"].as_str().unwrap().to_string();
            assert!(seen.insert(id.clone()), "duplicate {id}");
        }
    }
}

#[test]
fn id_parts_follow_upstream() {
    assert_eq!(id_part("", "v1"), "CoreV1");
    assert_eq!(id_part("coordination.k8s.io", "v1"), "CoordinationV1");
    assert_eq!(
        id_part("rbac.authorization.k8s.io", "v1"),
        "RbacAuthorizationV1"
    );
    assert_eq!(
        id_part("federation.meridian.dev", "v1alpha1"),
        "FederationMeridianDevV1alpha1"
    );
}

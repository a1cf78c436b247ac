//! Discovery documents (`/api`, `/apis`, `/apis/{group}` and per-group-version
//! resource lists) in the unaggregated form kubectl falls back to.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceDef};

/// The verbs of every served resource.
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// The verbs of the `status` and `scale` subresources.
const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

/// `/api`: the core group's versions.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address},
        ],
    })
}

/// `/apis`: every named group with its versions.
pub fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| group_body(g, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`; `None` for the core group (served at `/api`) and unknown groups.
pub fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    if group.is_empty() {
        return None;
    }
    let (g, versions) = registry.groups().into_iter().find(|(g, _)| *g == group)?;
    let mut body = group_body(g, &versions);
    if let Some(obj) = body.as_object_mut() {
        obj.insert("kind".into(), "APIGroup".into());
        obj.insert("apiVersion".into(), "v1".into());
    }
    Some(body)
}

/// The group fields shared by `/apis` and `/apis/{group}`; the first registered
/// version is the preferred one.
fn group_body(group: &str, versions: &[&str]) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    let preferred = versions.first().map(|v| gv(v)).unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": preferred,
    })
}

/// `APIResourceList` of `/api/v1` (group `""`) or `/apis/{group}/{version}`; `None`
/// when nothing is served there.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = registry
        .all()
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in defs {
        resources.push(resource(d));
        if d.status_subresource {
            resources.push(subresource(d, "status", None));
        }
        if d.scale_subresource {
            resources.push(subresource(
                d,
                "scale",
                Some(("autoscaling", "v1", "Scale")),
            ));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

fn resource(d: &ResourceDef) -> Value {
    let mut r = Map::new();
    r.insert("name".into(), d.plural.into());
    r.insert("singularName".into(), d.singular.into());
    r.insert("namespaced".into(), d.namespaced.into());
    r.insert("kind".into(), d.kind.into());
    r.insert("verbs".into(), json!(VERBS));
    // Empty lists are left out, as upstream does.
    if !d.short_names.is_empty() {
        r.insert("shortNames".into(), json!(d.short_names));
    }
    if !d.categories.is_empty() {
        r.insert("categories".into(), json!(d.categories));
    }
    r.insert("storageVersionHash".into(), storage_version_hash(d).into());
    Value::Object(r)
}

/// A subresource entry; `gvk` is set when its body is of another group's kind.
fn subresource(d: &ResourceDef, name: &str, gvk: Option<(&str, &str, &str)>) -> Value {
    let mut r = Map::new();
    r.insert("name".into(), format!("{}/{name}", d.plural).into());
    r.insert("singularName".into(), "".into());
    r.insert("namespaced".into(), d.namespaced.into());
    match gvk {
        Some((group, version, kind)) => {
            r.insert("group".into(), group.into());
            r.insert("version".into(), version.into());
            r.insert("kind".into(), kind.into());
        }
        None => {
            r.insert("kind".into(), d.kind.into());
        }
    }
    r.insert("verbs".into(), json!(SUBRESOURCE_VERBS));
    Value::Object(r)
}

/// An opaque token that changes when the stored form of a kind does (clients only
/// compare it), shaped like upstream's: base64 of 8 hash bytes.
fn storage_version_hash(d: &ResourceDef) -> String {
    let key = format!("{}/{}/{}", d.group, d.version, d.kind);
    let hash = crate::openapi::fnv1a64(key.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(hash.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn builtin_registry() -> Registry {
        Registry::new(crate::kinds::builtin())
    }

    #[test]
    fn lists_groups() {
        let reg = builtin_registry();
        let list = api_group_list(&reg);
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "apps",
                "discovery.k8s.io",
                "coordination.k8s.io",
                "rbac.authorization.k8s.io",
                "batch",
                "networking.k8s.io",
                "policy",
                "autoscaling",
                "scheduling.k8s.io",
                "storage.k8s.io",
                "apiextensions.k8s.io",
            ]
        );
        let rbac = api_group(&reg, "rbac.authorization.k8s.io").unwrap();
        assert_eq!(rbac["kind"], "APIGroup");
        assert_eq!(
            rbac["preferredVersion"]["groupVersion"],
            "rbac.authorization.k8s.io/v1"
        );
        assert!(api_group(&reg, "").is_none());
        assert!(api_group(&reg, "flowcontrol.apiserver.k8s.io").is_none());
        let api = api_versions("10.0.0.1:6443");
        assert_eq!(
            api["serverAddressByClientCIDRs"][0]["serverAddress"],
            "10.0.0.1:6443"
        );
    }

    #[test]
    fn lists_resources() {
        let reg = builtin_registry();
        let apps = resource_list(&reg, "apps", "v1").unwrap();
        assert_eq!(apps["groupVersion"], "apps/v1");
        let res = apps["resources"].as_array().unwrap();
        let find = |n: &str| res.iter().find(|r| r["name"] == n).unwrap();
        let deploy = find("deployments");
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        assert_eq!(deploy["singularName"], "deployment");
        assert_eq!(deploy["namespaced"], true);
        assert_eq!(deploy["verbs"].as_array().unwrap().len(), 8);
        assert_eq!(deploy["storageVersionHash"].as_str().unwrap().len(), 12);
        assert_eq!(
            find("deployments/status")["verbs"],
            json!(["get", "patch", "update"])
        );
        assert_eq!(find("deployments/scale")["group"], "autoscaling");
        assert_eq!(find("deployments/scale")["kind"], "Scale");

        let core = resource_list(&reg, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        let ns = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "namespaces")
            .unwrap();
        assert_eq!(ns["namespaced"], false);
        assert!(resource_list(&reg, "apps", "v2").is_none());

        let svc = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "services")
            .unwrap();
        assert_eq!(svc["categories"], json!(["all"]));
    }
}

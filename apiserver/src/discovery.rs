//! Discovery documents: `/api`, `/apis`, `/apis/{group}` and per-group-version resource
//! lists in the unaggregated form, and `/api` and `/apis` in the aggregated form
//! (`apidiscovery.k8s.io` `APIGroupDiscoveryList`) that kubectl and client-go ask for first,
//! which describes every resource in one answer instead of one request per group version.

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
        for (name, gvk) in subresources(d) {
            resources.push(subresource(d, name, gvk));
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

/// The subresources `d` serves, each with the group, version and kind of its body when that
/// is not `d`'s own kind.
fn subresources(d: &ResourceDef) -> Vec<(&'static str, Option<Gvk>)> {
    let mut out = Vec::new();
    if d.status_subresource {
        out.push(("status", None));
    }
    if d.scale_subresource {
        out.push(("scale", Some(("autoscaling", "v1", "Scale"))));
    }
    out
}

/// A group, version and kind.
type Gvk = (&'static str, &'static str, &'static str);

/// The media type parameters that ask for aggregated discovery.
const AGGREGATED_GROUP: &str = "apidiscovery.k8s.io";
const AGGREGATED_AS: &str = "APIGroupDiscoveryList";
/// The aggregated discovery versions served (the same document in both).
const AGGREGATED_VERSIONS: [&str; 2] = ["v2", "v2beta1"];

/// The aggregated discovery version an `Accept` header asks for first, if any (clients list
/// it before plain JSON, which they take as the fallback). Parameters are matched as
/// upstream does: `g`, `v` and `as` on an `application/json` range.
pub fn aggregated_version(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|range| {
        let mut parts = range.split(';').map(str::trim);
        if !parts.next()?.eq_ignore_ascii_case("application/json") {
            return None;
        }
        let (mut g, mut v, mut as_) = (None, None, None);
        for p in parts {
            match p.split_once('=') {
                Some(("g", x)) => g = Some(x),
                Some(("v", x)) => v = Some(x),
                Some(("as", x)) => as_ = Some(x),
                _ => {}
            }
        }
        if g != Some(AGGREGATED_GROUP) || as_ != Some(AGGREGATED_AS) {
            return None;
        }
        AGGREGATED_VERSIONS
            .into_iter()
            .find(|known| Some(*known) == v)
    })
}

/// The `Content-Type` of an aggregated discovery answer in `version`.
pub fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g={AGGREGATED_GROUP};v={version};as={AGGREGATED_AS}")
}

/// Aggregated discovery of `/api` (`core`: the core group only) or `/apis` (every named
/// group), in `version` (`v2` or `v2beta1`). Versions are listed preferred first.
pub fn aggregated(registry: &Registry, core: bool, version: &str) -> Value {
    let items: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = registry
                        .all()
                        .iter()
                        .filter(|d| d.group == g && d.version == *v)
                        .map(|d| resource_discovery(d))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            // The core group's entry has no name, as upstream's.
            let metadata = if core {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": g, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": AGGREGATED_AS,
        "apiVersion": format!("{AGGREGATED_GROUP}/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// One resource of an aggregated discovery document (`APIResourceDiscovery`).
fn resource_discovery(d: &ResourceDef) -> Value {
    let kind =
        |(group, version, kind): Gvk| json!({"group": group, "version": version, "kind": kind});
    let mut r = Map::new();
    r.insert("resource".into(), d.plural.into());
    r.insert("responseKind".into(), kind((d.group, d.version, d.kind)));
    r.insert(
        "scope".into(),
        if d.namespaced {
            "Namespaced"
        } else {
            "Cluster"
        }
        .into(),
    );
    r.insert("singularResource".into(), d.singular.into());
    r.insert("verbs".into(), json!(VERBS));
    if !d.short_names.is_empty() {
        r.insert("shortNames".into(), json!(d.short_names));
    }
    if !d.categories.is_empty() {
        r.insert("categories".into(), json!(d.categories));
    }
    let subs: Vec<Value> = subresources(d)
        .into_iter()
        .map(|(name, gvk)| {
            json!({
                "subresource": name,
                "responseKind": kind(gvk.unwrap_or((d.group, d.version, d.kind))),
                "verbs": SUBRESOURCE_VERBS,
            })
        })
        .collect();
    if !subs.is_empty() {
        r.insert("subresources".into(), subs.into());
    }
    Value::Object(r)
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
fn subresource(d: &ResourceDef, name: &str, gvk: Option<Gvk>) -> Value {
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
                "events.k8s.io",
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
        // autoscaling serves v2 and v1 over the same objects; v2 is preferred, as upstream.
        let autoscaling = api_group(&reg, "autoscaling").unwrap();
        let versions: Vec<&str> = autoscaling["versions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["version"].as_str())
            .collect();
        assert_eq!(versions, ["v2", "v1"]);
        assert_eq!(autoscaling["preferredVersion"]["version"], "v2");
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
    fn aggregated_discovery_is_chosen_by_the_accept_header() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_version(kubectl), Some("v2"));
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList, application/json";
        assert_eq!(aggregated_version(old), Some("v2beta1"));
        assert_eq!(aggregated_version("application/json"), None);
        assert_eq!(aggregated_version(""), None);
        // Another kind, group or an unknown version is not aggregated discovery.
        assert_eq!(
            aggregated_version(
                "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList"
            ),
            None
        );
        assert_eq!(
            aggregated_version("application/json;as=Table;v=v1;g=meta.k8s.io"),
            None
        );
        assert_eq!(
            aggregated_content_type("v2"),
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
    }

    #[test]
    fn aggregated_discovery_describes_what_the_lists_do() {
        let reg = builtin_registry();
        let apis = aggregated(&reg, false, "v2");
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2");
        let groups: Vec<&str> = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap())
            .collect();
        let listed = api_group_list(&reg);
        let plain: Vec<&str> = listed["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(groups, plain);
        let apps = &apis["items"][0]["versions"][0];
        assert_eq!(apps["version"], "v1");
        let res = apps["resources"].as_array().unwrap();
        let deploy = res.iter().find(|r| r["resource"] == "deployments").unwrap();
        assert_eq!(
            deploy["responseKind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["shortNames"], json!(["deploy"]));
        let subs: Vec<&str> = deploy["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["subresource"].as_str().unwrap())
            .collect();
        assert_eq!(subs, ["status", "scale"]);
        assert_eq!(deploy["subresources"][1]["responseKind"]["kind"], "Scale");
        // Every resource of every group version, as the unaggregated lists name them.
        for item in apis["items"].as_array().unwrap() {
            let g = item["metadata"]["name"].as_str().unwrap();
            for v in item["versions"].as_array().unwrap() {
                let v_name = v["version"].as_str().unwrap();
                let list = resource_list(&reg, g, v_name).unwrap();
                let plain: Vec<&str> = list["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["name"].as_str().unwrap())
                    .filter(|n| !n.contains('/'))
                    .collect();
                let agg: Vec<&str> = v["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["resource"].as_str().unwrap())
                    .collect();
                assert_eq!(agg, plain, "{g}/{v_name}");
            }
        }

        let core = aggregated(&reg, true, "v2beta1");
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let items = core["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert!(items[0]["metadata"].get("name").is_none());
        let ns = items[0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "namespaces")
            .unwrap();
        assert_eq!(ns["scope"], "Cluster");
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

//! `OverridePolicy` (namespaced) and `ClusterOverridePolicy` (cluster-scoped): served like
//! the propagation policies, with validation that names each bad field and why before a
//! policy can reach the controllers (the rules it checks are `fed_api::overrides`' own:
//! image parts by `image::check_part`, paths by `apply::is_json_pointer`).

use apimachinery::JsonPointer;
use fed_api::names::{MANAGED_BY_LABEL, OWNER_UID_LABEL};
use fed_api::overrides::ImageComponent;
use fed_api::overrides::apply::is_json_pointer;
use fed_api::overrides::image::check_part;
use meridian_apiserver::kinds::column;
use meridian_apiserver::kinds::validate::{
    self, NameRule, forbidden, invalid, not_supported, required,
};
use meridian_apiserver::registry::{Column, ResourceDef};
use meridian_apiserver::status::Cause;
use serde_json::Value;

use crate::kinds::{policy_kind, resource_selector_causes};

const OPERATORS: [&str; 3] = ["add", "remove", "replace"];
const COMPONENTS: [&str; 4] = ["Digest", "Registry", "Repository", "Tag"];
/// Paths a plaintext override may not touch: what names the object, and so its copy.
const FIXED_PATHS: [&str; 4] = [
    "/apiVersion",
    "/kind",
    "/metadata/name",
    "/metadata/namespace",
];

fn validate_override_policy(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    override_causes(o, true)
}

fn validate_cluster_override_policy(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    override_causes(o, false)
}

/// Each item of the list at `pointer` in `o`, with its index.
fn items<'a>(o: &'a Value, pointer: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    o.at(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// The operator at `item.operator`, if it is one; otherwise the cause is recorded.
fn operator<'a>(item: &'a Value, field: &str, errs: &mut Vec<Cause>) -> Option<&'a str> {
    match item.get("operator") {
        Some(Value::String(op)) if OPERATORS.contains(&op.as_str()) => Some(op.as_str()),
        Some(other) => {
            errs.push(not_supported(
                &format!("{field}.operator"),
                other,
                &OPERATORS,
            ));
            None
        }
        None => {
            errs.push(required(&format!("{field}.operator")));
            None
        }
    }
}

/// What is wrong with an OverridePolicy (`namespaced`) or a ClusterOverridePolicy.
fn override_causes(o: &Value, namespaced: bool) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, namespaced);
    errs.extend(resource_selector_causes(o));
    for (r, rule) in items(o, "/spec/overrideRules") {
        let at = format!("spec.overrideRules[{r}]");
        if let Some(ls) = rule.at("/targetCluster/labelSelector") {
            errs.extend(validate::label_selector(
                ls,
                &format!("{at}.targetCluster.labelSelector"),
            ));
        }
        let ov = format!("{at}.overriders");
        images(rule, &ov, &mut errs);
        for list in ["commandOverrider", "argsOverrider"] {
            for (j, c) in items(rule, &format!("/overriders/{list}")) {
                let field = format!("{ov}.{list}[{j}]");
                if c.get("containerName")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errs.push(required(&format!("{field}.containerName")));
                }
                let empty = c
                    .get("value")
                    .and_then(Value::as_array)
                    .is_none_or(|v| v.is_empty());
                if matches!(operator(c, &field, &mut errs), Some("add" | "remove")) && empty {
                    errs.push(required(&format!("{field}.value")));
                }
            }
        }
        maps(rule, &ov, &mut errs);
        for (j, p) in items(rule, "/overriders/plaintext") {
            let field = format!("{ov}.plaintext[{j}]");
            match p.get("path") {
                None => errs.push(required(&format!("{field}.path"))),
                Some(v) => match v.as_str() {
                    Some(path) if !is_json_pointer(path) => errs.push(invalid(
                        &format!("{field}.path"),
                        v,
                        "must be a JSON pointer (RFC 6901) below the root, e.g. /spec/template/spec/nodeSelector",
                    )),
                    Some(path)
                        if FIXED_PATHS
                            .iter()
                            .any(|f| path == *f || path.starts_with(&format!("{f}/"))) =>
                    {
                        errs.push(forbidden(
                            &format!("{field}.path"),
                            "the apiVersion, kind, name and namespace of a copy are the federated object's",
                        ))
                    }
                    Some(_) => {}
                    None => errs.push(invalid(&format!("{field}.path"), v, "must be a string")),
                },
            }
            if matches!(operator(p, &field, &mut errs), Some("add" | "replace"))
                && p.get("value").is_none_or(Value::is_null)
            {
                errs.push(required(&format!("{field}.value")));
            }
        }
    }
    errs
}

/// The causes of `imageOverrider`'s entries.
fn images(rule: &Value, ov: &str, errs: &mut Vec<Cause>) {
    for (j, io) in items(rule, "/overriders/imageOverrider") {
        let field = format!("{ov}.imageOverrider[{j}]");
        let component = match io.get("component") {
            Some(Value::String(c)) if COMPONENTS.contains(&c.as_str()) => {
                serde_json::from_value::<ImageComponent>(Value::from(c.as_str())).ok()
            }
            Some(other) => {
                errs.push(not_supported(
                    &format!("{field}.component"),
                    other,
                    &COMPONENTS,
                ));
                None
            }
            None => {
                errs.push(required(&format!("{field}.component")));
                None
            }
        };
        let op = operator(io, &field, errs);
        let value = io.get("value");
        match (op, component) {
            (Some("remove"), Some(ImageComponent::Repository)) => errs.push(forbidden(
                &format!("{field}.operator"),
                "an image always has a repository: it can be replaced, not removed",
            )),
            (Some("add" | "replace"), Some(c)) => match value.and_then(Value::as_str) {
                None | Some("") => errs.push(required(&format!("{field}.value"))),
                Some(v) => {
                    if let Err(e) = check_part(c, v) {
                        errs.push(invalid(
                            &format!("{field}.value"),
                            &Value::from(v),
                            &e.to_string(),
                        ));
                    }
                }
            },
            _ => {}
        }
    }
}

/// The causes of `labelsOverrider` and `annotationsOverrider` entries.
fn maps(rule: &Value, ov: &str, errs: &mut Vec<Cause>) {
    for list in ["labelsOverrider", "annotationsOverrider"] {
        for (j, m) in items(rule, &format!("/overriders/{list}")) {
            let field = format!("{ov}.{list}[{j}]");
            operator(m, &field, errs);
            let Some(pairs) = m
                .get("value")
                .and_then(Value::as_object)
                .filter(|v| !v.is_empty())
            else {
                errs.push(required(&format!("{field}.value")));
                continue;
            };
            for (k, v) in pairs {
                let at = format!("{field}.value[{k}]");
                if [MANAGED_BY_LABEL, OWNER_UID_LABEL].contains(&k.as_str()) {
                    errs.push(forbidden(
                        &at,
                        "Meridian's own labels tell its copies apart",
                    ));
                    continue;
                }
                if list == "labelsOverrider" {
                    if let Err(why) = apimachinery::validation::label_key(k) {
                        errs.push(invalid(&at, &Value::from(k.as_str()), &why.join("; ")));
                    }
                    match v.as_str() {
                        Some(s) => {
                            if let Err(why) = apimachinery::validation::label_value(s) {
                                errs.push(invalid(&at, v, &why.join("; ")));
                            }
                        }
                        None => errs.push(invalid(&at, v, "must be a string")),
                    }
                } else if !v.is_string() {
                    errs.push(invalid(&at, v, "must be a string"));
                }
            }
        }
    }
}

/// The `kubectl get` columns of both override kinds.
fn override_columns() -> Vec<Column> {
    fn count(o: &Value, pointer: &str) -> Value {
        Value::from(o.at(pointer).and_then(Value::as_array).map_or(0, Vec::len))
    }
    vec![
        column(
            "Selectors",
            "integer",
            "How many resource selectors",
            false,
            |o| count(o, "/spec/resourceSelectors"),
        ),
        column("Rules", "integer", "How many override rules", false, |o| {
            count(o, "/spec/overrideRules")
        }),
    ]
}

/// `OverridePolicy` (namespaced): changes to the copies of objects in its namespace.
pub fn override_policies() -> ResourceDef {
    policy_kind!(
        "OverridePolicy", "overridepolicies", "overridepolicy", namespaced: true,
        spec: fed_api::OverridePolicySpec, validate: validate_override_policy, short: "op",
        columns: override_columns(), crd: fed_api::OverridePolicy,
        about: "OverridePolicy changes, per member cluster, the copies Meridian pushes of the objects it selects in its namespace: images, commands and args, labels and annotations, RFC 6902 operations.",
    )
}

/// `ClusterOverridePolicy` (cluster-scoped): the same spec, for cluster-scoped kinds and
/// namespaced kinds in every namespace.
pub fn cluster_override_policies() -> ResourceDef {
    policy_kind!(
        "ClusterOverridePolicy", "clusteroverridepolicies", "clusteroverridepolicy",
        namespaced: false, spec: fed_api::ClusterOverridePolicySpec,
        validate: validate_cluster_override_policy, short: "cop",
        columns: override_columns(), crd: fed_api::ClusterOverridePolicy,
        about: "ClusterOverridePolicy changes, per member cluster, the copies Meridian pushes of the objects it selects in any namespace and of cluster-scoped ones; it applies before the OverridePolicies.",
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(rules: Value) -> Value {
        json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "OverridePolicy",
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {
                "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
                "overrideRules": rules,
            }
        })
    }

    fn fields(causes: &[Cause]) -> Vec<(String, String)> {
        causes
            .iter()
            .map(|c| (c.field.clone(), c.reason.clone()))
            .collect()
    }

    #[test]
    fn a_good_policy_passes() {
        let o = policy(json!([{
            "targetCluster": {"regions": ["cn-north"], "labelSelector": {"matchLabels": {"env": "prod"}}},
            "overriders": {
                "imageOverrider": [{"component": "Registry", "operator": "replace", "value": "registry.cn.example"},
                                   {"component": "Tag", "operator": "remove"}],
                "argsOverrider": [{"containerName": "web", "operator": "add", "value": ["--region=cn"]}],
                "commandOverrider": [{"containerName": "web", "operator": "replace"}],
                "labelsOverrider": [{"operator": "add", "value": {"tier": "edge"}}],
                "annotationsOverrider": [{"operator": "remove", "value": {"note": ""}}],
                "plaintext": [{"path": "/spec/template/spec/nodeSelector", "operator": "add", "value": {"disk": "ssd"}},
                              {"path": "/spec/paused", "operator": "remove"}]
            }
        }]));
        assert_eq!(fields(&validate_override_policy(&o, None)), vec![]);
        assert!(override_policies().hooks.check_types(&o).is_ok());
    }

    #[test]
    fn bad_fields_are_named_with_their_reason() {
        let ov = "spec.overrideRules[0].overriders";
        // (overriders, expected (field, reason))
        let cases = [
            (
                json!({"imageOverrider": [{"component": "Layer", "operator": "replace", "value": "x"}]}),
                (
                    format!("{ov}.imageOverrider[0].component"),
                    "FieldValueNotSupported",
                ),
            ),
            (
                json!({"imageOverrider": [{"component": "Tag", "operator": "set", "value": "x"}]}),
                (
                    format!("{ov}.imageOverrider[0].operator"),
                    "FieldValueNotSupported",
                ),
            ),
            (
                json!({"imageOverrider": [{"component": "Tag", "operator": "replace"}]}),
                (
                    format!("{ov}.imageOverrider[0].value"),
                    "FieldValueRequired",
                ),
            ),
            (
                json!({"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "a/b"}]}),
                (format!("{ov}.imageOverrider[0].value"), "FieldValueInvalid"),
            ),
            (
                json!({"imageOverrider": [{"component": "Repository", "operator": "remove"}]}),
                (
                    format!("{ov}.imageOverrider[0].operator"),
                    "FieldValueForbidden",
                ),
            ),
            (
                json!({"argsOverrider": [{"operator": "add", "value": ["-v"]}]}),
                (
                    format!("{ov}.argsOverrider[0].containerName"),
                    "FieldValueRequired",
                ),
            ),
            (
                json!({"commandOverrider": [{"containerName": "web", "operator": "add"}]}),
                (
                    format!("{ov}.commandOverrider[0].value"),
                    "FieldValueRequired",
                ),
            ),
            (
                json!({"labelsOverrider": [{"operator": "add"}]}),
                (
                    format!("{ov}.labelsOverrider[0].value"),
                    "FieldValueRequired",
                ),
            ),
            (
                json!({"labelsOverrider": [{"operator": "add", "value": {"bad key!": "x"}}]}),
                (
                    format!("{ov}.labelsOverrider[0].value[bad key!]"),
                    "FieldValueInvalid",
                ),
            ),
            (
                json!({"labelsOverrider": [{"operator": "remove", "value": {"app.kubernetes.io/managed-by": ""}}]}),
                (
                    format!("{ov}.labelsOverrider[0].value[app.kubernetes.io/managed-by]"),
                    "FieldValueForbidden",
                ),
            ),
            (
                json!({"plaintext": [{"path": "spec/replicas", "operator": "remove"}]}),
                (format!("{ov}.plaintext[0].path"), "FieldValueInvalid"),
            ),
            (
                json!({"plaintext": [{"path": "/spec/a~2", "operator": "remove"}]}),
                (format!("{ov}.plaintext[0].path"), "FieldValueInvalid"),
            ),
            (
                json!({"plaintext": [{"path": "/metadata/name", "operator": "replace", "value": "x"}]}),
                (format!("{ov}.plaintext[0].path"), "FieldValueForbidden"),
            ),
            (
                json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace"}]}),
                (format!("{ov}.plaintext[0].value"), "FieldValueRequired"),
            ),
            (
                json!({"plaintext": [{"path": "/spec/replicas"}]}),
                (format!("{ov}.plaintext[0].operator"), "FieldValueRequired"),
            ),
        ];
        for (overriders, (field, reason)) in cases {
            let o = policy(json!([{"overriders": overriders}]));
            let got = fields(&validate_override_policy(&o, None));
            assert_eq!(
                got,
                vec![(field.clone(), reason.to_owned())],
                "{overriders}"
            );
        }
        let mut no_selectors = policy(json!([]));
        no_selectors["spec"]["resourceSelectors"] = json!([]);
        assert_eq!(
            fields(&validate_override_policy(&no_selectors, None)),
            vec![(
                "spec.resourceSelectors".to_owned(),
                "FieldValueRequired".to_owned()
            )]
        );
        // A namespaced policy needs its namespace; a cluster-wide one has none.
        let mut cop = policy(json!([]));
        cop["metadata"].as_object_mut().unwrap().remove("namespace");
        assert_eq!(
            fields(&validate_override_policy(&cop, None)),
            vec![(
                "metadata.namespace".to_owned(),
                "FieldValueRequired".to_owned()
            )]
        );
        cop["kind"] = json!("ClusterOverridePolicy");
        assert_eq!(
            fields(&validate_cluster_override_policy(&cop, None)),
            vec![]
        );
    }
}

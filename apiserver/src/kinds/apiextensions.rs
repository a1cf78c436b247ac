//! `apiextensions.k8s.io/v1` CustomResourceDefinition: defaults and validation as
//! kube-apiserver's (names, scope, versions, structural schemas). Serving the kinds a
//! definition brings is [`crate::crd`]'s job.

use apimachinery::JsonPointer;
use apimachinery::validation;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::validate::{self, NameRule, duplicate, forbidden, invalid, not_supported, required};
use super::{column, default_at, typed};
use crate::registry::{KindHooks, ResourceDef};
use crate::status::Cause;

/// The API group of custom resource definitions.
pub const GROUP: &str = "apiextensions.k8s.io";
/// The finalizer that holds a definition until its objects are deleted.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The `customresourcedefinitions` resource (cluster-scoped, with a status subresource).
pub fn custom_resource_definitions() -> ResourceDef {
    let mut d = ResourceDef::new(
        GROUP,
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        false,
        CrdHooks,
    );
    d.short_names = &["crd", "crds"];
    d.categories = &["api-extensions"];
    d.definition =
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition";
    d.status_subresource = true;
    d.tracks_generation = true;
    d.columns = vec![column(
        "Created At",
        "date",
        "When the definition was created.",
        false,
        |o| {
            Value::from(
                o.at("/metadata/creationTimestamp")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            )
        },
    )];
    d
}

struct CrdHooks;

impl KindHooks for CrdHooks {
    fn default(&self, obj: &mut Value) {
        defaults(obj);
    }
    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut errs = validate::metadata(obj, NameRule::Subdomain, false);
        errs.extend(validate_spec(obj));
        errs.extend(validate::unchanged(obj, old, &["spec.scope", "spec.group"]));
        errs
    }
    fn check_types(&self, obj: &Value) -> Result<(), String> {
        typed::<CustomResourceDefinition>(obj)
    }
    fn prepare_create(&self, obj: &mut Value) {
        // Held until every object of the definition is gone (see crate::crd).
        let meta = crate::object::meta_mut(obj);
        let fins = meta.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = fins.as_array_mut()
            && !list.iter().any(|f| f == CLEANUP_FINALIZER)
        {
            list.push(Value::from(CLEANUP_FINALIZER));
        }
    }
}

/// kube-apiserver's defaults: singular and list kind from the kind, conversion `None`.
fn defaults(obj: &mut Value) {
    let kind = obj
        .at("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !kind.is_empty() {
        default_at(
            obj,
            &["spec", "names", "singular"],
            Value::from(kind.to_lowercase()),
        );
        default_at(
            obj,
            &["spec", "names", "listKind"],
            Value::from(format!("{kind}List")),
        );
    }
    default_at(
        obj,
        &["spec", "conversion", "strategy"],
        Value::from("None"),
    );
}

fn str_at<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.at(ptr).and_then(Value::as_str).unwrap_or("")
}

/// A lower-case RFC 1123 label check with upstream's message, for names that become
/// URL segments.
fn label(field: &str, value: &str, errs: &mut Vec<Cause>) {
    if let Err(msgs) = validation::dns1123_label(value) {
        for m in msgs {
            errs.push(invalid(field, &Value::from(value), &m));
        }
    }
}

fn validate_spec(obj: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    let group = str_at(obj, "/spec/group");
    let plural = str_at(obj, "/spec/names/plural");
    if group.is_empty() {
        errs.push(required("spec.group"));
    } else if validation::dns1123_subdomain(group).is_err() || !group.contains('.') {
        errs.push(invalid(
            "spec.group",
            &Value::from(group),
            "should be a domain with at least one dot",
        ));
    }
    let name = crate::object::name(obj);
    if !name.is_empty() && name != format!("{plural}.{group}") {
        errs.push(invalid(
            "metadata.name",
            &Value::from(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match str_at(obj, "/spec/scope") {
        "" => errs.push(required("spec.scope")),
        "Cluster" | "Namespaced" => {}
        other => errs.push(not_supported(
            "spec.scope",
            &Value::from(other),
            &["Cluster", "Namespaced"],
        )),
    }
    errs.extend(validate_names(obj));
    match str_at(obj, "/spec/conversion/strategy") {
        "" | "None" => {}
        "Webhook" => errs.push(forbidden(
            "spec.conversion.strategy",
            "Webhook conversion is not served by this server: use None",
        )),
        other => errs.push(not_supported(
            "spec.conversion.strategy",
            &Value::from(other),
            &["None", "Webhook"],
        )),
    }
    errs.extend(validate_versions(obj));
    errs
}

fn validate_names(obj: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    let names = obj.at("/spec/names").cloned().unwrap_or(json!({}));
    let field = |n: &str| names.get(n).and_then(Value::as_str).unwrap_or("");
    let plural = field("plural");
    if plural.is_empty() {
        errs.push(required("spec.names.plural"));
    } else {
        label("spec.names.plural", plural, &mut errs);
    }
    let singular = field("singular");
    if !singular.is_empty() {
        label("spec.names.singular", singular, &mut errs);
    }
    for (f, v) in [
        ("spec.names.kind", field("kind")),
        ("spec.names.listKind", field("listKind")),
    ] {
        if v.is_empty() {
            errs.push(required(f));
        } else if validate::dns1035_label(&v.to_lowercase()).is_err() {
            errs.push(invalid(
                f,
                &Value::from(v),
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    if !field("kind").is_empty() && field("kind") == field("listKind") {
        errs.push(invalid(
            "spec.names.listKind",
            &Value::from(field("listKind")),
            "kind and listKind must be different",
        ));
    }
    for list in ["shortNames", "categories"] {
        let items = names
            .get(list)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, item) in items.iter().enumerate() {
            let f = format!("spec.names.{list}[{i}]");
            match item.as_str() {
                Some(s) => label(&f, s, &mut errs),
                None => errs.push(invalid(&f, item, "must be a string")),
            }
            if items[..i].contains(item) {
                errs.push(duplicate(&f, item));
            }
        }
    }
    errs
}

fn validate_versions(obj: &Value) -> Vec<Cause> {
    let mut errs = Vec::new();
    let versions = obj
        .at("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push(required("spec.versions"));
        return errs;
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        errs.push(invalid(
            "spec.versions",
            &Value::from(
                versions
                    .iter()
                    .filter_map(|v| v.get("name").cloned())
                    .collect::<Vec<_>>(),
            ),
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let base = format!("spec.versions[{i}]");
        let name = v.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            errs.push(required(&format!("{base}.name")));
        } else {
            if validate::dns1035_label(name).is_err() {
                errs.push(invalid(
                    &format!("{base}.name"),
                    &Value::from(name),
                    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
                ));
            }
            if seen.contains(&name) {
                errs.push(duplicate(&format!("{base}.name"), &Value::from(name)));
            }
            seen.push(name);
        }
        for flag in ["served", "storage"] {
            if !v.get(flag).is_some_and(Value::is_boolean) {
                errs.push(required(&format!("{base}.{flag}")));
            }
        }
        match v.at("/schema/openAPIV3Schema") {
            None => errs.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: schemas are required".into(),
                field: format!("{base}.schema.openAPIV3Schema"),
            }),
            Some(s) => {
                let field = format!("{base}.schema.openAPIV3Schema");
                if s.get("type").and_then(Value::as_str) != Some("object") {
                    errs.push(invalid(
                        &format!("{field}.type"),
                        s.get("type").unwrap_or(&Value::Null),
                        "must be object",
                    ));
                }
                structural(s, &field, &mut errs);
            }
        }
        for (i, c) in v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let f = format!("{base}.additionalPrinterColumns[{i}]");
            let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
            if let Err(e) = crate::crd::ColumnPath::parse(path) {
                errs.push(invalid(
                    &format!("{f}.jsonPath"),
                    &Value::from(path),
                    &e.to_string(),
                ));
            }
            let ty = c.get("type").and_then(Value::as_str).unwrap_or("");
            if !["integer", "number", "string", "boolean", "date"].contains(&ty) {
                errs.push(not_supported(
                    &format!("{f}.type"),
                    &Value::from(ty),
                    &["integer", "number", "string", "boolean", "date"],
                ));
            }
        }
    }
    errs
}

/// Structural-schema rules: every node states its type (unless it preserves unknown
/// fields or is int-or-string), and patterns compile.
fn structural(s: &Value, field: &str, errs: &mut Vec<Cause>) {
    let flag = |n: &str| s.get(n).and_then(Value::as_bool).unwrap_or(false);
    let typed_node = s
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    if !typed_node
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        errs.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value: must not be empty for specified object fields".into(),
            field: format!("{field}.type"),
        });
    }
    if let Some(p) = s.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(p)
    {
        errs.push(invalid(
            &format!("{field}.pattern"),
            &Value::from(p),
            &format!("must be a valid regular expression, but isn't: {e}"),
        ));
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            structural(sub, &format!("{field}.properties[{k}]"), errs);
        }
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        structural(items, &format!("{field}.items"), errs);
    }
    if let Some(a) = s.get("additionalProperties").filter(|a| a.is_object()) {
        structural(a, &format!("{field}.additionalProperties"), errs);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::CrdHooks;
    use crate::registry::KindHooks;

    fn crd() -> serde_json::Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
                    }}}
                }]
            }
        })
    }

    fn fields(obj: &serde_json::Value) -> Vec<String> {
        let mut o = obj.clone();
        CrdHooks.default(&mut o);
        CrdHooks
            .validate(&o, None)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_good_definition_passes_and_gets_defaults() {
        let mut o = crd();
        CrdHooks.default(&mut o);
        assert_eq!(o["spec"]["names"]["singular"], "widget");
        assert_eq!(o["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(o["spec"]["conversion"]["strategy"], "None");
        assert!(fields(&crd()).is_empty(), "{:?}", fields(&crd()));
    }

    /// A change that breaks a good definition.
    type Edit = fn(&mut serde_json::Value);

    #[test]
    fn bad_definitions_name_the_field() {
        let cases: Vec<(Edit, &str)> = vec![
            (
                |o| o["metadata"]["name"] = json!("widgets.other.com"),
                "metadata.name: Invalid value: \"widgets.other.com\": must be spec.names.plural+\".\"+spec.group",
            ),
            (
                |o| o["spec"]["scope"] = json!("Global"),
                "spec.scope: Unsupported value: \"Global\"",
            ),
            (
                |o| o["spec"]["versions"][0]["storage"] = json!(false),
                "spec.versions: Invalid value: [\"v1\"]: must have exactly one version marked as storage version",
            ),
            (
                |o| {
                    o["spec"]["versions"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("schema");
                },
                "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required",
            ),
            (
                |o| {
                    o["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                        ["size"] = json!({"description": "no type"});
                },
                "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value",
            ),
            (
                |o| {
                    o["spec"]["group"] = json!("example");
                    o["metadata"]["name"] = json!("widgets.example");
                },
                "spec.group: Invalid value: \"example\": should be a domain with at least one dot",
            ),
            (
                |o| {
                    let v = o["spec"]["versions"][0].clone();
                    o["spec"]["versions"].as_array_mut().unwrap().push(v);
                },
                "spec.versions[1].name: Duplicate value",
            ),
        ];
        for (edit, want) in cases {
            let mut o = crd();
            edit(&mut o);
            let got = fields(&o);
            assert!(
                got.iter().any(|g| g.starts_with(want)),
                "want {want}, got {got:?}"
            );
        }
    }

    #[test]
    fn scope_cannot_change() {
        let old = crd();
        let mut new = crd();
        new["spec"]["scope"] = json!("Cluster");
        let errs = CrdHooks.validate(&new, Some(&old));
        assert!(errs.iter().any(|c| c.field == "spec.scope"), "{errs:?}");
    }
}

//! The definitions of the served kinds: the vendored Kubernetes ones, the schemas kinds
//! supply, their `List`s, and `autoscaling/v1` Scale.

use apimachinery::JsonPointer;
use serde_json::{Map, Value, json};

use super::{API_VERSION_DOC, KIND_DOC, LIST_META, OBJECT_META, SCALE, V2_REF};
use crate::registry::ResourceDef;

/// The definition name of a kind; kinds registered without one get a stable name so
/// that their paths still resolve.
pub(super) fn definition_name(d: &ResourceDef) -> String {
    if d.definition.is_empty() {
        let group = if d.group.is_empty() { "core" } else { d.group };
        format!("{group}.{}.{}", d.version, d.kind)
    } else {
        d.definition.to_string()
    }
}

/// A `x-kubernetes-group-version-kind` entry.
pub(super) fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

/// The definition of a kind the vendored file does not describe: the schema its
/// [`ResourceDef::schema`] builds, else an open object so clients do not reject its
/// fields; with the `apiVersion`, `kind` and `metadata` every object has.
pub(super) fn kind_schema(d: &ResourceDef) -> Value {
    let mut schema = match (&d.custom, d.schema) {
        (Some(custom), _) => (*custom.schema).clone(),
        (None, Some(build)) => build(),
        (None, None) => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    };
    let Some(obj) = schema.as_object_mut() else {
        return schema;
    };
    obj.remove("title");
    let spec_doc = obj
        .get("properties")
        .and_then(|p| p.at("/spec/description"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if !obj.get("description").is_some_and(Value::is_string) {
        let kind = d.kind;
        let description = spec_doc.map_or_else(
            || format!("{kind} is a {} object.", d.api_version()),
            |s| format!("{kind}: {s}"),
        );
        obj.insert("description".into(), description.into());
    }
    let props = obj
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(props) = props.as_object_mut() {
        props.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DOC, "type": "string"}),
        );
        props.insert(
            "kind".into(),
            json!({"description": KIND_DOC, "type": "string"}),
        );
        // CRD schemas leave metadata out (the server owns its shape); point it at
        // ObjectMeta so explain and merge patches see labels, annotations, etc.
        props.insert(
            "metadata".into(),
            json!({"$ref": format!("{V2_REF}{OBJECT_META}"), "description": "Standard object's metadata."}),
        );
    }
    obj.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([gvk(d.group, d.version, d.kind)]),
    );
    schema
}

/// Gives every list declared `x-kubernetes-list-type: map` with a single key the strategic
/// merge patch metadata built-in kinds carry for such lists (a Pod's conditions merge by
/// `type`): so writers that own different entries, like the scheduler's `Scheduled` and
/// the workload controller's `Propagated` condition on a Placement, patch their own entry
/// without a read-modify-write race. For a server to apply to the schemas it supplies.
pub fn merge_lists_by_key(schema: &mut Value) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let single_key = match (
        obj.get("x-kubernetes-list-type"),
        obj.get("x-kubernetes-list-map-keys"),
    ) {
        (Some(t), Some(Value::Array(keys))) if t == "map" && keys.len() == 1 => {
            keys[0].as_str().map(str::to_owned)
        }
        _ => None,
    };
    if let Some(key) = single_key {
        obj.insert("x-kubernetes-patch-strategy".into(), "merge".into());
        obj.insert("x-kubernetes-patch-merge-key".into(), key.into());
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.values_mut().for_each(merge_lists_by_key);
    }
    if let Some(items) = obj.get_mut("items") {
        merge_lists_by_key(items);
    }
    if let Some(extra) = obj.get_mut("additionalProperties") {
        merge_lists_by_key(extra);
    }
}

pub(super) fn list_schema(d: &ResourceDef, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}.", d.list_kind(), d.kind),
        "properties": {
            "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
            "items": {
                "description": format!("List of {}.", d.plural),
                "items": {"$ref": format!("{V2_REF}{item}")},
                "type": "array",
            },
            "kind": {"description": KIND_DOC, "type": "string"},
            "metadata": {
                "$ref": format!("{V2_REF}{LIST_META}"),
                "description": "Standard list metadata.",
            },
        },
        "required": ["items"],
        "type": "object",
        "x-kubernetes-group-version-kind": [gvk(d.group, d.version, &d.list_kind())],
    })
}

/// `autoscaling/v1` Scale, the body of `/scale`; the vendored file has no autoscaling
/// kinds because the server does not serve that group itself.
pub(super) fn add_scale(defs: &mut Map<String, Value>) {
    let meta = format!("{V2_REF}{OBJECT_META}");
    defs.entry(SCALE).or_insert_with(|| {
        json!({
            "description": "Scale represents a scaling request for a resource.",
            "properties": {
                "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
                "kind": {"description": KIND_DOC, "type": "string"},
                "metadata": {"$ref": meta, "description": "Standard object metadata."},
                "spec": {
                    "$ref": format!("{V2_REF}{SCALE}Spec"),
                    "description": "spec defines the behavior of the scale.",
                },
                "status": {
                    "$ref": format!("{V2_REF}{SCALE}Status"),
                    "description": "status is the current status of the scale. Read-only.",
                },
            },
            "type": "object",
            "x-kubernetes-group-version-kind": [gvk("autoscaling", "v1", "Scale")],
        })
    });
    defs.entry(format!("{SCALE}Spec")).or_insert_with(|| json!({
        "description": "ScaleSpec describes the attributes of a scale subresource.",
        "properties": {
            "replicas": {
                "description": "replicas is the desired number of instances for the scaled object.",
                "format": "int32",
                "type": "integer",
            },
        },
        "type": "object",
    }));
    defs.entry(format!("{SCALE}Status")).or_insert_with(|| json!({
        "description": "ScaleStatus represents the current state of a resource.",
        "properties": {
            "replicas": {
                "description": "replicas is the actual number of observed instances of the scaled object.",
                "format": "int32",
                "type": "integer",
            },
            "selector": {
                "description": "selector is the label query over pods that should match the replicas count, in the query-parameter syntax.",
                "type": "string",
            },
        },
        "required": ["replicas"],
        "type": "object",
    }));
}

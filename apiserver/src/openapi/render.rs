//! The documents: swagger 2.0 (`/openapi/v2`) and one OpenAPI 3.0 document per
//! group-version, from the operations and the v2 definitions (converted to v3 as
//! Kubernetes converts them).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use super::operations::{Body, Op, Param};
use super::{DELETE_OPTIONS, INT_OR_STRING, PATCH, QUANTITY, V2_REF, V3_REF};

// ---- v2 -----------------------------------------------------------------------------

fn v2_param(p: &Param) -> Value {
    json!({
        "name": p.name,
        "in": p.location,
        "description": p.description,
        "required": p.location == "path",
        "type": p.type_,
    })
}

fn v2_operation(op: &Op) -> Value {
    let mut params: Vec<Value> = op.params.iter().map(|p| v2_param(p)).collect();
    let consumes: Vec<&str> = match &op.body {
        Some(Body::Object(def)) => {
            params.push(json!({"name": "body", "in": "body", "required": true,
                "schema": {"$ref": format!("{V2_REF}{def}")}}));
            vec!["*/*"]
        }
        Some(Body::Patch(types)) => {
            params.push(json!({"name": "body", "in": "body", "required": true,
                "schema": {"$ref": format!("{V2_REF}{PATCH}")}}));
            types.to_vec()
        }
        Some(Body::Delete) => {
            params.push(json!({"name": "body", "in": "body",
                "schema": {"$ref": format!("{V2_REF}{DELETE_OPTIONS}")}}));
            vec!["*/*"]
        }
        None => vec!["*/*"],
    };
    let mut responses = Map::new();
    for code in op.codes {
        responses.insert(
            (*code).into(),
            json!({"description": code_text(code), "schema": {"$ref": format!("{V2_REF}{}", op.response)}}),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    json!({
        "description": op.description,
        "consumes": consumes,
        "produces": ["application/json"],
        "schemes": ["https"],
        "tags": [op.tag],
        "operationId": op.id,
        "parameters": params,
        "responses": responses,
        "x-kubernetes-action": op.action,
        "x-kubernetes-group-version-kind": op.gvk,
    })
}

fn code_text(code: &str) -> &'static str {
    match code {
        "201" => "Created",
        "202" => "Accepted",
        _ => "OK",
    }
}

pub(super) fn v2_document(ops: &[Op], defs: &Map<String, Value>) -> Value {
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for op in ops {
        paths
            .entry(op.path.as_str())
            .or_default()
            .insert(op.method.into(), v2_operation(op));
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Meridian", "version": "v1alpha1"},
        "paths": paths,
        "definitions": defs,
    })
}

// ---- v3 -----------------------------------------------------------------------------

fn schema_ref(def: &str) -> Value {
    json!({"$ref": format!("{V3_REF}{def}")})
}

fn v3_operation(op: &Op) -> Value {
    let params: Vec<Value> = op
        .params
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "in": p.location,
                "description": p.description,
                "required": p.location == "path",
                "schema": {"type": p.type_},
            })
        })
        .collect();
    let mut out = Map::new();
    out.insert("description".into(), op.description.clone().into());
    out.insert("tags".into(), json!([op.tag]));
    out.insert("operationId".into(), op.id.clone().into());
    out.insert("parameters".into(), params.into());
    let body = match &op.body {
        Some(Body::Object(def)) => Some(json!({
            "content": {"application/json": {"schema": schema_ref(def)}},
            "required": true,
        })),
        Some(Body::Patch(types)) => {
            let content: Map<String, Value> = types
                .iter()
                .map(|t| ((*t).to_string(), json!({"schema": schema_ref(PATCH)})))
                .collect();
            Some(json!({"content": content, "required": true}))
        }
        Some(Body::Delete) => Some(json!({
            "content": {"application/json": {"schema": schema_ref(DELETE_OPTIONS)}},
        })),
        None => None,
    };
    if let Some(body) = body {
        out.insert("requestBody".into(), body);
    }
    let mut responses = Map::new();
    for code in op.codes {
        responses.insert(
            (*code).into(),
            json!({
                "description": code_text(code),
                "content": {"application/json": {"schema": schema_ref(&op.response)}},
            }),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    out.insert("responses".into(), responses.into());
    out.insert("x-kubernetes-action".into(), op.action.into());
    out.insert("x-kubernetes-group-version-kind".into(), op.gvk.clone());
    Value::Object(out)
}

pub(super) fn v3_document(ops: &[&Op], v3_defs: &HashMap<&str, Value>) -> Value {
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for op in ops {
        paths
            .entry(op.path.as_str())
            .or_default()
            .insert(op.method.into(), v3_operation(op));
    }
    let paths = json!(paths);

    // The components are the closure of the definitions the operations reference.
    let mut todo = BTreeSet::new();
    collect_refs(&paths, &mut todo);
    let mut schemas = Map::new();
    while let Some(name) = todo.pop_first() {
        if schemas.contains_key(&name) {
            continue;
        }
        let Some(schema) = v3_defs.get(name.as_str()) else {
            continue;
        };
        let mut found = BTreeSet::new();
        collect_refs(schema, &mut found);
        todo.extend(found.into_iter().filter(|n| !schemas.contains_key(n)));
        schemas.insert(name, schema.clone());
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Meridian", "version": "v1alpha1"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// Names of the components referenced anywhere under `v`.
fn collect_refs(v: &Value, acc: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(name) = m
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(V3_REF))
            {
                acc.insert(name.to_string());
            }
            m.values().for_each(|x| collect_refs(x, acc));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, acc)),
        _ => {}
    }
}

/// A v2 definition as a v3 component. The v2 file spells IntOrString and Quantity
/// as strings; v3 readers (validation) need the real alternatives, so they take the
/// structural int-or-string shape and upstream's string-or-number shape. They stay
/// components, referenced by name, because kubectl explain names a field's type
/// after its ref.
pub(super) fn component_schema(name: &str, schema: &Value) -> Value {
    let description = schema.get("description").cloned().unwrap_or(Value::Null);
    match name {
        INT_OR_STRING => json!({
            "description": description,
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        }),
        QUANTITY => json!({
            "description": description,
            "oneOf": [{"type": "string"}, {"type": "number"}],
        }),
        _ => schema_v3(schema),
    }
}

/// Converts one v2 schema to v3 as Kubernetes does: refs point into
/// `components/schemas`, and a ref with sibling keywords is wrapped in `allOf`
/// (v3 ignores siblings of `$ref`, which would lose descriptions and, worse, the
/// patch merge keys kubectl apply reads).
fn schema_v3(node: &Value) -> Value {
    let Some(obj) = node.as_object() else {
        return node.clone();
    };
    let siblings: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| k.as_str() != "$ref")
        .map(|(k, v)| (k.clone(), keyword_v3(k, v)))
        .collect();
    let Some(target) = obj.get("$ref").and_then(Value::as_str) else {
        return Value::Object(siblings);
    };
    let name = target.strip_prefix(V2_REF).unwrap_or(target);
    if siblings.is_empty() {
        return schema_ref(name);
    }
    let mut out = Map::new();
    out.insert("allOf".into(), json!([schema_ref(name)]));
    out.extend(siblings);
    Value::Object(out)
}

/// Converts the value of one schema keyword, recursing only where it holds schemas.
fn keyword_v3(key: &str, v: &Value) -> Value {
    match (key, v) {
        ("properties" | "patternProperties" | "definitions", Value::Object(m)) => {
            Value::Object(m.iter().map(|(k, s)| (k.clone(), schema_v3(s))).collect())
        }
        ("items" | "allOf" | "anyOf" | "oneOf", Value::Array(a)) => {
            Value::Array(a.iter().map(schema_v3).collect())
        }
        ("items" | "additionalProperties" | "not", _) => schema_v3(v),
        _ => v.clone(),
    }
}

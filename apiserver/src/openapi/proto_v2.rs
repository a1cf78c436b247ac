//! The protobuf form of the swagger 2.0 document (gnostic's `openapi.v2.Document`), which
//! kubectl and client-go ask `/openapi/v2` for and parse without looking at the content
//! type. Encoded from the JSON document by tables of (JSON key, field number, shape), one
//! per gnostic message; maps become repeated `Named*` pairs and free-form values
//! (defaults, enums, examples, `x-` extensions) become `Any { yaml }`, whose YAML is the
//! value's JSON text (JSON is YAML).

use serde_json::{Map, Value};

/// The media type clients ask for (`Accept`).
pub const ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The media type of the answer, as kube-apiserver labels it.
pub const CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The forms `/openapi/v2` is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The swagger JSON document.
    Json,
    /// Gnostic's protobuf `Document`.
    Protobuf,
}

/// The form an `Accept` header asks for, its media types taken in the order given (as
/// client-go lists its preferences); `None` when it names only forms not served (a 406).
/// No header means JSON.
pub fn negotiate(accept: &str) -> Option<Form> {
    if accept.trim().is_empty() {
        return Some(Form::Json);
    }
    accept.split(',').find_map(|item| {
        let media = item.split(';').next().unwrap_or_default().trim();
        match media.to_ascii_lowercase().as_str() {
            ACCEPT | CONTENT_TYPE => Some(Form::Protobuf),
            "application/json" | "application/*" | "*/*" => Some(Form::Json),
            _ => None,
        }
    })
}

/// How one JSON key is encoded.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Bool,
    Double,
    Int,
    Strs,
    /// A free-form value: `Any { yaml = 2 }`.
    Any,
    /// A list of free-form values: repeated `Any`.
    Anys,
    /// A nested message from its own table.
    Msg(&'static Table),
    /// A list of nested messages of one table.
    Msgs(&'static Table),
    /// A message whose shape depends on the value (oneofs, JSON maps).
    Custom(fn(&Value, &mut Vec<u8>)),
    /// A list of [`Ty::Custom`] messages.
    Customs(fn(&Value, &mut Vec<u8>)),
}

/// One gnostic message: its fields and where `x-` keys go (0: nowhere).
struct Table {
    fields: &'static [(&'static str, u32, Ty)],
    vendor: u32,
}

const LEN: u8 = 2;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn len_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, LEN);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A nested message written by `f`, length-prefixed under `field`.
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    f(&mut inner);
    len_field(out, field, &inner);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    // proto3: an empty string is the default and is not written.
    if !s.is_empty() {
        len_field(out, field, s.as_bytes());
    }
}

fn any(out: &mut Vec<u8>, field: u32, v: &Value) {
    message(out, field, |m| {
        len_field(
            m,
            2,
            serde_json::to_string(v).unwrap_or_default().as_bytes(),
        )
    });
}

fn named_any(out: &mut Vec<u8>, field: u32, name: &str, v: &Value) {
    message(out, field, |m| {
        string(m, 1, name);
        any(m, 2, v);
    });
}

fn encode_field(out: &mut Vec<u8>, num: u32, ty: Ty, v: &Value) {
    match ty {
        Ty::Str => string(out, num, v.as_str().unwrap_or_default()),
        Ty::Bool => {
            if v.as_bool() == Some(true) {
                tag(out, num, 0);
                varint(out, 1);
            }
        }
        Ty::Double => {
            if let Some(f) = v.as_f64() {
                tag(out, num, 1);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        Ty::Int => {
            if let Some(i) = v.as_i64() {
                tag(out, num, 0);
                // Negative int64 values are ten-byte varints of their two's complement.
                varint(out, i as u64);
            }
        }
        Ty::Strs => {
            for s in v.as_array().into_iter().flatten().filter_map(Value::as_str) {
                len_field(out, num, s.as_bytes());
            }
        }
        Ty::Any => any(out, num, v),
        Ty::Anys => {
            for item in v.as_array().into_iter().flatten() {
                any(out, num, item);
            }
        }
        Ty::Msg(table) => message(out, num, |m| encode(m, table, v)),
        Ty::Msgs(table) => {
            for item in v.as_array().into_iter().flatten() {
                message(out, num, |m| encode(m, table, item));
            }
        }
        Ty::Custom(f) => message(out, num, |m| f(v, m)),
        Ty::Customs(f) => {
            for item in v.as_array().into_iter().flatten() {
                message(out, num, |m| f(item, m));
            }
        }
    }
}

/// Encodes a JSON object by its table, fields in field-number order as protobuf
/// encoders write them.
fn encode(out: &mut Vec<u8>, table: &Table, v: &Value) {
    let Some(obj) = v.as_object() else { return };
    for (key, num, ty) in table.fields {
        if let Some(field) = obj.get(*key) {
            encode_field(out, *num, *ty, field);
        }
    }
    if table.vendor != 0 {
        vendor(out, table.vendor, obj);
    }
}

fn vendor(out: &mut Vec<u8>, field: u32, obj: &Map<String, Value>) {
    for (k, v) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
        named_any(out, field, k, v);
    }
}

/// A JSON map as repeated `Named* { name = 1; value = 2 }` under `field`.
fn named_map(out: &mut Vec<u8>, field: u32, v: &Value, value: fn(&Value, &mut Vec<u8>)) {
    for (k, item) in v.as_object().into_iter().flatten() {
        message(out, field, |m| {
            string(m, 1, k);
            message(m, 2, |inner| value(item, inner));
        });
    }
}

// ---- Schema ---------------------------------------------------------------------------

static SCHEMA: Table = Table {
    fields: &[
        ("$ref", 1, Ty::Str),
        ("format", 2, Ty::Str),
        ("title", 3, Ty::Str),
        ("description", 4, Ty::Str),
        ("default", 5, Ty::Any),
        ("multipleOf", 6, Ty::Double),
        ("maximum", 7, Ty::Double),
        ("exclusiveMaximum", 8, Ty::Bool),
        ("minimum", 9, Ty::Double),
        ("exclusiveMinimum", 10, Ty::Bool),
        ("maxLength", 11, Ty::Int),
        ("minLength", 12, Ty::Int),
        ("pattern", 13, Ty::Str),
        ("maxItems", 14, Ty::Int),
        ("minItems", 15, Ty::Int),
        ("uniqueItems", 16, Ty::Bool),
        ("maxProperties", 17, Ty::Int),
        ("minProperties", 18, Ty::Int),
        ("required", 19, Ty::Strs),
        ("enum", 20, Ty::Anys),
        (
            "additionalProperties",
            21,
            Ty::Custom(additional_properties),
        ),
        ("type", 22, Ty::Custom(type_item)),
        ("items", 23, Ty::Custom(items_item)),
        ("allOf", 24, Ty::Msgs(&SCHEMA)),
        ("properties", 25, Ty::Custom(properties)),
        ("discriminator", 26, Ty::Str),
        ("readOnly", 27, Ty::Bool),
        ("externalDocs", 29, Ty::Msg(&EXTERNAL_DOCS)),
        ("example", 30, Ty::Any),
    ],
    vendor: 31,
};

static EXTERNAL_DOCS: Table = Table {
    fields: &[("description", 1, Ty::Str), ("url", 2, Ty::Str)],
    vendor: 3,
};

fn schema(v: &Value, out: &mut Vec<u8>) {
    encode(out, &SCHEMA, v)
}

/// `AdditionalPropertiesItem`: `oneof { Schema schema = 1; bool boolean = 2; }`.
fn additional_properties(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Bool(b) => {
            tag(out, 2, 0);
            varint(out, u64::from(*b));
        }
        _ => message(out, 1, |m| schema(v, m)),
    }
}

/// `TypeItem { repeated string value = 1; }` from a type name or a list of them.
fn type_item(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::String(s) => len_field(out, 1, s.as_bytes()),
        _ => encode_field(out, 1, Ty::Strs, v),
    }
}

/// `ItemsItem { repeated Schema schema = 1; }` from a schema or a list of them.
fn items_item(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Array(list) => {
            for s in list {
                message(out, 1, |m| schema(s, m));
            }
        }
        _ => message(out, 1, |m| schema(v, m)),
    }
}

/// `Properties` and `Definitions`: `{ repeated NamedSchema additional_properties = 1; }`.
fn properties(v: &Value, out: &mut Vec<u8>) {
    named_map(out, 1, v, schema)
}

// ---- Parameters and operations ---------------------------------------------------------

static PRIMITIVES_ITEMS: Table = Table {
    fields: &[
        ("type", 1, Ty::Str),
        ("format", 2, Ty::Str),
        ("items", 3, Ty::Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 4, Ty::Str),
        ("default", 5, Ty::Any),
        ("maximum", 6, Ty::Double),
        ("exclusiveMaximum", 7, Ty::Bool),
        ("minimum", 8, Ty::Double),
        ("exclusiveMinimum", 9, Ty::Bool),
        ("maxLength", 10, Ty::Int),
        ("minLength", 11, Ty::Int),
        ("pattern", 12, Ty::Str),
        ("maxItems", 13, Ty::Int),
        ("minItems", 14, Ty::Int),
        ("uniqueItems", 15, Ty::Bool),
        ("enum", 16, Ty::Anys),
        ("multipleOf", 17, Ty::Double),
    ],
    vendor: 18,
};

static BODY_PARAMETER: Table = Table {
    fields: &[
        ("description", 1, Ty::Str),
        ("name", 2, Ty::Str),
        ("in", 3, Ty::Str),
        ("required", 4, Ty::Bool),
        ("schema", 5, Ty::Msg(&SCHEMA)),
    ],
    vendor: 6,
};

/// Query and formData parameters: `allowEmptyValue` sits at 5, the rest one further on.
static QUERY_PARAMETER: Table = Table {
    fields: &[
        ("required", 1, Ty::Bool),
        ("in", 2, Ty::Str),
        ("description", 3, Ty::Str),
        ("name", 4, Ty::Str),
        ("allowEmptyValue", 5, Ty::Bool),
        ("type", 6, Ty::Str),
        ("format", 7, Ty::Str),
        ("items", 8, Ty::Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 9, Ty::Str),
        ("default", 10, Ty::Any),
        ("maximum", 11, Ty::Double),
        ("exclusiveMaximum", 12, Ty::Bool),
        ("minimum", 13, Ty::Double),
        ("exclusiveMinimum", 14, Ty::Bool),
        ("maxLength", 15, Ty::Int),
        ("minLength", 16, Ty::Int),
        ("pattern", 17, Ty::Str),
        ("maxItems", 18, Ty::Int),
        ("minItems", 19, Ty::Int),
        ("uniqueItems", 20, Ty::Bool),
        ("enum", 21, Ty::Anys),
        ("multipleOf", 22, Ty::Double),
    ],
    vendor: 23,
};

/// Path and header parameters (no `allowEmptyValue`).
static PATH_PARAMETER: Table = Table {
    fields: &[
        ("required", 1, Ty::Bool),
        ("in", 2, Ty::Str),
        ("description", 3, Ty::Str),
        ("name", 4, Ty::Str),
        ("type", 5, Ty::Str),
        ("format", 6, Ty::Str),
        ("items", 7, Ty::Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 8, Ty::Str),
        ("default", 9, Ty::Any),
        ("maximum", 10, Ty::Double),
        ("exclusiveMaximum", 11, Ty::Bool),
        ("minimum", 12, Ty::Double),
        ("exclusiveMinimum", 13, Ty::Bool),
        ("maxLength", 14, Ty::Int),
        ("minLength", 15, Ty::Int),
        ("pattern", 16, Ty::Str),
        ("maxItems", 17, Ty::Int),
        ("minItems", 18, Ty::Int),
        ("uniqueItems", 19, Ty::Bool),
        ("enum", 20, Ty::Anys),
        ("multipleOf", 21, Ty::Double),
    ],
    vendor: 22,
};

static JSON_REFERENCE: Table = Table {
    fields: &[("$ref", 1, Ty::Str), ("description", 2, Ty::Str)],
    vendor: 0,
};

/// `Parameter`: `oneof { BodyParameter = 1; NonBodyParameter = 2; }`, the latter
/// `oneof { header = 1; formData = 2; query = 3; path = 4; }`.
fn parameter(v: &Value, out: &mut Vec<u8>) {
    let (sub, table) = match v.get("in").and_then(Value::as_str) {
        Some("body") => return message(out, 1, |m| encode(m, &BODY_PARAMETER, v)),
        Some("header") => (1, &PATH_PARAMETER),
        Some("formData") => (2, &QUERY_PARAMETER),
        Some("path") => (4, &PATH_PARAMETER),
        _ => (3, &QUERY_PARAMETER),
    };
    message(out, 2, |m| message(m, sub, |inner| encode(inner, table, v)));
}

/// `ParametersItem`: `oneof { Parameter parameter = 1; JsonReference json_reference = 2; }`.
fn parameters_item(v: &Value, out: &mut Vec<u8>) {
    if v.get("$ref").is_some() {
        message(out, 2, |m| encode(m, &JSON_REFERENCE, v));
    } else {
        message(out, 1, |m| parameter(v, m));
    }
}

static RESPONSE: Table = Table {
    fields: &[
        ("description", 1, Ty::Str),
        // `SchemaItem`: `oneof { Schema schema = 1; FileSchema file_schema = 2; }`.
        (
            "schema",
            2,
            Ty::Custom(|v, out| message(out, 1, |m| schema(v, m))),
        ),
    ],
    vendor: 5,
};

/// `Responses { repeated NamedResponseValue response_code = 1; vendor = 2 }`, each value
/// `ResponseValue`: `oneof { Response response = 1; JsonReference json_reference = 2; }`.
fn responses(v: &Value, out: &mut Vec<u8>) {
    let Some(obj) = v.as_object() else { return };
    for (code, resp) in obj.iter().filter(|(k, _)| !k.starts_with("x-")) {
        message(out, 1, |m| {
            string(m, 1, code);
            message(m, 2, |rv| {
                if resp.get("$ref").is_some() {
                    message(rv, 2, |r| encode(r, &JSON_REFERENCE, resp));
                } else {
                    message(rv, 1, |r| encode(r, &RESPONSE, resp));
                }
            });
        });
    }
    vendor(out, 2, obj);
}

static OPERATION: Table = Table {
    fields: &[
        ("tags", 1, Ty::Strs),
        ("summary", 2, Ty::Str),
        ("description", 3, Ty::Str),
        ("externalDocs", 4, Ty::Msg(&EXTERNAL_DOCS)),
        ("operationId", 5, Ty::Str),
        ("produces", 6, Ty::Strs),
        ("consumes", 7, Ty::Strs),
        ("parameters", 8, Ty::Customs(parameters_item)),
        ("responses", 9, Ty::Custom(responses)),
        ("schemes", 10, Ty::Strs),
        ("deprecated", 11, Ty::Bool),
        ("security", 12, Ty::Customs(security_requirement)),
    ],
    vendor: 13,
};

static PATH_ITEM: Table = Table {
    fields: &[
        ("$ref", 1, Ty::Str),
        ("get", 2, Ty::Msg(&OPERATION)),
        ("put", 3, Ty::Msg(&OPERATION)),
        ("post", 4, Ty::Msg(&OPERATION)),
        ("delete", 5, Ty::Msg(&OPERATION)),
        ("options", 6, Ty::Msg(&OPERATION)),
        ("head", 7, Ty::Msg(&OPERATION)),
        ("patch", 8, Ty::Msg(&OPERATION)),
        ("parameters", 9, Ty::Customs(parameters_item)),
    ],
    vendor: 10,
};

/// `Paths { vendor = 1; repeated NamedPathItem path = 2; }`.
fn paths(v: &Value, out: &mut Vec<u8>) {
    let Some(obj) = v.as_object() else { return };
    vendor(out, 1, obj);
    for (path, item) in obj.iter().filter(|(k, _)| !k.starts_with("x-")) {
        message(out, 2, |m| {
            string(m, 1, path);
            message(m, 2, |inner| encode(inner, &PATH_ITEM, item));
        });
    }
}

/// `SecurityRequirement { repeated NamedStringArray additional_properties = 1; }`.
fn security_requirement(v: &Value, out: &mut Vec<u8>) {
    named_map(out, 1, v, |scopes, m| encode_field(m, 1, Ty::Strs, scopes))
}

static API_KEY_SECURITY: Table = Table {
    fields: &[
        ("type", 1, Ty::Str),
        ("name", 2, Ty::Str),
        ("in", 3, Ty::Str),
        ("description", 4, Ty::Str),
    ],
    vendor: 5,
};

static BASIC_SECURITY: Table = Table {
    fields: &[("type", 1, Ty::Str), ("description", 2, Ty::Str)],
    vendor: 3,
};

/// `SecurityDefinitions`: named `SecurityDefinitionsItem` oneofs (basic = 1, apiKey = 2;
/// the API server publishes no OAuth2 schemes).
fn security_definitions(v: &Value, out: &mut Vec<u8>) {
    named_map(out, 1, v, |item, m| {
        match item.get("type").and_then(Value::as_str) {
            Some("basic") => message(m, 1, |s| encode(s, &BASIC_SECURITY, item)),
            _ => message(m, 2, |s| encode(s, &API_KEY_SECURITY, item)),
        }
    })
}

static INFO: Table = Table {
    fields: &[
        ("title", 1, Ty::Str),
        ("version", 2, Ty::Str),
        ("description", 3, Ty::Str),
        ("termsOfService", 4, Ty::Str),
    ],
    vendor: 7,
};

/// Named parameters (`#/parameters/...`): `ParameterDefinitions { NamedParameter = 1 }`.
fn parameter_definitions(v: &Value, out: &mut Vec<u8>) {
    named_map(out, 1, v, parameter)
}

static DOCUMENT: Table = Table {
    fields: &[
        ("swagger", 1, Ty::Str),
        ("info", 2, Ty::Msg(&INFO)),
        ("host", 3, Ty::Str),
        ("basePath", 4, Ty::Str),
        ("schemes", 5, Ty::Strs),
        ("consumes", 6, Ty::Strs),
        ("produces", 7, Ty::Strs),
        ("paths", 8, Ty::Custom(paths)),
        ("definitions", 9, Ty::Custom(properties)),
        ("parameters", 10, Ty::Custom(parameter_definitions)),
        ("security", 12, Ty::Customs(security_requirement)),
        ("securityDefinitions", 13, Ty::Custom(security_definitions)),
    ],
    vendor: 16,
};

/// The gnostic protobuf encoding of a swagger 2.0 document.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    encode(&mut out, &DOCUMENT, doc);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Form, encode_document, negotiate};

    #[test]
    fn the_accept_header_picks_the_form() {
        assert_eq!(negotiate(""), Some(Form::Json));
        assert_eq!(negotiate("application/json"), Some(Form::Json));
        assert_eq!(
            negotiate("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
            Some(Form::Protobuf)
        );
        assert_eq!(
            negotiate(
                "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json"
            ),
            Some(Form::Protobuf)
        );
        assert_eq!(negotiate("text/html, */*;q=0.8"), Some(Form::Json));
        assert_eq!(negotiate("application/yaml"), None);
    }

    /// A minimal protobuf reader: the (field, wire type, payload) triples of one message,
    /// payloads of varints as their value's bytes.
    fn fields(mut b: &[u8]) -> Vec<(u32, u8, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            let (field, wire) = ((key >> 3) as u32, (key & 7) as u8);
            let payload = match wire {
                0 => varint(&mut b).to_le_bytes().to_vec(),
                1 => {
                    let (p, rest) = b.split_at(8);
                    b = rest;
                    p.to_vec()
                }
                2 => {
                    let n = varint(&mut b) as usize;
                    let (p, rest) = b.split_at(n);
                    b = rest;
                    p.to_vec()
                }
                w => panic!("unexpected wire type {w}"),
            };
            out.push((field, wire, payload));
        }
        out
    }

    fn field(msg: &[u8], n: u32) -> Vec<Vec<u8>> {
        fields(msg)
            .into_iter()
            .filter(|(f, _, _)| *f == n)
            .map(|(_, _, p)| p)
            .collect()
    }

    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn definitions_are_named_schemas_with_their_extensions() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "t", "version": "v"},
            "definitions": {"io.k8s.api.core.v1.ServiceAccount": {
                "type": "object",
                "required": ["metadata"],
                "properties": {
                    "automount": {"type": "boolean", "default": true},
                    "secrets": {"type": "array", "items": {"$ref": "#/definitions/x"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "replicas": {"type": "integer", "minimum": 0},
                },
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "ServiceAccount", "version": "v1"}],
            }},
        });
        let bytes = encode_document(&doc);
        assert_eq!(text(&field(&bytes, 1)[0]), "2.0");
        let info = &field(&bytes, 2)[0];
        assert_eq!(text(&field(info, 1)[0]), "t");

        let defs = &field(&bytes, 9)[0];
        let named = &field(defs, 1)[0];
        assert_eq!(
            text(&field(named, 1)[0]),
            "io.k8s.api.core.v1.ServiceAccount"
        );
        let sa = &field(named, 2)[0];
        assert_eq!(text(&field(&field(sa, 22)[0], 1)[0]), "object");
        assert_eq!(text(&field(sa, 19)[0]), "metadata");
        let ext = &field(sa, 31)[0];
        assert_eq!(text(&field(ext, 1)[0]), "x-kubernetes-group-version-kind");
        let yaml = text(&field(&field(ext, 2)[0], 2)[0]).to_string();
        let parsed: serde_json::Value = serde_json::from_str(&yaml).unwrap();
        assert_eq!(parsed[0]["kind"], "ServiceAccount");

        let props = &field(sa, 25)[0];
        let by_name: Vec<(String, Vec<u8>)> = field(props, 1)
            .iter()
            .map(|p| (text(&field(p, 1)[0]).to_string(), field(p, 2)[0].clone()))
            .collect();
        let prop = |n: &str| &by_name.iter().find(|(k, _)| k == n).unwrap().1;
        // `default: true` as `Any { yaml: "true" }`.
        assert_eq!(text(&field(&field(prop("automount"), 5)[0], 2)[0]), "true");
        // items: `ItemsItem { schema: [ { _ref } ] }`.
        let items = &field(prop("secrets"), 23)[0];
        assert_eq!(text(&field(&field(items, 1)[0], 1)[0]), "#/definitions/x");
        // additionalProperties: the schema arm of the oneof.
        let ap = &field(prop("labels"), 21)[0];
        assert_eq!(
            text(&field(&field(&field(ap, 1)[0], 22)[0], 1)[0]),
            "string"
        );
        // A zero minimum is still written, as a double.
        assert_eq!(field(prop("replicas"), 9)[0], 0f64.to_le_bytes());
    }

    #[test]
    fn operations_carry_their_parameters_by_location() {
        let doc = json!({"paths": {"/api/v1/namespaces/{namespace}/serviceaccounts": {
            "parameters": [{"$ref": "#/parameters/namespace"}],
            "patch": {
                "operationId": "patchSA",
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "type": "string"},
                    {"name": "name", "in": "path", "required": true, "type": "string"},
                    {"name": "body", "in": "body", "required": true, "schema": {"type": "object"}},
                ],
                "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/sa"}}},
                "x-kubernetes-action": "patch",
            },
        }}});
        let bytes = encode_document(&doc);
        let paths = &field(&bytes, 8)[0];
        let named = &field(paths, 2)[0];
        assert_eq!(
            text(&field(named, 1)[0]),
            "/api/v1/namespaces/{namespace}/serviceaccounts"
        );
        let item = &field(named, 2)[0];
        let reference = &field(&field(item, 9)[0], 2)[0];
        assert_eq!(text(&field(reference, 1)[0]), "#/parameters/namespace");
        let op = &field(item, 8)[0];
        assert_eq!(text(&field(op, 5)[0]), "patchSA");
        let params = field(op, 8);
        // query: ParametersItem.parameter -> Parameter.non_body -> query (3), name at 4.
        let query = &field(&field(&field(&params[0], 1)[0], 2)[0], 3)[0];
        assert_eq!(text(&field(query, 4)[0]), "fieldValidation");
        let path = &field(&field(&field(&params[1], 1)[0], 2)[0], 4)[0];
        assert_eq!(field(path, 1)[0][0], 1, "required");
        let body = &field(&field(&params[2], 1)[0], 1)[0];
        assert_eq!(text(&field(body, 2)[0]), "body");
        let responses = &field(op, 9)[0];
        let ok = &field(responses, 1)[0];
        assert_eq!(text(&field(ok, 1)[0]), "200");
        let response = &field(&field(ok, 2)[0], 1)[0];
        assert_eq!(text(&field(response, 1)[0]), "OK");
        let ext = &field(op, 13)[0];
        assert_eq!(text(&field(ext, 1)[0]), "x-kubernetes-action");
    }
}

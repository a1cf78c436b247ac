//! The decoding table: for each OpenAPI definition, its protobuf fields with
//! their numbers, wire kinds and JSON names, as written by
//! `tools/gen-k8s-protobuf.py`.

use std::collections::HashMap;

use serde_json::Value;

use super::ProtoError;

/// Protobuf field tables for Kubernetes types, keyed by OpenAPI definition
/// name (`io.k8s.api.core.v1.ConfigMap`).
///
/// Built from the JSON table in `apiserver/openapi/k8s-protobuf.json`;
/// the caller embeds that file, so nothing is read at run time.
#[derive(Debug, Clone)]
pub struct ProtoSchema {
    definitions: HashMap<String, Definition>,
}

/// How one type is decoded.
#[derive(Debug, Clone)]
pub(crate) enum Definition {
    /// A message whose JSON form is an object.
    Message(Message),
    /// A Go named slice: a message around one repeated field, whose JSON form
    /// is that field's array.
    List(Message),
    /// A type with a hand-written JSON form.
    Special(Special),
}

/// Types whose JSON form Kubernetes writes by hand: none is an object with
/// the message's fields, so they are recognised by definition name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    Time,
    MicroTime,
    Duration,
    IntOrString,
    Quantity,
    RawExtension,
    FieldsV1,
}

impl Special {
    fn by_name(name: &str) -> Option<(Special, &'static str)> {
        Some(match name {
            "io.k8s.apimachinery.pkg.apis.meta.v1.Time" => (Special::Time, "time"),
            "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime" => (Special::MicroTime, "microtime"),
            "io.k8s.apimachinery.pkg.apis.meta.v1.Duration" => (Special::Duration, "duration"),
            "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1" => (Special::FieldsV1, "fieldsv1"),
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => {
                (Special::IntOrString, "intorstring")
            }
            "io.k8s.apimachinery.pkg.api.resource.Quantity" => (Special::Quantity, "quantity"),
            "io.k8s.apimachinery.pkg.runtime.RawExtension" => {
                (Special::RawExtension, "rawextension")
            }
            _ => return None,
        })
    }
}

/// A message's fields, sorted by tag for lookup.
#[derive(Debug, Clone, Default)]
pub(crate) struct Message {
    pub(crate) fields: Vec<Field>,
}

impl Message {
    pub(crate) fn field(&self, tag: u32) -> Option<usize> {
        self.fields.binary_search_by_key(&tag, |f| f.tag).ok()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Field {
    pub(crate) tag: u32,
    /// The JSON property; `None` for a Go struct embedded `json:",inline"`,
    /// whose properties land in the parent object.
    pub(crate) json: Option<String>,
    pub(crate) kind: Kind,
    pub(crate) repeated: bool,
}

impl Field {
    /// The name used in error messages.
    pub(crate) fn label(&self) -> String {
        match &self.json {
            Some(json) => json.clone(),
            None => format!("<inline {}>", self.tag),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    String,
    Int32,
    Int64,
    Bool,
    Double,
    Bytes,
}

impl Scalar {
    fn parse(kind: &str) -> Option<Scalar> {
        Some(match kind {
            "string" => Scalar::String,
            "int32" => Scalar::Int32,
            "int64" => Scalar::Int64,
            "bool" => Scalar::Bool,
            "double" => Scalar::Double,
            "bytes" => Scalar::Bytes,
            _ => return None,
        })
    }

    /// Whether repeated values of this kind may arrive packed into one
    /// length-delimited payload.
    pub(crate) fn packable(self) -> bool {
        !matches!(self, Scalar::String | Scalar::Bytes)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Scalar(Scalar),
    /// An embedded message of the named definition.
    Message(String),
    /// `map<string, V>`: repeated entries `{1: key, 2: value}`.
    Map(MapValue),
}

/// A map's value kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MapValue {
    Scalar(Scalar),
    Message(String),
}

fn invalid(name: &str, why: impl std::fmt::Display) -> ProtoError {
    ProtoError::InvalidSchema(format!("{name}: {why}"))
}

impl ProtoSchema {
    /// Reads the table written by `tools/gen-k8s-protobuf.py`:
    /// `{"definitions": {NAME: {"fields": [...]} | {"special": ...}}}`.
    ///
    /// Every message a field refers to must be in the table, so decoding
    /// never meets an unknown nested type.
    pub fn from_json(table: &Value) -> Result<Self, ProtoError> {
        let entries = table
            .get("definitions")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("table", "no \"definitions\" object"))?;
        let mut definitions = HashMap::with_capacity(entries.len());
        for (name, entry) in entries {
            definitions.insert(name.clone(), parse_definition(name, entry)?);
        }
        let schema = ProtoSchema { definitions };
        schema.check_references()?;
        Ok(schema)
    }

    /// Number of definitions in the table.
    pub fn len(&self) -> usize {
        self.definitions.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.definitions.is_empty()
    }

    /// Whether `definition` (an OpenAPI name) can be decoded.
    pub fn contains(&self, definition: &str) -> bool {
        self.definitions.contains_key(definition)
    }

    /// The definition names in the table, in no particular order.
    pub fn definitions(&self) -> impl Iterator<Item = &str> {
        self.definitions.keys().map(String::as_str)
    }

    pub(crate) fn get(&self, definition: &str) -> Option<&Definition> {
        self.definitions.get(definition)
    }

    fn check_references(&self) -> Result<(), ProtoError> {
        for (name, definition) in &self.definitions {
            let (Definition::Message(message) | Definition::List(message)) = definition else {
                continue;
            };
            for field in &message.fields {
                let target = match &field.kind {
                    Kind::Message(target) | Kind::Map(MapValue::Message(target)) => target,
                    _ => continue,
                };
                match self.definitions.get(target) {
                    None => return Err(invalid(name, format!("refers to unknown {target}"))),
                    // An inline field's properties are spliced into the
                    // parent, which only works for an object.
                    Some(Definition::Message(_)) => {}
                    Some(_) if field.json.is_none() => {
                        return Err(invalid(name, format!("cannot inline {target}")));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

fn parse_definition(name: &str, entry: &Value) -> Result<Definition, ProtoError> {
    let special = entry.get("special").map(|s| s.as_str().unwrap_or_default());
    if let Some((kind, label)) = Special::by_name(name) {
        // Decoded by name whatever the table says; a different label means
        // the table and this code disagree about the type.
        return match special {
            Some(s) if s != label => {
                Err(invalid(name, format!("special {s:?}, expected {label:?}")))
            }
            _ => Ok(Definition::Special(kind)),
        };
    }
    let fields = match entry.get("fields") {
        Some(Value::Array(rows)) => rows
            .iter()
            .map(|row| parse_field(name, row))
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(invalid(name, "\"fields\" is not an array")),
        None => return Err(invalid(name, "neither \"fields\" nor a known special type")),
    };
    let mut message = Message { fields };
    message.fields.sort_by_key(|f| f.tag);
    if message.fields.windows(2).any(|w| w[0].tag == w[1].tag) {
        return Err(invalid(name, "duplicate tag"));
    }
    match special {
        None => Ok(Definition::Message(message)),
        Some("list") => match message.fields.as_slice() {
            [field] if field.repeated && field.json.is_some() => Ok(Definition::List(message)),
            _ => Err(invalid(name, "a list wraps exactly one repeated field")),
        },
        Some(other) => Err(invalid(name, format!("unknown special {other:?}"))),
    }
}

fn parse_field(name: &str, row: &Value) -> Result<Field, ProtoError> {
    let str_of = |key: &str| row.get(key).and_then(Value::as_str);
    let tag = row
        .get("tag")
        .and_then(Value::as_u64)
        .filter(|&t| (1..1 << 29).contains(&t))
        .ok_or_else(|| invalid(name, format!("bad tag in {row}")))? as u32;
    let inline = row.get("inline").and_then(Value::as_bool).unwrap_or(false);
    let json = match (str_of("json"), inline) {
        (Some(json), false) if !json.is_empty() => Some(json.to_owned()),
        (None, true) => None,
        _ => {
            return Err(invalid(
                name,
                format!("field {tag} needs a json name or inline"),
            ));
        }
    };
    let repeated = row
        .get("repeated")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let message_type = || {
        str_of("type")
            .map(str::to_owned)
            .ok_or_else(|| invalid(name, format!("field {tag} has no message type")))
    };
    let kind = match str_of("kind").unwrap_or_default() {
        "message" => Kind::Message(message_type()?),
        "map" => {
            if str_of("key") != Some("string") || repeated {
                return Err(invalid(name, format!("field {tag}: only map<string, V>")));
            }
            match str_of("value").unwrap_or_default() {
                "message" => Kind::Map(MapValue::Message(message_type()?)),
                other => Kind::Map(MapValue::Scalar(Scalar::parse(other).ok_or_else(|| {
                    invalid(name, format!("field {tag}: map value kind {other:?}"))
                })?)),
            }
        }
        other => Kind::Scalar(
            Scalar::parse(other)
                .ok_or_else(|| invalid(name, format!("field {tag}: kind {other:?}")))?,
        ),
    };
    if inline && (repeated || !matches!(kind, Kind::Message(_))) {
        return Err(invalid(
            name,
            format!("field {tag}: only a single message can be inline"),
        ));
    }
    Ok(Field {
        tag,
        json,
        kind,
        repeated,
    })
}

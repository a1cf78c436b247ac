//! Decoding Kubernetes protobuf request bodies
//! (`application/vnd.kubernetes.protobuf`) into the JSON a client would
//! have sent for the same object.
//!
//! A body is the magic `k8s\0` followed by a `runtime.Unknown` message whose
//! `raw` field holds the object encoded per its `generated.proto`. The field
//! numbers, kinds and JSON names come from a [`ProtoSchema`] table; the
//! handful of types Kubernetes serialises by hand (times, quantities,
//! int-or-string, raw JSON) are converted by name, matching what the API
//! server writes in JSON.
//!
//! Presence follows the wire: a field appears in the JSON exactly when it was
//! encoded. Go's encoder writes non-pointer fields even when they hold the
//! zero value (`"namespace": ""`, `"generation": 0`), so those show up too.

mod format;
mod schema;
mod wire;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

pub use schema::ProtoSchema;
use schema::{Definition, Field, Kind, MapValue, Message, Scalar, Special};
use wire::{Payload, Reader};

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Nesting limit, so a hostile body of nested messages cannot exhaust the
/// stack; real Kubernetes objects stay well below it.
const MAX_DEPTH: usize = 100;

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The body does not start with the `k8s\0` magic.
    #[error("not a Kubernetes protobuf body: missing the k8s\\0 prefix")]
    BadMagic,
    /// The input ended inside a field (a varint, a fixed-width value or a
    /// length-delimited payload longer than what is left).
    #[error("truncated protobuf input at byte {offset}")]
    Truncated {
        /// Byte offset within the message being read.
        offset: usize,
    },
    /// A varint ran past ten bytes.
    #[error("varint longer than 10 bytes at byte {offset}")]
    VarintOverflow {
        /// Byte offset within the message being read.
        offset: usize,
    },
    /// A field key with field number 0 or above 2^29 - 1.
    #[error("invalid protobuf field number at byte {offset}")]
    InvalidTag {
        /// Byte offset within the message being read.
        offset: usize,
    },
    /// Wire types 3, 4 (groups), 6 and 7, which no Kubernetes type uses.
    #[error("unsupported protobuf wire type {wire_type} at byte {offset}")]
    UnsupportedWireType {
        /// Byte offset within the message being read.
        offset: usize,
        /// The wire type found.
        wire_type: u8,
    },
    /// A known field arrived with a wire type its kind does not allow.
    #[error("field {field} has wire type {wire_type}, which does not fit its kind")]
    WireTypeMismatch {
        /// `Definition.jsonName` of the field.
        field: String,
        /// The wire type found.
        wire_type: u8,
    },
    /// The envelope's apiVersion and kind name no type the caller knows.
    #[error("no protobuf schema for apiVersion {api_version:?}, kind {kind:?}")]
    UnknownType {
        /// `typeMeta.apiVersion` from the envelope.
        api_version: String,
        /// `typeMeta.kind` from the envelope.
        kind: String,
    },
    /// A definition name missing from the schema table.
    #[error("definition {0} is not in the protobuf schema")]
    UnknownDefinition(String),
    /// The top-level definition's JSON form is not an object, so it cannot
    /// carry `apiVersion` and `kind`.
    #[error("definition {0} does not decode to a JSON object")]
    NotAnObject(String),
    /// The envelope names a content encoding (such as gzip) or content type
    /// this decoder does not handle.
    #[error("unsupported envelope {what}: {value:?}")]
    UnsupportedEnvelope {
        /// `contentEncoding` or `contentType`.
        what: &'static str,
        /// The value found.
        value: String,
    },
    /// A string field holds bytes that are not UTF-8.
    #[error("field {field} is not valid UTF-8")]
    InvalidUtf8 {
        /// `Definition.jsonName` of the field.
        field: String,
    },
    /// Embedded raw JSON (`RawExtension`, `FieldsV1`) does not parse.
    #[error("field {field} holds invalid JSON: {message}")]
    InvalidJson {
        /// The definition holding the raw bytes.
        field: String,
        /// The parser's complaint.
        message: String,
    },
    /// A double that is NaN or infinite, which JSON cannot represent.
    #[error("field {field} is not a finite number")]
    NonFiniteNumber {
        /// `Definition.jsonName` of the field.
        field: String,
    },
    /// An `IntOrString` whose type is neither 0 (int) nor 1 (string).
    #[error("IntOrString has unknown type {0}")]
    InvalidIntOrString(i64),
    /// A timestamp outside years 0000-9999, which RFC 3339 cannot write.
    #[error("timestamp {seconds}s is outside years 0000-9999")]
    TimeOutOfRange {
        /// Seconds since the Unix epoch.
        seconds: i64,
    },
    /// Messages nested deeper than the decoder allows.
    #[error("protobuf messages nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// The schema table is malformed.
    #[error("invalid protobuf schema table: {0}")]
    InvalidSchema(String),
}

/// Decodes a Kubernetes protobuf body into the object's JSON.
///
/// `definition_for(apiVersion, kind)` names the OpenAPI definition of the
/// type in the envelope (`("apps/v1", "Deployment")` →
/// `io.k8s.api.apps.v1.Deployment`). The result carries `apiVersion` and
/// `kind` from the envelope, as a JSON body would.
pub fn decode_envelope(
    body: &[u8],
    schema: &ProtoSchema,
    definition_for: impl Fn(&str, &str) -> Option<String>,
) -> Result<Value, ProtoError> {
    Decoder {
        schema,
        definition_for: &definition_for,
    }
    .envelope(body, 0)
}

/// Decodes one message (no envelope) of `definition` into JSON: the `raw`
/// bytes of an envelope, or any embedded message. Without an
/// apiVersion/kind mapping, an envelope nested in a `RawExtension` fails with
/// [`ProtoError::UnknownType`]; [`decode_envelope`] resolves those.
pub fn decode_message(
    raw: &[u8],
    schema: &ProtoSchema,
    definition: &str,
) -> Result<Value, ProtoError> {
    Decoder {
        schema,
        definition_for: &|_, _| None,
    }
    .message(definition, raw, 0)
}

struct Decoder<'a> {
    schema: &'a ProtoSchema,
    definition_for: &'a dyn Fn(&str, &str) -> Option<String>,
}

impl Decoder<'_> {
    fn envelope(&self, body: &[u8], depth: usize) -> Result<Value, ProtoError> {
        let unknown = body.strip_prefix(MAGIC).ok_or(ProtoError::BadMagic)?;
        // runtime.Unknown {1: typeMeta, 2: raw, 3: contentEncoding, 4: contentType}
        let [type_meta, raw, encoding, content_type] = last_fields(unknown, [1, 2, 3, 4])?;
        let [api_version, kind] = last_fields(bytes_of(type_meta, "typeMeta")?, [1, 2])?;
        let api_version = string_of(api_version, "typeMeta.apiVersion")?;
        let kind = string_of(kind, "typeMeta.kind")?;
        let raw = bytes_of(raw, "raw")?;
        let encoding = string_of(encoding, "contentEncoding")?;
        if !encoding.is_empty() {
            return Err(ProtoError::UnsupportedEnvelope {
                what: "contentEncoding",
                value: encoding,
            });
        }
        let mut object = match string_of(content_type, "contentType")?.as_str() {
            // Kubernetes leaves the type empty when `raw` is protobuf.
            "" | CONTENT_TYPE => {
                let definition = (self.definition_for)(&api_version, &kind).ok_or_else(|| {
                    ProtoError::UnknownType {
                        api_version: api_version.clone(),
                        kind: kind.clone(),
                    }
                })?;
                match self.message(&definition, raw, depth + 1)? {
                    Value::Object(object) => object,
                    _ => return Err(ProtoError::NotAnObject(definition)),
                }
            }
            "application/json" => match parse_json(raw, "raw")? {
                Value::Object(object) => object,
                _ => return Err(ProtoError::NotAnObject(kind)),
            },
            other => {
                return Err(ProtoError::UnsupportedEnvelope {
                    what: "contentType",
                    value: other.to_owned(),
                });
            }
        };
        object.insert("apiVersion".to_owned(), Value::String(api_version));
        object.insert("kind".to_owned(), Value::String(kind));
        Ok(Value::Object(object))
    }

    fn message(&self, name: &str, bytes: &[u8], depth: usize) -> Result<Value, ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::TooDeep);
        }
        match self.schema.get(name) {
            None => Err(ProtoError::UnknownDefinition(name.to_owned())),
            Some(Definition::Message(message)) => {
                self.object(name, message, bytes, depth).map(Value::Object)
            }
            Some(Definition::List(message)) => {
                let mut object = self.object(name, message, bytes, depth)?;
                let items = message.fields[0].json.as_deref().unwrap_or_default();
                Ok(object.remove(items).unwrap_or(Value::Array(Vec::new())))
            }
            Some(Definition::Special(special)) => self.special(*special, name, bytes, depth),
        }
    }

    fn object(
        &self,
        name: &str,
        message: &Message,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Map<String, Value>, ProtoError> {
        // Occurrences are gathered per field first: a singular message field
        // sent twice is merged, and for scalars the last one wins.
        let mut seen: BTreeMap<usize, Vec<Payload<'_>>> = BTreeMap::new();
        let mut reader = Reader::new(bytes);
        while let Some((tag, payload)) = reader.field()? {
            if let Some(index) = message.field(tag) {
                seen.entry(index).or_default().push(payload);
            }
        }
        let mut out = Map::new();
        for (index, payloads) in seen {
            let field = &message.fields[index];
            let context = || format!("{name}.{}", field.label());
            let value = match &field.kind {
                Kind::Map(value_kind) => {
                    let mut map = Map::new();
                    for payload in payloads {
                        let entry = bytes_of(Some(payload), &context())?;
                        let (key, value) = self.map_entry(entry, value_kind, &context, depth)?;
                        map.insert(key, value);
                    }
                    Value::Object(map)
                }
                Kind::Message(target) if field.repeated => Value::Array(
                    payloads
                        .into_iter()
                        .map(|p| self.message(target, bytes_of(Some(p), &context())?, depth + 1))
                        .collect::<Result<_, _>>()?,
                ),
                Kind::Message(target) => {
                    let bytes = merged(self.replaces(target), &payloads, &context)?;
                    self.message(target, &bytes, depth + 1)?
                }
                Kind::Scalar(scalar) if field.repeated => {
                    let mut items = Vec::new();
                    for payload in payloads {
                        repeated_scalar(*scalar, payload, &mut items, &context)?;
                    }
                    if items.is_empty() {
                        continue; // an empty packed list: nothing was sent
                    }
                    Value::Array(items)
                }
                Kind::Scalar(scalar) => match payloads.last() {
                    Some(payload) => match scalar_value(*scalar, *payload, &context)? {
                        // Go writes every non-pointer string, empty or not; a JSON client
                        // would have omitted it, and defaulting must see it as unset.
                        Value::String(s) if s.is_empty() => continue,
                        v => v,
                    },
                    None => continue,
                },
            };
            insert(&mut out, field, value);
        }
        Ok(out)
    }

    fn map_entry(
        &self,
        entry: &[u8],
        kind: &MapValue,
        context: &dyn Fn() -> String,
        depth: usize,
    ) -> Result<(String, Value), ProtoError> {
        let mut key = None;
        let mut values = Vec::new();
        let mut reader = Reader::new(entry);
        while let Some((tag, payload)) = reader.field()? {
            match tag {
                1 => key = Some(payload),
                2 => values.push(payload),
                _ => {}
            }
        }
        // A missing key or value is the zero value, as in Go's decoder.
        let key = string_of(key, &context())?;
        let value = match kind {
            MapValue::Scalar(scalar) => match values.last() {
                Some(payload) => scalar_value(*scalar, *payload, context)?,
                None => scalar_value(*scalar, Payload::Bytes(&[]), context)?,
            },
            MapValue::Message(target) => {
                let bytes = merged(self.replaces(target), &values, context)?;
                self.message(target, &bytes, depth + 1)?
            }
        };
        Ok((key, value))
    }

    /// Whether a repeated singular occurrence of `target` replaces the
    /// previous one instead of merging with it (see [`merged`]).
    fn replaces(&self, target: &str) -> bool {
        matches!(
            self.schema.get(target),
            Some(Definition::Special(
                Special::Time | Special::MicroTime | Special::Quantity
            ))
        )
    }

    fn special(
        &self,
        special: Special,
        name: &str,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Value, ProtoError> {
        Ok(match special {
            Special::Time | Special::MicroTime => {
                // Go decodes an empty Time as the zero time, written `null`.
                if bytes.is_empty() {
                    return Ok(Value::Null);
                }
                let [seconds, nanos] = last_fields(bytes, [1, 2])?;
                let seconds = varint_of(seconds, name)? as i64;
                let nanos = varint_of(nanos, name)? as i32;
                format::timestamp(seconds, nanos, special == Special::MicroTime)?
                    .map_or(Value::Null, Value::String)
            }
            Special::Duration => {
                let [nanos] = last_fields(bytes, [1])?;
                Value::String(format::go_duration(varint_of(nanos, name)? as i64))
            }
            Special::IntOrString => {
                let [kind, int_val, str_val] = last_fields(bytes, [1, 2, 3])?;
                match varint_of(kind, name)? as i64 {
                    0 => Value::from(varint_of(int_val, name)? as i32),
                    1 => Value::String(string_of(str_val, name)?),
                    other => return Err(ProtoError::InvalidIntOrString(other)),
                }
            }
            Special::Quantity => {
                let [string] = last_fields(bytes, [1])?;
                match string {
                    // The zero Quantity, which Kubernetes writes as "0".
                    None => Value::String("0".to_owned()),
                    some => Value::String(string_of(some, name)?),
                }
            }
            Special::RawExtension | Special::FieldsV1 => {
                let [raw] = last_fields(bytes, [1])?;
                let raw = bytes_of(raw, name)?;
                if raw.is_empty() {
                    Value::Null
                } else if special == Special::RawExtension && raw.starts_with(MAGIC) {
                    // An object embedded by a protobuf client is itself an envelope.
                    self.envelope(raw, depth + 1)?
                } else {
                    parse_json(raw, name)?
                }
            }
        })
    }
}

/// Puts a decoded field into its object; an inline field's properties are
/// spliced in, as Go's `json:",inline"` does.
fn insert(out: &mut Map<String, Value>, field: &Field, value: Value) {
    match (&field.json, value) {
        (Some(json), value) => {
            out.insert(json.clone(), value);
        }
        (None, Value::Object(inner)) => out.extend(inner),
        // The schema only allows objects to be inline.
        (None, _) => {}
    }
}

/// The bytes to decode for a singular message field sent `payloads.len()`
/// times. Protobuf merges repeated occurrences, which is the same as parsing
/// their concatenation; Time and Quantity have hand-written Go decoders that
/// replace instead, so there the last occurrence wins.
fn merged<'a>(
    replaces: bool,
    payloads: &[Payload<'a>],
    context: &dyn Fn() -> String,
) -> Result<Cow<'a, [u8]>, ProtoError> {
    match payloads {
        [] => Ok(Cow::Borrowed(&[])),
        [.., last] if replaces => Ok(Cow::Borrowed(bytes_of(Some(*last), &context())?)),
        [only] => Ok(Cow::Borrowed(bytes_of(Some(*only), &context())?)),
        many => {
            let mut all = Vec::new();
            for payload in many {
                all.extend_from_slice(bytes_of(Some(*payload), &context())?);
            }
            Ok(Cow::Owned(all))
        }
    }
}

fn scalar_value(
    scalar: Scalar,
    payload: Payload<'_>,
    context: &dyn Fn() -> String,
) -> Result<Value, ProtoError> {
    Ok(match (scalar, payload) {
        (Scalar::String, Payload::Bytes(bytes)) => match std::str::from_utf8(bytes) {
            Ok(s) => Value::String(s.to_owned()),
            Err(_) => return Err(ProtoError::InvalidUtf8 { field: context() }),
        },
        (Scalar::Bytes, Payload::Bytes(bytes)) => Value::String(format::base64(bytes)),
        // Protobuf truncates an over-long int32 varint to its low 32 bits.
        (Scalar::Int32, Payload::Varint(v)) => Value::from(v as i32),
        (Scalar::Int64, Payload::Varint(v)) => Value::from(v as i64),
        (Scalar::Bool, Payload::Varint(v)) => Value::Bool(v != 0),
        (Scalar::Double, Payload::Fixed64(bits)) => {
            match serde_json::Number::from_f64(f64::from_bits(bits)) {
                Some(n) => Value::Number(n),
                None => return Err(ProtoError::NonFiniteNumber { field: context() }),
            }
        }
        (_, payload) => {
            return Err(ProtoError::WireTypeMismatch {
                field: context(),
                wire_type: payload.wire_type(),
            });
        }
    })
}

/// One occurrence of a repeated scalar field: a single value, or for numbers
/// possibly a packed run of them (encoders may choose either).
fn repeated_scalar(
    scalar: Scalar,
    payload: Payload<'_>,
    out: &mut Vec<Value>,
    context: &dyn Fn() -> String,
) -> Result<(), ProtoError> {
    let Payload::Bytes(packed) = payload else {
        out.push(scalar_value(scalar, payload, context)?);
        return Ok(());
    };
    if !scalar.packable() {
        out.push(scalar_value(scalar, payload, context)?);
        return Ok(());
    }
    let mut reader = Reader::new(packed);
    while !reader.is_empty() {
        let element = match scalar {
            Scalar::Double => Payload::Fixed64(reader.fixed64()?),
            _ => Payload::Varint(reader.varint()?),
        };
        out.push(scalar_value(scalar, element, context)?);
    }
    Ok(())
}

/// The last occurrence of each of `tags` in a small fixed-layout message.
fn last_fields<const N: usize>(
    bytes: &[u8],
    tags: [u32; N],
) -> Result<[Option<Payload<'_>>; N], ProtoError> {
    let mut found = [None; N];
    let mut reader = Reader::new(bytes);
    while let Some((tag, payload)) = reader.field()? {
        if let Some(i) = tags.iter().position(|&t| t == tag) {
            found[i] = Some(payload);
        }
    }
    Ok(found)
}

fn mismatch(field: &str, payload: Payload<'_>) -> ProtoError {
    ProtoError::WireTypeMismatch {
        field: field.to_owned(),
        wire_type: payload.wire_type(),
    }
}

/// A length-delimited field's bytes; absent is empty.
fn bytes_of<'a>(payload: Option<Payload<'a>>, field: &str) -> Result<&'a [u8], ProtoError> {
    match payload {
        None => Ok(&[]),
        Some(Payload::Bytes(bytes)) => Ok(bytes),
        Some(other) => Err(mismatch(field, other)),
    }
}

/// A string field; absent is empty.
fn string_of(payload: Option<Payload<'_>>, field: &str) -> Result<String, ProtoError> {
    let bytes = bytes_of(payload, field)?;
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(ProtoError::InvalidUtf8 {
            field: field.to_owned(),
        }),
    }
}

/// A varint field; absent is zero.
fn varint_of(payload: Option<Payload<'_>>, field: &str) -> Result<u64, ProtoError> {
    match payload {
        None => Ok(0),
        Some(Payload::Varint(v)) => Ok(v),
        Some(other) => Err(mismatch(field, other)),
    }
}

fn parse_json(raw: &[u8], field: &str) -> Result<Value, ProtoError> {
    serde_json::from_slice(raw).map_err(|e| ProtoError::InvalidJson {
        field: field.to_owned(),
        message: e.to_string(),
    })
}

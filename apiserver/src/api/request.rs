//! Reading a request: query parameters, the body (bounded in size and time) as JSON,
//! YAML or Kubernetes protobuf, patch types and `DeleteOptions`.

use std::collections::HashMap;
use std::time::Duration;

use apimachinery::JsonPointer;
use apimachinery::managed;
use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::engine::{DeleteOptions, FieldValidation, PatchType, WriteOptions};
use crate::status::ApiError;

/// How long a client may take to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Parsed query parameters.
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parses a URL query string.
    pub fn parse(q: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(q.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    /// A parameter.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
    /// A boolean parameter (`true`/`1`).
    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
    /// The options of a write: `dryRun`, `fieldValidation` and the field manager
    /// (`fieldManager`, else from `user_agent`). `kind` names the options in a 422
    /// (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
    pub fn write_options(&self, user_agent: &str, kind: &str) -> Result<WriteOptions, ApiError> {
        let field_manager = self.get("fieldManager");
        let errs = managed::validate_field_manager(field_manager.unwrap_or(""), "fieldManager");
        if let Some(e) = crate::engine::options_error(kind, errs) {
            return Err(e);
        }
        Ok(WriteOptions {
            manager: managed::manager_or_user_agent(field_manager, user_agent),
            dry_run: self.dry_run()?,
            field_validation: match self.get("fieldValidation") {
                None | Some("") | Some("Warn") => FieldValidation::Warn,
                Some("Strict") => FieldValidation::Strict,
                Some("Ignore") => FieldValidation::Ignore,
                Some(o) => {
                    return Err(ApiError::bad_request(format!(
                        "fieldValidation \"{o}\" is invalid: must be Ignore, Warn or Strict"
                    )));
                }
            },
        })
    }
    /// `force`, a patch option: absent, `true` or `false`.
    pub fn force(&self) -> Result<Option<bool>, ApiError> {
        match self.get("force") {
            None => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0") => Ok(Some(false)),
            Some(o) => Err(ApiError::bad_request(format!(
                "force \"{o}\" is invalid: must be true or false"
            ))),
        }
    }
    /// `dryRun=All`.
    pub fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(o) => Err(ApiError::bad_request(format!(
                "dryRun \"{o}\" is invalid: only All is supported"
            ))),
        }
    }
}

/// What reading a request body may fail with, whatever the transport's own error type.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A request body the server can read: frames of bytes, movable to another task. Named once
/// so every handler that passes a request on states the same bound.
pub trait RequestBody:
    http_body::Body<Data = Bytes, Error: Into<BodyError>> + Send + 'static
{
}

impl<B> RequestBody for B where
    B: http_body::Body<Data = Bytes, Error: Into<BodyError>> + Send + 'static
{
}

/// The body of a request, up to `max` bytes (larger ones are a 413).
pub async fn read_bytes<B: RequestBody>(req: Request<B>, max: usize) -> Result<Bytes, ApiError> {
    let read = async move {
        let mut body = std::pin::pin!(req.into_body());
        let mut buf = bytes::BytesMut::new();
        let mut seen = 0usize;
        while let Some(frame) = body.as_mut().frame().await {
            let frame = frame.map_err(|e| {
                let e: BodyError = e.into();
                ApiError::bad_request(format!("reading the request body: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                seen += data.len();
                if seen <= max {
                    buf.extend_from_slice(&data);
                } else if seen > 4 * max {
                    // Stop draining: the client keeps sending far past the limit.
                    break;
                }
            }
        }
        // Oversized bodies are drained (up to a bound) so the client reads the 413.
        if seen > max {
            return Err(ApiError::too_large(max));
        }
        Ok(buf.freeze())
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Err(_) => Err(ApiError::bad_request("timed out reading the request body")),
        Ok(r) => r,
    }
}

/// The body of a request as an object, decoded by its content type.
pub async fn read_body<B: RequestBody>(
    req: Request<B>,
    max: usize,
    content_type: &str,
) -> Result<Value, ApiError> {
    let raw = read_bytes(req, max).await?;
    decode_body(&raw, content_type)
}

/// Decodes a JSON or YAML request body into an object.
pub fn decode_body(raw: &[u8], content_type: &str) -> Result<Value, ApiError> {
    let ct = content_type.split(';').next().unwrap_or("").trim();
    let v: Value = match ct {
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            serde_yaml_ng::from_slice(raw)
                .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))?
        }
        "application/json" | "" | "*/*" => serde_json::from_slice(raw)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?,
        "application/vnd.kubernetes.protobuf" => decode_protobuf(raw)?,
        other => {
            return Err(ApiError::unsupported_media_type(format!(
                "the body content type {other} is not supported; send application/json or application/yaml"
            )));
        }
    };
    if !v.is_object() {
        return Err(ApiError::bad_request("the request body must be an object"));
    }
    Ok(v)
}

/// The Kubernetes protobuf schema of the served native kinds (vendored, see tools/).
fn proto_schema() -> &'static apimachinery::protobuf::ProtoSchema {
    static SCHEMA: std::sync::OnceLock<apimachinery::protobuf::ProtoSchema> =
        std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let table: Value = serde_json::from_str(include_str!("../../openapi/k8s-protobuf.json"))
            .expect("vendored protobuf table is JSON");
        apimachinery::protobuf::ProtoSchema::from_json(&table)
            .expect("vendored protobuf table is valid")
    })
}

/// Maps an apiVersion/kind to its definition name, from the schemas' group-version-kinds.
fn proto_definition(api_version: &str, kind: &str) -> Option<String> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let group = match group {
        "core" => "",
        g => g,
    };
    if kind == "DeleteOptions" {
        return Some("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions".into());
    }
    let prefix = if group.is_empty() {
        format!("io.k8s.api.core.{version}.")
    } else {
        // apps -> apps, coordination.k8s.io -> coordination, rbac.authorization.k8s.io -> rbac
        let short = group.split('.').next().unwrap_or(group);
        format!("io.k8s.api.{short}.{version}.")
    };
    let name = format!("{prefix}{kind}");
    proto_schema().contains(&name).then_some(name)
}

/// Decodes a Kubernetes protobuf body (as `kubectl create` sends for built-in kinds) to JSON.
fn decode_protobuf(raw: &[u8]) -> Result<Value, ApiError> {
    apimachinery::protobuf::decode_envelope(raw, proto_schema(), proto_definition)
        .map_err(|e| ApiError::bad_request(format!("the protobuf body could not be decoded: {e}")))
}

/// The patch type a `Content-Type` names.
pub fn patch_type(content_type: &str) -> Result<PatchType, ApiError> {
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        // Upstream's answer to a patch type it does not take (CBOR apply included).
        _ => Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml",
        )),
    }
}

/// Whether a `Content-Type` is a server-side apply (`application/apply-patch+yaml`).
pub fn is_apply(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim() == APPLY_PATCH_YAML
}

/// The content type of a server-side apply.
pub const APPLY_PATCH_YAML: &str = "application/apply-patch+yaml";

/// An apply configuration: YAML, JSON included (a subset of YAML).
pub fn decode_apply(raw: &[u8]) -> Result<Value, ApiError> {
    serde_yaml_ng::from_slice(raw)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// The `DeleteOptions` of a request, from its body and query.
pub fn delete_options(raw: &[u8], q: &Query) -> Result<DeleteOptions, ApiError> {
    let body: Value = if raw.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else if raw.starts_with(apimachinery::protobuf::MAGIC) {
        decode_protobuf(raw)?
    } else {
        serde_json::from_slice(raw)
            .map_err(|e| ApiError::bad_request(format!("DeleteOptions are not valid JSON: {e}")))?
    };
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
    let mut propagation =
        s(body.get("propagationPolicy")).or(q.get("propagationPolicy").map(String::from));
    if propagation.is_none()
        && let Some(orphan) = body
            .get("orphanDependents")
            .and_then(Value::as_bool)
            .or(q.get("orphanDependents").map(|v| v == "true"))
    {
        propagation = Some(if orphan { "Orphan" } else { "Background" }.into());
    }
    let dry_run = q.dry_run()?
        || body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        propagation,
        uid: s(body.at("/preconditions/uid")),
        resource_version: s(body.at("/preconditions/resourceVersion")),
        dry_run,
    })
}

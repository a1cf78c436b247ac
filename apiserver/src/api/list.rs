//! Collections: lists (paginated, filtered by label and field selectors, spliced from the
//! cache's JSON, or as a Table) and delete-collection.

use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::ApiServer;
use super::request::Query;
use super::respond::{Body, json_response, value_response};
use crate::cache::Cached;
use crate::engine::DeleteOptions;
use crate::registry::ResourceDef;
use crate::status::ApiError;
use crate::table;

impl ApiServer {
    /// A list (or Table) of `def`'s objects, consistent with every acknowledged write
    /// unless the client asked for a resourceVersion.
    pub(super) async fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        q: &Query,
        want_table: Option<table::IncludeObject>,
    ) -> Result<Response<Body>, ApiError> {
        let selectors = Selectors::parse(def, q)?;
        let limit = match q.get("limit").filter(|s| !s.is_empty()) {
            Some(l) => Some(
                l.parse::<usize>()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit \"{l}\"")))?,
            )
            .filter(|l| *l > 0),
            None => None,
        };
        let cont = match q.get("continue").filter(|s| !s.is_empty()) {
            Some(c) => {
                if q.get("resourceVersion")
                    .is_some_and(|r| !r.is_empty() && r != "0")
                {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                Some(decode_continue(c)?)
            }
            None => None,
        };
        let cache = &self.engine.cache;
        match (q.get("resourceVersion"), &cont) {
            (_, Some(_)) | (Some("0"), _) => {}
            (None | Some(""), _) => self.engine.sync().await?,
            (Some(rv), _) => {
                let rv: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion \"{rv}\""))
                })?;
                if q.get("resourceVersionMatch") == Some("Exact") && rv != cache.revision() {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        cache.revision()
                    )));
                }
                if !cache.wait_for(rv, Duration::from_secs(3)).await {
                    return Err(ApiError::timeout(format!(
                        "Too large resource version: {rv}, current: {}",
                        cache.revision()
                    )));
                }
            }
        }
        let prefix = def.namespace_prefix(ns);
        let revision = match &cont {
            Some((rv, _)) => *rv,
            None => cache.revision(),
        };
        let page = cache.resource(def).list(
            &prefix,
            cont.as_ref().map(|(_, k)| k.as_str()),
            limit,
            revision,
            |c| selectors.matches(c),
        );
        let mut list_meta = json!({"resourceVersion": page.revision.to_string()});
        if let Some(next) = &page.next {
            list_meta["continue"] = Value::from(encode_continue(page.revision, next));
            list_meta["remainingItemCount"] = Value::from(page.remaining);
        }
        if let Some(include) = want_table {
            return Ok(value_response(
                StatusCode::OK,
                &table::table(def, &page.items, list_meta, include),
            ));
        }
        // Items are already JSON: splice them instead of re-encoding 100k objects.
        let total: usize = page.items.iter().map(|c| c.json_len() + 1).sum();
        let mut out = Vec::with_capacity(total + 256);
        out.extend_from_slice(b"{\"apiVersion\":\"");
        out.extend_from_slice(def.api_version().as_bytes());
        out.extend_from_slice(b"\",\"kind\":\"");
        out.extend_from_slice(def.list_kind().as_bytes());
        out.extend_from_slice(b"\",\"metadata\":");
        out.extend_from_slice(list_meta.to_string().as_bytes());
        out.extend_from_slice(b",\"items\":[");
        for (i, c) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            c.append_json(&mut out);
        }
        out.extend_from_slice(b"]}");
        Ok(json_response(StatusCode::OK, Bytes::from(out)))
    }

    /// Deletes every object of `def` the selectors match.
    pub(super) async fn delete_collection(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        q: &Query,
        opts: &DeleteOptions,
    ) -> Result<Response<Body>, ApiError> {
        let selectors = Selectors::parse(def, q)?;
        self.engine.sync().await?;
        let page = self.engine.cache.resource(def).list(
            &def.namespace_prefix(ns),
            None,
            None,
            self.engine.cache.revision(),
            |c| selectors.matches(c),
        );
        let mut items = Vec::new();
        for c in page.items {
            match self.engine.delete(def, c.namespace(), c.name(), opts).await {
                Ok(d) => items.push(d.obj),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(value_response(
            StatusCode::OK,
            &json!({"apiVersion": def.api_version(), "kind": def.list_kind(), "metadata": {}, "items": items}),
        ))
    }
}

/// A request's label and field selectors.
#[derive(Default)]
pub(crate) struct Selectors {
    /// `labelSelector`.
    pub label: Option<apimachinery::selector::LabelSelector>,
    /// `fieldSelector`, naming only fields the kind serves.
    pub field: Option<apimachinery::selector::FieldSelector>,
}

impl Selectors {
    /// The selectors of a list, watch or delete-collection of `def`.
    pub fn parse(def: &ResourceDef, q: &Query) -> Result<Self, ApiError> {
        let label = match q.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(s) => Some(
                apimachinery::selector::LabelSelector::parse(s).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?,
            ),
            None => None,
        };
        Ok(Self {
            label,
            field: field_selector(def, q)?,
        })
    }

    /// Whether an object matches both.
    pub fn matches(&self, c: &Cached) -> bool {
        self.label.as_ref().is_none_or(|l| c.labels.matches(l))
            && self
                .field
                .as_ref()
                .is_none_or(|f| f.matches(|name| c.field(name)))
    }
}

fn field_selector(
    def: &ResourceDef,
    q: &Query,
) -> Result<Option<apimachinery::selector::FieldSelector>, ApiError> {
    let Some(s) = q.get("fieldSelector").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let f = apimachinery::selector::FieldSelector::parse(s)
        .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
    for name in f.fields() {
        let served = matches!(name, "metadata.name" | "metadata.namespace")
            || def.field_selectors.iter().any(|(n, _)| *n == name);
        if !served {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {name}"
            )));
        }
    }
    Ok(Some(f))
}

fn encode_continue(rv: u64, key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"rv": rv, "start": key}).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?,
        v.get("start")
            .and_then(Value::as_str)
            .ok_or_else(bad)?
            .to_string(),
    ))
}

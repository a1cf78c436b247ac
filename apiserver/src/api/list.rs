//! Collections over HTTP: list parameters parsed into the engine's [`ListOptions`], the
//! page rendered (spliced from the cache's JSON, or as a Table); delete-collection.

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::ApiServer;
use super::request::Query;
use super::respond::{Body, json_response, value_response};
use crate::engine::{DeleteOptions, ListOptions, ReadAt, Selectors};
use crate::registry::ResourceDef;
use crate::status::ApiError;
use crate::table;

/// The label and field selectors of a request.
pub(crate) fn selectors(def: &ResourceDef, q: &Query) -> Result<Selectors, ApiError> {
    Selectors::parse(def, q.get("labelSelector"), q.get("fieldSelector"))
}

/// The list a request asks for.
fn list_options<'q>(def: &ResourceDef, q: &'q Query) -> Result<ListOptions<'q>, ApiError> {
    let limit = match q.get("limit").filter(|s| !s.is_empty()) {
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit \"{l}\"")))
            .map(|l| Some(l).filter(|l| *l > 0))?,
        None => None,
    };
    let read_at = match q.get("resourceVersion") {
        None | Some("") => ReadAt::Latest,
        Some("0") => ReadAt::Any,
        Some(rv) => {
            let rv: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion \"{rv}\"")))?;
            match q.get("resourceVersionMatch") {
                Some("Exact") => ReadAt::Exact(rv),
                _ => ReadAt::NotOlderThan(rv),
            }
        }
    };
    Ok(ListOptions {
        selectors: selectors(def, q)?,
        limit,
        continue_token: q.get("continue").filter(|s| !s.is_empty()),
        read_at,
    })
}

impl ApiServer {
    /// A list (or Table) of `def`'s objects.
    pub(super) async fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        q: &Query,
        want_table: Option<table::IncludeObject>,
    ) -> Result<Response<Body>, ApiError> {
        let page = self.engine.list(def, ns, &list_options(def, q)?).await?;
        let mut list_meta = json!({"resourceVersion": page.revision.to_string()});
        if let Some(token) = page.continue_token {
            list_meta["continue"] = Value::from(token);
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
            if def.conversion.is_some() {
                out.extend_from_slice(&crate::convert::served_json(def, c));
            } else {
                c.append_json(&mut out);
            }
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
        let items = self
            .engine
            .delete_collection(def, ns, &selectors(def, q)?, opts)
            .await?;
        Ok(value_response(
            StatusCode::OK,
            &json!({"apiVersion": def.api_version(), "kind": def.list_kind(), "metadata": {}, "items": items}),
        ))
    }
}

//! Collections over HTTP: list parameters parsed into the engine's [`ListOptions`], the
//! page rendered (spliced from the cache's JSON, or as a Table); delete-collection.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};

use super::ApiServer;
use super::request::Query;
use super::respond::{Body, value_response};
use crate::cache::Cached;
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
        def: Arc<ResourceDef>,
        ns: Option<&str>,
        q: &Query,
        want_table: Option<table::IncludeObject>,
    ) -> Result<Response<Body>, ApiError> {
        let page = self.engine.list(&def, ns, &list_options(&def, q)?).await?;
        let mut list_meta = json!({"resourceVersion": page.revision.to_string()});
        if let Some(token) = page.continue_token {
            list_meta["continue"] = Value::from(token);
            list_meta["remainingItemCount"] = Value::from(page.remaining);
        }
        if let Some(include) = want_table {
            return Ok(value_response(
                StatusCode::OK,
                &table::table(&def, &page.items, list_meta, include),
            ));
        }
        // Items are already JSON: splice them instead of re-encoding 100k objects.
        let mut head = Vec::with_capacity(LIST_CHUNK + 4096);
        head.extend_from_slice(b"{\"apiVersion\":\"");
        head.extend_from_slice(def.api_version().as_bytes());
        head.extend_from_slice(b"\",\"kind\":\"");
        head.extend_from_slice(def.list_kind().as_bytes());
        head.extend_from_slice(b"\",\"metadata\":");
        head.extend_from_slice(list_meta.to_string().as_bytes());
        head.extend_from_slice(b",\"items\":[");
        let chunks = ListChunks {
            def,
            pending: Some(head),
            items: page.items.into_iter(),
            first: true,
        };
        let frames = futures::stream::iter(chunks.map(|b| Ok(Frame::data(b))));
        let mut r = Response::new(StreamBody::new(frames).boxed());
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(r)
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

/// About how much of a list's text each frame of its body carries: enough that framing
/// costs nothing, and little enough that the first bytes leave at once and a large list
/// (200 MB for 100,000 Deployments) is never held whole.
const LIST_CHUNK: usize = 256 * 1024;

/// A list's body, written a chunk at a time as the connection asks for it: the head,
/// then the items' cached text separated by commas, then the closing brackets.
struct ListChunks {
    def: Arc<ResourceDef>,
    /// The text written but not yet handed out (the head at first); `None` once done.
    pending: Option<Vec<u8>>,
    items: std::vec::IntoIter<Arc<Cached>>,
    first: bool,
}

impl Iterator for ListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        let mut out = self.pending.take()?;
        while out.len() < LIST_CHUNK {
            let Some(c) = self.items.next() else {
                out.extend_from_slice(b"]}");
                return Some(Bytes::from(out));
            };
            if !self.first {
                out.push(b',');
            }
            self.first = false;
            if self.def.conversion.is_some() {
                out.extend_from_slice(&crate::convert::served_json(&self.def, &c));
            } else {
                c.append_json(&mut out);
            }
        }
        self.pending = Some(Vec::with_capacity(LIST_CHUNK + 4096));
        Some(Bytes::from(out))
    }
}

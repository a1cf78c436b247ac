//! Reads of collections as kube-apiserver serves them from its watch cache: a list at the
//! resourceVersion a client asks for, filtered by label and field selectors, in pages
//! continued by opaque tokens; and delete-collection.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::selector::{FieldSelector, LabelSelector};
use meridian_store::Revision;
use serde_json::{Value, json};

use super::{DeleteOptions, Engine};
use crate::cache::Cached;
use crate::registry::ResourceDef;
use crate::status::ApiError;

/// How long a list at a resourceVersion newer than the cache waits for it.
const NEWER_RESOURCE_VERSION_WAIT: Duration = Duration::from_secs(3);

/// A request's label and field selectors.
#[derive(Default)]
pub struct Selectors {
    /// `labelSelector`.
    pub label: Option<LabelSelector>,
    /// `fieldSelector`, naming only fields the kind serves.
    pub field: Option<FieldSelector>,
}

impl Selectors {
    /// The selectors of a list, watch or delete-collection of `def`, from the
    /// `labelSelector` and `fieldSelector` parameters (absent or empty: none).
    pub fn parse(
        def: &ResourceDef,
        label: Option<&str>,
        field: Option<&str>,
    ) -> Result<Self, ApiError> {
        let label =
            match label.filter(|s| !s.is_empty()) {
                Some(s) => Some(LabelSelector::parse(s).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?),
                None => None,
            };
        let field = match field.filter(|s| !s.is_empty()) {
            Some(s) => Some(field_selector(def, s)?),
            None => None,
        };
        Ok(Self { label, field })
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

/// A field selector over the fields `def` serves.
fn field_selector(def: &ResourceDef, s: &str) -> Result<FieldSelector, ApiError> {
    let f = FieldSelector::parse(s)
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
    Ok(f)
}

/// The state a list reads (its `resourceVersion` and `resourceVersionMatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAt {
    /// No resourceVersion: consistent with every acknowledged write.
    Latest,
    /// `0`: whatever the cache holds.
    Any,
    /// At least this recent (waiting a little for the cache to get there).
    NotOlderThan(Revision),
    /// `resourceVersionMatch=Exact`: this revision, which only the current one is here.
    Exact(Revision),
}

/// What a list asks for.
pub struct ListOptions<'a> {
    /// Label and field selectors.
    pub selectors: Selectors,
    /// At most this many objects (then a continue token); `None`: all.
    pub limit: Option<usize>,
    /// The token of the previous page.
    pub continue_token: Option<&'a str>,
    /// The state to read.
    pub read_at: ReadAt,
}

/// One page of a list.
pub struct List {
    /// Matching objects in key order.
    pub items: Vec<Arc<Cached>>,
    /// The resourceVersion the list was read at.
    pub revision: Revision,
    /// The token of the next page, when `limit` cut the list.
    pub continue_token: Option<String>,
    /// How many matching objects remain after this page (when cut).
    pub remaining: usize,
}

impl Engine {
    /// A page of `def`'s objects (in `namespace`, or everywhere for `None`).
    pub async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        opts: &ListOptions<'_>,
    ) -> Result<List, ApiError> {
        let cont = match opts.continue_token {
            Some(_) if matches!(opts.read_at, ReadAt::NotOlderThan(_) | ReadAt::Exact(_)) => {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            Some(token) => Some(decode_continue(token)?),
            None => None,
        };
        let cache = &self.cache;
        match (opts.read_at, &cont) {
            // A continued list reads at its first page's revision.
            (_, Some(_)) | (ReadAt::Any, _) => {}
            (ReadAt::Latest, _) => self.sync().await?,
            (ReadAt::Exact(rv), _) if rv != cache.revision() => {
                return Err(ApiError::gone(format!(
                    "too old resource version: {rv} ({})",
                    cache.revision()
                )));
            }
            (ReadAt::NotOlderThan(rv) | ReadAt::Exact(rv), _) => {
                if !cache.wait_for(rv, NEWER_RESOURCE_VERSION_WAIT).await {
                    return Err(ApiError::timeout(format!(
                        "Too large resource version: {rv}, current: {}",
                        cache.revision()
                    )));
                }
            }
        }
        let revision = match &cont {
            Some((rv, _)) => *rv,
            None => cache.revision(),
        };
        let page = cache.resource(def).list(
            &def.namespace_prefix(namespace),
            cont.as_ref().map(|(_, k)| k.as_str()),
            opts.limit,
            revision,
            |c| opts.selectors.matches(c),
        );
        Ok(List {
            continue_token: page.next.map(|k| encode_continue(page.revision, &k)),
            items: page.items,
            revision: page.revision,
            remaining: page.remaining,
        })
    }

    /// Deletes every object of `def` (in `namespace`, or everywhere) the selectors
    /// match; returns them as deleted (or as finalizers hold them).
    pub async fn delete_collection(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        selectors: &Selectors,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        self.sync().await?;
        let page = self.cache.resource(def).list(
            &def.namespace_prefix(namespace),
            None,
            None,
            self.cache.revision(),
            |c| selectors.matches(c),
        );
        let mut items = Vec::new();
        for c in page.items {
            match self.delete(def, c.namespace(), c.name(), opts).await {
                Ok(d) => items.push(d.obj),
                // Deleted meanwhile by someone else.
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(items)
    }
}

fn encode_continue(rv: Revision, key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!({"rv": rv, "start": key}).to_string())
}

fn decode_continue(token: &str) -> Result<(Revision, String), ApiError> {
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

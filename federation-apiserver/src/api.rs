//! The HTTP surface: routes Kubernetes REST paths to the engine, negotiates content
//! (JSON, YAML bodies; Table output), authenticates, and renders `Status` errors.
//! It is a plain async function of a request, testable without a socket.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apimachinery::JsonPointer;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use serde_json::{Value, json};

use crate::auth::{TokenAuthenticator, UserInfo};
use crate::cache::Cached;
use crate::engine::{DeleteOptions, Engine, FieldValidation, PatchType, Target, WriteOptions};
use crate::metrics::{LatencyLabels, Metrics, RequestLabels};
use crate::openapi::OpenApi;
use crate::registry::ResourceDef;
use crate::status::ApiError;
use crate::{discovery, object, table, watch};

/// Response body type of every handler.
pub type Body = BoxBody<Bytes, Infallible>;

/// Default limit on request bodies (kube-apiserver uses 3 MiB).
pub const DEFAULT_MAX_BODY: usize = 3 * 1024 * 1024;
/// How long a client may take to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything a request needs.
pub struct ApiServer {
    /// The REST engine.
    pub engine: Arc<Engine>,
    /// OpenAPI documents.
    pub openapi: Arc<OpenApi>,
    /// Token authentication.
    pub tokens: TokenAuthenticator,
    /// Further token sources (e.g. service-account tokens), tried in order.
    pub token_sources: Vec<Arc<dyn crate::auth::TokenSource>>,
    /// Authorization; `None` lets every authenticated user do everything.
    pub authorizer: Option<Arc<dyn crate::auth::Authorizer>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Address advertised in `/api`.
    pub advertise: String,
    /// Request body limit.
    pub max_body: usize,
    /// `gitVersion` reported by `/version`.
    pub version: String,
}

/// A response with a JSON body.
pub fn json_response(code: StatusCode, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn value_response(code: StatusCode, v: &Value) -> Response<Body> {
    json_response(
        code,
        Bytes::from(serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec())),
    )
}

/// The `Status` response of an error.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = value_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.to_status(),
    );
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

fn text_response(code: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(text.into()).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Adds `Warning: 299 - "..."` headers.
fn add_warnings(r: &mut Response<Body>, warnings: &[String]) {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
}

/// Parsed query parameters.
pub struct Query(HashMap<String, String>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
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
    fn write_options(&self) -> Result<WriteOptions, ApiError> {
        Ok(WriteOptions {
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
    fn dry_run(&self) -> Result<bool, ApiError> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(o) => Err(ApiError::bad_request(format!(
                "dryRun \"{o}\" is invalid: only All is supported"
            ))),
        }
    }
}

/// What a resource URL names.
struct ResourcePath<'a> {
    def: Arc<ResourceDef>,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    sub: Option<&'a str>,
}

/// The verb name used in metrics.
fn verb_of(method: &Method, rp: &ResourcePath<'_>, q: &Query) -> &'static str {
    match (method.as_str(), rp.name.is_some()) {
        ("GET", false) if q.flag("watch") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "deletecollection",
        ("DELETE", true) => "delete",
        _ => "other",
    }
}

impl ApiServer {
    /// Ready while the store answers a linearizable read within 2 s (kube-apiserver's
    /// `--etcd-healthcheck-timeout`); the embedded and memory stores always answer.
    async fn readyz(&self) -> Response<Body> {
        const STORE_CHECK: Duration = Duration::from_secs(2);
        match tokio::time::timeout(STORE_CHECK, self.engine.store.latest_revision()).await {
            Ok(Ok(_)) => text_response(StatusCode::OK, "ok"),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "readyz: storage check failed");
                text_response(StatusCode::SERVICE_UNAVAILABLE, "storage unavailable")
            }
            Err(_) => text_response(StatusCode::SERVICE_UNAVAILABLE, "storage did not answer"),
        }
    }

    /// Serves one request from an authenticated-or-not peer (`cert_user` from TLS).
    pub async fn handle<B>(
        self: Arc<Self>,
        req: Request<B>,
        cert_user: Option<UserInfo>,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let path = req.uri().path().to_string();
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // Health and version stay open so load balancers and probes need no credentials.
        match segs.as_slice() {
            ["healthz"] | ["livez"] => return text_response(StatusCode::OK, "ok"),
            ["readyz"] => return self.readyz().await,
            ["version"] => {
                return value_response(
                    StatusCode::OK,
                    &json!({
                        "major": "1", "minor": "34", "gitVersion": self.version,
                        "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
                        "goVersion": "", "compiler": "rustc", "platform": "linux/amd64",
                    }),
                );
            }
            _ => {}
        }
        let user = cert_user.or_else(|| {
            let token = crate::auth::bearer(req.headers())?;
            self.tokens.authenticate(token).or_else(|| {
                self.token_sources
                    .iter()
                    .find_map(|s| s.authenticate(token))
            })
        });
        let Some(user) = user else {
            return error_response(&ApiError::unauthorized());
        };
        let q = Query::parse(req.uri().query());
        let start = Instant::now();
        let (resp, verb, resource) = self.route(req, &segs, &q, &user).await;
        let code = resp.status().as_u16();
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                resource: resource.clone(),
                code,
            })
            .inc();
        if verb != "watch" {
            self.metrics
                .latency
                .get_or_create(&LatencyLabels {
                    verb: verb.into(),
                    resource,
                })
                .observe(start.elapsed().as_secs_f64());
        }
        resp
    }

    async fn route<B>(
        &self,
        req: Request<B>,
        segs: &[&str],
        q: &Query,
        user: &UserInfo,
    ) -> (Response<Body>, &'static str, String)
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let get = req.method() == Method::GET;
        let is_resource = matches!(segs, ["api", "v1", _, ..] | ["apis", _, _, _, ..]);
        if !is_resource && let Some(authz) = &self.authorizer {
            let attrs = crate::auth::Attributes {
                verb: req.method().as_str().to_lowercase(),
                path: req.uri().path().to_string(),
                ..Default::default()
            };
            if let Err(msg) = authz.authorize(user, &attrs) {
                return (
                    error_response(&ApiError::forbidden(msg)),
                    "get",
                    String::new(),
                );
            }
        }
        let non_resource = |r: Response<Body>| (r, "get", String::new());
        let not_found =
            |p: &[&str]| error_response(&ApiError::no_route(&format!("/{}", p.join("/"))));
        let reg = &self.engine.registry;
        match segs {
            ["metrics"] if get => {
                non_resource(text_response(StatusCode::OK, self.metrics.encode()))
            }
            ["openapi", "v2"] if get => {
                non_resource(json_response(StatusCode::OK, self.openapi.v2()))
            }
            ["openapi", "v3"] if get => {
                non_resource(json_response(StatusCode::OK, self.openapi.v3_index()))
            }
            ["openapi", "v3", rest @ ..] if get => {
                let p = rest.join("/");
                non_resource(match self.openapi.v3_doc(&p) {
                    Some((_, body)) => {
                        let mut r = json_response(StatusCode::OK, body.clone());
                        // Clients cache by hash: the document never changes for a given hash.
                        r.headers_mut().insert(
                            header::CACHE_CONTROL,
                            HeaderValue::from_static("public, immutable"),
                        );
                        r
                    }
                    None => not_found(segs),
                })
            }
            ["api"] if get => non_resource(value_response(
                StatusCode::OK,
                &discovery::api_versions(&self.advertise),
            )),
            ["apis"] if get => non_resource(value_response(
                StatusCode::OK,
                &discovery::api_group_list(reg),
            )),
            ["api", "v1"] if get => non_resource(match discovery::resource_list(reg, "", "v1") {
                Some(v) => value_response(StatusCode::OK, &v),
                None => not_found(segs),
            }),
            ["apis", g] if get => non_resource(match discovery::api_group(reg, g) {
                Some(v) => value_response(StatusCode::OK, &v),
                None => not_found(segs),
            }),
            ["apis", g, v] if get => non_resource(match discovery::resource_list(reg, g, v) {
                Some(v) => value_response(StatusCode::OK, &v),
                None => not_found(segs),
            }),
            ["api", "v1", rest @ ..] => self.resource_request(req, "", "v1", rest, q, user).await,
            ["apis", g, v, rest @ ..] => self.resource_request(req, g, v, rest, q, user).await,
            _ => (not_found(segs), "other", String::new()),
        }
    }

    fn parse_resource<'a>(
        &self,
        group: &str,
        version: &str,
        rest: &[&'a str],
    ) -> Option<ResourcePath<'a>> {
        let reg = &self.engine.registry;
        let lookup = |p: &str| reg.lookup(group, version, p).cloned();
        match rest {
            ["namespaces", ns, plural, tail @ ..]
                if lookup(plural).is_some_and(|d| d.namespaced) && tail.len() <= 2 =>
            {
                Some(ResourcePath {
                    def: lookup(plural)?,
                    namespace: Some(ns),
                    name: tail.first().copied(),
                    sub: tail.get(1).copied(),
                })
            }
            [plural, tail @ ..] if tail.len() <= 2 => Some(ResourcePath {
                def: lookup(plural)?,
                namespace: None,
                name: tail.first().copied(),
                sub: tail.get(1).copied(),
            }),
            _ => None,
        }
    }

    async fn resource_request<B>(
        &self,
        req: Request<B>,
        group: &str,
        version: &str,
        rest: &[&str],
        q: &Query,
        user: &UserInfo,
    ) -> (Response<Body>, &'static str, String)
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Some(rp) = self.parse_resource(group, version, rest) else {
            let p = format!("/{}", rest.join("/"));
            return (
                error_response(&ApiError::no_route(&p)),
                "other",
                String::new(),
            );
        };
        let verb = verb_of(req.method(), &rp, q);
        let resource = rp.def.plural.to_string();
        if let Some(authz) = &self.authorizer {
            let attrs = crate::auth::Attributes {
                verb: verb.to_string(),
                group: rp.def.group.to_string(),
                resource: resource.clone(),
                subresource: rp.sub.unwrap_or("").to_string(),
                namespace: rp.namespace.unwrap_or("").to_string(),
                name: rp.name.unwrap_or("").to_string(),
                path: String::new(),
            };
            if let Err(msg) = authz.authorize(user, &attrs) {
                return (error_response(&ApiError::forbidden(msg)), verb, resource);
            }
        }
        let resp = match self.dispatch(req, &rp, q).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
        (resp, verb, resource)
    }

    async fn dispatch<B>(
        &self,
        req: Request<B>,
        rp: &ResourcePath<'_>,
        q: &Query,
    ) -> Result<Response<Body>, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let def = rp.def.clone();
        if rp.namespace.is_some() && !def.namespaced {
            return Err(ApiError::no_route(
                "cluster-scoped resource under a namespace",
            ));
        }
        let ns = rp.namespace.unwrap_or("");
        if def.namespaced && rp.name.is_some() && rp.namespace.is_none() {
            return Err(ApiError::no_route(&format!(
                "{} is namespaced: use /namespaces/{{namespace}}/{}/{{name}}",
                def.plural, def.plural
            )));
        }
        let accept = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        // The Table a client asked for, and what its rows carry; `None`: plain objects.
        let want_table = if table::wants_table(&accept) {
            Some(table::IncludeObject::parse(q.get("includeObject"))?)
        } else {
            None
        };
        let method = req.method().clone();
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_string();
        let target = match rp.sub {
            None => Target::Main,
            Some("status") if def.status_subresource => Target::Status,
            Some("scale") if def.scale_subresource => {
                return self
                    .scale(req, &def, ns, rp.name.unwrap_or(""), q, &content_type)
                    .await;
            }
            Some("finalize") if def.kind == "Namespace" && method == Method::PUT => Target::Main,
            Some(s) => {
                return Err(ApiError::no_route(&format!("{}/{s}", def.plural)));
            }
        };
        let finalize = rp.sub == Some("finalize");
        match (method.clone(), rp.name) {
            (Method::GET, None) => {
                if q.flag("watch") {
                    return watch::serve(
                        self.engine.clone(),
                        self.metrics.clone(),
                        def,
                        rp.namespace,
                        q,
                        want_table,
                    );
                }
                self.list(&def, rp.namespace, q, want_table).await
            }
            (Method::GET, Some(name)) => {
                let c = self.get_consistent(&def, ns, name, q).await?;
                if let Some(include) = want_table {
                    return Ok(value_response(
                        StatusCode::OK,
                        &table::single(&def, &c.value(), true, include),
                    ));
                }
                Ok(json_response(StatusCode::OK, c.json()))
            }
            (Method::POST, None) => {
                if def.namespaced && rp.namespace.is_none() {
                    return Err(ApiError::method_not_allowed(format!(
                        "{} is namespaced: POST to /namespaces/{{namespace}}/{}",
                        def.plural, def.plural
                    )));
                }
                let body = self.read_body(req, &content_type).await?;
                let w = self
                    .engine
                    .create(&def, ns, body, &q.write_options()?)
                    .await?;
                let mut r = value_response(StatusCode::CREATED, &w.obj);
                add_warnings(&mut r, &w.warnings);
                Ok(r)
            }
            (Method::PUT, Some(name)) => {
                let mut body = self.read_body(req, &content_type).await?;
                if finalize {
                    // /finalize changes only spec.finalizers.
                    let current = self.engine.current(&def, ns, name).await?.value();
                    let fins = body.at("/spec/finalizers").cloned().unwrap_or(json!([]));
                    let rv = object::meta_str(&body, "resourceVersion").map(String::from);
                    body = current;
                    body["spec"]["finalizers"] = fins;
                    if let Some(rv) = rv {
                        object::meta_mut(&mut body)
                            .insert("resourceVersion".into(), Value::from(rv));
                    }
                }
                let w = self
                    .engine
                    .update(&def, ns, name, body, target, &q.write_options()?)
                    .await?;
                let mut r = value_response(StatusCode::OK, &w.obj);
                add_warnings(&mut r, &w.warnings);
                Ok(r)
            }
            (Method::PATCH, Some(name)) => {
                let pt = patch_type(&content_type)?;
                let raw = self.read_bytes(req).await?;
                let patch: Value = serde_json::from_slice(&raw).map_err(|e| {
                    ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                })?;
                let w = self
                    .engine
                    .patch(&def, ns, name, pt, &patch, target, &q.write_options()?)
                    .await?;
                let mut r = value_response(StatusCode::OK, &w.obj);
                add_warnings(&mut r, &w.warnings);
                Ok(r)
            }
            (Method::DELETE, Some(name)) => {
                let raw = self.read_bytes(req).await?;
                let opts = delete_options(&raw, q)?;
                let d = self.engine.delete(&def, ns, name, &opts).await?;
                // Kubernetes answers 200 with the object whether it is gone or finalizers hold it.
                Ok(value_response(StatusCode::OK, &d.obj))
            }
            (Method::DELETE, None) => {
                let raw = self.read_bytes(req).await?;
                let opts = delete_options(&raw, q)?;
                self.delete_collection(&def, rp.namespace, q, &opts).await
            }
            (m, _) => Err(ApiError::method_not_allowed(format!(
                "{m} is not supported on {}",
                def.plural
            ))),
        }
    }

    async fn get_consistent(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        q: &Query,
    ) -> Result<Arc<Cached>, ApiError> {
        match q.get("resourceVersion") {
            // "0": any cached state is fine.
            Some("0") => self
                .engine
                .cache
                .resource(def)
                .get(&def.key(ns, name))
                .ok_or_else(|| ApiError::not_found(def.plural, def.group, name)),
            _ => self.engine.current(def, ns, name).await,
        }
    }

    async fn read_bytes<B>(&self, req: Request<B>) -> Result<Bytes, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let max = self.max_body;
        let read = async move {
            let mut body = std::pin::pin!(req.into_body());
            let mut buf = bytes::BytesMut::new();
            let mut seen = 0usize;
            while let Some(frame) = body.as_mut().frame().await {
                let frame = frame.map_err(|e| {
                    let e: Box<dyn std::error::Error + Send + Sync> = e.into();
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

    async fn read_body<B>(&self, req: Request<B>, content_type: &str) -> Result<Value, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let raw = self.read_bytes(req).await?;
        decode_body(&raw, content_type)
    }

    async fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        q: &Query,
        want_table: Option<table::IncludeObject>,
    ) -> Result<Response<Body>, ApiError> {
        let label = match q.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(s) => Some(
                apimachinery::selector::LabelSelector::parse(s).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?,
            ),
            None => None,
        };
        let field = field_selector(def, q)?;
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
            |c| {
                label.as_ref().is_none_or(|l| c.labels.matches(l))
                    && field
                        .as_ref()
                        .is_none_or(|f| f.matches(|name| c.field(name)))
            },
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

    async fn delete_collection(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        q: &Query,
        opts: &DeleteOptions,
    ) -> Result<Response<Body>, ApiError> {
        let label = match q.get("labelSelector").filter(|s| !s.is_empty()) {
            Some(s) => Some(
                apimachinery::selector::LabelSelector::parse(s).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?,
            ),
            None => None,
        };
        let field = field_selector(def, q)?;
        self.engine.sync().await?;
        let page = self.engine.cache.resource(def).list(
            &def.namespace_prefix(ns),
            None,
            None,
            self.engine.cache.revision(),
            |c| {
                label.as_ref().is_none_or(|l| c.labels.matches(l))
                    && field
                        .as_ref()
                        .is_none_or(|f| f.matches(|name| c.field(name)))
            },
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

    /// `/scale`: an `autoscaling/v1` Scale view of `spec.replicas`.
    async fn scale<B>(
        &self,
        req: Request<B>,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        q: &Query,
        content_type: &str,
    ) -> Result<Response<Body>, ApiError>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let to_scale = |obj: &Value| {
            let sel = obj.at("/spec/selector").cloned().unwrap_or(Value::Null);
            let selector = apimachinery::selector::LabelSelector::from_json(&sel)
                .map(|s| s.to_string())
                .unwrap_or_default();
            let meta = object::meta(obj);
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {
                    "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"), "creationTimestamp": meta.get("creationTimestamp"),
                },
                "spec": {"replicas": obj.at("/spec/replicas").cloned().unwrap_or(json!(0))},
                "status": {"replicas": obj.at("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
            })
        };
        let method = req.method().clone();
        let current = self.engine.current(def, ns, name).await?;
        let obj = current.value();
        let scale = to_scale(&obj);
        let desired = match method {
            Method::GET => return Ok(value_response(StatusCode::OK, &scale)),
            Method::PUT => {
                let body = self.read_body(req, content_type).await?;
                if let Some(rv) =
                    object::meta_str(&body, "resourceVersion").filter(|s| !s.is_empty())
                    && rv != current.rv.to_string()
                {
                    return Err(ApiError::stale(def.plural, def.group, name));
                }
                body
            }
            Method::PATCH => {
                let pt = patch_type(content_type)?;
                let raw = self.read_bytes(req).await?;
                let patch: Value = serde_json::from_slice(&raw).map_err(|e| {
                    ApiError::bad_request(format!("the patch is not valid JSON: {e}"))
                })?;
                let mut s = scale.clone();
                match pt {
                    PatchType::Json => {
                        s = apimachinery::patch::json_patch(&s, &patch)
                            .map_err(|e| ApiError::bad_request(e.to_string()))?
                    }
                    _ => apimachinery::patch::merge_patch(&mut s, &patch),
                }
                s
            }
            m => {
                return Err(ApiError::method_not_allowed(format!(
                    "{m} is not supported on scale"
                )));
            }
        };
        let replicas = desired
            .at("/spec/replicas")
            .and_then(Value::as_i64)
            .ok_or_else(|| ApiError::bad_request("spec.replicas must be an integer"))?;
        let patch = json!({"spec": {"replicas": replicas}});
        let w = self
            .engine
            .patch(
                def,
                ns,
                name,
                PatchType::Merge,
                &patch,
                Target::Main,
                &q.write_options()?,
            )
            .await?;
        Ok(value_response(StatusCode::OK, &to_scale(&w.obj)))
    }
}

pub(crate) fn field_selector(
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
        let table: Value = serde_json::from_str(include_str!("../openapi/k8s-protobuf.json"))
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

fn patch_type(content_type: &str) -> Result<PatchType, ApiError> {
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            Err(ApiError::unsupported_media_type(
                "server-side apply is not supported by this server; use client-side `kubectl apply`",
            ))
        }
        other => Err(ApiError::unsupported_media_type(format!(
            "the patch content type {other} is not supported: use application/merge-patch+json, application/json-patch+json or application/strategic-merge-patch+json"
        ))),
    }
}

fn delete_options(raw: &[u8], q: &Query) -> Result<DeleteOptions, ApiError> {
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

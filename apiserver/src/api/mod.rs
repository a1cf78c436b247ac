//! The HTTP surface: routes Kubernetes REST paths to the engine, negotiates content
//! (JSON, YAML bodies; Table output), authenticates, and renders `Status` errors. Each
//! handler parses the request, calls the engine and renders the result; it is a plain
//! async function of a request, testable without a socket.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::auth::{TokenAuthenticator, UserInfo};
use crate::engine::{Apply, Engine, ReadAt, ScaleChange, Target, Written};
use crate::metrics::{LatencyLabels, Metrics, RequestLabels};
use crate::registry::ResourceDef;
use crate::status::ApiError;
use crate::{discovery, table, watch};

mod list;
mod request;
mod respond;

pub(crate) use list::selectors;
pub use request::{BodyError, Query, RequestBody, decode_body};
use request::{decode_apply, delete_options, is_apply, patch_type, read_body, read_bytes};
pub use respond::{Body, error_response, json_response};
use respond::{add_warnings, text_response, value_response};

/// A routed request's answer with what its metrics are labelled by: the verb and the
/// resource.
type Routed = (Response<Body>, &'static str, String);

/// Default limit on request bodies (kube-apiserver uses 3 MiB).
pub const DEFAULT_MAX_BODY: usize = 3 * 1024 * 1024;

/// Everything a request needs.
pub struct ApiServer {
    /// The REST engine.
    pub engine: Arc<Engine>,
    /// Token authentication.
    pub tokens: TokenAuthenticator,
    /// Further token sources (e.g. service-account tokens), tried in order.
    pub token_sources: Vec<Arc<dyn crate::auth::TokenSource>>,
    /// Authorization of every request (a server cannot be built without one).
    pub authorizer: Arc<dyn crate::auth::Authorizer>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Address advertised in `/api`.
    pub advertise: String,
    /// Request body limit.
    pub max_body: usize,
    /// `gitVersion` reported by `/version`.
    pub version: String,
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
    pub async fn handle<B: RequestBody>(
        self: Arc<Self>,
        req: Request<B>,
        cert_user: Option<UserInfo>,
    ) -> Response<Body> {
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

    async fn route<B: RequestBody>(
        &self,
        req: Request<B>,
        segs: &[&str],
        q: &Query,
        user: &UserInfo,
    ) -> Routed {
        let get = req.method() == Method::GET;
        let is_resource = matches!(segs, ["api", "v1", _, ..] | ["apis", _, _, _, ..]);
        if !is_resource {
            let attrs = crate::auth::Attributes {
                verb: req.method().as_str().to_lowercase(),
                path: req.uri().path().to_string(),
                ..Default::default()
            };
            if let Err(msg) = self.authorizer.authorize(user, &attrs) {
                log_refusal(&msg);
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
        let registry = self.engine.registry();
        let reg = &*registry;
        let openapi = self.engine.openapi();
        match segs {
            ["metrics"] if get => {
                non_resource(text_response(StatusCode::OK, self.metrics.encode()))
            }
            ["openapi", "v2"] if get => non_resource(self.openapi_v2(&req)),
            ["openapi", "v3"] if get => {
                non_resource(json_response(StatusCode::OK, openapi.v3_index()))
            }
            ["openapi", "v3", rest @ ..] if get => {
                let p = rest.join("/");
                non_resource(match openapi.v3_doc(&p) {
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
            ["api"] | ["apis"] if get => {
                let core = segs == ["api"];
                let accept = req
                    .headers()
                    .get(header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let mut resp = match discovery::aggregated_version(accept) {
                    Some(v) => {
                        let mut r =
                            value_response(StatusCode::OK, &discovery::aggregated(reg, core, v));
                        if let Ok(ct) =
                            HeaderValue::from_str(&discovery::aggregated_content_type(v))
                        {
                            r.headers_mut().insert(header::CONTENT_TYPE, ct);
                        }
                        r
                    }
                    None if core => {
                        value_response(StatusCode::OK, &discovery::api_versions(&self.advertise))
                    }
                    None => value_response(StatusCode::OK, &discovery::api_group_list(reg)),
                };
                // Caches must keep the two forms apart.
                resp.headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept"));
                non_resource(resp)
            }
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
        let registry = self.engine.registry();
        let reg = &*registry;
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

    async fn resource_request<B: RequestBody>(
        &self,
        req: Request<B>,
        group: &str,
        version: &str,
        rest: &[&str],
        q: &Query,
        user: &UserInfo,
    ) -> Routed {
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
        let attrs = crate::auth::Attributes {
            verb: verb.to_string(),
            group: rp.def.group.to_string(),
            resource: resource.clone(),
            subresource: rp.sub.unwrap_or("").to_string(),
            namespace: rp.namespace.unwrap_or("").to_string(),
            name: rp.name.unwrap_or("").to_string(),
            path: String::new(),
        };
        if let Err(msg) = self.authorizer.authorize(user, &attrs) {
            log_refusal(&msg);
            // As upstream, the refusal names the resource it was about in `details`.
            let refusal = ApiError::forbidden(msg).with_target(
                &resource,
                rp.def.group,
                rp.name.unwrap_or(""),
            );
            return (error_response(&refusal), verb, resource);
        }
        let resp = match self.dispatch(req, &rp, q).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
        (resp, verb, resource)
    }

    async fn dispatch<B: RequestBody>(
        &self,
        req: Request<B>,
        rp: &ResourcePath<'_>,
        q: &Query,
    ) -> Result<Response<Body>, ApiError> {
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
        let user_agent = req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let options = |kind: &str| q.write_options(&user_agent, kind);
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
                let name = rp.name.unwrap_or("");
                let kind = match method {
                    Method::PATCH => "PatchOptions",
                    _ => "UpdateOptions",
                };
                let opts = options(kind)?;
                return self
                    .scale(req, &def, ns, name, q, &content_type, &opts)
                    .await;
            }
            Some("finalize") if def.is_namespace() && method == Method::PUT => {
                let body = read_body(req, self.max_body, &content_type).await?;
                let name = rp.name.unwrap_or("");
                let w = self
                    .engine
                    .finalize(&def, name, &body, &options("UpdateOptions")?)
                    .await?;
                return Ok(written(StatusCode::OK, &w));
            }
            Some(s) => {
                return Err(ApiError::no_route(&format!("{}/{s}", def.plural)));
            }
        };
        match (method, rp.name) {
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
                self.list(def, rp.namespace, q, want_table).await
            }
            (Method::GET, Some(name)) => {
                let read_at = match q.get("resourceVersion") {
                    Some("0") => ReadAt::Any,
                    _ => ReadAt::Latest,
                };
                let c = self.engine.get(&def, ns, name, read_at).await?;
                if let Some(include) = want_table {
                    return Ok(value_response(
                        StatusCode::OK,
                        &table::single(&def, &c.value(), true, include),
                    ));
                }
                Ok(json_response(
                    StatusCode::OK,
                    crate::convert::served_json(&def, &c),
                ))
            }
            (Method::POST, None) => {
                if def.namespaced && rp.namespace.is_none() {
                    return Err(ApiError::method_not_allowed(format!(
                        "{} is namespaced: POST to /namespaces/{{namespace}}/{}",
                        def.plural, def.plural
                    )));
                }
                let body = read_body(req, self.max_body, &content_type).await?;
                let w = self
                    .engine
                    .create(&def, ns, body, &options("CreateOptions")?)
                    .await?;
                Ok(written(StatusCode::CREATED, &w))
            }
            (Method::PUT, Some(name)) => {
                let body = read_body(req, self.max_body, &content_type).await?;
                let w = self
                    .engine
                    .update(&def, ns, name, body, target, &options("UpdateOptions")?)
                    .await?;
                Ok(written(StatusCode::OK, &w))
            }
            (Method::PATCH, Some(name)) => {
                let apply = is_apply(&content_type);
                let pt = if apply {
                    None
                } else {
                    Some(patch_type(&content_type)?)
                };
                let opts = options("PatchOptions")?;
                check_patch_options(apply, q)?;
                let Some(pt) = pt else {
                    let raw = read_bytes(req, self.max_body).await?;
                    let config = decode_apply(&raw)?;
                    let apply = Apply {
                        config: &config,
                        force: q.force()?.unwrap_or(false),
                    };
                    let (w, created) = self
                        .engine
                        .apply(&def, ns, name, apply, target, &opts)
                        .await?;
                    let code = if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    return Ok(written(code, &w));
                };
                let patch = read_patch(req, self.max_body).await?;
                let w = self
                    .engine
                    .patch(&def, ns, name, pt, &patch, target, &opts)
                    .await?;
                Ok(written(StatusCode::OK, &w))
            }
            (Method::DELETE, Some(name)) => {
                let raw = read_bytes(req, self.max_body).await?;
                let opts = delete_options(&raw, q)?;
                let d = self.engine.delete(&def, ns, name, &opts).await?;
                // Kubernetes answers 200 with the object whether it is gone or finalizers hold it.
                Ok(value_response(StatusCode::OK, &d.obj))
            }
            (Method::DELETE, None) => {
                let raw = read_bytes(req, self.max_body).await?;
                let opts = delete_options(&raw, q)?;
                self.delete_collection(&def, rp.namespace, q, &opts).await
            }
            (m, _) => Err(ApiError::method_not_allowed(format!(
                "{m} is not supported on {}",
                def.plural
            ))),
        }
    }

    /// `/openapi/v2` in the form the `Accept` header asks for: kubectl and client-go ask
    /// for protobuf and parse the body as protobuf whatever its content type.
    fn openapi_v2<B>(&self, req: &Request<B>) -> Response<Body> {
        use crate::openapi::proto_v2::{self, Form};
        let openapi = self.engine.openapi();
        let accept = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        match proto_v2::negotiate(accept) {
            Some(Form::Json) => json_response(StatusCode::OK, openapi.v2()),
            Some(Form::Protobuf) => {
                let mut r = json_response(StatusCode::OK, openapi.v2_protobuf());
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(proto_v2::CONTENT_TYPE),
                );
                r
            }
            None => error_response(&ApiError::not_acceptable(format!(
                "only application/json and {} are served at /openapi/v2",
                proto_v2::ACCEPT
            ))),
        }
    }

    /// `/scale`: an `autoscaling/v1` Scale view of `spec.replicas`.
    #[allow(clippy::too_many_arguments)]
    async fn scale<B: RequestBody>(
        &self,
        req: Request<B>,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        q: &Query,
        content_type: &str,
        opts: &crate::engine::WriteOptions,
    ) -> Result<Response<Body>, ApiError> {
        let opts = opts.clone();
        let w = match req.method().clone() {
            Method::GET => {
                let scale = self.engine.scale(def, ns, name).await?;
                return Ok(value_response(StatusCode::OK, &scale));
            }
            Method::PUT => {
                let body = read_body(req, self.max_body, content_type).await?;
                let change = ScaleChange::Replace(&body);
                self.engine
                    .update_scale(def, ns, name, change, &opts)
                    .await?
            }
            Method::PATCH => {
                check_patch_options(false, q)?;
                let pt = patch_type(content_type)?;
                let patch = read_patch(req, self.max_body).await?;
                let change = ScaleChange::Patch(pt, &patch);
                self.engine
                    .update_scale(def, ns, name, change, &opts)
                    .await?
            }
            m => {
                return Err(ApiError::method_not_allowed(format!(
                    "{m} is not supported on scale"
                )));
            }
        };
        Ok(written(StatusCode::OK, &w))
    }
}

/// The response to a write: the object and the write's warnings.
fn written(code: StatusCode, w: &Written) -> Response<Body> {
    let mut r = json_response(code, w.json());
    add_warnings(&mut r, &w.warnings);
    r
}

/// The checks of a patch's options kube-apiserver makes before anything else: apply
/// needs a `fieldManager`, `force` is for applies only.
fn check_patch_options(apply: bool, q: &Query) -> Result<(), ApiError> {
    let errs =
        apimachinery::managed::validate_patch_options(apply, q.get("fieldManager"), q.force()?);
    match crate::engine::options_error("PatchOptions", errs) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A patch body: JSON, whatever the patch type.
async fn read_patch<B: RequestBody>(req: Request<B>, max: usize) -> Result<Value, ApiError> {
    let raw = read_bytes(req, max).await?;
    serde_json::from_slice(&raw)
        .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))
}

/// Logs a request the authorizer refused (the message names the user, verb and resource),
/// under its own target so a run can follow refusals alone
/// (`RUST_LOG=warn,meridian_apiserver::authz=debug`), as kube-apiserver logs RBAC denials
/// at a raised verbosity.
fn log_refusal(message: &str) {
    tracing::debug!(target: "meridian_apiserver::authz", %message, "request refused");
}

#[cfg(test)]
mod apply_tests;
#[cfg(test)]
mod crd_tests;
#[cfg(test)]
mod hpa_v1_tests;
#[cfg(test)]
mod test_api;

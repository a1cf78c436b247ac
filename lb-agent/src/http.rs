//! The hyper side of the L7 proxy: h2c from clients (gRPC included), HTTP/1.1 requests the
//! lean path ([`crate::h1`]) hands over (CONNECT, `Expect`, routes to h2c upstreams), routed
//! by Host (http listener) or by the listen port, to local endpoints or remote lb-agents
//! over pooled connections, with retries on another backend — also of a request without
//! a body that a remote agent answered `x-meridian-error: unserved`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use fed_api::names::FORWARDED_BY_HEADER;
use http::header::{
    CONNECTION, HOST, HeaderName, HeaderValue, PROXY_AUTHENTICATE, TE, TRANSFER_ENCODING, UPGRADE,
};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body as _;
use http_body_util::{Either, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::agent::{BindKey, Shared};
use crate::backend::Backend;
use crate::balance::{Attempts, failed};
use crate::h1::codec::MERIDIAN_ERROR_HEADER;
use crate::table::{PortRoute, Proto};
use crate::upstream::{PooledBody, Sender, UpBody, checkout};

/// Body of a response to the client.
pub type RespBody = Either<PooledBody, Full<Bytes>>;

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Serves one client connection with hyper until it closes; `bind` selects port routing.
pub async fn serve<I>(io: I, shared: Arc<Shared>, bind: Option<BindKey>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc_shared = shared.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = svc_shared.clone();
        async move { Ok::<_, Infallible>(handle(&shared, bind, req).await) }
    });
    if let Err(error) = shared
        .http_server
        .serve_connection(TokioIo::new(io), service)
        .await
    {
        tracing::debug!(%error, "client connection ended");
    }
}

/// The agent's own answer; `error` is its `x-meridian-error` value, if any.
fn plain(code: StatusCode, text: String, error: Option<&'static str>) -> Response<RespBody> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(text))));
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    if let Some(e) = error {
        r.headers_mut().insert(
            HeaderName::from_static(MERIDIAN_ERROR_HEADER),
            HeaderValue::from_static(e),
        );
    }
    r
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    const HOP_BY_HOP: [HeaderName; 7] = [
        CONNECTION,
        KEEP_ALIVE,
        PROXY_CONNECTION,
        TRANSFER_ENCODING,
        TE,
        UPGRADE,
        PROXY_AUTHENTICATE,
    ];
    // One pass over the few headers a request carries, instead of a hashed lookup per
    // hop-by-hop name: most requests have none.
    if !headers.keys().any(|k| HOP_BY_HOP.contains(k)) {
        return;
    }
    for h in HOP_BY_HOP {
        headers.remove(&h);
    }
}

/// What is needed to send an empty-bodied idempotent request again.
struct Replay {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

impl Replay {
    fn request(&self) -> Request<UpBody> {
        let mut r = Request::new(Either::Right(Empty::new()));
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// Proxies one request.
pub async fn handle(
    shared: &Shared,
    bind: Option<BindKey>,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let table = shared.table.borrow().clone();
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(Authority::as_str));
    let route = match bind {
        Some(key) => table.route_for_bind(key),
        None => host.and_then(|h| table.route_for_host(h)),
    };
    let Some(route) = route else {
        return plain(
            StatusCode::NOT_FOUND,
            format!("no federated service for host {:?}\n", host.unwrap_or("")),
            None,
        );
    };
    route.metrics.requests.inc();
    let started = Instant::now();
    let response = forward(shared, route, table.forwarded_by.as_ref(), req).await;
    route
        .metrics
        .latency
        .observe(started.elapsed().as_secs_f64());
    if matches!(response.body(), Either::Right(_)) {
        route.metrics.errors.inc();
    }
    response
}

async fn forward(
    shared: &Shared,
    route: &Arc<PortRoute>,
    forwarded_by: Option<&HeaderValue>,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let (mut parts, body) = req.into_parts();
    // Loop prevention: a request another agent forwarded is served by local endpoints only.
    let local_only = parts
        .headers
        .contains_key(HeaderName::from_static(FORWARDED_BY_HEADER));
    strip_hop_by_hop(&mut parts.headers);
    let original_host = parts.headers.get(HOST).cloned().or_else(|| {
        parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
    });
    let idempotent = matches!(
        parts.method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    );
    let empty = body.is_end_stream();
    // Kept for any method: an unserved answer may be sent again whatever the method; a
    // failure after sending only for idempotent ones.
    let replay = empty.then(|| Replay {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
    });
    let up_body: UpBody = if empty {
        Either::Right(Empty::new())
    } else {
        Either::Left(body)
    };
    let mut pending = Some(Request::from_parts(parts, up_body));
    let h2 = route.proto == Proto::H2c;
    let mut tries = Attempts::default();
    loop {
        let choice = match tries.next(shared, route, local_only) {
            Ok(choice) => choice,
            Err(g) => return plain(g.status, g.text, Some(g.kind)),
        };
        let backend = choice.backend.clone();
        let remote = choice.remote;
        let sender = match checkout(&backend, h2, shared.settings.connect_timeout).await {
            Ok(s) => s,
            Err(e) => {
                // Nothing was sent: any request may go to another backend.
                failed(shared, route, &backend);
                tries.last_error = Some(e.to_string());
                continue;
            }
        };
        let Some(mut request) = pending
            .take()
            .or_else(|| replay.as_ref().map(Replay::request))
        else {
            return plain(
                StatusCode::BAD_GATEWAY,
                format!(
                    "{}: upstream failed after the request was sent: {}\n",
                    route.service_key,
                    tries.last_error.unwrap_or_default()
                ),
                Some("failed"),
            );
        };
        prepare(
            &mut request,
            h2,
            remote,
            route,
            original_host.as_ref(),
            forwarded_by,
            &backend,
        );
        let flight = backend.start();
        let result = match sender {
            Sender::H1(mut s) => match s.try_send_request(request).await {
                Ok(resp) => Ok((resp, Some(s))),
                Err(mut e) => Err((e.take_message(), e.into_error())),
            },
            Sender::H2(mut s) => match s.try_send_request(request).await {
                Ok(resp) => Ok((resp, None)),
                Err(mut e) => Err((e.take_message(), e.into_error())),
            },
        };
        match result {
            Ok((resp, sender)) => {
                let agent_error = |kind: &[u8]| {
                    remote
                        && replay.is_some()
                        && resp
                            .headers()
                            .get(MERIDIAN_ERROR_HEADER)
                            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(kind))
                };
                if agent_error(b"unserved") {
                    tries.remote_unserved();
                    continue;
                }
                if agent_error(b"failed")
                    && idempotent
                    && tries.sent_failures < shared.settings.retries
                {
                    // Its backends failed an idempotent request: another cluster may answer.
                    tries.sent_failures += 1;
                    tries.last_error = Some("the other cluster's backends failed".into());
                    continue;
                }
                if resp.status().is_server_error() {
                    failed(shared, route, &backend);
                } else {
                    backend.record_success();
                }
                let (mut head, incoming) = resp.into_parts();
                strip_hop_by_hop(&mut head.headers);
                return Response::from_parts(
                    head,
                    Either::Left(PooledBody::new(incoming, sender, flight)),
                );
            }
            Err((unsent, error)) => {
                failed(shared, route, &backend);
                tries.last_error = Some(error.to_string());
                match unsent {
                    // Never written: safe to send elsewhere whatever the method.
                    Some(r) => pending = Some(r),
                    None => {
                        tries.sent_failures += 1;
                        if replay.is_none()
                            || !idempotent
                            || tries.sent_failures > shared.settings.retries
                        {
                            return plain(
                                StatusCode::BAD_GATEWAY,
                                format!("{}: upstream failed: {error}\n", route.service_key),
                                Some("failed"),
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Sets version, target form, Host and the forwarding header for one attempt.
fn prepare(
    req: &mut Request<UpBody>,
    h2: bool,
    remote: bool,
    route: &PortRoute,
    original_host: Option<&HeaderValue>,
    forwarded_by: Option<&HeaderValue>,
    backend: &Backend,
) {
    let host = if remote {
        Some(&route.remote_host)
    } else {
        original_host
    };
    let forwarded = HeaderName::from_static(FORWARDED_BY_HEADER);
    if remote {
        if let Some(f) = forwarded_by {
            req.headers_mut().insert(forwarded, f.clone());
        }
    } else if forwarded_by.is_some_and(|f| req.headers().get(&forwarded) == Some(f)) {
        // Set by an earlier attempt at a remote agent, not by the client.
        req.headers_mut().remove(&forwarded);
    }
    if h2 {
        *req.version_mut() = Version::HTTP_2;
        let authority = host
            .and_then(|h| Authority::try_from(h.as_bytes()).ok())
            .or_else(|| Authority::try_from(backend.http_addr().to_string()).ok());
        let pq = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut b = Uri::builder().scheme(Scheme::HTTP).path_and_query(pq);
        if let Some(a) = authority {
            b = b.authority(a);
        }
        if let Ok(uri) = b.build() {
            *req.uri_mut() = uri;
        }
        req.headers_mut().remove(HOST);
    } else {
        *req.version_mut() = Version::HTTP_11;
        if req.uri().authority().is_some() {
            let pq = req
                .uri()
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
            *req.uri_mut() = Uri::from(pq);
        }
        match host {
            Some(h) if req.headers().get(HOST) != Some(h) => {
                req.headers_mut().insert(HOST, h.clone());
            }
            _ => {}
        }
    }
}

//! The fleet's admin API (HTTPS on loopback, bearer token): list clusters, switch faults,
//! change nodes, make pod servers or Jobs fail. `cluster-sim ctl` is its client.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::controllers::FailMode;
use crate::faults::Fault;
use crate::runtime::Fleet;

/// Where `cluster-sim ctl` finds the admin API; written next to the kubeconfig.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdminState {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// Bearer token.
    pub token: String,
    /// CA certificate of the admin endpoint, PEM.
    pub ca_pem: String,
}

/// A fault-switch request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRequest {
    /// `up`, `down`, `partition`, `slow` or `flap`.
    pub action: String,
    /// For `slow`.
    #[serde(default)]
    pub latency_ms: Option<u64>,
    /// For `flap`.
    #[serde(default)]
    pub period_ms: Option<u64>,
}

/// A node change.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeRequest {
    /// Set the Ready condition.
    #[serde(default)]
    pub ready: Option<bool>,
    /// New CPU capacity (quantity).
    #[serde(default)]
    pub cpu: Option<String>,
    /// New memory capacity (quantity).
    #[serde(default)]
    pub memory: Option<String>,
}

/// A pod-failure request: `status` or `refuse`, neither to heal the pod.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodFailRequest {
    /// Answer every request with this status.
    #[serde(default)]
    pub status: Option<u16>,
    /// Refuse connections.
    #[serde(default)]
    pub refuse: bool,
}

/// A Job-failure request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobFailRequest {
    /// Whether the Job's pods fail (false: they succeed again).
    pub fail: bool,
}

/// An HPA-recommendation request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HpaDesiredRequest {
    /// The recommendation (a stand-in for metrics); absent: the target's own count again.
    #[serde(default)]
    pub replicas: Option<i64>,
}

fn reply(code: StatusCode, v: serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(code: StatusCode, msg: impl Into<String>) -> Response<Full<Bytes>> {
    reply(code, json!({"error": msg.into()}))
}

/// Handles one admin request.
pub async fn handle(
    fleet: Arc<Fleet>,
    token: Arc<String>,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let authorized =
        meridian_apiserver::auth::bearer(req.headers()).is_some_and(|t| t == token.as_str());
    if !authorized {
        return error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
    }
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("reading body: {e}")),
    };
    match (method, segs.as_slice()) {
        (Method::GET, ["clusters"]) => {
            let list: Vec<_> = fleet
                .clusters
                .iter()
                .map(|c| {
                    json!({"name": c.spec.name, "server": c.server_url(), "region": c.spec.region,
                           "zone": c.spec.zone, "nodes": c.spec.nodes, "fault": c.faults.current()})
                })
                .collect();
            reply(StatusCode::OK, json!({"clusters": list}))
        }
        (Method::POST, ["clusters", name, "fault"]) => {
            let Some(c) = fleet.get(name) else {
                return error(StatusCode::NOT_FOUND, format!("no cluster named {name}"));
            };
            let r: FaultRequest = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            let fault = match r.action.as_str() {
                "up" => Fault::None,
                "down" => Fault::Down,
                "partition" => Fault::Partitioned,
                "slow" => Fault::Slow {
                    latency_ms: r.latency_ms.unwrap_or(1000),
                },
                "flap" => Fault::Flapping {
                    period_ms: r.period_ms.unwrap_or(2000),
                },
                other => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("unknown action {other:?}: use up, down, partition, slow or flap"),
                    );
                }
            };
            tracing::info!(cluster = %name, ?fault, "fault switched");
            c.faults.set(fault.clone());
            c.fault_settled().await;
            reply(StatusCode::OK, json!({"name": name, "fault": fault}))
        }
        (Method::POST, ["clusters", name, "nodes", node]) => {
            let Some(c) = fleet.get(name) else {
                return error(StatusCode::NOT_FOUND, format!("no cluster named {name}"));
            };
            let r: NodeRequest = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            if let Some(ready) = r.ready
                && let Err(e) = crate::controllers::set_node_ready(&c.sim, node, ready).await
            {
                return error(StatusCode::BAD_REQUEST, e.to_string());
            }
            if (r.cpu.is_some() || r.memory.is_some())
                && let Err(e) = crate::controllers::set_node_capacity(
                    &c.sim,
                    node,
                    r.cpu.as_deref(),
                    r.memory.as_deref(),
                )
                .await
            {
                return error(StatusCode::BAD_REQUEST, e.to_string());
            }
            reply(StatusCode::OK, json!({"name": name, "node": node}))
        }
        (Method::POST, ["clusters", name, "pods", ns, pod, "fail"]) => {
            let Some(c) = fleet.get(name) else {
                return error(StatusCode::NOT_FOUND, format!("no cluster named {name}"));
            };
            let r: PodFailRequest = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            let Some(rt) = &c.sim.containers else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "pods do not serve: run cluster-sim with --serve-pods",
                );
            };
            let mode = match (r.status, r.refuse) {
                (Some(code), false) if (100..=599).contains(&code) => Some(FailMode::Status(code)),
                (Some(code), false) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        format!("status {code} is not an HTTP status"),
                    );
                }
                (Some(_), true) => {
                    return error(StatusCode::BAD_REQUEST, "give status or refuse, not both");
                }
                (None, true) => Some(FailMode::Refuse),
                (None, false) => None,
            };
            let def = &c.sim.kinds.pods;
            if c.engine
                .cache
                .resource(def)
                .get(&def.key(ns, pod))
                .is_none()
            {
                return error(
                    StatusCode::NOT_FOUND,
                    format!("no pod {ns}/{pod} in cluster {name}"),
                );
            }
            tracing::info!(cluster = %name, pod = %format!("{ns}/{pod}"), ?mode, "pod failure switched");
            rt.set_failure(&format!("{ns}/{pod}"), mode);
            reply(
                StatusCode::OK,
                json!({"name": name, "pod": format!("{ns}/{pod}"), "fail": format!("{mode:?}")}),
            )
        }
        (Method::POST, ["clusters", name, "jobs", ns, job, "fail"]) => {
            let Some(c) = fleet.get(name) else {
                return error(StatusCode::NOT_FOUND, format!("no cluster named {name}"));
            };
            let r: JobFailRequest = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            // The switch may be set before the Job exists (its first pods fail too).
            tracing::info!(cluster = %name, job = %format!("{ns}/{job}"), fail = r.fail, "job failure switched");
            c.sim.job_failures.set(ns, job, r.fail);
            reply(
                StatusCode::OK,
                json!({"name": name, "job": format!("{ns}/{job}"), "fail": r.fail}),
            )
        }
        (Method::POST, ["clusters", name, "hpas", ns, hpa, "desired"]) => {
            let Some(c) = fleet.get(name) else {
                return error(StatusCode::NOT_FOUND, format!("no cluster named {name}"));
            };
            let r: HpaDesiredRequest = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
            };
            if r.replicas.is_some_and(|n| n < 0) {
                return error(StatusCode::BAD_REQUEST, "replicas must not be negative");
            }
            // Like a metric, the recommendation may come before its HPA exists.
            tracing::info!(cluster = %name, hpa = %format!("{ns}/{hpa}"), replicas = ?r.replicas, "HPA recommendation set");
            c.sim.hpa_recommendations.set(ns, hpa, r.replicas);
            reply(
                StatusCode::OK,
                json!({"name": name, "hpa": format!("{ns}/{hpa}"), "replicas": r.replicas}),
            )
        }
        _ => error(StatusCode::NOT_FOUND, format!("no route {path}")),
    }
}

/// Serves the admin API on `listener` with `tls` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    fleet: Arc<Fleet>,
    token: String,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let token = Arc::new(token);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, fleet, token) = (acceptor.clone(), fleet.clone(), token.clone());
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp))
                    .await
            else {
                return;
            };
            let svc = hyper::service::service_fn(move |req| {
                let (fleet, token) = (fleet.clone(), token.clone());
                async move { Ok::<_, std::convert::Infallible>(handle(fleet, token, req).await) }
            });
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
        });
    }
}

/// A one-shot HTTPS request to the admin API.
pub async fn request(
    state: &AdminState,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> anyhow::Result<(u16, serde_json::Value)> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut state.ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let authority = state.url.trim_start_matches("https://").to_string();
    let tcp = tokio::net::TcpStream::connect(&authority).await?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(rustls::pki_types::ServerName::try_from("localhost")?, tcp)
        .await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", authority)
        .header("authorization", format!("Bearer {}", state.token))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    let resp = sender.send_request(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    Ok((code, v))
}

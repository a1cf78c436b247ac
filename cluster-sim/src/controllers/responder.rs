//! What a simulated container answers on one of its TCP ports: HTTP/1.1 with keep-alive or
//! HTTP/2 (prior knowledge, or ALPN over TLS), any method and path, `200` with headers
//! naming the cluster, pod and request and a one-line body — or the status the pod was
//! told to fail with. Ports named `https`/`tls-*` speak it over TLS with the cluster's
//! self-signed certificate. `Upgrade: websocket` gets a WebSocket echo
//! ([`super::websocket`]); `/stream?n=<messages>&ms=<interval>` a long response, one line
//! per interval (for streams that must outlive a draining backend). The cluster's `slow`
//! fault delays every response.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::faults::Faults;

/// Header naming the answering cluster.
pub const CLUSTER_HEADER: &str = "x-sim-cluster";
/// Header naming the answering pod.
pub const POD_HEADER: &str = "x-sim-pod";
/// Header naming the answering pod's namespace.
pub const NAMESPACE_HEADER: &str = "x-sim-namespace";
/// Header echoing the request line: `<METHOD> <path and query>`.
pub const REQUEST_HEADER: &str = "x-sim-request";
/// Header saying the request came over TLS (`true`).
pub const TLS_HEADER: &str = "x-sim-tls";

type Body = BoxBody<Bytes, std::convert::Infallible>;

/// Who answers, fixed for a listener's life.
pub(crate) struct Identity {
    pub(crate) cluster: String,
    pub(crate) namespace: String,
    pub(crate) pod: String,
}

/// How a pod answers, changeable while it serves (`pod-fail`).
#[derive(Default)]
pub(crate) struct Behaviour {
    /// Status every response gets instead of 200 (0: healthy).
    pub(crate) fail_status: AtomicU16,
}

/// Accepts connections on `listener` until aborted (over TLS with `tls`); each connection
/// lives until it ends or `generation` moves past its value at this call (or its sender is
/// dropped): the pod stopped, and a stopped process's connections die with it.
pub(crate) fn spawn(
    listener: TcpListener,
    id: Arc<Identity>,
    behaviour: Arc<Behaviour>,
    faults: Faults,
    generation: watch::Receiver<u64>,
    tls: Option<TlsAcceptor>,
) -> JoinHandle<()> {
    // The listener's generation, not the one at accept time: a connection accepted in the
    // instant between a stop's bump and the listener's abort must die too.
    let born = *generation.borrow();
    tokio::spawn(async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    tracing::debug!(pod = %id.pod, error = %e, "accept failed");
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (id, behaviour, faults) = (id.clone(), behaviour.clone(), faults.clone());
            let mut generation = generation.clone();
            let tls = tls.clone();
            let ended = Ended {
                generation: generation.clone(),
                born,
            };
            tokio::spawn(async move {
                let secure = tls.is_some();
                let svc = hyper::service::service_fn(move |req| {
                    let (id, behaviour, faults) = (id.clone(), behaviour.clone(), faults.clone());
                    let ended = ended.clone();
                    async move {
                        Ok::<_, Infallible>(
                            answer(&id, &behaviour, &faults, secure, &ended, req).await,
                        )
                    }
                });
                let serve = async move {
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let result = match tls {
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(stream) => {
                                builder
                                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                                    .await
                            }
                            Err(_) => return,
                        },
                        None => {
                            builder
                                .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
                                .await
                        }
                    };
                    if let Err(e) = result {
                        tracing::trace!(error = %e, "pod connection ended");
                    }
                };
                tokio::select! {
                    _ = serve => {}
                    _ = generation.wait_for(|g| *g != born) => {}
                }
            });
        }
    })
}

/// Resolves when the pod stops: its connections, upgraded ones too, die with it.
#[derive(Clone)]
struct Ended {
    generation: watch::Receiver<u64>,
    born: u64,
}

impl Ended {
    async fn wait(mut self) {
        let born = self.born;
        let _ = self.generation.wait_for(|g| *g != born).await;
    }
}

async fn answer(
    id: &Identity,
    behaviour: &Behaviour,
    faults: &Faults,
    secure: bool,
    ended: &Ended,
    mut req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let request_line = format!(
        "{} {}",
        req.method(),
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    let websocket = req
        .headers()
        .get(http::header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    let key = req
        .headers()
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let (true, Some(key)) = (websocket, key) {
        let upgrade = hyper::upgrade::on(&mut req);
        let greeting = format!("{} {}/{}", id.cluster, id.namespace, id.pod);
        let ended = ended.clone();
        tokio::spawn(async move {
            // The upgraded connection leaves hyper's connection task: it must end with the
            // pod on its own.
            tokio::select! {
                _ = async {
                    if let Ok(io) = upgrade.await {
                        let _ = super::websocket::echo(TokioIo::new(io), &greeting).await;
                    }
                } => {}
                () = ended.wait() => {}
            }
        });
        let mut resp = Response::new(Full::new(Bytes::new()).boxed());
        *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = resp.headers_mut();
        h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(
            http::header::CONNECTION,
            HeaderValue::from_static("Upgrade"),
        );
        if let Ok(v) = HeaderValue::from_str(&super::websocket::accept_key(&key)) {
            h.insert("sec-websocket-accept", v);
        }
        identify(h, id, &request_line, secure);
        return resp;
    }
    let stream = (req.uri().path() == "/stream").then(|| stream_params(req.uri().query()));
    // Read the request to its end so the connection can carry the next one.
    let _ = req.into_body().collect().await;
    if let (Some(delay), _) = faults.request_gate() {
        tokio::time::sleep(delay).await;
    }
    let status = match behaviour.fail_status.load(Ordering::Relaxed) {
        0 => StatusCode::OK,
        code => StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
    };
    let line = format!("{} {}/{}", id.cluster, id.namespace, id.pod);
    let body = match stream {
        Some((n, every)) => {
            let lines = futures::stream::unfold(0u32, move |i| {
                let line = line.clone();
                async move {
                    if i >= n {
                        return None;
                    }
                    if i > 0 {
                        tokio::time::sleep(every).await;
                    }
                    let frame = hyper::body::Frame::data(Bytes::from(format!("{line} {i}\n")));
                    Some((Ok::<_, Infallible>(frame), i + 1))
                }
            });
            StreamBody::new(lines).boxed()
        }
        None => Full::new(Bytes::from(format!("{line}\n"))).boxed(),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    identify(h, id, &request_line, secure);
    resp
}

/// `n` messages `ms` apart (defaults 10 and 100 ms; at most 100,000 and 10 s).
fn stream_params(query: Option<&str>) -> (u32, std::time::Duration) {
    let mut n = 10u32;
    let mut ms = 100u64;
    for pair in query.unwrap_or_default().split('&') {
        match pair.split_once('=') {
            Some(("n", v)) => n = v.parse().unwrap_or(n).min(100_000),
            Some(("ms", v)) => ms = v.parse().unwrap_or(ms).min(10_000),
            _ => {}
        }
    }
    (n, std::time::Duration::from_millis(ms))
}

fn identify(h: &mut http::HeaderMap, id: &Identity, request_line: &str, secure: bool) {
    let value = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static("-"));
    h.insert(CLUSTER_HEADER, value(&id.cluster));
    h.insert(NAMESPACE_HEADER, value(&id.namespace));
    h.insert(POD_HEADER, value(&id.pod));
    h.insert(REQUEST_HEADER, value(request_line));
    if secure {
        h.insert(TLS_HEADER, HeaderValue::from_static("true"));
    }
}

/// A self-signed serving certificate for a cluster's pods (names: the cluster and
/// `localhost`; clients of a simulated fleet check who answered by the headers).
pub(crate) fn tls_acceptor(cluster: &str) -> Option<TlsAcceptor> {
    let key = rcgen::KeyPair::generate().ok()?;
    let mut params =
        rcgen::CertificateParams::new(vec![format!("{cluster}.pods.sim"), "localhost".into()])
            .ok()?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cluster} pods"));
    let cert = params.self_signed(&key).ok()?;
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).ok()?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)
    .ok()?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Some(TlsAcceptor::from(Arc::new(config)))
}

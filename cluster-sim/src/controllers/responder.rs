//! What a simulated container answers on one of its ports: HTTP/1.1 with keep-alive, any
//! method and path, `200` with headers naming the cluster, pod and request and a one-line
//! body — or the status the pod was told to fail with. The cluster's `slow` fault delays
//! every response.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::faults::Faults;

/// Header naming the answering cluster.
pub const CLUSTER_HEADER: &str = "x-sim-cluster";
/// Header naming the answering pod.
pub const POD_HEADER: &str = "x-sim-pod";
/// Header naming the answering pod's namespace.
pub const NAMESPACE_HEADER: &str = "x-sim-namespace";
/// Header echoing the request line: `<METHOD> <path and query>`.
pub const REQUEST_HEADER: &str = "x-sim-request";

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

/// Accepts connections on `listener` until aborted; each connection lives until it ends or
/// `generation` moves past its value at this call (or its sender is dropped): the pod
/// stopped, and a stopped process's connections die with it.
pub(crate) fn spawn(
    listener: TcpListener,
    id: Arc<Identity>,
    behaviour: Arc<Behaviour>,
    faults: Faults,
    generation: watch::Receiver<u64>,
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
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let (id, behaviour, faults) = (id.clone(), behaviour.clone(), faults.clone());
                    async move { Ok::<_, Infallible>(answer(&id, &behaviour, &faults, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc);
                tokio::select! {
                    _ = conn => {}
                    _ = generation.wait_for(|g| *g != born) => {}
                }
            });
        }
    })
}

async fn answer(
    id: &Identity,
    behaviour: &Behaviour,
    faults: &Faults,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let request_line = format!(
        "{} {}",
        req.method(),
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    // Read the request to its end so the connection can carry the next one.
    let _ = req.into_body().collect().await;
    if let (Some(delay), _) = faults.request_gate() {
        tokio::time::sleep(delay).await;
    }
    let status = match behaviour.fail_status.load(Ordering::Relaxed) {
        0 => StatusCode::OK,
        code => StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
    };
    let body = format!("{} {}/{}\n", id.cluster, id.namespace, id.pod);
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    let value = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static("-"));
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CLUSTER_HEADER, value(&id.cluster));
    h.insert(NAMESPACE_HEADER, value(&id.namespace));
    h.insert(POD_HEADER, value(&id.pod));
    h.insert(REQUEST_HEADER, value(&request_line));
    resp
}

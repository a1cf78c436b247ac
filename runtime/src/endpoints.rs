//! `/metrics`, `/healthz`, `/livez` and `/readyz` over plain HTTP/1.1 on hyper (meant for
//! loopback or a pod network: it serves no credentials and reads nothing but the path).
//!
//! [`Endpoints::respond`] is the whole routing table and needs no socket;
//! [`Endpoints::serve`] puts it on a listener until the process shuts down.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::metrics::Exposition;
use crate::shutdown::Shutdown;

/// The content type Prometheus negotiates for the text exposition.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// How long a client may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish once the process stops.
const DRAIN: Duration = Duration::from_secs(2);

/// The endpoints' address could not be listened on.
#[derive(Debug, thiserror::Error)]
#[error("serving /metrics on {addr}")]
pub struct BindError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// Why binding (or reading back the bound address) failed.
    #[source]
    pub source: std::io::Error,
}

/// What `/readyz` reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ready {
    /// Whether the component does its job (caches synced, configuration loaded).
    pub ready: bool,
    /// Said after `ok: ` when ready, or alone when not (why not).
    pub message: Option<String>,
}

/// Where `/readyz` gets its answer.
pub trait Readiness: Send + Sync + 'static {
    /// The current answer.
    fn ready(&self) -> Ready;
}

impl<F: Fn() -> Ready + Send + Sync + 'static> Readiness for F {
    fn ready(&self) -> Ready {
        self()
    }
}

/// Readiness from a flag the component sets once it is ready, with a fixed message until
/// then.
#[derive(Debug, Clone)]
pub struct Flag {
    flag: Arc<AtomicBool>,
    not_ready: &'static str,
}

impl Flag {
    /// Ready once `flag` is set; until then `/readyz` says `not_ready`.
    pub fn new(flag: Arc<AtomicBool>, not_ready: &'static str) -> Self {
        Self { flag, not_ready }
    }
}

impl Readiness for Flag {
    fn ready(&self) -> Ready {
        let ready = self.flag.load(Ordering::Acquire);
        Ready {
            ready,
            message: (!ready).then(|| self.not_ready.to_string()),
        }
    }
}

/// The process's health and metrics endpoints.
#[derive(Clone)]
pub struct Endpoints {
    metrics: Arc<dyn Exposition>,
    readiness: Arc<dyn Readiness>,
}

fn text(code: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

impl Endpoints {
    /// Endpoints serving `metrics` and answering `/readyz` from `readiness`.
    pub fn new(metrics: Arc<dyn Exposition>, readiness: impl Readiness) -> Self {
        Self {
            metrics,
            readiness: Arc::new(readiness),
        }
    }

    /// The answer to one request (GET or HEAD; hyper leaves the body out for HEAD).
    pub fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                "text/plain",
                "method not allowed\n".into(),
            );
        }
        match path {
            "/metrics" => text(StatusCode::OK, OPENMETRICS, self.metrics.encode()),
            "/healthz" | "/livez" => text(StatusCode::OK, "text/plain", "ok\n".into()),
            "/readyz" => {
                let Ready { ready, message } = self.readiness.ready();
                let (code, body) = match (ready, message) {
                    (true, None) => (StatusCode::OK, "ok\n".to_string()),
                    (true, Some(m)) => (StatusCode::OK, format!("ok: {m}\n")),
                    (false, m) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("{}\n", m.as_deref().unwrap_or("not ready")),
                    ),
                };
                text(code, "text/plain", body)
            }
            _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }

    /// Serves on `listener` until `shutdown`; open connections then get a moment to finish.
    pub async fn serve(self, listener: TcpListener, shutdown: Shutdown) {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = shutdown.triggered() => return,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, usually: wait rather than spin.
                    tracing::debug!(%error, "accepting a metrics connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (endpoints, shutdown) = (self.clone(), shutdown.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let r = endpoints.respond(req.method(), req.uri().path());
                    async move { Ok::<_, Infallible>(r) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                let mut conn = std::pin::pin!(conn);
                let result = tokio::select! {
                    r = conn.as_mut() => r,
                    () = shutdown.triggered() => {
                        conn.as_mut().graceful_shutdown();
                        tokio::time::timeout(DRAIN, conn).await.unwrap_or(Ok(()))
                    }
                };
                if let Err(error) = result {
                    tracing::debug!(%error, "metrics connection");
                }
            });
        }
    }

    /// Binds `addr` (if any) and serves there in a task until `shutdown`.
    pub async fn spawn(
        self,
        addr: Option<SocketAddr>,
        shutdown: &Shutdown,
    ) -> Result<Option<JoinHandle<()>>, BindError> {
        let Some(addr) = addr else {
            return Ok(None);
        };
        let bound = match TcpListener::bind(addr).await {
            Ok(listener) => listener.local_addr().map(|a| (listener, a)),
            Err(e) => Err(e),
        };
        let (listener, local) = bound.map_err(|source| BindError { addr, source })?;
        tracing::info!(addr = %local, "serving /metrics, /healthz, /livez, /readyz");
        Ok(Some(tokio::spawn(self.serve(listener, shutdown.clone()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Fixed;
    impl Exposition for Fixed {
        fn encode(&self) -> String {
            "meridian_test_up 1\n".into()
        }
    }

    async fn body(r: Response<Full<Bytes>>) -> String {
        let bytes = r.into_body().collect().await.expect("body").to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn routes() {
        let flag = Arc::new(AtomicBool::new(false));
        let e = Endpoints::new(Arc::new(Fixed), Flag::new(flag.clone(), "not synced"));
        let get = |path: &str| e.respond(&Method::GET, path);
        assert_eq!(get("/healthz").status(), 200);
        assert_eq!(get("/livez").status(), 200);
        assert_eq!(get("/nope").status(), 404);
        assert_eq!(e.respond(&Method::POST, "/metrics").status(), 405);
        let not_ready = get("/readyz");
        assert_eq!(not_ready.status(), 503);
        assert_eq!(body(not_ready).await, "not synced\n");
        flag.store(true, Ordering::Release);
        assert_eq!(body(get("/readyz")).await, "ok\n");
        let metrics = get("/metrics");
        assert_eq!(metrics.headers()[header::CONTENT_TYPE], OPENMETRICS);
        assert_eq!(body(metrics).await, "meridian_test_up 1\n");

        // A readiness with a message while ready (a rejected update, the last good one served).
        let e = Endpoints::new(Arc::new(Fixed), || Ready {
            ready: true,
            message: Some("latest rejected: x".into()),
        });
        assert_eq!(
            body(e.respond(&Method::GET, "/readyz")).await,
            "ok: latest rejected: x\n"
        );
    }

    #[tokio::test]
    async fn serves_over_a_socket_until_shutdown() {
        let shutdown = Shutdown::new();
        let e = Endpoints::new(Arc::new(Fixed), || Ready {
            ready: true,
            message: None,
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(e.serve(listener, shutdown.clone()));
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(out.ends_with("ok\n"), "{out}");
        shutdown.trigger();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("stops on shutdown")
            .expect("join");
    }
}

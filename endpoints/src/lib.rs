//! `/metrics`, `/healthz` and `/readyz` over plain HTTP/1.1 (meant for loopback or a pod
//! network; it serves no credentials and takes no input beyond the path).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A component's metrics registry, as Prometheus text.
pub trait MetricsText: Send + Sync {
    /// The exposition.
    fn encode(&self) -> String;
}

/// What the endpoints read.
#[derive(Clone)]
pub struct State {
    /// Process metrics.
    pub metrics: Arc<dyn MetricsText>,
    /// Set once the component's caches are synced.
    pub ready: Arc<AtomicBool>,
    /// What `/readyz` says until then.
    pub not_ready: &'static str,
}

/// A response: status code, content type, body.
pub type Response = (u16, &'static str, String);

/// Answers one request line (`GET /path HTTP/1.1`), without a socket.
pub fn respond(request_line: &str, state: &State) -> Response {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split('?').next().unwrap_or_default();
    if method != "GET" && method != "HEAD" {
        return (405, "text/plain", "method not allowed\n".into());
    }
    match path {
        "/metrics" => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            state.metrics.encode(),
        ),
        "/healthz" | "/livez" => (200, "text/plain", "ok\n".into()),
        "/readyz" if state.ready.load(Ordering::Acquire) => (200, "text/plain", "ok\n".into()),
        "/readyz" => (503, "text/plain", format!("{}\n", state.not_ready)),
        _ => (404, "text/plain", "not found\n".into()),
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

async fn handle(mut stream: TcpStream, state: State) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    // Read until the end of the headers (or a full buffer: longer requests are not ours).
    while len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            break;
        }
        len += n;
        if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf[..len]);
    let line = text.lines().next().unwrap_or_default();
    let (code, ctype, body) = respond(line, &state);
    let head = format!(
        "HTTP/1.1 {code} {}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reason(code),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if !line.starts_with("HEAD") {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

/// Serves until the task is dropped; each connection has 10 s to finish.
pub async fn serve(listener: TcpListener, state: State) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            if let Ok(Err(error)) =
                tokio::time::timeout(Duration::from_secs(10), handle(stream, state)).await
            {
                tracing::debug!(%error, "metrics connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl MetricsText for Fixed {
        fn encode(&self) -> String {
            "meridian_test_up 1\n".into()
        }
    }

    fn state(ready: bool) -> State {
        State {
            metrics: Arc::new(Fixed),
            ready: Arc::new(AtomicBool::new(ready)),
            not_ready: "not synced",
        }
    }

    #[test]
    fn routes() {
        let cases = [
            ("GET /healthz HTTP/1.1", false, 200),
            ("GET /readyz HTTP/1.1", false, 503),
            ("GET /readyz HTTP/1.1", true, 200),
            ("GET /metrics HTTP/1.1", false, 200),
            ("GET /nope HTTP/1.1", true, 404),
            ("POST /metrics HTTP/1.1", true, 405),
            ("", true, 405),
        ];
        for (line, ready, code) in cases {
            assert_eq!(respond(line, &state(ready)).0, code, "{line}");
        }
        assert!(
            respond("GET /metrics HTTP/1.1", &state(true))
                .2
                .contains("meridian_test_up")
        );
    }

    #[tokio::test]
    async fn serves_over_a_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(serve(listener, state(true)));
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        assert!(out.ends_with("ok\n"), "{out}");
        server.abort();
    }
}

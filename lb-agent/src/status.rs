//! `/metrics`, `/healthz` and `/readyz` on `--metrics-addr`. Answers come from
//! `meridian-endpoints`, except `/readyz`, whose message follows the agent's status (a
//! rejected configuration is reported there while the last good one is served).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::agent::Status;
use crate::metrics::Metrics;

/// Answers one request line.
pub fn respond(line: &str, metrics: &Arc<Metrics>, status: &Status) -> (u16, String, String) {
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split('?')
        .next()
        .unwrap_or_default();
    if path == "/readyz" && line.starts_with("GET ") {
        let code = if status.ready { 200 } else { 503 };
        let mut body = if status.ready {
            "ok".to_string()
        } else {
            String::new()
        };
        if let Some(m) = &status.message {
            if !body.is_empty() {
                body.push_str(": ");
            }
            body.push_str(m);
        }
        body.push('\n');
        return (code, "text/plain".into(), body);
    }
    let state = meridian_endpoints::State {
        metrics: metrics.clone(),
        ready: Arc::new(AtomicBool::new(status.ready)),
        not_ready: "not ready",
    };
    let (code, ctype, body) = meridian_endpoints::respond(line, &state);
    (code, ctype.to_string(), body)
}

async fn handle(
    mut stream: TcpStream,
    metrics: Arc<Metrics>,
    status: watch::Receiver<Status>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
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
    let current = status.borrow().clone();
    let (code, ctype, body) = respond(line, &metrics, &current);
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if !line.starts_with("HEAD") {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.shutdown().await
}

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, status: watch::Receiver<Status>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (m, s) = (metrics.clone(), status.clone());
        tokio::spawn(async move {
            if let Ok(Err(error)) =
                tokio::time::timeout(Duration::from_secs(10), handle(stream, m, s)).await
            {
                tracing::debug!(%error, "status connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_reports_status_and_message() {
        let m = Arc::new(Metrics::default());
        let not = Status {
            ready: false,
            message: Some("no configuration yet".into()),
        };
        let r = respond("GET /readyz HTTP/1.1", &m, &not);
        assert_eq!((r.0, r.2.as_str()), (503, "no configuration yet\n"));
        let warn = Status {
            ready: true,
            message: Some("latest rejected: x".into()),
        };
        let r = respond("GET /readyz HTTP/1.1", &m, &warn);
        assert_eq!((r.0, r.2.as_str()), (200, "ok: latest rejected: x\n"));
        assert_eq!(respond("GET /healthz HTTP/1.1", &m, &not).0, 200);
        let r = respond("GET /metrics HTTP/1.1", &m, &not);
        assert!(r.2.contains("meridian_lb_config_errors_total"), "{}", r.2);
    }
}

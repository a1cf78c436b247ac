//! `/metrics`, `/healthz`, `/livez` and `/readyz` on `--metrics-addr`, served by the shared
//! endpoints; `/readyz` follows the agent's status (a rejected configuration is reported
//! there while the last good one is served).

use std::sync::Arc;

use meridian_runtime::endpoints::{Endpoints, Ready};
use tokio::sync::watch;

use crate::agent::Status;
use crate::metrics::Metrics;

/// The endpoints of an agent reporting `status`.
pub fn endpoints(metrics: Arc<Metrics>, status: watch::Receiver<Status>) -> Endpoints {
    Endpoints::new(metrics, move || {
        let s = status.borrow();
        Ready {
            ready: s.ready,
            message: s.message.clone(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use http_body_util::BodyExt;

    async fn get(e: &Endpoints, path: &str) -> (u16, String) {
        let r = e.respond(&Method::GET, path);
        let code = r.status().as_u16();
        let body = r.into_body().collect().await.expect("body").to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_reports_status_and_message() {
        let m = Arc::new(Metrics::default());
        let (tx, rx) = watch::channel(Status {
            ready: false,
            message: Some("no configuration yet".into()),
        });
        let e = endpoints(m, rx);
        assert_eq!(
            get(&e, "/readyz").await,
            (503, "no configuration yet\n".into())
        );
        tx.send_replace(Status {
            ready: true,
            message: Some("latest rejected: x".into()),
        });
        assert_eq!(
            get(&e, "/readyz").await,
            (200, "ok: latest rejected: x\n".into())
        );
        assert_eq!(get(&e, "/healthz").await.0, 200);
        let (code, text) = get(&e, "/metrics").await;
        assert_eq!(code, 200);
        assert!(text.contains("meridian_lb_config_errors_total"), "{text}");
    }
}

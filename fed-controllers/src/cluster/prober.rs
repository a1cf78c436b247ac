//! The probe itself: `GET /readyz` (or `/healthz` where `/readyz` is 404), then an
//! authenticated call, each under the probe timeout, classified into an [`Outcome`].

use std::error::Error as StdError;
use std::time::Duration;

use kube::Client;
use meridian_runtime::error::report;

use super::probe::{FailureKind, Outcome};

/// Which health path a member serves; remembered so a `/healthz`-only member costs one
/// request per probe, not two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HealthPath {
    /// Not known yet: try `/readyz` first.
    #[default]
    Readyz,
    /// `/readyz` answered 404: use `/healthz`.
    Healthz,
}

/// Probes a member once. `deadline` bounds the whole probe (both requests).
pub async fn probe(client: &Client, path: &mut HealthPath, deadline: Duration) -> Outcome {
    match tokio::time::timeout(deadline, probe_inner(client, path)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failure {
            kind: FailureKind::Timeout,
            message: format!("no answer within {}", humanize(deadline)),
        },
    }
}

async fn probe_inner(client: &Client, path: &mut HealthPath) -> Outcome {
    let health = match *path {
        HealthPath::Readyz => match get(client, "/readyz").await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                *path = HealthPath::Healthz;
                get(client, "/healthz").await.map(|_| "/healthz")
            }
            r => r.map(|_| "/readyz"),
        },
        HealthPath::Healthz => get(client, "/healthz").await.map(|_| "/healthz"),
    };
    if let Err(e) = health {
        let p = if *path == HealthPath::Healthz {
            "/healthz"
        } else {
            "/readyz"
        };
        return classify(p, &e);
    }
    // Health endpoints are often served to anyone; this one needs our credentials, so
    // a revoked or rotated-away token shows up as Unauthorized rather than Ready.
    match get(client, "/api").await {
        Ok(_) => Outcome::Success,
        Err(e) => classify("/api", &e),
    }
}

async fn get(client: &Client, path: &str) -> Result<String, kube::Error> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    client.request_text(req).await
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Maps a client error to a failure kind and a message that never includes credentials.
pub fn classify(path: &str, err: &kube::Error) -> Outcome {
    let (kind, message) = match err {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => (
            FailureKind::Unauthorized,
            format!(
                "{path}: {} {}: the member rejected the credentials in spec.secretRef",
                s.code, s.reason
            ),
        ),
        kube::Error::Api(s) => {
            // /readyz bodies list the failing checks; keep a bounded amount for the message.
            let detail: String = s.message.chars().take(300).collect();
            (
                FailureKind::ProbeFailed,
                format!("{path}: HTTP {}: {detail}", s.code),
            )
        }
        other => match transport_kind(other) {
            TransportKind::Tls(detail) => (FailureKind::TlsError, format!("{path}: TLS: {detail}")),
            // The error and its sources, so messages say "connection refused", not just
            // "client error (Connect)".
            TransportKind::Timeout => (FailureKind::Timeout, format!("{path}: {}", report(other))),
            TransportKind::Other => (
                FailureKind::Unreachable,
                format!("{path}: {}", report(other)),
            ),
        },
    };
    Outcome::Failure { kind, message }
}

enum TransportKind {
    Tls(String),
    Timeout,
    Other,
}

/// What failed underneath a transport error, judged by the types in its source chain.
fn transport_kind(err: &kube::Error) -> TransportKind {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return TransportKind::Tls(tls.to_string());
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            // io::Error::source() skips the wrapped error itself; look at it directly
            // (tokio-rustls reports handshake failures as io errors wrapping rustls's).
            if let Some(tls) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                return TransportKind::Tls(tls.to_string());
            }
            if io.kind() == std::io::ErrorKind::TimedOut {
                return TransportKind::Timeout;
            }
        }
        if e.downcast_ref::<tokio::time::error::Elapsed>().is_some()
            || e.downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_timeout)
        {
            return TransportKind::Timeout;
        }
        cur = e.source();
    }
    TransportKind::Other
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("boom", reason).with_code(code).boxed())
    }

    fn kind(o: &Outcome) -> Option<FailureKind> {
        match o {
            Outcome::Failure { kind, .. } => Some(*kind),
            Outcome::Success => None,
        }
    }

    #[test]
    fn classification_table() {
        let io = |k: std::io::ErrorKind| kube::Error::ReadEvents(std::io::Error::from(k));
        let tls = kube::Error::ReadEvents(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        let cases = [
            (api(401, "Unauthorized"), FailureKind::Unauthorized),
            (api(403, "Forbidden"), FailureKind::Unauthorized),
            (api(500, "InternalError"), FailureKind::ProbeFailed),
            (api(503, "ServiceUnavailable"), FailureKind::ProbeFailed),
            (
                io(std::io::ErrorKind::ConnectionRefused),
                FailureKind::Unreachable,
            ),
            (io(std::io::ErrorKind::TimedOut), FailureKind::Timeout),
            (tls, FailureKind::TlsError),
        ];
        for (err, want) in cases {
            let got = classify("/readyz", &err);
            assert_eq!(kind(&got), Some(want), "{err}");
        }
    }

    #[test]
    fn unauthorized_message_names_the_problem() {
        let Outcome::Failure { message, .. } = classify("/api", &api(401, "Unauthorized")) else {
            panic!("expected failure")
        };
        assert!(message.contains("credentials"), "{message}");
        assert!(message.contains("/api"), "{message}");
    }
}

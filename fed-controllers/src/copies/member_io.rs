//! The copy path's member requests: each under a timeout, its failure told as a reason the
//! Placement shows and a message (never decided on the message's text).

use meridian_runtime::error::Report;

use super::report::FailReason;

/// Runs one member request under `timeout`, its failure as a reason and message.
pub(super) async fn timed<T>(
    timeout: std::time::Duration,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, (FailReason, String)> {
    match tokio::time::timeout(timeout, f).await {
        Ok(r) => r.map_err(classify),
        Err(_) => Err((
            FailReason::Unreachable,
            format!("timed out after {timeout:?}"),
        )),
    }
}

/// The reason and message of a member's refusal.
pub(super) fn classify(e: kube::Error) -> (FailReason, String) {
    match e {
        kube::Error::Api(s) if s.code == 404 => (FailReason::KindNotServed, s.message),
        kube::Error::Api(s) if s.code == 409 => (FailReason::Conflict, s.message),
        kube::Error::Api(s) if (400..500).contains(&s.code) => (FailReason::Rejected, s.message),
        other => (FailReason::Unreachable, Report(&other).to_string()),
    }
}

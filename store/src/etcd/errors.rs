//! How etcd client failures become [`StoreError`]s.
//!
//! Decided on the gRPC status code and the error's kind, never on its text. `OUT_OF_RANGE`
//! (compacted or future revision) is left to the callers: only they know which revision they
//! asked for.

use etcd_client::Error;
use tonic::Code;

use crate::StoreError;

/// `err`, raised while doing `context`, as a store error.
pub(crate) fn store_error(context: &'static str, err: Error) -> StoreError {
    if unavailable(&err) {
        StoreError::Unavailable {
            context,
            source: std::sync::Arc::new(err),
        }
    } else {
        StoreError::backend(context, err)
    }
}

/// Whether `err` says etcd could not be reached or could not answer in time: the request may
/// succeed once retried.
pub(crate) fn unavailable(err: &Error) -> bool {
    match err {
        Error::GRpcStatus(status) => {
            matches!(
                status.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted
            ) || broken_connection(status)
        }
        Error::TransportError(_) | Error::IoError(_) => true,
        _ => false,
    }
}

/// Whether `status` stands for a connection that broke under a stream, not for an answer
/// from etcd: tonic reports that as `UNKNOWN` with the HTTP/2 or I/O error among its causes.
fn broken_connection(status: &tonic::Status) -> bool {
    let first: &(dyn std::error::Error + 'static) = status;
    std::iter::successors(Some(first), |err| err.source()).any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some()
            || cause
                .downcast_ref::<h2::Error>()
                .is_some_and(|e| e.is_io() || e.is_go_away())
    })
}

/// Whether `err` certainly happened before the request reached etcd: the member refused the
/// connection (its process is gone), found by the I/O error's kind in the error's causes.
pub(crate) fn never_sent(err: &Error) -> bool {
    let first: &(dyn std::error::Error + 'static) = match err {
        Error::GRpcStatus(status) => status,
        Error::TransportError(transport) => transport,
        Error::IoError(io) => io,
        _ => return false,
    };
    std::iter::successors(Some(first), |err| err.source()).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// Whether `err` is etcd's answer to a request at a revision it no longer or not yet holds.
pub(crate) fn out_of_range(err: &Error) -> bool {
    matches!(err, Error::GRpcStatus(status) if status.code() == Code::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_etcd_is_unavailable_and_other_failures_are_backend_failures() {
        let cases = [
            (Code::Unavailable, true),
            (Code::DeadlineExceeded, true),
            (Code::InvalidArgument, false),
            (Code::PermissionDenied, false),
        ];
        for (code, expected) in cases {
            let err = store_error("reading", Error::GRpcStatus(tonic::Status::new(code, "x")));
            assert_eq!(
                matches!(err, StoreError::Unavailable { .. }),
                expected,
                "{code:?}"
            );
        }
        // A stream whose connection broke: UNKNOWN, with the I/O error as its cause.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "stream closed",
        )));
        assert_eq!(broken.code(), Code::Unknown);
        assert!(unavailable(&Error::GRpcStatus(broken)));
        assert!(!unavailable(&Error::GRpcStatus(tonic::Status::new(
            Code::Unknown,
            "an answer from etcd"
        ))));
        assert!(out_of_range(&Error::GRpcStatus(tonic::Status::new(
            Code::OutOfRange,
            "any text"
        ))));
    }

    #[test]
    fn only_a_refused_connection_proves_a_request_was_not_sent() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let status = tonic::Status::from_error(Box::new(refused));
        assert!(never_sent(&Error::GRpcStatus(status)));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let status = tonic::Status::from_error(Box::new(reset));
        assert!(!never_sent(&Error::GRpcStatus(status)));
        assert!(!never_sent(&Error::GRpcStatus(tonic::Status::unavailable(
            "connection refused"
        ))));
    }
}

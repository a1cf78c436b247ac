//! The error a federation-side reconcile fails with, and the timeout every federation
//! request runs under.

use std::time::Duration;

/// Why a federation-side reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum FedError {
    /// A federation request failed.
    #[error("{op}")]
    Api {
        /// What was attempted.
        op: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A federation request timed out.
    #[error("{0}: timed out")]
    Timeout(String),
    /// An object could not be converted.
    #[error("encoding")]
    Encode(#[from] serde_json::Error),
    /// A federation watch ended.
    #[error("the federation watches ended")]
    WatchEnded,
}

impl FedError {
    /// Whether a write lost a race with a newer version of its object (HTTP 409).
    pub fn is_conflict(&self) -> bool {
        matches!(self, FedError::Api { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

/// Runs the federation request `f` (described by `op`) with a deadline.
pub async fn timed<T>(
    timeout: Duration,
    op: &str,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, FedError> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(FedError::Api {
            op: op.into(),
            source,
        }),
        Err(_) => Err(FedError::Timeout(op.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> FedError {
        FedError::Api {
            op: "status of placement deployment-web".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("the object has been modified", "Conflict")
                    .with_code(code)
                    .boxed(),
            ),
        }
    }

    #[test]
    fn conflicts_are_told_from_failures() {
        assert!(api_error(409).is_conflict());
        assert!(!api_error(500).is_conflict());
        assert!(!FedError::Timeout("status".into()).is_conflict());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_deadline_times_out() {
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, kube::Error>(1)
        };
        let e = timed(Duration::from_secs(1), "reading x", slow).await;
        assert!(matches!(e, Err(FedError::Timeout(op)) if op == "reading x"));
        let fast = async { Ok::<_, kube::Error>(2) };
        assert_eq!(timed(Duration::from_secs(1), "y", fast).await.unwrap(), 2);
    }
}

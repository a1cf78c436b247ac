//! Whether a member answers, as the last request of one path to it found: a member that
//! does not (its requests time out or never reach it) syncs without taking one of the
//! process's member-sync slots ([`super::Settings::sync_slot`]), so a partitioned part of
//! the fleet, whose syncs each wait out a deadline, cannot hold every slot while the
//! members that answer wait.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::member_sync::SyncError;

/// One member's last known answering state (it answers until a request says otherwise).
#[derive(Debug)]
pub struct Answering(AtomicBool);

impl Default for Answering {
    fn default() -> Self {
        Answering(AtomicBool::new(true))
    }
}

impl Answering {
    /// Whether the member answered its last request.
    pub fn answers(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Records whether a request got an answer.
    pub fn set(&self, answered: bool) {
        self.0.store(answered, Ordering::Relaxed);
    }

    /// Records a member request's outcome; one that says nothing about the member (a
    /// conflict decided from the cache, an encoding error) leaves the state as it was.
    pub fn heard<T>(&self, outcome: &Result<T, SyncError>) {
        if let Some(answered) = answered(outcome) {
            self.set(answered);
        }
    }
}

/// Whether a request's outcome shows the member answering: any reply, refusals included,
/// is an answer; a timeout or a failure to reach it is not. `None`: the outcome did not
/// come from the member.
pub fn answered<T>(outcome: &Result<T, SyncError>) -> Option<bool> {
    match outcome {
        Ok(_) => Some(true),
        Err(SyncError::Timeout { .. }) => Some(false),
        Err(SyncError::Api { source, .. }) => Some(reply(source)),
        Err(SyncError::Conflict { .. } | SyncError::NotConnected | SyncError::Encode(..)) => None,
    }
}

/// Whether a client error carries the member's reply (a status, or a body that did not
/// decode) rather than a failure to reach it.
pub fn reply(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(_) | kube::Error::SerdeError(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> SyncError {
        SyncError::Api {
            op: "creating deployment web".into(),
            cluster: "sim-1".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("nope", "Forbidden")
                    .with_code(code)
                    .boxed(),
            ),
        }
    }

    #[test]
    fn replies_are_answers_timeouts_and_transport_failures_are_not() {
        let timeout = SyncError::Timeout {
            op: "creating deployment web".into(),
            cluster: "sim-1".into(),
        };
        let unreachable = SyncError::Api {
            op: "creating deployment web".into(),
            cluster: "sim-1".into(),
            source: kube::Error::Service("connection refused".into()),
        };
        let cases: [(Result<(), SyncError>, Option<bool>); 6] = [
            (Ok(()), Some(true)),
            (Err(api(403)), Some(true)),
            (Err(api(503)), Some(true)),
            (Err(timeout), Some(false)),
            (Err(unreachable), Some(false)),
            (Err(SyncError::NotConnected), None),
        ];
        for (outcome, want) in cases {
            assert_eq!(answered(&outcome), want, "{outcome:?}");
        }
    }

    #[test]
    fn the_state_follows_what_the_member_last_said() {
        let a = Answering::default();
        assert!(a.answers(), "a member answers until shown otherwise");
        a.heard::<()>(&Err(SyncError::Timeout {
            op: "reading deployment web".into(),
            cluster: "sim-1".into(),
        }));
        assert!(!a.answers());
        a.heard::<()>(&Err(SyncError::NotConnected));
        assert!(
            !a.answers(),
            "an outcome not from the member changes nothing"
        );
        a.heard::<()>(&Err(api(409)));
        assert!(a.answers());
    }
}

//! The tunables every member fleet shares: request deadline, retry backoff, and the
//! member clients (one connection per member for the whole process).

use std::sync::Arc;
use std::time::Duration;

use meridian_runtime::queue::{self, Backoff};

use crate::member_client::{Limits, MemberClients};

/// Tunables of a member fleet.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Deadline of one member or federation request.
    pub sync_timeout: Duration,
    /// First retry delay after a failure.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// Member clients (shared with the other controllers: one connection per member).
    pub clients: Arc<MemberClients>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            clients: MemberClients::new(Limits::default()),
        }
    }
}

impl Settings {
    /// The retry delays after failures.
    pub fn backoff(&self) -> Backoff {
        Backoff::jittered(self.backoff_base, self.backoff_max)
    }

    /// A work queue retrying with [`Settings::backoff`].
    pub fn queue(&self) -> queue::Settings {
        queue::Settings::jittered(self.backoff_base, self.backoff_max)
    }
}

//! Which etcd member requests go to: one pinned member at a time, the next one once it fails.
//!
//! A client balancing over every member keeps sending a share of the requests to a member
//! that crashed (its connection is retried, not dropped). Like etcd's own Go client, this
//! sends everything to one member and moves on when that member cannot be reached. A request
//! that failed that way is tried again on the next member when that is safe: always for
//! reads, and for writes only when the connection was refused, so the write never left.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client::{Client, ConnectOptions, KvClient, MaintenanceClient, WatchClient};

use super::errors;

/// The clients of one member.
#[derive(Clone)]
pub(crate) struct Member {
    pub(crate) kv: KvClient,
    pub(crate) watch: WatchClient,
    pub(crate) maintenance: MaintenanceClient,
}

/// Every member's clients and the one in use.
pub(crate) struct Members {
    members: Vec<Member>,
    pinned: AtomicUsize,
}

/// Whether a request may run twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// A read or a watch: trying it on another member is always safe.
    Always,
    /// A write: only when it certainly did not reach etcd.
    IfNotSent,
}

impl Members {
    /// Clients for every endpoint (connections are made on first use).
    pub(crate) async fn connect(
        endpoints: &[String],
        options: &ConnectOptions,
    ) -> Result<Self, etcd_client::Error> {
        let mut members = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let client = Client::connect([endpoint], Some(options.clone())).await?;
            members.push(Member {
                kv: client.kv_client(),
                watch: client.watch_client(),
                maintenance: client.maintenance_client(),
            });
        }
        Ok(Members {
            members,
            pinned: AtomicUsize::new(0),
        })
    }

    /// Runs `request` on the pinned member, moving on to the next member when it cannot be
    /// reached, and trying again there as `retry` allows: at most twice around the members.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        retry: Retry,
        request: F,
    ) -> Result<T, etcd_client::Error>
    where
        F: Fn(Member) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let attempts = 2 * self.members.len();
        let mut attempt = 1;
        loop {
            let index = self.pinned.load(Ordering::Acquire) % self.members.len();
            let result = request(self.members[index].clone()).await;
            let Err(err) = result else {
                return result;
            };
            if !errors::unavailable(&err) {
                return Err(err);
            }
            // Another request may have moved on already; only the first failure moves.
            let next = (index + 1) % self.members.len();
            let _ = self
                .pinned
                .compare_exchange(index, next, Ordering::AcqRel, Ordering::Acquire);
            let safe = match retry {
                Retry::Always => true,
                Retry::IfNotSent => errors::never_sent(&err),
            };
            if !safe || attempt >= attempts {
                return Err(err);
            }
            tracing::debug!(error = %err, member = index, "etcd member unreachable; trying the next");
            attempt += 1;
        }
    }
}

//! An in-process [`LeaseStore`] with an API server's concurrency rules (create only when
//! absent, replace only at the current resourceVersion), for tests of the election and of
//! what runs under it: each [`MemoryLeases::handle`] is one replica's connection, which a
//! test can cut ([`MemoryLeases::partition`]) or slow down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::watch;

use super::record::{Record, Stored};
use super::store::{LeaseStore, StoreError};
use crate::sync::lock;

/// The shared Lease: its record and version, and a counter of versions.
#[derive(Debug, Default)]
struct Shared {
    lease: Option<Stored>,
    version: u64,
    writes: u64,
}

/// One replica's view of an in-process Lease.
#[derive(Debug, Clone)]
pub struct MemoryLeases {
    shared: Arc<std::sync::Mutex<Shared>>,
    changes: Arc<watch::Sender<Option<Stored>>>,
    cut: Arc<AtomicBool>,
    latency: Duration,
}

impl Default for MemoryLeases {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLeases {
    /// An empty store (no Lease yet), answering at once.
    pub fn new() -> Self {
        Self {
            shared: Arc::default(),
            changes: Arc::new(watch::channel(None).0),
            cut: Arc::default(),
            latency: Duration::ZERO,
        }
    }

    /// Another replica's connection to the same Lease, answering after `latency` (on
    /// the tokio clock, so a paused test decides how operations interleave).
    pub fn handle(&self, latency: Duration) -> Self {
        Self {
            shared: self.shared.clone(),
            changes: self.changes.clone(),
            cut: Arc::default(),
            latency,
        }
    }

    /// Cuts this connection off (every operation fails, no change is seen) or heals it.
    pub fn partition(&self, cut: bool) {
        self.cut.store(cut, Ordering::Release);
    }

    /// What is stored now.
    pub fn current(&self) -> Option<Stored> {
        lock(&self.shared).lease.clone()
    }

    /// Successful writes so far (creates and replaces).
    pub fn writes(&self) -> u64 {
        lock(&self.shared).writes
    }

    async fn reach(&self) -> Result<(), StoreError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        if self.cut.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable("partitioned".into()));
        }
        Ok(())
    }

    fn write(&self, shared: &mut Shared, record: &Record) -> Stored {
        shared.version += 1;
        shared.writes += 1;
        let stored = Stored {
            record: record.clone(),
            resource_version: shared.version.to_string(),
        };
        shared.lease = Some(stored.clone());
        self.changes.send_replace(Some(stored.clone()));
        stored
    }
}

impl LeaseStore for MemoryLeases {
    async fn get(&self) -> Result<Option<Stored>, StoreError> {
        self.reach().await?;
        Ok(self.current())
    }

    async fn create(&self, record: &Record) -> Result<Stored, StoreError> {
        self.reach().await?;
        let mut shared = lock(&self.shared);
        if shared.lease.is_some() {
            return Err(StoreError::Conflict);
        }
        Ok(self.write(&mut shared, record))
    }

    async fn update(&self, record: &Record, resource_version: &str) -> Result<Stored, StoreError> {
        self.reach().await?;
        let mut shared = lock(&self.shared);
        match &shared.lease {
            None => Err(StoreError::Gone),
            Some(s) if s.resource_version != resource_version => Err(StoreError::Conflict),
            Some(_) => Ok(self.write(&mut shared, record)),
        }
    }

    fn changes(&self) -> BoxStream<'static, Option<Stored>> {
        let rx = self.changes.subscribe();
        let cut = self.cut.clone();
        futures::stream::unfold(rx, move |mut rx| {
            let cut = cut.clone();
            async move {
                loop {
                    rx.changed().await.ok()?;
                    // A cut-off replica sees nothing.
                    if !cut.load(Ordering::Acquire) {
                        let now = rx.borrow_and_update().clone();
                        return Some((now, rx));
                    }
                }
            }
        })
        .boxed()
    }

    fn describe(&self) -> String {
        "memory/lease".into()
    }
}

//! Revision-based key-value storage for the API server: the `Storage` trait, its types and three backends.
//!
//! Semantics follow etcd v3: one global revision bumped by every successful write, each key
//! carrying the revision that created it and the one that last modified it, compare-and-swap on
//! `mod_revision`, listings at a revision, and watches that resume from a revision. Kubernetes'
//! `resourceVersion` is this revision.
//!
//! Keys are paths: every key starts with `/`, and a prefix is either empty (everything) or
//! starts with `/` too. That is what lets the etcd backend keep all of its data under its own
//! prefix (`/registry` + key).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;

mod backend;
pub mod backup;
mod embedded;
mod error;
pub mod etcd;
mod history;
mod in_process;
mod memory;
mod op;
mod page;

pub use embedded::{DATA_FILE, EmbeddedOptions, EmbeddedStore};
pub use error::StoreError;
pub use etcd::{EtcdOptions, EtcdStore, EtcdTls};
pub use memory::{DEFAULT_MEMORY_HISTORY, MemoryStore};

/// A store revision; `0` means "before the first write".
pub type Revision = u64;

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A stream of watch events, ended by at most one error.
pub type WatchStream = BoxStream<'static, Result<Event>>;

/// A stream of watch events and progress reports, ended by at most one error.
pub type ProgressWatchStream = BoxStream<'static, Result<WatchItem>>;

/// One key with its value and revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The full key, e.g. `/apps/deployments/ns/name`.
    pub key: Arc<str>,
    /// The opaque stored bytes.
    pub value: Bytes,
    /// Revision of the write that created this key (since its last deletion).
    pub create_revision: Revision,
    /// Revision of the last write to this key.
    pub mod_revision: Revision,
}

/// The result of a prefix listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListResult {
    /// The keys under the prefix (all, or one page of them), sorted by key.
    pub items: Vec<KeyValue>,
    /// The revision of the snapshot the items were read from.
    pub revision: Revision,
    /// Whether keys under the prefix follow the last item: the page was cut by its limit.
    pub more: bool,
}

/// Which snapshot a listing reads, and which page of it.
///
/// A paginated listing reads its first page at the current revision and every later page at
/// that same revision, starting after the previous page's last key: the pages together are
/// one snapshot, as Kubernetes' `continue` tokens promise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Read the state as of this revision; `None` reads the current state. Fails with
    /// [`StoreError::Compacted`] once the history needed to reconstruct it is gone, and with
    /// [`StoreError::FutureRevision`] for a revision not written yet.
    pub revision: Option<Revision>,
    /// Only keys greater than this one (the last key of the previous page).
    pub after_key: Option<String>,
    /// At most this many items; `0` means no limit.
    pub limit: usize,
}

/// The result of a delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteResult {
    /// The value the key held before the delete.
    pub prev: KeyValue,
    /// The revision of the delete itself.
    pub revision: Revision,
}

/// What a write did to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or updated.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as delivered by [`Storage::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// For a put, the new value; for a delete, the deleted value with `mod_revision` set to the
    /// delete's revision.
    pub kv: KeyValue,
    /// The value before this change, if the key existed.
    pub prev: Option<KeyValue>,
}

impl Event {
    /// The revision of the write that produced this event.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// One item of a [`Storage::watch_with_progress`] stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchItem {
    /// A change under the watched prefix.
    Event(Event),
    /// Every event under the watched prefix with a revision up to this one has been delivered
    /// (etcd's progress notification; the API server turns it into a bookmark).
    Progress(Revision),
}

/// Revisioned key-value storage, shared by the API server as `Arc<dyn Storage>`.
#[async_trait]
pub trait Storage: Send + Sync {
    /// Reads one key at the current revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Reads every key starting with `prefix` from one consistent snapshot at the current
    /// revision.
    async fn list(&self, prefix: &str) -> Result<ListResult> {
        self.list_page(prefix, &ListOptions::default()).await
    }

    /// Reads keys starting with `prefix` from one consistent snapshot, as `options` chooses:
    /// at a given revision, after a key, at most a number of items.
    async fn list_page(&self, prefix: &str, options: &ListOptions) -> Result<ListResult>;

    /// Creates `key`; fails with [`StoreError::AlreadyExists`] if it is present.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replaces `key`'s value if its `mod_revision` is `expected_mod_revision`; fails with
    /// [`StoreError::Conflict`] otherwise, or [`StoreError::NotFound`] if it is absent.
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected_mod_revision: Revision,
    ) -> Result<KeyValue>;

    /// Deletes `key`, if given only when its `mod_revision` matches; fails with
    /// [`StoreError::NotFound`] if it is absent.
    async fn delete(
        &self,
        key: &str,
        expected_mod_revision: Option<Revision>,
    ) -> Result<DeleteResult>;

    /// Streams every event under `prefix` with a revision greater than `after`, in revision
    /// order: first the retained history, then live events, with no gap and no duplicate.
    ///
    /// Fails with [`StoreError::Compacted`] if `after` is older than the retained history; the
    /// stream itself ends with that error if its consumer falls behind the retained history, and
    /// with [`StoreError::Closed`] once the store closes and every earlier event was delivered.
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        let items = self.watch_with_progress(prefix, after, None).await?;
        Ok(items
            .filter_map(|item| {
                std::future::ready(match item {
                    Ok(WatchItem::Event(event)) => Some(Ok(event)),
                    Ok(WatchItem::Progress(_)) => None,
                    Err(err) => Some(Err(err)),
                })
            })
            .boxed())
    }

    /// Like [`Storage::watch`], with [`WatchItem::Progress`] reports in between: one whenever
    /// `progress` passes without an item, when given, and whenever the backend offers one
    /// (etcd sends them at its `--experimental-watch-progress-notify-interval`). etcd older
    /// than 3.5.13 (3.4.31) answers progress requests ahead of undelivered events, so with it
    /// only those periodic notifications come.
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        progress: Option<Duration>,
    ) -> Result<ProgressWatchStream>;

    /// The revision of the last write acknowledged by this store handle. With etcd that is
    /// this process's own last write; other clients' writes may be newer (see
    /// [`Storage::latest_revision`]).
    fn current_revision(&self) -> Revision;

    /// The newest revision of the whole store, read linearizably: at or after every write any
    /// client had acknowledged when the call started. Fails while the store cannot be reached
    /// (with etcd: no quorum), which makes it a readiness probe as well.
    async fn latest_revision(&self) -> Result<Revision>;

    /// Discards history up to and including `revision`: watches from before it fail with
    /// [`StoreError::Compacted`]. Compacting to an already compacted revision does nothing.
    async fn compact(&self, revision: Revision) -> Result<()>;
}

/// Whether `key` lies under `prefix`; the empty prefix matches everything.
fn under_prefix(key: &str, prefix: &str) -> bool {
    key.starts_with(prefix)
}

/// Checks that `key` is a path (starts with `/`).
fn check_key(key: &str) -> Result<()> {
    if key.starts_with('/') {
        Ok(())
    } else {
        Err(StoreError::InvalidKey { key: key.into() })
    }
}

/// Checks that `prefix` is empty or a path.
fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        Ok(())
    } else {
        check_key(prefix)
    }
}

//! Revision-based key-value storage for the API server: the `Storage` trait, its types and two backends.
//!
//! Semantics follow etcd v3: one global revision bumped by every successful write, each key
//! carrying the revision that created it and the one that last modified it, compare-and-swap on
//! `mod_revision`, and watches that resume from a revision. Kubernetes' `resourceVersion` is this
//! revision.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

mod embedded;
mod error;
mod history;
mod memory;
mod op;

pub use embedded::{DATA_FILE, EmbeddedOptions, EmbeddedStore};
pub use error::StoreError;
pub use memory::{DEFAULT_MEMORY_HISTORY, MemoryStore};

/// A store revision; `0` means "before the first write".
pub type Revision = u64;

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A stream of watch events, ended by at most one error.
pub type WatchStream = BoxStream<'static, Result<Event>>;

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
    /// Every key under the prefix, sorted by key.
    pub items: Vec<KeyValue>,
    /// The revision of the snapshot the items were read from.
    pub revision: Revision,
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

/// Revisioned key-value storage, shared by the API server as `Arc<dyn Storage>`.
#[async_trait]
pub trait Storage: Send + Sync {
    /// Reads one key at the current revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// Reads every key starting with `prefix` from one consistent snapshot.
    async fn list(&self, prefix: &str) -> Result<ListResult>;

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
    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream>;

    /// The revision of the last acknowledged write.
    fn current_revision(&self) -> Revision;

    /// Discards history up to and including `revision`: watches from before it fail with
    /// [`StoreError::Compacted`]. Compacting to an already compacted revision does nothing.
    async fn compact(&self, revision: Revision) -> Result<()>;
}

/// Whether `key` lies under `prefix`; the empty prefix matches everything.
fn under_prefix(key: &str, prefix: &str) -> bool {
    key.starts_with(prefix)
}

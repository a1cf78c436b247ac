//! The single error type of every store operation.

use std::error::Error as StdError;
use std::sync::Arc;

use crate::{KeyValue, Revision};

/// Why a store operation failed.
///
/// Cloneable so one backend failure can be reported to every request of a group commit.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The key does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The missing key.
        key: Arc<str>,
    },

    /// `create` found the key already present.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The existing key.
        key: Arc<str>,
    },

    /// A compare-and-swap precondition failed: the key's `mod_revision` is not the expected one.
    #[error("conflict on key {key:?}: expected mod_revision {expected}, found {}", found_revision(.current))]
    Conflict {
        /// The contested key.
        key: Arc<str>,
        /// The `mod_revision` the caller expected.
        expected: Revision,
        /// The key's current value, when the backend could read it in the same transaction.
        current: Option<KeyValue>,
    },

    /// The requested revision is older than the retained history (Kubernetes answers 410 Gone).
    #[error(
        "required revision has been compacted (history starts after revision {compact_revision})"
    )]
    Compacted {
        /// Only events with a revision greater than this one are still available. When
        /// another etcd client compacted, the etcd backend may only know a lower bound.
        compact_revision: Revision,
    },

    /// The requested revision is newer than the store's current revision.
    #[error("revision {revision} is newer than the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        revision: Revision,
        /// The store's current revision.
        current: Revision,
    },

    /// A key or prefix is not a path: keys start with `/`, prefixes are empty or start with `/`.
    #[error("key {key:?} does not start with '/'")]
    InvalidKey {
        /// The rejected key or prefix.
        key: Arc<str>,
    },

    /// The store could not be reached, or could not answer in time (with etcd: no connection,
    /// no leader, or no quorum). The operation may or may not have taken effect.
    #[error("storage unavailable while {context}")]
    Unavailable {
        /// What the store was doing.
        context: &'static str,
        /// The underlying failure.
        #[source]
        source: Arc<dyn StdError + Send + Sync>,
    },

    /// The store has been closed; no further writes are accepted.
    #[error("store is closed")]
    Closed,

    /// The data file holds something this version cannot decode.
    #[error("corrupt store data: {detail}")]
    Corrupt {
        /// What was wrong.
        detail: String,
    },

    /// The storage engine or the file system failed.
    #[error("storage backend failed while {context}")]
    Backend {
        /// What the store was doing.
        context: &'static str,
        /// The underlying failure.
        #[source]
        source: Arc<dyn StdError + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps a backend failure, keeping it as the source.
    pub(crate) fn backend(
        context: &'static str,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        StoreError::Backend {
            context,
            source: Arc::new(source),
        }
    }
}

fn found_revision(current: &Option<KeyValue>) -> String {
    match current {
        Some(kv) => kv.mod_revision.to_string(),
        None => "unknown".to_owned(),
    }
}

//! Watches and compaction of the two in-process backends (memory, embedded): both apply
//! [`Op`](crate::op::Op)s themselves and serve watches from their own [`History`], so that
//! side is said once here.

use std::sync::Arc;

use crate::backend::{Backend, WatchFrom, Watches};
use crate::history::History;
use crate::{ProgressWatchStream, Result, Revision, StoreError};

/// A backend that keeps its data and its event history in this process; every write it
/// applies is in its history, so its own revision is the store's newest.
pub(crate) trait InProcess: Backend {
    /// The events for watches.
    fn history(&self) -> &Arc<History>;
}

impl<B: InProcess> Watches for B {
    async fn watch_from(&self, from: WatchFrom<'_>) -> Result<ProgressWatchStream> {
        self.history().watch(from)
    }

    async fn newest_revision(&self) -> Result<Revision> {
        Ok(self.revision())
    }

    async fn discard_history(&self, revision: Revision) -> Result<()> {
        let current = self.revision();
        if revision > current {
            return Err(StoreError::FutureRevision { revision, current });
        }
        self.history().compact(revision);
        Ok(())
    }
}

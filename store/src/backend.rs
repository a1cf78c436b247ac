//! The one [`Storage`] impl, over what each backend says for itself: key checks and the shape
//! of each write are said once here; a backend says only how it reads, applies an [`Op`],
//! watches and compacts.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::op::{Op, Outcome, expect_deleted, expect_put};
use crate::{
    DeleteResult, KeyValue, ListOptions, ListResult, ProgressWatchStream, Result, Revision,
    Storage, check_key, check_prefix,
};

/// How a backend reads and writes keys.
///
/// The methods return plain futures, not boxed ones: the [`Storage`] impl below awaits them
/// inside its own (boxed) future, so a request costs no allocation more than a direct impl.
pub(crate) trait Backend: Send + Sync {
    /// Reads one key (already checked).
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<KeyValue>>> + Send;

    /// Reads one page under `prefix` (already checked).
    fn read_page(
        &self,
        prefix: &str,
        options: &ListOptions,
    ) -> impl Future<Output = Result<ListResult>> + Send;

    /// Applies `op` if its precondition holds (its key already checked).
    fn apply(&self, op: Op) -> impl Future<Output = Result<Outcome>> + Send;

    /// The revision of the last write this handle acknowledged.
    fn revision(&self) -> Revision;
}

/// What a watch asks for: every event under `prefix` (already checked) with a revision
/// greater than `after`, and a progress report whenever `progress` passes without one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchFrom<'a> {
    pub prefix: &'a str,
    pub after: Revision,
    pub progress: Option<Duration>,
}

/// How a backend serves watches and discards history.
pub(crate) trait Watches: Send + Sync {
    /// Starts the watch `from` asks for.
    fn watch_from(
        &self,
        from: WatchFrom<'_>,
    ) -> impl Future<Output = Result<ProgressWatchStream>> + Send;

    /// The newest revision of the whole store.
    fn newest_revision(&self) -> impl Future<Output = Result<Revision>> + Send;

    /// Discards history up to and including `revision`.
    fn discard_history(&self, revision: Revision) -> impl Future<Output = Result<()>> + Send;
}

#[async_trait]
impl<B: Backend + Watches> Storage for B {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        check_key(key)?;
        self.read(key).await
    }

    async fn list_page(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        check_prefix(prefix)?;
        self.read_page(prefix, options).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        check_key(key)?;
        let key = key.into();
        expect_put(self.apply(Op::Create { key, value }).await?)
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        check_key(key)?;
        let key = key.into();
        let op = Op::Update {
            key,
            value,
            expected,
        };
        expect_put(self.apply(op).await?)
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<DeleteResult> {
        check_key(key)?;
        let key = key.into();
        expect_deleted(self.apply(Op::Delete { key, expected }).await?)
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        progress: Option<Duration>,
    ) -> Result<ProgressWatchStream> {
        check_prefix(prefix)?;
        let from = WatchFrom {
            prefix,
            after,
            progress,
        };
        self.watch_from(from).await
    }

    fn current_revision(&self) -> Revision {
        self.revision()
    }

    async fn latest_revision(&self) -> Result<Revision> {
        self.newest_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.discard_history(revision).await
    }
}

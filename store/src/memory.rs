//! `MemoryStore`: a `BTreeMap` behind one mutex plus a bounded event history, for tests and the simulator.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;

use crate::history::History;
use crate::op::{self, Op, Outcome, expect_deleted, expect_put};
use crate::{
    DeleteResult, KeyValue, ListResult, Result, Revision, Storage, StoreError, WatchStream,
    under_prefix,
};

/// Events kept for watches by [`MemoryStore::new`].
pub const DEFAULT_MEMORY_HISTORY: usize = 10_000;

/// An in-memory [`Storage`]; nothing survives a drop.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    history: Arc<History>,
}

struct Inner {
    map: BTreeMap<Arc<str>, KeyValue>,
    revision: Revision,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store keeping the last [`DEFAULT_MEMORY_HISTORY`] events for watches.
    pub fn new() -> Self {
        Self::with_history_capacity(DEFAULT_MEMORY_HISTORY)
    }

    /// An empty store keeping the last `capacity` events (at least one) for watches.
    pub fn with_history_capacity(capacity: usize) -> Self {
        MemoryStore {
            inner: Mutex::new(Inner {
                map: BTreeMap::new(),
                revision: 0,
            }),
            history: Arc::new(History::new(capacity, 0)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section computes its result before mutating, and the mutations cannot
        // panic halfway, so a poisoned lock still guards consistent data.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, op: &Op) -> Result<Outcome> {
        let mut inner = self.lock();
        let current = inner.map.get(&**op.key()).cloned();
        let applied = op::apply(op, current, inner.revision + 1)?;
        inner.revision += 1;
        match &applied.outcome {
            Outcome::Put(kv) => {
                inner.map.insert(kv.key.clone(), kv.clone());
            }
            Outcome::Deleted(_) => {
                inner.map.remove(&**op.key());
            }
        }
        // Published under the map lock so events reach the history in revision order.
        self.history.publish([applied.event]);
        Ok(applied.outcome)
    }
}

impl Drop for MemoryStore {
    fn drop(&mut self) {
        self.history.close();
    }
}

#[async_trait]
impl Storage for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.lock().map.get(key).cloned())
    }

    async fn list(&self, prefix: &str) -> Result<ListResult> {
        let inner = self.lock();
        let items = inner
            .map
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| under_prefix(key, prefix))
            .map(|(_, kv)| kv.clone())
            .collect();
        Ok(ListResult {
            items,
            revision: inner.revision,
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let op = Op::Create {
            key: key.into(),
            value,
        };
        expect_put(self.write(&op)?)
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected_mod_revision: Revision,
    ) -> Result<KeyValue> {
        let op = Op::Update {
            key: key.into(),
            value,
            expected: expected_mod_revision,
        };
        expect_put(self.write(&op)?)
    }

    async fn delete(
        &self,
        key: &str,
        expected_mod_revision: Option<Revision>,
    ) -> Result<DeleteResult> {
        let op = Op::Delete {
            key: key.into(),
            expected: expected_mod_revision,
        };
        expect_deleted(self.write(&op)?)
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<WatchStream> {
        self.history.watch(prefix, after)
    }

    fn current_revision(&self) -> Revision {
        self.lock().revision
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.current_revision();
        if revision > current {
            return Err(StoreError::FutureRevision { revision, current });
        }
        self.history.compact(revision);
        Ok(())
    }
}

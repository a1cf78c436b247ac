//! `MemoryStore`: a `BTreeMap` behind one mutex plus a bounded event history, for tests and the simulator.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::backend::Backend;
use crate::history::History;
use crate::in_process::InProcess;
use crate::op::{self, Op, Outcome};
use crate::{KeyValue, ListOptions, ListResult, Result, Revision, StoreError, page, under_prefix};

/// Events kept for watches by [`MemoryStore::new`].
pub const DEFAULT_MEMORY_HISTORY: usize = 10_000;

/// An in-memory [`Storage`](crate::Storage); nothing survives a drop.
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
}

impl Drop for MemoryStore {
    fn drop(&mut self) {
        self.history.close();
    }
}

impl InProcess for MemoryStore {
    fn history(&self) -> &Arc<History> {
        &self.history
    }
}

impl Backend for MemoryStore {
    fn revision(&self) -> Revision {
        self.lock().revision
    }

    async fn read(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.lock().map.get(key).cloned())
    }

    async fn read_page(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let inner = self.lock();
        let revision = options.revision.unwrap_or(inner.revision);
        if revision > inner.revision {
            return Err(StoreError::FutureRevision {
                revision,
                current: inner.revision,
            });
        }
        // Writes publish under the map lock, so the history is complete up to the map's state.
        let then = if revision < inner.revision {
            page::state_before(
                &self
                    .history
                    .changes_between(prefix, revision, inner.revision)?,
            )
        } else {
            BTreeMap::new()
        };
        let start = match options.after_key.as_deref() {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let current = inner
            .map
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| under_prefix(key, prefix))
            .map(|(_, kv)| Ok(kv.clone()));
        let (items, more) = page::page(current, then, options.after_key.as_deref(), options.limit)?;
        Ok(ListResult {
            items,
            revision,
            more,
        })
    }

    async fn apply(&self, op: Op) -> Result<Outcome> {
        let mut inner = self.lock();
        let current = inner.map.get(&**op.key()).cloned();
        let applied = op::apply(&op, current, inner.revision + 1)?;
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

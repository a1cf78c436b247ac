//! The conformance suite run against `MemoryStore`.

#[macro_use]
mod common;

use std::sync::Arc;

use common::Fixture;
use futures::future::BoxFuture;
use meridian_store::MemoryStore;

fn open(history: usize) -> BoxFuture<'static, Fixture> {
    Box::pin(async move {
        Fixture {
            store: Arc::new(MemoryStore::with_history_capacity(history)),
            guard: Box::new(()),
        }
    })
}

conformance_tests!(open);
bounded_history_tests!(open);

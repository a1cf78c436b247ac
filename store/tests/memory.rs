//! The conformance suite run against `MemoryStore`.

#[macro_use]
mod common;

use std::sync::Arc;

use common::Fixture;
use meridian_store::MemoryStore;

fn open(history: usize) -> Fixture {
    Fixture {
        store: Arc::new(MemoryStore::with_history_capacity(history)),
        _guard: None,
    }
}

conformance_tests!(open);

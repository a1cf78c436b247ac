//! Write operations and their precondition checks, shared by both backends.

use std::sync::Arc;

use bytes::Bytes;

use crate::{DeleteResult, Event, EventKind, KeyValue, Result, Revision, StoreError};

/// A requested write.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Create {
        key: Arc<str>,
        value: Bytes,
    },
    Update {
        key: Arc<str>,
        value: Bytes,
        expected: Revision,
    },
    Delete {
        key: Arc<str>,
        expected: Option<Revision>,
    },
}

/// What the caller of a successful write gets back.
#[derive(Debug)]
pub(crate) enum Outcome {
    Put(KeyValue),
    Deleted(DeleteResult),
}

/// A write that passed its precondition.
#[derive(Debug)]
pub(crate) struct Applied {
    /// The event to publish; its kind says whether the key now holds `event.kv` or is gone.
    pub event: Event,
    pub outcome: Outcome,
}

impl Op {
    pub(crate) fn key(&self) -> &Arc<str> {
        match self {
            Op::Create { key, .. } | Op::Update { key, .. } | Op::Delete { key, .. } => key,
        }
    }
}

/// Checks `op`'s precondition against the key's `current` state and, if it holds, computes the
/// result of applying it at `revision`.
pub(crate) fn apply(
    op: &Op,
    current: Option<KeyValue>,
    revision: Revision,
) -> Result<Applied, StoreError> {
    match (op, current) {
        (Op::Create { key, .. }, Some(_)) => Err(StoreError::AlreadyExists { key: key.clone() }),
        (Op::Create { key, value }, None) => {
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: revision,
                mod_revision: revision,
            };
            Ok(put(kv, None))
        }
        (Op::Update { key, .. } | Op::Delete { key, .. }, None) => {
            Err(StoreError::NotFound { key: key.clone() })
        }
        (
            Op::Update {
                key,
                value,
                expected,
            },
            Some(prev),
        ) => {
            check(key, *expected, prev.clone())?;
            let kv = KeyValue {
                key: key.clone(),
                value: value.clone(),
                create_revision: prev.create_revision,
                mod_revision: revision,
            };
            Ok(put(kv, Some(prev)))
        }
        (Op::Delete { key, expected }, Some(prev)) => {
            if let Some(expected) = expected {
                check(key, *expected, prev.clone())?;
            }
            let tombstone = KeyValue {
                mod_revision: revision,
                ..prev.clone()
            };
            Ok(Applied {
                event: Event {
                    kind: EventKind::Delete,
                    kv: tombstone,
                    prev: Some(prev.clone()),
                },
                outcome: Outcome::Deleted(DeleteResult { prev, revision }),
            })
        }
    }
}

fn check(key: &Arc<str>, expected: Revision, current: KeyValue) -> Result<(), StoreError> {
    if current.mod_revision == expected {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            key: key.clone(),
            expected,
            current: Some(current),
        })
    }
}

fn put(kv: KeyValue, prev: Option<KeyValue>) -> Applied {
    Applied {
        event: Event {
            kind: EventKind::Put,
            kv: kv.clone(),
            prev,
        },
        outcome: Outcome::Put(kv),
    }
}

/// The outcome of a create or update; `op::apply` only answers those with `Outcome::Put`.
pub(crate) fn expect_put(outcome: Outcome) -> Result<KeyValue> {
    match outcome {
        Outcome::Put(kv) => Ok(kv),
        Outcome::Deleted(_) => Err(mismatch()),
    }
}

/// The outcome of a delete; `op::apply` only answers those with `Outcome::Deleted`.
pub(crate) fn expect_deleted(outcome: Outcome) -> Result<DeleteResult> {
    match outcome {
        Outcome::Deleted(result) => Ok(result),
        Outcome::Put(_) => Err(mismatch()),
    }
}

fn mismatch() -> StoreError {
    StoreError::Corrupt {
        detail: "write answered with the outcome of another kind of write".into(),
    }
}

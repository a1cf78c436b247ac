//! The conformance suite run against `EmbeddedStore`, plus its durability and group-commit tests.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use common::{Fixture, next_event, next_item};
use futures::future::BoxFuture;
use meridian_store::{EmbeddedOptions, EmbeddedStore, Revision, Storage, StoreError};

fn open(history: usize) -> BoxFuture<'static, Fixture> {
    Box::pin(async move {
        let dir = tempfile::tempdir().unwrap();
        let options = EmbeddedOptions {
            history_capacity: history,
            ..EmbeddedOptions::default()
        };
        let store = EmbeddedStore::open_with(dir.path(), options).unwrap();
        assert!(store.created());
        Fixture {
            store: Arc::new(store),
            guard: Box::new(dir),
        }
    })
}

conformance_tests!(open);
bounded_history_tests!(open);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_keeps_data_and_revision_continues() {
    let dir = tempfile::tempdir().unwrap();
    let kept = {
        let store = EmbeddedStore::open(dir.path()).unwrap();
        assert!(store.created());
        let kept = store
            .create("/keep", Bytes::from_static(b"k"))
            .await
            .unwrap();
        let gone = store
            .create("/gone", Bytes::from_static(b"g"))
            .await
            .unwrap();
        store
            .delete("/gone", Some(gone.mod_revision))
            .await
            .unwrap();
        assert_eq!(store.current_revision(), 3);
        kept
    };

    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert!(!store.created(), "second open finds the existing file");
    // The revision survives even though the newest write was a delete.
    assert_eq!(store.current_revision(), 3);
    assert_eq!(store.get("/keep").await.unwrap(), Some(kept));
    assert_eq!(store.get("/gone").await.unwrap(), None);
    let list = store.list("").await.unwrap();
    assert_eq!((list.items.len(), list.revision), (1, 3));

    // History is not persisted: watches can start at the reopen revision, not before.
    assert!(matches!(
        store.watch("", 2).await,
        Err(StoreError::Compacted {
            compact_revision: 3
        })
    ));
    let mut watch = store.watch("", 3).await.unwrap();
    let next = store
        .create("/new", Bytes::from_static(b"n"))
        .await
        .unwrap();
    assert_eq!(next.mod_revision, 4);
    assert_eq!(next_event(&mut watch).await.kv, next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let tasks: Vec<_> = (0..64)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for i in 0..20 {
                    store
                        .create(&format!("/g/{w}/{i}"), Bytes::from(vec![7u8; 1024]))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(store.write_count(), 64 * 20);
    let commits = store.commit_count();
    assert!(
        commits < store.write_count(),
        "{commits} commits for {} writes: concurrent writes were not grouped",
        store.write_count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_preconditions_in_a_group_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    // Half the creates collide with an existing key; they are queued together with the rest.
    for i in 0..32 {
        store
            .create(&format!("/p/{i}"), Bytes::from_static(b"old"))
            .await
            .unwrap();
    }
    let base = store.current_revision();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .create(&format!("/p/{i}"), Bytes::from_static(b"new"))
                    .await
            })
        })
        .collect();
    let mut ok = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(_) => {
                assert!(i >= 32);
                ok += 1;
            }
            Err(StoreError::AlreadyExists { .. }) => assert!(i < 32),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ok, 32);
    assert_eq!(
        store.current_revision(),
        base + 32,
        "failures take no revision"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_stops_writes_and_watches() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path()).unwrap();
    let kv = store.create("/x", Bytes::from_static(b"x")).await.unwrap();
    let mut watch = store.watch("", 0).await.unwrap();
    store.close().await.unwrap();
    store.close().await.unwrap();
    assert!(matches!(
        store.create("/y", Bytes::new()).await,
        Err(StoreError::Closed)
    ));
    assert_eq!(store.get("/x").await.unwrap(), Some(kv.clone()));
    assert_eq!(next_event(&mut watch).await.kv, kv);
    assert!(matches!(
        next_item(&mut watch).await,
        Some(Err(StoreError::Closed))
    ));
    drop(store);
    // Dropping released the file.
    let reopened = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(reopened.current_revision(), 1);
}

#[test]
fn second_open_of_the_same_directory_fails() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStore::open(dir.path()).unwrap();
    let err = EmbeddedStore::open(dir.path())
        .err()
        .expect("the file is locked by the first open");
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(std::error::Error::source(&err).is_some(), "cause kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_store-crash-writer"))
        .arg(dir.path())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "the child must die by abort");

    let stdout = String::from_utf8_lossy(&output.stdout);
    let acked: HashMap<String, Revision> = stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("ACK"), Some(key), Some(revision), Some("END")) => {
                    Some((key.to_owned(), revision.parse().unwrap()))
                }
                _ => None,
            }
        })
        .collect();
    assert!(
        // The writer aborts after 1,500 acknowledgements.
        acked.len() >= 1500,
        "child acknowledged only {}",
        acked.len()
    );

    let store = EmbeddedStore::open(dir.path()).unwrap();
    assert!(!store.created());
    let max_acked = acked.values().copied().max().unwrap();
    assert!(store.current_revision() >= max_acked);
    for (key, revision) in &acked {
        let kv = store.get(key).await.unwrap();
        assert_eq!(
            kv.map(|kv| kv.mod_revision),
            Some(*revision),
            "acknowledged {key} lost"
        );
    }
    // The recovered store keeps going from where the file says it stopped.
    let next = store.create("/after", Bytes::new()).await.unwrap();
    assert_eq!(next.mod_revision, store.current_revision());
    assert!(next.mod_revision > max_acked);
}

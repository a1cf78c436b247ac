//! The conformance suite every `Storage` backend must pass, written once and instantiated per backend.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use meridian_store::{Event, EventKind, Revision, Storage, StoreError, WatchStream};

/// A store under test plus whatever must outlive it (e.g. its temporary directory).
pub struct Fixture {
    pub store: Arc<dyn Storage>,
    pub _guard: Option<tempfile::TempDir>,
}

/// Opens a fresh, empty store keeping `history` events for watches.
pub type Open = fn(history: usize) -> Fixture;

/// Generates one `#[tokio::test]` per suite function, run against the backend `$open` opens.
#[macro_export]
macro_rules! conformance_tests {
    ($open:path) => {
        conformance_tests!(@each $open;
            create_then_get,
            update_compare_and_swap,
            delete_with_and_without_precondition,
            list_is_sorted_prefix_snapshot,
            revision_is_monotonic,
            watch_replays_history_then_live,
            watch_filters_by_prefix,
            watch_skips_long_runs_of_other_keys,
            watch_reports_deletes,
            watch_from_compacted_revision_fails,
            slow_watcher_ends_with_error,
            watch_ends_when_store_dropped,
            concurrent_writers_get_distinct_revisions,
            concurrent_compare_and_swap_has_one_winner,
        );
    };
    (@each $open:path; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                common::$name($open).await;
            }
        )*
    };
}

/// Long enough for any awaited event on a loaded machine; only a guard against hanging.
const PATIENCE: Duration = Duration::from_secs(30);

fn val(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

/// The next item of a watch, failing the test instead of hanging.
pub async fn next_item(stream: &mut WatchStream) -> Option<Result<Event, StoreError>> {
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .expect("watch produced nothing in time")
}

pub async fn next_event(stream: &mut WatchStream) -> Event {
    next_item(stream)
        .await
        .expect("watch ended early")
        .expect("watch failed")
}

pub async fn create_then_get(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    assert_eq!(s.current_revision(), 0);
    assert_eq!(s.get("/a/x").await.unwrap(), None);

    let kv = s.create("/a/x", val("one")).await.unwrap();
    assert_eq!(&*kv.key, "/a/x");
    assert_eq!(kv.value, val("one"));
    assert_eq!(kv.create_revision, 1);
    assert_eq!(kv.mod_revision, 1);
    assert_eq!(s.get("/a/x").await.unwrap(), Some(kv.clone()));

    let err = s.create("/a/x", val("two")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists { ref key } if &**key == "/a/x"),
        "{err:?}"
    );
    assert_eq!(s.get("/a/x").await.unwrap(), Some(kv));
    assert_eq!(s.current_revision(), 1, "a failed write takes no revision");
}

pub async fn update_compare_and_swap(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    let v1 = s.create("/k", val("1")).await.unwrap();
    s.create("/other", val("x")).await.unwrap();

    let v2 = s.update("/k", val("2"), v1.mod_revision).await.unwrap();
    assert_eq!(v2.value, val("2"));
    assert_eq!(v2.create_revision, v1.create_revision);
    assert_eq!(v2.mod_revision, 3);
    assert_eq!(s.get("/k").await.unwrap(), Some(v2.clone()));

    match s.update("/k", val("3"), v1.mod_revision).await {
        Err(StoreError::Conflict {
            key,
            expected,
            current,
        }) => {
            assert_eq!(&*key, "/k");
            assert_eq!(expected, v1.mod_revision);
            assert_eq!(current, Some(v2.clone()));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(s.get("/k").await.unwrap(), Some(v2));

    let err = s.update("/missing", val("x"), 1).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    assert_eq!(s.current_revision(), 3);
}

pub async fn delete_with_and_without_precondition(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    let a = s.create("/a", val("a")).await.unwrap();
    let b = s.create("/b", val("b")).await.unwrap();

    let deleted = s.delete("/a", None).await.unwrap();
    assert_eq!(deleted.prev, a);
    assert_eq!(deleted.revision, 3);
    assert_eq!(s.get("/a").await.unwrap(), None);
    let err = s.delete("/a", None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");

    let err = s
        .delete("/b", Some(b.mod_revision + 100))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { current: Some(ref kv), .. } if *kv == b),
        "{err:?}"
    );
    assert_eq!(s.get("/b").await.unwrap(), Some(b.clone()));
    let deleted = s.delete("/b", Some(b.mod_revision)).await.unwrap();
    assert_eq!(deleted.revision, 4);
    assert_eq!(s.current_revision(), 4);

    // A recreated key starts a new life with a new create_revision.
    let again = s.create("/a", val("again")).await.unwrap();
    assert_eq!(again.create_revision, 5);
    assert_eq!(again.mod_revision, 5);
}

pub async fn list_is_sorted_prefix_snapshot(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    for key in ["/b/2", "/a/2", "/b/1", "/a/1", "/a0", "/c"] {
        s.create(key, val(key)).await.unwrap();
    }
    let list = s.list("/a/").await.unwrap();
    let keys: Vec<&str> = list.items.iter().map(|kv| &*kv.key).collect();
    assert_eq!(keys, ["/a/1", "/a/2"]);
    assert_eq!(list.revision, 6);
    assert_eq!(list.items[0].value, val("/a/1"));

    let all = s.list("").await.unwrap();
    let keys: Vec<&str> = all.items.iter().map(|kv| &*kv.key).collect();
    assert_eq!(keys, ["/a/1", "/a/2", "/a0", "/b/1", "/b/2", "/c"]);

    s.delete("/a/1", None).await.unwrap();
    let after = s.list("/a/").await.unwrap();
    assert_eq!(after.items.len(), 1);
    assert_eq!(after.revision, 7);
    assert_eq!(after.revision, s.current_revision());

    let empty = s.list("/zzz/").await.unwrap();
    assert!(empty.items.is_empty());
    assert_eq!(empty.revision, 7);
}

pub async fn revision_is_monotonic(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    let mut last = s.current_revision();
    for i in 0..20 {
        let key = format!("/m/{}", i % 5);
        let revision = match s.get(&key).await.unwrap() {
            None => s.create(&key, val("v")).await.unwrap().mod_revision,
            Some(_) if i % 3 == 0 => s.delete(&key, None).await.unwrap().revision,
            Some(kv) => {
                s.update(&key, val("u"), kv.mod_revision)
                    .await
                    .unwrap()
                    .mod_revision
            }
        };
        assert_eq!(revision, last + 1);
        assert_eq!(s.current_revision(), revision);
        last = revision;
        // Failed writes never consume a revision.
        let _ = s.update(&key, val("x"), 0).await.unwrap_err();
        assert_eq!(s.current_revision(), last);
    }
}

pub async fn watch_replays_history_then_live(open: Open) {
    let fx = open(1000);
    let s = Arc::clone(&fx.store);
    let mut revisions = Vec::new();
    for i in 0..5 {
        revisions.push(
            s.create(&format!("/w/{i}"), val("h"))
                .await
                .unwrap()
                .mod_revision,
        );
    }
    let mut watch = s.watch("/w/", revisions[1]).await.unwrap();

    // Live writes racing with the replay must neither be lost nor repeated.
    let writer = {
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            for i in 5..25 {
                s.create(&format!("/w/{i}"), val("live")).await.unwrap();
            }
        })
    };
    for (i, expected) in (2..25).zip(revisions[1] + 1..) {
        let event = next_event(&mut watch).await;
        assert_eq!(event.revision(), expected, "no gap, no duplicate");
        assert_eq!(&*event.kv.key, format!("/w/{i}"));
        assert_eq!(event.kind, EventKind::Put);
        assert_eq!(event.prev, None);
    }
    writer.await.unwrap();

    // An update is a put carrying the previous value.
    let kv = s.get("/w/0").await.unwrap().unwrap();
    let updated = s.update("/w/0", val("new"), kv.mod_revision).await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Put);
    assert_eq!(event.kv, updated);
    assert_eq!(event.prev, Some(kv));

    // Watching from 0 replays everything still retained.
    let mut from_start = s.watch("", 0).await.unwrap();
    assert_eq!(next_event(&mut from_start).await.revision(), 1);
}

pub async fn watch_filters_by_prefix(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    let start = s.current_revision();
    let mut watch = s.watch("/apps/", start).await.unwrap();
    let mut wanted = Vec::new();
    for i in 0..10 {
        s.create(&format!("/core/pods/{i}"), val("p"))
            .await
            .unwrap();
        wanted.push(s.create(&format!("/apps/d/{i}"), val("d")).await.unwrap());
        s.create(&format!("/apps{i}"), val("not under /apps/"))
            .await
            .unwrap();
    }
    for kv in wanted {
        let event = next_event(&mut watch).await;
        assert_eq!(event.kv, kv);
    }
    // Nothing else is pending: the next event is the next matching write.
    let last = s.create("/apps/d/last", val("d")).await.unwrap();
    assert_eq!(next_event(&mut watch).await.kv, last);
}

pub async fn watch_skips_long_runs_of_other_keys(open: Open) {
    // More unrelated events than a watcher scans per wake-up, written concurrently so the
    // embedded backend groups them.
    let fx = open(10_000);
    let s = Arc::clone(&fx.store);
    let mut watch = s.watch("/rare/", 0).await.unwrap();
    let tasks: Vec<_> = (0..30)
        .map(|w| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                for i in 0..70 {
                    s.create(&format!("/busy/{w}/{i}"), val("b")).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let rare = s.create("/rare/one", val("r")).await.unwrap();
    assert_eq!(rare.mod_revision, 2101);
    assert_eq!(next_event(&mut watch).await.kv, rare);
}

pub async fn watch_reports_deletes(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    let created = s.create("/d/x", val("body")).await.unwrap();
    let mut watch = s.watch("/d/", created.mod_revision).await.unwrap();
    let deleted = s.delete("/d/x", Some(created.mod_revision)).await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!(event.kind, EventKind::Delete);
    assert_eq!(event.revision(), deleted.revision);
    assert_eq!(event.kv.value, val("body"));
    assert_eq!(event.kv.create_revision, created.create_revision);
    assert_eq!(event.kv.mod_revision, deleted.revision);
    assert_eq!(event.prev, Some(created));
}

pub async fn watch_from_compacted_revision_fails(open: Open) {
    let fx = open(1000);
    let s = &fx.store;
    for i in 0..10 {
        s.create(&format!("/c/{i}"), val("v")).await.unwrap();
    }
    s.compact(6).await.unwrap();
    match s.watch("/c/", 5).await {
        Err(StoreError::Compacted { compact_revision }) => assert_eq!(compact_revision, 6),
        Err(other) => panic!("expected Compacted, got {other:?}"),
        Ok(_) => panic!("expected Compacted, got a stream"),
    }
    let mut watch = s.watch("/c/", 6).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision(), 7);
    // Compacting backwards changes nothing; compacting the future is refused.
    s.compact(3).await.unwrap();
    assert!(s.watch("", 6).await.is_ok());
    let err = s.compact(11).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::FutureRevision {
                revision: 11,
                current: 10
            }
        ),
        "{err:?}"
    );
}

pub async fn slow_watcher_ends_with_error(open: Open) {
    let fx = open(8);
    let s = &fx.store;
    s.create("/s/first", val("v")).await.unwrap();
    let mut watch = s.watch("/s/", 0).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision(), 1);
    // The watcher stops reading while 20 more events pass through an 8-event history.
    for i in 0..20 {
        s.create(&format!("/s/{i}"), val("v")).await.unwrap();
    }
    match next_item(&mut watch).await {
        Some(Err(StoreError::Compacted { compact_revision })) => assert_eq!(compact_revision, 13),
        other => panic!("expected the stream to fail with Compacted, got {other:?}"),
    }
    assert!(
        next_item(&mut watch).await.is_none(),
        "the error ends the stream"
    );
}

pub async fn watch_ends_when_store_dropped(open: Open) {
    let fx = open(1000);
    let created = fx.store.create("/e/x", val("v")).await.unwrap();
    let mut watch = fx.store.watch("/e/", 0).await.unwrap();
    drop(fx);
    // Events written before the close are still delivered, then the stream says why it ends.
    assert_eq!(next_event(&mut watch).await.kv, created);
    assert!(matches!(
        next_item(&mut watch).await,
        Some(Err(StoreError::Closed))
    ));
    assert!(next_item(&mut watch).await.is_none());
}

pub async fn concurrent_writers_get_distinct_revisions(open: Open) {
    const WRITERS: usize = 32;
    const EACH: usize = 40;
    let fx = open(10_000);
    let s = Arc::clone(&fx.store);
    let base = s.current_revision();
    let mut watch = s.watch("/cw/", base).await.unwrap();

    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let mut acks = Vec::with_capacity(EACH);
                for i in 0..EACH {
                    let key = format!("/cw/{w:02}/{i:03}");
                    let kv = s.create(&key, Bytes::from(key.clone())).await.unwrap();
                    // Every acknowledged write is visible to a read that starts after the ack.
                    assert_eq!(s.get(&key).await.unwrap(), Some(kv.clone()));
                    acks.push(kv);
                }
                acks
            })
        })
        .collect();
    let mut acks = Vec::new();
    for task in tasks {
        acks.extend(task.await.unwrap());
    }
    let total = (WRITERS * EACH) as Revision;
    let mut revisions: Vec<Revision> = acks.iter().map(|kv| kv.mod_revision).collect();
    revisions.sort_unstable();
    let expected: Vec<Revision> = (base + 1..=base + total).collect();
    assert_eq!(
        revisions, expected,
        "one distinct revision per write, no holes"
    );
    assert_eq!(s.current_revision(), base + total);

    let list = s.list("/cw/").await.unwrap();
    assert_eq!(list.items.len(), WRITERS * EACH);
    assert_eq!(list.revision, base + total);

    // The watch opened before the writers saw every write, in revision order.
    for revision in base + 1..=base + total {
        assert_eq!(next_event(&mut watch).await.revision(), revision);
    }
}

pub async fn concurrent_compare_and_swap_has_one_winner(open: Open) {
    let fx = open(1000);
    let s = Arc::clone(&fx.store);
    let kv = s.create("/cas", val("0")).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let s = Arc::clone(&s);
            let expected = kv.mod_revision;
            tokio::spawn(async move {
                s.update("/cas", Bytes::from(format!("{i}")), expected)
                    .await
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => winners += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(s.current_revision(), kv.mod_revision + 1);
}

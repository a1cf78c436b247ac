//! The conformance suite every `Storage` backend must pass, written once and instantiated per backend.
//!
//! Revisions are checked relative to the store's revision when the test starts: a fresh
//! embedded or memory store starts at 0, a fresh etcd at 1.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)] // Each test binary uses its own part of the helpers.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use meridian_store::{
    Event, EventKind, KeyValue, ListOptions, Revision, Storage, StoreError, WatchItem, WatchStream,
};

/// A store under test plus whatever must outlive it (a temporary directory, an etcd process).
pub struct Fixture {
    pub store: Arc<dyn Storage>,
    pub guard: Box<dyn Any + Send>,
}

/// Opens a fresh, empty store keeping at least `history` events for watches.
pub type Open = fn(history: usize) -> BoxFuture<'static, Fixture>;

/// Generates one `#[tokio::test]` per suite function, run against the backend `$open` opens.
#[macro_export]
macro_rules! conformance_tests {
    ($open:path) => {
        conformance_tests!(@each $open;
            create_then_get,
            keys_are_paths,
            update_compare_and_swap,
            delete_with_and_without_precondition,
            list_is_sorted_prefix_snapshot,
            list_pages_read_one_revision,
            list_at_a_compacted_or_future_revision_fails,
            revision_is_monotonic,
            latest_revision_follows_writes,
            watch_replays_history_then_live,
            watch_filters_by_prefix,
            watch_skips_long_runs_of_other_keys,
            watch_reports_deletes,
            watch_from_compacted_revision_fails,
            watch_reports_progress_when_idle,
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

/// The tests of backends whose watches are served from a bounded in-memory history (embedded
/// and memory); etcd keeps its history until it is compacted.
#[macro_export]
macro_rules! bounded_history_tests {
    ($open:path) => {
        conformance_tests!(@each $open; slow_watcher_ends_with_error);
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
    let fx = open(1000).await;
    let s = &fx.store;
    let base = s.current_revision();
    assert_eq!(s.get("/a/x").await.unwrap(), None);

    let kv = s.create("/a/x", val("one")).await.unwrap();
    assert_eq!(&*kv.key, "/a/x");
    assert_eq!(kv.value, val("one"));
    assert_eq!(kv.create_revision, base + 1);
    assert_eq!(kv.mod_revision, base + 1);
    assert_eq!(s.get("/a/x").await.unwrap(), Some(kv.clone()));

    let err = s.create("/a/x", val("two")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists { ref key } if &**key == "/a/x"),
        "{err:?}"
    );
    assert_eq!(s.get("/a/x").await.unwrap(), Some(kv));
    assert_eq!(
        s.current_revision(),
        base + 1,
        "a failed write takes no revision"
    );
}

pub async fn keys_are_paths(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let invalid = |result: Result<(), StoreError>| {
        assert!(
            matches!(result, Err(StoreError::InvalidKey { .. })),
            "{result:?}"
        );
    };
    invalid(s.create("x", val("v")).await.map(drop));
    invalid(s.get("x").await.map(drop));
    invalid(s.update("x", val("v"), 1).await.map(drop));
    invalid(s.delete("x", None).await.map(drop));
    invalid(s.list("x").await.map(drop));
    invalid(s.watch("x", 0).await.map(drop));
    // The empty prefix is everything.
    s.create("/y", val("v")).await.unwrap();
    assert_eq!(s.list("").await.unwrap().items.len(), 1);
}

pub async fn update_compare_and_swap(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let base = s.current_revision();
    let v1 = s.create("/k", val("1")).await.unwrap();
    s.create("/other", val("x")).await.unwrap();

    let v2 = s.update("/k", val("2"), v1.mod_revision).await.unwrap();
    assert_eq!(v2.value, val("2"));
    assert_eq!(v2.create_revision, v1.create_revision);
    assert_eq!(v2.mod_revision, base + 3);
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
    // An absent key's mod_revision is not 0: updating it creates nothing.
    let err = s.update("/missing", val("x"), 0).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    assert_eq!(s.get("/missing").await.unwrap(), None);
    assert_eq!(s.current_revision(), base + 3);
}

pub async fn delete_with_and_without_precondition(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let base = s.current_revision();
    let a = s.create("/a", val("a")).await.unwrap();
    let b = s.create("/b", val("b")).await.unwrap();

    let deleted = s.delete("/a", None).await.unwrap();
    assert_eq!(deleted.prev, a);
    assert_eq!(deleted.revision, base + 3);
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
    let err = s.delete("/gone", Some(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }), "{err:?}");
    let deleted = s.delete("/b", Some(b.mod_revision)).await.unwrap();
    assert_eq!(deleted.revision, base + 4);
    assert_eq!(deleted.prev, b);
    assert_eq!(s.current_revision(), base + 4);

    // A recreated key starts a new life with a new create_revision.
    let again = s.create("/a", val("again")).await.unwrap();
    assert_eq!(again.create_revision, base + 5);
    assert_eq!(again.mod_revision, base + 5);
}

pub async fn list_is_sorted_prefix_snapshot(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let base = s.current_revision();
    for key in ["/b/2", "/a/2", "/b/1", "/a/1", "/a0", "/c"] {
        s.create(key, val(key)).await.unwrap();
    }
    let list = s.list("/a/").await.unwrap();
    let keys: Vec<&str> = list.items.iter().map(|kv| &*kv.key).collect();
    assert_eq!(keys, ["/a/1", "/a/2"]);
    assert_eq!(list.revision, base + 6);
    assert!(!list.more);
    assert_eq!(list.items[0].value, val("/a/1"));

    let all = s.list("").await.unwrap();
    let keys: Vec<&str> = all.items.iter().map(|kv| &*kv.key).collect();
    assert_eq!(keys, ["/a/1", "/a/2", "/a0", "/b/1", "/b/2", "/c"]);

    s.delete("/a/1", None).await.unwrap();
    let after = s.list("/a/").await.unwrap();
    assert_eq!(after.items.len(), 1);
    assert_eq!(after.revision, base + 7);
    assert_eq!(after.revision, s.current_revision());

    let empty = s.list("/zzz/").await.unwrap();
    assert!(empty.items.is_empty());
    assert_eq!(empty.revision, base + 7);
}

fn page_options(revision: Option<Revision>, after: Option<&KeyValue>, limit: usize) -> ListOptions {
    ListOptions {
        revision,
        after_key: after.map(|kv| kv.key.to_string()),
        limit,
    }
}

pub async fn list_pages_read_one_revision(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    for i in 0..10 {
        s.create(&format!("/p/{i:02}"), val("old")).await.unwrap();
    }
    s.create("/q/outside", val("q")).await.unwrap();
    let before = s.list("/p/").await.unwrap();

    let first = s
        .list_page("/p/", &page_options(None, None, 4))
        .await
        .unwrap();
    assert_eq!(first.items, before.items[..4]);
    assert!(first.more);
    assert_eq!(first.revision, before.revision);

    // Writes between pages: an update, a delete, creates inside and after the next pages.
    let five = &before.items[5];
    s.update(&five.key, val("new"), five.mod_revision)
        .await
        .unwrap();
    s.delete(&before.items[6].key, None).await.unwrap();
    s.create("/p/055", val("new")).await.unwrap();
    s.create("/p/99", val("new")).await.unwrap();
    s.update(
        &before.items[0].key,
        val("new"),
        before.items[0].mod_revision,
    )
    .await
    .unwrap();

    let mut pages = first.items.clone();
    let mut page = first;
    while page.more {
        page = s
            .list_page(
                "/p/",
                &page_options(Some(page.revision), page.items.last(), 4),
            )
            .await
            .unwrap();
        assert_eq!(
            page.revision, before.revision,
            "every page at the first one's revision"
        );
        assert!(page.items.len() <= 4);
        pages.extend(page.items.iter().cloned());
    }
    assert_eq!(pages, before.items, "the pages together are the snapshot");

    // The same listing at the current revision sees the writes.
    let now = s.list_page("/p/", &ListOptions::default()).await.unwrap();
    let keys: Vec<&str> = now.items.iter().map(|kv| &*kv.key).collect();
    assert_eq!(
        keys,
        [
            "/p/00", "/p/01", "/p/02", "/p/03", "/p/04", "/p/05", "/p/055", "/p/07", "/p/08",
            "/p/09", "/p/99"
        ]
    );
    assert_eq!(now.revision, s.current_revision());

    // A whole listing at the older revision, with no limit, is the snapshot too.
    let whole = s
        .list_page("/p/", &page_options(Some(before.revision), None, 0))
        .await
        .unwrap();
    assert_eq!(whole.items, before.items);
    assert!(!whole.more);
    // An exactly full last page has nothing more.
    let last = s
        .list_page(
            "/p/",
            &page_options(Some(before.revision), before.items.get(5), 4),
        )
        .await
        .unwrap();
    assert_eq!(last.items, before.items[6..]);
    assert!(!last.more);
}

pub async fn list_at_a_compacted_or_future_revision_fails(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let base = s.current_revision();
    for i in 0..6 {
        s.create(&format!("/r/{i}"), val("v")).await.unwrap();
    }
    s.compact(base + 4).await.unwrap();
    let err = s
        .list_page("/r/", &page_options(Some(base + 3), None, 2))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Compacted { .. }), "{err:?}");
    // The compacted revision itself is still readable.
    let at = s
        .list_page("/r/", &page_options(Some(base + 4), None, 0))
        .await
        .unwrap();
    assert_eq!(at.items.len(), 4);
    assert_eq!(at.revision, base + 4);
    let err = s
        .list_page("/r/", &page_options(Some(base + 100), None, 0))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::FutureRevision { revision, current } if revision == base + 100 && current == base + 6),
        "{err:?}"
    );
}

pub async fn revision_is_monotonic(open: Open) {
    let fx = open(1000).await;
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

pub async fn latest_revision_follows_writes(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let kv = s.create("/l", val("v")).await.unwrap();
    assert_eq!(s.latest_revision().await.unwrap(), kv.mod_revision);
    let deleted = s.delete("/l", None).await.unwrap();
    assert_eq!(s.latest_revision().await.unwrap(), deleted.revision);
    assert_eq!(s.current_revision(), deleted.revision);
}

pub async fn watch_replays_history_then_live(open: Open) {
    let fx = open(1000).await;
    let s = Arc::clone(&fx.store);
    let base = s.current_revision();
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
    assert_eq!(next_event(&mut from_start).await.revision(), base + 1);
}

pub async fn watch_filters_by_prefix(open: Open) {
    let fx = open(1000).await;
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
    let fx = open(10_000).await;
    let s = Arc::clone(&fx.store);
    let base = s.current_revision();
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
    assert_eq!(rare.mod_revision, base + 2101);
    assert_eq!(next_event(&mut watch).await.kv, rare);
}

pub async fn watch_reports_deletes(open: Open) {
    let fx = open(1000).await;
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
    let fx = open(1000).await;
    let s = &fx.store;
    let base = s.current_revision();
    for i in 0..10 {
        s.create(&format!("/c/{i}"), val("v")).await.unwrap();
    }
    s.compact(base + 6).await.unwrap();
    match s.watch("/c/", base + 5).await {
        Err(StoreError::Compacted { compact_revision }) => {
            assert_eq!(compact_revision, base + 6)
        }
        Err(other) => panic!("expected Compacted, got {other:?}"),
        Ok(_) => panic!("expected Compacted, got a stream"),
    }
    let mut watch = s.watch("/c/", base + 6).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision(), base + 7);
    // Compacting backwards changes nothing; compacting the future is refused.
    s.compact(base + 3).await.unwrap();
    assert!(s.watch("", base + 6).await.is_ok());
    let err = s.compact(base + 11).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::FutureRevision { revision, current }
                if revision == base + 11 && current == base + 10
        ),
        "{err:?}"
    );
}

pub async fn watch_reports_progress_when_idle(open: Open) {
    let fx = open(1000).await;
    let s = &fx.store;
    let start = s.current_revision();
    let mut watch = s
        .watch_with_progress("/quiet/", start, Some(Duration::from_millis(200)))
        .await
        .unwrap();
    let inside = s.create("/quiet/x", val("v")).await.unwrap();
    // Writes outside the prefix move the revision without events for this watch.
    let mut last = inside.mod_revision;
    for i in 0..3 {
        last = s
            .create(&format!("/loud/{i}"), val("v"))
            .await
            .unwrap()
            .mod_revision;
    }
    let mut seen_event = false;
    loop {
        let item = tokio::time::timeout(PATIENCE, watch.next())
            .await
            .expect("no progress report in time")
            .expect("watch ended early")
            .expect("watch failed");
        match item {
            WatchItem::Event(event) => {
                assert!(!seen_event, "one event only");
                assert_eq!(event.kv, inside);
                seen_event = true;
            }
            WatchItem::Progress(revision) => {
                assert!(revision >= start, "progress never goes back");
                if revision >= last {
                    // Everything up to the last write was delivered before this report.
                    assert!(seen_event);
                    break;
                }
            }
        }
    }
}

pub async fn slow_watcher_ends_with_error(open: Open) {
    let fx = open(8).await;
    let s = &fx.store;
    assert_eq!(s.current_revision(), 0);
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
    let Fixture { store, guard } = open(1000).await;
    let created = store.create("/e/x", val("v")).await.unwrap();
    let mut watch = store.watch("/e/", 0).await.unwrap();
    // The store goes; what it runs on (an etcd process) stays.
    drop(store);
    // Events written before the close are still delivered, then the stream says why it ends.
    assert_eq!(next_event(&mut watch).await.kv, created);
    assert!(matches!(
        next_item(&mut watch).await,
        Some(Err(StoreError::Closed))
    ));
    assert!(next_item(&mut watch).await.is_none());
    drop(guard);
}

pub async fn concurrent_writers_get_distinct_revisions(open: Open) {
    const WRITERS: usize = 32;
    const EACH: usize = 40;
    let fx = open(10_000).await;
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
    let fx = open(1000).await;
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

/// The etcd binary: `$ETCD`, or installed once by tools/install-etcd.sh.
pub fn etcd_binary() -> std::path::PathBuf {
    static BINARY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("ETCD") {
                return std::path::PathBuf::from(path);
            }
            let script =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/install-etcd.sh");
            let out = std::process::Command::new("bash")
                .arg(&script)
                .output()
                .expect("running tools/install-etcd.sh");
            assert!(
                out.status.success(),
                "etcd is required for these tests and tools/install-etcd.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn fifo<K: Clone + Eq + Hash>() -> WorkQueue<K> {
    WorkQueue::default()
}

fn bounded_low_lane<K: Clone + Eq + Hash>(bound: Duration) -> WorkQueue<K> {
    WorkQueue::new(
        Settings {
            low_lane_bound: Some(bound),
            ..Settings::default()
        },
        QueueMetrics::default(),
    )
}

/// Takes every ready key, marking each done at once.
fn drain<K: Clone + Eq + Hash, O: Order<K>>(q: &WorkQueue<K, O>) -> Vec<K> {
    std::iter::from_fn(|| {
        let k = q.try_next()?;
        q.done(&k);
        Some(k)
    })
    .collect()
}

#[tokio::test(start_paused = true)]
async fn dedups_and_keeps_order() {
    let q = fifo();
    for k in [1, 2, 1, 3, 2] {
        q.add(k);
    }
    assert_eq!(q.len(), 3);
    assert_eq!((q.next().await, q.next().await, q.next().await), (1, 2, 3));
    assert!(q.is_empty() && !q.is_idle());
    for k in [1, 2, 3] {
        q.done(&k);
    }
    assert!(q.is_idle());
    q.add(1);
    let first = Instant::now();
    tokio::time::advance(Duration::from_millis(5)).await;
    q.add(1);
    let (k, since) = q.try_next_timed().expect("queued");
    assert_eq!((k, since), (1, first), "the first add's time is kept");
    q.done(&1);
}

#[tokio::test]
async fn a_busy_key_is_not_handed_out_twice() {
    let q = fifo();
    q.add("a");
    assert_eq!(q.try_next(), Some("a"));
    // Changed while its worker runs: it waits for the worker, then comes back once.
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(q.len(), 2);
    assert_eq!(q.try_next(), Some("b"));
    assert_eq!(q.try_next(), None);
    q.done(&"a");
    assert_eq!(q.try_next(), Some("a"));
    q.done(&"a");
    q.done(&"b");
    assert!(q.is_idle());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_never_hold_one_key_at_once() {
    let q = Arc::new(fifo::<u32>());
    let holding: Arc<[AtomicUsize; 8]> = Arc::new(Default::default());
    let handled = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..6 {
        let (q, holding, handled) = (q.clone(), holding.clone(), handled.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let k = q.next().await;
                let slot = &holding[k as usize];
                assert_eq!(slot.fetch_add(1, Ordering::SeqCst), 0, "key {k} held twice");
                tokio::task::yield_now().await;
                slot.fetch_sub(1, Ordering::SeqCst);
                handled.fetch_add(1, Ordering::SeqCst);
                q.done(&k);
            }
        }));
    }
    for round in 0..500u32 {
        q.add(round % 8);
        if round % 16 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !q.is_idle() {
        assert!(std::time::Instant::now() < deadline, "queue never drained");
        tokio::task::yield_now().await;
    }
    for w in &workers {
        assert!(!w.is_finished(), "a worker panicked");
    }
    assert!(handled.load(Ordering::SeqCst) >= 8);
    for w in workers {
        w.abort();
    }
}

#[tokio::test]
async fn a_full_queue_drops_and_counts() {
    let q: WorkQueue<i32> = WorkQueue::new(
        Settings {
            capacity: 2,
            ..Settings::default()
        },
        QueueMetrics::default(),
    );
    q.add(1);
    q.add(2);
    q.add(2);
    assert_eq!(q.dropped(), 0, "already waiting is not a drop");
    // A key dropped for want of room keeps its deadline (a later try may find room).
    q.add_after(3, Duration::from_secs(1));
    q.add(3);
    assert_eq!((q.dropped(), q.len(), q.delayed()), (1, 2, 1));
}

#[tokio::test(start_paused = true)]
async fn delayed_adds_fire_at_their_deadline() {
    let q = Arc::new(fifo());
    q.add_after("late", Duration::from_secs(10));
    q.add_after("soon", Duration::from_secs(2));
    // A later deadline for a key already waiting keeps the earlier one.
    q.add_after("soon", Duration::from_secs(5));
    assert_eq!(q.delayed(), 2);
    let start = Instant::now();
    assert_eq!(q.next().await, "soon");
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    q.done(&"soon");
    // An add now overtakes (and cancels) a pending deadline.
    q.add("late");
    assert_eq!(q.delayed(), 0);
    assert_eq!(q.next().await, "late");
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    q.done(&"late");

    // A waiting worker wakes for an earlier deadline added while it sleeps.
    q.add_after("far", Duration::from_secs(60));
    let q2 = q.clone();
    let waiter = tokio::spawn(async move { q2.next().await });
    tokio::task::yield_now().await;
    q.add_after("x", Duration::from_secs(1));
    assert_eq!(waiter.await.expect("join"), "x");
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_set_while_a_key_is_busy_queues_it_after_its_worker() {
    let q = fifo();
    q.add("k");
    assert_eq!(q.next().await, "k");
    q.add_after("k", Duration::from_millis(10));
    let start = Instant::now();
    tokio::time::advance(Duration::from_millis(20)).await;
    // Due, but its worker still holds it.
    assert_eq!(q.try_next(), None);
    q.done(&"k");
    assert_eq!(q.next().await, "k");
    assert_eq!(start.elapsed(), Duration::from_millis(20));
    q.done(&"k");
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_until_forgotten() {
    let q = fifo();
    assert_eq!(q.retry("k"), Duration::from_millis(50));
    assert_eq!(q.next().await, "k");
    q.done(&"k");
    assert_eq!(q.retry("k"), Duration::from_millis(100));
    let start = Instant::now();
    assert_eq!(q.next().await, "k");
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    q.done(&"k");
    q.forget(&"k");
    assert_eq!(q.retry("k"), Duration::from_millis(50));
    // Another back-off counts the same failures.
    let quick = Backoff {
        base: Duration::from_millis(20),
        max: Duration::from_secs(1),
        jitter: false,
    };
    assert_eq!(q.retry_with("k", quick), Duration::from_millis(40));
}

#[tokio::test(start_paused = true)]
async fn retries_can_be_expedited_once() {
    let q = fifo();
    let start = Instant::now();
    q.retry("a");
    q.retry("a");
    q.add_low_after("status", Duration::from_secs(1));
    q.expedite_retries();
    assert_eq!(q.next().await, "a");
    assert_eq!(start.elapsed(), Duration::ZERO);
    q.done(&"a");
    // The expedited retry does not fire again when its back-off would have ended; the
    // status deadline, not a retry, is left alone.
    assert_eq!(q.next().await, "status");
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    q.done(&"status");
    assert_eq!(q.delayed(), 0);
}

#[test]
fn the_low_lane_waits_behind_and_moves_up() {
    let q = fifo();
    q.add_low(1);
    q.add_low(2);
    q.add(3);
    q.add(2);
    q.add_low(3);
    assert_eq!(q.len(), 3);
    assert_eq!(drain(&q), [3, 2, 1]);
    assert!(q.is_idle());
}

#[test]
fn an_overdue_low_lane_takes_turns_with_the_other() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let bound = Duration::from_millis(250);
        let q = bounded_low_lane(bound);
        q.add_low(1);
        q.add_low(2);
        for k in 10..14 {
            q.add(k);
        }
        // Within the bound the low lane waits.
        let pop = || {
            let k = q.try_next().expect("queued");
            q.done(&k);
            k
        };
        assert_eq!(pop(), 10);
        // Past it, every other key is a low one, oldest first, until none is overdue.
        tokio::time::advance(bound * 2).await;
        let order: Vec<i32> = (0..5).map(|_| pop()).collect();
        assert_eq!(order, [1, 11, 2, 12, 13]);
        assert!(q.is_idle());

        // A queue without a bound keeps the low lane strictly behind.
        let strict = fifo();
        strict.add_low(1);
        strict.add(10);
        strict.add(11);
        tokio::time::advance(bound * 2).await;
        assert_eq!(drain(&strict), [10, 11, 1]);

        // A low key moved up is not counted as overdue.
        let q = bounded_low_lane(bound);
        q.add_low(1);
        q.add(1);
        q.add(2);
        q.add(3);
        tokio::time::advance(bound * 2).await;
        assert_eq!(drain(&q), [1, 2, 3]);
    });
}

#[tokio::test(start_paused = true)]
async fn deferred_low_adds_coalesce() {
    let q = fifo();
    let delay = Duration::from_millis(100);
    let t0 = Instant::now();
    q.add_low_after(1, delay);
    q.add_low_after(1, delay);
    q.add_low_after(2, delay);
    assert_eq!(q.try_next(), None, "nothing before the delay");
    assert_eq!(q.next().await, 1);
    assert_eq!(t0.elapsed(), delay);
    assert_eq!(q.next().await, 2);
    assert_eq!(q.try_next(), None, "once each");
    q.done(&1);
    q.done(&2);
    // A sooner deferral is not held back by a later one, and the later one is dropped.
    let t1 = Instant::now();
    q.add_low_after(1, Duration::from_secs(1));
    q.add_low_after(1, delay);
    assert_eq!(q.next().await, 1);
    assert_eq!(t1.elapsed(), delay);
    q.done(&1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(q.try_next(), None, "one pass for the two deferrals");
}

#[test]
fn sorted_queues_hand_out_the_smallest_key_first() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async {
        let q: WorkQueue<String, Sorted<String>> = WorkQueue::default();
        q.add("b".into());
        q.add("a".into());
        q.add("b".into());
        q.add_after("c".into(), Duration::from_secs(5));
        q.add_after("c".into(), Duration::from_secs(1));
        assert_eq!((q.len(), q.delayed()), (2, 1));
        assert_eq!(drain(&q), ["a", "b"]);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(drain(&q), ["c"]);
        assert_eq!(q.delayed(), 0);
        // Moving up a lane removes the key from the low one at once.
        q.add_low("z".into());
        q.add_low("y".into());
        q.add("z".into());
        assert_eq!(drain(&q), ["z", "y"]);
    });
}

#[tokio::test]
async fn metrics_follow_the_queue() {
    let mut registry = crate::metrics::Registry::new("meridian_test");
    let families = QueueFamilies::register(&mut registry);
    let q: WorkQueue<u8> = WorkQueue::new(
        Settings {
            capacity: 2,
            ..Settings::default()
        },
        families.queue("things"),
    );
    q.add(1);
    q.add(1);
    q.add(2);
    q.add(3);
    let k = q.try_next().expect("queued");
    q.retry(k);
    q.done(&k);
    let text = registry.encode();
    for want in [
        "meridian_test_workqueue_depth{queue=\"things\"} 1",
        "meridian_test_workqueue_adds_total{queue=\"things\"} 2",
        "meridian_test_workqueue_retries_total{queue=\"things\"} 1",
        "meridian_test_workqueue_dropped_total{queue=\"things\"} 1",
    ] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_drained_queue_gives_its_burst_room_back() {
    let q = fifo();
    for k in 0..1000 {
        q.add(k);
    }
    assert_eq!(drain(&q).len(), 1000);
    let s = lock(&q.state);
    assert!(
        s.waiting.capacity() <= 2 * DRAINED_ROOM && s.processing.capacity() <= 2 * DRAINED_ROOM,
        "room kept: {} waiting, {} processing",
        s.waiting.capacity(),
        s.processing.capacity()
    );
    drop(s);
    // Moved up a lane, a key leaves a stale entry behind in the low one: dropped once the
    // queue drains.
    q.add_low(5);
    q.add(5);
    assert_eq!(drain(&q), vec![5]);
    assert!(lock(&q.state).order.is_empty(), "stale entries are dropped");
    // And the queue grows again for the next burst.
    for k in 0..100 {
        q.add(k);
    }
    assert_eq!(q.len(), 100);
    assert_eq!(drain(&q).len(), 100);
}

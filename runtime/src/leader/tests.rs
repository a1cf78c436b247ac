//! The election on a paused clock against the in-process Lease store: acquire, renew,
//! expiry and takeover, a 409 race, release on shutdown, and a partitioned leader whose
//! writes stop at its renew deadline.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::memory::MemoryLeases;
use super::record::{Record, Stored};
use super::*;
use crate::endpoints::Readiness;
use crate::metrics::Registry;
use crate::testing::{Answer, ScriptedApi};

const S: fn(u64) -> Duration = Duration::from_secs;

fn settings(identity: &str) -> Settings {
    Settings {
        identity: identity.into(),
        namespace: "meridian-system".into(),
        name: "test".into(),
        lease_duration: S(15),
        renew_deadline: S(10),
        retry_period: S(2),
        jitter: 0.0,
    }
}

/// One replica: its gate, and its elector running until `stop`.
struct Replica {
    gate: Gate,
    stop: Shutdown,
    task: JoinHandle<Result<(), Lost>>,
}

fn start(identity: &str, store: MemoryLeases) -> Replica {
    start_with(settings(identity), store)
}

fn start_with(settings: Settings, store: MemoryLeases) -> Replica {
    let gate = Gate::candidate(&settings.name, ElectionMetrics::default());
    let stop = Shutdown::new();
    let elector = Elector::new(settings, store, gate.clone());
    let task = tokio::spawn(elector.run(stop.clone()));
    Replica { gate, stop, task }
}

/// Waits (on the paused clock) until `gate` has `role`, at most `within`; returns when.
async fn until_role(gate: &Gate, within: Duration, want: impl Fn(&Role) -> bool) -> Instant {
    let mut rx = gate.subscribe();
    tokio::time::timeout(within, rx.wait_for(|r| want(r)))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "role not reached within {within:?}; it is {:?}",
                gate.role()
            )
        })
        .expect("gate alive");
    Instant::now()
}

fn leading(r: &Role) -> bool {
    *r == Role::Leading
}

fn holder(store: &MemoryLeases) -> Record {
    store.current().expect("a Lease").record
}

/// A Lease already held by a replica that no longer runs.
async fn ghost(store: &MemoryLeases, transitions: i32) {
    let r = Record {
        holder: "ghost".into(),
        lease_duration_seconds: 15,
        // Its timestamps are ancient: candidates must not judge expiry by them.
        acquire_time: Some(jiff::Timestamp::UNIX_EPOCH),
        renew_time: Some(jiff::Timestamp::UNIX_EPOCH),
        transitions,
    };
    let created = store.create(&r).await.expect("create");
    assert_eq!(created.record, r);
}

#[tokio::test(start_paused = true)]
async fn acquires_an_absent_lease_and_renews_it_every_retry_period() {
    let store = MemoryLeases::new();
    let a = start("a", store.handle(Duration::ZERO));
    let t0 = Instant::now();
    assert_eq!(until_role(&a.gate, S(1), leading).await, t0);
    let r = holder(&store);
    assert_eq!(
        (r.holder.as_str(), r.transitions, r.lease_duration_seconds),
        ("a", 0, 15)
    );
    assert!(a.gate.admit("federation").is_ok());

    tokio::time::sleep(S(60) + Duration::from_millis(1)).await;
    assert_eq!(a.gate.role(), Role::Leading);
    // The create, then one renewal per retry period.
    assert_eq!(store.writes(), 1 + 30);
    let renewed = holder(&store);
    assert_eq!(
        renewed.acquire_time, r.acquire_time,
        "a renewal keeps the acquire time"
    );
    assert_eq!(renewed.transitions, 0);
    assert!(a.gate.admit("member").is_ok());
}

#[tokio::test(start_paused = true)]
async fn expiry_is_judged_by_the_candidates_clock_not_the_holders_timestamps() {
    let store = MemoryLeases::new();
    ghost(&store, 4).await;
    let t0 = Instant::now();
    let b = start("b", store.handle(Duration::ZERO));
    let took = until_role(&b.gate, S(20), leading).await;
    // renewTime is 1970, yet b waits a whole lease duration from when it first saw it.
    assert_eq!(
        took - t0,
        S(15),
        "taken over when b's own observation expired"
    );
    let r = holder(&store);
    assert_eq!(
        (r.holder.as_str(), r.transitions),
        ("b", 5),
        "a takeover is a transition"
    );
    assert!(r.renew_time > Some(jiff::Timestamp::UNIX_EPOCH));
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_within_the_lease_duration_of_the_leaders_last_renewal() {
    let store = MemoryLeases::new();
    let a = start("a", store.handle(Duration::ZERO));
    until_role(&a.gate, S(1), leading).await;
    let b = start("b", store.handle(Duration::ZERO));
    tokio::time::sleep(S(7) + Duration::from_millis(300)).await;
    assert_eq!(
        b.gate.role(),
        Role::Candidate {
            leader: Some("a".into())
        }
    );
    assert!(b.gate.admit("member").is_err(), "a standby writes nothing");

    // kill -9: the task ends without a release.
    a.task.abort();
    let killed = Instant::now();
    let last_renewal = Instant::now() - Duration::from_millis(1300);
    let took = until_role(&b.gate, S(30), leading).await;
    assert_eq!(
        took - last_renewal,
        S(15),
        "b saw a's last renewal as it happened (its watch) and waited exactly a lease duration"
    );
    assert!(took - killed <= S(15), "{:?}", took - killed);
    let r = holder(&store);
    assert_eq!((r.holder.as_str(), r.transitions), ("b", 1));
}

#[tokio::test(start_paused = true)]
async fn of_two_candidates_racing_for_one_version_exactly_one_wins() {
    let store = MemoryLeases::new();
    ghost(&store, 0).await;
    // Each operation takes 10 ms: both read the same version, then both replace it.
    let b = start("b", store.handle(Duration::from_millis(10)));
    let c = start("c", store.handle(Duration::from_millis(10)));
    let writes = store.writes();
    let mut roles = (b.gate.subscribe(), c.gate.subscribe());
    tokio::time::timeout(S(20), async {
        tokio::select! {
            _ = roles.0.wait_for(leading) => {}
            _ = roles.1.wait_for(leading) => {}
        }
    })
    .await
    .expect("one of them leads");
    let (winner, loser) = if b.gate.role() == Role::Leading {
        (&b, &c)
    } else {
        (&c, &b)
    };
    let name = if std::ptr::eq(winner, &b) { "b" } else { "c" };
    assert_eq!(store.writes(), writes + 1, "the loser's replace got 409");
    assert_eq!(holder(&store).transitions, 1, "one transition, not two");
    tokio::time::sleep(S(30)).await;
    assert_eq!(winner.gate.role(), Role::Leading);
    assert_eq!(
        loser.gate.role(),
        Role::Candidate {
            leader: Some(name.into())
        }
    );
    assert!(loser.gate.admit("federation").is_err());
    assert_eq!(holder(&store).holder, name);
}

#[tokio::test(start_paused = true)]
async fn a_clean_stop_releases_the_lease_and_the_standby_takes_over_at_once() {
    let store = MemoryLeases::new();
    let a = start("a", store.handle(Duration::ZERO));
    until_role(&a.gate, S(1), leading).await;
    let b = start("b", store.handle(Duration::ZERO));
    tokio::time::sleep(S(5)).await;

    let stopped = Instant::now();
    a.stop.trigger();
    assert_eq!(a.task.await.expect("join"), Ok(()));
    assert!(a.gate.admit("member").is_err(), "nothing after the stop");
    assert_eq!(a.gate.role(), Role::Stopped);
    let took = until_role(&b.gate, S(15), leading).await;
    assert!(
        took - stopped < Duration::from_millis(100),
        "no lease duration to wait: {:?}",
        took - stopped
    );
    let r = holder(&store);
    assert_eq!((r.holder.as_str(), r.transitions), ("b", 1));
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_leader_stops_writing_at_its_renew_deadline_before_anyone_takes_over() {
    let store = MemoryLeases::new();
    let a_store = store.handle(Duration::from_millis(5));
    let a = start("a", a_store.clone());
    until_role(&a.gate, S(1), leading).await;
    let b = start("b", store.handle(Duration::from_millis(5)));

    // a's loops write every 100 ms through its gate; remember the last admitted write.
    let last_write = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let writer = {
        let (gate, last) = (a.gate.clone(), last_write.clone());
        tokio::spawn(async move {
            loop {
                if gate.admit("member").is_ok() {
                    *last.lock().expect("lock") = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(S(9)).await;
    let renewed_at = |s: &MemoryLeases| s.current().map(|s: Stored| s.resource_version);
    let before = renewed_at(&store);
    a_store.partition(true);
    let cut = Instant::now();

    let lost = tokio::time::timeout(S(15), a.task)
        .await
        .expect("a gives up")
        .expect("join");
    let gave_up = Instant::now();
    assert!(matches!(lost, Err(Lost::Deadline { .. })), "{lost:?}");
    assert!(
        gave_up - cut <= S(10),
        "within the renew deadline: {:?}",
        gave_up - cut
    );
    let took = until_role(&b.gate, S(20), leading).await;
    writer.abort();
    let last = last_write
        .lock()
        .expect("lock")
        .expect("a wrote while leading");
    assert!(last <= gave_up);
    assert!(
        took - last > S(5) - Duration::from_millis(200),
        "a lease duration minus the renew deadline between a's last write and b's first: {:?}",
        took - last
    );
    assert_ne!(renewed_at(&store), before, "b's takeover was written");
    assert!(a.gate.admit("member").is_err());
    assert_eq!(a.gate.role(), Role::Stopped);

    // Healed, a still writes nothing: its process exits (see Election::run).
    a_store.partition(false);
    tokio::time::sleep(S(5)).await;
    assert!(a.gate.admit("member").is_err());
    assert_eq!(holder(&store).holder, "b");
}

#[tokio::test(start_paused = true)]
async fn the_gate_refuses_by_the_clock_even_when_the_elector_cannot_run() {
    let gate = Gate::candidate("test", ElectionMetrics::default());
    assert_eq!(gate.admit("member").err(), Some(NotLeading::NotLeader));
    gate.begin(Instant::now() + S(10));
    assert!(gate.admit("member").is_ok());
    // A frozen process: time passes with nothing else running.
    tokio::time::advance(S(10)).await;
    assert_eq!(gate.admit("member").err(), Some(NotLeading::NotLeader));

    // A write in flight when the term ends is abandoned.
    let gate = Gate::candidate("test", ElectionMetrics::default());
    gate.begin(Instant::now() + S(10));
    let permit = gate.admit("member").expect("leading");
    let write = tokio::spawn(permit.run(std::future::pending::<Result<(), Infallible>>()));
    tokio::task::yield_now().await;
    gate.end();
    let err = write.await.expect("join").expect_err("abandoned");
    assert_eq!(
        err.downcast_ref::<NotLeading>(),
        Some(&NotLeading::TermEnded)
    );
}

#[tokio::test(start_paused = true)]
async fn a_gated_client_reads_always_and_writes_only_while_leading() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let mut registry = Registry::new("meridian_test");
    let metrics = ElectionMetrics::register(&mut registry);
    let gate = Gate::candidate("test", metrics);
    // Whatever is asked (a get, a create, a delete), a ConfigMap comes back.
    let api = ScriptedApi::new(|_| {
        Answer::json(
            200,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "x", "namespace": "default"}}),
        )
    });
    let client = gate.client(api.client(), "member");
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");

    cms.get("x").await.expect("a standby reads");
    let err = cms
        .create(&Default::default(), &ConfigMap::default())
        .await
        .expect_err("a standby does not write");
    assert!(NotLeading::is(&err), "{err:?}");
    assert_eq!(api.requests().len(), 1, "the write never left the process");

    gate.begin(Instant::now() + S(10));
    cms.create(&Default::default(), &ConfigMap::default())
        .await
        .expect("the leader writes");
    assert_eq!(api.requests().len(), 2);
    gate.end();
    assert!(cms.delete("x", &Default::default()).await.is_err());
    let text = registry.encode();
    for series in [
        r#"meridian_test_leader_election_writes_total{target="member",result="refused"} 2"#,
        r#"meridian_test_leader_election_writes_total{target="member",result="admitted"} 1"#,
        r#"meridian_test_leader_election_master_status{name="test"} 0"#,
    ] {
        assert!(text.contains(series), "{series} in\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn run_stops_the_work_when_the_term_is_lost_and_releases_on_shutdown() {
    // Lost: a partitioned leader's run ends with Lost, its work dropped.
    let store = MemoryLeases::new();
    let mine = store.handle(Duration::ZERO);
    let election = Election::with_store(
        Some((settings("a"), mine.clone())),
        ElectionMetrics::default(),
    );
    let gate = election.gate().clone();
    let shutdown = Shutdown::new();
    let work = {
        let gate = gate.clone();
        async move {
            gate.leading().await;
            mine.partition(true);
            std::future::pending::<Result<(), Infallible>>().await
        }
    };
    let r = tokio::time::timeout(S(30), election.run(&shutdown, work))
        .await
        .expect("ends");
    assert!(
        matches!(r, Err(RunError::Lost(Lost::Deadline { .. }))),
        "{r:?}"
    );

    // Shutdown: released, Ok(None).
    let store = MemoryLeases::new();
    let election = Election::with_store(
        Some((settings("a"), store.handle(Duration::ZERO))),
        ElectionMetrics::default(),
    );
    let gate = election.gate().clone();
    let shutdown = Shutdown::new();
    let trigger = shutdown.clone();
    let work = async move {
        gate.leading().await;
        trigger.trigger();
        std::future::pending::<Result<(), Infallible>>().await
    };
    let r = tokio::time::timeout(S(30), election.run(&shutdown, work))
        .await
        .expect("ends");
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert_eq!(holder(&store).holder, "", "released");

    // No election: the work runs at once and its result comes back.
    let election = Election::<MemoryLeases>::with_store(None, ElectionMetrics::default());
    assert_eq!(election.gate().role(), Role::Unelected);
    assert!(election.gate().admit("member").is_ok());
    let r = election
        .run(&Shutdown::new(), async { Ok::<_, Infallible>(7) })
        .await;
    assert!(matches!(r, Ok(Some(7))));
}

#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("lost")]
    Lost(#[from] Lost),
    #[error("work failed")]
    Work,
}

#[tokio::test(start_paused = true)]
async fn run_to_end_gives_the_lost_term_and_the_work_error_one_type() {
    let store = MemoryLeases::new();
    let mine = store.handle(Duration::ZERO);
    let election = Election::with_store(
        Some((settings("a"), mine.clone())),
        ElectionMetrics::default(),
    );
    let gate = election.gate().clone();
    let work = async move {
        gate.leading().await;
        mine.partition(true);
        std::future::pending::<Result<(), Ended>>().await
    };
    let r = tokio::time::timeout(S(30), election.run_to_end(&Shutdown::new(), work))
        .await
        .expect("ends");
    assert!(
        matches!(r, Err(Ended::Lost(Lost::Deadline { .. }))),
        "{r:?}"
    );

    let election = Election::<MemoryLeases>::with_store(None, ElectionMetrics::default());
    let r = election
        .run_to_end(&Shutdown::new(), async { Err::<(), _>(Ended::Work) })
        .await;
    assert!(matches!(r, Err(Ended::Work)), "{r:?}");
    let election = Election::<MemoryLeases>::with_store(None, ElectionMetrics::default());
    let r = election
        .run_to_end(&Shutdown::new(), async { Ok::<_, Ended>(7) })
        .await;
    assert!(r.is_ok(), "{r:?}");
}

#[tokio::test(start_paused = true)]
async fn readiness_says_whether_this_replica_leads() {
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = Gate::candidate("test", ElectionMetrics::default());
    let ready = gate.readiness(crate::endpoints::Flag::new(flag.clone(), "not synced"));
    let r = ready.ready();
    assert!(r.ready, "a standby is ready");
    assert_eq!(r.message.as_deref(), Some("standby; no leader seen yet"));
    gate.saw_leader(Some("other"));
    assert_eq!(
        ready.ready().message.as_deref(),
        Some("standby; the leader is other")
    );
    gate.begin(Instant::now() + S(10));
    let r = ready.ready();
    assert!(
        !r.ready,
        "a leader whose loops have not synced is not ready"
    );
    assert_eq!(r.message.as_deref(), Some("not synced"));
    flag.store(true, Ordering::Release);
    assert_eq!(ready.ready().message.as_deref(), Some("leading"));
    gate.end();
    assert!(!ready.ready().ready);
}

/// The elector renews on its own task: work that holds its thread for three renew
/// deadlines (a burst of computation between awaits, as hundreds of members connecting at
/// once can be) does not cost the term. Real time: the blocking is what is tested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_that_holds_its_thread_does_not_starve_the_renewals() {
    let ms = Duration::from_millis;
    let s = Settings {
        lease_duration: ms(600),
        renew_deadline: ms(400),
        retry_period: ms(50),
        ..settings("a")
    };
    let store = MemoryLeases::new();
    let election = Election::with_store(
        Some((s, store.handle(Duration::ZERO))),
        ElectionMetrics::default(),
    );
    let gate = election.gate().clone();
    let shutdown = Shutdown::new();
    let trigger = shutdown.clone();
    let work = async move {
        gate.leading().await;
        // Never yields while it computes.
        std::thread::sleep(ms(1200));
        let still_leading = gate.admit("member").is_ok();
        trigger.trigger();
        Ok::<_, Infallible>(still_leading)
    };
    let r = tokio::time::timeout(S(10), election.run(&shutdown, work))
        .await
        .expect("ends");
    assert!(matches!(r, Ok(Some(true))), "{r:?}");
}

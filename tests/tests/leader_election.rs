//! Leader election end to end: two schedulers and two controllers against one federation.
//!
//! Killing the leader of each (SIGKILL) hands its Lease to the other within a lease
//! duration and a retry period, and the app keeps converging. No object is written by two
//! leaders, which the test attributes this way: a standby's own write gate admitted
//! nothing (its `/metrics`), and between a kill (plus a second for writes already on the
//! wire) and the survivor's takeover (its `acquireTime`) nobody wrote the members'
//! copies or the Placements, though the app was scaled at the kill and needed exactly
//! those writes: they came only after the takeover. A leader frozen (SIGSTOP) past its
//! renew deadline is replaced; when it wakes, with the changes it missed arriving on its
//! watches, it writes nothing and exits with status 1.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use meridian_e2e::ha::{CLUSTERS, Component, Ha, Replica, WriteLog, poll, wait_holder};

const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_secs(2);
/// What a takeover may add to the decision itself (a debug build on a shared machine).
const SLACK: Duration = Duration::from_secs(3);

fn admitted(r: &Replica, c: Component) -> f64 {
    r.metric(
        &format!("{}_leader_election_writes_total", c.prefix()),
        &[("result", "admitted")],
    )
}

fn leading(r: &Replica, c: Component) -> f64 {
    r.metric(
        &format!("{}_leader_election_master_status", c.prefix()),
        &[("name", c.lease())],
    )
}

/// No write at `place` (a member, or `federation`) in `[from, to)`.
fn quiet(log: &WriteLog, place: &[&str], from: Instant, to: Instant, what: &str) {
    let writes: Vec<_> = log
        .between(from, to)
        .into_iter()
        .filter(|w| place.contains(&w.place.as_str()))
        .collect();
    assert!(
        writes.is_empty(),
        "{what}: written in the {:?} between the kill and the takeover: {writes:#?}",
        to.saturating_duration_since(from)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_each_leader_hands_over_without_two_writers() {
    let mut ha = Ha::start(4).await;
    let log = WriteLog::default();
    for c in CLUSTERS {
        log.watch(Api::<Deployment>::all(ha.env.member(c).await), c);
    }
    log.watch(Api::<fed_api::Placement>::all(ha.fed.clone()), "federation");

    // One leads, one stands by, and each says which.
    for c in [Component::Scheduler, Component::Controllers] {
        assert_eq!(ha.leader(c).await, (0, 0), "{c:?}: the first started leads");
        let [lead, standby] = ha.replicas(c) else {
            panic!("two replicas of {c:?}");
        };
        assert_eq!(lead.readyz(), "ok: leading\n");
        assert_eq!(
            standby.readyz(),
            format!("ok: standby; the leader is {}\n", lead.identity)
        );
        assert_eq!((leading(lead, c), leading(standby, c)), (1.0, 0.0));
        assert!(admitted(lead, c) > 0.0, "{c:?}: the leader wrote");
        assert_eq!(
            admitted(standby, c),
            0.0,
            "{c:?}: the standby wrote nothing"
        );
    }
    let member_writes = |r: &Replica| {
        r.metric(
            "meridian_controllers_workload_member_writes_total",
            &[("result", "ok")],
        )
    };
    assert!(member_writes(&ha.controllers[0]) > 0.0);
    assert_eq!(member_writes(&ha.controllers[1]), 0.0);

    // The scheduler's leader dies; the app is scaled at once: the next Placement is the
    // standby's, written once it has taken over.
    let (f, _) = ha
        .kill_leader(Component::Scheduler, 6, LEASE + RETRY + SLACK)
        .await;
    let took = f.took_over - f.killed;
    assert!(
        took >= LEASE - RETRY - Duration::from_millis(500) && took <= LEASE + RETRY,
        "taken over {took:?} after the kill"
    );
    assert!(f.latency() <= LEASE + RETRY + SLACK, "{:?}", f.latency());
    assert_eq!(f.transitions, 1);
    quiet(
        &log,
        &["federation"],
        f.killed + Duration::from_secs(1),
        f.took_over,
        "Placements",
    );
    // The survivor wrote the Placement (its watcher may deliver it a while after the
    // decision was read back, on a busy machine).
    poll(
        "the survivor's Placement write in the log",
        Duration::from_secs(30),
        || async {
            log.between(f.took_over, Instant::now())
                .iter()
                .any(|w| w.place == "federation")
                .then_some(())
        },
    )
    .await;
    poll("members at 6", Duration::from_secs(30), || async {
        (ha.in_members().await == 6).then_some(())
    })
    .await;
    ha.env.rollout_status("deploy/web", "shop");

    // The controllers' leader dies; the scheduler (the new one) places 8 at once, the
    // members get their copies from the standby once it has taken over.
    let standby = &ha.controllers[1];
    assert_eq!(admitted(standby, Component::Controllers), 0.0);
    let (f, _) = ha
        .kill_leader(Component::Controllers, 8, LEASE + RETRY + SLACK)
        .await;
    let took = f.took_over - f.killed;
    assert!(
        took >= LEASE - RETRY - Duration::from_millis(500) && took <= LEASE + RETRY,
        "taken over {took:?} after the kill"
    );
    assert!(f.latency() <= LEASE + RETRY + SLACK, "{:?}", f.latency());
    assert_eq!(f.transitions, 1);
    quiet(
        &log,
        &CLUSTERS,
        f.killed + Duration::from_secs(1),
        f.took_over,
        "member copies",
    );
    let survivor = &ha.controllers[0];
    assert_eq!(leading(survivor, Component::Controllers), 1.0);
    assert!(admitted(survivor, Component::Controllers) > 0.0);
    assert!(member_writes(survivor) > 0.0);
    ha.env.rollout_status("deploy/web", "shop");

    // A frozen leader: a new standby takes over while it cannot renew; woken, with the
    // scale-ups it missed on its watches, it writes nothing and exits non-zero.
    let fresh = ha.spawn(Component::Controllers);
    let fresh_replica = ha.controllers.last().expect("spawned");
    poll(
        "the new standby answers",
        Duration::from_secs(30),
        || async {
            fresh_replica
                .get("/readyz")
                .filter(|(_, b)| b.starts_with("ok: standby"))
        },
    )
    .await;
    let (frozen_at, _) = ha.leader(Component::Controllers).await;
    ha.controllers[frozen_at].proc.signal("STOP");
    ha.scale(10).await;
    let l = wait_holder(&ha.fed, "fed-controllers", &fresh, LEASE + RETRY + SLACK).await;
    assert_eq!(l.transitions, 2);
    poll("members at 10", Duration::from_secs(30), || async {
        (ha.in_members().await == 10).then_some(())
    })
    .await;
    ha.scale(12).await;
    poll("members at 12", Duration::from_secs(30), || async {
        (ha.in_members().await == 12).then_some(())
    })
    .await;
    let woke = Instant::now();
    let frozen = &mut ha.controllers[frozen_at];
    frozen.proc.signal("CONT");
    let status = tokio::task::block_in_place(|| frozen.proc.wait_exit(Duration::from_secs(15)))
        .expect("waiting for the former leader")
        .expect("the former leader exits once it runs again");
    assert_eq!(status.code(), Some(1), "{status:?}");
    // Watch a while longer: nothing it had queued reaches a member.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<_> = log
        .between(woke, Instant::now())
        .into_iter()
        .filter(|w| w.place != "federation")
        .collect();
    assert!(
        after.is_empty(),
        "written after the frozen leader woke: {after:#?}"
    );
    assert_eq!(ha.in_members().await, 12);
    let l = wait_holder(&ha.fed, "fed-controllers", &fresh, Duration::from_secs(1)).await;
    assert_eq!(l.transitions, 2);
}

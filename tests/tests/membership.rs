//! Cluster membership end to end: fedctl join/unjoin against a cluster-sim fleet, the cluster
//! controller's health and capacity reporting, fault detection and recovery.

use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, WatchEvent, WatchParams};
use meridian_e2e::{Env, eventually};

/// Where the cluster controller keeps each member's heartbeat Lease.
const LEASE_NAMESPACE: &str = "meridian-cluster-lease";

/// The member's Lease, if there is one.
async fn lease(client: &kube::Client, name: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .get_opt(name)
        .await
        .expect("reading a Lease")
}

/// The Lease's `renewTime`.
fn renewed(l: &Lease) -> Option<MicroTime> {
    l.spec.as_ref()?.renew_time.clone()
}

/// Polls (every 100 ms, at most `within`) until the Lease `name` was renewed `n` times
/// after the call. At each renewal `each` gets the count so far and returns the count to go
/// on from (`0` starts over). Returns the last renewTime.
async fn renewals(
    client: &kube::Client,
    name: &str,
    n: usize,
    within: Duration,
    mut each: impl AsyncFnMut(usize) -> usize,
) -> MicroTime {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = lease(client, name).await.as_ref().and_then(renewed);
    let mut count = 0;
    loop {
        let now = lease(client, name).await.as_ref().and_then(renewed);
        if now.is_some() && now != last {
            last = now;
            count = each(count + 1).await;
            if count >= n {
                return last.expect("renewed");
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Lease {name}: {count} of {n} renewals within {within:?} (last {last:?})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn cluster_rv(client: &kube::Client, name: &str) -> Option<String> {
    Api::<fed_api::Cluster>::all(client.clone())
        .get(name)
        .await
        .expect("reading the Cluster")
        .metadata
        .resource_version
}

/// Waits on a watch until `pred` holds for the named Cluster.
async fn wait_cluster(
    client: &kube::Client,
    name: &str,
    pred: impl Fn(&fed_api::Cluster) -> bool,
) -> fed_api::Cluster {
    let api: Api<fed_api::Cluster> = Api::all(client.clone());
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = Box::pin(api.watch(&wp, "0").await.expect("watch clusters"));
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if let WatchEvent::Added(c) | WatchEvent::Modified(c) = ev
            && pred(&c)
        {
            return c;
        }
    }
    panic!("watch on cluster {name} ended");
}

fn condition(c: &fed_api::Cluster, ty: &str) -> Option<String> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == ty)
        .map(|x| x.status.clone())
}

#[tokio::test]
async fn join_probe_capacity_faults_and_unjoin() {
    let env = Env::start(&[
        "--clusters=2",
        "--nodes=3",
        "--node-cpu=4",
        "--node-memory=8Gi",
        "--ready-delay=0s",
    ]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--failure-threshold=3",
    ]);

    // Dry run prints, creates nothing.
    let dry = env.ok(
        "fedctl",
        &["join", "sim-1", "--cluster-context", "sim-1", "--dry-run"],
    );
    assert!(
        dry.contains("kind: ClusterRole") && dry.contains("kind: Cluster"),
        "{dry}"
    );
    let none = env.ok("kubectl", &["get", "clusters", "-o", "name"]);
    assert!(none.trim().is_empty(), "{none}");

    let out = env.ok(
        "fedctl",
        &[
            "join",
            "sim-1",
            "--cluster-context",
            "sim-1",
            "--region",
            "eu-west",
            "--zone",
            "eu-west-1a",
            "--wait-seconds",
            "60",
        ],
    );
    assert!(out.contains("cluster sim-1 is Ready"), "{out}");
    // Joining twice is not an error.
    let again = env.ok(
        "fedctl",
        &[
            "join",
            "sim-1",
            "--cluster-context",
            "sim-1",
            "--region",
            "eu-west",
            "--zone",
            "eu-west-1a",
            "--wait-seconds",
            "60",
        ],
    );
    assert!(again.contains("unchanged"), "{again}");

    let table = env.ok("kubectl", &["get", "clusters"]);
    assert!(
        table.contains("sim-1") && table.contains("True") && table.contains("eu-west-1a"),
        "{table}"
    );
    let sa = env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "get",
            "serviceaccount",
            "meridian-controller",
            "-n",
            "meridian-system",
            "-o",
            "name",
        ],
    );
    assert_eq!(sa.trim(), "serviceaccount/meridian-controller");

    // Capacity: 3 Ready nodes x 4 CPU / 8Gi, nothing requested yet.
    let fed = env.federation().await;
    let c = wait_cluster(&fed, "sim-1", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.nodes.as_ref())
            .is_some_and(|n| n.ready == 3)
    })
    .await;
    let summary = c.status.unwrap().resource_summary.unwrap();
    assert_eq!(summary.allocatable.cpu.as_deref(), Some("12"));
    assert_eq!(summary.allocatable.memory.as_deref(), Some("24Gi"));

    // Pods requesting CPU show up as allocated.
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "create",
            "deployment",
            "load",
            "--image=x",
            "--replicas=4",
        ],
    );
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "set",
            "resources",
            "deployment",
            "load",
            "--requests=cpu=500m,memory=1Gi",
        ],
    );
    wait_cluster(&fed, "sim-1", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.resource_summary.as_ref())
            .is_some_and(|r| r.allocated.cpu.as_deref() == Some("2"))
    })
    .await;
    // A node going NotReady leaves the capacity.
    env.ctl(&["node-ready", "sim-1", "sim-1-node-0", "--ready=false"]);
    wait_cluster(&fed, "sim-1", |c| {
        c.status
            .as_ref()
            .and_then(|s| s.resource_summary.as_ref())
            .is_some_and(|r| r.allocatable.cpu.as_deref() == Some("8"))
    })
    .await;

    // Down: Offline after the failure threshold; up: Ready again.
    env.ctl(&["down", "sim-1"]);
    wait_cluster(&fed, "sim-1", |c| {
        condition(c, "Offline").as_deref() == Some("True")
    })
    .await;
    env.ctl(&["up", "sim-1"]);
    wait_cluster(&fed, "sim-1", |c| {
        condition(c, "Ready").as_deref() == Some("True")
    })
    .await;

    // Unjoin removes both sides.
    env.ok("fedctl", &["unjoin", "sim-1"]);
    let gone = env.run("kubectl", &["get", "cluster", "sim-1"]);
    assert!(!gone.status.success());
    let role = env.run(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "get",
            "clusterrole",
            "meridian:controller",
        ],
    );
    assert!(!role.status.success() && String::from_utf8_lossy(&role.stderr).contains("NotFound"));
}

#[tokio::test]
async fn join_without_permission_names_it() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    // A member identity that may create namespaces and service accounts, but not RBAC objects.
    env.ok(
        "kubectl",
        &["--context", "sim-1", "create", "namespace", "ops"],
    );
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "create",
            "serviceaccount",
            "limited",
            "-n",
            "ops",
        ],
    );
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "create",
            "clusterrole",
            "limited",
            "--verb=get,list,create,update",
            "--resource=namespaces,serviceaccounts",
        ],
    );
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "create",
            "clusterrolebinding",
            "limited",
            "--clusterrole=limited",
            "--serviceaccount=ops:limited",
        ],
    );
    let secret = env.dir.path().join("limited-token.yaml");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/service-account-token\nmetadata:\n  name: limited-token\n  namespace: ops\n  annotations:\n    kubernetes.io/service-account.name: limited\n",
    )
    .unwrap();
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "apply",
            "-f",
            secret.to_str().unwrap(),
        ],
    );
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "wait",
            "--for=jsonpath={.data.token}",
            "secret/limited-token",
            "-n",
            "ops",
            "--timeout=30s",
        ],
    );
    let b64 = env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "get",
            "secret",
            "limited-token",
            "-n",
            "ops",
            "-o",
            "jsonpath={.data.token}",
        ],
    );
    use base64::Engine;
    let token = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .unwrap(),
    )
    .unwrap();
    let sim = env.sim_kubeconfig.to_str().unwrap().to_string();
    env.ok(
        "kubectl",
        &[
            "--kubeconfig",
            &sim,
            "config",
            "set-credentials",
            "limited",
            &format!("--token={token}"),
        ],
    );
    env.ok(
        "kubectl",
        &[
            "--kubeconfig",
            &sim,
            "config",
            "set-context",
            "limited",
            "--cluster=sim-1",
            "--user=limited",
        ],
    );
    let out = env.run(
        "fedctl",
        &[
            "join",
            "sim-1",
            "--cluster-context",
            "limited",
            "--wait-seconds",
            "0",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ClusterRole meridian:controller") && err.contains("permission"),
        "{err}"
    );
    // Nothing was created in the federation.
    let none = env.ok("kubectl", &["get", "clusters", "-o", "name"]);
    assert!(none.trim().is_empty(), "{none}");
}

#[tokio::test]
async fn a_hung_member_does_not_slow_the_others() {
    let env = Env::start(&["--clusters=2", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--failure-threshold=3",
        "--metrics-bind-address=off",
    ]);
    for c in ["sim-1", "sim-2"] {
        env.ok("fedctl", &["join", c, "--wait-seconds", "60"]);
    }
    let fed = env.federation().await;
    let api: Api<fed_api::Cluster> = Api::all(fed.clone());
    let mut stream = Box::pin(
        api.watch(&WatchParams::default(), "0")
            .await
            .expect("watch"),
    );
    // sim-2 accepts connections but never answers: its probes hang until their timeout.
    env.ctl(&["partition", "sim-2"]);
    let leases: Api<Lease> = Api::namespaced(fed.clone(), LEASE_NAMESPACE);
    let mut lease_stream = Box::pin(
        leases
            .watch(&WatchParams::default().fields("metadata.name=sim-1"), "0")
            .await
            .expect("watch leases"),
    );
    let mut healthy_renewals = std::collections::BTreeSet::new();
    loop {
        tokio::select! {
            ev = lease_stream.try_next() => {
                let ev = ev.expect("lease watch event").expect("lease watch ended");
                if let WatchEvent::Added(l) | WatchEvent::Modified(l) = ev
                    && let Some(t) = renewed(&l)
                {
                    healthy_renewals.insert(t);
                }
            }
            ev = stream.try_next() => {
                let ev = ev.expect("watch event").expect("watch ended");
                let (WatchEvent::Added(c) | WatchEvent::Modified(c)) = ev else {
                    continue;
                };
                match c.metadata.name.as_deref() {
                    Some("sim-1") => assert_eq!(
                        condition(&c, "Ready").as_deref(),
                        Some("True"),
                        "the healthy member must stay Ready"
                    ),
                    Some("sim-2") if condition(&c, "Offline").as_deref() == Some("True") => break,
                    _ => {}
                }
            }
        }
    }
    // Going Offline took at least three hung probes (>= 3 periods); the healthy member kept
    // being probed, and renewing its Lease, on its own schedule meanwhile.
    assert!(
        healthy_renewals.len() >= 2,
        "healthy member's Lease renewed only at {healthy_renewals:?} while the other hung"
    );
    // The partitioned member's Lease is not renewed any more: it stays as it is while the
    // healthy one's is renewed three more times (about three probe periods).
    let stale = lease(&fed, "sim-2").await.as_ref().and_then(renewed);
    assert!(stale.is_some(), "sim-2 had a Lease before the partition");
    renewals(&fed, "sim-1", 3, Duration::from_secs(30), async |n| n).await;
    assert_eq!(
        lease(&fed, "sim-2").await.as_ref().and_then(renewed),
        stale,
        "an unreachable member's Lease must expire, not be renewed"
    );
    env.ctl(&["up", "sim-2"]);
    let mut stream = Box::pin(
        api.watch(&WatchParams::default().fields("metadata.name=sim-2"), "0")
            .await
            .expect("watch"),
    );
    loop {
        if let Some(WatchEvent::Added(c) | WatchEvent::Modified(c)) =
            stream.try_next().await.expect("watch event")
            && condition(&c, "Ready").as_deref() == Some("True")
        {
            break;
        }
    }
    // Back: renewed again.
    eventually(
        "sim-2's Lease renewed after it came back",
        Duration::from_secs(30),
        || async { lease(&fed, "sim-2").await.as_ref().and_then(renewed) },
        |t| *t > stale,
    )
    .await;
}

#[tokio::test]
async fn a_healthy_member_heartbeats_in_its_lease_not_its_status() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let fed = env.federation().await;
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    env.ok("fedctl", &["join", "sim-1", "--wait-seconds", "60"]);
    let cluster = Api::<fed_api::Cluster>::all(fed.clone())
        .get("sim-1")
        .await
        .expect("the Cluster");
    let l = eventually(
        "sim-1's Lease",
        Duration::from_secs(30),
        || async { lease(&fed, "sim-1").await },
        Option::is_some,
    )
    .await
    .expect("present");
    let spec = l.spec.clone().unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref(), Some("sim-1"));
    assert_eq!(spec.lease_duration_seconds, Some(4), "4 probe periods");
    assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());
    let owner = l.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(
        owner
            .iter()
            .map(|o| (o.kind.as_str(), o.name.as_str(), Some(o.uid.clone())))
            .collect::<Vec<_>>(),
        vec![("Cluster", "sim-1", cluster.metadata.uid.clone())]
    );
    let table = env.ok("kubectl", &["get", "leases", "-n", LEASE_NAMESPACE]);
    assert!(table.contains("sim-1"), "{table}");

    // Once the status settled (capacity, discovery), the Lease is renewed at every probe
    // while the Cluster is not written at all: four renewals in a row (four probe periods)
    // with one resourceVersion. Every probe moved lastProbeTime before; a change of the
    // Cluster starts the count again, and the deadline fails a Cluster written at every
    // probe.
    let mut rv = cluster_rv(&fed, "sim-1").await;
    let (fed2, rv2) = (fed.clone(), &mut rv);
    renewals(&fed, "sim-1", 4, Duration::from_secs(60), async move |n| {
        let now = cluster_rv(&fed2, "sim-1").await;
        if now == *rv2 {
            n
        } else {
            *rv2 = now;
            0
        }
    })
    .await;
    let c = Api::<fed_api::Cluster>::all(fed.clone())
        .get("sim-1")
        .await
        .expect("the Cluster");
    assert_eq!(condition(&c, "Ready").as_deref(), Some("True"));

    // Deleting the Cluster deletes its Lease (the garbage collector follows its owner).
    env.ok("fedctl", &["unjoin", "sim-1"]);
    eventually(
        "sim-1's Lease deleted with its Cluster",
        Duration::from_secs(30),
        || async { lease(&fed, "sim-1").await.is_some() },
        |present| !present,
    )
    .await;
}

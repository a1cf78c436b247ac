//! Cluster membership end to end: fedctl join/unjoin against a cluster-sim fleet, the cluster
//! controller's health and capacity reporting, fault detection and recovery.

use futures::TryStreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use meridian_e2e::Env;

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
    let probe_time = |c: &fed_api::Cluster| {
        c.status
            .as_ref()?
            .conditions
            .iter()
            .find(|x| x.type_ == "Ready")?
            .last_probe_time
            .clone()
    };
    let mut healthy_probes = std::collections::BTreeSet::new();
    loop {
        let ev = stream
            .try_next()
            .await
            .expect("watch event")
            .expect("watch ended");
        let (WatchEvent::Added(c) | WatchEvent::Modified(c)) = ev else {
            continue;
        };
        match c.metadata.name.as_deref() {
            Some("sim-1") => {
                assert_eq!(
                    condition(&c, "Ready").as_deref(),
                    Some("True"),
                    "the healthy member must stay Ready"
                );
                if let Some(t) = probe_time(&c) {
                    healthy_probes.insert(t);
                }
            }
            Some("sim-2") if condition(&c, "Offline").as_deref() == Some("True") => break,
            _ => {}
        }
    }
    // Going Offline took at least three hung probes (>= 3 periods); the healthy member kept
    // being probed on its own schedule meanwhile.
    assert!(
        healthy_probes.len() >= 2,
        "healthy member probed only at {healthy_probes:?} while the other hung"
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
}

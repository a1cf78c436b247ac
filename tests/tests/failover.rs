//! Workload propagation under failure, end to end: a member that goes down loses its
//! replicas to the others after the policy's toleration and READY recovers; when it
//! returns it is reconciled to its current share (zero: its copy is removed), so members
//! never run more than the policy asks. A workload controller killed while it pushes a
//! scale and a placement change converges after restart with no duplicates. Deleting with
//! `--cascade=orphan` leaves the member copies; `fedctl status` shows the per-cluster table.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use meridian_e2e::Env;
use serde::de::DeserializeOwned;

/// Waits on a watch until `pred` holds for the named object.
async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, pred: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + 'static,
{
    meridian_e2e::wait_for(api, name, "0", what, pred).await
}

/// Waits on a watch until the named object is gone.
async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + 'static,
{
    let list = api
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .expect("list");
    if list.items.is_empty() {
        return;
    }
    let rv = list.metadata.resource_version.unwrap_or_else(|| "0".into());
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = Box::pin(api.watch(&wp, &rv).await.expect("watch"));
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if let WatchEvent::Deleted(_) = ev {
            return;
        }
    }
    panic!("watch on {name} ended before it was deleted");
}

fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1)
}

fn ready(d: &Deployment) -> i32 {
    d.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

fn dest(p: &fed_api::Placement) -> BTreeMap<String, i32> {
    p.spec
        .dest_clusters
        .iter()
        .map(|t| {
            // In the members' Deployment terms (int32), to compare with what they hold.
            let replicas = i32::try_from(t.replicas).expect("a share fits in int32");
            (t.cluster.clone(), replicas)
        })
        .collect()
}

/// Replicas of `shop/web` in each member that holds a copy.
async fn member_replicas(env: &Env, clusters: &[&str]) -> BTreeMap<String, i32> {
    let mut out = BTreeMap::new();
    for c in clusters {
        let api: Api<Deployment> = Api::namespaced(env.member(c).await, "shop");
        if let Some(d) = api.get_opt("web").await.expect("member get") {
            out.insert(c.to_string(), replicas(&d));
        }
    }
    out
}

fn app(clusters: &[&str], replicas: i32) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: shop}}
spec:
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  placement:
    clusterAffinity:
      clusterNames: [{}]
    replicaScheduling: {{type: Divided, division: StaticWeight}}
    failover: {{tolerationSeconds: 2}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop, labels: {{app: web}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
"#,
        clusters.join(", ")
    )
}

const CLUSTERS: [&str; 3] = ["sim-1", "sim-2", "sim-3"];

fn start() -> Env {
    Env::start(&[
        "--clusters=3",
        "--nodes=3",
        "--node-cpu=8",
        "--node-memory=16Gi",
        "--ready-delay=0s",
    ])
}

const CONTROLLER_FLAGS: [&str; 5] = [
    "--probe-period=1s",
    "--probe-timeout=500ms",
    "--failure-threshold=2",
    "--workload-backoff-max=2s",
    "--metrics-bind-address=off",
];

/// Joins every cluster and waits until the scheduler can see all their capacity.
async fn join_all(env: &Env) {
    env.join_with_capacity(&CLUSTERS, 3).await;
}

#[tokio::test]
async fn member_down_fails_over_and_returns_to_its_current_share() {
    let env = start();
    let _controllers = env.controllers(&CONTROLLER_FLAGS);
    let _scheduler = env.scheduler(&[]);
    join_all(&env).await;
    env.apply("app.yaml", &app(&CLUSTERS, 12));
    env.rollout_status("deploy/web", "shop");
    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "shop");
    let fed_web: Api<Deployment> = Api::namespaced(fed.clone(), "shop");
    let p = placements.get("deployment-web").await.expect("placement");
    let before = dest(&p);
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(member_replicas(&env, &CLUSTERS).await, before);

    // The Placement's entries are written with the federated status that ended the
    // rollout (side by side, not paced): once they land, `fedctl status` shows the
    // per-cluster table and reads its errors clearly.
    wait_for(&placements, "deployment-web", "every share ready", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.clusters.len() == 3
                && s.clusters.iter().all(|c| {
                    c.ready_replicas == c.replicas
                        && c.available_replicas == c.replicas
                        && c.updated_replicas == c.replicas
                })
        })
    })
    .await;
    let table = env.ok("fedctl", &["status", "deploy/web", "-n", "shop"]);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip_while(|l| !l.starts_with("CLUSTER"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "CLUSTER",
            "DESIRED",
            "READY",
            "AVAILABLE",
            "UPDATED",
            "LAST-SYNC",
            "ERROR"
        ],
        "{table}"
    );
    for (row, (c, r)) in rows[1..].iter().zip(&before) {
        let n = r.to_string();
        assert_eq!(row[..5], [c.as_str(), &n, &n, &n, &n], "{table}");
    }
    let json: serde_json::Value = serde_json::from_str(&env.ok(
        "fedctl",
        &["status", "deployment", "web", "-n", "shop", "-o", "json"],
    ))
    .expect("json");
    assert_eq!(json["clusters"].as_array().map(Vec::len), Some(3), "{json}");
    let missing = env.run("fedctl", &["status", "deploy/nope", "-n", "shop"]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("deployments \"nope\" not found in namespace shop"),
        "{err}"
    );

    // sim-3 goes down: after the 2 s toleration its share moves to the others and READY
    // recovers from the clusters that are up (sim-3's last known pods do not count).
    env.ctl(&["down", "sim-3"]);
    let p = wait_for(&placements, "deployment-web", "failover", |p| {
        let d = dest(p);
        !d.contains_key("sim-3") && d.values().sum::<i32>() == 12
    })
    .await;
    let after = dest(&p);
    let p = wait_for(
        &placements,
        "deployment-web",
        "READY from sim-1 and sim-2",
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.clusters.iter().map(|c| c.ready_replicas).sum::<i32>() == 12
                    && s.clusters.iter().any(|c| {
                        c.cluster == "sim-3" && c.ready_replicas == 0 && !c.error.is_empty()
                    })
            })
        },
    )
    .await;
    let d = wait_for(&fed_web, "web", "READY 12 without sim-3", |d| {
        ready(d) == 12
    })
    .await;
    assert_eq!(replicas(&d), 12);
    for c in ["sim-1", "sim-2"] {
        let api: Api<Deployment> = Api::namespaced(env.member(c).await, "shop");
        let want = after[c];
        wait_for(&api, "web", "the new share", |d| {
            replicas(d) == want && ready(d) == want
        })
        .await;
    }
    let st = p.status.expect("status");
    let gone = st
        .clusters
        .iter()
        .find(|c| c.cluster == "sim-3")
        .expect("sim-3 reported while it still holds a copy");
    assert_eq!(gone.ready_replicas, 0, "{gone:?}");
    assert!(!gone.error.is_empty(), "{gone:?}");
    // With the new shares ready, sim-3's copy is being removed (it waits for sim-3 to
    // return): its pods are terminating and count no more, so the rollout is complete
    // while sim-3 is still down.
    let d = wait_for(&fed_web, "web", "12/12 updated without sim-3", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.replicas == Some(12) && s.updated_replicas == Some(12) && ready(d) == 12
        })
    })
    .await;
    assert_eq!(
        d.status.as_ref().and_then(|s| s.available_replicas),
        Some(12)
    );
    env.rollout_status("deploy/web", "shop");
    let p = placements.get("deployment-web").await.expect("placement");
    let st = p.status.expect("status");
    let gone = st
        .clusters
        .iter()
        .find(|c| c.cluster == "sim-3")
        .expect("sim-3 listed until its copy is gone");
    assert_eq!(
        (gone.replicas, gone.updated_replicas),
        (0, 0),
        "terminating: {gone:?}"
    );

    // sim-3 returns: without rebalanceOnRecovery its share stays zero, so its copy goes.
    env.ctl(&["up", "sim-3"]);
    let sim3: Api<Deployment> = Api::namespaced(env.member("sim-3").await, "shop");
    wait_gone(&sim3, "web").await;
    let p = placements.get("deployment-web").await.expect("placement");
    assert_eq!(dest(&p), after);
    let members = member_replicas(&env, &CLUSTERS).await;
    assert_eq!(members, after, "member copies follow the placement exactly");
    assert_eq!(members.values().sum::<i32>(), 12);
    // The federated status drops sim-3's old pods once its copy is gone.
    wait_for(&fed_web, "web", "12/12 without sim-3's old pods", |d| {
        d.status.as_ref().and_then(|s| s.replicas) == Some(12) && ready(d) == 12
    })
    .await;
    env.rollout_status("deploy/web", "shop");
    let table = env.ok("kubectl", &["get", "deploy", "web", "-n", "shop"]);
    assert!(table.contains("12/12"), "{table}");
}

#[tokio::test]
async fn controller_killed_mid_push_converges_without_duplicates() {
    let env = start();
    let mut controllers = env.controllers(&CONTROLLER_FLAGS);
    let _scheduler = env.scheduler(&[]);
    join_all(&env).await;
    env.apply("app.yaml", &app(&CLUSTERS, 30));
    env.rollout_status("deploy/web", "shop");
    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "shop");
    let fed_web: Api<Deployment> = Api::namespaced(fed.clone(), "shop");

    // Scale and narrow the placement to two clusters, and kill the controllers while they
    // push: sim-3's copy must go only once the others hold the whole 60.
    env.apply("app2.yaml", &app(&["sim-1", "sim-2"], 60));
    wait_for(&placements, "deployment-web", "the new placement", |p| {
        dest(p).values().sum::<i32>() == 60 && !dest(p).contains_key("sim-3")
    })
    .await;
    controllers.kill();
    let mid = member_replicas(&env, &CLUSTERS).await;
    let _controllers = env.controllers(&CONTROLLER_FLAGS);

    let sim3: Api<Deployment> = Api::namespaced(env.member("sim-3").await, "shop");
    wait_gone(&sim3, "web").await;
    let d = wait_for(&fed_web, "web", "60/60 observed", |d| {
        ready(d) == 60
            && d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
    })
    .await;
    assert_eq!(replicas(&d), 60);
    let p = placements.get("deployment-web").await.expect("placement");
    let members = member_replicas(&env, &CLUSTERS).await;
    assert_eq!(
        members,
        dest(&p),
        "members hold exactly their shares (mid-push they held {mid:?})"
    );
    assert_eq!(members.values().sum::<i32>(), 60);
    // One copy per member, all Meridian's: no second object slipped in during the restart.
    for c in CLUSTERS {
        let api: Api<Deployment> = Api::namespaced(env.member(c).await, "shop");
        let all = api.list(&ListParams::default()).await.expect("list");
        assert!(all.items.len() <= 1, "{c}: {:?}", all.items);
    }
}

#[tokio::test]
async fn orphaning_delete_leaves_member_copies() {
    let env = start();
    let _controllers = env.controllers(&CONTROLLER_FLAGS);
    let _scheduler = env.scheduler(&[]);
    join_all(&env).await;
    env.apply("app.yaml", &app(&CLUSTERS, 6));
    env.rollout_status("deploy/web", "shop");
    let fed = env.federation().await;
    let p: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "shop");
    let shares = dest(&p.get("deployment-web").await.expect("placement"));

    env.ok(
        "kubectl",
        &[
            "delete",
            "deploy",
            "web",
            "-n",
            "shop",
            "--cascade=orphan",
            "--timeout=60s",
        ],
    );
    let fed_web: Api<Deployment> = Api::namespaced(fed.clone(), "shop");
    wait_gone(&fed_web, "web").await;
    // The copies stay, with their pods, exactly as they were.
    assert_eq!(member_replicas(&env, &CLUSTERS).await, shares);
    for (c, r) in &shares {
        let api: Api<Deployment> = Api::namespaced(env.member(c).await, "shop");
        wait_for(&api, "web", "still ready", |d| ready(d) == *r).await;
    }
    let missing = env.run("fedctl", &["status", "deploy/web", "-n", "shop"]);
    assert!(!missing.status.success());
}

//! One eviction budget for every kind, as an operator who sets `--eviction-rate` expects: a
//! Deployment and a custom `Rollout` divided as its ResourceInterpreter says both run
//! across three members; one member goes down past the policies' toleration, and with a
//! budget of a single eviction exactly one of the two leaves it. The other keeps its share
//! there, and its Placement says evictions are paused, until the next token.

use std::collections::BTreeMap;
use std::time::Duration;

use fed_api::Placement;
use kube::api::Api;
use meridian_e2e::{Env, ROLLOUT_KIND, eventually};

const NS: &str = "shop";
const CLUSTERS: [&str; 3] = ["sim-1", "sim-2", "sim-3"];

/// What reads the Rollout kind's replicas and pod template.
const INTERPRETER: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ResourceInterpreter
metadata: {name: rollouts}
spec:
  target: {apiVersion: example.com/v1, kind: Rollout}
  replicas: {path: .spec.replicas}
  podTemplate: {path: .spec.template}
"#;

/// A Deployment and a Rollout of 6 replicas, each divided evenly over the three members
/// and moved off one offline for more than a second.
const APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: spread, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  - {apiVersion: example.com/v1, kind: Rollout}
  placement:
    clusterAffinity: {clusterNames: [sim-1, sim-2, sim-3]}
    replicaScheduling: {type: Divided, division: StaticWeight}
    failover: {tolerationSeconds: 1}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: example.com/v1
kind: Rollout
metadata: {name: api, namespace: shop}
spec:
  replicas: 6
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: "nginx:1.27"}]
"#;

/// The Placements of the two objects.
const PLACEMENTS: [&str; 2] = ["deployment-web", "rollout.example.com-api"];

/// Each Placement's `destClusters` as cluster → replicas, and its `Scheduled` message.
async fn decisions(api: &Api<Placement>) -> Vec<(BTreeMap<String, u32>, String)> {
    let mut out = Vec::new();
    for name in PLACEMENTS {
        let Some(p) = api.get_opt(name).await.expect("get placement") else {
            out.push((BTreeMap::new(), String::new()));
            continue;
        };
        let dest = p
            .spec
            .dest_clusters
            .iter()
            .map(|t| (t.cluster.clone(), t.replicas))
            .collect();
        let message = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Scheduled"))
            .map(|c| c.message.clone())
            .unwrap_or_default();
        out.push((dest, message));
    }
    out
}

fn shares(v: &[(&str, u32)]) -> BTreeMap<String, u32> {
    v.iter().map(|(c, r)| ((*c).to_owned(), *r)).collect()
}

#[tokio::test]
async fn workloads_and_divided_custom_objects_share_one_eviction_budget() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--failure-threshold=2",
        "--metrics-bind-address=off",
    ]);
    // One token, and the next an hour away: a single eviction in this test.
    let _scheduler = env.scheduler(&["--eviction-rate=1/h", "--eviction-burst=1"]);
    env.join_serving(&CLUSTERS, "example.com");
    env.ok("kubectl", &["create", "namespace", NS]);
    env.apply("kind.yaml", ROLLOUT_KIND);
    env.apply("interpreter.yaml", INTERPRETER);
    // Every member serves the kind before anything is placed: a cluster that does not
    // yet would be left out, and divided shares stay where they were first placed.
    let fed = env.federation().await;
    let clusters: Api<fed_api::Cluster> = Api::all(fed.clone());
    eventually(
        "every member serving example.com/v1 rollouts",
        Duration::from_secs(60),
        || async {
            clusters
                .list(&Default::default())
                .await
                .expect("list clusters")
                .items
        },
        |cs: &Vec<fed_api::Cluster>| {
            cs.len() == CLUSTERS.len()
                && cs.iter().all(|c| {
                    c.status.as_ref().is_some_and(|s| {
                        s.api_enablements.iter().any(|e| {
                            e.group_version == "example.com/v1"
                                && e.resources.iter().any(|r| r == "rollouts")
                        })
                    })
                })
        },
    )
    .await;
    env.apply_once_served("app.yaml", APP).await;
    let placements: Api<Placement> = Api::namespaced(fed, NS);
    let even = shares(&[("sim-1", 2), ("sim-2", 2), ("sim-3", 2)]);
    eventually(
        "both divided 2/2/2",
        Duration::from_secs(60),
        || decisions(&placements),
        |d| d.iter().all(|(dest, _)| *dest == even),
    )
    .await;

    env.ctl(&["down", "sim-3"]);
    // Past the toleration one of the two takes the only token and leaves sim-3; the
    // other is decided as if evictions were paused, keeps its share there and says so.
    let moved = shares(&[("sim-1", 3), ("sim-2", 3)]);
    let held = |(dest, message): &(BTreeMap<String, u32>, String)| {
        dest.get("sim-3") == Some(&2) && message.contains("evictions paused")
    };
    eventually(
        "one moved off sim-3, the other held there",
        Duration::from_secs(60),
        || decisions(&placements),
        |d| {
            let moves = d.iter().filter(|(dest, _)| *dest == moved).count();
            let holds = d.iter().filter(|d| held(d)).count();
            moves == 1 && holds == 1
        },
    )
    .await;
}

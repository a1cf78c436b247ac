//! Scheduling end to end: fed-scheduler places a federated Deployment over a cluster-sim
//! fleet joined with fedctl, follows scaling, explains what it cannot place, fails over
//! when a member goes down and moves back when it returns.

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, WatchEvent, WatchParams};
use meridian_e2e::Env;

/// Waits on a watch until `pred` holds for the named Placement.
async fn wait_placement(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&fed_api::Placement) -> bool,
) -> fed_api::Placement {
    let api: Api<fed_api::Placement> = Api::namespaced(client.clone(), ns);
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut last = None;
    let mut stream = Box::pin(api.watch(&wp, "0").await.expect("watch placements"));
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev {
            if pred(&p) {
                return p;
            }
            last = Some(p);
        }
    }
    panic!("watch on placement {ns}/{name} ended waiting for {what}; last seen: {last:#?}");
}

/// Waits on a watch until an Event with `reason` about `kind/name` whose message contains
/// `needle` exists.
async fn wait_event(
    client: &kube::Client,
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
    needle: &str,
) -> Event {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut stream = Box::pin(
        api.watch(&WatchParams::default(), "0")
            .await
            .expect("watch events"),
    );
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if let WatchEvent::Added(e) = ev
            && e.involved_object.kind.as_deref() == Some(kind)
            && e.involved_object.name.as_deref() == Some(name)
            && e.reason.as_deref() == Some(reason)
            && e.message.as_deref().is_some_and(|m| m.contains(needle))
        {
            return e;
        }
    }
    panic!("watch on events in {ns} ended before a {reason} event for {kind} {name}");
}

fn dest(p: &fed_api::Placement) -> Vec<(String, u32)> {
    p.spec
        .dest_clusters
        .iter()
        .map(|t| (t.cluster.clone(), t.replicas))
        .collect()
}

fn is(p: &fed_api::Placement, want: &[(&str, u32)]) -> bool {
    dest(p)
        == want
            .iter()
            .map(|(c, r)| (c.to_string(), *r))
            .collect::<Vec<_>>()
}

fn scheduled(p: &fed_api::Placement) -> Option<&fed_api::common::Condition> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
}

const APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity:
      clusterNames: [sim-1, sim-2]
    replicaScheduling:
      type: Divided
      division: StaticWeight
      weights:
      - {clusterNames: [sim-1], weight: 1}
      - {clusterNames: [sim-2], weight: 2}
    failover: {tolerationSeconds: 2, rebalanceOnRecovery: true}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  replicas: 10
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        resources: {requests: {cpu: 100m, memory: 64Mi}}
"#;

#[tokio::test]
async fn places_scales_explains_fails_over_and_recovers() {
    let env = Env::start(&[
        "--clusters=3",
        "--nodes=3",
        "--node-cpu=4",
        "--node-memory=8Gi",
        "--ready-delay=0s",
    ]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--failure-threshold=3",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&["--workers=4"]);
    for c in ["sim-1", "sim-2", "sim-3"] {
        let out = env.ok(
            "fedctl",
            &[
                "join",
                c,
                "--cluster-context",
                c,
                "--region",
                "eu",
                "--wait-seconds",
                "60",
            ],
        );
        assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
    }
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("app.yaml", APP);
    let fed = env.federation().await;

    // Webster with weights 1:2 over 10 replicas: 10/3 = 3.33 -> 3, 20/3 = 6.67 -> 7.
    let p = wait_placement(&fed, "shop", "deployment-web", "3/7", |p| {
        is(p, &[("sim-1", 3), ("sim-2", 7)]) && scheduled(p).is_some()
    })
    .await;
    let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(p.spec.resource.kind, "Deployment");
    assert!(p.spec.resource.uid.is_some());
    let cond = scheduled(&p).expect("Scheduled condition");
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", "Scheduled")
    );
    // "Why not sim-3?" is answered by describe.
    let described = env.ok(
        "kubectl",
        &["describe", "placement", "deployment-web", "-n", "shop"],
    );
    assert!(
        described.contains("sim-3:")
            && described.contains("ClusterAffinity: not in clusterAffinity.clusterNames"),
        "{described}"
    );
    wait_event(
        &fed,
        "shop",
        "Deployment",
        "web",
        "Scheduled",
        "sim-1:3 sim-2:7",
    )
    .await;

    // Scaling: 20/3 = 6.67 -> 7, 40/3 = 13.33 -> 13.
    env.ok(
        "kubectl",
        &["scale", "deployment", "web", "-n", "shop", "--replicas=20"],
    );
    wait_placement(&fed, "shop", "deployment-web", "7/13", |p| {
        is(p, &[("sim-1", 7), ("sim-2", 13)])
    })
    .await;

    // No policy selects this one: unscheduled, and the condition says so.
    env.ok(
        "kubectl",
        &["create", "deployment", "api", "--image=api", "-n", "shop"],
    );
    let api = wait_placement(&fed, "shop", "deployment-api", "NoPolicy", |p| {
        scheduled(p).is_some_and(|c| c.reason == "NoPolicy")
    })
    .await;
    assert!(api.spec.dest_clusters.is_empty());
    assert_eq!(scheduled(&api).map(|c| c.status.as_str()), Some("False"));
    wait_event(
        &fed,
        "shop",
        "Deployment",
        "api",
        "FailedScheduling",
        "no PropagationPolicy",
    )
    .await;

    // sim-2 goes down: within the 2 s toleration its replicas stay, then move to sim-1,
    // the only other cluster the policy allows.
    env.ctl(&["down", "sim-2"]);
    // Spec and status are separate writes: wait for the status that goes with the spec.
    let p = wait_placement(&fed, "shop", "deployment-web", "failover to sim-1", |p| {
        is(p, &[("sim-1", 20)])
            && scheduled(p)
                .is_some_and(|c| c.message.starts_with("all replicas placed in 1 clusters"))
    })
    .await;
    let msg = &scheduled(&p).expect("condition").message;
    assert!(msg.contains("sim-2: ClusterHealth: "), "{msg}");

    // sim-2 returns; rebalanceOnRecovery moves its share back.
    env.ctl(&["up", "sim-2"]);
    wait_placement(&fed, "shop", "deployment-web", "rebalance back", |p| {
        is(p, &[("sim-1", 7), ("sim-2", 13)])
    })
    .await;
}

//! A member HPA's replicas are not fought over: a federated Deployment and a federated HPA
//! targeting it are both propagated; scaling the member's Deployment as its HPA would
//! (`kubectl scale` in the member) stays, later changes of the federated Deployment still
//! arrive, and the federated status counts the member's real replicas. The member copy's
//! own conditions show on its Placement entry.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::Api;
use meridian_e2e::{Env, eventually, wait_for};

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: scaled}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: scaled}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: api}
  - {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, name: api}
  placement:
    clusterAffinity:
      clusterNames: [sim-1]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: scaled}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: "api:1"}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: api, namespace: scaled}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: api}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}
"#;

const WITHIN: Duration = Duration::from_secs(60);

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref()?.replicas
}

fn image(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

#[tokio::test]
async fn replicas_an_hpa_writes_in_a_member_are_left_alone() {
    let env = Env::start(&["--clusters=1", "--nodes=2", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1"], 2).await;
    env.apply("app.yaml", APP);

    let member = env.member("sim-1").await;
    let deployments: Api<Deployment> = Api::namespaced(member.clone(), "scaled");
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(member, "scaled");
    eventually(
        "the HPA copy in sim-1",
        WITHIN,
        || async { hpas.get_opt("api").await.expect("get") },
        Option::is_some,
    )
    .await;
    let d = eventually(
        "the Deployment copy in sim-1 with its share",
        WITHIN,
        || async { deployments.get_opt("api").await.expect("get") },
        |d| d.as_ref().and_then(replicas) == Some(2),
    )
    .await
    .expect("present");
    let rv = d.metadata.resource_version.clone().expect("rv");

    // What the member's HPA controller would do.
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "scale",
            "deploy/api",
            "-n",
            "scaled",
            "--replicas=5",
        ],
    );
    // A later change of the federated Deployment arrives, and the HPA's replicas stay.
    env.ok(
        "kubectl",
        &["set", "image", "deploy/api", "api=api:2", "-n", "scaled"],
    );
    let d = wait_for(&deployments, "api", &rv, "the new image", |d| {
        image(d).as_deref() == Some("api:2")
    })
    .await;
    assert_eq!(
        replicas(&d),
        Some(5),
        "the member's replicas were rewritten"
    );

    // The federated status counts what the member runs, and the member's copy counts as
    // having observed the new spec (its replicas are the HPA's, not a difference).
    let fed: Api<Deployment> = Api::namespaced(env.federation().await, "scaled");
    eventually(
        "the federated status counting 5 replicas of the new generation",
        WITHIN,
        || async { fed.get("api").await.expect("get") },
        |d| {
            d.status.as_ref().is_some_and(|s| {
                s.replicas == Some(5)
                    && s.updated_replicas == Some(5)
                    && s.observed_generation.is_some()
                    && s.observed_generation == d.metadata.generation
            })
        },
    )
    .await;
    env.rollout_status("deploy/api", "scaled");
    let d = deployments.get("api").await.expect("member copy");
    assert_eq!(replicas(&d), Some(5));

    // The member copy's own conditions show on its Placement entry.
    let placements: Api<fed_api::Placement> = Api::namespaced(env.federation().await, "scaled");
    eventually(
        "sim-1's entry showing its copy's Available condition",
        WITHIN,
        || async { placements.get("deployment-api").await.expect("get") },
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.clusters.iter().any(|c| {
                    c.cluster == "sim-1"
                        && c.conditions
                            .iter()
                            .any(|c| c.type_ == "Available" && c.status == "True")
                })
            })
        },
    )
    .await;
}

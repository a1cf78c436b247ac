//! What the members' own controllers report comes back to the federation, end to end with
//! cluster-sim's loops: a federated HPA (Duplicated) over a Divided Deployment shows each
//! member's current and desired replicas on its Placement and their sums in its status; a
//! load forced on one member's HPA (`cluster-sim ctl hpa-desired`) scales that member's
//! Deployment, which Meridian leaves alone and counts; a federated CronJob reports the time
//! its members last scheduled it.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::CronJob;
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
      clusterNames: [sim-1, sim-2]
    replicaScheduling: {type: Divided, division: StaticWeight}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: scaled}
spec:
  replicas: 4
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
  minReplicas: 2
  maxReplicas: 10
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 60}}
"#;

const WITHIN: Duration = Duration::from_secs(60);
const HPA_PLACEMENT: &str = "horizontalpodautoscaler.autoscaling-api";

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref()?.replicas
}

fn image(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

/// Each member's `(currentReplicas, desiredReplicas)` on the HPA's Placement, by cluster.
fn per_member(p: &Option<fed_api::Placement>) -> Vec<(String, Option<i32>, Option<i32>)> {
    p.as_ref()
        .and_then(|p| p.status.as_ref())
        .map(|s| {
            s.clusters
                .iter()
                .map(|c| (c.cluster.clone(), c.current_replicas, c.desired_replicas))
                .collect()
        })
        .unwrap_or_default()
}

fn entries(a: (i32, i32), b: (i32, i32)) -> Vec<(String, Option<i32>, Option<i32>)> {
    vec![
        ("sim-1".into(), Some(a.0), Some(a.1)),
        ("sim-2".into(), Some(b.0), Some(b.1)),
    ]
}

fn sums(h: &HorizontalPodAutoscaler) -> (Option<i32>, i32) {
    h.status
        .as_ref()
        .map_or((None, -1), |s| (s.current_replicas, s.desired_replicas))
}

#[tokio::test]
async fn member_hpas_report_their_replicas_and_scale_their_share() {
    let env = Env::start(&["--clusters=2", "--nodes=2", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1", "sim-2"], 2).await;
    env.apply("app.yaml", APP);

    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "scaled");
    let fed_hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(fed.clone(), "scaled");
    let fed_deployments: Api<Deployment> = Api::namespaced(fed, "scaled");

    // Each member runs its share (2 of 4) and its HPA copy reports it.
    eventually(
        "each member's HPA replicas on the HPA's Placement",
        WITHIN,
        || async { placements.get_opt(HPA_PLACEMENT).await.expect("get") },
        |p| per_member(p) == entries((2, 2), (2, 2)),
    )
    .await;
    eventually(
        "the federated HPA summing the members' replicas",
        WITHIN,
        || async { fed_hpas.get("api").await.expect("get") },
        |h| sums(h) == (Some(4), 4),
    )
    .await;

    // A load on sim-1: its HPA scales its Deployment to 7.
    env.ctl(&["hpa-desired", "sim-1", "scaled/api", "7"]);
    let member: Api<Deployment> = Api::namespaced(env.member("sim-1").await, "scaled");
    eventually(
        "sim-1's Deployment scaled by its HPA",
        WITHIN,
        || async { member.get("api").await.expect("get") },
        |d| replicas(d) == Some(7),
    )
    .await;
    eventually(
        "sim-1's HPA replicas on the Placement",
        WITHIN,
        || async { placements.get_opt(HPA_PLACEMENT).await.expect("get") },
        |p| per_member(p) == entries((7, 7), (2, 2)),
    )
    .await;
    eventually(
        "the federated HPA summing 7 and 2",
        WITHIN,
        || async { fed_hpas.get("api").await.expect("get") },
        |h| sums(h) == (Some(9), 9),
    )
    .await;
    // The federated Deployment counts what the members run.
    eventually(
        "the federated Deployment counting 9 replicas",
        WITHIN,
        || async { fed_deployments.get("api").await.expect("get") },
        |d| d.status.as_ref().is_some_and(|s| s.replicas == Some(9)),
    )
    .await;

    // Meridian does not fight the HPA: a later change of the federated Deployment reaches
    // sim-1 with the HPA's replicas in the very write that brings it.
    let rv = member
        .get("api")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("rv");
    env.ok(
        "kubectl",
        &["set", "image", "deploy/api", "api=api:2", "-n", "scaled"],
    );
    let d = wait_for(&member, "api", &rv, "the new image", |d| {
        image(d).as_deref() == Some("api:2")
    })
    .await;
    assert_eq!(replicas(&d), Some(7), "sim-1's replicas were rewritten");
}

const CRON: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: timed}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: tick, namespace: timed}
spec:
  resourceSelectors:
  - {apiVersion: batch/v1, kind: CronJob, name: tick}
  placement:
    clusterAffinity:
      clusterNames: [sim-1, sim-2]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: tick, namespace: timed}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: tick, image: "busybox"}]
"#;

/// A run can be up to a minute away by nature; then the member reports it and the
/// federation combines it.
const FIRST_RUN_WITHIN: Duration = Duration::from_secs(75);

#[tokio::test]
async fn a_federated_cronjob_reports_its_last_schedule_time() {
    let env = Env::start(&["--clusters=2", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1", "sim-2"], 1).await;
    env.apply("cron.yaml", CRON);

    for member in ["sim-1", "sim-2"] {
        let copies: Api<CronJob> = Api::namespaced(env.member(member).await, "timed");
        eventually(
            &format!("the CronJob copy in {member}"),
            WITHIN,
            || async { copies.get_opt("tick").await.expect("get") },
            Option::is_some,
        )
        .await;
    }
    let fed: Api<CronJob> = Api::namespaced(env.federation().await, "timed");
    let scheduled = eventually(
        "the federated CronJob's lastScheduleTime",
        FIRST_RUN_WITHIN,
        || async { fed.get("tick").await.expect("get") },
        |c| {
            c.status
                .as_ref()
                .is_some_and(|s| s.last_schedule_time.is_some())
        },
    )
    .await;
    // It is a time a member scheduled the CronJob at (or one has moved on since).
    let at = scheduled
        .status
        .and_then(|s| s.last_schedule_time)
        .expect("set")
        .0;
    let mut seen = Vec::new();
    for member in ["sim-1", "sim-2"] {
        let copies: Api<CronJob> = Api::namespaced(env.member(member).await, "timed");
        let copy = copies.get("tick").await.expect("copy");
        seen.push(copy.status.and_then(|s| s.last_schedule_time).map(|t| t.0));
    }
    assert!(
        seen.iter().any(|t| t.is_some_and(|t| t >= at)),
        "{at:?} is later than every member's lastScheduleTime: {seen:?}"
    );
}

//! StatefulSets and Jobs divided end to end: on a fleet of three, a StatefulSet of 3
//! replicas and a Job of parallelism 3 and 6 completions placed by a Divided policy give
//! every member exactly its share (1 replica; parallelism 1 and 2 completions, under the
//! member's own generated selector), and the members' status sums up on the federation:
//! `kubectl rollout status statefulset/db` returns once every member's rollout is done,
//! and `kubectl wait --for=condition=complete job/crunch` once every member's Job is; a
//! Job fails as soon as one member's does.
//!
//! cluster-sim runs no StatefulSet or Job pods yet, so the members' status is written here
//! with each member's client, in one helper ([`report`]).

use std::time::Duration;

use fed_api::Placement;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use meridian_e2e::{Env, eventually};
use serde_json::{Value, json};
use std::future::Future;

const NS: &str = "batch";
const CLUSTERS: [&str; 3] = ["sim-1", "sim-2", "sim-3"];

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: batch}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: divided, namespace: batch}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: StatefulSet, name: db}
  - {apiVersion: batch/v1, kind: Job, name: crunch}
  - {apiVersion: batch/v1, kind: Job, name: flaky}
  placement:
    clusterAffinity:
      clusterNames: [sim-1, sim-2, sim-3]
    replicaScheduling: {type: Divided, division: StaticWeight}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: batch}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: "postgres:16"}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: crunch, namespace: batch}
spec:
  parallelism: 3
  completions: 6
  template:
    spec:
      restartPolicy: Never
      containers: [{name: crunch, image: "busybox:1"}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: flaky, namespace: batch}
spec:
  parallelism: 3
  template:
    spec:
      restartPolicy: Never
      containers: [{name: flaky, image: "busybox:1"}]
"#;

/// The first `Some` of `get` within a minute.
async fn until<T: std::fmt::Debug, Fut: Future<Output = Option<T>>>(
    what: &str,
    get: impl FnMut() -> Fut,
) -> T {
    eventually(what, Duration::from_secs(60), get, Option::is_some)
        .await
        .unwrap_or_else(|| panic!("{what}"))
}

/// Writes the status a member's controller would write for its copy of `kind` `name`
/// (`statefulsets` or `jobs`): the one place that stands in for cluster-sim's loops.
async fn report(env: &Env, cluster: &str, plural: &str, name: &str, status: Value) {
    let member = env.member(cluster).await;
    let (group, kind) = match plural {
        "statefulsets" => ("apps", "StatefulSet"),
        _ => ("batch", "Job"),
    };
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(group, "v1", kind),
        plural,
    );
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(member, NS, &ar);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {kind} {name} in {cluster}: {e}"));
}

/// A member StatefulSet's status with its rollout done (`done`) or under way.
fn stateful_set_status(generation: i64, done: bool) -> Value {
    let update = if done { "db-5d4f" } else { "db-7c9a" };
    json!({"observedGeneration": generation, "replicas": 1, "readyReplicas": 1,
           "currentReplicas": 1, "updatedReplicas": 1, "availableReplicas": 1,
           "currentRevision": "db-5d4f", "updateRevision": update})
}

/// A member Job's status: complete with 2 succeeded pods.
fn job_complete(start: &str, end: &str) -> Value {
    json!({"active": 0, "ready": 0, "succeeded": 2, "failed": 0,
           "startTime": start, "completionTime": end,
           "conditions": [
               {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
               {"type": "Complete", "status": "True", "reason": "CompletionsReached"}]})
}

#[tokio::test]
async fn stateful_sets_and_jobs_are_divided_and_their_status_summed() {
    let env = Env::start(&[
        "--clusters=3",
        "--nodes=2",
        "--node-cpu=8",
        "--node-memory=16Gi",
        "--ready-delay=0s",
    ]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&CLUSTERS, 2).await;
    env.apply("divided.yaml", APP);
    let fed = env.federation().await;

    // One replica of each in every member, parallelism 1 and 2 completions for the Job.
    let placements: Api<Placement> = Api::namespaced(fed.clone(), NS);
    for name in ["statefulset-db", "job-crunch"] {
        until(name, || async {
            let p = placements.get_opt(name).await.ok().flatten()?;
            let dest: Vec<(String, u32)> = p
                .spec
                .dest_clusters
                .iter()
                .map(|t| (t.cluster.clone(), t.replicas))
                .collect();
            (dest.len() == 3 && dest.iter().all(|(_, r)| *r == 1)).then_some(dest)
        })
        .await;
    }
    let fed_jobs: Api<Job> = Api::namespaced(fed.clone(), NS);
    let fed_uid = fed_jobs
        .get("crunch")
        .await
        .expect("federated Job")
        .metadata
        .uid;
    for c in CLUSTERS {
        let member = env.member(c).await;
        let sets: Api<StatefulSet> = Api::namespaced(member.clone(), NS);
        let set = until(&format!("db in {c}"), || async {
            sets.get_opt("db").await.ok().flatten()
        })
        .await;
        let spec = set.spec.expect("spec");
        assert_eq!(spec.replicas, Some(1), "{c}");
        assert_eq!(
            spec.volume_claim_templates.map(|v| v.len()),
            Some(1),
            "{c}: claim templates travel as they are"
        );
        let jobs: Api<Job> = Api::namespaced(member, NS);
        let job = until(&format!("crunch in {c}"), || async {
            jobs.get_opt("crunch").await.ok().flatten()
        })
        .await;
        let spec = job.spec.expect("spec");
        assert_eq!(
            (spec.parallelism, spec.completions),
            (Some(1), Some(2)),
            "{c}"
        );
        // The member's own selector, on its own Job's uid: not the federation's.
        let selector = spec
            .selector
            .and_then(|s| s.match_labels)
            .and_then(|l| l.get("batch.kubernetes.io/controller-uid").cloned());
        assert_eq!(selector, job.metadata.uid, "{c}");
        assert_ne!(selector, fed_uid, "{c}");
    }

    // StatefulSet: rolled out in two members, still rolling in the third.
    let sets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        fed.clone(),
        NS,
        &fed_api::workload::WorkloadKind::StatefulSet.api_resource(),
    );
    for (c, done) in [("sim-1", true), ("sim-2", true), ("sim-3", false)] {
        report(&env, c, "statefulsets", "db", stateful_set_status(1, done)).await;
    }
    let rolling = until("readyReplicas 3", || async {
        let s = sets.get("db").await.ok()?.data["status"].clone();
        (s["readyReplicas"] == 3 && s["observedGeneration"] == 1).then_some(s)
    })
    .await;
    assert_ne!(
        rolling["currentRevision"], rolling["updateRevision"],
        "{rolling}"
    );
    report(
        &env,
        "sim-3",
        "statefulsets",
        "db",
        stateful_set_status(1, true),
    )
    .await;
    env.rollout_status("statefulset/db", NS);
    let done = sets.get("db").await.expect("db").data["status"].clone();
    assert_eq!(done["currentRevision"], done["updateRevision"], "{done}");
    assert_eq!(
        (
            &done["replicas"],
            &done["currentReplicas"],
            &done["availableReplicas"]
        ),
        (&json!(3), &json!(3), &json!(3)),
        "{done}"
    );

    // Job: complete in two members only, then in the third.
    report(
        &env,
        "sim-1",
        "jobs",
        "crunch",
        job_complete("2026-11-27T10:00:02Z", "2026-11-27T10:01:00Z"),
    )
    .await;
    report(
        &env,
        "sim-2",
        "jobs",
        "crunch",
        job_complete("2026-11-27T10:00:01Z", "2026-11-27T10:03:00Z"),
    )
    .await;
    report(
        &env,
        "sim-3",
        "jobs",
        "crunch",
        json!({"active": 1, "ready": 1, "succeeded": 1, "startTime": "2026-11-27T10:00:03Z"}),
    )
    .await;
    let partial = until("succeeded 5", || async {
        let j = fed_jobs.get("crunch").await.ok()?;
        let s = j.status?;
        (s.succeeded == Some(5)).then_some(s)
    })
    .await;
    assert_eq!(partial.active, Some(1));
    assert!(partial.conditions.unwrap_or_default().is_empty());
    assert_eq!(
        partial.start_time.map(|t| t.0.to_string()),
        Some("2026-11-27T10:00:01Z".to_string())
    );
    report(
        &env,
        "sim-3",
        "jobs",
        "crunch",
        job_complete("2026-11-27T10:00:03Z", "2026-11-27T10:02:00Z"),
    )
    .await;
    env.ok(
        "kubectl",
        &[
            "wait",
            "--for=condition=complete",
            "job/crunch",
            "-n",
            NS,
            "--timeout=60s",
        ],
    );
    let s = fed_jobs
        .get("crunch")
        .await
        .expect("crunch")
        .status
        .expect("status");
    assert_eq!((s.succeeded, s.active), (Some(6), Some(0)));
    assert_eq!(
        s.completion_time.map(|t| t.0.to_string()),
        Some("2026-11-27T10:03:00Z".to_string())
    );

    // A Job without completions keeps none in its members; one member's failure fails
    // the federated Job at once, naming that member.
    for c in CLUSTERS {
        let jobs: Api<Job> = Api::namespaced(env.member(c).await, NS);
        let job = until(&format!("flaky in {c}"), || async {
            jobs.get_opt("flaky").await.ok().flatten()
        })
        .await;
        let spec = job.spec.expect("spec");
        assert_eq!((spec.parallelism, spec.completions), (Some(1), None), "{c}");
    }
    report(
        &env,
        "sim-2",
        "jobs",
        "flaky",
        json!({"active": 0, "failed": 7, "startTime": "2026-11-27T10:00:00Z",
               "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                               "message": "Job has reached the specified backoff limit"}]}),
    )
    .await;
    env.ok(
        "kubectl",
        &[
            "wait",
            "--for=condition=failed",
            "job/flaky",
            "-n",
            NS,
            "--timeout=60s",
        ],
    );
    let failed = fed_jobs
        .get("flaky")
        .await
        .expect("flaky")
        .status
        .expect("status");
    let condition = failed
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .expect("Failed condition");
    assert_eq!(condition.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(
        condition
            .message
            .as_deref()
            .is_some_and(|m| m.contains("sim-2")),
        "{condition:?}"
    );
    assert_eq!(failed.failed, Some(7));

    // The members' generated and defaulted fields are never fought over: every member
    // is in sync (a rewrite of a Job's selector or completions would be refused, and
    // show as SyncFailed), no member Job was rewritten, and each entry counts its share.
    for name in ["job-crunch", "statefulset-db"] {
        let p = until(&format!("{name} in sync"), || async {
            let p = placements.get(name).await.ok()?;
            let s = p.status.as_ref()?;
            let propagated = s.conditions.iter().find(|c| c.type_ == "Propagated")?;
            (propagated.status == "True").then(|| s.clone())
        })
        .await;
        assert_eq!(p.clusters.len(), 3, "{name}: {p:?}");
        if name == "statefulset-db" {
            assert!(
                p.clusters
                    .iter()
                    .all(|e| e.replicas == 1 && e.ready_replicas == 1),
                "{p:?}"
            );
        }
    }
    for c in CLUSTERS {
        let jobs: Api<Job> = Api::namespaced(env.member(c).await, NS);
        let job = jobs.get("crunch").await.expect("member Job");
        assert_eq!(job.metadata.generation, Some(1), "{c}");
    }
}

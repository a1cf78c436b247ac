//! StatefulSets and Jobs divided end to end, on members whose own (simulated) controllers
//! run them: on a fleet of three, a StatefulSet of 3 replicas and a Job of parallelism 3
//! and 6 completions placed by a Divided policy give every member exactly its share (1
//! replica; parallelism 1 and 2 completions, under the member's own generated selector),
//! and the members' status sums up on the federation: `kubectl rollout status
//! statefulset/db` returns once every member's set has rolled out, again after `kubectl set
//! image` on the federation rolls the members' pods, `kubectl wait
//! --for=condition=complete job/crunch` once every member's Job has completed, and a Job
//! fails as soon as one member's does (`cluster-sim ctl job-fail` makes its pods fail).

use std::time::Duration;

use fed_api::Placement;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use meridian_e2e::{Env, eventually};
use serde_json::json;
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
"#;

/// Applied once sim-2 is set to fail its pods: each member runs one pod at a time (no
/// completions: the first success completes a member's copy); sim-2's copy fails on its
/// second failed pod.
const FLAKY: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: flaky, namespace: batch}
spec:
  parallelism: 3
  backoffLimit: 1
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

#[tokio::test]
async fn stateful_sets_and_jobs_are_divided_and_their_status_summed() {
    let env = Env::start(&[
        "--clusters=3",
        "--nodes=2",
        "--node-cpu=8",
        "--node-memory=16Gi",
        "--ready-delay=100ms",
        "--job-pod-duration=300ms",
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

    // StatefulSet: the members' own controllers roll out their replica; the federation's
    // rollout status returns once all three have, with the members' counts summed.
    let sets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        fed.clone(),
        NS,
        &fed_api::workload::WorkloadKind::StatefulSet.api_resource(),
    );
    env.rollout_status("statefulset/db", NS);
    let summed = |generation: i64| {
        let sets = sets.clone();
        async move {
            until(&format!("db's sums at generation {generation}"), || async {
                let s = sets.get("db").await.ok()?.data["status"].clone();
                (s["observedGeneration"] == generation
                    && s["readyReplicas"] == 3
                    && s["currentReplicas"] == 3
                    && s["availableReplicas"] == 3)
                    .then_some(s)
            })
            .await
        }
    };
    let done = summed(1).await;
    assert_eq!(done["replicas"], json!(3), "{done}");
    assert_eq!(done["currentRevision"], done["updateRevision"], "{done}");

    // A new image on the federation rolls every member's pod; rollout status waits for it.
    env.ok(
        "kubectl",
        &["set", "image", "statefulset/db", "db=postgres:17", "-n", NS],
    );
    env.rollout_status("statefulset/db", NS);
    let rolled = summed(2).await;
    assert_eq!(
        rolled["currentRevision"], rolled["updateRevision"],
        "{rolled}"
    );
    for c in CLUSTERS {
        let images = env.ok(
            "kubectl",
            &[
                "--context",
                c,
                "get",
                "pods",
                "-n",
                NS,
                "-l",
                "app=db",
                "-o",
                "jsonpath={.items[*].metadata.name} {.items[*].spec.containers[0].image}",
            ],
        );
        assert_eq!(images, "db-0 postgres:17", "{c}");
    }

    // Job: each member's copy runs its 2 completions; the federation completes once all do.
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
    // The latest member completion is the federation's.
    let mut ends = Vec::new();
    for c in CLUSTERS {
        let jobs: Api<Job> = Api::namespaced(env.member(c).await, NS);
        let member = jobs.get("crunch").await.expect("member Job");
        let st = member.status.expect("member status");
        assert_eq!(st.succeeded, Some(2), "{c}");
        ends.push(st.completion_time.expect("member completionTime").0);
    }
    assert_eq!(s.completion_time.map(|t| t.0), ends.into_iter().max());

    // A Job without completions keeps none in its members; one member's failure fails
    // the federated Job, naming that member.
    env.ctl(&["job-fail", "sim-2", "batch/flaky"]);
    env.apply("flaky.yaml", FLAKY);
    for c in CLUSTERS {
        let jobs: Api<Job> = Api::namespaced(env.member(c).await, NS);
        let job = until(&format!("flaky in {c}"), || async {
            jobs.get_opt("flaky").await.ok().flatten()
        })
        .await;
        let spec = job.spec.expect("spec");
        assert_eq!((spec.parallelism, spec.completions), (Some(1), None), "{c}");
    }
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
        .clone()
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
    // sim-2's two failed pods (backoffLimit 1); the others' pods succeeded.
    assert_eq!(failed.failed, Some(2), "{failed:?}");

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

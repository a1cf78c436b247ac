//! End-to-end: cluster-sim runs StatefulSets, DaemonSets and Jobs as a real cluster would,
//! as kubectl sees it: `kubectl rollout status` finishes for a new StatefulSet and
//! DaemonSet and again after a template change, `kubectl wait --for=condition=complete`
//! for a Job, and `--for=condition=failed` for a Job whose pods `cluster-sim ctl job-fail`
//! makes fail.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use meridian_e2e::Env;

const NAMESPACE: &str = "work";

const MANIFEST: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: work}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: main, image: "postgres:17.2"}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: work}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: main, image: "fluent/fluent-bit:3.2"}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: work}
spec:
  completions: 3
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: "busybox:1.36"}]
"#;

const DOOMED: &str = r#"apiVersion: batch/v1
kind: Job
metadata: {name: doomed, namespace: work}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: "busybox:1.36"}]
"#;

#[test]
fn kubectl_waits_for_simulated_statefulsets_daemonsets_and_jobs() {
    let env = Env::start(&[
        "--clusters=1",
        "--nodes=2",
        "--ready-delay=200ms",
        "--job-pod-duration=500ms",
    ]);
    let kubectl = |args: &[&str]| {
        let mut all = vec!["--context", "sim-1"];
        all.extend_from_slice(args);
        env.ok("kubectl", &all)
    };
    let apply = |file: &str, text: &str| {
        let path = env.dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        kubectl(&["apply", "-f", path.to_str().unwrap()])
    };
    let rollout = |target: &str| {
        kubectl(&[
            "rollout",
            "status",
            target,
            "-n",
            NAMESPACE,
            "--timeout=120s",
        ])
    };
    let get = |what: &str, jsonpath: &str| {
        kubectl(&[
            "get",
            what,
            "-n",
            NAMESPACE,
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])
    };

    kubectl(&["create", "namespace", NAMESPACE]);
    apply("workloads.yaml", MANIFEST);
    let sts = rollout("statefulset/db");
    // kubectl's words for a set with a (defaulted) partition, or without one.
    assert!(
        sts.contains("3 new pods have been updated") || sts.contains("3 pods at revision"),
        "{sts}"
    );
    let ds = rollout("daemonset/agent");
    assert!(ds.contains("successfully rolled out"), "{ds}");
    kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/migrate",
        "-n",
        NAMESPACE,
        "--timeout=120s",
    ]);

    assert_eq!(
        get(
            "pods",
            "{.items[?(@.metadata.labels.app==\"db\")].metadata.name}"
        ),
        "db-0 db-1 db-2"
    );
    assert_eq!(
        get("pvc", "{.items[*].metadata.name} {.items[*].status.phase}"),
        "data-db-0 data-db-1 data-db-2 Bound Bound Bound"
    );
    let nodes: Vec<String> = get(
        "pods",
        "{.items[?(@.metadata.labels.app==\"agent\")].spec.nodeName}",
    )
    .split(' ')
    .map(String::from)
    .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert_ne!(nodes[0], nodes[1], "one pod per node");
    assert_eq!(
        get(
            "job/migrate",
            "{.status.succeeded} {.status.active} {.status.conditions[*].type}"
        ),
        "3 0 SuccessCriteriaMet Complete"
    );

    // Template changes roll both sets.
    kubectl(&[
        "set",
        "image",
        "statefulset/db",
        "main=postgres:17.3",
        "-n",
        NAMESPACE,
    ]);
    kubectl(&[
        "set",
        "image",
        "daemonset/agent",
        "main=fluent/fluent-bit:3.3",
        "-n",
        NAMESPACE,
    ]);
    rollout("statefulset/db");
    rollout("daemonset/agent");
    assert_eq!(
        get(
            "pods",
            "{.items[?(@.metadata.labels.app==\"db\")].spec.containers[0].image}"
        ),
        "postgres:17.3 postgres:17.3 postgres:17.3"
    );
    let revisions = get(
        "statefulset/db",
        "{.status.currentRevision} {.status.updateRevision}",
    );
    let (current, update) = revisions.split_once(' ').unwrap();
    assert_eq!(current, update);

    // A Job whose pods fail reaches its backoff limit.
    env.ctl(&["job-fail", "sim-1", "work/doomed"]);
    apply("doomed.yaml", DOOMED);
    kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/doomed",
        "-n",
        NAMESPACE,
        "--timeout=120s",
    ]);
    assert_eq!(
        get(
            "job/doomed",
            "{.status.failed} {.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "2 BackoffLimitExceeded"
    );
}

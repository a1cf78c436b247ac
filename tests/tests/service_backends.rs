//! A federated Service goes where the pods it selects run, whatever kind runs them: on a
//! fleet of three, a headless Service in front of a federated StatefulSet is pushed to
//! exactly the StatefulSet's clusters (headless there too) and follows when the
//! StatefulSet's policy moves it; a Service in front of a DaemonSet (copied whole, its
//! Placement lists clusters with no replicas) is pushed to the DaemonSet's clusters only,
//! and follows it too. A Service in front of a custom kind's objects goes where they are
//! copied once a ResourceInterpreter names the kind's pod template, and nowhere without.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use fed_api::Placement;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use meridian_e2e::{Env, ROLLOUT_KIND, eventually};

const NS: &str = "data";
const CLUSTERS: [&str; 3] = ["sim-1", "sim-2", "sim-3"];

/// The StatefulSet's policy, placing it in `clusters`.
fn db_policy(clusters: &str) -> String {
    format!(
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {{name: db, namespace: data}}
spec:
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: StatefulSet, name: db}}
  placement:
    clusterAffinity:
      clusterNames: [{clusters}]
"#
    )
}

/// The DaemonSet's policy, copying it to `clusters`.
fn agent_policy(clusters: &str) -> String {
    format!(
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {{name: agent, namespace: data}}
spec:
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: DaemonSet, name: agent}}
  placement:
    clusterAffinity:
      clusterNames: [{clusters}]
"#
    )
}

const APP: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: data}
spec:
  replicas: 1
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: "postgres:16", ports: [{containerPort: 5432}]}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: data}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{name: pg, port: 5432}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: data}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: "node-exporter:1", ports: [{containerPort: 9100}]}]
---
apiVersion: v1
kind: Service
metadata: {name: agent, namespace: data}
spec:
  selector: {app: agent}
  ports: [{name: metrics, port: 9100}]
"#;

/// The first `Some` of `get` within ninety seconds.
async fn until<T: std::fmt::Debug, Fut: Future<Output = Option<T>>>(
    what: &str,
    get: impl FnMut() -> Fut,
) -> T {
    eventually(what, Duration::from_secs(90), get, Option::is_some)
        .await
        .unwrap_or_else(|| panic!("{what}"))
}

fn set(clusters: &[&str]) -> BTreeSet<String> {
    clusters.iter().map(|c| c.to_string()).collect()
}

/// The clusters a Placement lists.
async fn dest(placements: &Api<Placement>, name: &str) -> Option<BTreeSet<String>> {
    let p = placements.get_opt(name).await.ok().flatten()?;
    Some(
        p.spec
            .dest_clusters
            .iter()
            .map(|t| t.cluster.clone())
            .collect(),
    )
}

/// The members holding Meridian's copy of Service `name`, with its `clusterIP`.
async fn copies(env: &Env, name: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for c in CLUSTERS {
        let svcs: Api<Service> = Api::namespaced(env.member(c).await, NS);
        if let Some(s) = svcs.get_opt(name).await.expect("member Service") {
            out.push((c.to_string(), s.spec.and_then(|s| s.cluster_ip)));
        }
    }
    out
}

/// Waits until the Service `name`'s Placement lists exactly `want` and the members
/// holding a copy are exactly those; returns each copy's `clusterIP`.
async fn served_in(
    env: &Env,
    placements: &Api<Placement>,
    name: &str,
    want: &[&str],
) -> Vec<Option<String>> {
    let want_set = set(want);
    until(&format!("Service {name} in exactly {want:?}"), || async {
        if dest(placements, &format!("service-{name}")).await? != want_set {
            return None;
        }
        let held = copies(env, name).await;
        let clusters: BTreeSet<String> = held.iter().map(|(c, _)| c.clone()).collect();
        (clusters == want_set).then(|| held.into_iter().map(|(_, ip)| ip).collect())
    })
    .await
}

#[tokio::test]
async fn services_follow_stateful_sets_and_daemon_sets() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&CLUSTERS, 1).await;
    env.ok("kubectl", &["create", "namespace", NS]);
    env.apply("db-policy.yaml", &db_policy("sim-1, sim-2"));
    env.apply("agent-policy.yaml", &agent_policy("sim-3"));
    env.apply("app.yaml", APP);
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), NS);

    // The StatefulSet runs in sim-1 and sim-2: its headless Service is there, headless,
    // and nowhere else.
    until("statefulset-db in sim-1 and sim-2", || async {
        (dest(&placements, "statefulset-db").await? == set(&["sim-1", "sim-2"])).then_some(())
    })
    .await;
    let ips = served_in(&env, &placements, "db", &["sim-1", "sim-2"]).await;
    assert!(
        ips.iter().all(|ip| ip.as_deref() == Some("None")),
        "headless in every member: {ips:?}"
    );

    // The DaemonSet is copied to sim-3 only, and so is the Service selecting its pods.
    until("daemonset.apps-agent in sim-3", || async {
        (dest(&placements, "daemonset.apps-agent").await? == set(&["sim-3"])).then_some(())
    })
    .await;
    served_in(&env, &placements, "agent", &["sim-3"]).await;

    // The StatefulSet moves to sim-2 and sim-3: its Service follows, and leaves sim-1.
    env.apply("db-policy.yaml", &db_policy("sim-2, sim-3"));
    until("statefulset-db in sim-2 and sim-3", || async {
        (dest(&placements, "statefulset-db").await? == set(&["sim-2", "sim-3"])).then_some(())
    })
    .await;
    let ips = served_in(&env, &placements, "db", &["sim-2", "sim-3"]).await;
    assert!(
        ips.iter().all(|ip| ip.as_deref() == Some("None")),
        "headless in every member: {ips:?}"
    );
    // The DaemonSet's Service did not move with it.
    served_in(&env, &placements, "agent", &["sim-3"]).await;

    // Copied to sim-1 as well, the DaemonSet takes its Service along.
    env.apply("agent-policy.yaml", &agent_policy("sim-1, sim-3"));
    served_in(&env, &placements, "agent", &["sim-1", "sim-3"]).await;
}

/// A custom kind, defined in the federation and propagated to every member.
/// A Rollout copied to sim-2, and a Service selecting its pods.
const ROLLOUT: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: rollouts, namespace: data}
spec:
  resourceSelectors:
  - {apiVersion: example.com/v1, kind: Rollout}
  placement:
    clusterAffinity: {clusterNames: [sim-2]}
---
apiVersion: example.com/v1
kind: Rollout
metadata: {name: web, namespace: data}
spec:
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: data}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80}]
"#;

/// Where the Rollout kind keeps its pod template.
const ROLLOUT_INTERPRETER: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ResourceInterpreter
metadata: {name: rollouts}
spec:
  target: {apiVersion: example.com/v1, kind: Rollout}
  podTemplate: {path: .spec.template}
"#;

#[tokio::test]
async fn services_follow_custom_kinds_whose_interpreter_names_a_pod_template() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_serving(&CLUSTERS, "example.com");
    env.ok("kubectl", &["create", "namespace", NS]);
    env.apply("rollout-kind.yaml", ROLLOUT_KIND);
    env.apply_once_served("rollout.yaml", ROLLOUT).await;
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), NS);
    until("the Rollout copied to sim-2", || async {
        (dest(&placements, "rollout.example.com-web").await? == set(&["sim-2"])).then_some(())
    })
    .await;
    // No interpreter names its template yet: the Service has no backends.
    served_in(&env, &placements, "web", &[]).await;

    env.apply("rollout-interpreter.yaml", ROLLOUT_INTERPRETER);
    served_in(&env, &placements, "web", &["sim-2"]).await;
}

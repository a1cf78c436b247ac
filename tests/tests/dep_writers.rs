//! One writer per member object: a ConfigMap a policy copies to sim-1 and a Deployment in
//! sim-2 references is written by the copy path alone, to both members (its Placement lists
//! sim-2 too); neither path deletes what the other wants: sim-2's copy follows a change
//! without ever being deleted, and the policy's copies in sim-1 survive the removal of a
//! workload there (which collects unreferenced dependency copies). When the policy goes, the
//! copies a workload uses stay and the workload path takes them over. Removed at the same
//! time as its workload, whichever path held it, a shared object leaves no copy anywhere.

use std::time::Duration;

use futures::TryStreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, WatchEvent, WatchParams};
use meridian_e2e::{Env, eventually};
use serde_json::json;

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: both}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: config, namespace: both}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap, name: settings}
  - {apiVersion: v1, kind: ConfigMap, name: lonely}
  placement:
    clusterAffinity:
      clusterNames: [sim-1]
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: both}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: api}
  placement:
    clusterAffinity:
      clusterNames: [sim-2]
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: other, namespace: both}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: other}
  placement:
    clusterAffinity:
      clusterNames: [sim-1]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: both}
data: {mode: fast}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: lonely, namespace: both}
data: {mode: idle}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: both}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: "api:1"
        envFrom: [{configMapRef: {name: settings}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: other, namespace: both}
spec:
  replicas: 1
  selector: {matchLabels: {app: other}}
  template:
    metadata: {labels: {app: other}}
    spec:
      containers: [{name: other, image: "other:1"}]
"#;

/// Two more shared ConfigMaps, each selected by a policy for sim-1 and used by a Deployment
/// in sim-2: `handed` loses its policy and its workload at once, `doomed` is deleted with
/// its workload.
const PAIRS: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: pairs, namespace: both}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap, name: handed}
  - {apiVersion: v1, kind: ConfigMap, name: doomed}
  placement:
    clusterAffinity:
      clusterNames: [sim-1]
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: users, namespace: both}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: hands}
  - {apiVersion: apps/v1, kind: Deployment, name: dooms}
  placement:
    clusterAffinity:
      clusterNames: [sim-2]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: handed, namespace: both}
data: {mode: shared}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: doomed, namespace: both}
data: {mode: shared}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hands, namespace: both}
spec:
  replicas: 1
  selector: {matchLabels: {app: hands}}
  template:
    metadata: {labels: {app: hands}}
    spec:
      containers:
      - {name: hands, image: "hands:1", envFrom: [{configMapRef: {name: handed}}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: dooms, namespace: both}
spec:
  replicas: 1
  selector: {matchLabels: {app: dooms}}
  template:
    metadata: {labels: {app: dooms}}
    spec:
      containers:
      - {name: dooms, image: "dooms:1", envFrom: [{configMapRef: {name: doomed}}]}
"#;

const WITHIN: Duration = Duration::from_secs(60);

fn mode(c: &ConfigMap) -> Option<&str> {
    c.data.as_ref()?.get("mode").map(String::as_str)
}

/// Watches `name` from `rv` until `pred` holds, failing if it is deleted first.
async fn changed_in_place(
    api: &Api<ConfigMap>,
    name: &str,
    rv: &str,
    pred: impl Fn(&ConfigMap) -> bool,
) {
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = Box::pin(api.watch(&wp, rv).await.expect("watch"));
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("{name}: no change within {WITHIN:?}"))
            .expect("watch event");
        match ev {
            Some(WatchEvent::Added(c) | WatchEvent::Modified(c)) if pred(&c) => return,
            Some(WatchEvent::Deleted(_)) => panic!("{name} was deleted"),
            Some(_) => {}
            None => panic!("watch on {name} ended"),
        }
    }
}

async fn set_mode(fed: &Api<ConfigMap>, name: &str, value: &str) {
    fed.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": value}})),
    )
    .await
    .expect("patch");
}

#[tokio::test]
async fn an_object_both_a_policy_and_a_workload_need_has_one_writer() {
    let env = Env::start(&["--clusters=2", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1", "sim-2"], 1).await;
    env.apply("app.yaml", APP);

    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "both");
    let fed_maps: Api<ConfigMap> = Api::namespaced(fed.clone(), "both");
    let sim1: Api<ConfigMap> = Api::namespaced(env.member("sim-1").await, "both");
    let sim2: Api<ConfigMap> = Api::namespaced(env.member("sim-2").await, "both");

    // The copy path writes `settings` where the policy places it and where the workload
    // that references it runs.
    eventually(
        "the ConfigMap's Placement: sim-1 (the policy's) and sim-2 (the workload's), in sync",
        WITHIN,
        || async { placements.get_opt("configmap-settings").await.expect("get") },
        |p| {
            p.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| {
                s.clusters
                    .iter()
                    .map(|c| c.cluster.as_str())
                    .eq(["sim-1", "sim-2"])
                    && s.clusters.iter().all(|c| c.error.is_empty())
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Propagated" && c.status == "True")
            })
        },
    )
    .await;
    for (member, api) in [("sim-1", &sim1), ("sim-2", &sim2)] {
        eventually(
            &format!("settings in {member}"),
            WITHIN,
            || async { api.get_opt("settings").await.expect("get") },
            |c| c.as_ref().and_then(mode) == Some("fast"),
        )
        .await;
    }

    // A change reaches sim-2's copy in place: no path deletes it meanwhile.
    let rv = sim2
        .get("settings")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("rv");
    set_mode(&fed_maps, "settings", "slow").await;
    changed_in_place(&sim2, "settings", &rv, |c| mode(c) == Some("slow")).await;

    // A workload leaving sim-1 collects the dependency copies no workload there uses; the
    // policy's copies are not the workload path's to collect. (`lonely` has a pass and a
    // Placement of its own: nothing above waited for its copy.)
    eventually(
        "lonely in sim-1",
        WITHIN,
        || async { sim1.get_opt("lonely").await.expect("get") },
        |c| c.as_ref().and_then(mode) == Some("idle"),
    )
    .await;
    let rvs = (
        sim1.get("lonely")
            .await
            .expect("lonely")
            .metadata
            .resource_version
            .expect("rv"),
        sim1.get("settings")
            .await
            .expect("settings")
            .metadata
            .resource_version
            .expect("rv"),
    );
    let fed_deployments: Api<Deployment> = Api::namespaced(fed, "both");
    fed_deployments
        .delete("other", &DeleteParams::default())
        .await
        .expect("delete");
    let sim1_deployments: Api<Deployment> = Api::namespaced(env.member("sim-1").await, "both");
    eventually(
        "other's copy gone from sim-1",
        WITHIN,
        || async { sim1_deployments.get_opt("other").await.expect("get") },
        Option::is_none,
    )
    .await;
    eventually(
        "the federated Deployment gone",
        WITHIN,
        || async { fed_deployments.get_opt("other").await.expect("get") },
        Option::is_none,
    )
    .await;
    set_mode(&fed_maps, "lonely", "busy").await;
    set_mode(&fed_maps, "settings", "steady").await;
    changed_in_place(&sim1, "lonely", &rvs.0, |c| mode(c) == Some("busy")).await;
    changed_in_place(&sim1, "settings", &rvs.1, |c| mode(c) == Some("steady")).await;

    // The policy goes: its copies go from sim-1, where no workload uses them, while sim-2's,
    // which the workload there uses, stays and is the workload path's from now on.
    let rv = sim2
        .get("settings")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("rv");
    env.ok(
        "kubectl",
        &["delete", "propagationpolicy", "config", "-n", "both"],
    );
    for name in ["settings", "lonely"] {
        eventually(
            &format!("{name} gone from sim-1"),
            WITHIN,
            || async { sim1.get_opt(name).await.expect("get") },
            |c| c.is_none(),
        )
        .await;
    }
    set_mode(&fed_maps, "settings", "handed over").await;
    changed_in_place(&sim2, "settings", &rv, |c| mode(c) == Some("handed over")).await;

    // A shared object whose policy and workload go at once is handed to the workload path
    // with no user left: collected all the same. One deleted with its workload goes from
    // every member, the workload's too.
    env.apply("pairs.yaml", PAIRS);
    for (member, api) in [("sim-1", &sim1), ("sim-2", &sim2)] {
        for name in ["handed", "doomed"] {
            eventually(
                &format!("{name} in {member}"),
                WITHIN,
                || async { api.get_opt(name).await.expect("get") },
                |c| c.as_ref().and_then(mode) == Some("shared"),
            )
            .await;
        }
    }
    env.ok(
        "kubectl",
        &[
            "delete",
            "propagationpolicy/pairs",
            "deployment/hands",
            "configmap/doomed",
            "deployment/dooms",
            "-n",
            "both",
        ],
    );
    for (member, api) in [("sim-1", &sim1), ("sim-2", &sim2)] {
        for name in ["handed", "doomed"] {
            eventually(
                &format!("{name} gone from {member}"),
                WITHIN,
                || async { api.get_opt(name).await.expect("get") },
                Option::is_none,
            )
            .await;
        }
    }
}

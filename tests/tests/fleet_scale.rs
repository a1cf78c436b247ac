//! Fan-out to a large fleet: 200 API-only member clusters (one cluster-sim process), joined
//! as `fedctl join` would join them, and one Duplicated Deployment placed on all of them.
//! Every member must end up holding exactly one copy, with the federated spec and the
//! labels that name the federated object as its owner; a change is followed by every member,
//! still one copy each, and deleting the federated Deployment removes every copy. This is
//! the scaled-down, always-run form of the 1,000-cluster `fleet_bench` runs.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};
use fed_api::{Cluster, Placement};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::Env;
use serde_json::{Value, json};

const CLUSTERS: usize = 200;
const WITHIN: Duration = Duration::from_secs(240);

/// Registers every simulated cluster in the federation: its token as a Secret and a
/// Cluster pointing at it, as `fedctl join` leaves them.
async fn register(env: &Env, fed: &kube::Client) -> Vec<String> {
    let sim: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(&env.sim_kubeconfig).expect("sim kubeconfig"),
    )
    .expect("kubeconfig yaml");
    let secrets: Api<Secret> = Api::namespaced(fed.clone(), "meridian-system");
    let clusters: Api<Cluster> = Api::all(fed.clone());
    let mut names = Vec::new();
    let entries = sim["clusters"].as_array().expect("clusters");
    for (i, c) in entries.iter().enumerate() {
        let name = c["name"].as_str().expect("name").to_string();
        let token = sim["users"][i]["user"]["token"].as_str().expect("token");
        let secret = json!({"metadata": {"name": format!("{name}-credentials")},
            "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)}});
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(secret).expect("secret"),
            )
            .await
            .expect("secret");
        let cluster = json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"apiEndpoint": c["cluster"]["server"],
                     "caBundle": c["cluster"]["certificate-authority-data"],
                     "secretRef": {"namespace": "meridian-system", "name": format!("{name}-credentials")}}
        });
        clusters
            .create(
                &PostParams::default(),
                &serde_json::from_value(cluster).expect("cluster"),
            )
            .await
            .expect("cluster");
        names.push(name);
    }
    names
}

/// Waits until every Cluster reports Ready.
async fn all_ready(fed: &kube::Client, count: usize) {
    let api: Api<Cluster> = Api::all(fed.clone());
    let mut stream = Box::pin(
        api.watch(&WatchParams::default(), "0")
            .await
            .expect("watch"),
    );
    let mut ready = std::collections::HashSet::new();
    let wait = async {
        while ready.len() < count {
            let ev = stream.next().await.expect("the Cluster watch ended");
            if let Ok(WatchEvent::Added(c) | WatchEvent::Modified(c)) = ev
                && c.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|k| k.type_ == "Ready" && k.status == "True")
                })
            {
                ready.insert(c.metadata.name.clone().unwrap_or_default());
            }
        }
    };
    if tokio::time::timeout(WITHIN, wait).await.is_err() {
        panic!(
            "{} of {count} clusters Ready within {WITHIN:?}",
            ready.len()
        );
    }
}

/// What a member's copy of a Deployment holds of what this test checks.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    name: String,
    replicas: i32,
    image: String,
    /// The `app.kubernetes.io/managed-by` label.
    managed_by: Option<String>,
    /// The `federation.meridian.dev/owner-uid` label: the federated object's UID.
    owner_uid: Option<String>,
}

/// Each member's copies of Deployments in `shop`.
async fn copies(env: &Env, names: &[String]) -> BTreeMap<String, Vec<Held>> {
    let lists = futures::stream::iter(names.iter().cloned())
        .map(|name| async move {
            let api: Api<Deployment> = Api::namespaced(env.member(&name).await, "shop");
            let held = match api.list(&ListParams::default()).await {
                Ok(l) => l
                    .items
                    .into_iter()
                    .map(|d| {
                        let spec = d.spec.unwrap_or_default();
                        let image = spec
                            .template
                            .spec
                            .and_then(|s| s.containers.into_iter().next())
                            .and_then(|c| c.image)
                            .unwrap_or_default();
                        let labels = d.metadata.labels.unwrap_or_default();
                        Held {
                            name: d.metadata.name.unwrap_or_default(),
                            replicas: spec.replicas.unwrap_or(1),
                            image,
                            managed_by: labels.get(MANAGED_BY_LABEL).cloned(),
                            owner_uid: labels.get(OWNER_UID_LABEL).cloned(),
                        }
                    })
                    .collect(),
                // The namespace is not there yet: nothing held.
                Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
                Err(e) => panic!("listing Deployments in {name}: {e}"),
            };
            (name, held)
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    lists.into_iter().collect()
}

/// Polls the members until each holds exactly `want` (nothing, for `None`); fails naming
/// the members that do not.
async fn every_member_holds(env: &Env, names: &[String], want: Option<&Held>) {
    let want: &[Held] = want.map_or(&[], std::slice::from_ref);
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let held = copies(env, names).await;
        let wrong: Vec<_> = held.iter().filter(|(_, h)| h.as_slice() != want).collect();
        if wrong.is_empty() {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "{} of {} members do not hold exactly {want:?} after {WITHIN:?}; first: {:?}",
                wrong.len(),
                names.len(),
                &wrong[..wrong.len().min(5)]
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_deployment_reaches_every_one_of_200_members_once() {
    let clusters = format!("--clusters={CLUSTERS}");
    let env = Env::start(&[&clusters, "--api-only", "--nodes=1"]);
    let fed = env.federation().await;
    env.ok("kubectl", &["create", "namespace", "meridian-system"]);
    env.ok("kubectl", &["create", "namespace", "shop"]);
    let names = register(&env, &fed).await;
    assert_eq!(names.len(), CLUSTERS);
    let _controllers = env.controllers(&["--probe-period=5s", "--metrics-bind-address=off"]);
    let _scheduler = env.scheduler(&["--workers=4"]);
    all_ready(&fed, CLUSTERS).await;

    env.apply(
        "app.yaml",
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: everywhere, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    replicaScheduling: {type: Duplicated}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
"#,
    );
    let placements: Api<Placement> = Api::namespaced(fed.clone(), "shop");
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let dest = placements
            .get_opt("deployment-web")
            .await
            .expect("placement")
            .map_or(0, |p| p.spec.dest_clusters.len());
        if dest == CLUSTERS {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Placement lists {dest} of {CLUSTERS} clusters after {WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deployments: Api<Deployment> = Api::namespaced(fed.clone(), "shop");
    let uid = deployments
        .get("web")
        .await
        .expect("federated web")
        .metadata
        .uid
        .expect("uid");
    let copy = |replicas: i32, image: &str| Held {
        name: "web".into(),
        replicas,
        image: image.into(),
        managed_by: Some(MANAGED_BY_VALUE.into()),
        owner_uid: Some(uid.clone()),
    };
    every_member_holds(&env, &names, Some(&copy(2, "nginx:1.27"))).await;

    // A change reaches every member, still as one copy each.
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3,
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}})),
        )
        .await
        .expect("scale");
    every_member_holds(&env, &names, Some(&copy(3, "nginx:1.28"))).await;

    // Deleting the federated Deployment takes its copy from every member.
    deployments
        .delete("web", &Default::default())
        .await
        .expect("delete");
    every_member_holds(&env, &names, None).await;
}

//! A workload's ServiceAccount and PersistentVolumeClaim follow it: a federated Deployment
//! with `serviceAccountName` and a `persistentVolumeClaim` volume gets both into the
//! clusters that run it; a pull secret the member adds to the ServiceAccount is the
//! member's; dropping the references removes the copies from the members where no other
//! workload uses them, and from the others once those go. A member watches a kind only once
//! it holds or gets objects of it, and collects a stale copy its first look finds.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ServiceAccount};
use kube::api::{Api, Patch, PatchParams};
use meridian_e2e::{Env, eventually, wait_for};
use serde_json::json;

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: deps}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: deps}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: api}
  placement:
    clusterAffinity:
      clusterNames: [sim-1, sim-2]
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: keeper, namespace: deps}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: keeper}
  placement:
    clusterAffinity:
      clusterNames: [sim-1]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: api-runner, namespace: deps}
imagePullSecrets: [{name: registry}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: api-data, namespace: deps}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: deps}
spec:
  replicas: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      serviceAccountName: api-runner
      containers: [{name: api, image: "api:1"}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: api-data}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper, namespace: deps}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers: [{name: keeper, image: "keeper:1"}]
      volumes: [{name: data, persistentVolumeClaim: {claimName: api-data}}]
"#;

const WITHIN: Duration = Duration::from_secs(60);

fn managed(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == "meridian")
}

fn pull_secrets(sa: &ServiceAccount) -> Vec<String> {
    sa.image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.clone())
        .collect()
}

async fn present<K>(api: &Api<K>, name: &str) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.get_opt(name).await.expect("get")
}

#[tokio::test]
async fn service_accounts_and_claims_follow_their_workloads() {
    let env = Env::start(&["--clusters=2", "--nodes=2", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1", "sim-2"], 2).await;
    env.apply("app.yaml", APP);

    let mut members = Vec::new();
    for name in ["sim-1", "sim-2"] {
        let c = env.member(name).await;
        members.push((
            name,
            Api::<ServiceAccount>::namespaced(c.clone(), "deps"),
            Api::<PersistentVolumeClaim>::namespaced(c, "deps"),
        ));
    }
    for (name, sas, pvcs) in &members {
        let sa = eventually(
            &format!("the ServiceAccount in {name}"),
            WITHIN,
            || present(sas, "api-runner"),
            |sa| sa.as_ref().is_some_and(|sa| managed(&sa.metadata)),
        )
        .await
        .expect("present");
        assert_eq!(pull_secrets(&sa), ["registry"]);
        let pvc = eventually(
            &format!("the claim in {name}"),
            WITHIN,
            || present(pvcs, "api-data"),
            |p| p.as_ref().is_some_and(|p| managed(&p.metadata)),
        )
        .await
        .expect("present");
        let spec = pvc.spec.expect("spec");
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(
            spec.resources
                .and_then(|r| r.requests)
                .and_then(|r| r.get("storage").cloned())
                .map(|q| q.0),
            Some("1Gi".to_string())
        );
    }

    // A pull secret the member adds to the ServiceAccount is the member's: a later change
    // of the federated one (a label) arrives without taking it away.
    let (_, sas1, _) = &members[0];
    sas1.patch(
        "api-runner",
        &PatchParams::default(),
        &Patch::Merge(json!({"imagePullSecrets": [{"name": "registry"}, {"name": "member-own"}]})),
    )
    .await
    .expect("member edit");
    env.ok(
        "kubectl",
        &["label", "sa", "api-runner", "-n", "deps", "tier=backend"],
    );
    let sa = wait_for(sas1, "api-runner", "0", "the new label", |sa| {
        sa.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("tier").is_some_and(|v| v == "backend"))
    })
    .await;
    assert_eq!(pull_secrets(&sa), ["registry", "member-own"]);

    // Dropping both references: the ServiceAccount leaves both members, the claim only
    // sim-2 (keeper still mounts it in sim-1).
    let fed = env.federation().await;
    let deployments: Api<Deployment> = Api::namespaced(fed, "deps");
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {
                "serviceAccountName": null, "volumes": null
            }}}})),
        )
        .await
        .expect("drop the references");
    for (name, sas, _) in &members {
        eventually(
            &format!("the ServiceAccount gone from {name}"),
            WITHIN,
            || present(sas, "api-runner"),
            Option::is_none,
        )
        .await;
    }
    let (_, _, pvcs2) = &members[1];
    eventually(
        "the claim gone from sim-2",
        WITHIN,
        || present(pvcs2, "api-data"),
        Option::is_none,
    )
    .await;
    let (_, _, pvcs1) = &members[0];
    assert!(
        present(pvcs1, "api-data").await.is_some(),
        "keeper still uses the claim in sim-1"
    );
    // Once keeper goes too, nothing uses the claim in sim-1 either.
    env.ok(
        "kubectl",
        &["delete", "deploy", "keeper", "-n", "deps", "--timeout=60s"],
    );
    eventually(
        "the claim gone from sim-1",
        WITHIN,
        || present(pvcs1, "api-data"),
        Option::is_none,
    )
    .await;
}

/// How many watches of `resource` the member's API server has served (its `/metrics`).
async fn watches_of(member: &kube::Client, resource: &str) -> u64 {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = member.request_text(req).await.expect("member /metrics");
    let labels = [r#"verb="watch""#, &format!(r#"resource="{resource}""#)];
    text.lines()
        .filter(|l| l.contains("requests_total{") && labels.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

const WEB: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: lazy}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: lazy}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity:
      clusterNames: [sim-1, sim-2]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: lazy}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "web:1"}]
"#;

/// The kinds the workload controller watches in a member only once it needs them.
const LAZY: [&str; 6] = [
    "replicasets",
    "statefulsets",
    "jobs",
    "secrets",
    "serviceaccounts",
    "persistentvolumeclaims",
];

#[tokio::test]
async fn members_watch_only_the_kinds_they_hold() {
    let env = Env::start(&["--clusters=2", "--nodes=2", "--ready-delay=0s"]);
    // Left in sim-2 by an earlier run: a dependency copy whose workload is long gone.
    let sim2 = env.member("sim-2").await;
    let namespace = serde_json::from_value(json!({"metadata": {"name": "lazy"}})).expect("ns");
    Api::<k8s_openapi::api::core::v1::Namespace>::all(sim2.clone())
        .create(&Default::default(), &namespace)
        .await
        .expect("the namespace in sim-2");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(sim2.clone(), "lazy");
    let stale = serde_json::from_value(json!({
        "metadata": {"name": "stale", "labels": {
            "app.kubernetes.io/managed-by": "meridian",
            "federation.meridian.dev/owner-uid": "0f1e2d3c-gone",
        }},
        "stringData": {"k": "v"},
    }))
    .expect("secret");
    secrets
        .create(&Default::default(), &stale)
        .await
        .expect("plant the stale Secret");

    // Joined before the controllers start: `fedctl join` itself may watch a Secret in the
    // member (its token's, until the member fills it in). What sim-1 is watched for from
    // here on is the controllers' doing.
    for c in ["sim-1", "sim-2"] {
        env.ok("fedctl", &["join", c, "--wait-seconds", "0"]);
    }
    let sim1 = env.member("sim-1").await;
    let mut before = HashMap::new();
    for resource in LAZY.iter().chain(&["deployments"]) {
        before.insert(*resource, watches_of(&sim1, resource).await);
    }
    let sim2_secrets = watches_of(&sim2, "secrets").await;
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.wait_for_capacity(&["sim-1", "sim-2"], 2).await;
    env.apply("web.yaml", WEB);
    env.rollout_status("deploy/web", "lazy");

    // The member's first look found the stale Secret: Secrets are watched there and the
    // copy, used by no workload, is collected.
    eventually(
        "the stale Secret collected from sim-2",
        WITHIN,
        || present(&secrets, "stale"),
        Option::is_none,
    )
    .await;
    eventually(
        "a watch of Secrets in sim-2",
        WITHIN,
        || watches_of(&sim2, "secrets"),
        |n| *n > sim2_secrets,
    )
    .await;
    // sim-1 held nothing of Meridian's: it watches Deployments, and no kind it never got.
    assert!(watches_of(&sim1, "deployments").await > before["deployments"]);
    for resource in LAZY {
        let started = watches_of(&sim1, resource).await - before[resource];
        assert_eq!(started, 0, "{resource} in sim-1");
    }

    // A ServiceAccount the Deployment comes to use: its watch starts with the first copy,
    // and a copy deleted in the member is restored through it.
    env.apply(
        "sa.yaml",
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: web-runner, namespace: lazy}\n",
    );
    let fed = env.federation().await;
    Api::<Deployment>::namespaced(fed, "lazy")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {
                "serviceAccountName": "web-runner"
            }}}})),
        )
        .await
        .expect("use the ServiceAccount");
    let sas: Api<ServiceAccount> = Api::namespaced(sim1.clone(), "lazy");
    let sa = eventually(
        "the ServiceAccount in sim-1",
        WITHIN,
        || present(&sas, "web-runner"),
        |sa| sa.as_ref().is_some_and(|sa| managed(&sa.metadata)),
    )
    .await
    .expect("present");
    eventually(
        "a watch of ServiceAccounts in sim-1",
        WITHIN,
        || watches_of(&sim1, "serviceaccounts"),
        |n| *n > 0,
    )
    .await;
    sas.delete("web-runner", &Default::default())
        .await
        .expect("delete the member's copy");
    let old_uid = sa.metadata.uid;
    eventually(
        "the ServiceAccount restored in sim-1",
        WITHIN,
        || present(&sas, "web-runner"),
        |sa| sa.as_ref().is_some_and(|sa| sa.metadata.uid != old_uid),
    )
    .await;
}

//! Placing kinds without replicas end to end: fed-scheduler gives every ServiceAccount,
//! Role and ConfigMap a policy selects a Placement listing every cluster the governing
//! policy selects, shows the governing policy and the ones it overruled, re-places when
//! policies change and removes the Placement when no policy governs the object any more.
//!
//! The member side (pushing the copies) is not wired yet; this covers the federation side.

use std::time::Duration;

use fed_api::Placement;
use kube::api::{Api, DeleteParams};
use meridian_e2e::Env;

/// Polls `get` until `pred` holds, failing with the last value after `within`.
async fn eventually<T: std::fmt::Debug, F, Fut>(
    what: &str,
    within: Duration,
    mut get: F,
    pred: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let v = get().await;
        if pred(&v) {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("{what}: not within {within:?}; last: {v:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn dest(p: &Option<Placement>) -> Vec<String> {
    p.iter()
        .flat_map(|p| &p.spec.dest_clusters)
        .map(|t| t.cluster.clone())
        .collect()
}

fn governing(p: &Option<Placement>) -> Option<String> {
    p.as_ref()?
        .status
        .as_ref()?
        .policy
        .as_ref()
        .map(|c| c.governing.name.clone())
}

const POLICIES: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web-sa, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ServiceAccount, name: web}
  placement:
    clusterAffinity: {regions: [eu]}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: all-sa, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ServiceAccount}
  placement:
    clusterAffinity: {regions: [us]}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: prod-config, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: Role}
  - {apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {federate: "yes"}}}
  placement:
    clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}
"#;

const OBJECTS: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: batch, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: shop}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop, labels: {federate: "yes"}}
data: {mode: fast}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: local, namespace: shop}
data: {mode: slow}
"#;

#[tokio::test]
async fn copies_are_placed_by_the_governing_policy() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&["--workers=4"]);
    for (c, region, env_label) in [
        ("sim-1", "eu", "prod"),
        ("sim-2", "eu", "dev"),
        ("sim-3", "us", "prod"),
    ] {
        let labels = format!("env={env_label}");
        let out = env.ok(
            "fedctl",
            &[
                "join",
                c,
                "--cluster-context",
                c,
                "--region",
                region,
                "--labels",
                &labels,
                "--wait-seconds",
                "60",
            ],
        );
        assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
    }
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("policies.yaml", POLICIES);
    env.apply("objects.yaml", OBJECTS);
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), "shop");
    let get = |name: &'static str| {
        let api = placements.clone();
        move || {
            let api = api.clone();
            async move { api.get_opt(name).await.expect("get placement") }
        }
    };
    let within = Duration::from_secs(60);

    // The named selector wins over the kind-only one; the loser is shown.
    let web = eventually(
        "serviceaccount-web placed in eu",
        within,
        get("serviceaccount-web"),
        |p| dest(p) == ["sim-1", "sim-2"] && governing(p).as_deref() == Some("web-sa"),
    )
    .await
    .expect("placement");
    let choice = web
        .status
        .as_ref()
        .and_then(|s| s.policy.clone())
        .expect("policy");
    let overruled: Vec<&str> = choice.overruled.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(overruled, ["all-sa"]);
    assert!(web.spec.dest_clusters.iter().all(|t| t.replicas == 0));
    let owner = &web.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ServiceAccount", "web")
    );
    let scheduled = web
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Scheduled"))
        .expect("Scheduled condition");
    assert_eq!(scheduled.status, "True", "{scheduled:?}");

    eventually(
        "serviceaccount-batch placed in us",
        within,
        get("serviceaccount-batch"),
        |p| dest(p) == ["sim-3"] && governing(p).as_deref() == Some("all-sa"),
    )
    .await;
    eventually(
        "the Role goes to the prod clusters",
        within,
        get("role.rbac.authorization.k8s.io-reader"),
        |p| dest(p) == ["sim-1", "sim-3"],
    )
    .await;
    eventually(
        "the labelled ConfigMap goes to the prod clusters",
        within,
        get("configmap-settings"),
        |p| dest(p) == ["sim-1", "sim-3"],
    )
    .await;
    assert!(
        get("configmap-local")().await.is_none(),
        "a ConfigMap no policy selects gets no Placement"
    );

    // Deleting the winning policy hands the object to the next one.
    env.ok(
        "kubectl",
        &["delete", "propagationpolicy", "web-sa", "-n", "shop"],
    );
    eventually(
        "serviceaccount-web re-placed in us",
        within,
        get("serviceaccount-web"),
        |p| dest(p) == ["sim-3"] && governing(p).as_deref() == Some("all-sa"),
    )
    .await;

    // A label change that leaves the selector: no policy governs it, no Placement.
    env.ok(
        "kubectl",
        &[
            "label",
            "configmap",
            "settings",
            "-n",
            "shop",
            "federate=no",
            "--overwrite",
        ],
    );
    eventually(
        "configmap-settings removed",
        within,
        get("configmap-settings"),
        Option::is_none,
    )
    .await;

    // Deleting the only policy naming a kind removes its objects' Placements.
    let policies: Api<fed_api::PropagationPolicy> = Api::namespaced(fed.clone(), "shop");
    policies
        .delete("prod-config", &DeleteParams::default())
        .await
        .expect("delete policy");
    eventually(
        "the Role's Placement removed",
        within,
        get("role.rbac.authorization.k8s.io-reader"),
        Option::is_none,
    )
    .await;

    // Deleting the object removes its Placement.
    env.ok(
        "kubectl",
        &["delete", "serviceaccount", "batch", "-n", "shop"],
    );
    eventually(
        "serviceaccount-batch removed",
        within,
        get("serviceaccount-batch"),
        Option::is_none,
    )
    .await;
}

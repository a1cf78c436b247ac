//! OverridePolicies end to end: three members, a divided Deployment and a copied ConfigMap.
//! An OverridePolicy rewrites the image registry in one region and adds an arg in one
//! cluster; another adds a label to the ConfigMap's copy in one cluster. Each member's
//! object is checked, the policy is changed and the members follow, and a plaintext rule
//! that cannot apply (removing a path that does not exist) shows on the Placement as
//! `OverrideFailed` and holds back only the cluster it targets.

use std::time::Duration;

use fed_api::Placement;
use fed_api::placement::ClusterWorkloadStatus;
use kube::api::Api;
use meridian_e2e::{Env, eventually};

const APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  - {apiVersion: v1, kind: ConfigMap, name: settings}
  placement:
    replicaScheduling: {type: Divided, division: StaticWeight}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: "ghcr.io/shop/web:1", args: ["--port=80"]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop, labels: {app: web}}
data: {mode: fast}
"#;

/// The override policies; `{region}` is where the registry is rewritten and `{extra}`
/// more rules for the Deployment.
fn overrides(region: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {{name: web-regions, namespace: shop}}
spec:
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  overrideRules:
  - targetCluster: {{regions: [{region}]}}
    overriders:
      imageOverrider:
      - {{component: Registry, operator: replace, value: mirror.example}}
  - targetCluster: {{clusterNames: [sim-2]}}
    overriders:
      argsOverrider:
      - {{containerName: web, operator: add, value: ["--zone=b"]}}
{extra}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {{name: settings-labels, namespace: shop}}
spec:
  resourceSelectors:
  - {{apiVersion: v1, kind: ConfigMap, name: settings}}
  overrideRules:
  - targetCluster: {{clusterNames: [sim-1]}}
    overriders:
      labelsOverrider:
      - {{operator: add, value: {{tier: edge}}}}
"#
    )
}

/// A third rule, for sim-1 only, that cannot apply.
const FAILING_RULE: &str = r#"  - targetCluster: {clusterNames: [sim-1]}
    overriders:
      plaintext:
      - {path: /spec/template/spec/nodeSelector, operator: remove}"#;

const WITHIN: Duration = Duration::from_secs(90);

/// Waits until `path` of `kind` `name` in `member` reads `want`.
async fn wait_for(env: &Env, member: &str, kind: &str, name: &str, path: &str, want: String) {
    let _seen = eventually(
        &format!("{kind} {name} {path} in {member} is {want:?}"),
        WITHIN,
        || async { env.member_get(member, kind, "shop", name, path) },
        |v| v.as_deref() == Ok(want.as_str()),
    )
    .await;
}

const IMAGE: &str = "{.spec.template.spec.containers[0].image}";
const ARGS: &str = "{.spec.template.spec.containers[0].args}";

#[tokio::test]
async fn members_get_their_overridden_copies() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&["--workers=4"]);
    for (c, region) in [("sim-1", "eu"), ("sim-2", "eu"), ("sim-3", "us")] {
        let out = env.ok(
            "fedctl",
            &[
                "join",
                c,
                "--cluster-context",
                c,
                "--region",
                region,
                "--wait-seconds",
                "60",
            ],
        );
        assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
    }
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("overrides.yaml", &overrides("us", ""));
    env.apply("app.yaml", APP);
    let wait =
        |member: &'static str,
         kind: &'static str,
         name: &'static str,
         path: &'static str,
         want: &str| { wait_for(&env, member, kind, name, path, want.to_owned()) };
    // The registry is rewritten in region us only; the arg is added in sim-2 only.
    wait(
        "sim-3",
        "deployment",
        "web",
        IMAGE,
        "mirror.example/shop/web:1",
    )
    .await;
    wait("sim-1", "deployment", "web", IMAGE, "ghcr.io/shop/web:1").await;
    wait(
        "sim-2",
        "deployment",
        "web",
        ARGS,
        r#"["--port=80","--zone=b"]"#,
    )
    .await;
    assert_eq!(
        env.member_get("sim-1", "deployment", "shop", "web", ARGS)
            .as_deref(),
        Ok(r#"["--port=80"]"#)
    );
    assert_eq!(
        env.member_get("sim-2", "deployment", "shop", "web", IMAGE)
            .as_deref(),
        Ok("ghcr.io/shop/web:1")
    );
    // Every member keeps its share.
    for member in ["sim-1", "sim-2", "sim-3"] {
        wait(member, "deployment", "web", "{.spec.replicas}", "1").await;
    }
    // The ConfigMap's copy has the label in sim-1 only (Meridian's labels kept).
    wait(
        "sim-1",
        "configmap",
        "settings",
        "{.metadata.labels.tier}",
        "edge",
    )
    .await;
    wait(
        "sim-1",
        "configmap",
        "settings",
        "{.metadata.labels.app\\.kubernetes\\.io/managed-by}",
        "meridian",
    )
    .await;
    wait("sim-3", "configmap", "settings", "{.data.mode}", "fast").await;
    assert_eq!(
        env.member_get(
            "sim-3",
            "configmap",
            "shop",
            "settings",
            "{.metadata.labels.tier}"
        )
        .as_deref(),
        Ok("")
    );
    // The rollout completes on the federation with the overridden copies (no push loop
    // keeps the members from settling).
    env.rollout_status("deploy/web", "shop");

    // The policy moves to region eu: the members follow.
    env.apply("overrides.yaml", &overrides("eu", ""));
    wait(
        "sim-1",
        "deployment",
        "web",
        IMAGE,
        "mirror.example/shop/web:1",
    )
    .await;
    wait(
        "sim-2",
        "deployment",
        "web",
        IMAGE,
        "mirror.example/shop/web:1",
    )
    .await;
    wait("sim-3", "deployment", "web", IMAGE, "ghcr.io/shop/web:1").await;

    // A rule that cannot apply in sim-1: the Placement says so and names the policy and
    // rule; the other members still follow the federation.
    env.apply("overrides.yaml", &overrides("eu", FAILING_RULE));
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), "shop");
    let entry = |p: &Option<Placement>, c: &str| -> Option<ClusterWorkloadStatus> {
        p.as_ref()?
            .status
            .as_ref()?
            .clusters
            .iter()
            .find(|e| e.cluster == c)
            .cloned()
    };
    let failed = eventually(
        "sim-1's entry says OverrideFailed",
        WITHIN,
        || async { placements.get_opt("deployment-web").await.expect("get") },
        |p| entry(p, "sim-1").is_some_and(|e| e.error.starts_with("OverrideFailed: ")),
    )
    .await;
    let error = entry(&failed, "sim-1").expect("entry").error;
    assert!(
        error.contains("OverridePolicy shop/web-regions rule 2")
            && error.contains("/spec/template/spec/nodeSelector"),
        "{error}"
    );
    let propagated = failed
        .as_ref()
        .and_then(|p| p.status.as_ref())
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Propagated")
                .cloned()
        })
        .expect("Propagated");
    assert_eq!(
        (propagated.status.as_str(), propagated.reason.as_str()),
        ("False", "OverrideFailed"),
        "{propagated:?}"
    );
    for other in ["sim-2", "sim-3"] {
        assert!(
            entry(&failed, other).is_some_and(|e| e.error.is_empty()),
            "{other}: {failed:#?}"
        );
    }
    env.ok(
        "kubectl",
        &[
            "set",
            "image",
            "deployment/web",
            "-n",
            "shop",
            "web=ghcr.io/shop/web:2",
        ],
    );
    wait(
        "sim-2",
        "deployment",
        "web",
        IMAGE,
        "mirror.example/shop/web:2",
    )
    .await;
    wait("sim-3", "deployment", "web", IMAGE, "ghcr.io/shop/web:2").await;
    assert_eq!(
        env.member_get("sim-1", "deployment", "shop", "web", IMAGE)
            .as_deref(),
        Ok("mirror.example/shop/web:1"),
        "nothing is pushed to sim-1 while its override fails"
    );

    // Fixed: sim-1 catches up and the Placement clears.
    env.apply("overrides.yaml", &overrides("eu", ""));
    wait(
        "sim-1",
        "deployment",
        "web",
        IMAGE,
        "mirror.example/shop/web:2",
    )
    .await;
    eventually(
        "sim-1's error cleared",
        WITHIN,
        || async { placements.get_opt("deployment-web").await.expect("get") },
        |p| entry(p, "sim-1").is_some_and(|e| e.error.is_empty()),
    )
    .await;

    // Without its policy the ConfigMap's copy is still Meridian's and still follows the
    // federation. (The label the override added stays: labels a copy carries beyond
    // Meridian's are left alone, as a member's own would be.)
    env.ok(
        "kubectl",
        &["delete", "overridepolicy", "settings-labels", "-n", "shop"],
    );
    env.ok(
        "kubectl",
        &[
            "patch",
            "configmap",
            "settings",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            r#"{"data":{"mode":"safe"}}"#,
        ],
    );
    wait("sim-1", "configmap", "settings", "{.data.mode}", "safe").await;
}

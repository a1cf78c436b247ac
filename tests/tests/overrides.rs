//! OverridePolicies end to end: three members, a divided Deployment and a copied ConfigMap.
//! An OverridePolicy rewrites the image registry in one region and adds an arg in one
//! cluster; another adds a label to the ConfigMap's copy in one cluster. Each member's
//! object is checked, the policy is changed and the members follow, and a plaintext rule
//! that cannot apply (removing a path that does not exist) shows on the Placement as
//! `OverrideFailed` and holds back only the cluster it targets. A deleted policy takes what
//! it set away from the members.
//!
//! Then the paths without a Placement of their own: a label on a ConfigMap a pod template
//! pulls in and an annotation on a federated Service reach the targeted member only and go
//! when their policy is deleted, and relabelling clusters moves a label-targeted override.
//! A ConfigMap an interpreted custom object's pod template pulls in, whose override cannot
//! apply in one cluster, shows on that object's Placement as `OverrideFailed` for that
//! cluster, as on a built-in workload's, until the policy is fixed.

use std::time::Duration;

use fed_api::Placement;
use fed_api::placement::ClusterWorkloadStatus;
use kube::api::Api;
use meridian_e2e::{Env, Proc, ROLLOUT_KIND, eventually};

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

/// Three members joined (sim-1 and sim-2 in region eu, sim-3 in us), with the controllers
/// and the scheduler running while the processes live.
fn fleet() -> (Env, [Proc; 2]) {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let scheduler = env.scheduler(&["--workers=4"]);
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
    (env, [controllers, scheduler])
}

#[tokio::test]
async fn members_get_their_overridden_copies() {
    let (env, _processes) = fleet();
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

    // Without its policy the ConfigMap's copy loses the label the override added, and is
    // still Meridian's and still follows the federation.
    env.ok(
        "kubectl",
        &["delete", "overridepolicy", "settings-labels", "-n", "shop"],
    );
    wait(
        "sim-1",
        "configmap",
        "settings",
        "{.metadata.labels.tier}",
        "",
    )
    .await;
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

const DEPS_APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: api, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: api}
  placement:
    replicaScheduling: {type: Divided, division: StaticWeight}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: api-env, namespace: shop}
data: {MODE: fast}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop, labels: {app: api}}
spec:
  replicas: 3
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers:
      - name: api
        image: "ghcr.io/shop/api:1"
        envFrom: [{configMapRef: {name: api-env}}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  selector: {app: api}
  ports: [{name: http, port: 80, targetPort: 8080}]
"#;

/// A label on the dependency ConfigMap in sim-1, an annotation on the Service in sim-2.
const DEPS_OVERRIDES: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {name: api-env-labels, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap, name: api-env}
  overrideRules:
  - targetCluster: {clusterNames: [sim-1]}
    overriders:
      labelsOverrider:
      - {operator: add, value: {tier: edge}}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {name: api-service, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: Service, name: api}
  overrideRules:
  - targetCluster: {clusterNames: [sim-2]}
    overriders:
      annotationsOverrider:
      - {operator: add, value: {lb.example/scheme: internal}}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {name: edge-clusters, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ConfigMap, name: api-env}
  overrideRules:
  - targetCluster: {labelSelector: {matchLabels: {edge: "yes"}}}
    overriders:
      labelsOverrider:
      - {operator: add, value: {edge: "yes"}}
"#;

const TIER: &str = "{.metadata.labels.tier}";
const EDGE: &str = "{.metadata.labels.edge}";
const SCHEME: &str = "{.metadata.annotations.lb\\.example/scheme}";

#[tokio::test]
async fn dependencies_and_services_follow_policies_and_cluster_labels() {
    let (env, _processes) = fleet();
    env.apply("overrides.yaml", DEPS_OVERRIDES);
    env.apply("app.yaml", DEPS_APP);
    let wait =
        |member: &'static str,
         kind: &'static str,
         name: &'static str,
         path: &'static str,
         want: &str| { wait_for(&env, member, kind, name, path, want.to_owned()) };
    let get = |member: &str, kind: &str, path: &str| {
        let name = if kind == "service" { "api" } else { "api-env" };
        env.member_get(member, kind, "shop", name, path)
    };

    // The dependency's label reaches sim-1 only, the Service's annotation sim-2 only; every
    // member holds both.
    wait("sim-1", "configmap", "api-env", TIER, "edge").await;
    wait("sim-2", "service", "api", SCHEME, "internal").await;
    for member in ["sim-1", "sim-2", "sim-3"] {
        wait(member, "configmap", "api-env", "{.data.MODE}", "fast").await;
        wait(member, "service", "api", "{.spec.selector.app}", "api").await;
    }
    for member in ["sim-2", "sim-3"] {
        assert_eq!(
            get(member, "configmap", TIER).as_deref(),
            Ok(""),
            "{member}"
        );
    }
    for member in ["sim-1", "sim-3"] {
        assert_eq!(
            get(member, "service", SCHEME).as_deref(),
            Ok(""),
            "{member}"
        );
    }
    // No cluster carries the label the third policy targets yet.
    for member in ["sim-1", "sim-2", "sim-3"] {
        assert_eq!(
            get(member, "configmap", EDGE).as_deref(),
            Ok(""),
            "{member}"
        );
    }
    // The rollout settles with the overridden dependency (no push loop).
    env.rollout_status("deploy/api", "shop");
    let cluster_ip = get("sim-2", "service", "{.spec.clusterIP}");

    // Deleting the policies takes what they set away from the members; the member's own
    // allocations on the Service stay.
    env.ok(
        "kubectl",
        &[
            "delete",
            "overridepolicy",
            "api-env-labels",
            "api-service",
            "-n",
            "shop",
        ],
    );
    wait("sim-1", "configmap", "api-env", TIER, "").await;
    wait("sim-2", "service", "api", SCHEME, "").await;
    assert_eq!(get("sim-2", "service", "{.spec.clusterIP}"), cluster_ip);
    assert_eq!(
        get("sim-1", "configmap", "{.data.MODE}").as_deref(),
        Ok("fast")
    );

    // Labelling a cluster brings the label-targeted override there at once; moving the
    // label moves the override.
    env.ok("kubectl", &["label", "cluster", "sim-3", "edge=yes"]);
    wait("sim-3", "configmap", "api-env", EDGE, "yes").await;
    for member in ["sim-1", "sim-2"] {
        assert_eq!(
            get(member, "configmap", EDGE).as_deref(),
            Ok(""),
            "{member}"
        );
    }
    env.ok("kubectl", &["label", "cluster", "sim-3", "edge-"]);
    env.ok("kubectl", &["label", "cluster", "sim-1", "edge=yes"]);
    wait("sim-1", "configmap", "api-env", EDGE, "yes").await;
    wait("sim-3", "configmap", "api-env", EDGE, "").await;
    assert_eq!(get("sim-2", "configmap", EDGE).as_deref(), Ok(""));
}

/// A Rollout copied to sim-1 and sim-2 whose pod template pulls in the ConfigMap
/// `rollout-env`, its interpreter naming the template.
const ROLLOUT_APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ResourceInterpreter
metadata: {name: rollouts}
spec:
  target: {apiVersion: example.com/v1, kind: Rollout}
  podTemplate: {path: .spec.template}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: rollouts, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: example.com/v1, kind: Rollout, name: web}
  placement:
    clusterAffinity: {clusterNames: [sim-1, sim-2]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: rollout-env, namespace: shop}
data: {MODE: fast}
---
apiVersion: example.com/v1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: "ghcr.io/shop/web:1"
        envFrom: [{configMapRef: {name: rollout-env}}]
"#;

/// An override of the Rollout's ConfigMap in sim-1: `rule` is its plaintext overrider.
fn rollout_env_override(rule: &str) -> String {
    format!(
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {{name: rollout-env, namespace: shop}}
spec:
  resourceSelectors:
  - {{apiVersion: v1, kind: ConfigMap, name: rollout-env}}
  overrideRules:
  - targetCluster: {{clusterNames: [sim-1]}}
    overriders:
      plaintext:
      - {rule}
"#
    )
}

#[tokio::test]
async fn an_interpreted_objects_dependency_override_failure_shows_on_its_placement() {
    let env = Env::start(&["--clusters=2", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_serving(&["sim-1", "sim-2"], "example.com");
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("rollout-kind.yaml", ROLLOUT_KIND);
    // Removing a key the ConfigMap lacks cannot apply.
    env.apply(
        "rollout-env-override.yaml",
        &rollout_env_override("{path: /data/MISSING, operator: remove}"),
    );
    env.apply_once_served("rollout-app.yaml", ROLLOUT_APP).await;
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed, "shop");
    let entry = |p: &Option<Placement>, c: &str| -> Option<ClusterWorkloadStatus> {
        p.as_ref()?
            .status
            .as_ref()?
            .clusters
            .iter()
            .find(|e| e.cluster == c)
            .cloned()
    };
    let propagated = |p: &Option<Placement>| {
        p.as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Propagated"))
            .map(|c| (c.status.clone(), c.reason.clone()))
    };
    let placement = "rollout.example.com-web";

    // sim-1's entry names the ConfigMap and the rule; sim-2, where no rule applies, is in
    // sync and holds the ConfigMap.
    let failed = eventually(
        "sim-1's entry says the ConfigMap's override failed",
        WITHIN,
        || async { placements.get_opt(placement).await.expect("get") },
        |p| {
            entry(p, "sim-1").is_some_and(|e| {
                e.error
                    .starts_with("OverrideFailed: ConfigMap rollout-env: ")
            }) && entry(p, "sim-2").is_some_and(|e| e.error.is_empty())
        },
    )
    .await;
    let error = entry(&failed, "sim-1").expect("entry").error;
    assert!(
        error.contains("OverridePolicy shop/rollout-env rule 0") && error.contains("/data/MISSING"),
        "{error}"
    );
    assert_eq!(
        propagated(&failed),
        Some(("False".to_string(), "OverrideFailed".to_string())),
        "{failed:#?}"
    );
    wait_for(
        &env,
        "sim-2",
        "configmap",
        "rollout-env",
        "{.data.MODE}",
        "fast".into(),
    )
    .await;

    // A rule that applies: the ConfigMap reaches sim-1 as it says and the entry clears.
    env.apply(
        "rollout-env-override.yaml",
        &rollout_env_override("{path: /data/MODE, operator: replace, value: safe}"),
    );
    wait_for(
        &env,
        "sim-1",
        "configmap",
        "rollout-env",
        "{.data.MODE}",
        "safe".into(),
    )
    .await;
    eventually(
        "the Rollout's Placement in sync",
        WITHIN,
        || async { placements.get_opt(placement).await.expect("get") },
        |p| {
            ["sim-1", "sim-2"]
                .iter()
                .all(|c| entry(p, c).is_some_and(|e| e.error.is_empty()))
                && propagated(p) == Some(("True".to_string(), "InSync".to_string()))
        },
    )
    .await;
}

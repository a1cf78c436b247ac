//! A custom workload kind divided as a `ResourceInterpreter` says, as a user would: on
//! `fedctl up --clusters 2 --custom-resource-group example.com`, a `Rollout` kind (its
//! replicas at `.spec.replicas`, a pod template at `.spec.template`) is defined in the
//! federation and propagated to the members, an interpreter names its replicas, template
//! and status, and a Rollout under a Divided policy with static weights 1:2 lands as its
//! shares in the members, follows a scale of the federated object, and reports the sum of
//! the members' ready replicas on the federated object. A Rollout without a replica count
//! is placed nowhere and its Placement says why. The ConfigMap the Rollout's template
//! names goes with it to both members; once the template stops naming it, it leaves the
//! members where nothing else uses it, and stays where a Deployment does until that goes.
//! The test plays the members' Rollout controller: it writes their status by hand.

use std::time::Duration;

use meridian_e2e::{ROLLOUT_KIND, Up, poll_until};

const NS: &str = "shop";
/// How long any one change may take to reach the members.
const WITHIN: Duration = Duration::from_secs(60);

/// The namespace, the kind and the policy that takes its definition to every member.
fn kind_yaml() -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop}}\n---{ROLLOUT_KIND}")
}

/// The interpreter, the policies and the objects of the kind.
const APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ResourceInterpreter
metadata: {name: rollouts}
spec:
  target: {apiVersion: example.com/v1, kind: Rollout}
  replicas: {path: .spec.replicas}
  podTemplate: {path: .spec.template}
  statusAggregation:
  - {path: .status.readyReplicas, op: Sum}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: rollouts, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: example.com/v1, kind: Rollout}
  placement:
    clusterAffinity: {clusterNames: [sim-1, sim-2]}
    replicaScheduling:
      type: Divided
      division: StaticWeight
      weights:
      - {clusterNames: [sim-1], weight: 1}
      - {clusterNames: [sim-2], weight: 2}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-env, namespace: shop}
data: {mode: fast}
---
apiVersion: example.com/v1
kind: Rollout
metadata: {name: web, namespace: shop}
spec:
  replicas: 6
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        resources: {requests: {cpu: 10m, memory: 16Mi}}
        envFrom:
        - configMapRef: {name: web-env}
---
apiVersion: example.com/v1
kind: Rollout
metadata: {name: countless, namespace: shop}
spec:
  template:
    spec:
      containers: [{name: web, image: nginx:1.27}]
"#;

/// A Deployment in sim-1 that uses the ConfigMap the Rollout `web` names.
const KEEPER: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: keeper, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: keeper}}
  template:
    metadata: {labels: {app: keeper}}
    spec:
      containers:
      - name: keeper
        image: nginx:1.27
        envFrom:
        - configMapRef: {name: web-env}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: keeper, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: keeper}
  placement:
    clusterAffinity: {clusterNames: [sim-1]}
"#;

/// Polls until `configmap/name` is absent from `member`.
fn configmap_gone(up: &Up, member: &str, name: &str) {
    let mut last = Ok(String::new());
    let gone = meridian_e2e::poll_until_or(WITHIN, || {
        last = kubectl_in(up, Some(member), &["-n", NS, "get", "configmap", name]);
        last.as_ref()
            .is_err_and(|e| e.contains("NotFound") || e.contains("not found"))
            .then_some(())
    });
    assert!(gone.is_some(), "{name} should leave {member}: {last:?}");
}

/// kubectl in `context` (the federation when `None`): stdout, or stderr on failure.
fn kubectl_in(up: &Up, context: Option<&str>, args: &[&str]) -> Result<String, String> {
    let mut all = Vec::new();
    if let Some(c) = context {
        all.extend(["--context", c]);
    }
    all.extend_from_slice(args);
    let out = up.run("kubectl", &all);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Polls until `kind/name` in namespace `shop` of `context` answers `path` with `want`.
fn shows(up: &Up, context: Option<&str>, kind: &str, name: &str, path: &str, want: &str) {
    let jsonpath = format!("jsonpath={path}");
    let place = context.unwrap_or("the federation");
    let mut last = Err(String::new());
    let found = meridian_e2e::poll_until_or(WITHIN, || {
        last = kubectl_in(up, context, &["get", kind, name, "-n", NS, "-o", &jsonpath]);
        (last.as_deref().ok()? == want).then_some(())
    });
    assert!(
        found.is_some(),
        "{kind}/{name} in {place}: {path} should be {want:?}, last answer {last:?}"
    );
}

/// The replicas of the Rollout `web` in `member`.
fn member_replicas(up: &Up, member: &str, want: &str) {
    shows(up, Some(member), "rollout", "web", "{.spec.replicas}", want);
}

#[test]
fn a_custom_kind_is_divided_as_its_interpreter_says() {
    let up = Up::start_with(2, &["--custom-resource-group=example.com".to_string()]);
    let kind = up.data.join("rollout-kind.yaml");
    std::fs::write(&kind, kind_yaml()).expect("write the kind");
    up.kubectl(&["apply", "-f", kind.to_str().expect("utf-8 path")]);
    // The kind first, as a chart's crds/ go first: the Rollouts are placed once both members
    // serve it (a member without the kind is filtered out, and a divided object's replicas
    // do not move to a cluster that comes later unless its policy rebalances).
    for member in ["sim-1", "sim-2"] {
        poll_until(WITHIN, &format!("{member} to serve rollouts"), || {
            let served = kubectl_in(
                &up,
                None,
                &[
                    "get",
                    "cluster",
                    member,
                    "-o",
                    r#"jsonpath={.status.apiEnablements[?(@.groupVersion=="example.com/v1")].resources}"#,
                ],
            )
            .ok()?;
            served.contains("rollouts").then_some(())
        });
    }
    let app = up.data.join("rollouts.yaml");
    std::fs::write(&app, APP).expect("write the application");
    let app = app.to_str().expect("utf-8 path");
    // The Rollouts' kind exists once the CRD is established: apply until kubectl knows it.
    poll_until(WITHIN, "kubectl apply of the application", || {
        kubectl_in(&up, None, &["apply", "-f", app]).ok()
    });

    // 6 replicas at weights 1:2: 2 in sim-1, 4 in sim-2, each copy Meridian's.
    member_replicas(&up, "sim-1", "2");
    member_replicas(&up, "sim-2", "4");
    shows(
        &up,
        Some("sim-2"),
        "rollout",
        "web",
        "{.metadata.labels.app\\.kubernetes\\.io/managed-by}",
        "meridian",
    );
    // The rest of the object travels as it is.
    shows(
        &up,
        Some("sim-1"),
        "rollout",
        "web",
        "{.spec.template.spec.containers[0].image}",
        "nginx:1.27",
    );
    shows(
        &up,
        None,
        "placement",
        "rollout.example.com-web",
        "{range .spec.destClusters[*]}{.cluster}={.replicas} {end}",
        "sim-1=2 sim-2=4 ",
    );

    // The ConfigMap its template names goes where it has copies, as Meridian's.
    for member in ["sim-1", "sim-2"] {
        shows(
            &up,
            Some(member),
            "configmap",
            "web-env",
            "{.data.mode}",
            "fast",
        );
        shows(
            &up,
            Some(member),
            "configmap",
            "web-env",
            "{.metadata.labels.app\\.kubernetes\\.io/managed-by}",
            "meridian",
        );
    }

    // Scaling the federated object moves the shares.
    up.kubectl(&[
        "-n",
        NS,
        "patch",
        "rollout",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":9}}"#,
    ]);
    member_replicas(&up, "sim-1", "3");
    member_replicas(&up, "sim-2", "6");

    // A member's copy changed by hand is put back to its share.
    kubectl_in(
        &up,
        Some("sim-1"),
        &[
            "-n",
            NS,
            "patch",
            "rollout",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":7}}"#,
        ],
    )
    .expect("edit sim-1's copy");
    member_replicas(&up, "sim-1", "3");

    // Playing the members' controller: their ready replicas are summed on the federation.
    for (member, ready) in [("sim-1", 3), ("sim-2", 5)] {
        let status = format!(r#"{{"status":{{"readyReplicas":{ready}}}}}"#);
        kubectl_in(
            &up,
            Some(member),
            &[
                "-n",
                NS,
                "patch",
                "rollout",
                "web",
                "--subresource=status",
                "--type=merge",
                "-p",
                &status,
            ],
        )
        .expect("write a member's status");
    }
    shows(&up, None, "rollout", "web", "{.status.readyReplicas}", "8");

    // A Deployment in sim-1 uses the ConfigMap too.
    let keeper = up.data.join("keeper.yaml");
    std::fs::write(&keeper, KEEPER).expect("write the Deployment");
    let keeper = keeper.to_str().expect("utf-8 path");
    up.kubectl(&["apply", "-f", keeper]);
    shows(
        &up,
        Some("sim-1"),
        "deployment",
        "keeper",
        "{.spec.template.spec.containers[0].envFrom[0].configMapRef.name}",
        "web-env",
    );

    // The template no longer names the ConfigMap: it leaves sim-2, where nothing else uses
    // it, and stays in sim-1 for the Deployment.
    up.kubectl(&[
        "-n",
        NS,
        "patch",
        "rollout",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/template/spec/containers/0/envFrom"}]"#,
    ]);
    configmap_gone(&up, "sim-2", "web-env");
    shows(
        &up,
        Some("sim-1"),
        "configmap",
        "web-env",
        "{.data.mode}",
        "fast",
    );
    // Its data still follows the federation's there.
    up.kubectl(&[
        "-n",
        NS,
        "patch",
        "configmap",
        "web-env",
        "--type=merge",
        "-p",
        r#"{"data":{"mode":"slow"}}"#,
    ]);
    shows(
        &up,
        Some("sim-1"),
        "configmap",
        "web-env",
        "{.data.mode}",
        "slow",
    );
    // The Deployment gone, nothing uses it in sim-1 either.
    up.kubectl(&["-n", NS, "delete", "deployment", "keeper", "--wait=false"]);
    configmap_gone(&up, "sim-1", "web-env");
    shows(&up, None, "configmap", "web-env", "{.data.mode}", "slow");

    // No replica count where the interpreter says: placed nowhere, and the Placement says
    // why.
    let condition = "{.status.conditions[?(@.type==\"Scheduled\")].reason}";
    shows(
        &up,
        None,
        "placement",
        "rollout.example.com-countless",
        condition,
        "InvalidWorkload",
    );
    let message = kubectl_in(
        &up,
        None,
        &[
            "-n",
            NS,
            "get",
            "placement",
            "rollout.example.com-countless",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Scheduled\")].message}",
        ],
    )
    .expect("the Placement's message");
    assert!(message.contains(".spec.replicas is missing"), "{message}");
    for member in ["sim-1", "sim-2"] {
        let r = kubectl_in(
            &up,
            Some(member),
            &["-n", NS, "get", "rollout", "countless"],
        );
        assert!(
            r.as_ref()
                .is_err_and(|e| e.contains("NotFound") || e.contains("not found")),
            "{member}: {r:?}"
        );
    }
    // Given a count, it is divided like the other.
    up.kubectl(&[
        "-n",
        NS,
        "patch",
        "rollout",
        "countless",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    shows(
        &up,
        Some("sim-1"),
        "rollout",
        "countless",
        "{.spec.replicas}",
        "1",
    );
    shows(
        &up,
        Some("sim-2"),
        "rollout",
        "countless",
        "{.spec.replicas}",
        "2",
    );
}

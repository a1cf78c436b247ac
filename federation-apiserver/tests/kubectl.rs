//! End-to-end: kubectl 1.37 (installed by tools/install-kubectl.sh) against the real server.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::Server;

struct Kubectl {
    bin: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
}

impl Kubectl {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.kubeconfig.parent().unwrap())
            .args(args);
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("running kubectl")
    }
    /// Runs and requires success, returning stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).expect("kubectl -o json")
    }
}

fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples")
            .join(name),
    )
    .expect("example file")
}

#[test]
fn kubectl_user_flow() {
    // No workload controller runs here to release deleted Deployments.
    let (server, dir) = Server::start(&["--disable-admission-plugins=MemberCleanup"]);
    let k = Kubectl {
        bin: meridian_e2e::kubectl_path(),
        kubeconfig: server.kubeconfig().to_owned(),
    };

    let resources = k.ok(&["api-resources"]);
    for kind in [
        "deployments",
        "replicasets",
        "services",
        "configmaps",
        "clusters",
        "propagationpolicies",
        "placements",
        "leases",
    ] {
        assert!(
            resources.contains(kind),
            "api-resources lacks {kind}:\n{resources}"
        );
    }

    let app = dir.path().join("app.yaml");
    std::fs::write(&app, example("app.yaml")).unwrap();
    let app = app.to_str().unwrap();
    let out = k.ok(&["apply", "-f", app]);
    assert!(out.contains("deployment.apps/web created"), "{out}");
    k.ok(&["annotate", "deploy/web", "-n", "shop", "team=blue"]);

    // Second apply with a new image and port: a merge that keeps what others set.
    let edited = dir.path().join("app2.yaml");
    std::fs::write(
        &edited,
        example("app.yaml")
            .replace("nginx:1.27", "nginx:1.28")
            .replace("containerPort: 80", "containerPort: 8080"),
    )
    .unwrap();
    let edited = edited.to_str().unwrap();
    let out = k.ok(&["apply", "-f", edited]);
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    assert!(out.contains("configmap/web-config unchanged"), "{out}");
    let d = k.json(&["get", "deploy", "web", "-n", "shop"]);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx:1.28");
    assert_eq!(
        c["ports"],
        serde_json::json!([{"containerPort": 8080, "protocol": "TCP"}])
    );
    assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "web-config");
    assert_eq!(d["metadata"]["annotations"]["team"], "blue");
    assert_eq!(d["metadata"]["generation"], 2);

    // diff against the first version shows the image change and exits 1.
    let diff = k.run(&["diff", "-f", app]);
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(String::from_utf8_lossy(&diff.stdout).contains("nginx:1.27"));

    // get -w streams a change.
    let mut watcher = k
        .cmd(&["get", "deploy", "-A", "-w", "--no-headers"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("web"), "{first}");
    k.ok(&["scale", "deploy/web", "-n", "shop", "--replicas=5"]);
    let second = lines.next().unwrap().unwrap();
    assert!(second.contains("web") && second.contains("/5"), "{second}");
    let _ = watcher.kill();
    let _ = watcher.wait();

    let explain = k.ok(&["explain", "deployment.spec.replicas"]);
    assert!(explain.contains("Number of desired pods"), "{explain}");
    let explain = k.ok(&["explain", "clusters.spec"]);
    assert!(explain.contains("apiEndpoint"), "{explain}");

    // patch (strategic, merge, json), label, edit.
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "shop",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"merged":"yes"}}}"#,
    ]);
    k.ok(&[
        "patch",
        "deploy",
        "web",
        "-n",
        "shop",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/json","value":"yes"}]"#,
    ]);
    k.ok(&["label", "deploy", "web", "-n", "shop", "tier=front"]);
    let editor = dir.path().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/replicas: 2/replicas: 7/' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let edit = k
        .cmd(&["edit", "deploy/web", "-n", "shop"])
        .env("KUBE_EDITOR", &editor)
        .output()
        .unwrap();
    assert!(
        edit.status.success(),
        "{}",
        String::from_utf8_lossy(&edit.stderr)
    );
    let d = k.json(&["get", "deploy", "web", "-n", "shop"]);
    assert_eq!(d["spec"]["replicas"], 7);
    for l in ["merged", "json", "tier"] {
        assert!(
            d["metadata"]["labels"].get(l).is_some(),
            "label {l} missing"
        );
    }

    let table = k.ok(&["get", "deploy", "-n", "shop"]);
    assert!(
        table.contains("READY") && table.contains("UP-TO-DATE") && table.contains("0/7"),
        "{table}"
    );
    // `--sort-by` sorts the Table's rows by a field of the whole objects it asks for.
    k.ok(&[
        "create",
        "deployment",
        "api",
        "--image=nginx",
        "--replicas=9",
        "-n",
        "shop",
    ]);
    let sorted = k.ok(&[
        "get",
        "deploy",
        "-n",
        "shop",
        "--sort-by=.spec.replicas",
        "--no-headers",
    ]);
    let names: Vec<&str> = sorted
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["web", "api"], "{sorted}");
    k.ok(&["delete", "deployment", "api", "-n", "shop"]);

    // Meridian kinds print their own columns.
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(&cluster, "apiVersion: federation.meridian.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: eu-west-1\nspec:\n  apiEndpoint: https://10.0.0.10:6443\n  region: eu-west\n  zone: eu-west-1a\n").unwrap();
    k.ok(&["apply", "-f", cluster.to_str().unwrap()]);
    let clusters = k.ok(&["get", "clusters"]);
    assert!(
        clusters.contains("REGION") && clusters.contains("eu-west-1a"),
        "{clusters}"
    );

    // Client-side validation failures are reported, not applied.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        example("app.yaml").replace("replicas: 3", "replicas: 3\n  replicaz: 4"),
    )
    .unwrap();
    let out = k.run(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("replicaz"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // wait --for=delete returns once a finalizer-held object finally goes.
    k.ok(&["create", "configmap", "held", "-n", "shop"]);
    k.ok(&[
        "patch",
        "configmap",
        "held",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
    ]);
    k.ok(&["delete", "configmap", "held", "-n", "shop", "--wait=false"]);
    let mut waiter = k
        .cmd(&[
            "wait",
            "--for=delete",
            "configmap/held",
            "-n",
            "shop",
            "--timeout=60s",
        ])
        .spawn()
        .unwrap();
    k.ok(&[
        "patch",
        "configmap",
        "held",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    assert!(waiter.wait().unwrap().success());

    // The namespace goes first and takes its contents with it, so the later deletes may
    // find nothing left (as they can on a real cluster).
    let out = k.ok(&["delete", "-f", edited, "--ignore-not-found"]);
    assert!(out.contains("namespace \"shop\" deleted"), "{out}");
    let gone = k.run(&["get", "ns", "shop"]);
    let err = String::from_utf8_lossy(&gone.stderr);
    assert!(!gone.status.success() && err.contains("NotFound"), "{err}");
}

/// An operator's install manifest (ServiceAccount, ClusterRole, ClusterRoleBinding,
/// Deployment, Service) applies into the namespaces a fresh federation starts with, with
/// kubectl's client-side validation on (it downloads the OpenAPI documents first).
#[test]
fn an_operator_install_manifest_applies_into_the_default_namespace() {
    // No workload controller runs here to release deleted Deployments.
    let (server, dir) = Server::start(&["--disable-admission-plugins=MemberCleanup"]);
    let k = Kubectl {
        bin: meridian_e2e::kubectl_path(),
        kubeconfig: server.kubeconfig().to_owned(),
    };

    let namespaces = k.ok(&["get", "namespaces", "--no-headers"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            namespaces
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns)),
            "{ns} missing:\n{namespaces}"
        );
    }
    // No `-n`: the default namespace is there from the first start.
    k.ok(&["create", "configmap", "foo", "--from-literal=a=b"]);

    let manifest = dir.path().join("operator.yaml");
    std::fs::write(&manifest, example("operator-rbac.yaml")).unwrap();
    let manifest = manifest.to_str().unwrap();
    let out = k.ok(&["apply", "--validate=strict", "-f", manifest]);
    for created in [
        "serviceaccount/example-operator created",
        "clusterrole.rbac.authorization.k8s.io/example-operator created",
        "clusterrolebinding.rbac.authorization.k8s.io/example-operator created",
        "deployment.apps/example-operator created",
        "service/example-operator created",
    ] {
        assert!(out.contains(created), "{created} missing:\n{out}");
    }
    let out = k.ok(&["apply", "-f", manifest]);
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/example-operator unchanged"),
        "{out}"
    );

    let binding = k.ok(&["get", "clusterrolebinding", "example-operator"]);
    assert!(
        binding.contains("ROLE") && binding.contains("ClusterRole/example-operator"),
        "{binding}"
    );
    let role = k.json(&["get", "clusterrole", "example-operator"]);
    assert_eq!(
        role["rules"][3]["verbs"],
        serde_json::json!(["list", "delete"])
    );
    let explain = k.ok(&["explain", "clusterrolebinding.roleRef"]);
    assert!(explain.contains("apiGroup"), "{explain}");
    let explain = k.ok(&["explain", "serviceaccount.automountServiceAccountToken"]);
    assert!(explain.contains("boolean"), "{explain}");

    // A field the schema lacks is caught by the server's strict field validation.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: bad\nrulez: []\n",
    )
    .unwrap();
    let out = k.run(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rulez"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The namespaces kube-apiserver keeps can't be deleted, as upstream.
    for ns in ["default", "kube-system", "kube-public"] {
        let out = k.run(&["delete", "namespace", ns]);
        assert!(!out.status.success(), "namespace {ns} was deleted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "namespaces \"{ns}\" is forbidden: this namespace may not be deleted"
            )),
            "{err}"
        );
    }

    let out = k.ok(&["delete", "-f", manifest]);
    assert!(
        out.contains("clusterrolebinding.rbac.authorization.k8s.io \"example-operator\" deleted"),
        "{out}"
    );
    let left = k.run(&["get", "serviceaccount", "example-operator"]);
    assert!(!left.status.success());
}

#[test]
fn override_policies_through_kubectl() {
    let (server, dir) = Server::start(&[]);
    let k = Kubectl {
        bin: meridian_e2e::kubectl_path(),
        kubeconfig: server.kubeconfig().to_owned(),
    };
    let resources = k.ok(&["api-resources", "--api-group=federation.meridian.dev"]);
    for (plural, short) in [
        ("overridepolicies", "op"),
        ("clusteroverridepolicies", "cop"),
    ] {
        assert!(
            resources
                .lines()
                .any(|l| l.starts_with(plural) && l.contains(short)),
            "api-resources lacks {plural} ({short}):\n{resources}"
        );
    }
    k.ok(&["create", "namespace", "shop"]);
    let good = dir.path().join("op.yaml");
    std::fs::write(
        &good,
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {name: web-regions, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  overrideRules:
  - targetCluster: {regions: [cn-north]}
    overriders:
      imageOverrider:
      - {component: Registry, operator: replace, value: registry.cn.example}
      plaintext:
      - {path: /spec/template/spec/nodeSelector, operator: add, value: {disk: ssd}}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: ClusterOverridePolicy
metadata: {name: mirror}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  overrideRules:
  - overriders:
      labelsOverrider:
      - {operator: add, value: {mirrored: "yes"}}
"#,
    )
    .unwrap();
    k.ok(&["apply", "-f", good.to_str().unwrap()]);
    let table = k.ok(&["get", "op", "-n", "shop"]);
    assert!(
        table.contains("SELECTORS") && table.contains("RULES") && table.contains("web-regions"),
        "{table}"
    );
    let cop = k.json(&["get", "cop", "mirror"]);
    assert_eq!(
        cop["spec"]["overrideRules"][0]["overriders"]["labelsOverrider"][0]["value"]["mirrored"],
        "yes"
    );

    // A bad policy is refused with the field and the reason.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: OverridePolicy
metadata: {name: bad, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment}
  overrideRules:
  - overriders:
      imageOverrider:
      - {component: Layer, operator: replace, value: x}
      plaintext:
      - {path: spec/replicas, operator: replace, value: 1}
"#,
    )
    .unwrap();
    let out = k.run(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "spec.overrideRules[0].overriders.imageOverrider[0].component",
        "spec.overrideRules[0].overriders.plaintext[0].path",
        "JSON pointer",
    ] {
        assert!(err.contains(want), "{want} not in:\n{err}");
    }
}

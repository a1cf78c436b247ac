//! `fedctl plan` as a user runs it: the real binary over the fixture files, no server.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fed-scheduler/testdata/plan")
        .join(name)
        .display()
        .to_string()
}

fn fedctl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fedctl"))
        .args(args)
        // Planning must not need a kubeconfig.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("FEDCTL_KUBECONFIG")
        .output()
        .expect("running fedctl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn plan_table_and_what_if() {
    let (fleet, app) = (fixture("fleet.yaml"), fixture("app.yaml"));
    let (ok, out, err) = fedctl(&["plan", "-f", &fleet, "-f", &app]);
    assert!(ok, "{err}");
    let web = out
        .lines()
        .find(|l| l.contains("deployment/web"))
        .expect("web row");
    assert!(
        web.contains("eu-west-1:3,eu-west-2:7") && web.contains("True Scheduled"),
        "{out}"
    );
    let api = out
        .lines()
        .find(|l| l.contains("deployment/api"))
        .expect("api row");
    assert!(
        api.contains("<none>") && api.contains("False NoPolicy"),
        "{out}"
    );
    assert!(
        out.contains("shop/deployment-api: no PropagationPolicy selects the workload"),
        "{out}"
    );

    let (ok, out, err) = fedctl(&["plan", "-f", &fleet, "-f", &app, "--without", "eu-west-2"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("# without: eu-west-2"), "{out}");
    let web = out
        .lines()
        .find(|l| l.contains("deployment/web"))
        .expect("web row");
    assert!(
        web.contains("eu-west-1:8") && web.contains("was eu-west-1:3,eu-west-2:7"),
        "{out}"
    );
    assert!(out.contains("  eu-west-2 ClusterOffline:"), "{out}");
}

#[test]
fn plan_yaml_and_errors() {
    let (fleet, app) = (fixture("fleet.yaml"), fixture("app.yaml"));
    let (ok, out, err) = fedctl(&[
        "plan",
        "-f",
        &fleet,
        "-f",
        &app,
        "-o",
        "yaml",
        "--without",
        "us-east-1",
    ]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_yaml_ng::from_str(&out).expect("yaml output");
    assert_eq!(doc["without"][0], "us-east-1");
    let batch = doc["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .find(|w| w["name"] == "batch")
        .expect("batch");
    assert_eq!(
        batch["destClusters"],
        serde_json::json!([{"cluster": "eu-west-1", "replicas": 3}, {"cluster": "eu-west-2", "replicas": 3}])
    );
    assert_eq!(batch["scheduled"]["reason"], "Scheduled");

    let (ok, _, err) = fedctl(&["plan", "-f", &fleet, "--without", "mars-1"]);
    assert!(!ok);
    assert!(
        err.contains("unknown clusters in --without: mars-1"),
        "{err}"
    );
    let (ok, _, err) = fedctl(&["plan", "-f", "/nonexistent.yaml"]);
    assert!(!ok);
    assert!(err.contains("reading /nonexistent.yaml"), "{err}");
}

#[test]
fn plan_every_kind_with_each_members_object() {
    let file = fixture("any-kind.yaml");
    let (ok, out, err) = fedctl(&["plan", "-f", &file]);
    assert!(ok, "{err}");
    let row = |what: &str| {
        out.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what} row in\n{out}"))
            .to_owned()
    };
    assert!(row("rollout/canary").contains("eu-1:2,us-1:4"), "{out}");
    assert!(row("ingress/web").contains("eu-1:0,us-1:0"), "{out}");
    assert!(row("clusterrole/shop-reader").starts_with('-'), "{out}");
    assert!(
        row("rollout/broken").contains("False InvalidWorkload"),
        "{out}"
    );
    assert!(!out.contains("configmap/notes"), "{out}");

    let (ok, out, err) = fedctl(&["plan", "-f", &file, "-o", "yaml"]);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_yaml_ng::from_str(&out).expect("yaml output");
    let entry = |kind: &str, name: &str| {
        doc["workloads"]
            .as_array()
            .expect("workloads")
            .iter()
            .find(|w| w["kind"] == kind && w["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{out}"))
            .clone()
    };
    let member = |e: &serde_json::Value, cluster: &str| {
        e["members"]
            .as_array()
            .expect("members")
            .iter()
            .find(|m| m["cluster"] == cluster)
            .unwrap_or_else(|| panic!("no {cluster} in {e}"))["object"]
            .clone()
    };
    // Each member's Rollout with its share, as the copy controller writes it.
    let canary = entry("Rollout", "canary");
    assert_eq!(member(&canary, "eu-1")["spec"]["replicas"], 2);
    assert_eq!(member(&canary, "us-1")["spec"]["replicas"], 4);
    assert_eq!(
        member(&canary, "us-1")["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "meridian"
    );
    // The override applies in us only.
    let ingress = entry("Ingress", "web");
    assert_eq!(
        member(&ingress, "eu-1")["spec"]["ingressClassName"],
        "shared"
    );
    assert_eq!(
        member(&ingress, "us-1")["spec"]["ingressClassName"],
        "us-lb"
    );
    // Copies as they are; the Deployment with its share.
    assert_eq!(
        member(&entry("Role", "web"), "us-1")["rules"][0]["verbs"],
        serde_json::json!(["get"])
    );
    assert_eq!(
        member(&entry("ClusterRole", "shop-reader"), "eu-1")["metadata"]["name"],
        "shop-reader"
    );
    assert_eq!(
        member(&entry("Deployment", "web"), "eu-1")["spec"]["replicas"],
        2
    );
    assert!(
        entry("Rollout", "broken")["members"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
}

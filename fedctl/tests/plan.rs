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

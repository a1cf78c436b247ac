//! `fedctl up`: one command brings up the federation with a joined simulated fleet.

use meridian_e2e::{Proc, binary, kubectl_path};

#[test]
fn fedctl_up_runs_a_joined_fleet_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut up = Proc::spawn(
        &binary("fedctl"),
        &[
            "up".into(),
            "--clusters=2".into(),
            "--port=0".into(),
            format!("--data-dir={}", data.display()),
        ],
        "export KUBECONFIG=",
    );
    let kubeconfig = up
        .banner
        .last()
        .unwrap()
        .trim_start_matches("export KUBECONFIG=")
        .to_string();
    let out = std::process::Command::new(kubectl_path())
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .args(["get", "clusters", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        vec!["sim-1=True", "sim-2=True"],
        "{text}"
    );
    // The sim contexts are in the same kubeconfig.
    let nodes = std::process::Command::new(kubectl_path())
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .args(["--context", "sim-2", "get", "nodes", "-o", "name"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&nodes.stdout).lines().count(), 3);
    let status = up.terminate();
    assert!(status.success(), "fedctl up exited with {status}");
    // State stays in the data directory.
    assert!(data.join("federation/store").exists());
}

//! Helm 4 and Helm 3 against Meridian: the `helm create` scaffold installed, upgraded with a
//! changed value, rolled back and uninstalled, leaving nothing behind, into the federation
//! and into a cluster-sim cluster (there with `--wait`, which waits for the simulated pods, and
//! `helm test`, whose hook pod the simulated kubelet runs to completion).

use std::time::{Duration, Instant};

use meridian_e2e::Env;
use meridian_e2e::helm::Helm;
use serde_json::Value;

/// Values set on the scaffold beyond its defaults, at every install and upgrade: its
/// Ingress and HorizontalPodAutoscaler as well (comment a line out to leave one off).
const SCAFFOLD_VALUES: &[&str] = &["ingress.enabled=true", "autoscaling.enabled=true"];

/// What a namespace holds of its own, with no release in it: its default ServiceAccount,
/// that one's token Secret (cluster-sim makes one, as the legacy token controller did) and
/// the root CA ConfigMap.
fn namespace_own(name: &str) -> bool {
    ["configmap/kube-root-ca.crt", "serviceaccount/default"].contains(&name)
        || name.starts_with("secret/default-token-")
}

#[test]
fn helm4_installs_upgrades_rolls_back_and_uninstalls_the_scaffold() {
    scaffold_lifecycle(4);
}

#[test]
fn helm3_installs_upgrades_rolls_back_and_uninstalls_the_scaffold() {
    scaffold_lifecycle(3);
}

fn scaffold_lifecycle(major: u8) {
    // No controllers run: uninstalling deletes the Deployment at once.
    let env = Env::start_without_controllers(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let helm = Helm::new(major, &env.merged);
    let chart = helm.dir().join("demo");
    let chart = chart.to_str().expect("utf-8 path");
    helm.ok(&["create", chart]);
    // The federation stores and propagates; no member is joined, so nothing runs and
    // --wait would wait for pods that never come.
    release_lifecycle(
        &env,
        &helm,
        chart,
        "meridian",
        &format!("demo-h{major}"),
        false,
    );
    release_lifecycle(&env, &helm, chart, "sim-1", &format!("demo-h{major}"), true);
}

/// install → upgrade (the Service's port 80 → 8080; replicas stay the HPA's when it is on)
/// → rollback to 80 → uninstall, in `context`.
fn release_lifecycle(env: &Env, helm: &Helm, chart: &str, context: &str, ns: &str, wait: bool) {
    let sets: Vec<String> = SCAFFOLD_VALUES
        .iter()
        .flat_map(|v| ["--set".to_string(), v.to_string()])
        .collect();
    let helm_in = |args: &[&str]| {
        let mut all = vec!["--kube-context", context, "--namespace", ns];
        all.extend_from_slice(args);
        if wait && matches!(args[0], "install" | "upgrade" | "rollback" | "uninstall") {
            all.extend_from_slice(&["--wait", "--timeout=120s"]);
        }
        helm.ok(&all)
    };
    let port = || {
        env.ok(
            "kubectl",
            &[
                "--context",
                context,
                "get",
                "svc/demo",
                "-n",
                ns,
                "-o",
                "jsonpath={.spec.ports[0].port}",
            ],
        )
    };
    let replicas = || {
        env.ok(
            "kubectl",
            &[
                "--context",
                context,
                "get",
                "deploy/demo",
                "-n",
                ns,
                "-o",
                "jsonpath={.spec.replicas}/{.status.readyReplicas}",
            ],
        )
    };
    let status = || -> Value {
        serde_json::from_str(&helm_in(&["status", "demo", "-o", "json"])).expect("status JSON")
    };

    let mut install = vec!["install", "demo", chart, "--create-namespace"];
    install.extend(sets.iter().map(String::as_str));
    helm_in(&install);
    let s = status();
    assert_eq!(
        (s["info"]["status"].as_str(), s["version"].as_i64()),
        (Some("deployed"), Some(1)),
        "{s:#}"
    );
    // With --wait Helm returned once the simulated pod was ready.
    assert_eq!(replicas(), if wait { "1/1" } else { "1/" });
    // The optional kinds are there when turned on.
    for (value, object) in [
        ("ingress.enabled=true", "ingress/demo"),
        ("autoscaling.enabled=true", "horizontalpodautoscaler/demo"),
    ] {
        if SCAFFOLD_VALUES.contains(&value) {
            let name = env.ok(
                "kubectl",
                &["--context", context, "get", object, "-n", ns, "-o", "name"],
            );
            assert!(name.trim().ends_with("/demo"), "{object}: {name}");
        }
    }

    let mut upgrade = vec!["upgrade", "demo", chart, "--set", "service.port=8080"];
    upgrade.extend(sets.iter().map(String::as_str));
    helm_in(&upgrade);
    let s = status();
    assert_eq!(
        (s["info"]["status"].as_str(), s["version"].as_i64()),
        (Some("deployed"), Some(2)),
        "{s:#}"
    );
    assert_eq!(port(), "8080");
    assert_eq!(replicas(), if wait { "1/1" } else { "1/" });

    helm_in(&["rollback", "demo", "1"]);
    let s = status();
    assert_eq!(
        (s["info"]["status"].as_str(), s["version"].as_i64()),
        (Some("deployed"), Some(3)),
        "{s:#}"
    );
    assert_eq!(port(), "80");
    let history: Value =
        serde_json::from_str(&helm_in(&["history", "demo", "-o", "json"])).expect("history JSON");
    let statuses: Vec<&str> = history
        .as_array()
        .expect("a list of revisions")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        statuses,
        ["superseded", "superseded", "deployed"],
        "{history:#}"
    );

    if wait {
        // The scaffold's test hook is a run-to-completion pod: cluster-sim runs it to
        // Succeeded, which is what `helm test` waits for.
        let out = helm_in(&["test", "demo", "--timeout=120s"]);
        assert!(
            out.contains("demo-test-connection") && out.contains("Succeeded"),
            "{out}"
        );
        // Helm does not track what hooks create, so uninstall leaves the test pod (as on any
        // cluster): remove it as a user would.
        env.ok(
            "kubectl",
            &[
                "--context",
                context,
                "delete",
                "pod/demo-test-connection",
                "-n",
                ns,
            ],
        );
    }

    helm_in(&["uninstall", "demo"]);
    // No release record is left in any state.
    let gone = [
        "--kube-context",
        context,
        "--namespace",
        ns,
        "status",
        "demo",
    ];
    let out = helm.run(&gone);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("not found"),
        "{stderr}"
    );
    // The federation stores no pods; a cluster-sim cluster runs them.
    let kinds = if wait {
        "deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,ingresses,horizontalpodautoscalers"
    } else {
        "deployments,replicasets,services,serviceaccounts,secrets,configmaps,ingresses,horizontalpodautoscalers"
    };
    // Deleting the Deployment takes its ReplicaSets and pods with it (garbage collection,
    // in the background): poll until the namespace holds only what it had of its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = env.ok(
            "kubectl",
            &["--context", context, "get", kinds, "-n", ns, "-o", "name"],
        );
        let left: Vec<&str> = left.lines().filter(|l| !namespace_own(l)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left in {context}/{ns} after helm uninstall: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

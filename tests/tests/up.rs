//! `fedctl up`: one command brings up the federation with a joined simulated fleet, and
//! the README's walk-through runs against it: apply the example, roll it out, delete it.

use meridian_e2e::Up;

#[test]
fn fedctl_up_runs_a_joined_fleet_and_stops_cleanly() {
    let mut up = Up::start(2);
    let text = up.kubectl(&["get", "clusters", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}"]);
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        vec!["sim-1=True", "sim-2=True"],
        "{text}"
    );
    // The sim contexts are in the same kubeconfig.
    let nodes = up.kubectl(&["--context", "sim-2", "get", "nodes", "-o", "name"]);
    assert_eq!(nodes.lines().count(), 3);

    // The walk-through: the example rolls out over both members...
    let example = up.apply_example();
    let table = up.kubectl(&["get", "deploy", "web", "-n", "shop"]);
    assert!(table.contains("10/10"), "{table}");
    // The policy comes after the Deployment in the file, so the copies may follow the
    // first placement by a moment: kubectl waits for them (it watches).
    for member in ["sim-1", "sim-2"] {
        up.kubectl(&[
            "--context",
            member,
            "wait",
            "--for=create",
            "deploy/web",
            "-n",
            "shop",
            "--timeout=60s",
        ]);
    }
    // The service controller's lb-agent ConfigMap in each member (not a workload
    // dependency: the workload controller never collects it).
    let lb_agent_config = |member: &str| {
        up.kubectl(&[
            "--context",
            member,
            "get",
            "configmap",
            "meridian-lb-agent-config",
            "-n",
            "meridian-system",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    };
    let lb_agent_configs: Vec<String> = ["sim-1", "sim-2"].map(lb_agent_config).into();
    // ...and `kubectl delete -f` of the same file succeeds as a whole: the namespace takes
    // the workload down first, so the policy and ConfigMap after it in the file are still
    // there to delete while the members are cleaned. kubectl waits until all are gone, and
    // the members drop the unused web-config before the Deployment's finalizer clears.
    let deleted = up.kubectl(&["delete", "-f", example, "--timeout=120s"]);
    assert!(
        deleted.contains("propagationpolicy.federation.meridian.dev \"web\" deleted"),
        "{deleted}"
    );
    for member in ["sim-1", "sim-2"] {
        let left = up.kubectl(&[
            "--context",
            member,
            "get",
            "deploy,configmap",
            "-n",
            "shop",
            "-o",
            "name",
        ]);
        assert!(
            !left.contains("deployment.apps/web") && !left.contains("configmap/web-config"),
            "{member} still holds: {left}"
        );
    }
    // The collection that removed web-config left the lb-agent's ConfigMap as it was.
    let after: Vec<String> = ["sim-1", "sim-2"].map(lb_agent_config).into();
    assert_eq!(
        after, lb_agent_configs,
        "lb-agent ConfigMaps deleted and recreated"
    );

    let status = up.proc.terminate().expect("waiting for fedctl up");
    assert!(status.success(), "fedctl up exited with {status}");
    // State stays in the data directory.
    assert!(up.data.join("federation/store").exists());
}

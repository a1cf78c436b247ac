//! End-to-end: `autoscaling/v1` HorizontalPodAutoscalers with kubectl 1.37 against the
//! federation and a cluster-sim cluster. `kubectl autoscale` (which writes v2) is read
//! back through v1 and v2; a v1 manifest is applied client-side, then server-side, and
//! read through v2; `kubectl explain` knows v1's fields.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use meridian_e2e::{Env, poll_until_or};
use serde_json::Value;

const NAMESPACE: &str = "scaling";
/// The resource at each version. Not `hpa.v1.autoscaling`: kubectl drops the version of a
/// short name it expands, and reads the preferred one (v2).
const V1: &str = "horizontalpodautoscalers.v1.autoscaling";
const V2: &str = "horizontalpodautoscalers.v2.autoscaling";

/// A v1 manifest with `max` as its upper bound.
fn manifest(max: u32) -> String {
    format!(
        "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: api\n  namespace: {NAMESPACE}\nspec:\n  scaleTargetRef:\n    apiVersion: apps/v1\n    kind: Deployment\n    name: api\n  minReplicas: 2\n  maxReplicas: {max}\n  targetCPUUtilizationPercentage: 65\n"
    )
}

struct Target<'a> {
    env: &'a Env,
    /// `--context` for a member; `None` for the federation (the current context).
    context: Option<&'a str>,
}

impl Target<'_> {
    fn args<'b>(&'b self, args: &[&'b str]) -> Vec<&'b str> {
        let mut all = Vec::new();
        if let Some(c) = self.context {
            all.extend(["--context", c]);
        }
        all.extend_from_slice(args);
        all
    }

    fn ok(&self, args: &[&str]) -> String {
        self.env.ok("kubectl", &self.args(args))
    }

    fn name(&self) -> &str {
        self.context.unwrap_or("federation")
    }

    /// `kubectl get <resource> <name> -o yaml`, read.
    fn yaml(&self, resource: &str, name: &str) -> Value {
        let out = self.ok(&["get", resource, name, "-n", NAMESPACE, "-o", "yaml"]);
        serde_yaml_ng::from_str(&out).unwrap()
    }

    fn apply(&self, file: &str, text: &str, extra: &[&str]) -> String {
        let path = self.env.dir.path().join(format!("{}-{file}", self.name()));
        std::fs::write(&path, text).unwrap();
        let mut args = vec!["apply", "-f", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.ok(&args)
    }
}

/// The JSON an annotation of `o` holds.
fn annotation(o: &Value, key: &str) -> Value {
    let text = o["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} annotation in {o}"));
    serde_json::from_str(text).unwrap()
}

fn check(t: &Target<'_>) {
    let who = t.name();
    t.ok(&["create", "namespace", NAMESPACE]);
    t.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "-n",
        NAMESPACE,
    ]);

    // kubectl writes autoscaling/v2; both versions read the one object.
    let out = t.ok(&[
        "autoscale",
        "deployment",
        "web",
        "-n",
        NAMESPACE,
        "--min=2",
        "--max=5",
        "--cpu=60%",
        "--memory=70%",
    ]);
    assert!(
        out.contains("horizontalpodautoscaler.autoscaling/web autoscaled"),
        "{who}: {out}"
    );
    let v1 = t.yaml(V1, "web");
    assert_eq!(v1["apiVersion"], "autoscaling/v1", "{who}: {v1}");
    assert_eq!(
        v1["spec"]["targetCPUUtilizationPercentage"], 60,
        "{who}: {v1}"
    );
    assert_eq!(v1["spec"]["minReplicas"], 2, "{who}: {v1}");
    assert!(v1["spec"].get("metrics").is_none(), "{who}: {v1}");
    let others = annotation(&v1, "autoscaling.alpha.kubernetes.io/metrics");
    assert_eq!(
        others,
        serde_json::json!([{"type": "Resource",
            "resource": {"name": "memory", "targetAverageUtilization": 70}}]),
        "{who}"
    );
    let v2 = t.yaml(V2, "web");
    assert_eq!(v2["apiVersion"], "autoscaling/v2", "{who}: {v2}");
    assert_eq!(
        v2["spec"]["metrics"].as_array().map(Vec::len),
        Some(2),
        "{who}: {v2}"
    );
    // REPLICAS: none in the federation (no HPA runs there); in a member the HPA has
    // raised its target to minReplicas (cluster-sim's HPA loop), reported moments later.
    let replicas = if t.context.is_some() { "2" } else { "0" };
    for resource in [V2, V1] {
        let row =
            format!("web Deployment/web cpu: <unknown>/60%, memory: <unknown>/70% 2 5 {replicas} ");
        let mut last = String::new();
        let shown = poll_until_or(Duration::from_secs(30), || {
            last = t.ok(&["get", resource, "web", "-n", NAMESPACE]);
            let lines: Vec<String> = last
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            let header = lines.first().map(String::as_str)
                == Some("NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE");
            (header && lines.get(1).is_some_and(|l| l.starts_with(&row))).then_some(())
        });
        assert!(shown.is_some(), "{who}: {resource}: no row {row:?}\n{last}");
    }

    // A v1 manifest: created, unchanged when applied again, stored as v2.
    let out = t.apply("api.yaml", &manifest(6), &[]);
    assert!(
        out.contains("horizontalpodautoscaler.autoscaling/api created"),
        "{who}: {out}"
    );
    let out = t.apply("api.yaml", &manifest(6), &[]);
    assert!(
        out.contains("horizontalpodautoscaler.autoscaling/api unchanged"),
        "{who}: {out}"
    );
    let v2 = t.yaml(V2, "api");
    assert_eq!(
        v2["spec"]["metrics"],
        serde_json::json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 65}}}]),
        "{who}: {v2}"
    );

    // Then server-side, as the same manager kubectl moves to.
    let out = t.apply("api.yaml", &manifest(7), &["--server-side"]);
    assert!(out.contains("serverside-applied"), "{who}: {out}");
    let v2 = t.yaml(V2, "api");
    assert_eq!(v2["spec"]["maxReplicas"], 7, "{who}: {v2}");
    let managed = t.ok(&[
        "get",
        V1,
        "api",
        "-n",
        NAMESPACE,
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager} {.operation} {.apiVersion};{end}",
    ]);
    assert!(
        managed.contains("kubectl Apply autoscaling/v1;"),
        "{who}: {managed}"
    );

    let explained = t.ok(&[
        "explain",
        "hpa.spec.targetCPUUtilizationPercentage",
        "--api-version=autoscaling/v1",
    ]);
    assert!(
        explained.contains("FIELD: targetCPUUtilizationPercentage"),
        "{who}: {explained}"
    );

    t.ok(&["delete", "hpa", "web", "api", "-n", NAMESPACE]);
    let left = t.ok(&["get", V1, "-n", NAMESPACE, "-o", "name"]);
    assert!(left.trim().is_empty(), "{who}: left behind: {left}");
}

#[test]
fn kubectl_reads_and_writes_hpas_through_autoscaling_v1() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    for context in [None, Some("sim-1")] {
        check(&Target { env: &env, context });
    }
}

//! The STATUS column of `kubectl get pods`, computed from a pod as kubectl's pod printer
//! (`printPod` in kubernetes' `pkg/printers/internalversion/printers.go`) computes it:
//! `Init:N/M` or `Init:<reason>` while init containers run, the last container's waiting or
//! terminated reason (`CrashLoopBackOff`, `ErrImagePull`, `Completed`, `Error`), then
//! `Terminating` for a pod being deleted that has not finished.

use serde_json::Value;

/// The NodeController's reason for pods on an unreachable node (`Unknown` when deleted).
const NODE_UNREACHABLE: &str = "NodeLost";

fn str_of<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn statuses<'a>(pod: &'a Value, field: &str) -> &'a [Value] {
    pod.pointer(&format!("/status/{field}"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `Signal:N` / `ExitCode:N` for a termination without a reason.
fn exit_text(terminated: &Value) -> String {
    match terminated.get("signal").and_then(Value::as_i64) {
        Some(s) if s != 0 => format!("Signal:{s}"),
        _ => format!(
            "ExitCode:{}",
            terminated
                .get("exitCode")
                .and_then(Value::as_i64)
                .unwrap_or(0)
        ),
    }
}

/// Whether the init container `name` is a native sidecar (`restartPolicy: Always`).
fn is_sidecar(pod: &Value, name: &str) -> bool {
    pod.pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("name").and_then(Value::as_str) == Some(name)
                && c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
        })
}

fn condition_true(pod: &Value, type_: &str) -> bool {
    statuses(pod, "conditions")
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// What the STATUS column shows for `pod`.
pub fn status_column(pod: &Value) -> String {
    let phase = str_of(pod, "/status/phase").unwrap_or("");
    let mut reason = str_of(pod, "/status/reason").unwrap_or(phase).to_string();
    let init_total = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let mut initializing = false;
    for (i, c) in statuses(pod, "initContainerStatuses").iter().enumerate() {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let terminated = c.pointer("/state/terminated");
        let waiting = str_of(c, "/state/waiting/reason");
        if terminated.is_some_and(|t| t.get("exitCode").and_then(Value::as_i64) == Some(0)) {
            continue;
        }
        if is_sidecar(pod, name) && c.get("started").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        reason = match (terminated, waiting) {
            (Some(t), _) => match str_of(t, "/reason") {
                Some(r) => format!("Init:{r}"),
                None => format!("Init:{}", exit_text(t)),
            },
            (None, Some(w)) if w != "PodInitializing" => format!("Init:{w}"),
            _ => format!("Init:{i}/{init_total}"),
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(pod, "Initialized") {
        let mut has_running = false;
        for c in statuses(pod, "containerStatuses").iter().rev() {
            let terminated = c.pointer("/state/terminated");
            if let Some(w) = str_of(c, "/state/waiting/reason") {
                reason = w.to_string();
            } else if let Some(t) = terminated {
                reason = str_of(t, "/reason").map_or_else(|| exit_text(t), str::to_string);
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                has_running = true;
            }
        }
        // A container still running after another completed: the pod is not done.
        if reason == "Completed" && has_running {
            reason = if condition_true(pod, "Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && str_of(pod, "/status/reason") == Some(NODE_UNREACHABLE) {
        "Unknown".into()
    } else if deleting && !matches!(phase, "Succeeded" | "Failed") {
        "Terminating".into()
    } else {
        reason
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(phase: &str, init: Value, containers: Value) -> Value {
        let init_specs: Vec<Value> = init
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!({"name": c["name"], "restartPolicy": c.get("restartPolicy")}))
            .collect();
        json!({
            "metadata": {"name": "p"},
            "spec": {"initContainers": init_specs, "containers": []},
            "status": {"phase": phase, "initContainerStatuses": init, "containerStatuses": containers},
        })
    }

    #[test]
    fn status_column_matches_kubectl() {
        let running = json!({"name": "a", "ready": true, "state": {"running": {}}});
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "phase",
                pod("Running", json!([]), json!([running])),
                "Running",
            ),
            (
                "crash loop",
                pod(
                    "Running",
                    json!([]),
                    json!([{"name": "a", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
                ),
                "CrashLoopBackOff",
            ),
            (
                "image pull",
                pod(
                    "Pending",
                    json!([]),
                    json!([{"name": "a", "state": {"waiting": {"reason": "ErrImagePull"}}}]),
                ),
                "ErrImagePull",
            ),
            (
                "completed",
                pod(
                    "Succeeded",
                    json!([]),
                    json!([{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]),
                ),
                "Completed",
            ),
            (
                "exit code without reason",
                pod(
                    "Failed",
                    json!([]),
                    json!([{"name": "a", "state": {"terminated": {"exitCode": 3}}}]),
                ),
                "ExitCode:3",
            ),
            (
                "one completed, one still running and ready",
                json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [running,
                        {"name": "b", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
                "Running",
            ),
            (
                "first init container running",
                pod(
                    "Pending",
                    json!([{"name": "i", "state": {"running": {}}}, {"name": "j", "state": {"waiting": {"reason": "PodInitializing"}}}]),
                    json!([{"name": "a", "state": {"waiting": {"reason": "PodInitializing"}}}]),
                ),
                "Init:0/2",
            ),
            (
                "second init container running",
                pod(
                    "Pending",
                    json!([{"name": "i", "state": {"terminated": {"exitCode": 0}}}, {"name": "j", "state": {"running": {}}}]),
                    json!([]),
                ),
                "Init:1/2",
            ),
            (
                "init container crash looping",
                pod(
                    "Pending",
                    json!([{"name": "i", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]),
                    json!([]),
                ),
                "Init:CrashLoopBackOff",
            ),
            (
                "init container failed",
                pod(
                    "Failed",
                    json!([{"name": "i", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]),
                    json!([]),
                ),
                "Init:Error",
            ),
            (
                "started sidecar does not hold the pod in Init",
                pod(
                    "Running",
                    json!([{"name": "s", "restartPolicy": "Always", "started": true, "state": {"running": {}}}]),
                    json!([running]),
                ),
                "Running",
            ),
            (
                "terminating",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                    "status": {"phase": "Running", "containerStatuses": [running]}}),
                "Terminating",
            ),
            (
                "a finished pod being deleted keeps its reason",
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                    "status": {"phase": "Succeeded", "containerStatuses":
                        [{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
                "Completed",
            ),
            ("no status yet", json!({"metadata": {}}), ""),
        ];
        for (name, pod, want) in cases {
            assert_eq!(status_column(&pod), want, "{name}");
        }
    }
}

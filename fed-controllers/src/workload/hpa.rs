//! Member HorizontalPodAutoscalers: where Meridian's copy of an HPA in a member scales a
//! workload's copy, the `spec.replicas` that HPA writes there are not drift. The copy is
//! still created with the member's share; afterwards only the rest of what Meridian owns
//! is kept in line.

use kube::api::{ApiResource, GroupVersionKind};
use serde_json::Value;

use super::kinds::{Kind, WorkloadKey};
use crate::copies::member_copy::group_of;

/// The `autoscaling/v2` HorizontalPodAutoscaler resource watched in members.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler"),
        "horizontalpodautoscalers",
    )
}

/// The workload an HPA (in `namespace`) scales, if it is one with replicas: a Job has no
/// scale subresource, and an HPA of another kind is not the workload controller's concern.
pub fn target(namespace: &str, hpa: &Value) -> Option<WorkloadKey> {
    let r = hpa.pointer("/spec/scaleTargetRef")?;
    let group = group_of(r.get("apiVersion").and_then(Value::as_str)?);
    let kind = Kind::of_group(group, r.get("kind").and_then(Value::as_str)?)
        .filter(|k| *k != Kind::Job)?;
    let name = r
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())?;
    Some(WorkloadKey::new(kind, namespace, name))
}

/// `desired` (the workload's copy for a member) as the member should hold it when `actual`
/// is scaled by an HPA there: its replicas are the member's.
pub fn with_member_replicas(desired: &Value, actual: &Value) -> Value {
    let mut out = desired.clone();
    if let Some(spec) = out.get_mut("spec").and_then(Value::as_object_mut) {
        match actual.pointer("/spec/replicas") {
            Some(r) if !r.is_null() => {
                spec.insert("replicas".into(), r.clone());
            }
            _ => {
                spec.remove("replicas");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::workload::drift;

    fn hpa(api_version: &str, kind: &str, name: &str) -> Value {
        json!({"spec": {"scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": name},
                        "minReplicas": 1, "maxReplicas": 10}})
    }

    #[test]
    fn targets() {
        // (what, the HPA, the workload it scales)
        let cases = [
            (
                "a Deployment",
                hpa("apps/v1", "Deployment", "web"),
                Some(WorkloadKey::new(Kind::Deployment, "shop", "web")),
            ),
            (
                "a StatefulSet of another version of apps",
                hpa("apps/v1beta2", "StatefulSet", "db"),
                Some(WorkloadKey::new(Kind::StatefulSet, "shop", "db")),
            ),
            (
                "a Job cannot be scaled",
                hpa("batch/v1", "Job", "crunch"),
                None,
            ),
            (
                "a Deployment of another group",
                hpa("example.com/v1", "Deployment", "web"),
                None,
            ),
            ("a custom kind", hpa("example.com/v1", "Widget", "w"), None),
            ("no name", hpa("apps/v1", "Deployment", ""), None),
            ("no target", json!({"spec": {}}), None),
        ];
        for (what, hpa, want) in cases {
            assert_eq!(target("shop", &hpa), want, "{what}");
        }
    }

    #[test]
    fn the_members_replicas_are_kept() {
        let desired = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                             "metadata": {"name": "web"},
                             "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "a:2"}]}}}});
        let scaled = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web", "resourceVersion": "5"},
                            "spec": {"replicas": 8, "template": {"spec": {"containers": [{"name": "c", "image": "a:2"}]}}}});
        assert!(!drift::in_sync(&scaled, &desired), "without an HPA: drift");
        let want = with_member_replicas(&desired, &scaled);
        assert!(drift::in_sync(&scaled, &want), "with one: not drift");
        // Other drift is still repaired, with the member's replicas.
        let mut edited = scaled.clone();
        edited["spec"]["template"]["spec"]["containers"][0]["image"] = json!("evil");
        let want = with_member_replicas(&desired, &edited);
        assert!(!drift::in_sync(&edited, &want));
        let fixed = drift::merged(&edited, &want);
        assert_eq!(fixed["spec"]["replicas"], 8);
        assert_eq!(
            fixed["spec"]["template"]["spec"]["containers"][0]["image"],
            "a:2"
        );
        // A member copy without replicas leaves the server's default alone.
        let bare = json!({"spec": {"template": {}}});
        assert!(
            with_member_replicas(&desired, &bare)["spec"]
                .get("replicas")
                .is_none()
        );
    }
}

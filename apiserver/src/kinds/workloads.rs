//! `apps/v1` StatefulSet, DaemonSet and ControllerRevision: the workloads beside
//! Deployment, with the pod-template rules of [`apps`](super::apps).

use apimachinery::JsonPointer;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, StatefulSet};
use serde_json::{Value, json};

use super::apps::{self, default_pod_spec, validate_workload};
use super::validate::{self, NameRule, invalid, not_supported};
use super::{FnHooks, age_column, column, default_at, int_column};
use crate::registry::ResourceDef;
use crate::status::Cause;

/// The `spec` fields of a StatefulSet that may change after creation (all others are
/// fixed, `serviceName`, `selector`, `volumeClaimTemplates` and `podManagementPolicy`
/// among them).
const STATEFULSET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

fn default_statefulset(o: &mut Value) {
    default_at(o, &["spec", "replicas"], json!(1));
    default_at(o, &["spec", "podManagementPolicy"], json!("OrderedReady"));
    default_at(
        o,
        &["spec", "updateStrategy", "type"],
        json!("RollingUpdate"),
    );
    if o.at("/spec/updateStrategy/type").and_then(Value::as_str) == Some("RollingUpdate") {
        default_at(
            o,
            &["spec", "updateStrategy", "rollingUpdate", "partition"],
            json!(0),
        );
    }
    default_at(o, &["spec", "revisionHistoryLimit"], json!(10));
    for when in ["whenDeleted", "whenScaled"] {
        default_at(
            o,
            &["spec", "persistentVolumeClaimRetentionPolicy", when],
            json!("Retain"),
        );
    }
    if let Some(spec) = o.at_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
    if let Some(claims) = o
        .at_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for claim in claims {
            default_at(claim, &["spec", "volumeMode"], json!("Filesystem"));
            default_at(claim, &["status", "phase"], json!("Pending"));
        }
    }
}

fn validate_statefulset(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate_workload(o, old);
    errs.extend(validate::min_int(
        o,
        "/spec/revisionHistoryLimit",
        "spec.revisionHistoryLimit",
        0,
    ));
    if let Some(p) = o.at("/spec/podManagementPolicy")
        && !matches!(p.as_str(), Some("OrderedReady" | "Parallel"))
    {
        errs.push(not_supported(
            "spec.podManagementPolicy",
            p,
            &["OrderedReady", "Parallel"],
        ));
    }
    errs.extend(update_strategy(o, "RollingUpdate"));
    errs.extend(validate::min_int(
        o,
        "/spec/updateStrategy/rollingUpdate/partition",
        "spec.updateStrategy.rollingUpdate.partition",
        0,
    ));
    for when in ["whenDeleted", "whenScaled"] {
        if let Some(v) = o.at(&format!(
            "/spec/persistentVolumeClaimRetentionPolicy/{when}"
        )) && !matches!(v.as_str(), Some("Retain" | "Delete"))
        {
            errs.push(not_supported(
                &format!("spec.persistentVolumeClaimRetentionPolicy.{when}"),
                v,
                &["Retain", "Delete"],
            ));
        }
    }
    if let Some(old) = old
        && validate::changed_except(o, old, "/spec", STATEFULSET_MUTABLE)
    {
        errs.push(validate::forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
    errs
}

/// `spec.updateStrategy.type` must be `RollingUpdate` or `OnDelete`, and
/// `rollingUpdate` is only allowed with the former.
fn update_strategy(o: &Value, rolling: &str) -> Vec<Cause> {
    let mut errs = Vec::new();
    match o.at("/spec/updateStrategy/type") {
        None => {}
        Some(t) if t.as_str() == Some(rolling) => {}
        Some(t) if t.as_str() == Some("OnDelete") => {
            if let Some(ru) = o
                .at("/spec/updateStrategy/rollingUpdate")
                .filter(|v| !v.is_null())
            {
                errs.push(invalid(
                    "spec.updateStrategy.rollingUpdate",
                    ru,
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        Some(t) => errs.push(not_supported(
            "spec.updateStrategy.type",
            t,
            &["OnDelete", "RollingUpdate"],
        )),
    }
    errs
}

fn default_daemonset(o: &mut Value) {
    default_at(
        o,
        &["spec", "updateStrategy", "type"],
        json!("RollingUpdate"),
    );
    if o.at("/spec/updateStrategy/type").and_then(Value::as_str) == Some("RollingUpdate") {
        let ru = ["spec", "updateStrategy", "rollingUpdate"];
        default_at(o, &[ru[0], ru[1], ru[2], "maxUnavailable"], json!(1));
        default_at(o, &[ru[0], ru[1], ru[2], "maxSurge"], json!(0));
    }
    default_at(o, &["spec", "revisionHistoryLimit"], json!(10));
    if let Some(spec) = o.at_mut("/spec/template/spec") {
        default_pod_spec(spec);
    }
}

fn validate_daemonset(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate_workload(o, old);
    errs.extend(validate::min_int(
        o,
        "/spec/revisionHistoryLimit",
        "spec.revisionHistoryLimit",
        0,
    ));
    errs.extend(update_strategy(o, "RollingUpdate"));
    errs
}

/// The READY cell of a replicated workload: ready replicas over desired.
pub(crate) fn ready_over_desired(o: &Value) -> Value {
    let ready = o
        .at("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let want = o.at("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
    Value::from(format!("{ready}/{want}"))
}

/// `apps/v1` StatefulSet: `status` and `scale` subresources, category `all`.
pub fn statefulsets() -> ResourceDef {
    let mut d = ResourceDef::new(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        "statefulset",
        true,
        FnHooks::typed::<StatefulSet>(default_statefulset, validate_statefulset),
    );
    d.short_names = &["sts"];
    d.categories = &["all"];
    d.definition = "io.k8s.api.apps.v1.StatefulSet";
    d.status_subresource = true;
    d.scale_subresource = true;
    d.tracks_generation = true;
    let wide = apps::wide_columns();
    let mut columns = vec![
        column(
            "Ready",
            "string",
            "Number of the pod with ready state",
            false,
            ready_over_desired,
        ),
        age_column(),
    ];
    // Upstream's StatefulSet table has no selector column.
    columns.extend(wide.into_iter().filter(|c| c.name != "Selector"));
    d.columns = columns;
    d
}

fn node_selector(o: &Value) -> Value {
    super::core::selector_cell(o.at("/spec/template/spec/nodeSelector"))
}

/// `apps/v1` DaemonSet: `status` subresource, category `all`.
pub fn daemonsets() -> ResourceDef {
    let mut d = ResourceDef::new(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        "daemonset",
        true,
        FnHooks::typed::<DaemonSet>(default_daemonset, validate_daemonset),
    );
    d.short_names = &["ds"];
    d.categories = &["all"];
    d.definition = "io.k8s.api.apps.v1.DaemonSet";
    d.status_subresource = true;
    d.tracks_generation = true;
    let mut columns = vec![
        int_column(
            "Desired",
            "The total number of nodes that should be running the daemon pod",
            "/status/desiredNumberScheduled",
        ),
        int_column(
            "Current",
            "The number of nodes running at least one daemon pod",
            "/status/currentNumberScheduled",
        ),
        int_column(
            "Ready",
            "The number of nodes running a ready daemon pod",
            "/status/numberReady",
        ),
        int_column(
            "Up-to-date",
            "The number of nodes running the updated daemon pod",
            "/status/updatedNumberScheduled",
        ),
        int_column(
            "Available",
            "The number of nodes running an available daemon pod",
            "/status/numberAvailable",
        ),
        column(
            "Node Selector",
            "string",
            "The node selector of the pod template",
            false,
            node_selector,
        ),
        age_column(),
    ];
    columns.extend(apps::wide_columns());
    d.columns = columns;
    d
}

fn controller_cell(o: &Value) -> Value {
    let owner = crate::object::meta(o)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true));
    Value::from(match owner {
        Some(r) => {
            let f = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
            let group = f("apiVersion")
                .rsplit_once('/')
                .map(|(g, _)| format!(".{g}"))
                .unwrap_or_default();
            format!("{}{group}/{}", f("kind").to_lowercase(), f("name"))
        }
        None => "<none>".to_string(),
    })
}

fn validate_revision(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    match o.get("revision") {
        None => errs.push(validate::required("revision")),
        Some(_) => errs.extend(validate::min_int(o, "/revision", "revision", 0)),
    }
    errs.extend(validate::unchanged(o, old, &["data"]));
    errs
}

/// `apps/v1` ControllerRevision: an immutable snapshot of a workload's template.
pub fn controller_revisions() -> ResourceDef {
    let mut d = ResourceDef::new(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        "controllerrevision",
        true,
        FnHooks::typed::<ControllerRevision>(super::no_default, validate_revision),
    );
    d.definition = "io.k8s.api.apps.v1.ControllerRevision";
    d.columns = vec![
        column(
            "Controller",
            "string",
            "Controller of the object",
            false,
            controller_cell,
        ),
        int_column(
            "Revision",
            "Revision indicates the revision of the state represented by Data.",
            "/revision",
        ),
    ];
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sts() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "pg", "image": "postgres:17"}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}],
            }
        })
    }

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_statefulset_gets_the_defaults_helm_charts_rely_on() {
        let mut o = sts();
        default_statefulset(&mut o);
        assert_eq!(o["spec"]["replicas"], 1);
        assert_eq!(o["spec"]["podManagementPolicy"], "OrderedReady");
        assert_eq!(
            o["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        );
        assert_eq!(o["spec"]["revisionHistoryLimit"], 10);
        let claim = &o["spec"]["volumeClaimTemplates"][0];
        assert_eq!(claim["spec"]["volumeMode"], "Filesystem");
        let c = &o["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert!(validate_statefulset(&o, None).is_empty());
    }

    #[test]
    fn a_statefulset_selector_must_match_and_its_identity_is_fixed() {
        let mut bad = sts();
        bad["spec"]["template"]["metadata"]["labels"] = json!({"app": "other"});
        assert_eq!(
            fields(&validate_statefulset(&bad, None)),
            ["spec.template.metadata.labels"]
        );

        let old = sts();
        let mut scaled = sts();
        scaled["spec"]["replicas"] = json!(3);
        scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:18");
        assert!(validate_statefulset(&scaled, Some(&old)).is_empty());
        for (pointer, value) in [
            ("serviceName", json!("other")),
            ("podManagementPolicy", json!("Parallel")),
            ("volumeClaimTemplates", json!([])),
        ] {
            let mut changed = sts();
            changed["spec"][pointer] = value;
            let errs = validate_statefulset(&changed, Some(&old));
            assert_eq!(fields(&errs), ["spec"], "{pointer}");
            assert!(errs[0].message.contains("Forbidden"), "{:?}", errs[0]);
        }
    }

    #[test]
    fn a_daemonset_defaults_its_rolling_update_and_rejects_unknown_strategies() {
        let mut o = sts();
        o["kind"] = json!("DaemonSet");
        let spec = o["spec"].as_object_mut().unwrap();
        spec.remove("serviceName");
        spec.remove("volumeClaimTemplates");
        default_daemonset(&mut o);
        assert_eq!(
            o["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert!(validate_daemonset(&o, None).is_empty());
        o["spec"]["updateStrategy"]["type"] = json!("Recreate");
        assert_eq!(
            fields(&validate_daemonset(&o, None)),
            ["spec.updateStrategy.type"]
        );
    }

    #[test]
    fn a_revision_names_its_controller_and_keeps_its_data() {
        let rev = json!({
            "metadata": {"name": "db-1", "namespace": "shop", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u", "controller": true}]},
            "revision": 1, "data": {"a": 1},
        });
        assert_eq!(controller_cell(&rev), "statefulset.apps/db");
        let mut changed = rev.clone();
        changed["data"] = json!({"a": 2});
        assert_eq!(fields(&validate_revision(&changed, Some(&rev))), ["data"]);
    }
}

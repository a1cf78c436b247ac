use serde_json::{Value, json};

use super::plan;
use crate::registry::Registry;

fn crd(name: &str, group: &str, plural: &str, kind: &str, created: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": created},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind, "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object"}},
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
                {"name": "v0", "served": false, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}}
            ]
        }
    })
}

fn condition<'a>(status: &'a Value, t: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap()
}

#[test]
fn an_accepted_definition_serves_its_served_versions_storage_first() {
    let builtin = Registry::new(crate::kinds::builtin());
    let p = plan(
        &[crd(
            "widgets.example.com",
            "example.com",
            "widgets",
            "Widget",
            "2026-01-01T00:00:00Z",
        )],
        &builtin,
        "now",
    );
    let versions: Vec<&str> = p.defs.iter().map(|d| d.version).collect();
    assert_eq!(versions, ["v1", "v1beta1"]);
    let v1 = &p.defs[0];
    assert_eq!(
        (v1.group, v1.kind, v1.plural, v1.singular),
        ("example.com", "Widget", "widgets", "widget")
    );
    assert!(v1.namespaced && v1.status_subresource && v1.scale_subresource && v1.tracks_generation);
    assert_eq!(v1.short_names, &["wd"]);
    assert_eq!(v1.definition, "com.example.v1.Widget");
    assert_eq!(v1.custom.as_ref().unwrap().columns.len(), 1);
    assert!(!p.defs[1].status_subresource);
    let (name, status) = &p.statuses[0];
    assert_eq!(name, "widgets.example.com");
    assert_eq!(condition(status, "NamesAccepted")["status"], "True");
    assert_eq!(condition(status, "Established")["status"], "True");
    assert_eq!(
        condition(status, "Established")["lastTransitionTime"],
        "now"
    );
    assert_eq!(status["acceptedNames"]["kind"], "Widget");
    assert_eq!(status["storedVersions"], json!(["v1"]));
    assert!(p.terminating.is_empty());
}

#[test]
fn a_written_status_is_not_written_again() {
    let builtin = Registry::new(crate::kinds::builtin());
    let mut c = crd(
        "widgets.example.com",
        "example.com",
        "widgets",
        "Widget",
        "2026-01-01T00:00:00Z",
    );
    let first = plan(std::slice::from_ref(&c), &builtin, "t1");
    c["status"] = first.statuses[0].1.clone();
    let again = plan(&[c], &builtin, "t2");
    assert!(again.statuses.is_empty());
    assert_eq!(first.fingerprint, again.fingerprint);
}

#[test]
fn a_later_definition_with_a_taken_name_is_not_served() {
    let builtin = Registry::new(crate::kinds::builtin());
    let first = crd(
        "widgets.example.com",
        "example.com",
        "widgets",
        "Widget",
        "2026-01-01T00:00:00Z",
    );
    let mut second = crd(
        "gadgets.example.com",
        "example.com",
        "gadgets",
        "Widget",
        "2026-01-02T00:00:00Z",
    );
    second["metadata"]["name"] = json!("gadgets.example.com");
    let clash = crd(
        "deployments.apps",
        "apps",
        "deployments",
        "Thing",
        "2026-01-01T00:00:00Z",
    );
    let p = plan(&[second, first, clash], &builtin, "now");
    assert!(p.defs.iter().all(|d| d.plural == "widgets"));
    let status = |n: &str| &p.statuses.iter().find(|(name, _)| name == n).unwrap().1;
    let names = condition(status("gadgets.example.com"), "NamesAccepted");
    assert_eq!(names["status"], "False");
    assert_eq!(names["reason"], "KindConflict");
    assert_eq!(
        condition(status("gadgets.example.com"), "Established")["status"],
        "False"
    );
    assert_eq!(
        condition(status("deployments.apps"), "NamesAccepted")["reason"],
        "PluralConflict"
    );
}

#[test]
fn a_deleted_definition_keeps_serving_while_its_objects_go() {
    let builtin = Registry::new(crate::kinds::builtin());
    let mut c = crd(
        "widgets.example.com",
        "example.com",
        "widgets",
        "Widget",
        "2026-01-01T00:00:00Z",
    );
    c["metadata"]["deletionTimestamp"] = json!("2026-01-03T00:00:00Z");
    let p = plan(&[c], &builtin, "now");
    assert_eq!(p.defs.len(), 2);
    assert_eq!(p.terminating.len(), 1);
    assert_eq!(condition(&p.statuses[0].1, "Terminating")["status"], "True");
}

#[test]
fn scale_paths_are_plain_field_paths_under_spec_and_status() {
    use crate::crd::ScalePaths;
    let of = |v: Value| ScalePaths::of(&v);
    assert_eq!(
        of(
            json!({"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"})
        ),
        Some(ScalePaths {
            spec_replicas: "/spec/size".into(),
            status_replicas: "/status/replicas".into(),
            label_selector: Some("/status/selector".into()),
        })
    );
    assert_eq!(
        of(json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}))
            .and_then(|p| p.label_selector),
        None
    );
    for bad in [
        json!({"statusReplicasPath": ".status.replicas"}),
        json!({"specReplicasPath": ".status.replicas", "statusReplicasPath": ".status.replicas"}),
        json!({"specReplicasPath": ".spec.items[0]", "statusReplicasPath": ".status.replicas"}),
        json!({"specReplicasPath": ".spec..replicas", "statusReplicasPath": ".status.replicas"}),
        json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": "status.selector"}),
    ] {
        assert_eq!(of(bad.clone()), None, "{bad}");
    }
}

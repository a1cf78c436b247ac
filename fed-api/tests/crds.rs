//! The CRDs the kube wrappers generate: every kind has one, and the schema says what the
//! API server needs to know about the fields (list maps, free-form JSON, enums).
#![cfg(feature = "kube")]

use kube::CustomResourceExt;
use serde_json::Value;

fn schema(crd: impl serde::Serialize) -> Value {
    let crd = serde_json::to_value(crd).expect("CRD serializes");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn every_kind_has_a_crd_in_the_group() {
    let crds = [
        fed_api::Cluster::crd(),
        fed_api::PropagationPolicy::crd(),
        fed_api::ClusterPropagationPolicy::crd(),
        fed_api::Placement::crd(),
        fed_api::OverridePolicy::crd(),
        fed_api::ClusterOverridePolicy::crd(),
        fed_api::ResourceInterpreter::crd(),
    ];
    let mut names: Vec<(String, String)> = crds
        .iter()
        .map(|c| (c.spec.names.kind.clone(), c.spec.scope.clone()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("Cluster", "Cluster"),
            ("ClusterOverridePolicy", "Cluster"),
            ("ClusterPropagationPolicy", "Cluster"),
            ("OverridePolicy", "Namespaced"),
            ("Placement", "Namespaced"),
            ("PropagationPolicy", "Namespaced"),
            ("ResourceInterpreter", "Cluster"),
        ]
        .map(|(k, s)| (k.to_owned(), s.to_owned()))
    );
    for c in &crds {
        assert_eq!(c.spec.group, fed_api::GROUP);
    }
}

#[test]
fn cluster_wide_policies_have_the_namespaced_spec() {
    let namespaced = schema(fed_api::PropagationPolicy::crd());
    let cluster_wide = schema(fed_api::ClusterPropagationPolicy::crd());
    // The same fields; only the spec's description differs.
    assert_eq!(
        namespaced["properties"]["spec"]["properties"],
        cluster_wide["properties"]["spec"]["properties"]
    );
    let o = schema(fed_api::OverridePolicy::crd());
    let co = schema(fed_api::ClusterOverridePolicy::crd());
    assert_eq!(
        o["properties"]["spec"]["properties"],
        co["properties"]["spec"]["properties"]
    );
}

#[test]
fn schemas_carry_enums_selectors_and_free_form_values() {
    let pp = schema(fed_api::PropagationPolicy::crd());
    let placement = &pp["properties"]["spec"]["properties"]["placement"]["properties"];
    let spread = &placement["spreadConstraints"]["items"]["properties"]["spreadByField"];
    assert_eq!(
        spread["enum"],
        serde_json::json!(["region", "zone", "cluster"])
    );
    let selector = &placement["clusterAffinity"]["properties"]["labelSelector"]["properties"];
    assert!(selector["matchLabels"].is_object(), "{selector}");
    assert_eq!(
        selector["matchExpressions"]["items"]["properties"]["operator"]["enum"],
        serde_json::json!(["In", "NotIn", "Exists", "DoesNotExist"])
    );
    let op = schema(fed_api::OverridePolicy::crd());
    let value = &op["properties"]["spec"]["properties"]["overrideRules"]["items"]["properties"]["overriders"]
        ["properties"]["plaintext"]["items"]["properties"]["value"];
    assert_eq!(
        value["x-kubernetes-preserve-unknown-fields"], true,
        "{value}"
    );
    let cluster = schema(fed_api::Cluster::crd());
    let effect =
        &cluster["properties"]["spec"]["properties"]["taints"]["items"]["properties"]["effect"];
    assert_eq!(
        effect["enum"],
        serde_json::json!(["NoSchedule", "NoExecute"])
    );
}

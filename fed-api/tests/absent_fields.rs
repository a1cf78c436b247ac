//! Absent optional fields are left out of the JSON, never written as `null`: members and
//! `kubectl` see the same objects whichever way a type declares its optional fields.

use fed_api::placement::ClusterWorkloadStatus;
use fed_api::policy::{PlacementRules, Toleration};
use fed_api::{
    ClusterSpec, ClusterStatus, OverridePolicySpec, PlacementStatus, PropagationPolicySpec,
    ResourceInterpreterSpec,
};
use serde::Serialize;
use serde_json::{Value, json};

fn written<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("serializes")
}

#[test]
fn defaults_write_no_null() {
    let cases = [
        (
            "ClusterSpec",
            written(&ClusterSpec::default()),
            json!({"apiEndpoint": ""}),
        ),
        (
            "ClusterStatus",
            written(&ClusterStatus::default()),
            json!({}),
        ),
        (
            "PlacementStatus",
            written(&PlacementStatus::default()),
            json!({}),
        ),
        (
            "PropagationPolicySpec",
            written(&PropagationPolicySpec::default()),
            json!({"resourceSelectors": [], "placement": {}}),
        ),
        (
            "OverridePolicySpec",
            written(&OverridePolicySpec::default()),
            json!({"resourceSelectors": [], "overrideRules": []}),
        ),
        (
            "ClusterWorkloadStatus",
            written(&ClusterWorkloadStatus::default()),
            json!({"cluster": "", "replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "updatedReplicas": 0}),
        ),
        (
            "Toleration",
            written(&Toleration::default()),
            json!({"operator": "Equal"}),
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn missing_and_null_optional_fields_read_as_absent() {
    let p: PlacementRules =
        serde_json::from_value(json!({"failover": null, "clusterAffinity": {"regions": ["eu"]}}))
            .unwrap();
    assert!(p.failover.is_none() && p.replica_scheduling.is_none());
    assert_eq!(written(&p), json!({"clusterAffinity": {"regions": ["eu"]}}));
    let t: Toleration = serde_json::from_value(json!({"key": "k", "effect": ""})).unwrap();
    assert_eq!(t.effect, None);
    assert_eq!(written(&t), json!({"key": "k", "operator": "Equal"}));
    let ri: ResourceInterpreterSpec = serde_json::from_value(
        json!({"target": {"apiVersion": "example.com/v1", "kind": "Rollout"}, "replicas": null}),
    )
    .unwrap();
    assert_eq!(
        written(&ri),
        json!({"target": {"apiVersion": "example.com/v1", "kind": "Rollout"}})
    );
}

//! The YAML examples of the API reference (`API.md`), read into the typed model and written
//! back: every field a user writes there has a home, and nothing is lost on the way back.
//! Placeholders of the reference (`<base64 PEM>`, `...`) are replaced by concrete values.

use fed_api::cluster::TaintEffect;
use fed_api::interpreter::AggregationOp;
use fed_api::overrides::{ImageComponent, OverrideOperator};
use fed_api::policy::{Division, ReplicaSchedulingType, SpreadField, Toleration};
use fed_api::{
    ClusterOverridePolicySpec, ClusterPropagationPolicySpec, ClusterSpec, ClusterStatus,
    OverridePolicySpec, PlacementSpec, PlacementStatus, PropagationPolicySpec,
    ResourceInterpreterSpec,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Drops what the typed model leaves out at its default (`[]`, `{}`, `""`, `0`, `false`,
/// `null`): writing `zones: []` or `priority: 0` and leaving them out mean the same.
fn prune(v: Value) -> Option<Value> {
    match v {
        Value::Null | Value::Bool(false) => None,
        Value::Number(n) if n.as_f64() == Some(0.0) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(prune).collect())),
        Value::Object(o) => {
            let o: serde_json::Map<String, Value> = o
                .into_iter()
                .filter_map(|(k, v)| Some((k, prune(v)?)))
                .collect();
            (!o.is_empty()).then_some(Value::Object(o))
        }
        v => Some(v),
    }
}

/// Reads `yaml` (one object) into `T` from `part`, writes it back, and checks the two
/// agree; returns the typed value.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(
    yaml: &str,
    part: &str,
) -> T {
    let obj: Value = serde_yaml_ng::from_str(yaml).expect("valid YAML");
    let written = obj[part].clone();
    let typed: T = serde_json::from_value(written.clone())
        .unwrap_or_else(|e| panic!("{part}: {e}\n{written:#}"));
    let back = serde_json::to_value(&typed).expect("serializes");
    assert_eq!(prune(back.clone()), prune(written), "{part} written back");
    let again: T = serde_json::from_value(back).expect("reads its own output");
    assert_eq!(again, typed);
    typed
}

#[test]
fn cluster() {
    let yaml = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: Cluster
metadata:
  name: eu-west-1
  labels: {env: prod, provider: onprem}
spec:
  apiEndpoint: https://10.0.0.10:6443
  caBundle: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
  secretRef: {namespace: meridian-system, name: eu-west-1-credentials}
  region: eu-west
  zone: eu-west-1a
  taints:
  - {key: maintenance, value: "true", effect: NoSchedule}
status:
  conditions:
  - {type: Ready, status: "True", reason: ProbeSucceeded, message: "", lastProbeTime: "2026-01-01T00:00:00Z", lastTransitionTime: "2025-12-31T23:00:00Z"}
  kubernetesVersion: v1.34.2
  apiEnablements: [{groupVersion: apps/v1, resources: [deployments, replicasets]}, {groupVersion: v1, resources: [services]}]
  nodes: {total: 20, ready: 20}
  resourceSummary:
    allocatable: {cpu: "160", memory: 640Gi, pods: "2200"}
    allocated:   {cpu: "41500m", memory: 120Gi, pods: "310"}
    largestFree: {cpu: "7", memory: 30Gi}
  lbAgent: {address: 203.0.113.10, dnsPort: 53}
"#;
    let spec: ClusterSpec = round_trip(yaml, "spec");
    assert_eq!(spec.taints[0].effect, TaintEffect::NoSchedule);
    let status: ClusterStatus = round_trip(yaml, "status");
    let rs = status.resource_summary.expect("resource summary");
    assert_eq!(rs.allocatable.cpu_milli(), Ok(Some(160_000)));
    assert_eq!(rs.allocated.memory_bytes(), Ok(Some(120 << 30)));
    assert_eq!(status.lb_agent.expect("lb agent").dns_port, Some(53));
}

const POLICY_SPEC: &str = r#"
spec:
  priority: 0
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity:
      clusterNames: [eu-west-1, us-east-1]
      exclude: [legacy-1]
      labelSelector: {matchLabels: {env: prod}}
      regions: [eu-west, us-east]
      zones: []
    clusterTolerations:
    - {key: maintenance, operator: Exists, effect: NoSchedule}
    spreadConstraints:
    - {spreadByField: region, minGroups: 2, maxGroups: 3}
    replicaScheduling:
      type: Divided
      division: StaticWeight
      weights:
      - {clusterNames: [eu-west-1], weight: 1}
      - {labelSelector: {matchLabels: {provider: onprem}}, weight: 2}
      clusters:
      - {name: eu-west-1, minReplicas: 1, maxReplicas: 10}
      atLeastOnePerCluster: false
    failover:
      tolerationSeconds: 300
      rebalanceOnRecovery: false
"#;

#[test]
fn propagation_policy() {
    let yaml = format!(
        "apiVersion: federation.meridian.dev/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: web, namespace: shop}}{POLICY_SPEC}"
    );
    let spec: PropagationPolicySpec = round_trip(&yaml, "spec");
    let p = &spec.placement;
    let rs = p.replica_scheduling.as_ref().expect("replica scheduling");
    assert_eq!(rs.type_, ReplicaSchedulingType::Divided);
    assert_eq!(rs.division, Some(Division::StaticWeight));
    assert_eq!(rs.weights[1].weight, 2);
    assert_eq!(rs.clusters[0].max_replicas, Some(10));
    assert_eq!(p.spread_constraints[0].spread_by_field, SpreadField::Region);
    let t: &Toleration = &p.cluster_tolerations[0];
    assert!(t.tolerates("maintenance", Some("true"), TaintEffect::NoSchedule));
    assert_eq!(p.toleration_seconds(), 300);
    let affinity = p.cluster_affinity.as_ref().expect("affinity");
    let prod = [("env".to_owned(), "prod".to_owned())].into();
    assert_eq!(
        affinity.mismatch("eu-west-1", &prod, Some("eu-west"), None),
        None
    );
}

#[test]
fn cluster_propagation_policy() {
    let yaml = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: monitoring-crds}
spec:
  resourceSelectors:
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, labelSelector: {matchLabels: {app.kubernetes.io/part-of: monitoring}}}
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, name: prometheus-operator}
  placement:
    clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}
"#;
    let spec: ClusterPropagationPolicySpec = round_trip(yaml, "spec");
    assert_eq!(
        spec.resource_selectors[1].name.as_deref(),
        Some("prometheus-operator")
    );
    // The same spec as a PropagationPolicy: the namespaced example reads as a cluster one.
    let as_cluster_wide: ClusterPropagationPolicySpec = round_trip(
        &format!("kind: ClusterPropagationPolicy{POLICY_SPEC}"),
        "spec",
    );
    let namespaced: PropagationPolicySpec =
        round_trip(&format!("kind: PropagationPolicy{POLICY_SPEC}"), "spec");
    assert_eq!(as_cluster_wide.0, namespaced);
}

const OVERRIDE_SPEC: &str = r#"
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  overrideRules:
  - targetCluster: {regions: [cn-north]}
    overriders:
      imageOverrider:
      - {component: Registry, operator: replace, value: registry.cn.example}
      argsOverrider:
      - {containerName: web, operator: add, value: ["--region=cn-north"]}
      labelsOverrider:
      - {operator: add, value: {tier: edge}}
      plaintext:
      - {path: /spec/template/spec/nodeSelector, operator: add, value: {disk: ssd}}
"#;

#[test]
fn override_policies() {
    let yaml = format!(
        "apiVersion: federation.meridian.dev/v1alpha1\nkind: OverridePolicy\nmetadata: {{name: web-regions, namespace: shop}}{OVERRIDE_SPEC}"
    );
    let spec: OverridePolicySpec = round_trip(&yaml, "spec");
    let rule = &spec.override_rules[0];
    let target = rule.target_cluster.as_ref().expect("target");
    assert_eq!(target.regions, ["cn-north"]);
    let o = &rule.overriders;
    assert_eq!(o.image_overrider[0].component, ImageComponent::Registry);
    assert_eq!(o.image_overrider[0].operator, OverrideOperator::Replace);
    assert_eq!(o.args_overrider[0].value, ["--region=cn-north"]);
    assert_eq!(o.labels_overrider[0].value["tier"], "edge");
    assert_eq!(
        o.plaintext[0].value,
        Some(serde_json::json!({"disk": "ssd"}))
    );
    let cluster_wide: ClusterOverridePolicySpec = round_trip(
        &format!("kind: ClusterOverridePolicy{OVERRIDE_SPEC}"),
        "spec",
    );
    assert_eq!(cluster_wide.0, spec);
}

#[test]
fn resource_interpreter() {
    let yaml = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ResourceInterpreter
metadata: {name: rollouts}
spec:
  target: {apiVersion: argoproj.io/v1alpha1, kind: Rollout}
  replicas: {path: .spec.replicas}
  podTemplate: {path: .spec.template}
  statusAggregation:
  - {path: .status.readyReplicas, op: Sum}
  - {path: .status.availableReplicas, op: Sum}
  health: {conditionType: Available}
"#;
    let spec: ResourceInterpreterSpec = round_trip(yaml, "spec");
    assert_eq!(spec.target.kind, "Rollout");
    assert_eq!(spec.replicas.expect("replicas").path, ".spec.replicas");
    assert_eq!(spec.status_aggregation[1].op, AggregationOp::Sum);
    assert_eq!(spec.health.expect("health").condition_type, "Available");
}

#[test]
fn placement() {
    let yaml = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: Placement
metadata: {name: deployment-web, namespace: shop}
spec:
  resource: {apiVersion: apps/v1, kind: Deployment, name: web, uid: 6f1c3d1e-0000-4000-8000-000000000001}
  destClusters:
  - {cluster: eu-west-1, replicas: 3}
  - {cluster: us-east-1, replicas: 7}
status:
  conditions:
  - {type: Scheduled, status: "True", reason: Scheduled, message: "10/10 replicas placed"}
  - {type: Propagated, status: "True", reason: InSync}
  clusters:
  - {cluster: eu-west-1, replicas: 3, readyReplicas: 3, availableReplicas: 3, updatedReplicas: 3,
     observedGeneration: 4, lastSyncTime: "2026-01-01T00:00:00Z", error: ""}
  unschedulable: {replicas: 0, reasons: []}
"#;
    let spec: PlacementSpec = round_trip(yaml, "spec");
    assert_eq!(spec.dest_clusters[1].replicas, 7);
    let status: PlacementStatus = round_trip(yaml, "status");
    assert_eq!(status.clusters[0].observed_generation, Some(4));
}

#[test]
fn bad_values_are_errors_not_defaults() {
    fn rejects<T: DeserializeOwned>(yaml: &str) {
        let v: Value = serde_yaml_ng::from_str(yaml).expect("valid YAML");
        assert!(
            serde_json::from_value::<T>(v).is_err(),
            "{yaml} was accepted"
        );
    }
    rejects::<ClusterSpec>("{apiEndpoint: https://x, taints: [{key: k, effect: Sometimes}]}");
    rejects::<ClusterSpec>("{region: eu}");
    rejects::<PropagationPolicySpec>("{placement: {replicaScheduling: {type: Split}}}");
    rejects::<PropagationPolicySpec>("{placement: {spreadConstraints: [{spreadByField: rack}]}}");
    rejects::<PropagationPolicySpec>(
        "{placement: {clusterAffinity: {labelSelector: {matchLabels: {-x: y}}}}}",
    );
    rejects::<PropagationPolicySpec>(
        "{placement: {replicaScheduling: {clusters: [{name: a, minReplicas: -1}]}}}",
    );
    rejects::<OverridePolicySpec>(
        "{overrideRules: [{overriders: {imageOverrider: [{component: Host, operator: add}]}}]}",
    );
    rejects::<ResourceInterpreterSpec>(
        "{target: {apiVersion: v1, kind: X}, statusAggregation: [{path: .a, op: Avg}]}",
    );
}

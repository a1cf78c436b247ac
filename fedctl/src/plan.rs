//! What `fedctl join` creates, as plain objects: computed without any server so it can be
//! printed (`--dry-run`) and tested.

use std::collections::BTreeMap;

use base64::Engine;
use fed_api::ClusterSpec;
use fed_api::common::NamespacedName;
use serde_json::{Value, json};

/// Namespace Meridian uses on both sides.
pub const NAMESPACE: &str = fed_api::names::SYSTEM_NAMESPACE;
/// The member-side service account Meridian's controllers act as.
pub const SERVICE_ACCOUNT: &str = "meridian-controller";
/// The member-side ClusterRole and ClusterRoleBinding.
pub const CLUSTER_ROLE: &str = "meridian:controller";
/// The member-side token Secret.
pub const TOKEN_SECRET: &str = "meridian-controller-token";

/// Inputs of a join.
#[derive(Clone, Debug, Default)]
pub struct JoinRequest {
    /// Cluster name in the federation.
    pub name: String,
    /// The member's API server URL.
    pub endpoint: String,
    /// The member's CA bundle, PEM.
    pub ca_pem: String,
    /// Region.
    pub region: Option<String>,
    /// Zone.
    pub zone: Option<String>,
    /// Labels for the Cluster object.
    pub labels: BTreeMap<String, String>,
}

/// The rules Meridian's controllers need in a member, and nothing more.
pub fn controller_rules() -> Value {
    let rw = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    json!([
        // Capacity tracking reads nodes and pods.
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        // Workloads land in their own namespaces, with the ConfigMaps/Secrets they use.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"], "verbs": rw},
        {"apiGroups": ["apps"], "resources": ["deployments", "replicasets", "statefulsets"], "verbs": rw},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": rw},
        // Cross-cluster endpoints for the load balancers.
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": rw},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        // Copies of the kinds policies propagate as they are. RBAC objects are written
        // without `escalate` or `bind`: Meridian can copy a Role granting only what it
        // holds itself, so joining a member never hands out more than this list.
        {"apiGroups": [""], "resources": ["serviceaccounts", "persistentvolumeclaims"], "verbs": rw},
        {"apiGroups": ["rbac.authorization.k8s.io"],
         "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"], "verbs": rw},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": rw},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": rw},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": rw},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": rw},
        {"nonResourceURLs": ["/readyz", "/healthz", "/livez", "/version"], "verbs": ["get"]},
    ])
}

/// Objects created in the member cluster, in creation order.
pub fn member_objects() -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": CLUSTER_ROLE}, "rules": controller_rules()}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": CLUSTER_ROLE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
               "metadata": {"name": TOKEN_SECRET, "namespace": NAMESPACE,
                            "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT}}}),
    ]
}

/// Name of the federation-side credentials Secret of a cluster.
pub fn credentials_secret(name: &str) -> String {
    format!("{name}-credentials")
}

/// Objects created in the federation; `token` is the member token (redacted in dry runs).
pub fn federation_objects(req: &JoinRequest, token: &str) -> Vec<Value> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // The spec as the API types define it: a field renamed there fails to compile here.
    let spec = ClusterSpec {
        api_endpoint: req.endpoint.clone(),
        ca_bundle: Some(b64(&req.ca_pem)),
        secret_ref: Some(NamespacedName {
            namespace: NAMESPACE.to_owned(),
            name: credentials_secret(&req.name),
        }),
        region: req.region.clone(),
        zone: req.zone.clone(),
        taints: Vec::new(),
    };
    let mut cluster = json!({
        "apiVersion": fed_api::API_VERSION, "kind": "Cluster",
        "metadata": {"name": req.name},
        "spec": spec,
    });
    if !req.labels.is_empty() {
        cluster["metadata"]["labels"] = json!(req.labels);
    }
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": credentials_secret(&req.name), "namespace": NAMESPACE,
                            "labels": {"federation.meridian.dev/cluster": req.name}},
               "data": {"token": b64(token)}}),
        cluster,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_side_is_least_privilege() {
        let rules = controller_rules();
        let text = rules.to_string();
        // Never cluster-admin-like wildcards, never RBAC escalation, never node writes.
        assert!(!text.contains("\"*\""));
        assert!(
            !text.contains("escalate")
                && !text.contains("\"bind\"")
                && !text.contains("impersonate")
        );
        let node_rule = &rules[0];
        assert_eq!(node_rule["verbs"], json!(["get", "list", "watch"]));
        let objs = member_objects();
        assert_eq!(objs.len(), 5);
        assert_eq!(objs[3]["subjects"][0]["name"], SERVICE_ACCOUNT);
    }

    #[test]
    fn federation_side_references_the_secret() {
        let req = JoinRequest {
            name: "sim-1".into(),
            endpoint: "https://127.0.0.1:1234".into(),
            ca_pem: "PEM".into(),
            region: Some("eu-west".into()),
            zone: None,
            labels: BTreeMap::from([("env".into(), "prod".into())]),
        };
        let objs = federation_objects(&req, "tok");
        let cluster = &objs[2];
        assert_eq!(cluster["spec"]["secretRef"]["name"], "sim-1-credentials");
        assert_eq!(cluster["spec"]["region"], "eu-west");
        assert!(cluster["spec"].get("zone").is_none());
        assert_eq!(objs[1]["data"]["token"], "dG9r");
        assert_eq!(cluster["metadata"]["labels"]["env"], "prod");
    }
}

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

/// Why a `--custom-resource-group` is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GroupError {
    /// Not a DNS subdomain with a dot, as a CustomResourceDefinition's `spec.group` must be.
    #[error(
        "custom resource group {0:?} is not a DNS subdomain with at least one dot (as a CustomResourceDefinition's spec.group)"
    )]
    NotAGroup(String),
    /// A group the member's own API server serves: its rights are fixed by Meridian.
    #[error("{0:?} is a built-in group: fedctl join grants only the rights Meridian needs there")]
    BuiltIn(String),
}

/// Checks the custom resource groups a join grants rights on.
pub fn check_custom_groups(groups: &[String]) -> Result<(), GroupError> {
    const BUILT_IN: [&str; 6] = [
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "networking.k8s.io",
        "discovery.k8s.io",
        "admissionregistration.k8s.io",
        "authorization.k8s.io",
    ];
    for g in groups {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if g.len() > 253 || !g.contains('.') || !g.split('.').all(label_ok) {
            return Err(GroupError::NotAGroup(g.clone()));
        }
        if BUILT_IN.contains(&g.as_str()) || g == fed_api::GROUP {
            return Err(GroupError::BuiltIn(g.clone()));
        }
    }
    Ok(())
}

/// The rules Meridian's controllers need in a member, and nothing more; plus every
/// resource of the `custom_groups` the joiner names, so copies of those custom resources
/// can be pushed (a member grants nothing on custom groups otherwise).
pub fn controller_rules(custom_groups: &[String]) -> Value {
    let rw = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    let mut rules = json!([
        // Capacity tracking reads nodes and pods.
        {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
        // Workloads land in their own namespaces, with the ConfigMaps/Secrets they use.
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"], "verbs": rw},
        {"apiGroups": ["apps"],
         "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"], "verbs": rw},
        {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": rw},
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
    ]);
    if !custom_groups.is_empty()
        && let Some(list) = rules.as_array_mut()
    {
        list.push(json!({"apiGroups": custom_groups, "resources": ["*"], "verbs": rw}));
    }
    rules
}

/// Objects created in the member cluster, in creation order; the ClusterRole also grants
/// every resource of `custom_groups`.
pub fn member_objects(custom_groups: &[String]) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": CLUSTER_ROLE}, "rules": controller_rules(custom_groups)}),
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
        let rules = controller_rules(&[]);
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
        let objs = member_objects(&[]);
        assert_eq!(objs.len(), 5);
        assert_eq!(objs[3]["subjects"][0]["name"], SERVICE_ACCOUNT);
        // Every built-in kind Meridian pushes is covered.
        for (group, resource) in [
            ("apps", "statefulsets"),
            ("apps", "daemonsets"),
            ("batch", "jobs"),
            ("batch", "cronjobs"),
            ("policy", "poddisruptionbudgets"),
        ] {
            assert!(
                rules.as_array().expect("rules").iter().any(|r| {
                    r["apiGroups"] == json!([group])
                        && r["resources"]
                            .as_array()
                            .is_some_and(|l| l.iter().any(|x| x == resource))
                }),
                "{group}/{resource}"
            );
        }
    }

    #[test]
    fn custom_groups_get_their_own_rule_only() {
        let groups = vec!["example.com".to_owned(), "monitoring.coreos.com".to_owned()];
        let rules = controller_rules(&groups);
        let list = rules.as_array().expect("rules");
        let custom: Vec<&Value> = list
            .iter()
            .filter(|r| r["resources"] == json!(["*"]))
            .collect();
        assert_eq!(custom.len(), 1);
        assert_eq!(custom[0]["apiGroups"], json!(groups));
        assert!(!custom[0]["verbs"].to_string().contains("escalate"));
        // Nothing else changed.
        assert_eq!(
            list.len(),
            controller_rules(&[]).as_array().map_or(0, Vec::len) + 1
        );
        assert_eq!(member_objects(&groups)[2]["rules"], rules);
    }

    #[test]
    fn custom_group_names_are_checked() {
        let ok = |g: &str| check_custom_groups(&[g.to_owned()]);
        assert_eq!(ok("example.com"), Ok(()));
        assert_eq!(ok("gateway.networking.k8s.io"), Ok(()));
        for bad in [
            "*",
            "",
            "example",
            "Example.com",
            "-a.com",
            "a..com",
            "a.com-",
        ] {
            assert_eq!(ok(bad), Err(GroupError::NotAGroup(bad.to_owned())), "{bad}");
        }
        for built_in in ["rbac.authorization.k8s.io", fed_api::GROUP] {
            assert_eq!(ok(built_in), Err(GroupError::BuiltIn(built_in.to_owned())));
        }
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

//! RBAC authorization over the watch cache: Roles, ClusterRoles and their bindings, as
//! Kubernetes evaluates them (`system:masters` may do anything).

use std::sync::Arc;

use serde_json::Value;

use crate::auth::{Attributes, Authorizer, UserInfo};
use crate::cache::Cache;
use crate::registry::ResourceDef;

/// Authorizes requests with the RBAC objects stored in one server.
pub struct RbacAuthorizer {
    cache: Arc<Cache>,
}

impl RbacAuthorizer {
    /// An authorizer reading the given cache.
    pub fn new(cache: Arc<Cache>) -> Self {
        Self { cache }
    }

    fn objects(&self, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let Some(def) = self
            .cache
            .registry()
            .lookup("rbac.authorization.k8s.io", "v1", plural)
            .cloned()
        else {
            return Vec::new();
        };
        let def: &ResourceDef = &def;
        self.cache
            .resource(def)
            .list(&def.namespace_prefix(namespace), None, None, 0, |_| true)
            .items
            .iter()
            .map(|c| c.value())
            .collect()
    }

    fn role_rules(&self, role_ref: &Value, namespace: &str) -> Vec<Value> {
        let kind = role_ref.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = role_ref.get("name").and_then(Value::as_str).unwrap_or("");
        let (plural, ns) = match kind {
            "ClusterRole" => ("clusterroles", None),
            "Role" => ("roles", Some(namespace)),
            _ => return Vec::new(),
        };
        self.objects(plural, ns)
            .into_iter()
            .find(|r| crate::object::name(r) == name)
            .and_then(|r| r.get("rules").and_then(Value::as_array).cloned())
            .unwrap_or_default()
    }
}

fn subject_matches(s: &Value, user: &UserInfo, binding_ns: &str) -> bool {
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = s.get("name").and_then(Value::as_str).unwrap_or("");
    match kind {
        "User" => user.name == name,
        // Every request that reaches the authorizer is authenticated (anonymous ones are
        // refused before), so each user is in `system:authenticated`, as upstream.
        "Group" => name == "system:authenticated" || user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = s
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

fn has(list: Option<&Value>, want: &str) -> bool {
    list.and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .any(|v| v == "*" || v == want)
    })
}

/// Whether one PolicyRule allows the request.
pub fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    if !has(rule.get("verbs"), &a.verb) {
        return false;
    }
    if a.resource.is_empty() {
        return rule
            .get("nonResourceURLs")
            .and_then(Value::as_array)
            .is_some_and(|urls| {
                urls.iter().filter_map(Value::as_str).any(|u| {
                    u == "*"
                        || u == a.path
                        || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
                })
            });
    }
    if !has(rule.get("apiGroups"), &a.group) {
        return false;
    }
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = has(rule.get("resources"), &resource)
        || (!a.subresource.is_empty()
            && has(rule.get("resources"), &format!("*/{}", a.subresource)));
    if !resource_ok {
        return false;
    }
    match rule.get("resourceNames").and_then(Value::as_array) {
        Some(names) if !names.is_empty() => {
            !a.name.is_empty() && names.iter().filter_map(Value::as_str).any(|n| n == a.name)
        }
        _ => true,
    }
}

impl Authorizer for RbacAuthorizer {
    fn authorize(&self, user: &UserInfo, a: &Attributes) -> Result<(), String> {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Ok(());
        }
        // Discovery and schemas are open to every authenticated user (system:discovery).
        if a.resource.is_empty()
            && (a.path == "/api"
                || a.path == "/apis"
                || a.path.starts_with("/api/")
                || a.path.starts_with("/apis/")
                || a.path.starts_with("/openapi/")
                || a.path == "/version")
        {
            return Ok(());
        }
        for b in self.objects("clusterrolebindings", None) {
            let subjects = b.get("subjects").and_then(Value::as_array);
            if subjects.is_some_and(|s| s.iter().any(|s| subject_matches(s, user, "")))
                && let Some(r) = b.get("roleRef")
                && self
                    .role_rules(r, "")
                    .iter()
                    .any(|rule| rule_allows(rule, a))
            {
                return Ok(());
            }
        }
        if !a.namespace.is_empty() {
            for b in self.objects("rolebindings", Some(&a.namespace)) {
                let subjects = b.get("subjects").and_then(Value::as_array);
                if subjects
                    .is_some_and(|s| s.iter().any(|s| subject_matches(s, user, &a.namespace)))
                    && let Some(r) = b.get("roleRef")
                    && self
                        .role_rules(r, &a.namespace)
                        .iter()
                        .any(|rule| rule_allows(rule, a))
                {
                    return Ok(());
                }
            }
        }
        Err(crate::auth::forbidden_message(user, a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "ns".into(),
            name: name.into(),
            path: String::new(),
        }
    }

    #[test]
    fn rules_match_like_kubernetes() {
        let rule = json!({"apiGroups": ["apps"], "resources": ["deployments", "deployments/status"], "verbs": ["get", "update"]});
        assert!(rule_allows(
            &rule,
            &attrs("get", "apps", "deployments", "", "x")
        ));
        assert!(rule_allows(
            &rule,
            &attrs("update", "apps", "deployments", "status", "x")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("delete", "apps", "deployments", "", "x")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "", "deployments", "", "x")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "apps", "deployments", "scale", "x")
        ));
        let named = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"], "resourceNames": ["a"]});
        assert!(rule_allows(&named, &attrs("get", "", "secrets", "", "a")));
        assert!(!rule_allows(&named, &attrs("get", "", "secrets", "", "b")));
        assert!(!rule_allows(&named, &attrs("list", "", "secrets", "", "")));
        let urls = json!({"nonResourceURLs": ["/metrics", "/healthz*"], "verbs": ["get"]});
        let mut a = attrs("get", "", "", "", "");
        a.path = "/metrics".into();
        assert!(rule_allows(&urls, &a));
    }

    #[test]
    fn denial_reads_like_kubernetes() {
        let u = UserInfo {
            name: "system:serviceaccount:meridian-system:meridian".into(),
            uid: String::new(),
            groups: vec![],
        };
        let m = crate::auth::forbidden_message(&u, &attrs("create", "apps", "deployments", "", ""));
        assert_eq!(
            m,
            "deployments.apps is forbidden: User \"system:serviceaccount:meridian-system:meridian\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"ns\""
        );
    }
}

//! The default RBAC policy a server keeps from its first start, as kube-apiserver's
//! bootstrap policy: `cluster-admin` bound to `system:masters`, and the user-facing roles
//! `admin`, `edit` and `view` over the kinds the server serves.
//!
//! Upstream aggregates `admin`/`edit`/`view` from per-group roles; here their rules are
//! computed from the registry, so a kind added to the server's tables is covered by them
//! without a second list to keep in step.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::engine::{Engine, Target, WriteOptions};
use crate::registry::{Registry, ResourceDef};
use crate::status::ApiError;

/// The annotation upstream puts on bootstrap roles: while it is `"true"`, the server
/// rewrites their rules on start (so an upgrade that adds kinds extends them); set it to
/// `"false"` to keep an edited role as it is.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// The field manager the bootstrap writes are recorded under, as upstream.
const MANAGER: &str = "kube-apiserver";

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];

/// Kinds `edit` may read but not write: quotas and limits are the namespace owner's, and
/// Events and Leases are written by controllers, not by people.
const READ_ONLY_FOR_EDIT: [&str; 4] = ["resourcequotas", "limitranges", "events", "leases"];

/// The ClusterRoles and ClusterRoleBindings of the default policy for `registry`.
pub fn default_policy(registry: &Registry) -> Vec<(&'static str, Value)> {
    let namespaced: Vec<&ResourceDef> = registry
        .all()
        .iter()
        .map(|d| &**d)
        .filter(|d| d.namespaced)
        .collect();
    let readable = |d: &ResourceDef| d.plural != "secrets" && d.group != RBAC_GROUP;
    let writable =
        |d: &ResourceDef| d.group != RBAC_GROUP && !READ_ONLY_FOR_EDIT.contains(&d.plural);
    let all = || namespaced.iter().copied();

    let mut view = rules(all().filter(|d| readable(d)), &READ, true, false);
    view.push(json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": READ}));
    let mut edit = view.clone();
    edit.extend(rules(
        all().filter(|d| writable(d)),
        &[READ.as_slice(), WRITE.as_slice()].concat(),
        false,
        true,
    ));
    let mut admin = edit.clone();
    admin.extend(rules(
        all().filter(|d| d.group == RBAC_GROUP),
        &[READ.as_slice(), WRITE.as_slice()].concat(),
        false,
        false,
    ));
    let cluster_admin = vec![
        json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
        json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
    ];
    vec![
        ("clusterroles", role("cluster-admin", cluster_admin)),
        ("clusterroles", role("admin", admin)),
        ("clusterroles", role("edit", edit)),
        ("clusterroles", role("view", view)),
        (
            "clusterrolebindings",
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "cluster-admin", "annotations": {AUTOUPDATE: "true"}},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": "system:masters"}],
            }),
        ),
    ]
}

/// One rule per API group over `defs` with `verbs`; `status` adds each kind's status
/// subresource, `scale` its scale subresource.
fn rules<'a>(
    defs: impl Iterator<Item = &'a ResourceDef>,
    verbs: &[&str],
    status: bool,
    scale: bool,
) -> Vec<Value> {
    let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for d in defs {
        let resources = by_group.entry(d.group).or_default();
        resources.push(d.plural.to_string());
        if status && d.status_subresource {
            resources.push(format!("{}/status", d.plural));
        }
        if scale && d.scale_subresource {
            resources.push(format!("{}/scale", d.plural));
        }
    }
    by_group
        .into_iter()
        .map(|(group, mut resources)| {
            resources.sort();
            resources.dedup();
            json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
        })
        .collect()
}

/// A ClusterRole of a default policy: rewritten on every start while it is auto-updated.
pub fn role(name: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "annotations": {AUTOUPDATE: "true"}},
        "rules": rules,
    })
}

/// Creates the default policy's objects that are missing, and brings those still marked
/// for auto-update up to date (on every start: a store from an older version gains the
/// rules for kinds added since). A server without the RBAC kinds has nothing to do.
pub async fn ensure(engine: &Engine) -> Result<(), ApiError> {
    ensure_with(engine, Vec::new()).await
}

/// [`ensure`], with the server's own `extra` ClusterRoles and ClusterRoleBindings (such as
/// those of the components that run against it) kept the same way.
pub async fn ensure_with(
    engine: &Engine,
    extra: Vec<(&'static str, Value)>,
) -> Result<(), ApiError> {
    let registry = engine.registry();
    // The compiled-in kinds only: custom resources reach these roles through aggregation
    // upstream, not by being served, so the policy does not change with definitions.
    let builtin = registry.with_custom(Vec::new());
    for (plural, want) in default_policy(&builtin).into_iter().chain(extra) {
        let Some(def) = registry.lookup(RBAC_GROUP, "v1", plural).cloned() else {
            return Ok(());
        };
        let name = crate::object::name(&want).to_string();
        let opts = WriteOptions::by(MANAGER);
        let current = match engine.current(&def, "", &name).await {
            Ok(current) => current.value(),
            Err(e) if e.code == 404 => match engine.create(&def, "", want, &opts).await {
                Ok(_) => continue,
                // Another replica created it meanwhile.
                Err(e) if e.code == 409 => continue,
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        let autoupdate = current
            .pointer(&format!(
                "/metadata/annotations/{}",
                AUTOUPDATE.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("true");
        let field = if plural == "clusterroles" {
            "rules"
        } else {
            "subjects"
        };
        if !autoupdate || current.get(field) == want.get(field) {
            continue;
        }
        let mut updated = current;
        updated[field] = want[field].clone();
        match engine
            .update(&def, "", &name, updated, Target::Main, &opts)
            .await
        {
            // A concurrent writer won: the next start reconciles again.
            Ok(_) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Attributes;
    use crate::rbac::rule_allows;

    fn policy() -> Vec<(&'static str, Value)> {
        default_policy(&Registry::new(crate::kinds::builtin()))
    }

    fn rules_of(name: &str) -> Vec<Value> {
        policy()
            .into_iter()
            .find(|(p, v)| *p == "clusterroles" && crate::object::name(v) == name)
            .and_then(|(_, v)| v["rules"].as_array().cloned())
            .unwrap_or_default()
    }

    fn allows(role: &str, verb: &str, group: &str, resource: &str, sub: &str) -> bool {
        let a = Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "team".into(),
            name: "x".into(),
            path: String::new(),
        };
        rules_of(role).iter().any(|r| rule_allows(r, &a))
    }

    #[test]
    fn view_reads_but_not_secrets_or_rbac() {
        assert!(allows("view", "list", "apps", "deployments", ""));
        assert!(allows("view", "get", "apps", "deployments", "status"));
        assert!(allows("view", "watch", "", "configmaps", ""));
        assert!(allows("view", "get", "", "namespaces", ""));
        assert!(!allows("view", "get", "", "secrets", ""));
        assert!(!allows("view", "list", RBAC_GROUP, "roles", ""));
        assert!(!allows("view", "create", "apps", "deployments", ""));
    }

    #[test]
    fn edit_writes_workloads_and_secrets_but_not_rbac_or_quotas() {
        assert!(allows("edit", "create", "apps", "deployments", ""));
        assert!(allows("edit", "update", "apps", "deployments", "scale"));
        assert!(allows("edit", "delete", "", "secrets", ""));
        assert!(!allows("edit", "update", "apps", "deployments", "status"));
        assert!(!allows("edit", "create", RBAC_GROUP, "rolebindings", ""));
        assert!(!allows("edit", "create", "", "namespaces", ""));
    }

    #[test]
    fn admin_adds_namespaced_rbac_only() {
        assert!(allows("admin", "create", RBAC_GROUP, "rolebindings", ""));
        assert!(allows("admin", "create", "apps", "deployments", ""));
        assert!(!allows("admin", "create", RBAC_GROUP, "clusterroles", ""));
        assert!(allows(
            "cluster-admin",
            "create",
            RBAC_GROUP,
            "clusterroles",
            ""
        ));
    }

    #[test]
    fn masters_are_bound_to_cluster_admin() {
        let (_, binding) = policy()
            .into_iter()
            .find(|(p, _)| *p == "clusterrolebindings")
            .expect("the policy has a binding");
        assert_eq!(binding["subjects"][0]["kind"], "Group");
        assert_eq!(binding["subjects"][0]["name"], "system:masters");
        assert_eq!(binding["roleRef"]["name"], "cluster-admin");
    }
}

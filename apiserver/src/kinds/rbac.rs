//! `rbac.authorization.k8s.io/v1`: Role, ClusterRole and their bindings (what
//! [`RbacAuthorizer`](crate::rbac::RbacAuthorizer) evaluates).

use apimachinery::JsonPointer;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::Value;

use super::core::def;
use super::validate::{self, NameRule};
use super::{FnHooks, column, no_default, no_prepare, typed};
use crate::registry::ResourceDef;

fn rbac(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    definition: &'static str,
    check: fn(&Value) -> Result<(), String>,
) -> ResourceDef {
    let mut d = def(
        kind,
        plural,
        singular,
        namespaced,
        &[],
        FnHooks {
            default: no_default,
            validate: if namespaced {
                |o, _| validate::metadata(o, NameRule::PathSegment, true)
            } else {
                |o, _| validate::metadata(o, NameRule::PathSegment, false)
            },
            check_types: check,
            prepare_create: no_prepare,
        },
        if kind.ends_with("Binding") {
            vec![column("Role", "string", "The role bound", false, |o| {
                let k = o.at("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
                let n = o.at("/roleRef/name").and_then(Value::as_str).unwrap_or("");
                Value::from(format!("{k}/{n}"))
            })]
        } else {
            vec![]
        },
    );
    d.group = "rbac.authorization.k8s.io";
    d.definition = definition;
    d
}

/// RBAC kinds.
pub fn rbac_kinds() -> Vec<ResourceDef> {
    vec![
        rbac(
            "Role",
            "roles",
            "role",
            true,
            "io.k8s.api.rbac.v1.Role",
            typed::<Role>,
        ),
        rbac(
            "ClusterRole",
            "clusterroles",
            "clusterrole",
            false,
            "io.k8s.api.rbac.v1.ClusterRole",
            typed::<ClusterRole>,
        ),
        rbac(
            "RoleBinding",
            "rolebindings",
            "rolebinding",
            true,
            "io.k8s.api.rbac.v1.RoleBinding",
            typed::<RoleBinding>,
        ),
        rbac(
            "ClusterRoleBinding",
            "clusterrolebindings",
            "clusterrolebinding",
            false,
            "io.k8s.api.rbac.v1.ClusterRoleBinding",
            typed::<ClusterRoleBinding>,
        ),
    ]
}

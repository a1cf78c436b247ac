//! The plain Kubernetes kinds, each with its defaults, validation and table columns, and
//! the helpers kinds are written with. A server composes its
//! [`Registry`](crate::registry::Registry) from these and its own kinds: what it serves is
//! its choice.

pub mod apiextensions;
pub mod apps;
pub mod batch;
pub mod core;
pub mod endpoints;
pub mod hpa_v1;
pub mod networking;
pub mod policy;
pub mod quota;
pub mod rbac;
pub mod scheduling;
pub mod storage;
pub mod validate;
pub mod workloads;

use apimachinery::JsonPointer;
use serde_json::Value;

use crate::registry::{Cell, Column, KindHooks, ResourceDef};

/// Every built-in kind this engine defines, in discovery order (Namespace first).
pub fn builtin() -> Vec<ResourceDef> {
    let mut defs = vec![
        core::namespaces(),
        core::services(),
        endpoints::endpoints(),
        core::configmaps(),
        core::secrets(),
        core::service_accounts(),
        core::events(),
        apps::deployments(),
        apps::replicasets(),
        endpoints::endpoint_slices(),
        core::leases(),
        core::events_v1(),
    ];
    defs.extend(rbac::rbac_kinds());
    defs.extend([
        storage::persistent_volume_claims(),
        quota::resource_quotas(),
        quota::limit_ranges(),
        workloads::statefulsets(),
        workloads::daemonsets(),
        workloads::controller_revisions(),
        batch::jobs(),
        batch::cronjobs(),
        networking::ingresses(),
        networking::ingress_classes(),
        networking::network_policies(),
        policy::pod_disruption_budgets(),
        policy::horizontal_pod_autoscalers(),
        hpa_v1::horizontal_pod_autoscalers_v1(),
        scheduling::priority_classes(),
        storage::storage_classes(),
    ]);
    defs.push(apiextensions::custom_resource_definitions());
    defs
}

/// Checks a body against a typed Rust shape, reporting the first type error.
pub fn typed<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<(), String> {
    T::deserialize(obj).map(|_| ()).map_err(|e| e.to_string())
}

/// The addresses (IP, else hostname) of `status.loadBalancer.ingress`, as Services and
/// Ingresses report them.
pub fn load_balancer_addresses(obj: &Value) -> Vec<&str> {
    obj.at("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("ip").or(i.get("hostname")).and_then(Value::as_str))
        .collect()
}

/// A string cell from a JSON pointer (empty when absent).
pub fn str_at(obj: &Value, pointer: &str) -> Value {
    Value::from(obj.at(pointer).and_then(Value::as_str).unwrap_or(""))
}

/// An integer cell from a JSON pointer (0 when absent).
pub fn int_at(obj: &Value, pointer: &str) -> Value {
    Value::from(obj.at(pointer).and_then(Value::as_i64).unwrap_or(0))
}

/// An object reference's cell, `kind/name` with the kind in lower case as kubectl prints
/// it, from the reference at a JSON pointer (`/involvedObject`, `/spec/resource`).
pub fn reference_at(obj: &Value, pointer: &str) -> Value {
    let Some(reference) = obj.at(pointer) else {
        return Value::from("/");
    };
    let field = |name: &str| reference.get(name).and_then(Value::as_str).unwrap_or("");
    Value::from(format!(
        "{}/{}",
        field("kind").to_lowercase(),
        field("name")
    ))
}

/// The AGE column at the place a kind's upstream table has it (by default it comes last).
pub fn age_column() -> Column {
    column(
        crate::table::AGE,
        "string",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        false,
        crate::table::age_cell,
    )
}

/// A column of `kubectl get` output at priority 0 (`wide` false) or 1 (`wide` true).
pub fn column(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
    wide: bool,
    cell: fn(&Value) -> Value,
) -> Column {
    let c = with_cell(name, type_, description, Cell::Fn(cell));
    if wide { c.wide() } else { c }
}

/// A `string` column showing the field at a JSON pointer (empty when absent).
pub fn str_column(name: &'static str, description: &'static str, pointer: &'static str) -> Column {
    with_cell(name, "string", description, Cell::Str(pointer))
}

/// An `integer` column showing the field at a JSON pointer (0 when absent).
pub fn int_column(name: &'static str, description: &'static str, pointer: &'static str) -> Column {
    with_cell(name, "integer", description, Cell::Int(pointer))
}

/// A column at priority 0.
fn with_cell(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
    cell: Cell,
) -> Column {
    Column {
        name,
        type_,
        format: "",
        description,
        priority: 0,
        cell,
    }
}

/// Hooks made of plain functions, for kinds with simple rules.
pub struct FnHooks {
    /// Defaulting.
    pub default: fn(&mut Value),
    /// Validation.
    pub validate: fn(&Value, Option<&Value>) -> Vec<crate::status::Cause>,
    /// Typed shape check.
    pub check_types: fn(&Value) -> Result<(), String>,
    /// Create-time preparation.
    pub prepare_create: fn(&mut Value),
}

impl FnHooks {
    /// The hooks of a kind whose objects are checked against the typed `T` and need no
    /// create-time preparation: most built-in kinds.
    pub fn typed<T: serde::de::DeserializeOwned>(
        default: fn(&mut Value),
        validate: fn(&Value, Option<&Value>) -> Vec<crate::status::Cause>,
    ) -> Self {
        Self {
            default,
            validate,
            check_types: typed::<T>,
            prepare_create: no_prepare,
        }
    }
}

impl KindHooks for FnHooks {
    fn default(&self, obj: &mut Value) {
        (self.default)(obj)
    }
    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<crate::status::Cause> {
        (self.validate)(obj, old)
    }
    fn check_types(&self, obj: &Value) -> Result<(), String> {
        (self.check_types)(obj)
    }
    fn prepare_create(&self, obj: &mut Value) {
        (self.prepare_create)(obj)
    }
}

/// No-op defaulting.
pub fn no_default(_: &mut Value) {}
/// No-op create preparation.
pub fn no_prepare(_: &mut Value) {}

/// Sets `obj[pointer]` to `value` if absent, creating intermediate objects.
pub fn default_at(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, seg) in path.iter().enumerate() {
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i == path.len() - 1 {
            let slot = map.entry(*seg).or_insert(Value::Null);
            if slot.is_null() {
                *slot = value;
            }
            return;
        }
        let next = map
            .entry(*seg)
            .or_insert_with(|| Value::Object(Default::default()));
        if next.is_null() {
            *next = Value::Object(Default::default());
        }
        cur = next;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{int_column, reference_at, str_column};

    #[test]
    fn pointer_columns_read_their_field_or_its_zero_value() {
        let event = json!({"type": "Warning", "count": 3});
        let kind = str_column("Type", "Normal or Warning", "/type");
        let count = int_column("Count", "How often it happened", "/count").wide();
        assert_eq!((kind.type_, kind.priority), ("string", 0));
        assert_eq!((count.type_, count.priority), ("integer", 1));
        assert_eq!(kind.cell.read(&event), "Warning");
        assert_eq!(count.cell.read(&event), 3);
        assert_eq!(kind.cell.read(&json!({})), "");
        assert_eq!(count.cell.read(&json!({"count": "many"})), 0);
    }

    #[test]
    fn a_reference_reads_as_kubectl_prints_it() {
        let event = json!({"involvedObject": {"kind": "Deployment", "name": "web"}});
        assert_eq!(reference_at(&event, "/involvedObject"), "deployment/web");
        // A missing reference keeps the `kind/name` shape, both parts empty.
        assert_eq!(reference_at(&json!({}), "/involvedObject"), "/");
        assert_eq!(
            reference_at(
                &json!({"spec": {"resource": {"name": "web"}}}),
                "/spec/resource"
            ),
            "/web"
        );
    }
}

//! The kinds the servers built on this engine serve, each with its defaults, validation
//! and table columns.

pub mod apps;
pub mod core;
pub mod federation;
pub mod member;
pub mod validate;

use apimachinery::JsonPointer;
use serde_json::Value;

use crate::registry::{KindHooks, Registry};

/// The kinds of the federation API server.
pub fn federation_registry() -> Registry {
    Registry::new(vec![
        core::namespaces(),
        core::services(),
        core::configmaps(),
        core::secrets(),
        core::events(),
        apps::deployments(),
        apps::replicasets(),
        core::leases(),
        federation::clusters(),
        federation::propagation_policies(),
        federation::placements(),
    ])
}

/// The kinds a member cluster serves (what `cluster-sim` simulates).
pub fn member_registry() -> Registry {
    let mut defs = vec![
        core::namespaces(),
        member::nodes(),
        member::pods(),
        core::services(),
        member::endpoints(),
        core::configmaps(),
        core::secrets(),
        member::service_accounts(),
        core::events(),
        apps::deployments(),
        apps::replicasets(),
        member::endpoint_slices(),
        core::leases(),
    ];
    defs.extend(member::rbac_kinds());
    Registry::new(defs)
}

/// Checks a body against a typed Rust shape, reporting the first type error.
pub fn typed<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<(), String> {
    T::deserialize(obj).map(|_| ()).map_err(|e| e.to_string())
}

/// A string cell from a JSON pointer (empty when absent).
pub fn str_at(obj: &Value, pointer: &str) -> Value {
    Value::from(obj.at(pointer).and_then(Value::as_str).unwrap_or(""))
}

/// An integer cell from a JSON pointer (0 when absent).
pub fn int_at(obj: &Value, pointer: &str) -> Value {
    Value::from(obj.at(pointer).and_then(Value::as_i64).unwrap_or(0))
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

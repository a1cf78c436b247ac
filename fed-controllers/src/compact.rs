//! Objects held as packed JSON text: a `serde_json::Value` tree costs about ten times its
//! JSON size, and the controller holds one desired copy per workload per member and one
//! cached copy of everything it pushed. Objects of one kind are packed against a shared
//! dictionary (see [`apimachinery::Packer`]), which holds each in a fraction of its text.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use apimachinery::{PackedJson, Packer};
use serde_json::Value;

/// An immutable JSON object, cheap to clone and compare.
#[derive(Clone, PartialEq, Eq)]
pub struct Compact(PackedJson);

/// The process's packer for objects of `kind` ([`Packer::for_kind`]): federated objects,
/// the copies built from them and the copies read back from members all share it.
fn packer(kind: &str) -> Packer {
    static PACKERS: OnceLock<Mutex<HashMap<String, Packer>>> = OnceLock::new();
    let mut packers = meridian_runtime::sync::lock(PACKERS.get_or_init(Mutex::default));
    if let Some(p) = packers.get(kind) {
        return p.clone();
    }
    packers
        .entry(kind.to_string())
        .or_insert_with(|| Packer::for_kind(kind))
        .clone()
}

impl Compact {
    /// Encodes `v`.
    pub fn new(v: &Value) -> Self {
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
        Self::from_json(kind, v.to_string())
    }

    /// Wraps JSON text of an object of `kind` written by serde_json (so it parses again).
    pub fn from_json(kind: &str, text: String) -> Self {
        Self(packer(kind).pack(text.as_bytes()))
    }

    /// Decodes the object again.
    pub fn value(&self) -> Value {
        // The text was written by serde_json, so it always parses.
        serde_json::from_slice(&self.json()).unwrap_or(Value::Null)
    }

    /// The JSON text.
    pub fn json(&self) -> Vec<u8> {
        self.0.unpack()
    }
}

impl fmt::Debug for Compact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Value> for Compact {
    fn from(v: Value) -> Self {
        Self::new(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_and_equality() {
        let v = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
        let c = Compact::new(&v);
        assert_eq!(c.value(), v);
        assert_eq!(c, Compact::from(v.clone()));
        assert_ne!(c, Compact::new(&json!({"metadata": {"name": "web"}})));
        assert_eq!(
            c.json(),
            br#"{"metadata":{"name":"web"},"spec":{"replicas":3}}"#
        );
    }

    #[test]
    fn objects_of_one_kind_round_trip_through_its_dictionary() {
        let copy = |i: usize| {
            json!({"apiVersion": "apps/v1", "kind": "CompactTestKind",
                "metadata": {"name": format!("web-{i}"), "namespace": "shop",
                    "labels": {"app.kubernetes.io/managed-by": "meridian", "app": format!("web-{i}")}},
                "spec": {"replicas": i, "selector": {"matchLabels": {"app": format!("web-{i}")}},
                    "template": {"spec": {"containers": [{"name": "web", "image": format!("nginx:1.{i}")}]}}}})
        };
        let first = Compact::new(&copy(0));
        for i in 1..10 {
            let c = Compact::new(&copy(i));
            assert_eq!(c.value(), copy(i));
            assert_eq!(
                c,
                Compact::from_json("CompactTestKind", copy(i).to_string())
            );
            assert_ne!(c, first);
        }
        assert_eq!(first.value(), copy(0));
    }
}

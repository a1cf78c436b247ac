//! Objects held as packed JSON text: a `serde_json::Value` tree costs about ten times its
//! JSON size, and the controller holds one desired copy per workload per member and one
//! cached copy of everything it pushed.

use std::fmt;

use apimachinery::PackedJson;
use serde_json::Value;

/// An immutable JSON object, cheap to clone and compare.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Compact(PackedJson);

impl Compact {
    /// Encodes `v`.
    pub fn new(v: &Value) -> Self {
        Self::from_json(v.to_string())
    }

    /// Wraps JSON text written by serde_json (so it parses again).
    pub fn from_json(text: String) -> Self {
        Self(PackedJson::pack(text.as_bytes()))
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
}

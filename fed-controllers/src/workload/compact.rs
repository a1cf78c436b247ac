//! Objects held as their JSON text: a `serde_json::Value` tree costs about ten times its
//! JSON size, and the controller holds one desired copy per workload per member.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

/// An immutable JSON object, cheap to clone and compare.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Compact(Arc<str>);

impl Compact {
    /// Encodes `v`.
    pub fn new(v: &Value) -> Self {
        Self(v.to_string().into())
    }

    /// Wraps JSON text written by serde_json (so it parses again).
    pub fn from_json(text: String) -> Self {
        Self(text.into())
    }

    /// Decodes the object again.
    pub fn value(&self) -> Value {
        // The text was written by `new` from a Value, so it always parses.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Compact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
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
            c.as_str(),
            r#"{"metadata":{"name":"web"},"spec":{"replicas":3}}"#
        );
    }
}

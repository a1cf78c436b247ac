//! OpenAPI v2 `definitions` lookup with `$ref` resolution and patch metadata.

use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::schema_tree::SchemaTree;

/// Errors from building a [`Definitions`] set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The document is neither a definitions map nor a swagger document holding one.
    #[error("OpenAPI definitions must be a JSON object")]
    NotAnObject,
}

const REF_PREFIX: &str = "#/definitions/";
/// Bounds `$ref` chains so a cyclic alias cannot loop forever.
const MAX_REF_DEPTH: usize = 32;

/// The OpenAPI v2 `definitions` map, keyed by names like `io.k8s.api.apps.v1.Deployment`.
#[derive(Debug, Default)]
pub struct Definitions {
    defs: Map<String, Value>,
    /// The definitions compiled for object checks, on first use.
    tree: OnceLock<SchemaTree>,
}

impl Clone for Definitions {
    fn clone(&self) -> Self {
        Definitions {
            defs: self.defs.clone(),
            tree: OnceLock::new(),
        }
    }
}

/// How a field is merged by strategic merge patch, from `x-kubernetes-patch-strategy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PatchStrategy {
    /// `merge`: lists merge element-wise instead of being replaced.
    pub merge: bool,
    /// `replace`: the patch value replaces the field wholesale.
    pub replace: bool,
    /// `retainKeys`: `$retainKeys` clears keys that the patch does not list.
    pub retain_keys: bool,
}

impl PatchStrategy {
    /// Parses a comma-separated strategy string such as `merge,retainKeys`.
    pub fn parse(s: &str) -> Self {
        let mut out = PatchStrategy::default();
        for part in s.split(',').map(str::trim) {
            match part {
                "merge" => out.merge = true,
                "replace" => out.replace = true,
                "retainKeys" => out.retain_keys = true,
                _ => {}
            }
        }
        out
    }
}

/// Schema and patch metadata of one field.
#[derive(Debug, Clone, Copy, Default)]
pub struct FieldMeta<'a> {
    /// The field's schema with `$ref`s resolved; `None` when unknown.
    pub schema: Option<&'a Value>,
    /// `x-kubernetes-patch-strategy`.
    pub strategy: PatchStrategy,
    /// `x-kubernetes-patch-merge-key`.
    pub merge_key: Option<&'a str>,
}

impl Definitions {
    /// Wraps either the `definitions` map itself or a whole swagger document.
    pub fn new(value: Value) -> Self {
        Self::try_new(value).unwrap_or_default()
    }

    /// Like [`Definitions::new`] but reports a non-object input.
    pub fn try_new(value: Value) -> Result<Self, SchemaError> {
        match value {
            Value::Object(mut m) => {
                // A full swagger document nests the map; a bare map has no such key
                // because Kubernetes definition names are dotted.
                let defs = match m.remove("definitions") {
                    Some(Value::Object(inner)) => inner,
                    _ => m,
                };
                Ok(Definitions {
                    defs,
                    tree: OnceLock::new(),
                })
            }
            _ => Err(SchemaError::NotAnObject),
        }
    }

    /// The raw definition by name.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.defs.get(name)
    }

    /// Every definition by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.defs.iter()
    }

    /// The definitions compiled for walking objects (built on first use).
    pub(crate) fn tree(&self) -> &SchemaTree {
        self.tree.get_or_init(|| SchemaTree::build(self))
    }

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// Whether there are no definitions.
    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// Follows `$ref` chains; `None` if a reference is dangling.
    pub fn resolve<'a>(&'a self, mut schema: &'a Value) -> Option<&'a Value> {
        for _ in 0..MAX_REF_DEPTH {
            match schema.get("$ref").and_then(Value::as_str) {
                Some(r) => schema = self.defs.get(r.strip_prefix(REF_PREFIX).unwrap_or(r))?,
                None => return Some(schema),
            }
        }
        None
    }

    /// The definition name a schema refers to, if it is a `$ref`.
    pub fn ref_name(schema: &Value) -> Option<&str> {
        schema
            .get("$ref")
            .and_then(Value::as_str)
            .map(|r| r.strip_prefix(REF_PREFIX).unwrap_or(r))
    }

    /// The unresolved schema of `field` within an object schema: a declared
    /// property, else the `additionalProperties` schema of a map.
    pub fn property<'a>(&'a self, object: &'a Value, field: &str) -> Option<&'a Value> {
        let object = self.resolve(object)?;
        if let Some(p) = object.get("properties").and_then(|p| p.get(field)) {
            return Some(p);
        }
        object.get("additionalProperties").filter(|a| a.is_object())
    }

    /// Looks up (definition, field) and returns its resolved schema and patch metadata.
    pub fn field(&self, definition: &str, field: &str) -> Option<FieldMeta<'_>> {
        let def = self.defs.get(definition)?;
        self.property(def, field).map(|raw| self.meta(raw))
    }

    /// Patch metadata of an unresolved field schema. Extensions sit next to the
    /// `$ref` in Kubernetes' documents, so both levels are consulted.
    pub fn meta<'a>(&'a self, raw: &'a Value) -> FieldMeta<'a> {
        let resolved = self.resolve(raw);
        let ext = |name: &str| {
            raw.get(name)
                .or_else(|| resolved.and_then(|r| r.get(name)))
                .and_then(Value::as_str)
        };
        FieldMeta {
            schema: resolved,
            strategy: ext("x-kubernetes-patch-strategy")
                .map(PatchStrategy::parse)
                .unwrap_or_default(),
            merge_key: ext("x-kubernetes-patch-merge-key"),
        }
    }

    /// The resolved item schema of an array schema.
    pub fn items<'a>(&'a self, array: &'a Value) -> Option<&'a Value> {
        self.resolve(array)?
            .get("items")
            .and_then(|i| self.resolve(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategy_parse_table() {
        let cases = [
            ("merge", (true, false, false)),
            ("replace", (false, true, false)),
            ("retainKeys", (false, false, true)),
            ("merge,retainKeys", (true, false, true)),
            ("", (false, false, false)),
        ];
        for (s, (m, r, k)) in cases {
            let p = PatchStrategy::parse(s);
            assert_eq!((p.merge, p.replace, p.retain_keys), (m, r, k), "{s}");
        }
    }

    #[test]
    fn lookups_on_real_definitions() {
        let defs = crate::testdata::k8s_definitions();
        let c = defs
            .field("io.k8s.api.core.v1.PodSpec", "containers")
            .unwrap();
        assert!(c.strategy.merge);
        assert_eq!(c.merge_key, Some("name"));
        let item = defs.items(c.schema.unwrap()).unwrap();
        assert!(item["properties"].get("image").is_some());
        let s = defs
            .field("io.k8s.api.apps.v1.DeploymentSpec", "strategy")
            .unwrap();
        assert!(s.strategy.retain_keys);
        assert!(
            s.schema.unwrap()["properties"]
                .get("rollingUpdate")
                .is_some()
        );
        let labels = defs
            .field("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "labels")
            .unwrap();
        assert_eq!(
            labels.schema.unwrap()["additionalProperties"]["type"],
            "string"
        );
        assert!(defs.field("io.k8s.api.core.v1.PodSpec", "nope").is_none());
        assert!(defs.field("nope", "x").is_none());
    }

    #[test]
    fn wraps_swagger_document_and_stops_cycles() {
        let defs = Definitions::new(json!({"definitions": {
            "A": {"$ref": "#/definitions/B"},
            "B": {"$ref": "#/definitions/A"},
            "C": {"type": "string"}
        }}));
        assert_eq!(defs.len(), 3);
        assert!(defs.resolve(&json!({"$ref": "#/definitions/A"})).is_none());
        assert_eq!(
            defs.resolve(&json!({"$ref": "#/definitions/C"})),
            Some(&json!({"type": "string"}))
        );
        assert!(Definitions::try_new(json!([])).is_err());
    }
}

//! Unknown-field and type checks of objects against OpenAPI definitions.

use serde_json::Value;

use crate::field_path::FieldPath;
use crate::schema::Definitions;
use crate::schema_tree::{NodeId, Others, SchemaTree, Shape};

/// A schema violation found in an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaCheckError {
    /// A field the schema does not declare (reported for `fieldValidation=Strict|Warn`).
    #[error("unknown field \"{path}\"")]
    UnknownField {
        /// Field path such as `spec.template.spec.containers[0].imagee`.
        path: String,
    },
    /// A value of the wrong JSON type, worded like apiextensions validation.
    #[error(
        "{path}: Invalid value: \"{found}\": {path} in body must be of type {expected}: \"{found}\""
    )]
    WrongType {
        /// Field path.
        path: String,
        /// The OpenAPI type the schema requires.
        expected: String,
        /// The JSON type found.
        found: String,
    },
}

/// Paths of fields in `obj` that the schema of `root_definition` does not
/// declare, e.g. `spec.template.spec.containers[0].imagee`, ready to quote as
/// `unknown field "<path>"`. An unknown root yields nothing (accept anything).
pub fn unknown_fields(obj: &Value, defs: &Definitions, root_definition: &str) -> Vec<String> {
    run(obj, defs, root_definition, Checks::UNKNOWN)
        .into_iter()
        .filter_map(|e| match e {
            SchemaCheckError::UnknownField { path } => Some(path),
            SchemaCheckError::WrongType { .. } => None,
        })
        .collect()
}

/// Values whose JSON type contradicts the schema (string where integer is
/// expected, ...). `null` is accepted anywhere, as decoding treats it as unset.
pub fn type_errors(
    obj: &Value,
    defs: &Definitions,
    root_definition: &str,
) -> Vec<SchemaCheckError> {
    run(obj, defs, root_definition, Checks::TYPES)
}

/// Both checks in one walk.
pub fn check(obj: &Value, defs: &Definitions, root_definition: &str) -> Vec<SchemaCheckError> {
    run(obj, defs, root_definition, Checks::ALL)
}

#[derive(Clone, Copy)]
struct Checks {
    unknown: bool,
    types: bool,
}

impl Checks {
    const UNKNOWN: Checks = Checks {
        unknown: true,
        types: false,
    };
    const TYPES: Checks = Checks {
        unknown: false,
        types: true,
    };
    const ALL: Checks = Checks {
        unknown: true,
        types: true,
    };
}

fn run(obj: &Value, defs: &Definitions, root: &str, checks: Checks) -> Vec<SchemaCheckError> {
    let mut out = Vec::new();
    let tree = defs.tree();
    if let Some(node) = tree.root(root) {
        Walker { tree, checks }.walk(obj, node, FieldPath::Root, &mut out);
    }
    out
}

/// The JSON type name kube-openapi reports for a value (`integer` for whole numbers).
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

struct Walker<'a> {
    tree: &'a SchemaTree,
    checks: Checks,
}

impl Walker<'_> {
    fn walk(
        &self,
        value: &Value,
        node: NodeId,
        path: FieldPath<'_>,
        out: &mut Vec<SchemaCheckError>,
    ) {
        let Some((shape, quantity)) = self.tree.shape(node) else {
            return;
        };
        if value.is_null() {
            return;
        }
        if self.checks.types && !type_ok(value, shape, quantity) {
            out.push(SchemaCheckError::WrongType {
                path: path.to_string(),
                expected: shape.type_name.as_deref().unwrap_or("").to_string(),
                found: json_type(value).to_string(),
            });
            return;
        }
        match value {
            Value::Object(map) => {
                if shape.properties.is_none() && shape.others == Others::Absent {
                    return; // free-form object
                }
                for (k, v) in map {
                    let p = path.field(k);
                    let declared = shape.properties.as_ref().and_then(|p| p.get(k.as_str()));
                    match (declared, shape.others) {
                        (Some(&child), _) | (None, Others::Schema(child)) => {
                            self.walk(v, child, p, out)
                        }
                        (None, Others::Allowed) => {}
                        (None, _) if self.checks.unknown => {
                            out.push(SchemaCheckError::UnknownField {
                                path: p.to_string(),
                            });
                        }
                        (None, _) => {}
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item) = shape.items {
                    for (i, v) in items.iter().enumerate() {
                        self.walk(v, item, path.index(i), out);
                    }
                }
            }
            _ => {}
        }
    }
}

fn type_ok(value: &Value, shape: &Shape, quantity: bool) -> bool {
    let found = json_type(value);
    // Quantities and IntOrString are declared as strings but accept numbers on the wire.
    if quantity {
        return matches!(found, "string" | "integer" | "number");
    }
    if shape.int_or_string {
        return matches!(found, "string" | "integer");
    }
    match shape.type_name.as_deref() {
        Some("number") => matches!(found, "integer" | "number"),
        Some(t) => t == found,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{arbitrary_json, k8s_definitions};
    use proptest::prelude::*;
    use serde_json::json;

    const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "labels": {"app.kubernetes.io/name": "web"},
                "annotations": {"a": "b"},
                "creationTimestamp": "2024-01-01T00:00:00Z"
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "25%"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "app",
                            "image": "nginx",
                            "ports": [{"containerPort": 80}],
                            "resources": {"limits": {"cpu": "500m", "memory": 128974848}},
                            "env": [{"name": "A", "value": "b"}]
                        }]
                    }
                }
            }
        })
    }

    #[test]
    fn valid_object_is_clean() {
        let defs = k8s_definitions();
        assert_eq!(check(&deployment(), defs, DEPLOYMENT), vec![]);
    }

    #[test]
    fn unknown_fields_table() {
        let defs = k8s_definitions();
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (json!({"spec": {"foo": 1}}), vec!["spec.foo"]),
            (
                json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b", "imagee": "x"}]}}}}),
                vec!["spec.template.spec.containers[1].imagee"],
            ),
            (json!({"metadata": {"labels": {"any": "thing"}}}), vec![]),
            (
                json!({"bogus": {"deep": 1}, "status": {"nope": true}}),
                vec!["bogus", "status.nope"],
            ),
            (
                json!({"metadata": {"managedFields": [{"fieldsV1": {"f:x": {}}}]}}),
                vec![],
            ),
            (json!(["not", "an", "object"]), vec![]),
        ];
        for (obj, want) in cases {
            assert_eq!(unknown_fields(&obj, defs, DEPLOYMENT), want, "{obj}");
        }
        assert_eq!(
            unknown_fields(&json!({"x": 1}), defs, "example.com.v1.Unknown"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn stops_at_raw_extension_and_preserve_unknown() {
        let defs = Definitions::new(json!({
            "Root": {"type": "object", "properties": {
                "raw": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.runtime.RawExtension"},
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}},
                "closed": {"type": "object", "properties": {"a": {"type": "string"}}}
            }},
            "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object", "properties": {"x": {"type": "string"}}}
        }));
        let obj = json!({"raw": {"y": 1}, "open": {"b": 1}, "closed": {"b": 1}});
        assert_eq!(unknown_fields(&obj, &defs, "Root"), vec!["closed.b"]);
    }

    #[test]
    fn recursive_closed_and_dangling_schemas() {
        let defs = Definitions::new(json!({
            "Node": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}},
                "closed": {"type": "object", "properties": {"a": {"type": "string"}},
                    "additionalProperties": false},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                "lost": {"$ref": "#/definitions/Missing"}
            }}
        }));
        let obj = json!({
            "name": "root",
            "children": [{"name": "a", "children": [{"nme": "typo"}]}, {"name": 1}],
            "closed": {"a": "x", "b": "y"},
            "tags": {"any": "thing", "n": 2},
            "lost": {"whatever": true}
        });
        assert_eq!(
            unknown_fields(&obj, &defs, "Node"),
            vec!["children[0].children[0].nme", "closed.b"]
        );
        let types: Vec<String> = type_errors(&obj, &defs, "Node")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(types.len(), 2, "{types:?}");
        assert!(types[0].starts_with("children[1].name: Invalid value: \"integer\""));
        assert!(types[1].starts_with("tags.n: Invalid value: \"integer\""));
    }

    #[test]
    fn type_errors_table() {
        let defs = k8s_definitions();
        // (object, [(path, expected, found)])
        type Case = (Value, Vec<(&'static str, &'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                json!({"spec": {"replicas": "3"}}),
                vec![("spec.replicas", "integer", "string")],
            ),
            (
                json!({"spec": {"replicas": 1.5}}),
                vec![("spec.replicas", "integer", "number")],
            ),
            (
                json!({"spec": {"paused": "yes"}}),
                vec![("spec.paused", "boolean", "string")],
            ),
            (
                json!({"metadata": {"labels": {"a": 1}}}),
                vec![("metadata.labels.a", "string", "integer")],
            ),
            (
                json!({"spec": {"template": {"spec": {"containers": {}}}}}),
                vec![("spec.template.spec.containers", "array", "object")],
            ),
            (
                json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": true}}}}),
                vec![("spec.strategy.rollingUpdate.maxSurge", "string", "boolean")],
            ),
            (json!({"spec": {"replicas": null}}), vec![]),
        ];
        for (obj, want) in cases {
            let got: Vec<(String, String, String)> = type_errors(&obj, defs, DEPLOYMENT)
                .into_iter()
                .map(|e| match e {
                    SchemaCheckError::WrongType {
                        path,
                        expected,
                        found,
                    } => (path, expected, found),
                    other => panic!("unexpected {other}"),
                })
                .collect();
            let want: Vec<(String, String, String)> = want
                .into_iter()
                .map(|(a, b, c)| (a.into(), b.into(), c.into()))
                .collect();
            assert_eq!(got, want, "{obj}");
        }
        let err = &type_errors(&json!({"spec": {"replicas": "3"}}), defs, DEPLOYMENT)[0];
        assert_eq!(
            err.to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
    }

    proptest! {
        #[test]
        fn free_form_accepts_anything(v in arbitrary_json()) {
            let defs = Definitions::new(json!({"Root": {"type": "object"}}));
            prop_assert!(check(&v, &defs, "Root").is_empty() || !v.is_object());
        }

        #[test]
        fn unknown_paths_point_into_the_object(extra in "[a-z]{1,6}") {
            let defs = k8s_definitions();
            let mut obj = deployment();
            obj["spec"]["template"]["spec"]["containers"][0][format!("zz{extra}")] = json!(1);
            let got = unknown_fields(&obj, defs, DEPLOYMENT);
            prop_assert_eq!(got, vec![format!("spec.template.spec.containers[0].zz{extra}")]);
        }
    }
}

//! Unknown-field and type checks of objects against OpenAPI definitions.

use serde_json::Value;

use crate::field_path::FieldPath;
use crate::schema::Definitions;

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

const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

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
    if let Some(schema) = defs.get(root) {
        Walker { defs, checks }.walk(obj, schema, FieldPath::Root, &mut out);
    }
    out
}

fn json_type(v: &Value) -> &'static str {
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
    defs: &'a Definitions,
    checks: Checks,
}

impl Walker<'_> {
    fn walk(
        &self,
        value: &Value,
        raw: &Value,
        path: FieldPath<'_>,
        out: &mut Vec<SchemaCheckError>,
    ) {
        let ref_name = Definitions::ref_name(raw);
        if ref_name == Some(RAW_EXTENSION) {
            return;
        }
        let Some(schema) = self.defs.resolve(raw) else {
            return;
        };
        let preserve =
            |s: &Value| s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if preserve(raw) || preserve(schema) || value.is_null() {
            return;
        }
        if self.checks.types && !self.type_ok(value, schema, ref_name) {
            out.push(SchemaCheckError::WrongType {
                path: path.to_string(),
                expected: schema["type"].as_str().unwrap_or("").to_string(),
                found: json_type(value).to_string(),
            });
            return;
        }
        match value {
            Value::Object(map) => {
                let props = schema.get("properties").and_then(Value::as_object);
                let additional = schema.get("additionalProperties");
                if props.is_none() && additional.is_none() {
                    return; // free-form object
                }
                for (k, v) in map {
                    let p = path.field(k);
                    if let Some(s) = props.and_then(|p| p.get(k)) {
                        self.walk(v, s, p, out);
                    } else {
                        match additional {
                            Some(s @ Value::Object(_)) => self.walk(v, s, p, out),
                            Some(Value::Bool(true)) => {}
                            _ if self.checks.unknown => {
                                out.push(SchemaCheckError::UnknownField {
                                    path: p.to_string(),
                                });
                            }
                            _ => {}
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, v) in items.iter().enumerate() {
                        self.walk(v, item_schema, path.index(i), out);
                    }
                }
            }
            _ => {}
        }
    }

    fn type_ok(&self, value: &Value, schema: &Value, ref_name: Option<&str>) -> bool {
        let found = json_type(value);
        // Quantities and IntOrString are declared as strings but accept numbers on the wire.
        if ref_name == Some(QUANTITY) {
            return matches!(found, "string" | "integer" | "number");
        }
        if schema.get("format").and_then(Value::as_str) == Some("int-or-string") {
            return matches!(found, "string" | "integer");
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("number") => matches!(found, "integer" | "number"),
            Some(t) => t == found,
            None => true,
        }
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

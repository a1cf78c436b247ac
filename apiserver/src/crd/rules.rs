//! `x-kubernetes-validations` (CEL rules) on custom objects.
//!
//! This server has no CEL evaluator, so it cannot tell whether a rule holds. Ignoring the
//! rule would store objects the definition's author meant to refuse, so every write that
//! reaches a field carrying rules is refused instead, with a 422 naming the field and the
//! rule; objects whose rule-carrying fields are absent are unaffected.

use serde_json::Value;

use crate::status::Cause;

/// The causes refusing `obj` for the rules of `schema` that apply to it.
pub fn check(schema: &Value, obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    walk(schema, obj, "", &mut out);
    out
}

fn field_of(path: &str) -> String {
    if path.is_empty() {
        "<root>".to_string()
    } else {
        path.to_string()
    }
}

fn walk(schema: &Value, v: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for r in rules {
            let rule = r.get("rule").and_then(Value::as_str).unwrap_or("");
            let field = match r.get("fieldPath").and_then(Value::as_str) {
                Some(fp) if !fp.is_empty() => format!("{path}{fp}"),
                _ => field_of(path),
            };
            out.push(Cause {
                reason: "FieldValueForbidden".into(),
                message: format!(
                    "Forbidden: x-kubernetes-validations rule \"{rule}\" cannot be evaluated by this server (no CEL support), so the object is refused rather than stored unchecked"
                ),
                field: field.trim_start_matches('.').to_string(),
            });
        }
    }
    let child = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, item) in map {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
                    walk(s, item, &child(k), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    walk(s, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check;

    #[test]
    fn a_rule_on_a_present_field_refuses_the_object_naming_the_rule() {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}
        }}});
        let causes = check(&schema, &json!({"spec": {"min": 1, "max": 2}}), None);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec");
        assert!(
            causes[0].message.contains("self.min <= self.max"),
            "{causes:?}"
        );
        // Without the field there is nothing to check.
        assert!(check(&schema, &json!({"metadata": {"name": "a"}}), None).is_empty());
    }
}

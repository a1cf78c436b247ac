//! `x-kubernetes-validations` (CEL rules) on custom objects, evaluated with the `cel`
//! interpreter: `self` is the value at the rule's node, `oldSelf` the same node of the
//! stored object on update (transition rules are skipped on create, as upstream).
//!
//! The interpreter has standard CEL, not Kubernetes' extension libraries (`quantity()`,
//! `isURL()`, `format`...). A rule it cannot parse or evaluate is never skipped: the
//! object is refused with a 422 naming the rule and why.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::status::Cause;

/// The causes refusing `obj` (and, on update, `old`) for the rules of `schema`.
pub fn check(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    walk(schema, obj, old, "", true, &mut out);
    out
}

/// A parsed rule, or why it does not parse; kept per rule text, since the same few
/// rules run for every object of a kind.
type Compiled = Result<Arc<cel::Program>, String>;

fn compiled(rule: &str) -> Compiled {
    static PROGRAMS: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    let programs = PROGRAMS.get_or_init(Default::default);
    if let Some(p) = programs.lock().expect("compiled rules").get(rule) {
        return p.clone();
    }
    let p = cel::Program::compile(rule)
        .map(Arc::new)
        .map_err(|e| e.to_string());
    programs
        .lock()
        .expect("compiled rules")
        .insert(rule.to_string(), p.clone());
    p
}

/// A JSON value as CEL sees it (integers stay integers).
fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => items.iter().map(to_cel).collect::<Vec<_>>().into(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), to_cel(v)))
            .collect::<HashMap<String, cel::Value>>()
            .into(),
    }
}

/// Whether the rule holds; `Err` says why it could not be decided.
fn evaluate(rule: &str, value: &Value, old: Option<&Value>) -> Result<bool, String> {
    let program = compiled(rule)?;
    let mut ctx = cel::Context::default();
    ctx.add_variable_from_value("self", to_cel(value));
    if let Some(old) = old {
        ctx.add_variable_from_value("oldSelf", to_cel(old));
    }
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("the rule evaluated to {other:?}, not a boolean")),
        Err(e) => Err(e.to_string()),
    }
}

/// The type kube-apiserver names in a failed rule's `Invalid value`.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

fn run_rules(schema: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    for r in rules {
        let rule = r.get("rule").and_then(Value::as_str).unwrap_or("");
        // A rule reading oldSelf is a transition rule: only updates have an old value.
        if old.is_none() && rule.contains("oldSelf") {
            continue;
        }
        let field = match r.get("fieldPath").and_then(Value::as_str) {
            Some(fp) if !fp.is_empty() => format!("{path}{fp}"),
            _ => path.to_string(),
        };
        let field = field.trim_start_matches('.').to_string();
        match evaluate(rule, v, old) {
            Ok(true) => {}
            Ok(false) => {
                let message = r
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .map_or_else(|| format!("failed rule: {rule}"), str::to_string);
                let reason = match r.get("reason").and_then(Value::as_str) {
                    Some("FieldValueForbidden") => "FieldValueForbidden",
                    Some("FieldValueRequired") => "FieldValueRequired",
                    Some("FieldValueDuplicate") => "FieldValueDuplicate",
                    _ => "FieldValueInvalid",
                };
                out.push(Cause {
                    reason: reason.into(),
                    message: format!("Invalid value: \"{}\": {message}", type_name(v)),
                    field,
                });
            }
            Err(why) => out.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: \"{}\": rule \"{rule}\" could not be evaluated: {why}",
                    type_name(v)
                ),
                field,
            }),
        }
    }
}

fn walk(
    schema: &Value,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    root: bool,
    out: &mut Vec<Cause>,
) {
    run_rules(schema, v, old, path, out);
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
                if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(s) = props.and_then(|p| p.get(k)).or(additional) {
                    let old_item = old.and_then(|o| o.get(k));
                    walk(s, item, old_item, &child(k), false, out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items").filter(|s| s.is_object()) {
                // List items are not correlated with the old list: no oldSelf below.
                for (i, item) in items.iter().enumerate() {
                    walk(s, item, None, &format!("{path}[{i}]"), false, out);
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

    fn schema() -> serde_json::Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                {"rule": "!has(self.mode) || self.mode == 'A' || self.mode == 'B'"},
                {"rule": "self.min >= oldSelf.min", "message": "min may only grow"}
            ],
            "properties": {
                "min": {"type": "integer"}, "max": {"type": "integer"}, "mode": {"type": "string"},
                "items": {"type": "array", "items": {"type": "string",
                    "x-kubernetes-validations": [{"rule": "size(self) < 4"}]}},
                "url": {"type": "string", "x-kubernetes-validations": [{"rule": "isURL(self)"}]}
            }
        }}})
    }

    fn fields(obj: serde_json::Value, old: Option<serde_json::Value>) -> Vec<String> {
        check(&schema(), &obj, old.as_ref())
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn rules_hold_or_name_their_message() {
        assert!(fields(json!({"spec": {"min": 1, "max": 2, "mode": "A"}}), None).is_empty());
        assert_eq!(
            fields(json!({"spec": {"min": 3, "max": 2}}), None),
            ["spec: Invalid value: \"object\": min must not exceed max"]
        );
        assert_eq!(
            fields(json!({"spec": {"min": 1, "max": 2, "mode": "C"}}), None),
            [
                "spec: Invalid value: \"object\": failed rule: !has(self.mode) || self.mode == 'A' || self.mode == 'B'"
            ]
        );
        assert_eq!(
            fields(
                json!({"spec": {"min": 1, "max": 2, "items": ["ok", "toolong"]}}),
                None
            ),
            ["spec.items[1]: Invalid value: \"string\": failed rule: size(self) < 4"]
        );
    }

    #[test]
    fn transition_rules_run_on_update_only() {
        let old = json!({"spec": {"min": 2, "max": 5}});
        assert!(fields(json!({"spec": {"min": 3, "max": 5}}), Some(old.clone())).is_empty());
        assert_eq!(
            fields(json!({"spec": {"min": 1, "max": 5}}), Some(old)),
            ["spec: Invalid value: \"object\": min may only grow"]
        );
    }

    #[test]
    fn a_rule_that_cannot_be_evaluated_refuses_the_object() {
        let got = fields(
            json!({"spec": {"min": 1, "max": 2, "url": "http://x"}}),
            None,
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with(
                "spec.url: Invalid value: \"string\": rule \"isURL(self)\" could not be evaluated"
            ),
            "{got:?}"
        );
    }
}

//! `scheduling.k8s.io/v1` PriorityClass.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{Value, json};

use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, column, default_at};
use crate::registry::ResourceDef;
use crate::status::Cause;

/// The highest value a user-defined PriorityClass may take; above it are the system's.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

fn validate_priority_class(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, false);
    let name = crate::object::name(o);
    // `system-` names are reserved for the classes the system creates.
    if name.starts_with("system-") && old.is_none() {
        errs.push(invalid(
            "metadata.name",
            &Value::from(name),
            "priority class names with 'system-' prefix are reserved",
        ));
    }
    match o.get("value") {
        None => errs.push(required("value")),
        Some(v) => match v.as_i64() {
            Some(n) if n > HIGHEST_USER_PRIORITY => errs.push(invalid(
                "value",
                v,
                "must be no more than 1000000000 for user-defined priority classes",
            )),
            Some(_) => {}
            None => errs.push(invalid("value", v, "must be an integer")),
        },
    }
    if let Some(p) = o.get("preemptionPolicy")
        && !matches!(p.as_str(), Some("PreemptLowerPriority" | "Never"))
    {
        errs.push(not_supported(
            "preemptionPolicy",
            p,
            &["Never", "PreemptLowerPriority"],
        ));
    }
    errs.extend(validate::unchanged(o, old, &["value", "preemptionPolicy"]));
    errs
}

/// `scheduling.k8s.io/v1` PriorityClass (cluster-scoped).
pub fn priority_classes() -> ResourceDef {
    let mut d = ResourceDef::new(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        "priorityclass",
        false,
        FnHooks::typed::<PriorityClass>(
            |o| default_at(o, &["preemptionPolicy"], json!("PreemptLowerPriority")),
            validate_priority_class,
        ),
    );
    d.short_names = &["pc"];
    d.definition = "io.k8s.api.scheduling.v1.PriorityClass";
    d.columns = vec![
        column(
            "Value",
            "integer",
            "The value of this priority class.",
            false,
            |o| super::int_at(o, "/value"),
        ),
        column(
            "Global-Default",
            "boolean",
            "Whether this class is the default for pods without a priority class.",
            false,
            |o| Value::from(o.get("globalDefault").and_then(Value::as_bool) == Some(true)),
        ),
        column(
            "PreemptionPolicy",
            "string",
            "Whether pods of this class may preempt pods of lower priority.",
            false,
            |o| super::str_at(o, "/preemptionPolicy"),
        ),
    ];
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_priority_class_value_is_bounded_and_fixed() {
        let pc = json!({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"});
        assert!(validate_priority_class(&pc, None).is_empty());
        let mut changed = pc.clone();
        changed["value"] = json!(2000);
        let fields: Vec<String> = validate_priority_class(&changed, Some(&pc))
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["value"]);
        let huge = json!({"metadata": {"name": "system-x"}, "value": 2_000_000_000});
        let fields: Vec<String> = validate_priority_class(&huge, None)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["metadata.name", "value"]);
    }
}

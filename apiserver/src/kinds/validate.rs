//! Validation shared by kinds: object names, labels, annotations, label selectors.

use apimachinery::JsonPointer;
use apimachinery::validation;
use serde_json::Value;

use crate::object;
use crate::status::Cause;

/// A `FieldValueInvalid` cause.
pub fn invalid(field: &str, value: &Value, why: &str) -> Cause {
    let shown = match value {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {shown}: {why}"),
        field: field.into(),
    }
}

/// A `FieldValueRequired` cause.
pub fn required(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    }
}

/// A `FieldValueNotSupported` cause.
pub fn not_supported(field: &str, value: &Value, allowed: &[&str]) -> Cause {
    let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!(
            "Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ),
        field: field.into(),
    }
}

/// A `FieldValueForbidden` cause.
pub fn forbidden(field: &str, why: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {why}"),
        field: field.into(),
    }
}

/// A `FieldValueDuplicate` cause.
pub fn duplicate(field: &str, value: &Value) -> Cause {
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {value}"),
        field: field.into(),
    }
}

/// How an object's name must look.
#[derive(Clone, Copy)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (Namespaces).
    Label,
    /// RFC 1035 label (Services: must start with a letter).
    Dns1035,
    /// Any URL path segment (RBAC kinds: `system:controller:x` is valid).
    PathSegment,
}

/// Validates `metadata`: name, namespace, labels, annotations, owner references.
pub fn metadata(obj: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    let mut errs = Vec::new();
    let meta = object::meta(obj);
    let name = object::name(obj);
    if name.is_empty() {
        if meta.get("generateName").is_none() {
            errs.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "name or generateName is required".into(),
                field: "metadata.name".into(),
            });
        }
    } else {
        let res = match rule {
            NameRule::Subdomain => validation::dns1123_subdomain(name),
            NameRule::Label => validation::dns1123_label(name),
            NameRule::Dns1035 => dns1035_label(name),
            NameRule::PathSegment => path_segment(name),
        };
        if let Err(msgs) = res {
            for m in msgs {
                errs.push(invalid("metadata.name", &Value::from(name), &m));
            }
        }
    }
    if namespaced && object::namespace(obj).is_empty() {
        errs.push(required("metadata.namespace"));
    }
    if let Some(labels) = meta.get("labels") {
        match labels.as_object() {
            Some(map) => {
                for (k, v) in map {
                    if let Err(msgs) = validation::label_key(k) {
                        for m in msgs {
                            errs.push(invalid("metadata.labels", &Value::from(k.as_str()), &m));
                        }
                    }
                    match v.as_str() {
                        Some(s) => {
                            if let Err(msgs) = validation::label_value(s) {
                                for m in msgs {
                                    errs.push(invalid(&format!("metadata.labels.{k}"), v, &m));
                                }
                            }
                        }
                        None => errs.push(invalid(
                            &format!("metadata.labels.{k}"),
                            v,
                            "must be a string",
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => errs.push(invalid("metadata.labels", labels, "must be an object")),
        }
    }
    if let Some(ann) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0usize;
        for (k, v) in ann {
            total += k.len() + v.as_str().map_or(0, str::len);
            if let Err(msgs) = validation::label_key(k) {
                for m in msgs {
                    errs.push(invalid(
                        "metadata.annotations",
                        &Value::from(k.as_str()),
                        &m,
                    ));
                }
            }
            if !v.is_string() {
                errs.push(invalid(
                    &format!("metadata.annotations.{k}"),
                    v,
                    "must be a string",
                ));
            }
        }
        if total > 256 * 1024 {
            errs.push(Cause {
                reason: "FieldValueTooLong".into(),
                message: "Too long: must have at most 262144 bytes".into(),
                field: "metadata.annotations".into(),
            });
        }
    }
    if let Some(refs) = meta.get("ownerReferences").and_then(Value::as_array) {
        for (i, r) in refs.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    errs.push(required(&format!("metadata.ownerReferences[{i}].{f}")));
                }
            }
        }
    }
    errs
}

/// Kubernetes' path-segment rule: anything but `.`, `..`, `/` and `%`.
pub fn path_segment(name: &str) -> Result<(), Vec<String>> {
    if name == "." || name == ".." {
        return Err(vec![format!("may not be '{name}'")]);
    }
    let bad: Vec<String> = ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect();
    if bad.is_empty() { Ok(()) } else { Err(bad) }
}

/// RFC 1035 label: like an RFC 1123 label but starting with a letter.
pub fn dns1035_label(name: &str) -> Result<(), Vec<String>> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(vec!["a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".into()])
    }
}

/// Validates a metav1.LabelSelector object at `field`.
pub fn label_selector(sel: &Value, field: &str) -> Vec<Cause> {
    match apimachinery::selector::LabelSelector::from_json(sel) {
        Ok(_) => Vec::new(),
        Err(e) => vec![invalid(field, sel, &e.to_string())],
    }
}

/// Validates that an integer field, if present, is at least `min`.
pub fn min_int(obj: &Value, pointer: &str, field: &str, min: i64) -> Option<Cause> {
    let v = obj.at(pointer)?;
    match v.as_i64() {
        Some(n) if n >= min => None,
        Some(_) => Some(invalid(
            field,
            v,
            &format!("must be greater than or equal to {min}"),
        )),
        None => Some(invalid(field, v, "must be an integer")),
    }
}

/// The value at `field` must not change on update.
pub fn immutable(obj: &Value, old: &Value, pointer: &str, field: &str) -> Option<Cause> {
    let (a, b) = (obj.at(pointer), old.at(pointer));
    (a != b).then(|| invalid(field, a.unwrap_or(&Value::Null), "field is immutable"))
}

/// On update (`old` is set), each of `fields` (dotted paths of plain names, such as
/// `spec.selector`) must not change; a create has nothing to compare.
pub fn unchanged(obj: &Value, old: Option<&Value>, fields: &[&str]) -> Vec<Cause> {
    let Some(old) = old else {
        return Vec::new();
    };
    fields
        .iter()
        .filter_map(|field| immutable(obj, old, &format!("/{}", field.replace('.', "/")), field))
        .collect()
}

/// Whether the object at `pointer` differs between `obj` and `old` in any field but
/// `mutable` (for kinds whose spec is fixed after creation but for a few fields).
pub fn changed_except(obj: &Value, old: &Value, pointer: &str, mutable: &[&str]) -> bool {
    let strip = |v: Option<&Value>| {
        let mut m = v.and_then(Value::as_object).cloned().unwrap_or_default();
        m.retain(|k, _| !mutable.contains(&k.as_str()));
        m
    };
    strip(obj.at(pointer)) != strip(old.at(pointer))
}

/// Validates an int-or-string at `pointer`: a non-negative integer or a percentage
/// (`"25%"`), as PodDisruptionBudgets and rolling updates take.
pub fn int_or_percent(obj: &Value, pointer: &str, field: &str) -> Option<Cause> {
    let v = obj.at(pointer)?;
    let ok = match v {
        Value::Number(n) => n.as_i64().is_some_and(|n| n >= 0),
        Value::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<u32>().ok())
            .is_some(),
        _ => false,
    };
    (!ok).then(|| {
        invalid(
            field,
            v,
            "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
        )
    })
}

/// Validates a quantity (`"500m"`, `"1Gi"`) at `field`.
pub fn quantity(value: &Value, field: &str) -> Option<Cause> {
    let ok = match value {
        Value::String(s) => apimachinery::quantity::parse_quantity(s).is_ok(),
        Value::Number(_) => true,
        _ => false,
    };
    (!ok).then(|| {
        invalid(
            field,
            value,
            "must match the regex ^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$",
        )
    })
}

/// Validates each value of the quantity map at `pointer` (e.g. a quota's `spec.hard`).
pub fn quantities(obj: &Value, pointer: &str, field: &str) -> Vec<Cause> {
    obj.at(pointer)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| quantity(v, &format!("{field}[{k}]")))
        .collect()
}

/// Validates a port number at `field` (1 to 65535).
pub fn port(value: &Value, field: &str) -> Option<Cause> {
    let ok = value.as_i64().is_some_and(|n| (1..=65535).contains(&n));
    (!ok).then(|| invalid(field, value, "must be between 1 and 65535, inclusive"))
}

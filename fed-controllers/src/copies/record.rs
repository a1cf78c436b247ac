//! The record Meridian keeps on a member copy that override rules changed: what it set
//! there (label keys, annotation keys, top-level fields) and a digest of the whole copy,
//! in one annotation.
//!
//! Drift checks treat what a member has beyond the wanted copy as the member's own
//! (server defaults, labels its controllers add), so without a record a field an override
//! stops setting — a label rule removed, a policy deleted, a rule whose target no longer
//! matches the cluster — would stay on the copy. With it the next write removes what the
//! record lists and the new copy does not set, and the digest makes any change of the
//! overridden copy a write, even one that only drops a nested field. The record is kept only
//! on copies some rule changes; a plain copy has none, so a member holding a record while
//! no rule targets it any more is rewritten once and the record goes with the fields.
//! (Client-side `kubectl apply` keeps its last-applied configuration the same way.)

use std::collections::BTreeSet;

use fed_api::names::{MANAGED_BY_LABEL, OWNER_UID_LABEL};
use serde_json::{Map, Value};

/// The annotation holding the record.
pub const RECORD_ANNOTATION: &str = "federation.meridian.dev/overridden";

/// Top-level fields that are never a copy's content.
const NOT_CONTENT: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];

/// What Meridian set on one member copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// A digest of the copy (without the record).
    pub digest: String,
    /// Its label keys, but Meridian's ownership labels (always set).
    pub labels: BTreeSet<String>,
    /// Its annotation keys, but the record's own.
    pub annotations: BTreeSet<String>,
    /// Its top-level fields but `apiVersion`, `kind`, `metadata` and `status`.
    pub fields: BTreeSet<String>,
}

fn keys(v: &Value, skip: &[&str]) -> BTreeSet<String> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| !skip.contains(&k.as_str()))
        .cloned()
        .collect()
}

impl Record {
    /// The record of `copy` (a record it already carries is not part of it).
    pub fn of(copy: &Value) -> Record {
        let mut plain = copy.clone();
        remove_record(&mut plain);
        Record {
            digest: format!("{:016x}", digest(&plain)),
            labels: keys(
                &plain["metadata"]["labels"],
                &[MANAGED_BY_LABEL, OWNER_UID_LABEL],
            ),
            annotations: keys(&plain["metadata"]["annotations"], &[]),
            fields: keys(&plain, &NOT_CONTENT),
        }
    }

    /// The record `obj` carries, if any (`None` too when it cannot be read).
    pub fn read(obj: &Value) -> Option<Record> {
        let text = obj
            .pointer("/metadata/annotations")?
            .get(RECORD_ANNOTATION)?
            .as_str()?;
        let mut parts = text.split(' ');
        let mut r = Record {
            digest: parts.next()?.to_owned(),
            ..Record::default()
        };
        for part in parts {
            let (name, list) = part.split_once('=')?;
            let set = match name {
                "labels" => &mut r.labels,
                "annotations" => &mut r.annotations,
                "fields" => &mut r.fields,
                _ => continue,
            };
            set.extend(list.split(',').filter(|k| !k.is_empty()).map(str::to_owned));
        }
        Some(r)
    }
}

/// `<digest> labels=a,b annotations=c fields=spec`: label and annotation keys are
/// qualified names and field names JSON keys of the API, none holds a space, a comma or `=`.
impl std::fmt::Display for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.digest)?;
        for (name, set) in [
            ("labels", &self.labels),
            ("annotations", &self.annotations),
            ("fields", &self.fields),
        ] {
            if !set.is_empty() {
                let list: Vec<&str> = set.iter().map(String::as_str).collect();
                write!(f, " {name}={}", list.join(","))?;
            }
        }
        Ok(())
    }
}

/// Puts the record of `copy` on it (replacing any it carries).
pub fn stamp(copy: &mut Value) {
    let record = Record::of(copy).to_string();
    let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Map::new());
    }
    if let Some(a) = annotations.as_object_mut() {
        a.insert(RECORD_ANNOTATION.into(), record.into());
    }
}

fn raw(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/annotations")?.get(RECORD_ANNOTATION)
}

/// Whether `actual` carries the record `desired` does (or neither carries one): when not,
/// the member's copy was made under other rules and is written again.
pub fn same(actual: &Value, desired: &Value) -> bool {
    raw(actual) == raw(desired)
}

/// Takes out of `out` (what is about to be written over `actual`) what `actual`'s record
/// says Meridian set and `desired` no longer sets, and the record itself when `desired`
/// carries none. What the member added itself is not in the record, so it stays.
pub fn drop_unwanted(out: &mut Value, actual: &Value, desired: &Value) {
    if let Some(r) = Record::read(actual)
        && let Some(o) = out.as_object_mut()
    {
        for f in &r.fields {
            if desired.get(f).is_none() && !NOT_CONTENT.contains(&f.as_str()) {
                o.remove(f);
            }
        }
        for (field, listed) in [("labels", &r.labels), ("annotations", &r.annotations)] {
            let wanted = &desired["metadata"][field];
            if let Some(m) = o
                .get_mut("metadata")
                .and_then(|m| m.get_mut(field))
                .and_then(Value::as_object_mut)
            {
                m.retain(|k, _| !listed.contains(k) || wanted.get(k).is_some());
            }
        }
    }
    if raw(desired).is_none()
        && let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut)
    {
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove(RECORD_ANNOTATION);
        }
        for field in ["labels", "annotations"] {
            if meta
                .get(field)
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                meta.remove(field);
            }
        }
    }
}

fn remove_record(obj: &mut Value) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        a.remove(RECORD_ANNOTATION);
        if a.is_empty() {
            meta.remove("annotations");
        }
    }
}

/// FNV-1a (64 bits) of `v` written with its object keys sorted: the same content gives
/// the same digest in every process and release, whatever order its keys came in.
fn digest(v: &Value) -> u64 {
    let mut text = String::new();
    canonical(v, &mut text);
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use fed_api::names::MANAGED_BY_VALUE;

    fn copy() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cfg", "namespace": "shop",
                            "labels": {"app": "web", "tier": "edge", MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "u"},
                            "annotations": {"note": "x"}},
               "data": {"a": "1"}})
    }

    #[test]
    fn a_record_reads_back_and_ignores_itself() {
        let mut c = copy();
        stamp(&mut c);
        let r = Record::read(&c).expect("record");
        assert_eq!(r, Record::of(&copy()));
        assert_eq!(r, Record::of(&c), "the record is not part of the digest");
        let text = c["metadata"]["annotations"][RECORD_ANNOTATION]
            .as_str()
            .expect("text");
        assert!(
            text.ends_with(" labels=app,tier annotations=note fields=data"),
            "{text}"
        );
        assert_eq!(r.digest.len(), 16);
        // Key order does not change the digest; content does.
        let reordered: Value = serde_json::from_str(
            r#"{"data": {"a": "1"}, "kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"annotations": {"note": "x"}, "namespace": "shop", "name": "cfg",
                  "labels": {"federation.meridian.dev/owner-uid": "u", "tier": "edge",
                             "app.kubernetes.io/managed-by": "meridian", "app": "web"}}}"#,
        )
        .expect("json");
        assert_eq!(Record::of(&reordered).digest, r.digest);
        let mut changed = copy();
        changed["data"]["a"] = json!("2");
        assert_ne!(Record::of(&changed).digest, r.digest);
        assert_eq!(Record::read(&copy()), None);
    }

    #[test]
    fn what_the_record_lists_and_is_no_longer_wanted_goes() {
        let mut actual = copy();
        actual["extra"] = json!({"x": 1});
        stamp(&mut actual);
        actual["metadata"]["labels"]["member-own"] = json!("kept");
        actual["metadata"]["annotations"]["member-note"] = json!("kept");
        // The label rule is gone and no rule targets the cluster: a plain copy.
        let mut desired = copy();
        desired["metadata"]["labels"]
            .as_object_mut()
            .expect("labels")
            .remove("tier");
        desired["metadata"]
            .as_object_mut()
            .expect("meta")
            .remove("annotations");
        assert!(!same(&actual, &desired));
        let mut out = actual.clone();
        drop_unwanted(&mut out, &actual, &desired);
        assert_eq!(
            out["metadata"]["labels"],
            json!({"app": "web", "member-own": "kept", MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: "u"})
        );
        assert_eq!(
            out["metadata"]["annotations"],
            json!({"member-note": "kept"})
        );
        assert!(out.get("extra").is_none(), "{out}");
        assert_eq!(out["data"], json!({"a": "1"}));
        // Another rule still targets it: its record replaces the old one.
        let mut targeted = desired.clone();
        stamp(&mut targeted);
        let mut out = actual.clone();
        drop_unwanted(&mut out, &actual, &targeted);
        assert!(!same(&actual, &targeted));
        assert!(out["metadata"]["annotations"][RECORD_ANNOTATION].is_string());
        // Without a record nothing is taken away.
        let mut out = copy();
        drop_unwanted(&mut out, &copy(), &json!({"metadata": {}}));
        assert_eq!(out, copy());
        assert!(same(&copy(), &copy()));
    }
}

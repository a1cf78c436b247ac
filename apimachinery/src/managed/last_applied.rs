//! kubectl's bridge from client-side to server-side apply, kept on the server as upstream
//! keeps it, for the `kubectl` field manager only: its conflicts over fields the
//! `last-applied-configuration` annotation still describes are allowed (those fields were
//! kubectl's already), and its applies keep an existing annotation in sync.

use serde_json::{Map, Value};

use super::fields_v1::write_go_json;
use super::model::ObjectType;
use super::set::FieldSet;
use super::typed;

/// The annotation client-side `kubectl apply` records its configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The field manager `kubectl apply --server-side` uses by default.
pub(crate) const KUBECTL_MANAGER: &str = "kubectl";
/// The most all annotations of an object may hold, keys and values together.
const ANNOTATIONS_SIZE_LIMIT: usize = 256 * 1024;

fn annotations(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("annotations")?.as_object()
}

fn last_applied(obj: &Value) -> Option<&str> {
    annotations(obj)?
        .get(LAST_APPLIED_ANNOTATION)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The fields of `live` that still hold what its last-applied annotation says: a
/// conflict over one of them is kubectl's own field changing hands. `None` when there is
/// no usable annotation (then no conflict is allowed).
pub(crate) fn allowed_conflicts(
    ty: &ObjectType,
    api_version: &str,
    live: &Value,
) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(last_applied(live)?).ok()?;
    if last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        return None;
    }
    typed::validate(&ty.model, ty.root, &last).ok()?;
    let set = typed::to_set(&ty.model, ty.root, &last);
    let diff = typed::compare(&ty.model, ty.root, Some(&last), Some(live), false);
    Some(
        set.difference(&diff.modified)
            .difference(&diff.added)
            .difference(&diff.removed),
    )
}

/// Rewrites the annotation of `object` (the apply's result) from `config`, when the object
/// already has one: kubectl then sees its client-side record match what it applied.
pub(crate) fn sync(object: &mut Value, config: &Value) {
    if last_applied(object).is_none() {
        return;
    }
    let text = encode(config);
    let Some(ann) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    ann.insert(LAST_APPLIED_ANNOTATION.into(), Value::String(text));
    let size: usize = ann
        .iter()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    // Too big to keep: dropped, as upstream drops it rather than fail the apply.
    if size > ANNOTATIONS_SIZE_LIMIT {
        ann.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// The configuration as the annotation records it: Go's JSON of the object without the
/// annotation itself, ending in a newline (what kubectl writes too).
fn encode(config: &Value) -> String {
    let mut config = config.clone();
    if let Some(ann) = config
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        ann.remove(LAST_APPLIED_ANNOTATION);
    }
    let mut out = String::new();
    write_go_json(&mut out, &config);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encode_drops_the_annotation_and_sorts_keys() {
        let config = json!({
            "kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "x", "annotations": {LAST_APPLIED_ANNOTATION: "old", "a": "<b>"}},
            "data": {"k": "v"}
        });
        assert_eq!(
            encode(&config),
            "{\"apiVersion\":\"v1\",\"data\":{\"k\":\"v\"},\"kind\":\"ConfigMap\",\"metadata\":{\"annotations\":{\"a\":\"\\u003cb\\u003e\"},\"name\":\"x\"}}\n"
        );
    }

    #[test]
    fn sync_only_rewrites_an_existing_annotation() {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let mut without = json!({"metadata": {"name": "x"}});
        sync(&mut without, &config);
        assert_eq!(without, json!({"metadata": {"name": "x"}}));
        let mut with =
            json!({"metadata": {"name": "x", "annotations": {LAST_APPLIED_ANNOTATION: "{}"}}});
        sync(&mut with, &config);
        assert_eq!(
            with["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"x\"}}\n"
        );
        let huge = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
            "data": {"k": "x".repeat(ANNOTATIONS_SIZE_LIMIT)}});
        sync(&mut with, &huge);
        assert!(
            annotations(&with)
                .unwrap()
                .get(LAST_APPLIED_ANNOTATION)
                .is_none()
        );
    }
}

//! Kubernetes strategic merge patch, applied server-side using OpenAPI patch metadata.

use serde_json::{Map, Value};

use super::PatchError;
use crate::field_path::FieldPath;
use crate::schema::{Definitions, FieldMeta};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `original`, typed by `root_definition`
/// (e.g. `io.k8s.api.apps.v1.Deployment`). Fields the schema does not know,
/// including everything when the root is unknown, get JSON-merge semantics.
pub fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    schema: &Definitions,
    root_definition: &str,
) -> Result<Value, PatchError> {
    let patch = patch.as_object().ok_or(PatchError::NotAnObject)?;
    let root = schema.get(root_definition).and_then(|d| schema.resolve(d));
    let original = original.as_object().cloned();
    let merged = Merger { defs: schema }.merge_map(original, patch, root, FieldPath::Root)?;
    // `$patch: delete` at the root leaves an empty object, as upstream does.
    Ok(Value::Object(merged.unwrap_or_default()))
}

fn is_directive(key: &str) -> bool {
    key == PATCH
        || key == RETAIN_KEYS
        || key.starts_with(SET_ORDER)
        || key.starts_with(DELETE_PRIMITIVE)
}

/// The `$patch` directive of a map, if any; non-string values are rejected.
fn directive<'v>(
    m: &'v Map<String, Value>,
    path: FieldPath<'_>,
) -> Result<Option<&'v str>, PatchError> {
    match m.get(PATCH) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(PatchError::UnknownDirective {
            path: path.to_string(),
            directive: other.to_string(),
        }),
    }
}

fn directive_list<'v>(
    value: &'v Value,
    key: &str,
    path: FieldPath<'_>,
) -> Result<&'v Vec<Value>, PatchError> {
    value
        .as_array()
        .ok_or_else(|| PatchError::InvalidDirective {
            path: path.to_string(),
            directive: key.to_string(),
            reason: "must be a list".into(),
        })
}

struct Merger<'a> {
    defs: &'a Definitions,
}

impl<'a> Merger<'a> {
    fn field(&self, schema: Option<&'a Value>, key: &str) -> FieldMeta<'a> {
        schema
            .and_then(|s| self.defs.property(s, key))
            .map(|raw| self.defs.meta(raw))
            .unwrap_or_default()
    }

    /// Merges `patch` into `orig` (absent = empty), taking it over so that no
    /// subtree is copied on the way down. Returns `None` when the patch deletes
    /// the map with `$patch: delete`.
    fn merge_map(
        &self,
        orig: Option<Map<String, Value>>,
        patch: &Map<String, Value>,
        schema: Option<&'a Value>,
        path: FieldPath<'_>,
    ) -> Result<Option<Map<String, Value>>, PatchError> {
        let mut out = match directive(patch, path)? {
            None | Some("merge") => orig.unwrap_or_default(),
            // Replace: the patch (minus directives) becomes the whole value.
            Some("replace") => Map::new(),
            Some("delete") => return Ok(None),
            Some(other) => {
                return Err(PatchError::UnknownDirective {
                    path: path.to_string(),
                    directive: other.to_string(),
                });
            }
        };

        if let Some(keys) = patch.get(RETAIN_KEYS) {
            let keys = directive_list(keys, RETAIN_KEYS, path)?;
            out.retain(|k, _| keys.iter().any(|r| r.as_str() == Some(k)));
        }

        // Deletions run before additions so `$deleteFromPrimitiveList/f: [a]`
        // plus `f: [b]` swaps a for b, the documented way to replace an item.
        for (k, v) in patch {
            if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE) {
                let remove = directive_list(v, k, path)?;
                if let Some(Value::Array(list)) = out.get_mut(field) {
                    list.retain(|e| !remove.contains(e));
                }
            }
        }

        for (k, v) in patch {
            if is_directive(k) {
                continue;
            }
            if v.is_null() {
                out.remove(k);
                continue;
            }
            let meta = self.field(schema, k);
            let path = path.field(k);
            match v {
                Value::Object(pm) => {
                    let existing = if meta.strategy.replace {
                        None
                    } else {
                        take_map(out.get_mut(k))
                    };
                    match self.merge_map(existing, pm, meta.schema, path)? {
                        Some(m) => out.insert(k.clone(), Value::Object(m)),
                        None => out.remove(k),
                    };
                }
                Value::Array(pl) => {
                    let existing = match out.get_mut(k) {
                        Some(Value::Array(list)) => Some(std::mem::take(list)),
                        _ => None,
                    };
                    let merged = self.merge_list(existing, pl, &meta, path)?;
                    out.insert(k.clone(), Value::Array(merged));
                }
                scalar => {
                    out.insert(k.clone(), scalar.clone());
                }
            }
        }

        for (k, v) in patch {
            if let Some(field) = k.strip_prefix(SET_ORDER) {
                let order = directive_list(v, k, path)?;
                let meta = self.field(schema, field);
                if let Some(Value::Array(list)) = out.get_mut(field) {
                    reorder(list, order, meta.merge_key);
                }
            }
        }
        Ok(Some(out))
    }

    fn merge_list(
        &self,
        orig: Option<Vec<Value>>,
        patch: &[Value],
        meta: &FieldMeta<'a>,
        path: FieldPath<'_>,
    ) -> Result<Vec<Value>, PatchError> {
        if meta.schema.is_none() {
            // Fields unknown to the schema follow JSON merge patch, where a
            // list is opaque data and replaces the old one verbatim.
            return Ok(patch.to_vec());
        }
        let items = meta.schema.and_then(|s| self.defs.items(s));
        let mut replace_all = false;
        for e in patch {
            if let Some(m) = e.as_object() {
                replace_all |= directive(m, path)? == Some("replace");
            }
        }
        if replace_all || !meta.strategy.merge || meta.strategy.replace {
            return self.fresh_list(patch, items, replace_all, path);
        }

        let has_maps = patch
            .iter()
            .chain(orig.iter().flatten())
            .any(Value::is_object);
        if !has_maps {
            // A merging list of primitives is a set union that keeps live order.
            let mut out = orig.unwrap_or_default();
            for e in patch {
                if !out.contains(e) {
                    out.push(e.clone());
                }
            }
            return Ok(out);
        }

        let key = meta.merge_key.ok_or_else(|| PatchError::MissingMergeKey {
            path: path.to_string(),
        })?;
        let mut out = orig.unwrap_or_default();
        let mut merges = Vec::new();
        // Deletions first, as upstream does, so a delete and a re-add of the
        // same key in one patch yields the re-added element.
        for (i, e) in patch.iter().enumerate() {
            let elem_path = path.index(i);
            let m = e.as_object().ok_or_else(|| PatchError::MixedList {
                path: path.to_string(),
            })?;
            let kv = m
                .get(key)
                .ok_or_else(|| PatchError::ElementMissingMergeKey {
                    path: elem_path.to_string(),
                    key: key.to_string(),
                })?;
            match directive(m, elem_path)? {
                Some("delete") => out.retain(|o| o.get(key) != Some(kv)),
                None | Some("merge") => merges.push((m, kv, elem_path)),
                Some(other) => {
                    return Err(PatchError::UnknownDirective {
                        path: elem_path.to_string(),
                        directive: other.to_string(),
                    });
                }
            }
        }
        for (m, kv, elem_path) in merges {
            let pos = out.iter().position(|o| o.get(key) == Some(kv));
            let existing = take_map(pos.map(|p| &mut out[p]));
            match (pos, self.merge_map(existing, m, items, elem_path)?) {
                (Some(p), Some(merged)) => out[p] = Value::Object(merged),
                (None, Some(merged)) => out.push(Value::Object(merged)),
                (Some(p), None) => {
                    out.remove(p);
                }
                (None, None) => {}
            }
        }
        Ok(out)
    }

    /// A list taken from the patch as-is, minus directives: used for replaced
    /// lists and for `$patch: replace`.
    fn fresh_list(
        &self,
        patch: &[Value],
        items: Option<&'a Value>,
        drop_directive_elements: bool,
        path: FieldPath<'_>,
    ) -> Result<Vec<Value>, PatchError> {
        let mut out = Vec::with_capacity(patch.len());
        for (i, e) in patch.iter().enumerate() {
            match e {
                Value::Object(m) if drop_directive_elements && m.contains_key(PATCH) => {}
                Value::Object(m) => {
                    if let Some(clean) = self.merge_map(None, m, items, path.index(i))? {
                        out.push(Value::Object(clean));
                    }
                }
                other => out.push(other.clone()),
            }
        }
        Ok(out)
    }
}

/// Takes the map out of `slot` (leaving an empty one to be overwritten), if it holds one.
fn take_map(slot: Option<&mut Value>) -> Option<Map<String, Value>> {
    match slot {
        Some(Value::Object(m)) => Some(std::mem::take(m)),
        _ => None,
    }
}

/// Applies `$setElementOrder`: listed elements first in the listed order,
/// unlisted ones after in their current order. Map lists are matched by
/// merge key, primitive lists by value.
fn reorder(list: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let ident = |v: &'_ Value| -> Value {
        match (merge_key, v) {
            (Some(k), Value::Object(m)) => m.get(k).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    let mut taken = vec![false; list.len()];
    let mut sorted = Vec::with_capacity(list.len());
    for o in order {
        let want = ident(o);
        for (i, e) in list.iter().enumerate() {
            if !taken[i] && ident(e) == want {
                taken[i] = true;
                sorted.push(e.clone());
            }
        }
    }
    for (i, e) in list.iter().enumerate() {
        if !taken[i] {
            sorted.push(e.clone());
        }
    }
    *list = sorted;
}

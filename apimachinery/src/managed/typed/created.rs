//! The fields a create sets, written straight as a `FieldsV1` trie in one walk over the
//! new object: what [`super::compare`] finds added or modified against no previous object,
//! without building the difference's sets and encoding them.
//!
//! A create has nothing to take fields from, so every field the object sets is its
//! writer's. The walk follows [`super::compare`] step for step with the old side fixed:
//! an empty root object, and below it either nothing or, for built-in kinds, the zero
//! value a typed Go object holds at an unset field (an empty struct, or null for a
//! required list or map), which makes such a field's own node no member.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::compare::{empty_object, zero_value};
use super::{Pair, item_key, pair};
use crate::managed::model::{ListKind, TypeId, TypeModel};
use crate::managed::path::values_equal;
use crate::managed::raw::{Trie, insert_node};

/// The fields a create of `new` gives its writer, as a trie (before reset and
/// never-owned fields are taken out).
pub(crate) fn created_fields(model: &TypeModel, ty: TypeId, new: &Value) -> Trie {
    let mut out = Trie::new();
    node(model, ty, Some(empty_object()), new, &mut out);
    out
}

/// Writes what `new` sets below it to `below`, against `old` (nothing, an empty object, or
/// null); returns whether the node itself is a member (added or modified).
fn node(model: &TypeModel, ty: TypeId, old: Option<&Value>, new: &Value, below: &mut Trie) -> bool {
    // A granular map or list that appears is itself added, besides everything in it.
    let appears = old.is_none();
    match pair(model, ty, old, Some(new)) {
        Pair::Maps(t, old_map, new_map) => {
            let empty = |m: Option<&Map<String, Value>>| m.is_none_or(Map::is_empty);
            if t.atomic || (empty(old_map) && empty(new_map)) {
                return leaf(old, new);
            }
            let mut fields = t.cursor();
            for (k, v) in new_map.into_iter().flatten() {
                let field = fields.field(k);
                // The old side holds no field: a zero value where the Go type has one.
                let zero = match (field, old_map) {
                    (Some(f), Some(_)) if model.go_structs => zero_value(model, f, v),
                    _ => None,
                };
                let mut children = Trie::new();
                let member = node(
                    model,
                    field.map_or(t.elem, |f| f.ty),
                    zero,
                    v,
                    &mut children,
                );
                if member || !children.is_empty() {
                    let mut key = String::with_capacity(k.len() + 2);
                    key.push_str("f:");
                    key.push_str(k);
                    insert_node(below, key, member, children);
                }
            }
            appears
        }
        Pair::Lists(t, _, items) => {
            // The old side is an absent or null list: no items.
            let items = items.map_or(&[][..], Vec::as_slice);
            if t.kind == ListKind::Atomic || items.is_empty() {
                return leaf(old, new);
            }
            let mut keys = Vec::with_capacity(items.len());
            for item in items {
                let mut key = String::new();
                // A list whose items cannot all be named is one value.
                if item_key(model, t, item, &mut key).is_err() {
                    return leaf(old, new);
                }
                keys.push(key);
            }
            let mut count: HashMap<&str, usize> = HashMap::with_capacity(keys.len());
            for key in &keys {
                *count.entry(key.as_str()).or_default() += 1;
            }
            for (key, item) in keys.iter().zip(items) {
                if count[key.as_str()] > 1 {
                    // A duplicated name is owned as a name only, never field by field.
                    insert_node(below, key.clone(), true, Trie::new());
                    continue;
                }
                let mut children = Trie::new();
                let member = node(model, t.elem, None, item, &mut children);
                insert_node(below, key.clone(), member, children);
            }
            appears
        }
        Pair::Leaf => leaf(old, new),
    }
}

/// Whether a value set where `old` was is added or modified.
fn leaf(old: Option<&Value>, new: &Value) -> bool {
    old.is_none_or(|o| !values_equal(o, new))
}

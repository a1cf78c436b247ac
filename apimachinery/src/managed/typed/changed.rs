//! The fields an update changes or adds, and those it removes, written straight as
//! `FieldsV1` tries in one walk over the old and new objects: what [`super::compare`]
//! finds (its added and modified sets as one trie, its removed set as another), without
//! building the difference's sets and encoding them.
//!
//! The walk follows [`super::compare`] step for step, with one shortcut: a node whose
//! old and new values are equal is skipped whole, since the comparison records nothing
//! in it. Most of an updated object is such subtrees (a scale changes one field).

use std::collections::BTreeMap;

use serde_json::Value;

use super::compare::{Mark, is_empty_map, leaf, values_equal_lists, zero_value};
use super::{Pair, item_elements, pair, same_unique_names};
use crate::managed::fields_v1::write_element;
use crate::managed::model::{ListKind, TypeId, TypeModel};
use crate::managed::path::{PathElement, values_equal};
use crate::managed::raw::{Trie, merge_node};

/// How an update changes an object, as tries.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Changes {
    /// The fields added or modified.
    pub changed: Trie,
    /// The fields removed.
    pub removed: Trie,
}

impl Changes {
    fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }

    /// Records a child's own change and the changes below it; the child's key is only
    /// spelled when there is something to record.
    fn push(&mut self, key: impl FnOnce() -> String, mark: Mark, below: Changes) {
        let changed = matches!(mark, Mark::Added | Mark::Modified);
        let removed = mark == Mark::Removed;
        if !changed && !removed && below.is_empty() {
            return;
        }
        let key = key();
        if removed || !below.removed.is_empty() {
            merge_node(&mut self.removed, key.clone(), removed, below.removed);
        }
        merge_node(&mut self.changed, key, changed, below.changed);
    }
}

/// How `new` differs from `old` (an update: both exist), as [`super::compare`] finds it
/// with `create` unset.
pub(crate) fn changed_fields(model: &TypeModel, ty: TypeId, old: &Value, new: &Value) -> Changes {
    let mut out = Changes::default();
    node(model, ty, Some(old), Some(new), &mut out);
    out
}

fn field_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len() + 2);
    key.push_str("f:");
    key.push_str(name);
    key
}

fn element_key(pe: &PathElement) -> String {
    let mut key = String::new();
    write_element(&mut key, pe);
    key
}

/// Compares one node, recording changes below it in `below`; returns its own change.
fn node(
    model: &TypeModel,
    ty: TypeId,
    l: Option<&Value>,
    r: Option<&Value>,
    below: &mut Changes,
) -> Mark {
    // Equal values hold no change at any depth: the comparison below would find none.
    if let (Some(a), Some(b)) = (l, r)
        && values_equal(a, b)
    {
        return Mark::None;
    }
    let presence = match (l, r) {
        (None, Some(_)) => Mark::Added,
        (Some(_), None) => Mark::Removed,
        _ => Mark::None,
    };
    match pair(model, ty, l, r) {
        Pair::Maps(t, lm, rm) => {
            if t.atomic || (is_empty_map(lm) && is_empty_map(rm)) {
                return leaf(l, r);
            }
            let mut fields = t.cursor();
            for (k, lv) in lm.into_iter().flatten() {
                let rv = rm.and_then(|m| m.get(k));
                let mut d = Changes::default();
                let mark = node(model, fields.type_of(k), Some(lv), rv, &mut d);
                below.push(|| field_key(k), mark, d);
            }
            let mut fields = t.cursor();
            for (k, rv) in rm.into_iter().flatten() {
                if lm.is_some_and(|m| m.contains_key(k)) {
                    continue;
                }
                let field = fields.field(k);
                let old = match (field, lm) {
                    (Some(f), Some(_)) if model.go_structs => zero_value(model, f, rv),
                    _ => None,
                };
                let mut d = Changes::default();
                let mark = node(model, field.map_or(t.elem, |f| f.ty), old, Some(rv), &mut d);
                below.push(|| field_key(k), mark, d);
            }
            presence
        }
        Pair::Lists(t, li, ri) => {
            let (li, ri) = (
                li.map_or(&[][..], Vec::as_slice),
                ri.map_or(&[][..], Vec::as_slice),
            );
            if t.kind == ListKind::Atomic || (li.is_empty() && ri.is_empty()) {
                return leaf(l, r);
            }
            if l.is_some() && r.is_some() && values_equal_lists(li, ri) {
                return Mark::None;
            }
            let (Some(lpes), Some(rpes)) =
                (item_elements(model, t, li), item_elements(model, t, ri))
            else {
                return leaf(l, r);
            };
            if same_unique_names(&lpes, &rpes) {
                for ((pe, lv), rv) in lpes.iter().zip(li).zip(ri) {
                    let mut d = Changes::default();
                    let mark = node(model, t.elem, Some(lv), Some(rv), &mut d);
                    below.push(|| element_key(pe), mark, d);
                }
                return presence;
            }
            let mut items: BTreeMap<&PathElement, (Vec<&Value>, Vec<&Value>)> = BTreeMap::new();
            for (pe, v) in lpes.iter().zip(li) {
                items.entry(pe).or_default().0.push(v);
            }
            for (pe, v) in rpes.iter().zip(ri) {
                items.entry(pe).or_default().1.push(v);
            }
            for (pe, (ls, rs)) in items {
                match (ls.len(), rs.len()) {
                    (0..=1, 0..=1) => {
                        let mut d = Changes::default();
                        let mark = node(
                            model,
                            t.elem,
                            ls.first().copied(),
                            rs.first().copied(),
                            &mut d,
                        );
                        below.push(|| element_key(pe), mark, d);
                    }
                    // Duplicates on both sides compare as one value per name.
                    (2.., 2..) => {
                        let same = ls.len() == rs.len()
                            && ls.iter().zip(&rs).all(|(a, b)| values_equal(a, b));
                        if !same {
                            below.push(|| element_key(pe), Mark::Modified, Changes::default());
                        }
                    }
                    // No longer duplicated: the name goes, the remaining item comes.
                    (2.., _) => {
                        let mut d = Changes::default();
                        let mark = node(model, t.elem, None, rs.first().copied(), &mut d);
                        below.push(|| element_key(pe), mark, d);
                        below.push(|| element_key(pe), Mark::Removed, Changes::default());
                    }
                    // Newly duplicated: the single item goes, the name comes.
                    (_, 2..) => {
                        let mut d = Changes::default();
                        let mark = node(model, t.elem, ls.first().copied(), None, &mut d);
                        below.push(|| element_key(pe), mark, d);
                        below.push(|| element_key(pe), Mark::Added, Changes::default());
                    }
                }
            }
            presence
        }
        Pair::Leaf => leaf(l, r),
    }
}

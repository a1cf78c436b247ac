//! How two values of one type differ, as the fields added, modified and removed.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::{Pair, is_struct, item_elements, pair, same_unique_names};
use crate::managed::model::{FieldType, ListKind, TypeId, TypeModel};
use crate::managed::path::{PathElement, values_equal};
use crate::managed::set::FieldSet;

/// The difference between two values. A path is in at most one set, except for a list
/// item that stops or starts being duplicated (removed by name and added back, or the
/// reverse).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Diff {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Diff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    /// Applies `f` to all three sets (to leave out the fields a write does not own).
    pub fn map_sets(self, f: impl Fn(FieldSet) -> FieldSet) -> Diff {
        Diff {
            added: f(self.added),
            modified: f(self.modified),
            removed: f(self.removed),
        }
    }

    /// Records a child's own change and the changes below it. The child's path element
    /// is only built when there is something to record: most of an object is unchanged.
    fn push(&mut self, pe: impl FnOnce() -> PathElement, mark: Mark, below: Diff) {
        if mark == Mark::None && below.is_empty() {
            return;
        }
        let pe = pe();
        let parts = [
            (&mut self.added, mark == Mark::Added, below.added),
            (&mut self.modified, mark == Mark::Modified, below.modified),
            (&mut self.removed, mark == Mark::Removed, below.removed),
        ];
        for (set, member, children) in parts {
            if member || !children.is_empty() {
                set.push_node(pe.clone(), member, children);
            }
        }
    }
}

/// A node's own change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mark {
    None,
    Added,
    Modified,
    Removed,
}

/// Compares `old` with `new` (either may be absent; with `create`, a missing `old` is
/// an empty object).
///
/// For built-in kinds upstream compares typed Go objects, in which a struct field is never
/// absent (it is an empty struct) and a field without `omitempty` (a required one) is at
/// least null. So where `old` lacks such a field inside an object it has, and `new` sets
/// it, the field is compared as empty or null: the fields inside count as added, the
/// struct itself does not, and entries read as kube-apiserver writes them. Custom
/// resources are compared as written.
pub(crate) fn compare(
    model: &TypeModel,
    ty: TypeId,
    old: Option<&Value>,
    new: Option<&Value>,
    create: bool,
) -> Diff {
    let mut below = Diff::default();
    let old = if create {
        old.or(Some(empty_object()))
    } else {
        old
    };
    node(model, ty, old, new, &mut below);
    below
}

pub(super) fn empty_object() -> &'static Value {
    static EMPTY: LazyLock<Value> = LazyLock::new(|| Value::Object(Map::new()));
    &EMPTY
}

/// Compares one node, recording changes below it in `below`; returns its own change.
fn node(
    model: &TypeModel,
    ty: TypeId,
    l: Option<&Value>,
    r: Option<&Value>,
    below: &mut Diff,
) -> Mark {
    // A granular map or list that appears or goes is itself added or removed, besides
    // everything in it.
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
                let mut d = Diff::default();
                let mark = node(model, fields.type_of(k), Some(lv), rv, &mut d);
                below.push(|| PathElement::field(k), mark, d);
            }
            let mut fields = t.cursor();
            for (k, rv) in rm.into_iter().flatten() {
                if lm.is_some_and(|m| m.contains_key(k)) {
                    continue;
                }
                let field = fields.field(k);
                // Inside an object that is new as a whole there is nothing typed to
                // compare with, as upstream has none either.
                let old = match (field, lm) {
                    (Some(f), Some(_)) if model.go_structs => zero_value(model, f, rv),
                    _ => None,
                };
                let mut d = Diff::default();
                let mark = node(model, field.map_or(t.elem, |f| f.ty), old, Some(rv), &mut d);
                below.push(|| PathElement::field(k), mark, d);
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
            // The usual case: the same items in the same order, compared pairwise.
            if same_unique_names(&lpes, &rpes) {
                for ((pe, lv), rv) in lpes.iter().zip(li).zip(ri) {
                    let mut d = Diff::default();
                    let mark = node(model, t.elem, Some(lv), Some(rv), &mut d);
                    below.push(|| pe.clone(), mark, d);
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
                        let mut d = Diff::default();
                        let mark = node(
                            model,
                            t.elem,
                            ls.first().copied(),
                            rs.first().copied(),
                            &mut d,
                        );
                        below.push(|| pe.clone(), mark, d);
                    }
                    // Duplicates on both sides compare as one value per name.
                    (2.., 2..) => {
                        let same = ls.len() == rs.len()
                            && ls.iter().zip(&rs).all(|(a, b)| values_equal(a, b));
                        if !same {
                            below.push(|| pe.clone(), Mark::Modified, Diff::default());
                        }
                    }
                    // No longer duplicated: the name goes, the remaining item comes.
                    (2.., _) => {
                        let mut d = Diff::default();
                        let mark = node(model, t.elem, None, rs.first().copied(), &mut d);
                        below.push(|| pe.clone(), mark, d);
                        below.push(|| pe.clone(), Mark::Removed, Diff::default());
                    }
                    // Newly duplicated: the single item goes, the name comes.
                    (_, 2..) => {
                        let mut d = Diff::default();
                        let mark = node(model, t.elem, ls.first().copied(), None, &mut d);
                        below.push(|| pe.clone(), mark, d);
                        below.push(|| pe.clone(), Mark::Added, Diff::default());
                    }
                }
            }
            presence
        }
        Pair::Leaf => leaf(l, r),
    }
}

pub(super) fn values_equal_lists(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| values_equal(x, y))
}

pub(super) fn is_empty_map(m: Option<&Map<String, Value>>) -> bool {
    m.is_none_or(Map::is_empty)
}

/// What a typed Go object holds at an unset struct field: an empty struct for a
/// struct-typed field, null for a required (not `omitempty`) list or map; nothing else.
pub(super) fn zero_value(
    model: &TypeModel,
    field: &FieldType,
    new: &Value,
) -> Option<&'static Value> {
    if new.is_object() && is_struct(model, field.ty) {
        Some(empty_object())
    } else if field.required && (new.is_object() || new.is_array()) {
        Some(&Value::Null)
    } else {
        None
    }
}

/// The change of a value compared whole.
pub(super) fn leaf(l: Option<&Value>, r: Option<&Value>) -> Mark {
    match (l, r) {
        (None, Some(_)) => Mark::Added,
        (Some(_), None) => Mark::Removed,
        (Some(a), Some(b)) if !values_equal(a, b) => Mark::Modified,
        _ => Mark::None,
    }
}

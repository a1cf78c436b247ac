//! Merging an apply configuration into an object, and taking fields out of one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::{Pair, is_struct, item_elements, pair, same_unique_names};
use crate::managed::model::{ListKind, ListType, Shape, TypeId, TypeModel};
use crate::managed::path::PathElement;
use crate::managed::set::FieldSet;

static EMPTY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// `config` merged into `live`: structs and granular maps field by field, list-maps by
/// key, sets by value, everything else (scalars, atomic maps and lists) replaced.
pub(crate) fn merge(
    model: &TypeModel,
    ty: TypeId,
    live: Option<&Value>,
    config: Option<&Value>,
) -> Option<Value> {
    let (l, r) = match (live, config) {
        (None, None) => return None,
        (Some(l), None) => return Some(l.clone()),
        (None, Some(r)) => return Some(r.clone()),
        (Some(l), Some(r)) => (l, r),
    };
    match pair(model, ty, Some(l), Some(r)) {
        Pair::Maps(t, lm, rm) => {
            let (lm, rm) = (lm.filter(|m| !m.is_empty()), rm.filter(|m| !m.is_empty()));
            if t.atomic || (lm.is_none() && rm.is_none()) {
                return Some(r.clone());
            }
            let (lm, rm) = (lm.unwrap_or(&EMPTY), rm.unwrap_or(&EMPTY));
            let mut out = Map::new();
            let mut fields = t.cursor();
            for (k, lv) in lm {
                let merged = match rm.get(k) {
                    Some(rv) => merge(model, fields.type_of(k), Some(lv), Some(rv)),
                    None => Some(lv.clone()),
                };
                if let Some(v) = merged {
                    out.insert(k.clone(), v);
                }
            }
            for (k, rv) in rm {
                if !lm.contains_key(k) {
                    out.insert(k.clone(), rv.clone());
                }
            }
            Some(Value::Object(out))
        }
        Pair::Lists(t, li, ri) => {
            let (li, ri) = (
                li.map_or(&[][..], Vec::as_slice),
                ri.map_or(&[][..], Vec::as_slice),
            );
            if t.kind == ListKind::Atomic || (li.is_empty() && ri.is_empty()) {
                return Some(r.clone());
            }
            Some(merge_list(model, t, li, ri).unwrap_or_else(|| r.clone()))
        }
        Pair::Leaf => Some(r.clone()),
    }
}

/// Merges list items by name. Items only in the object keep their place; items in both
/// take the configuration's order where they can; new items come where the
/// configuration puts them. `None` when the object's items cannot all be named.
fn merge_list(model: &TypeModel, t: &ListType, li: &[Value], ri: &[Value]) -> Option<Value> {
    let rpes = item_elements(model, t, ri)?;
    let lpes = item_elements(model, t, li)?;
    // The usual case: the same items in the same order, merged pairwise (which is what
    // the general walk below does for them too).
    if same_unique_names(&lpes, &rpes) {
        let merged = li
            .iter()
            .zip(ri)
            .filter_map(|(l, r)| merge(model, t.elem, Some(l), Some(r)));
        return Some(Value::Array(merged.collect()));
    }
    // A duplicated name in the object maps to `None`: those items are not merged with
    // the configuration's, which replaces them.
    let mut observed_l: BTreeMap<&PathElement, Option<&Value>> = BTreeMap::new();
    for (pe, v) in lpes.iter().zip(li) {
        observed_l
            .entry(pe)
            .and_modify(|seen| *seen = None)
            .or_insert(Some(v));
    }
    let observed_r: BTreeMap<&PathElement, &Value> = rpes.iter().zip(ri).collect();
    let shared: Vec<&PathElement> = rpes
        .iter()
        .filter(|pe| observed_l.contains_key(pe))
        .collect();
    let mut next_shared = 0;
    let mut merged_r: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(li.len().max(ri.len()));
    let (mut i, mut j) = (0, 0);
    while i < lpes.len() || j < rpes.len() {
        if i < lpes.len() && j < rpes.len() {
            let pe = &lpes[i];
            if *pe == rpes[j] {
                merged_r.insert(pe);
                let lv = observed_l.get(pe).copied().flatten();
                out.extend(merge(model, t.elem, lv, Some(observed_r[pe])));
                i += 1;
                j += 1;
                next_shared += 1;
                continue;
            }
            // A shared item out of the configuration's order waits for its turn.
            if observed_r.contains_key(pe) && shared.get(next_shared).is_some_and(|n| *n != pe) {
                i += 1;
                continue;
            }
        }
        if i < lpes.len() {
            let pe = &lpes[i];
            if !observed_r.contains_key(pe) {
                out.push(li[i].clone());
                i += 1;
                continue;
            } else if merged_r.contains(pe) {
                i += 1;
            }
        }
        if j < rpes.len() {
            let pe = &rpes[j];
            merged_r.insert(pe);
            let lv = observed_l.get(pe).copied().flatten();
            out.extend(merge(model, t.elem, lv, Some(&ri[j])));
            j += 1;
            if shared.get(next_shared) == Some(&pe) {
                next_shared += 1;
            }
        }
    }
    Some(Value::Array(out))
}

/// `v` without the fields in `set` (and everything below them). Maps and lists emptied
/// by the removal go too (structs stay, empty); `None` when nothing is left.
pub(crate) fn remove_items(
    model: &TypeModel,
    ty: TypeId,
    v: &Value,
    set: &FieldSet,
) -> Option<Value> {
    match model.shape(ty, v) {
        Shape::Map(t, Some(m)) if !t.atomic && !m.is_empty() => {
            let mut out = Map::new();
            let mut fields = t.cursor();
            for (k, val) in m {
                let pe = PathElement::Field(k.as_str().into());
                if set.has_child_member(&pe) {
                    continue;
                }
                let kept = match set.with_prefix(&pe) {
                    Some(below) => remove_items(model, fields.type_of(k), val, below),
                    None => Some(val.clone()),
                };
                out.extend(kept.map(|v| (k.clone(), v)));
            }
            // A struct keeps its place empty (upstream leaves it null, which a typed object
            // reads as empty); an emptied map goes.
            (!out.is_empty() || is_struct(model, ty)).then_some(Value::Object(out))
        }
        Shape::List(t, Some(items)) if t.kind != ListKind::Atomic && !items.is_empty() => {
            let Some(pes) = item_elements(model, t, items) else {
                return Some(v.clone());
            };
            let mut out = Vec::with_capacity(items.len());
            for (pe, item) in pes.iter().zip(items) {
                if set.has_child_member(pe) {
                    continue;
                }
                let kept = match set.with_prefix(pe) {
                    Some(below) => remove_items(model, t.elem, item, below),
                    None => Some(item.clone()),
                };
                out.extend(kept);
            }
            (!out.is_empty()).then_some(Value::Array(out))
        }
        _ => Some(v.clone()),
    }
}

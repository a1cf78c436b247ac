//! Walks of JSON values through their type: the fields a value sets, how two values
//! differ, how a configuration merges into an object, and how fields are taken out.
//!
//! Walks over stored objects are lenient (a list whose items cannot be told apart is
//! handled as one value), because a write must not fail over data already accepted;
//! an apply configuration is checked strictly first, by [`validate`].

mod applied;
mod changed;
mod compare;
mod created;
mod merge;

pub(crate) use applied::{applied_fields, validate};
pub(crate) use changed::{Changes, changed_fields};
pub(crate) use compare::{Diff, compare};
pub(crate) use created::created_fields;
pub(crate) use merge::{merge, remove_items};

use serde_json::Value;

use super::fields_v1::{write_go_json, write_go_json_string};
use super::model::{ListKind, ListType, MapType, Shape, TypeId, TypeModel};
use super::path::PathElement;
use super::set::FieldSet;

/// Why a list item has no name to be owned by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ItemError {
    KeyedNotObject,
    KeyedNull,
    MissingKeys(Vec<String>),
    SetItemNotScalar(&'static str),
}

impl ItemError {
    fn message(&self) -> String {
        match self {
            ItemError::KeyedNotObject => {
                "associative list with keys may not have non-map elements".into()
            }
            ItemError::KeyedNull => "associative list with keys may not have a null element".into(),
            ItemError::MissingKeys(keys) => format!(
                "associative list with keys has an element that omits all key fields {keys:?} (and doesn't have default values for any key fields)"
            ),
            ItemError::SetItemNotScalar(what) => {
                format!("associative list without keys has an element that's {what}")
            }
        }
    }
}

/// What names an item of a set or list-map, borrowed from the item and its type: the key
/// fields it has (set or defaulted, sorted by name), or the scalar a set holds.
enum ItemName<'a> {
    Key(Vec<(&'a str, &'a Value)>),
    Value(&'a Value),
}

/// Reads the name of `item`, the one rule behind [`item_element`] and [`item_key`].
fn item_name<'a>(
    model: &'a TypeModel,
    list: &'a ListType,
    item: &'a Value,
) -> Result<ItemName<'a>, ItemError> {
    match &list.kind {
        ListKind::Map { keys } => {
            let obj = match item {
                Value::Object(m) => m,
                Value::Null => return Err(ItemError::KeyedNull),
                _ => return Err(ItemError::KeyedNotObject),
            };
            let elem = model.atom(list.elem).map.as_ref();
            let mut fields: Vec<(&str, &Value)> = Vec::with_capacity(keys.len());
            for key in keys.iter() {
                let v = obj.get(key.as_ref()).or_else(|| {
                    elem.and_then(|m| m.field(key))
                        .and_then(|f| f.default.as_ref())
                });
                // A key neither set nor defaulted is left out: the item is named by the
                // keys it has.
                if let Some(v) = v {
                    fields.push((key, v));
                }
            }
            if fields.is_empty() {
                return Err(ItemError::MissingKeys(
                    keys.iter().map(|k| k.to_string()).collect(),
                ));
            }
            fields.sort_by(|a, b| a.0.cmp(b.0));
            Ok(ItemName::Key(fields))
        }
        ListKind::Set => match item {
            Value::Object(_) => Err(ItemError::SetItemNotScalar("a map type")),
            Value::Array(_) => Err(ItemError::SetItemNotScalar("a list")),
            Value::Null => Err(ItemError::SetItemNotScalar("an explicit null")),
            v => Ok(ItemName::Value(v)),
        },
        // Atomic lists are never walked item by item.
        ListKind::Atomic => Err(ItemError::KeyedNotObject),
    }
}

/// The path element naming `item` of a set or list-map.
pub(crate) fn item_element(
    model: &TypeModel,
    list: &ListType,
    item: &Value,
) -> Result<PathElement, ItemError> {
    Ok(match item_name(model, list, item)? {
        ItemName::Key(fields) => PathElement::Key(
            fields
                .into_iter()
                .map(|(k, v)| (Box::from(k), v.clone()))
                .collect(),
        ),
        ItemName::Value(v) => PathElement::Value(v.clone()),
    })
}

/// Two values (either may be absent) seen through one type: both maps, both lists, or
/// anything else (a leaf, or values of different kinds, which replace each other whole).
pub(crate) enum Pair<'m, 'v> {
    Maps(
        &'m MapType,
        Option<&'v serde_json::Map<String, Value>>,
        Option<&'v serde_json::Map<String, Value>>,
    ),
    Lists(&'m ListType, Option<&'v Vec<Value>>, Option<&'v Vec<Value>>),
    Leaf,
}

pub(crate) fn pair<'m, 'v>(
    model: &'m TypeModel,
    ty: TypeId,
    l: Option<&'v Value>,
    r: Option<&'v Value>,
) -> Pair<'m, 'v> {
    match (l.map(|v| model.shape(ty, v)), r.map(|v| model.shape(ty, v))) {
        (Some(Shape::Map(t, a)), Some(Shape::Map(_, b))) => Pair::Maps(t, a, b),
        (Some(Shape::Map(t, a)), None) => Pair::Maps(t, a, None),
        (None, Some(Shape::Map(t, b))) => Pair::Maps(t, None, b),
        (Some(Shape::List(t, a)), Some(Shape::List(_, b))) => Pair::Lists(t, a, b),
        (Some(Shape::List(t, a)), None) => Pair::Lists(t, a, None),
        (None, Some(Shape::List(t, b))) => Pair::Lists(t, None, b),
        _ => Pair::Leaf,
    }
}

/// Writes the trie key naming `item` (what [`item_element`] gives, spelled as
/// `FieldsV1` spells it) without building the element.
pub(crate) fn item_key(
    model: &TypeModel,
    list: &ListType,
    item: &Value,
    out: &mut String,
) -> Result<(), ItemError> {
    match item_name(model, list, item)? {
        ItemName::Key(fields) => {
            out.push_str("k:{");
            for (i, (name, v)) in fields.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, name);
                out.push(':');
                write_go_json(out, v);
            }
            out.push('}');
        }
        ItemName::Value(v) => {
            out.push_str("v:");
            write_go_json(out, v);
        }
    }
    Ok(())
}

/// Names every item, or `None` if one cannot be named (the list is then one value).
fn item_elements(model: &TypeModel, list: &ListType, items: &[Value]) -> Option<Vec<PathElement>> {
    items
        .iter()
        .map(|item| item_element(model, list, item).ok())
        .collect()
}

/// The fields `v` sets: leaves, atomic maps and lists, list items (each a member as well
/// as its fields), map entries that are not struct fields, and empty or null entries.
pub(crate) fn to_set(model: &TypeModel, ty: TypeId, v: &Value) -> FieldSet {
    to_set_node(model, ty, v).1
}

/// Whether the node itself is a member, and the set below it.
fn to_set_node(model: &TypeModel, ty: TypeId, v: &Value) -> (bool, FieldSet) {
    match model.shape(ty, v) {
        Shape::Leaf => (true, FieldSet::new()),
        Shape::Map(t, _) if t.atomic => (true, FieldSet::new()),
        Shape::List(t, _) if t.kind == ListKind::Atomic => (true, FieldSet::new()),
        Shape::Map(t, m) => {
            let mut out = FieldSet::new();
            let mut fields = t.cursor();
            for (k, val) in m.into_iter().flatten() {
                let field = fields.field(k);
                let (member, below) = to_set_node(model, field.map_or(t.elem, |f| f.ty), val);
                let member = member || is_empty_entry(val) || field.is_none();
                out.push_node(PathElement::Field(k.as_str().into()), member, below);
            }
            (false, out)
        }
        Shape::List(t, items) => {
            let items = items.map_or(&[][..], Vec::as_slice);
            let Some(pes) = item_elements(model, t, items) else {
                return (true, FieldSet::new());
            };
            let dups = duplicates(&pes);
            let mut out = FieldSet::new();
            for (pe, item) in pes.iter().zip(items) {
                // Duplicated items are owned by name only, never field by field.
                if dups.contains(&pe) {
                    out.push_node(pe.clone(), true, FieldSet::new());
                    continue;
                }
                let (_, below) = to_set_node(model, t.elem, item);
                out.push_node(pe.clone(), true, below);
            }
            (false, out)
        }
    }
}

/// Whether values of `ty` are structs: objects with declared fields, merged per field.
pub(crate) fn is_struct(model: &TypeModel, ty: TypeId) -> bool {
    let atom = model.atom(ty);
    !atom.scalar
        && atom.list.is_none()
        && atom
            .map
            .as_ref()
            .is_some_and(|m| !m.atomic && !m.fields.is_empty())
}

/// Whether two lists name the same items in the same order, each once. Short lists only:
/// longer ones take the general path rather than a quadratic check.
pub(crate) fn same_unique_names(a: &[PathElement], b: &[PathElement]) -> bool {
    a.len() == b.len()
        && a.len() <= 16
        && a == b
        && a.iter().enumerate().all(|(i, x)| !a[..i].contains(x))
}

/// The names given to more than one item.
pub(crate) fn duplicates(pes: &[PathElement]) -> Vec<&PathElement> {
    let mut sorted: Vec<&PathElement> = pes.iter().collect();
    sorted.sort();
    let mut out: Vec<&PathElement> = Vec::new();
    for w in sorted.windows(2) {
        if w[0] == w[1] && out.last() != Some(&w[0]) {
            out.push(w[0]);
        }
    }
    out
}

fn is_empty_entry(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// `set` with every struct field that has members below it made a member itself, as
/// upstream's pruning compares sets (so a struct left empty goes with its last field).
pub(crate) fn with_named_fields(model: &TypeModel, ty: Option<TypeId>, set: &FieldSet) -> FieldSet {
    let mut out = set.clone();
    mark_named_fields(model, ty, &mut out);
    out
}

fn mark_named_fields(model: &TypeModel, ty: Option<TypeId>, set: &mut FieldSet) {
    let atom = ty.map(|t| model.atom(t));
    let map = atom.and_then(|a| a.map.as_ref());
    let list = atom.and_then(|a| a.list.as_ref());
    set.retain_mut(|pe, member, children| {
        let child_ty = match pe {
            PathElement::Field(name) => map.map(|m| {
                if m.field(name).is_some() {
                    *member = true;
                }
                m.type_of(name)
            }),
            PathElement::Key(_) => list.map(|l| l.elem),
            _ => None,
        };
        mark_named_fields(model, child_ty, children);
    });
}

/// An apply configuration that cannot be typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// Where, rendered like conflict paths (`.spec.ports[0]`).
    pub path: String,
    /// What is wrong, in upstream's words.
    pub message: String,
}

#[cfg(test)]
mod tests;

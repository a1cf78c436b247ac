//! The fields an apply configuration sets, checked and written straight as a `FieldsV1`
//! trie in one walk: the configuration must fit its type (values of the right kind,
//! every list-map and set item named once), and its fields become the applier's entry.

use std::collections::HashSet;
use std::fmt::Write;

use serde_json::{Map, Value};

use super::{TypeError, is_empty_entry, item_key};
use crate::managed::fields_v1::parse_element;
use crate::managed::model::{ListKind, Shape, TypeId, TypeModel};
use crate::managed::raw::{Trie, insert_node};

/// One step of the path to where a walk is, for error messages only.
#[derive(Clone, Copy)]
enum Step<'v> {
    Field(&'v str),
    Index(usize),
}

fn render(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        let _ = match step {
            Step::Field(name) => write!(out, ".{name}"),
            Step::Index(i) => write!(out, "[{i}]"),
        };
    }
    out
}

/// The fields `config` sets (what [`super::to_set`] gives, as a trie), or why it cannot
/// be applied.
pub(crate) fn applied_fields(
    model: &TypeModel,
    ty: TypeId,
    config: &Value,
) -> Result<Trie, TypeError> {
    let mut path = Vec::new();
    walk(model, ty, config, &mut path, true).map(|(_, trie)| trie)
}

/// Checks `v` as [`applied_fields`] does, without building anything.
pub(crate) fn validate(model: &TypeModel, ty: TypeId, v: &Value) -> Result<(), TypeError> {
    let mut path = Vec::new();
    walk(model, ty, v, &mut path, false).map(drop)
}

/// Whether the node itself is a member, and its children (built only with `build`).
fn walk<'v>(
    model: &TypeModel,
    ty: TypeId,
    v: &'v Value,
    path: &mut Vec<Step<'v>>,
    build: bool,
) -> Result<(bool, Trie), TypeError> {
    let fail = |path: &[Step<'_>], message: String| TypeError {
        path: render(path),
        message,
    };
    let atom = model.atom(ty);
    let kind_ok = match v {
        Value::Null => true,
        Value::Object(_) => atom.map.is_some(),
        Value::Array(_) => atom.list.is_some(),
        _ => atom.scalar,
    };
    if !kind_ok {
        let expected = if atom.map.is_some() {
            "map"
        } else if atom.list.is_some() {
            "list"
        } else {
            "scalar"
        };
        return Err(fail(path, format!("expected {expected}, got {v}")));
    }
    let mut out = Map::new();
    match model.shape(ty, v) {
        Shape::Leaf => return Ok((true, out)),
        Shape::Map(t, m) => {
            // An atomic map is one leaf, though what it holds is still checked.
            let build_below = build && !t.atomic;
            let mut fields = t.cursor();
            for (k, val) in m.into_iter().flatten() {
                let field = fields.field(k);
                path.push(Step::Field(k));
                let (member, below) = walk(
                    model,
                    field.map_or(t.elem, |f| f.ty),
                    val,
                    path,
                    build_below,
                )?;
                path.pop();
                if build_below {
                    let member = member || is_empty_entry(val) || field.is_none();
                    let mut key = String::with_capacity(k.len() + 2);
                    key.push_str("f:");
                    key.push_str(k);
                    insert_node(&mut out, key, member, below);
                }
            }
            if t.atomic {
                return Ok((true, Map::new()));
            }
        }
        Shape::List(t, items) => {
            let keyed = t.kind != ListKind::Atomic;
            let build_below = build && keyed;
            // Items are told apart by their keys' canonical spelling, which is also what
            // names them in the trie.
            let mut seen: HashSet<String> = HashSet::new();
            for (i, item) in items.into_iter().flatten().enumerate() {
                let key = if keyed {
                    let mut key = String::new();
                    if let Err(e) = item_key(model, t, item, &mut key) {
                        path.push(Step::Index(i));
                        return Err(fail(path, e.message()));
                    }
                    let duplicate = match build_below {
                        true => out.contains_key(&key),
                        false => seen.contains(&key),
                    };
                    if duplicate {
                        let pe = parse_element(&key)
                            .ok()
                            .flatten()
                            .map(|pe| pe.to_string())
                            .unwrap_or(key);
                        return Err(fail(path, format!("duplicate entries for key {pe}")));
                    }
                    Some(key)
                } else {
                    None
                };
                path.push(Step::Index(i));
                let (_, below) = walk(model, t.elem, item, path, build_below)?;
                path.pop();
                match key {
                    Some(key) if build_below => insert_node(&mut out, key, true, below),
                    Some(key) => {
                        seen.insert(key);
                    }
                    None => {}
                }
            }
            if !keyed {
                return Ok((true, Map::new()));
            }
        }
    }
    Ok((false, out))
}

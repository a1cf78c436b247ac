//! Set operations on `FieldsV1` tries as stored, without decoding them: most writes only
//! need to know that an entry is untouched, and then its JSON is kept as it was.
//!
//! A trie is the map of a node's children. A child is a member when its object is empty
//! or holds `.`; the operations keep that canonical form (`{}` for a member without
//! children, `.` only beside children). Keys are compared as written, which is exact for
//! tries in canonical form: every trie this crate writes, and every one kube-apiserver
//! writes.

use serde_json::{Map, Value};

/// A trie: a node's children by their path element keys.
pub(crate) type Trie = Map<String, Value>;

const SELF: &str = ".";

fn is_member(node: &Trie) -> bool {
    node.is_empty() || node.contains_key(SELF)
}

fn children(node: &Trie) -> impl Iterator<Item = (&String, &Trie)> {
    node.iter()
        .filter(|(k, _)| *k != SELF)
        .filter_map(|(k, v)| v.as_object().map(|m| (k, m)))
}

/// Gives `node` the canonical form for `member`; `false` when nothing is left of it.
fn settle(node: &mut Trie, member: bool) -> bool {
    let has_children = node.keys().any(|k| k != SELF);
    match (member, has_children) {
        (true, true) => {
            node.entry(SELF)
                .or_insert_with(|| Value::Object(Map::new()));
            true
        }
        (_, false) => {
            node.remove(SELF);
            member
        }
        (false, true) => {
            node.remove(SELF);
            true
        }
    }
}

fn node_mut<'a>(trie: &'a mut Trie, key: &str) -> Option<&'a mut Trie> {
    trie.get_mut(key).and_then(Value::as_object_mut)
}

/// Adds the node `key` to `trie` in canonical form: a member without children is `{}`,
/// one with children holds `.` beside them, and a non-member without children is left out.
pub(crate) fn insert_node(trie: &mut Trie, key: String, member: bool, mut below: Trie) {
    if below.is_empty() {
        if member {
            trie.insert(key, Value::Object(below));
        }
        return;
    }
    if member {
        below.insert(SELF.into(), Value::Object(Map::new()));
    }
    trie.insert(key, Value::Object(below));
}

/// Adds the node `key` to `trie` like [`insert_node`], merged with the node already
/// there: members of either, children of both.
pub(crate) fn merge_node(trie: &mut Trie, key: String, member: bool, below: Trie) {
    match node_mut(trie, &key) {
        None => insert_node(trie, key, member, below),
        Some(existing) => {
            let member = member || is_member(existing);
            union(existing, &below);
            settle(existing, member);
        }
    }
}

/// Whether the tries share a member.
pub(crate) fn intersects(a: &Trie, b: &Trie) -> bool {
    children(b).any(|(k, bn)| {
        a.get(k)
            .and_then(Value::as_object)
            .is_some_and(|an| (is_member(an) && is_member(bn)) || intersects(an, bn))
    })
}

/// Whether every member of `b` is a member of `a`.
pub(crate) fn contains(a: &Trie, b: &Trie) -> bool {
    children(b).all(|(k, bn)| {
        a.get(k)
            .and_then(Value::as_object)
            .is_some_and(|an| (!is_member(bn) || is_member(an)) && contains(an, bn))
    })
}

/// Adds the members of `b` to `a`.
pub(crate) fn union(a: &mut Trie, b: &Trie) {
    for (k, bn) in children(b) {
        match node_mut(a, k) {
            Some(an) => {
                let member = is_member(an) || is_member(bn);
                union(an, bn);
                settle(an, member);
            }
            None => {
                a.insert(k.clone(), Value::Object(bn.clone()));
            }
        }
    }
}

/// Removes the members of `b` from `a`; paths below a removed member stay.
pub(crate) fn subtract(a: &mut Trie, b: &Trie) {
    for (k, bn) in children(b) {
        let Some(an) = node_mut(a, k) else { continue };
        let member = is_member(an) && !is_member(bn);
        subtract(an, bn);
        if !settle(an, member) {
            a.remove(k);
        }
    }
}

/// Removes the members of `b` from `a`, and everything below them.
pub(crate) fn subtract_recursive(a: &mut Trie, b: &Trie) {
    for (k, bn) in children(b) {
        if is_member(bn) {
            a.remove(k);
            continue;
        }
        let Some(an) = node_mut(a, k) else { continue };
        let member = is_member(an);
        subtract_recursive(an, bn);
        if !settle(an, member) {
            a.remove(k);
        }
    }
}

/// Keeps only the members of `a` that are members of `b` or lie below one.
pub(crate) fn keep_under(a: &mut Trie, b: &Trie) {
    a.retain(|k, an| {
        let Some(bn) = b.get(k).and_then(Value::as_object) else {
            return false;
        };
        if is_member(bn) {
            return true;
        }
        let Some(an) = an.as_object_mut() else {
            return false;
        };
        keep_under(an, bn);
        settle(an, false)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managed::fields_v1::{decode, encode};
    use crate::managed::path::{Path, PathElement};
    use crate::managed::set::FieldSet;
    use proptest::prelude::*;
    use serde_json::json;

    fn trie(set: &FieldSet) -> Trie {
        match encode(set) {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn arbitrary_set() -> impl Strategy<Value = FieldSet> {
        let pe = prop_oneof![
            proptest::sample::select(&["a", "b", "c"][..]).prop_map(PathElement::field),
            (0i64..3).prop_map(|v| PathElement::key([("name", json!(v))])),
        ];
        proptest::collection::vec(proptest::collection::vec(pe, 1..4).prop_map(Path), 0..8)
            .prop_map(|paths| paths.into_iter().collect())
    }

    proptest! {
        /// Each operation on tries agrees with the same operation on decoded sets.
        #[test]
        fn tries_agree_with_sets(a in arbitrary_set(), b in arbitrary_set()) {
            let (ta, tb) = (trie(&a), trie(&b));
            prop_assert_eq!(intersects(&ta, &tb), a.intersects(&b));
            prop_assert_eq!(contains(&ta, &tb), b.difference(&a).is_empty());
            let mut u = ta.clone();
            union(&mut u, &tb);
            prop_assert_eq!(&u, &trie(&a.union(&b)));
            let mut d = ta.clone();
            subtract(&mut d, &tb);
            prop_assert_eq!(&d, &trie(&a.difference(&b)));
            prop_assert_eq!(decode(&Value::Object(d)).unwrap(), a.difference(&b));
            let mut r = ta.clone();
            subtract_recursive(&mut r, &tb);
            prop_assert_eq!(&r, &trie(&a.recursive_difference(&b)));
            let mut k = ta.clone();
            keep_under(&mut k, &tb);
            prop_assert_eq!(&k, &trie(&a.only_under(&b)));
        }
    }
}

//! Sets of field paths as a trie: what one manager owns, what a write changed.
//!
//! A path is in the set when its node is a *member*; a node may also only lead to
//! members below it. Upstream's distinction matters: a list item owned "as a whole" is a
//! member (`.` in FieldsV1) even when its fields are members too, while a struct that
//! merely contains owned fields is not.

use std::cmp::Ordering;

use super::path::{Path, PathElement};

/// A set of field paths. Children are kept sorted by [`PathElement`]'s order, so every
/// set operation is a merge of sorted lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    nodes: Vec<Node>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    pe: PathElement,
    /// The path ending here is in the set.
    member: bool,
    /// Paths below this one; never kept empty unless `member` is set.
    children: FieldSet,
}

impl Node {
    fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        // Nodes are pruned when they become empty, so any node means a member below.
        self.nodes.is_empty()
    }

    /// The number of member paths.
    pub fn len(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| usize::from(n.member) + n.children.len())
            .sum()
    }

    fn find(&self, pe: &PathElement) -> Result<usize, usize> {
        self.nodes.binary_search_by(|n| n.pe.cmp(pe))
    }

    /// The node for `pe`, created if absent.
    fn descend(&mut self, pe: &PathElement) -> &mut Node {
        let i = match self.find(pe) {
            Ok(i) => i,
            Err(i) => {
                self.nodes.insert(
                    i,
                    Node {
                        pe: pe.clone(),
                        member: false,
                        children: FieldSet::new(),
                    },
                );
                i
            }
        };
        &mut self.nodes[i]
    }

    /// Adds `path`. Its parents are not added: a path is a member on its own. The empty
    /// path (the whole object) is never tracked.
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut set = self;
        for pe in parents {
            set = &mut set.descend(pe).children;
        }
        set.descend(last).member = true;
    }

    /// Adds a node built elsewhere (used by decoders that read children in order).
    pub(crate) fn push_node(&mut self, pe: PathElement, member: bool, children: FieldSet) {
        if !member && children.is_empty() {
            return;
        }
        // Decoded input is nearly always already in order; fall back to a sorted insert.
        if self.nodes.last().is_none_or(|n| n.pe < pe) {
            self.nodes.push(Node {
                pe,
                member,
                children,
            });
            return;
        }
        match self.find(&pe) {
            Ok(i) => {
                let n = &mut self.nodes[i];
                n.member |= member;
                n.children = n.children.union(&children);
            }
            Err(i) => self.nodes.insert(
                i,
                Node {
                    pe,
                    member,
                    children,
                },
            ),
        }
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[PathElement]) -> bool {
        let Some((last, parents)) = path.split_last() else {
            return false;
        };
        let mut set = self;
        for pe in parents {
            match set.find(pe) {
                Ok(i) => set = &set.nodes[i].children,
                Err(_) => return false,
            }
        }
        set.find(last).is_ok_and(|i| set.nodes[i].member)
    }

    /// Whether `pe` (one step from here) is a member.
    pub(crate) fn has_child_member(&self, pe: &PathElement) -> bool {
        self.find(pe).is_ok_and(|i| self.nodes[i].member)
    }

    /// The paths below `pe`, with `pe` stripped; `None` when there are none.
    pub fn with_prefix(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.find(pe)
            .ok()
            .map(|i| &self.nodes[i].children)
            .filter(|c| !c.is_empty())
    }

    /// The paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = Vec::with_capacity(self.nodes.len().max(other.nodes.len()));
        let (mut i, mut j) = (0, 0);
        while i < self.nodes.len() && j < other.nodes.len() {
            let (a, b) = (&self.nodes[i], &other.nodes[j]);
            match a.pe.cmp(&b.pe) {
                Ordering::Less => {
                    out.push(a.clone());
                    i += 1;
                }
                Ordering::Greater => {
                    out.push(b.clone());
                    j += 1;
                }
                Ordering::Equal => {
                    out.push(Node {
                        pe: a.pe.clone(),
                        member: a.member || b.member,
                        children: a.children.union(&b.children),
                    });
                    i += 1;
                    j += 1;
                }
            }
        }
        out.extend_from_slice(&self.nodes[i..]);
        out.extend_from_slice(&other.nodes[j..]);
        FieldSet { nodes: out }
    }

    /// Adds every path of `other` to this set.
    pub fn union_with(&mut self, other: &FieldSet) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = other.clone();
            return;
        }
        *self = self.union(other);
    }

    /// The paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let nodes = self
            .shared(other)
            .map(|(a, b)| Node {
                pe: a.pe.clone(),
                member: a.member && b.member,
                children: a.children.intersection(&b.children),
            })
            .filter(|node| !node.is_empty())
            .collect();
        FieldSet { nodes }
    }

    /// Whether the sets share a member path (without building the intersection).
    pub fn intersects(&self, other: &FieldSet) -> bool {
        self.shared(other)
            .any(|(a, b)| (a.member && b.member) || a.children.intersects(&b.children))
    }

    /// The nodes both sets hold, as pairs (this set's, `other`'s), found by one merge of the
    /// two sorted lists; allocates nothing.
    fn shared<'s>(&'s self, other: &'s FieldSet) -> impl Iterator<Item = (&'s Node, &'s Node)> {
        let (mut i, mut j) = (0, 0);
        std::iter::from_fn(move || {
            while i < self.nodes.len() && j < other.nodes.len() {
                let (a, b) = (&self.nodes[i], &other.nodes[j]);
                match a.pe.cmp(&b.pe) {
                    Ordering::Less => i += 1,
                    Ordering::Greater => j += 1,
                    Ordering::Equal => {
                        i += 1;
                        j += 1;
                        return Some((a, b));
                    }
                }
            }
            None
        })
    }

    /// The paths of this set that are not members of `other`. A member of `other` removes
    /// only that exact path, not the paths below it.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        self.subtract(other, |a, b| {
            Some(Node {
                pe: a.pe.clone(),
                member: a.member && !b.member,
                children: a.children.difference(&b.children),
            })
        })
    }

    /// The paths of this set that neither are a member of `other` nor lie below one.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        self.subtract(other, |a, b| {
            // A member of `other` takes away everything below it.
            (!b.member).then(|| Node {
                pe: a.pe.clone(),
                member: a.member,
                children: a.children.recursive_difference(&b.children),
            })
        })
    }

    /// Walks this set's nodes beside `other`'s: a node `other` does not hold is kept whole,
    /// one both hold becomes what `rest` leaves of it (dropped when that is `None` or
    /// empty). Both differences are this walk with their own rule for a shared node.
    fn subtract(&self, other: &FieldSet, rest: impl Fn(&Node, &Node) -> Option<Node>) -> FieldSet {
        if other.is_empty() {
            return self.clone();
        }
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut j = 0;
        for a in &self.nodes {
            while j < other.nodes.len() && other.nodes[j].pe < a.pe {
                j += 1;
            }
            match other.nodes.get(j).filter(|b| b.pe == a.pe) {
                None => out.push(a.clone()),
                Some(b) => out.extend(rest(a, b).filter(|node| !node.is_empty())),
            }
        }
        FieldSet { nodes: out }
    }

    /// Whether a path of this set is a member of `other` or lies below one: whether
    /// [`FieldSet::recursive_difference`] would take anything away.
    pub(crate) fn reaches(&self, other: &FieldSet) -> bool {
        self.shared(other)
            .any(|(a, b)| b.member || a.children.reaches(&b.children))
    }

    /// The paths of this set that are `prefix` or lie below it, for any prefix of
    /// `prefixes` (upstream's include filter, used for `/status` writes).
    pub fn only_under(&self, prefixes: &FieldSet) -> FieldSet {
        let nodes = self
            .shared(prefixes)
            .filter_map(|(a, b)| {
                if b.member {
                    return Some(a.clone());
                }
                let node = Node {
                    pe: a.pe.clone(),
                    member: false,
                    children: a.children.only_under(&b.children),
                };
                (!node.is_empty()).then_some(node)
            })
            .collect();
        FieldSet { nodes }
    }

    /// Calls `f` with every member path, in upstream's order (preorder: a level's
    /// members before the paths below its children).
    pub fn for_each(&self, mut f: impl FnMut(&[PathElement])) {
        let mut prefix = Vec::new();
        self.walk(&mut prefix, &mut f);
    }

    fn walk(&self, prefix: &mut Vec<PathElement>, f: &mut impl FnMut(&[PathElement])) {
        for n in self.nodes.iter().filter(|n| n.member) {
            prefix.push(n.pe.clone());
            f(prefix);
            prefix.pop();
        }
        for n in self.nodes.iter().filter(|n| !n.children.is_empty()) {
            prefix.push(n.pe.clone());
            n.children.walk(prefix, f);
            prefix.pop();
        }
    }

    /// Every member path, in upstream's order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.for_each(|p| out.push(Path(p.to_vec())));
        out
    }

    /// The steps one level down: each element with whether it is a member and what lies
    /// below it.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&PathElement, bool, &FieldSet)> {
        self.nodes.iter().map(|n| (&n.pe, n.member, &n.children))
    }

    /// Like [`FieldSet::entries`], mutably, for walks that rewrite a set level by level.
    pub(crate) fn retain_mut(&mut self, mut f: impl FnMut(&PathElement, &mut bool, &mut FieldSet)) {
        for n in &mut self.nodes {
            f(&n.pe, &mut n.member, &mut n.children);
        }
        self.nodes.retain(|n| !n.is_empty());
    }
}

impl FromIterator<Path> for FieldSet {
    fn from_iter<T: IntoIterator<Item = Path>>(iter: T) -> Self {
        let mut s = FieldSet::new();
        for p in iter {
            s.insert(&p.0);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Path {
        Path::fields(&s.split('.').collect::<Vec<_>>())
    }

    fn set(paths: &[&str]) -> FieldSet {
        paths.iter().map(|s| p(s)).collect()
    }

    fn rendered(s: &FieldSet) -> Vec<String> {
        s.paths().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn insert_has_and_order() {
        let s = set(&[
            "spec.template.spec",
            "metadata.labels.a",
            "spec.replicas",
            "spec",
        ]);
        assert!(s.has(&p("spec").0));
        assert!(s.has(&p("spec.replicas").0));
        assert!(!s.has(&p("spec.template").0));
        assert!(!s.has(&[]));
        assert_eq!(s.len(), 4);
        // Members of a level come before the paths below its children.
        assert_eq!(
            rendered(&s),
            [
                ".spec",
                ".metadata.labels.a",
                ".spec.replicas",
                ".spec.template.spec"
            ]
        );
    }

    #[test]
    fn set_algebra_table() {
        let a = set(&["a", "a.b", "a.c.d", "e"]);
        let b = set(&["a", "a.c", "f"]);
        assert_eq!(
            rendered(&a.union(&b)),
            [".a", ".e", ".f", ".a.b", ".a.c", ".a.c.d"]
        );
        assert_eq!(rendered(&a.intersection(&b)), [".a"]);
        // A member of `b` removes only itself from `a`...
        assert_eq!(rendered(&a.difference(&b)), [".e", ".a.b", ".a.c.d"]);
        // ...unless the difference is recursive.
        assert_eq!(rendered(&a.recursive_difference(&b)), [".e"]);
        assert!(a.intersects(&b));
        assert!(!set(&["x.y"]).intersects(&set(&["x"])));
        assert_eq!(
            rendered(&a.only_under(&set(&["a.c", "e"]))),
            [".e", ".a.c.d"]
        );
    }

    #[test]
    fn keys_and_values_are_path_elements() {
        let mut s = FieldSet::new();
        let item = PathElement::key([("name", json!("nginx"))]);
        s.insert(&[PathElement::field("containers"), item.clone()]);
        s.insert(&[
            PathElement::field("containers"),
            item.clone(),
            PathElement::field("image"),
        ]);
        assert_eq!(
            rendered(&s),
            [
                ".containers[name=\"nginx\"]",
                ".containers[name=\"nginx\"].image"
            ]
        );
        let below = s.with_prefix(&PathElement::field("containers")).unwrap();
        assert!(below.has_child_member(&item));
        assert!(s.with_prefix(&PathElement::field("nope")).is_none());
    }
}

//! Names filed under keys: the objects holding a tag, the workloads referencing a
//! dependency, the Services selecting by a label, the members holding a copy. A key whose
//! last name goes is dropped, so the index holds only what is filed.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;

/// Names (in order) under each key.
#[derive(Debug)]
pub struct NameIndex<K>(HashMap<K, BTreeSet<String>>);

impl<K> Default for NameIndex<K> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<K: Hash + Eq + Clone> NameIndex<K> {
    /// Files `name` under `key` (the key is cloned only for a new entry).
    pub fn add(&mut self, key: &K, name: &str) {
        if !self.0.get(key).is_some_and(|s| s.contains(name)) {
            self.0
                .entry(key.clone())
                .or_default()
                .insert(name.to_owned());
        }
    }

    /// Takes `name` out from under `key`.
    pub fn remove(&mut self, key: &K, name: &str) {
        if let Some(s) = self.0.get_mut(key) {
            s.remove(name);
            if s.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// The names under `key`, if any.
    pub fn get(&self, key: &K) -> Option<&BTreeSet<String>> {
        self.0.get(key)
    }

    /// Forgets every name.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// How many keys have names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no name is filed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_and_go_and_empty_keys_with_them() {
        let mut i = NameIndex::default();
        i.add(&"app=web", "b");
        i.add(&"app=web", "a");
        i.add(&"app=web", "a");
        i.add(&"app=db", "c");
        let under = |i: &NameIndex<&str>, k| -> Vec<String> {
            i.get(&k).into_iter().flatten().cloned().collect()
        };
        assert_eq!(under(&i, "app=web"), ["a", "b"], "in order, once each");
        assert_eq!(i.len(), 2);
        i.remove(&"app=web", "a");
        i.remove(&"app=web", "z");
        assert_eq!(under(&i, "app=web"), ["b"]);
        i.remove(&"app=db", "c");
        assert!(i.get(&"app=db").is_none(), "an emptied key is dropped");
        assert_eq!(i.len(), 1);
        i.clear();
        assert!(i.is_empty());
    }
}

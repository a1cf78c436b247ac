//! The federated Services of each namespace by a label their selectors require: a
//! workload's change finds the Services that select its pods without a scan of every
//! Service.

use std::collections::{BTreeSet, HashMap};

use crate::name_index::NameIndex;

use super::ServiceKey;
use super::backends::selects;
use super::inputs::Labels;
use super::workloads::label_tag;

/// Each Service's selector, and the Services found by one label of it.
#[derive(Default)]
pub(super) struct Selecting {
    selectors: HashMap<ServiceKey, Labels>,
    /// (namespace, [`label_tag`]) → the names of the Services whose selector's first label
    /// that is. A selector picks pods carrying all its labels, so a workload's labels find
    /// every Service that may select it through one of them.
    by_label: NameIndex<(String, String)>,
}

fn first_label(namespace: &str, selector: &Labels) -> Option<(String, String)> {
    let (k, v) = selector.iter().next()?;
    Some((namespace.to_owned(), label_tag(k, v)))
}

impl Selecting {
    /// Records the Service's selector (an empty one selects nothing).
    pub(super) fn set(&mut self, key: ServiceKey, selector: Labels) {
        if self.selectors.get(&key) == Some(&selector) {
            return;
        }
        self.remove(&key);
        if let Some(label) = first_label(&key.namespace, &selector) {
            self.by_label.add(&label, &key.name);
            self.selectors.insert(key, selector);
        }
    }

    /// Forgets a Service.
    pub(super) fn remove(&mut self, key: &ServiceKey) {
        let Some(selector) = self.selectors.remove(key) else {
            return;
        };
        if let Some(label) = first_label(&key.namespace, &selector) {
            self.by_label.remove(&label, &key.name);
        }
    }

    /// Replaces every Service's selector (a relist's).
    pub(super) fn replace(&mut self, all: impl IntoIterator<Item = (ServiceKey, Labels)>) {
        *self = Selecting::default();
        for (key, selector) in all {
            self.set(key, selector);
        }
    }

    /// The Services of `namespace` whose selectors pick pods with any of `labels`.
    pub(super) fn selecting(&self, namespace: &str, labels: &[&Labels]) -> BTreeSet<ServiceKey> {
        let mut out = BTreeSet::new();
        for l in labels {
            for (k, v) in l.iter() {
                let label = (namespace.to_owned(), label_tag(k, v));
                for name in self.by_label.get(&label).into_iter().flatten() {
                    let key = ServiceKey::new(namespace, name.as_str());
                    if self.selectors.get(&key).is_some_and(|s| selects(s, l)) {
                        out.insert(key);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn found(s: &Selecting, ns: &str, l: &[(&str, &str)]) -> Vec<String> {
        s.selecting(ns, &[&labels(l)])
            .into_iter()
            .map(|k| k.name)
            .collect()
    }

    #[test]
    fn a_workloads_labels_find_the_services_selecting_it() {
        let mut s = Selecting::default();
        s.set(ServiceKey::new("shop", "web"), labels(&[("app", "web")]));
        s.set(
            ServiceKey::new("shop", "web-blue"),
            labels(&[("app", "web"), ("track", "blue")]),
        );
        s.set(ServiceKey::new("shop", "db"), labels(&[("app", "db")]));
        s.set(ServiceKey::new("shop", "none"), labels(&[]));
        s.set(ServiceKey::new("other", "web"), labels(&[("app", "web")]));
        assert_eq!(found(&s, "shop", &[("app", "web")]), ["web"]);
        assert_eq!(
            found(&s, "shop", &[("app", "web"), ("track", "blue"), ("x", "y")]),
            ["web", "web-blue"],
            "every label of a selector, found through any"
        );
        assert_eq!(
            found(&s, "shop", &[("track", "blue")]),
            Vec::<String>::new()
        );
        assert_eq!(found(&s, "other", &[("app", "web")]), ["web"]);
        // Labels before and after a change: the Services of either.
        let before = labels(&[("app", "web")]);
        let after = labels(&[("app", "db")]);
        let both: Vec<String> = s
            .selecting("shop", &[&before, &after])
            .into_iter()
            .map(|k| k.name)
            .collect();
        assert_eq!(both, ["db", "web"]);
        // A new selector replaces the old; a removed Service is found no more.
        s.set(ServiceKey::new("shop", "web"), labels(&[("tier", "front")]));
        assert_eq!(found(&s, "shop", &[("app", "web")]), Vec::<String>::new());
        assert_eq!(found(&s, "shop", &[("tier", "front")]), ["web"]);
        s.remove(&ServiceKey::new("shop", "db"));
        assert_eq!(found(&s, "shop", &[("app", "db")]), Vec::<String>::new());
        // A relist replaces everything.
        s.replace([(ServiceKey::new("shop", "api"), labels(&[("app", "api")]))]);
        assert_eq!(
            found(&s, "shop", &[("tier", "front")]),
            Vec::<String>::new()
        );
        assert_eq!(found(&s, "shop", &[("app", "api")]), ["api"]);
        assert_eq!(s.by_label.len(), 1);
    }
}

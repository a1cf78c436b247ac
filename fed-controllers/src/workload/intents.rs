//! The intents one member holds, indexed by the dependency copies they use, so finding a
//! ConfigMap's users or whether it is still needed never scans every workload.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::kinds::{DepKind, WorkloadKey};
use super::member::{Intent, Want};

/// A dependency copy in a member: its kind, namespace and name.
type DepKey = (DepKind, String, String);

/// Intents by workload, with the workloads that use each dependency copy.
#[derive(Default)]
pub struct Intents {
    by_key: HashMap<WorkloadKey, Held>,
    users: HashMap<DepKey, HashSet<WorkloadKey>>,
}

/// One workload's intent and what it was built from. The intent is shared: the record of
/// the member's last sync keeps the one it converged to, which is this one nearly always
/// (a member of a thousand-member fleet holds one of each per workload).
struct Held {
    intent: Arc<Intent>,
    /// A digest of the inputs it was built from (`None`: it costs nothing to build).
    source: Option<u64>,
}

/// What [`Intents::set`] replaced.
pub struct Replaced {
    /// The intent held before.
    pub previous: Option<Arc<Intent>>,
    /// Whether the intent held now differs from it.
    pub changed: bool,
    /// Whether some dependency copy lost its last user.
    pub orphaned_a_dependency: bool,
}

fn deps_of<'a>(key: &'a WorkloadKey, intent: &'a Intent) -> impl Iterator<Item = DepKey> + 'a {
    let deps = match &intent.want {
        Want::Present { deps, .. } => deps.as_slice(),
        Want::Absent => &[],
    };
    deps.iter()
        .map(|d| (d.kind, key.namespace.clone(), d.name.clone()))
}

impl Intents {
    /// The intent for `key`.
    pub fn get(&self, key: &WorkloadKey) -> Option<&Arc<Intent>> {
        self.by_key.get(key).map(|h| &h.intent)
    }

    /// The digest of the inputs the intent for `key` was built from.
    pub fn source(&self, key: &WorkloadKey) -> Option<u64> {
        self.by_key.get(key).and_then(|h| h.source)
    }

    /// Whether there is an intent for `key`.
    pub fn contains(&self, key: &WorkloadKey) -> bool {
        self.by_key.contains_key(key)
    }

    /// Every workload with an intent.
    pub fn keys(&self) -> impl Iterator<Item = &WorkloadKey> {
        self.by_key.keys()
    }

    /// Sets the intent for `key`, built from inputs with digest `source`, or removes it
    /// (`None`). An intent equal to the one held keeps the one held (and whoever shares it).
    pub fn set(
        &mut self,
        key: &WorkloadKey,
        intent: Option<Intent>,
        source: Option<u64>,
    ) -> Replaced {
        let intent = match intent {
            Some(new) => match self.by_key.get_mut(key) {
                Some(held) if *held.intent == new => {
                    held.source = source;
                    return Replaced {
                        previous: Some(held.intent.clone()),
                        changed: false,
                        orphaned_a_dependency: false,
                    };
                }
                _ => Some(Arc::new(new)),
            },
            None => None,
        };
        let previous = match &intent {
            Some(i) => self.by_key.insert(
                key.clone(),
                Held {
                    intent: i.clone(),
                    source,
                },
            ),
            None => self.by_key.remove(key),
        }
        .map(|h| h.intent);
        if let Some(old) = &previous {
            for dep in deps_of(key, old) {
                if let Some(users) = self.users.get_mut(&dep) {
                    users.remove(key);
                    if users.is_empty() {
                        self.users.remove(&dep);
                    }
                }
            }
        }
        if let Some(new) = &intent {
            for dep in deps_of(key, new) {
                self.users.entry(dep).or_default().insert(key.clone());
            }
        }
        let orphaned_a_dependency = previous
            .as_ref()
            .is_some_and(|old| deps_of(key, old).any(|d| !self.users.contains_key(&d)));
        Replaced {
            changed: previous.as_deref() != intent.as_deref(),
            previous,
            orphaned_a_dependency,
        }
    }

    /// Workloads whose Present intent references the dependency copy.
    pub fn users_of(&self, kind: DepKind, namespace: &str, name: &str) -> Vec<WorkloadKey> {
        self.users
            .get(&(kind, namespace.to_string(), name.to_string()))
            .map(|u| u.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether any Present intent references the dependency copy.
    pub fn is_used(&self, kind: DepKind, namespace: &str, name: &str) -> bool {
        self.users
            .contains_key(&(kind, namespace.to_string(), name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compact::Compact;
    use crate::workload::kinds::Kind;
    use crate::workload::member::Dependency;
    use serde_json::json;

    fn key(name: &str) -> WorkloadKey {
        WorkloadKey::new(Kind::Deployment, "shop", name)
    }

    fn using(configmaps: &[&str]) -> Intent {
        Intent {
            uid: "u".into(),
            want: Want::Present {
                deps: configmaps
                    .iter()
                    .map(|n| Dependency {
                        kind: DepKind::ConfigMap,
                        name: n.to_string(),
                        object: Some(Compact::new(
                            &json!({"kind": "ConfigMap", "metadata": {"name": n}}),
                        )),
                    })
                    .collect(),
                workload: Compact::new(&json!({"kind": "Deployment"})),
                replicas: 1,
            },
        }
    }

    #[test]
    fn tracks_users_and_tells_when_a_dependency_loses_its_last() {
        let mut i = Intents::default();
        let r = i.set(&key("a"), Some(using(&["cfg", "extra"])), None);
        assert!(r.previous.is_none() && r.changed && !r.orphaned_a_dependency);
        assert!(
            !i.set(&key("b"), Some(using(&["cfg"])), None)
                .orphaned_a_dependency
        );
        let mut users = i.users_of(DepKind::ConfigMap, "shop", "cfg");
        users.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(users, vec![key("a"), key("b")]);
        assert!(i.is_used(DepKind::ConfigMap, "shop", "extra"));
        assert!(!i.is_used(DepKind::Secret, "shop", "cfg"));
        assert!(!i.is_used(DepKind::ConfigMap, "other", "cfg"));

        // The same intent again, or one keeping every dependency, orphans nothing.
        assert!(
            !i.set(&key("a"), Some(using(&["cfg", "extra"])), None)
                .orphaned_a_dependency
        );
        // "extra" had one user: dropping it orphans it; "cfg" keeps b.
        let r = i.set(&key("a"), Some(using(&["cfg"])), None);
        assert!(r.orphaned_a_dependency && r.previous.is_some());
        assert!(!i.is_used(DepKind::ConfigMap, "shop", "extra"));
        assert!(
            !i.set(&key("a"), None, None).orphaned_a_dependency,
            "b still uses cfg"
        );
        assert!(!i.contains(&key("a")));
        assert_eq!(
            i.users_of(DepKind::ConfigMap, "shop", "cfg"),
            vec![key("b")]
        );
        let absent = Intent {
            uid: "u".into(),
            want: Want::Absent,
        };
        assert!(i.set(&key("b"), Some(absent), None).orphaned_a_dependency);
        assert!(i.users_of(DepKind::ConfigMap, "shop", "cfg").is_empty());
        assert_eq!(i.keys().count(), 1);
    }

    #[test]
    fn an_equal_intent_keeps_the_one_held_and_takes_the_new_source() {
        let mut i = Intents::default();
        i.set(&key("a"), Some(using(&["cfg"])), Some(1));
        let held = i.get(&key("a")).cloned().expect("held");
        let r = i.set(&key("a"), Some(using(&["cfg"])), Some(2));
        assert!(!r.changed);
        let previous = r.previous.expect("replaced");
        assert!(Arc::ptr_eq(&previous, &held));
        assert!(Arc::ptr_eq(i.get(&key("a")).expect("held"), &held));
        assert_eq!(i.source(&key("a")), Some(2));

        // Another intent is held anew, with its own source.
        assert!(i.set(&key("a"), Some(using(&["other"])), None).changed);
        assert!(!Arc::ptr_eq(i.get(&key("a")).expect("held"), &held));
        assert_eq!(i.source(&key("a")), None);
        assert!(i.set(&key("a"), None, Some(3)).changed);
        assert_eq!(i.source(&key("a")), None);
        assert!(!i.set(&key("a"), None, None).changed);
    }
}

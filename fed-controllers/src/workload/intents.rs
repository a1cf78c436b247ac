//! The intents one member holds, indexed by the dependency copies they use, so finding a
//! ConfigMap's users or whether it is still needed never scans every workload.

use std::collections::{HashMap, HashSet};

use super::kinds::{DepKind, WorkloadKey};
use super::member::{Intent, Want};

/// A dependency copy in a member: its kind, namespace and name.
type DepKey = (DepKind, String, String);

/// Intents by workload, with the workloads that use each dependency copy.
#[derive(Default)]
pub struct Intents {
    by_key: HashMap<WorkloadKey, Intent>,
    users: HashMap<DepKey, HashSet<WorkloadKey>>,
}

/// What [`Intents::set`] replaced.
pub struct Replaced {
    /// The intent held before.
    pub previous: Option<Intent>,
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
    pub fn get(&self, key: &WorkloadKey) -> Option<&Intent> {
        self.by_key.get(key)
    }

    /// Whether there is an intent for `key`.
    pub fn contains(&self, key: &WorkloadKey) -> bool {
        self.by_key.contains_key(key)
    }

    /// Every workload with an intent.
    pub fn keys(&self) -> impl Iterator<Item = &WorkloadKey> {
        self.by_key.keys()
    }

    /// Sets the intent for `key`, or removes it (`None`).
    pub fn set(&mut self, key: &WorkloadKey, intent: Option<Intent>) -> Replaced {
        let previous = match &intent {
            Some(i) => self.by_key.insert(key.clone(), i.clone()),
            None => self.by_key.remove(key),
        };
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
        let r = i.set(&key("a"), Some(using(&["cfg", "extra"])));
        assert!(r.previous.is_none() && !r.orphaned_a_dependency);
        assert!(
            !i.set(&key("b"), Some(using(&["cfg"])))
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
            !i.set(&key("a"), Some(using(&["cfg", "extra"])))
                .orphaned_a_dependency
        );
        // "extra" had one user: dropping it orphans it; "cfg" keeps b.
        let r = i.set(&key("a"), Some(using(&["cfg"])));
        assert!(r.orphaned_a_dependency && r.previous.is_some());
        assert!(!i.is_used(DepKind::ConfigMap, "shop", "extra"));
        assert!(
            !i.set(&key("a"), None).orphaned_a_dependency,
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
        assert!(i.set(&key("b"), Some(absent)).orphaned_a_dependency);
        assert!(i.users_of(DepKind::ConfigMap, "shop", "cfg").is_empty());
        assert_eq!(i.keys().count(), 1);
    }
}

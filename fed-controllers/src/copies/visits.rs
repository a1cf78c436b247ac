//! Which members a copy pass looks at: its destinations and the members that may still hold
//! a copy, as the object's last pass left them. On a first pass, and whenever members came or
//! went since, every known member. A pass's cost so follows its destinations, not the fleet,
//! while no copy is ever lost sight of: a member is left out only once a pass has looked at
//! it and found no copy there.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use meridian_runtime::sync::lock;

use super::controller::CopyKey;

/// Each object's members that may hold a copy, with a digest of the members known then.
#[derive(Default)]
pub(super) struct Visits(Mutex<HashMap<CopyKey, (u64, BTreeSet<String>)>>);

/// The members one pass looks at, and the digest of the fleet it was planned against.
pub(super) struct Plan {
    pub clusters: BTreeSet<String>,
    fleet: u64,
}

impl Visits {
    /// The members `key`'s pass looks at: `dest`, and of the `fleet` (every known member)
    /// those its last pass left as maybe holding a copy, or all of them when there was no
    /// such pass or the fleet changed since.
    pub(super) fn plan(
        &self,
        key: &CopyKey,
        dest: impl IntoIterator<Item = String>,
        fleet: BTreeSet<String>,
    ) -> Plan {
        let digest = digest(&fleet);
        let mut clusters: BTreeSet<String> = dest.into_iter().collect();
        match lock(&self.0).get(key) {
            Some((d, maybe)) if *d == digest => clusters.extend(maybe.iter().cloned()),
            _ => clusters.extend(fleet),
        }
        Plan {
            clusters,
            fleet: digest,
        }
    }

    /// What `plan`'s pass found: the members of `plan.clusters` for which `absent` is false
    /// may hold a copy (they hold one, or were not looked at: unreachable, or the step
    /// failed).
    pub(super) fn record(&self, key: &CopyKey, plan: &Plan, absent: impl Iterator<Item = bool>) {
        let maybe = plan
            .clusters
            .iter()
            .zip(absent)
            .filter(|(_, absent)| !absent)
            .map(|(c, _)| c.clone())
            .collect();
        lock(&self.0).insert(key.clone(), (plan.fleet, maybe));
    }

    /// Forgets `key` (gone): its next pass, if any, looks at every member.
    pub(super) fn forget(&self, key: &CopyKey) {
        lock(&self.0).remove(key);
    }
}

/// A digest of the known members' names: it changes when one comes or goes.
fn digest(fleet: &BTreeSet<String>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    fleet.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn key() -> CopyKey {
        CopyKey {
            api_version: "policy/v1".into(),
            kind: "PodDisruptionBudget".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    #[test]
    fn a_pass_looks_at_its_destinations_and_where_copies_may_be() {
        let v = Visits::default();
        let k = key();
        let fleet = names(&["a", "b", "c", "d"]);
        // First pass: every member.
        let p = v.plan(&k, ["a".to_string()], fleet.clone());
        assert_eq!(p.clusters, fleet);
        // a holds its copy, b was unreachable, c and d hold none.
        v.record(&k, &p, [false, false, true, true].into_iter());
        let p = v.plan(&k, ["c".to_string()], fleet.clone());
        assert_eq!(p.clusters, names(&["a", "b", "c"]), "d was found empty");
        // c now holds one, a's was removed, b still unknown.
        v.record(&k, &p, [true, false, false].into_iter());
        assert_eq!(v.plan(&k, [], fleet.clone()).clusters, names(&["b", "c"]));
        // A member joined: every member again.
        let grown = names(&["a", "b", "c", "d", "e"]);
        assert_eq!(v.plan(&k, [], grown.clone()).clusters, grown);
        // Forgotten: every member again.
        v.forget(&k);
        assert_eq!(v.plan(&k, [], fleet.clone()).clusters, fleet);
    }
}

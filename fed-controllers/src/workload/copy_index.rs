//! Which members may hold a copy of each workload, so that a pass over a workload asks
//! its destinations and those members only, not every member of the fleet: with a thousand
//! members, asking each of them was most of what a workload on two of them cost.
//!
//! The members' watches keep it: a copy seen adds its member, a copy deleted removes it. It
//! may say more than the truth, never less: a copy that vanished in a relist (no delete
//! event) or a member that went leaves a name behind, which only costs one more look. A
//! member whose watches have not listed yet may hold anything, so it is a candidate for
//! every workload until they have.

use std::collections::BTreeSet;
use std::sync::Mutex;

use meridian_runtime::sync::lock;

use super::kinds::WorkloadKey;
use crate::name_index::NameIndex;

/// The members that may hold each workload's copy.
#[derive(Default)]
pub struct CopyIndex {
    /// Members that hold (or held, see the module docs) a copy of each workload.
    holders: Mutex<NameIndex<WorkloadKey>>,
    /// Members whose watches have not listed yet.
    unlisted: Mutex<BTreeSet<String>>,
}

impl CopyIndex {
    /// `member` holds a copy of `key`.
    pub fn add(&self, key: &WorkloadKey, member: &str) {
        lock(&self.holders).add(key, member);
    }

    /// `member`'s copy of `key` was deleted.
    pub fn remove(&self, key: &WorkloadKey, member: &str) {
        lock(&self.holders).remove(key, member);
    }

    /// `member`'s task started: until its watches list, it may hold any copy.
    pub fn started(&self, member: &str) {
        lock(&self.unlisted).insert(member.to_owned());
    }

    /// `member`'s watches have listed: what it holds is known from now on.
    pub fn listed(&self, member: &str) {
        lock(&self.unlisted).remove(member);
    }

    /// The members a pass over `key` asks: its destinations, the members that may hold a
    /// copy, and those not listed yet.
    pub fn candidates<'a>(
        &self,
        key: &WorkloadKey,
        destinations: impl IntoIterator<Item = &'a str>,
    ) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = destinations.into_iter().map(str::to_owned).collect();
        if let Some(s) = lock(&self.holders).get(key) {
            out.extend(s.iter().cloned());
        }
        out.extend(lock(&self.unlisted).iter().cloned());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::kinds::Kind;

    fn names(s: &BTreeSet<String>) -> Vec<&str> {
        s.iter().map(String::as_str).collect()
    }

    #[test]
    fn candidates_are_destinations_holders_and_unlisted_members() {
        let idx = CopyIndex::default();
        let web = WorkloadKey::new(Kind::Deployment, "shop", "web");
        let api = WorkloadKey::new(Kind::Deployment, "shop", "api");
        assert_eq!(names(&idx.candidates(&web, ["a", "b"])), ["a", "b"]);

        idx.add(&web, "c");
        idx.add(&web, "c");
        idx.add(&api, "d");
        assert_eq!(names(&idx.candidates(&web, ["a"])), ["a", "c"]);

        idx.started("z");
        assert_eq!(names(&idx.candidates(&api, [])), ["d", "z"]);
        idx.listed("z");
        assert_eq!(names(&idx.candidates(&api, [])), ["d"]);

        idx.remove(&web, "c");
        idx.remove(&web, "never-held");
        assert_eq!(names(&idx.candidates(&web, ["a"])), ["a"]);
        assert!(
            lock(&idx.holders).get(&web).is_none(),
            "an empty set is dropped"
        );
    }
}

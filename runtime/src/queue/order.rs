//! The order in which ready keys leave the queue: first in first out ([`Fifo`]), or by key
//! ([`Sorted`], for loops whose keys encode an order, such as creation order), each in two
//! [`Lane`]s.

use std::collections::{BTreeSet, VecDeque};

/// Which lane a key waits in. Every [`Lane::Normal`] key leaves before any [`Lane::Low`]
/// one, unless the queue bounds how long the low lane waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Changes to what is wanted.
    Normal,
    /// Work that may wait behind it (status refreshes).
    Low,
}

impl Lane {
    pub(super) const ALL: [Lane; 2] = [Lane::Normal, Lane::Low];

    pub(super) fn index(self) -> usize {
        match self {
            Lane::Normal => 0,
            Lane::Low => 1,
        }
    }
}

/// How the keys ready in each lane are ordered. The queue may leave entries behind that
/// no longer wait in that lane (moved up, or taken); it skips them when they come out, so
/// an order may keep them rather than search for them.
pub trait Order<K>: Default {
    /// Adds a ready key to `lane`.
    fn push(&mut self, lane: Lane, key: K);
    /// Drops `key` from `lane` if that is cheap (else the queue skips it later).
    fn remove(&mut self, lane: Lane, key: &K);
    /// The key [`Order::pop`] would take from `lane`.
    fn front(&self, lane: Lane) -> Option<&K>;
    /// Takes the next key of `lane`.
    fn pop(&mut self, lane: Lane) -> Option<K>;
    /// Whether no lane holds an entry.
    fn is_empty(&self) -> bool;
    /// Drops every entry and all but `keep` entries' room: called once no key waits, when
    /// every entry left is stale.
    fn clear(&mut self, keep: usize);
}

/// Keys leave in the order they became ready.
#[derive(Debug)]
pub struct Fifo<K> {
    lanes: [VecDeque<K>; 2],
}

impl<K> Default for Fifo<K> {
    fn default() -> Self {
        Self {
            lanes: [VecDeque::new(), VecDeque::new()],
        }
    }
}

impl<K> Order<K> for Fifo<K> {
    fn push(&mut self, lane: Lane, key: K) {
        self.lanes[lane.index()].push_back(key);
    }

    fn remove(&mut self, _: Lane, _: &K) {
        // Searching a deque is linear: the stale entry is skipped when it comes out.
    }

    fn front(&self, lane: Lane) -> Option<&K> {
        self.lanes[lane.index()].front()
    }

    fn pop(&mut self, lane: Lane) -> Option<K> {
        self.lanes[lane.index()].pop_front()
    }

    fn is_empty(&self) -> bool {
        self.lanes.iter().all(VecDeque::is_empty)
    }

    fn clear(&mut self, keep: usize) {
        for lane in &mut self.lanes {
            lane.clear();
            lane.shrink_to(keep);
        }
    }
}

/// Keys leave smallest first (a loop over `(resourceVersion, name)` keys handles objects
/// in creation order, so the same inputs give the same outcome every run).
#[derive(Debug)]
pub struct Sorted<K> {
    lanes: [BTreeSet<K>; 2],
}

impl<K> Default for Sorted<K> {
    fn default() -> Self {
        Self {
            lanes: [BTreeSet::new(), BTreeSet::new()],
        }
    }
}

impl<K: Ord> Order<K> for Sorted<K> {
    fn push(&mut self, lane: Lane, key: K) {
        self.lanes[lane.index()].insert(key);
    }

    fn remove(&mut self, lane: Lane, key: &K) {
        self.lanes[lane.index()].remove(key);
    }

    fn front(&self, lane: Lane) -> Option<&K> {
        self.lanes[lane.index()].first()
    }

    fn pop(&mut self, lane: Lane) -> Option<K> {
        self.lanes[lane.index()].pop_first()
    }

    fn is_empty(&self) -> bool {
        self.lanes.iter().all(BTreeSet::is_empty)
    }

    fn clear(&mut self, _keep: usize) {
        // A B-tree holds no spare room.
        for lane in &mut self.lanes {
            lane.clear();
        }
    }
}

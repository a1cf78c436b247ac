//! A member's capacity, kept as numbers only and updated incrementally from node and pod events.
//!
//! Full Node/Pod objects are never stored (karmada PR #1858 ran out of memory doing so on
//! members with thousands of nodes): a node is a 40-byte [`NodeSlot`], a pod an 8-byte
//! [`PodSlot`] (node index, request-shape index) keyed by a 64-bit hash of
//! `namespace/name`. Pods of one workload share their requests, so requests are interned
//! as [`Shape`]s. Everything here is pure and exact (integer millicores and bytes); the
//! watch loops in `member` feed it.

pub mod extract;

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};

use fed_api::cluster::{NodeSummary, ResourceList, ResourceSummary};

/// A node's allocatable resources and readiness, as read from its status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCapacity {
    /// Allocatable CPU in millicores.
    pub cpu_milli: u32,
    /// Allocatable memory in bytes.
    pub memory: u64,
    /// Allocatable pod slots.
    pub pods: u32,
    /// Whether the node's `Ready` condition is `True`.
    pub ready: bool,
}

/// What one pod requests (containers, init-container max rule, overhead applied).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodRequests {
    /// CPU in millicores.
    pub cpu_milli: u32,
    /// Memory in bytes.
    pub memory: u64,
}

/// Per-node numbers. Slots are reused through a free list so a node index stays small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeSlot {
    alloc_memory: u64,
    req_memory: u64,
    // u64: the sum over pods may exceed what one pod's u32 can hold.
    req_cpu_milli: u64,
    alloc_cpu_milli: u32,
    alloc_pods: u32,
    req_pods: u32,
    ready: bool,
    // False for a placeholder created by a pod that names a node not seen (yet, or any
    // more); it holds that pod's requests until the node shows up or its pods go.
    present: bool,
}

/// Per-pod numbers: which node slot it is counted on and which shape it requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodSlot {
    node: u32,
    shape: u32,
}

/// One distinct request shape and how many counted pods use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    memory: u64,
    cpu_milli: u32,
    refs: u32,
}

/// Summed resources, exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Millicores.
    pub cpu_milli: u64,
    /// Bytes.
    pub memory: u64,
    /// Pod count.
    pub pods: u64,
}

impl Resources {
    /// In Kubernetes notation, written with the codec the scheduler reads it back with.
    fn to_list(self) -> ResourceList {
        ResourceList::from_amounts(self.cpu_milli, self.memory, self.pods)
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The status-ready view of a member's capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Nodes known (present in the member).
    pub nodes_total: u64,
    /// Of those, Ready.
    pub nodes_ready: u64,
    /// Sum of allocatable over Ready nodes.
    pub allocatable: Resources,
    /// Sum of requests of counted pods on Ready nodes.
    pub allocated: Resources,
    /// The free resources of the single Ready node with the most free CPU (ties broken by
    /// most free memory): the biggest pod shape, by CPU, that fits somewhere right now.
    /// `None` when no node is Ready.
    pub largest_free: Option<Resources>,
}

impl Summary {
    /// `status.nodes`.
    pub fn node_summary(&self) -> NodeSummary {
        NodeSummary {
            total: clamp_i64(self.nodes_total),
            ready: clamp_i64(self.nodes_ready),
        }
    }

    /// `status.resourceSummary`, in Kubernetes quantity notation.
    pub fn resource_summary(&self) -> ResourceSummary {
        ResourceSummary {
            allocatable: self.allocatable.to_list(),
            allocated: self.allocated.to_list(),
            largest_free: self.largest_free.map(Resources::to_list),
        }
    }
}

/// Tracks one member's nodes and pods as numbers.
#[derive(Debug, Default)]
pub struct Tracker {
    hasher: RandomState,
    nodes: Vec<NodeSlot>,
    node_index: HashMap<u64, u32>,
    free: Vec<u32>,
    pods: HashMap<u64, PodSlot>,
    shapes: Vec<Shape>,
    shape_index: HashMap<(u32, u64), u32>,
    free_shapes: Vec<u32>,
    // Keys seen since a re-list began; whatever was not seen is removed when it ends.
    node_resync: Option<HashSet<u64>>,
    pod_resync: Option<HashSet<u64>>,
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Tracker::default()
    }

    fn node_key(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    fn pod_key(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    /// The slot of `key`, created (as a placeholder) if absent.
    fn slot(&mut self, key: u64) -> u32 {
        if let Some(&i) = self.node_index.get(&key) {
            return i;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.nodes.push(NodeSlot::default());
                u32::try_from(self.nodes.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.node_index.insert(key, i);
        i
    }

    fn node_mut(&mut self, i: u32) -> Option<&mut NodeSlot> {
        self.nodes.get_mut(i as usize)
    }

    /// Frees a slot nobody needs any more (node gone and no pods counted on it).
    fn release_if_unused(&mut self, key: u64, i: u32) {
        if let Some(n) = self.nodes.get_mut(i as usize)
            && !n.present
            && n.req_pods == 0
        {
            *n = NodeSlot::default();
            self.node_index.remove(&key);
            self.free.push(i);
        }
    }

    /// Records a node (added or changed). Returns whether the numbers changed.
    pub fn apply_node(&mut self, name: &str, cap: NodeCapacity) -> bool {
        let key = self.node_key(name);
        if let Some(seen) = self.node_resync.as_mut() {
            seen.insert(key);
        }
        let i = self.slot(key);
        let Some(n) = self.node_mut(i) else {
            return false;
        };
        let before = *n;
        n.alloc_cpu_milli = cap.cpu_milli;
        n.alloc_memory = cap.memory;
        n.alloc_pods = cap.pods;
        n.ready = cap.ready;
        n.present = true;
        *n != before
    }

    /// Forgets a node. Pods still counted on it keep a placeholder until they go.
    pub fn remove_node(&mut self, name: &str) -> bool {
        let key = self.node_key(name);
        let Some(&i) = self.node_index.get(&key) else {
            return false;
        };
        let changed = match self.node_mut(i) {
            Some(n) if n.present => {
                n.present = false;
                n.ready = false;
                true
            }
            _ => false,
        };
        self.release_if_unused(key, i);
        changed
    }

    /// Records a pod. `placement` is `Some((node, requests))` when the pod counts
    /// (scheduled and not terminated), `None` otherwise (which uncounts it).
    pub fn apply_pod(
        &mut self,
        namespace: &str,
        name: &str,
        placement: Option<(&str, PodRequests)>,
    ) -> bool {
        let key = self.pod_key(namespace, name);
        if let Some(seen) = self.pod_resync.as_mut() {
            seen.insert(key);
        }
        let Some((node_name, req)) = placement else {
            return self.uncount_pod(key);
        };
        let node_key = self.node_key(node_name);
        let node = self.slot(node_key);
        if let Some(old) = self.pods.get(&key).copied() {
            let same = self
                .shapes
                .get(old.shape as usize)
                .is_some_and(|s| s.cpu_milli == req.cpu_milli && s.memory == req.memory);
            if same && old.node == node {
                return false;
            }
            self.uncount_pod(key);
        }
        // The node slot may have been released by the uncount above (a placeholder whose
        // last pod this was); take it again.
        let node = self.slot(node_key);
        let shape = self.intern(req);
        self.count_pod(key, PodSlot { node, shape }, req);
        true
    }

    fn intern(&mut self, req: PodRequests) -> u32 {
        let k = (req.cpu_milli, req.memory);
        if let Some(&i) = self.shape_index.get(&k)
            && let Some(s) = self.shapes.get_mut(i as usize)
        {
            s.refs = s.refs.saturating_add(1);
            return i;
        }
        let shape = Shape {
            memory: req.memory,
            cpu_milli: req.cpu_milli,
            refs: 1,
        };
        let i = match self.free_shapes.pop() {
            Some(i) => {
                if let Some(s) = self.shapes.get_mut(i as usize) {
                    *s = shape;
                }
                i
            }
            None => {
                self.shapes.push(shape);
                u32::try_from(self.shapes.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.shape_index.insert(k, i);
        i
    }

    fn release_shape(&mut self, i: u32) {
        if let Some(s) = self.shapes.get_mut(i as usize) {
            s.refs = s.refs.saturating_sub(1);
            if s.refs == 0 {
                self.shape_index.remove(&(s.cpu_milli, s.memory));
                self.free_shapes.push(i);
            }
        }
    }

    /// Forgets a deleted pod.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> bool {
        let key = self.pod_key(namespace, name);
        self.uncount_pod(key)
    }

    fn count_pod(&mut self, key: u64, pod: PodSlot, req: PodRequests) {
        if let Some(n) = self.node_mut(pod.node) {
            n.req_cpu_milli = n.req_cpu_milli.saturating_add(u64::from(req.cpu_milli));
            n.req_memory = n.req_memory.saturating_add(req.memory);
            n.req_pods = n.req_pods.saturating_add(1);
        }
        self.pods.insert(key, pod);
    }

    fn uncount_pod(&mut self, key: u64) -> bool {
        let Some(pod) = self.pods.remove(&key) else {
            return false;
        };
        let shape = self
            .shapes
            .get(pod.shape as usize)
            .copied()
            .unwrap_or_default();
        self.release_shape(pod.shape);
        if let Some(n) = self.node_mut(pod.node) {
            n.req_cpu_milli = n.req_cpu_milli.saturating_sub(u64::from(shape.cpu_milli));
            n.req_memory = n.req_memory.saturating_sub(shape.memory);
            n.req_pods = n.req_pods.saturating_sub(1);
        }
        // Find the node's key to release a placeholder; placeholders are rare, so the
        // scan only happens when the slot is not a present node.
        if self
            .nodes
            .get(pod.node as usize)
            .is_some_and(|n| !n.present && n.req_pods == 0)
            && let Some((&k, _)) = self.node_index.iter().find(|&(_, &i)| i == pod.node)
        {
            self.release_if_unused(k, pod.node);
        }
        true
    }

    /// A node re-list begins (the watch lost its place): note which nodes it reports.
    pub fn begin_node_resync(&mut self) {
        // Nothing to forget on a first list: skip the bookkeeping set.
        self.node_resync = (!self.node_index.is_empty()).then(HashSet::new);
    }

    /// The node re-list is complete: forget nodes it did not report.
    pub fn finish_node_resync(&mut self) -> bool {
        let seen = self.node_resync.take();
        let gone: Vec<u64> = self
            .node_index
            .iter()
            .filter(|&(k, &i)| {
                seen.as_ref().is_some_and(|s| !s.contains(k))
                    && self.nodes.get(i as usize).is_some_and(|n| n.present)
            })
            .map(|(&k, _)| k)
            .collect();
        let mut changed = false;
        for key in gone {
            if let Some(&i) = self.node_index.get(&key) {
                if let Some(n) = self.node_mut(i) {
                    n.present = false;
                    n.ready = false;
                    changed = true;
                }
                self.release_if_unused(key, i);
            }
        }
        // After a full list the table sizes are known; give back growth slack.
        self.nodes.shrink_to_fit();
        self.node_index.shrink_to_fit();
        changed
    }

    /// A pod re-list begins.
    pub fn begin_pod_resync(&mut self) {
        self.pod_resync = (!self.pods.is_empty()).then(HashSet::new);
    }

    /// The pod re-list is complete: uncount pods it did not report.
    pub fn finish_pod_resync(&mut self) -> bool {
        let Some(seen) = self.pod_resync.take() else {
            self.pods.shrink_to_fit();
            return false;
        };
        let gone: Vec<u64> = self
            .pods
            .keys()
            .filter(|k| !seen.contains(k))
            .copied()
            .collect();
        let changed = !gone.is_empty();
        for key in gone {
            self.uncount_pod(key);
        }
        self.pods.shrink_to_fit();
        changed
    }

    /// The status view: sums over Ready nodes and the largest free slot.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        let mut best: Option<Resources> = None;
        for n in self.nodes.iter().filter(|n| n.present) {
            s.nodes_total += 1;
            if !n.ready {
                continue;
            }
            s.nodes_ready += 1;
            s.allocatable.cpu_milli += u64::from(n.alloc_cpu_milli);
            s.allocatable.memory = s.allocatable.memory.saturating_add(n.alloc_memory);
            s.allocatable.pods += u64::from(n.alloc_pods);
            s.allocated.cpu_milli = s.allocated.cpu_milli.saturating_add(n.req_cpu_milli);
            s.allocated.memory = s.allocated.memory.saturating_add(n.req_memory);
            s.allocated.pods += u64::from(n.req_pods);
            let free = Resources {
                cpu_milli: u64::from(n.alloc_cpu_milli).saturating_sub(n.req_cpu_milli),
                memory: n.alloc_memory.saturating_sub(n.req_memory),
                pods: u64::from(n.alloc_pods.saturating_sub(n.req_pods)),
            };
            if best.is_none_or(|b| (free.cpu_milli, free.memory) > (b.cpu_milli, b.memory)) {
                best = Some(free);
            }
        }
        s.largest_free = best;
        s
    }

    /// Counted pods (for tests and metrics).
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// An estimate of the heap this tracker holds: every container's capacity times its
    /// element size, hash tables at one control byte per bucket and 8/7 buckets per slot
    /// of capacity (hashbrown's load factor).
    pub fn heap_bytes(&self) -> usize {
        self.node_heap_bytes()
            + table::<u64, PodSlot>(self.pods.capacity())
            + self.shapes.capacity() * std::mem::size_of::<Shape>()
            + self.free_shapes.capacity() * std::mem::size_of::<u32>()
            + table::<(u32, u64), u32>(self.shape_index.capacity())
            + self
                .node_resync
                .as_ref()
                .map_or(0, |s| table::<u64, ()>(s.capacity()))
            + self
                .pod_resync
                .as_ref()
                .map_or(0, |s| table::<u64, ()>(s.capacity()))
    }

    /// Bytes held for nodes alone (slots, index, free list).
    pub fn node_heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<NodeSlot>()
            + self.free.capacity() * std::mem::size_of::<u32>()
            + table::<u64, u32>(self.node_index.capacity())
    }
}

/// Bytes of a hash table with room for `capacity` entries: 8/7 buckets per entry (the
/// 7/8 load factor), each an entry plus one control byte.
fn table<K, V>(capacity: usize) -> usize {
    capacity.saturating_mul(8).div_ceil(7) * (std::mem::size_of::<(K, V)>() + 1)
}

#[cfg(test)]
mod tests;

//! What the loop knows, digested from the watch caches into the core's types, and which
//! workloads a change concerns.
//!
//! Watch handlers feed objects in and get back the keys to re-decide; workers read
//! workloads, policies and a shared [`Snapshot`] (rebuilt at most once per second or per
//! cluster change, not per workload). Selection rules:
//! - a workload is re-decided when its replicas, labels, annotations or pod shape change
//!   (not on status updates);
//! - a policy change re-decides the workloads of its namespace the old or new version
//!   selects;
//! - a cluster joining, leaving, changing health (Ready ↔ Offline), labels, region,
//!   zone, taints, served APIs or allocatable resources (nodes added, removed or gone
//!   NotReady) re-decides every workload; a change of allocated resources only re-decides
//!   workloads with replicas that fit nowhere — small capacity wiggles from pod churn move
//!   nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::policy_match::policy_matches;
use crate::types::{Cluster, PropagationPolicy, Snapshot, Taint, TargetCluster, Workload};

use super::key::WorkloadKey;

/// A federated workload as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadEntry {
    /// `metadata.uid`, for the Placement's ownerReference.
    pub uid: String,
    /// The workload, or why it could not be read.
    pub workload: Result<Workload, String>,
}

/// Which workloads to re-decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeue {
    /// None.
    Nothing,
    /// Every workload, these first (they hold replicas on the cluster that changed).
    All {
        /// Queued ahead of the rest.
        first: Vec<WorkloadKey>,
    },
    /// These.
    Keys(Vec<WorkloadKey>),
}

/// How a cluster changed, as far as placement is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterChange {
    /// Nothing placement reads (e.g. only probe times).
    Unchanged,
    /// Only allocated resources / largest free slot moved.
    Allocated,
    /// Joined, left, health, identity, taints, APIs or allocatable changed.
    Eligibility,
}

/// The Ready condition's status and transition time: the health the core reads.
fn health(c: &Cluster) -> Option<(&str, Option<&str>)> {
    c.status
        .conditions
        .iter()
        .find(|x| x.type_ == "Ready")
        .map(|x| (x.status.as_str(), x.last_transition_time.as_deref()))
}

/// Classifies a cluster update (`None` = absent).
pub fn classify(old: Option<&Cluster>, new: Option<&Cluster>) -> ClusterChange {
    let (Some(o), Some(n)) = (old, new) else {
        return if old.is_none() && new.is_none() {
            ClusterChange::Unchanged
        } else {
            ClusterChange::Eligibility
        };
    };
    let allocatable = |c: &Cluster| {
        c.status
            .resource_summary
            .as_ref()
            .map(|r| r.allocatable.clone())
    };
    // Where and how to reach a member (endpoint, CA, credentials) is no placement input.
    fn placed(c: &Cluster) -> (&Option<String>, &Option<String>, &[Taint]) {
        (&c.spec.region, &c.spec.zone, &c.spec.taints)
    }
    if health(o) != health(n)
        || o.metadata.labels != n.metadata.labels
        || placed(o) != placed(n)
        || o.status.api_enablements != n.status.api_enablements
        || allocatable(o) != allocatable(n)
        || o.status.nodes.map(|x| x.ready) != n.status.nodes.map(|x| x.ready)
        || o.status.resource_summary.is_some() != n.status.resource_summary.is_some()
    {
        ClusterChange::Eligibility
    } else if o.status.resource_summary != n.status.resource_summary {
        ClusterChange::Allocated
    } else {
        ClusterChange::Unchanged
    }
}

/// Keys of `workloads` in `namespace` that `old` or `new` (versions of one policy) selects.
pub fn selected_by<'a>(
    workloads: impl IntoIterator<Item = (&'a WorkloadKey, &'a WorkloadEntry)>,
    old: Option<&PropagationPolicy>,
    new: Option<&PropagationPolicy>,
) -> Vec<WorkloadKey> {
    let Some(ns) = new.or(old).map(|p| p.metadata.namespace.as_str()) else {
        return Vec::new();
    };
    let mut keys: Vec<WorkloadKey> = workloads
        .into_iter()
        .filter(|(k, _)| k.namespace == ns)
        .filter(|(_, e)| match &e.workload {
            Ok(w) => [old, new]
                .into_iter()
                .flatten()
                .any(|p| policy_matches(p, w).is_some()),
            Err(_) => false,
        })
        .map(|(k, _)| k.clone())
        .collect();
    keys.sort();
    keys
}

#[derive(Debug, Default)]
struct Inner {
    workloads: HashMap<WorkloadKey, Arc<WorkloadEntry>>,
    clusters: BTreeMap<String, Cluster>,
    cluster_generation: u64,
    /// `[unguarded, guarded]`: (cluster generation, now) it was built for, and the snapshot.
    snapshots: [Option<(u64, i64, Arc<Snapshot>)>; 2],
    mass_failure: bool,
    policies: BTreeMap<(String, String), PropagationPolicy>,
    /// Bumped on every policy change: the copy loop re-decides everything on a change.
    policy_generation: u64,
    /// ClusterPropagationPolicies by name.
    cluster_policies: BTreeMap<String, PropagationPolicy>,
    cluster_policy_list: Arc<Vec<PropagationPolicy>>,
    by_namespace: HashMap<String, Arc<Vec<PropagationPolicy>>>,
    /// destClusters per workload: last written by us or observed on its Placement.
    placed: HashMap<WorkloadKey, Vec<TargetCluster>>,
    /// Workloads with replicas that fit nowhere: capacity changes concern them.
    wanting: HashSet<WorkloadKey>,
}

/// The digested caches; cheap to share between watch handlers and workers.
#[derive(Debug)]
pub struct Index {
    inner: Mutex<Inner>,
    /// The `(policy, cluster)` generations, published on every change: the copy loop
    /// waits on it instead of polling [`Index::generations`].
    changes: watch::Sender<(u64, u64)>,
}

impl Default for Index {
    fn default() -> Self {
        Index {
            inner: Mutex::default(),
            changes: watch::Sender::new((0, 0)),
        }
    }
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        meridian_runtime::sync::lock(&self.inner)
    }

    /// Tells subscribers the generations `s` holds (called with the lock held, so
    /// subscribers see them in the order they were reached).
    fn publish(&self, s: &Inner) {
        self.changes
            .send_replace((s.policy_generation, s.cluster_generation));
    }

    /// The generations as they change: `changed()` wakes when a policy or a
    /// placement-relevant part of a cluster changed since the last look.
    pub fn subscribe(&self) -> watch::Receiver<(u64, u64)> {
        self.changes.subscribe()
    }

    /// Records a workload; `true` when placement-relevant fields changed.
    pub fn apply_workload(&self, key: WorkloadKey, entry: WorkloadEntry) -> bool {
        let mut s = self.lock();
        if s.workloads.get(&key).is_some_and(|e| **e == entry) {
            return false;
        }
        s.workloads.insert(key, Arc::new(entry));
        true
    }

    /// Forgets a workload.
    pub fn delete_workload(&self, key: &WorkloadKey) {
        let mut s = self.lock();
        s.workloads.remove(key);
        s.placed.remove(key);
        s.wanting.remove(key);
    }

    /// The workload, if known.
    pub fn workload(&self, key: &WorkloadKey) -> Option<Arc<WorkloadEntry>> {
        self.lock().workloads.get(key).cloned()
    }

    /// Every known workload key.
    pub fn keys(&self) -> Vec<WorkloadKey> {
        self.lock().workloads.keys().cloned().collect()
    }

    /// Records a cluster (or its deletion, `new = None`) and says whom it concerns.
    pub fn apply_cluster(&self, name: &str, new: Option<Cluster>) -> Requeue {
        let mut s = self.lock();
        let change = classify(s.clusters.get(name), new.as_ref());
        match new {
            Some(c) => {
                s.clusters.insert(name.to_owned(), c);
            }
            None => {
                s.clusters.remove(name);
            }
        }
        match change {
            ClusterChange::Unchanged => Requeue::Nothing,
            ClusterChange::Allocated => {
                // The snapshot must see the new numbers, but only short workloads care.
                s.cluster_generation += 1;
                self.publish(&s);
                let mut keys: Vec<WorkloadKey> = s.wanting.iter().cloned().collect();
                keys.sort();
                if keys.is_empty() {
                    Requeue::Nothing
                } else {
                    Requeue::Keys(keys)
                }
            }
            ClusterChange::Eligibility => {
                s.cluster_generation += 1;
                self.publish(&s);
                // Workloads with replicas there are the ones a failover must move:
                // queue them ahead of the thousands whose decision will not change.
                let mut first: Vec<WorkloadKey> = s
                    .placed
                    .iter()
                    .filter(|(_, dest)| dest.iter().any(|t| t.cluster == name))
                    .map(|(k, _)| k.clone())
                    .collect();
                first.sort();
                Requeue::All { first }
            }
        }
    }

    /// Names of known clusters.
    pub fn cluster_names(&self) -> Vec<String> {
        self.lock().clusters.keys().cloned().collect()
    }

    /// Sets the mass-failure guard; `true` when it flipped (every decision may change).
    pub fn set_mass_failure(&self, on: bool) -> bool {
        let mut s = self.lock();
        let flipped = s.mass_failure != on;
        s.mass_failure = on;
        flipped
    }

    /// Whether the mass-failure guard is engaged.
    pub fn mass_failure(&self) -> bool {
        self.lock().mass_failure
    }

    /// The fleet as of `now_unix`, guarded (evictions paused) or not; shared while
    /// neither the clusters nor the second change.
    pub fn snapshot(&self, now_unix: i64, guarded: bool) -> Arc<Snapshot> {
        let mut s = self.lock();
        let slot = usize::from(guarded);
        let generation = s.cluster_generation;
        if let Some((g, t, snap)) = &s.snapshots[slot]
            && *g == generation
            && *t == now_unix
        {
            return snap.clone();
        }
        let snap = Arc::new(
            Snapshot::new(s.clusters.values().cloned(), now_unix).with_mass_failure_guard(guarded),
        );
        s.snapshots[slot] = Some((generation, now_unix, snap.clone()));
        snap
    }

    /// Records a policy (or its deletion, `new = None`); returns the workloads it concerns.
    pub fn apply_policy(
        &self,
        namespace: &str,
        name: &str,
        new: Option<PropagationPolicy>,
    ) -> Vec<WorkloadKey> {
        let mut s = self.lock();
        let id = (namespace.to_owned(), name.to_owned());
        let old = s.policies.get(&id);
        if old == new.as_ref() {
            return Vec::new();
        }
        let keys = selected_by(
            s.workloads.iter().map(|(k, e)| (k, &**e)),
            old,
            new.as_ref(),
        );
        s.policy_generation += 1;
        self.publish(&s);
        match new {
            Some(p) => {
                s.policies.insert(id, p);
            }
            None => {
                s.policies.remove(&id);
            }
        }
        let list: Vec<PropagationPolicy> = s
            .policies
            .range((namespace.to_owned(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(_, p)| p.clone())
            .collect();
        s.by_namespace.insert(namespace.to_owned(), Arc::new(list));
        keys
    }

    /// `(namespace, name)` of known policies.
    pub fn policy_ids(&self) -> Vec<(String, String)> {
        self.lock().policies.keys().cloned().collect()
    }

    /// Every known policy, of every namespace, and every ClusterPropagationPolicy.
    pub fn all_policies(&self) -> Vec<PropagationPolicy> {
        let s = self.lock();
        s.policies
            .values()
            .chain(s.cluster_policies.values())
            .cloned()
            .collect()
    }

    /// Records a ClusterPropagationPolicy (or its deletion); `true` when it changed, and
    /// then every workload is to be re-decided (it may govern any of them).
    pub fn apply_cluster_policy(&self, name: &str, new: Option<PropagationPolicy>) -> bool {
        let mut s = self.lock();
        if s.cluster_policies.get(name) == new.as_ref() {
            return false;
        }
        match new {
            Some(p) => {
                s.cluster_policies.insert(name.to_owned(), p);
            }
            None => {
                s.cluster_policies.remove(name);
            }
        }
        s.policy_generation += 1;
        self.publish(&s);
        s.cluster_policy_list = Arc::new(s.cluster_policies.values().cloned().collect());
        true
    }

    /// Names of known ClusterPropagationPolicies.
    pub fn cluster_policy_names(&self) -> Vec<String> {
        self.lock().cluster_policies.keys().cloned().collect()
    }

    /// Every ClusterPropagationPolicy.
    pub fn cluster_policies(&self) -> Arc<Vec<PropagationPolicy>> {
        self.lock().cluster_policy_list.clone()
    }

    /// `(policy, cluster)` generations: either moves when a policy or a placement-relevant
    /// part of a cluster changed.
    pub fn generations(&self) -> (u64, u64) {
        let s = self.lock();
        (s.policy_generation, s.cluster_generation)
    }

    /// The policies of a namespace.
    pub fn policies(&self, namespace: &str) -> Arc<Vec<PropagationPolicy>> {
        self.lock()
            .by_namespace
            .get(namespace)
            .cloned()
            .unwrap_or_default()
    }

    /// Records the outcome of a decision for `key`.
    pub fn record(&self, key: &WorkloadKey, dest: Vec<TargetCluster>, wanting: bool) {
        let mut s = self.lock();
        s.placed.insert(key.clone(), dest);
        if wanting {
            s.wanting.insert(key.clone());
        } else {
            s.wanting.remove(key);
        }
    }

    /// A Placement as observed by the watch (`None` = deleted); `true` when it differs
    /// from what the scheduler last decided, so the workload should be re-decided.
    pub fn observe_placement(&self, key: &WorkloadKey, dest: Option<Vec<TargetCluster>>) -> bool {
        let s = self.lock();
        match (s.placed.get(key), dest) {
            (_, None) => s.workloads.contains_key(key),
            (Some(ours), Some(seen)) => *ours != seen,
            (None, Some(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests;

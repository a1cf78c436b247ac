//! One writer per member object. A ConfigMap, Secret, ServiceAccount or PersistentVolumeClaim
//! may be asked for twice: a policy selects it (the copy path, [`crate::copies`], with a
//! copy Placement) and a workload's pod template references it (the dependency path,
//! [`crate::workload`]). Written by both, it would flap: one path deletes what the other
//! wants, or they write different overridden versions. The rule, as Karmada's (a member
//! holds the object when either its policy or a workload running there needs it, and it is
//! written once):
//!
//! - an object with a copy Placement is the copy path's ([`writer`]): it writes the object
//!   to its Placement's clusters and to every cluster where a workload referencing it runs
//!   ([`copy_destinations`]), and reports them all on that Placement;
//! - the dependency path leaves such an object alone: it neither writes it nor collects it
//!   as unreferenced, and counts it as in use;
//! - an object without a copy Placement is the dependency path's, as before.
//!
//! [`DepWriters`] is the state both controllers of the process share for this: which
//! dependency objects have a copy Placement (set by the copy controller) and where the
//! workloads referencing each run (set by the workload controller), with a callback to each
//! side when what the other reads changed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use fed_api::placement::TargetCluster;
use meridian_runtime::sync::lock;

use crate::workload::kinds::DepKind;

/// A dependency object of the federation: kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DepRef {
    /// Its kind.
    pub kind: DepKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl DepRef {
    /// The dependency object a copied object is, if it is one (a namespaced `v1`
    /// ConfigMap, Secret, ServiceAccount or PersistentVolumeClaim).
    pub fn of_copy(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Self> {
        if api_version != "v1" {
            return None;
        }
        let kind = DepKind::ALL.into_iter().find(|k| k.as_str() == kind)?;
        Some(Self {
            kind,
            namespace: namespace?.to_string(),
            name: name.to_string(),
        })
    }
}

/// Which path writes the member copies of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// The copy path: the object has a copy Placement.
    Copies,
    /// The dependency path: only workloads ask for it.
    Dependencies,
}

/// The writer of an object that has a copy Placement (`copy_placed`) or not.
pub fn writer(copy_placed: bool) -> Writer {
    if copy_placed {
        Writer::Copies
    } else {
        Writer::Dependencies
    }
}

/// The clusters the copy path writes an object it owns to: its Placement's destinations
/// (`placed`, in their order), then the other clusters where a workload referencing it runs
/// (`demanded`, by name). A Placement that places it nowhere does not own it on the
/// workloads' behalf: nothing is added then.
pub fn copy_destinations(
    placed: &[TargetCluster],
    demanded: &BTreeSet<String>,
) -> Vec<TargetCluster> {
    let mut out = placed.to_vec();
    if placed.is_empty() {
        return out;
    }
    for c in demanded {
        if !placed.iter().any(|t| &t.cluster == c) {
            out.push(TargetCluster::new(c.as_str(), 0));
        }
    }
    out
}

/// A callback told of one dependency object whose state changed.
type Notify = Box<dyn Fn(&DepRef) + Send + Sync>;

#[derive(Default)]
struct State {
    /// Dependency objects with a copy Placement.
    copied: HashSet<DepRef>,
    /// Per dependency object, the clusters of each workload (by key) that references it.
    demand: HashMap<DepRef, BTreeMap<String, BTreeSet<String>>>,
    /// Per workload key, the dependency objects it references.
    by_workload: HashMap<String, BTreeSet<DepRef>>,
}

/// What the copy and workload controllers of one process share about dependency objects
/// (see the module documentation).
#[derive(Default)]
pub struct DepWriters {
    state: Mutex<State>,
    /// Told when the clusters asking for an object changed (the copy controller re-syncs it).
    on_demand: OnceLock<Notify>,
    /// Told when an object gained or lost its copy Placement (the workload controller
    /// re-syncs the workloads referencing it).
    on_copied: OnceLock<Notify>,
}

impl DepWriters {
    /// Registers the copy controller's callback (the first registration holds).
    pub fn on_demand_change(&self, f: impl Fn(&DepRef) + Send + Sync + 'static) {
        let _ = self.on_demand.set(Box::new(f));
    }

    /// Registers the workload controller's callback (the first registration holds).
    pub fn on_copied_change(&self, f: impl Fn(&DepRef) + Send + Sync + 'static) {
        let _ = self.on_copied.set(Box::new(f));
    }

    /// Records whether `r` has a copy Placement.
    pub fn set_copied(&self, r: &DepRef, copied: bool) {
        let changed = {
            let mut st = lock(&self.state);
            if copied {
                st.copied.insert(r.clone())
            } else {
                st.copied.remove(r)
            }
        };
        if changed && let Some(f) = self.on_copied.get() {
            f(r);
        }
    }

    /// Which path writes `r`'s member copies.
    pub fn writer(&self, r: &DepRef) -> Writer {
        writer(lock(&self.state).copied.contains(r))
    }

    /// Records that `workload` references `refs` and runs in `clusters` (both empty: it is
    /// gone).
    pub fn set_demand(&self, workload: &str, refs: BTreeSet<DepRef>, clusters: BTreeSet<String>) {
        // Placed nowhere, it asks for nothing.
        let refs = if clusters.is_empty() {
            BTreeSet::new()
        } else {
            refs
        };
        let mut changed = Vec::new();
        {
            let mut st = lock(&self.state);
            let before = st.by_workload.remove(workload).unwrap_or_default();
            for r in before.difference(&refs) {
                if let Some(m) = st.demand.get_mut(r) {
                    m.remove(workload);
                    if m.is_empty() {
                        st.demand.remove(r);
                    }
                }
                changed.push(r.clone());
            }
            for r in &refs {
                let m = st.demand.entry(r.clone()).or_default();
                if m.get(workload) != Some(&clusters) {
                    m.insert(workload.to_string(), clusters.clone());
                    changed.push(r.clone());
                }
            }
            if !refs.is_empty() {
                st.by_workload.insert(workload.to_string(), refs);
            }
        }
        if let Some(f) = self.on_demand.get() {
            for r in &changed {
                f(r);
            }
        }
    }

    /// The clusters where workloads referencing `r` run.
    pub fn demanded(&self, r: &DepRef) -> BTreeSet<String> {
        lock(&self.state)
            .demand
            .get(r)
            .map(|m| m.values().flatten().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn dest(clusters: &[&str]) -> Vec<TargetCluster> {
        clusters.iter().map(|c| TargetCluster::new(*c, 0)).collect()
    }

    fn set(clusters: &[&str]) -> BTreeSet<String> {
        clusters.iter().map(|c| c.to_string()).collect()
    }

    fn names(t: &[TargetCluster]) -> Vec<&str> {
        t.iter().map(|t| t.cluster.as_str()).collect()
    }

    #[test]
    fn writers() {
        assert_eq!(writer(true), Writer::Copies);
        assert_eq!(writer(false), Writer::Dependencies);
    }

    #[test]
    fn copy_destinations_table() {
        // (what, placed, demanded, written to)
        type Case = (
            &'static str,
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
        );
        let cases: [Case; 5] = [
            ("the policy's alone", &["a"], &[], &["a"]),
            ("a workload elsewhere", &["a"], &["b"], &["a", "b"]),
            (
                "a workload in the same cluster",
                &["a", "b"],
                &["b"],
                &["a", "b"],
            ),
            (
                "placed order, then the workloads' by name",
                &["c"],
                &["b", "a"],
                &["c", "a", "b"],
            ),
            (
                "placed nowhere: not the copy path's to add to",
                &[],
                &["a"],
                &[],
            ),
        ];
        for (what, placed, demanded, want) in cases {
            let got = copy_destinations(&dest(placed), &set(demanded));
            assert_eq!(names(&got), want, "{what}");
        }
    }

    #[test]
    fn of_copy() {
        let r = DepRef::of_copy("v1", "ConfigMap", Some("ns"), "c").expect("a dependency");
        assert_eq!((r.kind, r.namespace.as_str()), (DepKind::ConfigMap, "ns"));
        assert!(DepRef::of_copy("v1", "Service", Some("ns"), "s").is_none());
        assert!(DepRef::of_copy("example.com/v1", "ConfigMap", Some("ns"), "c").is_none());
        assert!(DepRef::of_copy("v1", "Secret", None, "s").is_none());
    }

    #[test]
    fn shared_state_tells_each_side_of_changes() {
        let w = DepWriters::default();
        let demand_seen = Arc::new(Mutex::new(Vec::new()));
        let copied_seen = Arc::new(Mutex::new(Vec::new()));
        let (d, c) = (demand_seen.clone(), copied_seen.clone());
        w.on_demand_change(move |r| lock(&d).push(r.name.clone()));
        w.on_copied_change(move |r| lock(&c).push(r.name.clone()));
        let cm = |n: &str| DepRef {
            kind: DepKind::ConfigMap,
            namespace: "ns".into(),
            name: n.into(),
        };
        let refs = |ns: &[&str]| ns.iter().map(|n| cm(n)).collect::<BTreeSet<_>>();

        assert_eq!(w.writer(&cm("x")), Writer::Dependencies);
        w.set_copied(&cm("x"), true);
        w.set_copied(&cm("x"), true);
        assert_eq!(w.writer(&cm("x")), Writer::Copies);
        assert_eq!(*lock(&copied_seen), ["x"], "told once");

        w.set_demand("web", refs(&["x", "y"]), set(&["a"]));
        w.set_demand("api", refs(&["x"]), set(&["b"]));
        assert_eq!(w.demanded(&cm("x")), set(&["a", "b"]));
        assert_eq!(w.demanded(&cm("y")), set(&["a"]));
        lock(&demand_seen).clear();
        // Unchanged: nobody is told.
        w.set_demand("web", refs(&["x", "y"]), set(&["a"]));
        assert!(lock(&demand_seen).is_empty());
        // web drops y and moves to c.
        w.set_demand("web", refs(&["x"]), set(&["c"]));
        assert_eq!(w.demanded(&cm("x")), set(&["b", "c"]));
        assert!(w.demanded(&cm("y")).is_empty());
        assert_eq!(*lock(&demand_seen), ["y", "x"]);
        // Gone.
        w.set_demand("web", BTreeSet::new(), BTreeSet::new());
        w.set_demand("api", BTreeSet::new(), BTreeSet::new());
        assert!(w.demanded(&cm("x")).is_empty());
        assert!(lock(&w.state).demand.is_empty() && lock(&w.state).by_workload.is_empty());
    }
}

//! One writer per member object. A ConfigMap, Secret, ServiceAccount or PersistentVolumeClaim
//! may be asked for by several paths: a policy selects it (the copy path, [`crate::copies`],
//! with a copy Placement), the pod template of an interpreted custom object references it
//! (that object is placed by the copy path too), and a built-in workload's pod template
//! references it (the dependency path, [`crate::workload`]). Written by two paths, it would
//! flap: one deletes what the other wants, or they write different overridden versions. The
//! rule, as Karmada's (a member holds the object when its policy or a workload running
//! there needs it, and it is written once):
//!
//! - an object with a copy Placement, or referenced by an interpreted object placed
//!   somewhere, is the copy path's ([`writer`]): it writes the object to its Placement's
//!   clusters, to the clusters holding a copy of an interpreted object that references it,
//!   and to every cluster where a built-in workload referencing it runs
//!   ([`copy_destinations`]), and removes it from the others;
//! - the dependency path leaves such an object alone: it neither writes it nor collects it
//!   as unreferenced, and counts it as in use;
//! - any other object is the dependency path's, as before.
//!
//! [`DepWriters`] is the state both controllers of the process share for this: which
//! dependency objects have a copy Placement and which interpreted objects reference each,
//! where (set by the copy controller), and where the workloads referencing each run (set by
//! the workload controller), with a callback to each side when what the other reads
//! changed.

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

/// The writer of an object that the copy path owns (`copy_owned`: it has a copy Placement,
/// or an interpreted object placed somewhere references it) or not.
pub fn writer(copy_owned: bool) -> Writer {
    if copy_owned {
        Writer::Copies
    } else {
        Writer::Dependencies
    }
}

/// The clusters the copy path writes an object it owns to: its Placement's destinations
/// (`placed`, in their order), then the other clusters holding a copy of an interpreted
/// object that references it (`referenced`, by name), then the other clusters where a
/// built-in workload referencing it runs (`demanded`, by name). When neither the Placement
/// nor an interpreted object asks for it anywhere the copy path does not own it on the
/// workloads' behalf: nothing is added then.
pub fn copy_destinations(
    placed: &[TargetCluster],
    referenced: &BTreeSet<String>,
    demanded: &BTreeSet<String>,
) -> Vec<TargetCluster> {
    let mut out = placed.to_vec();
    for c in referenced {
        if !out.iter().any(|t| &t.cluster == c) {
            out.push(TargetCluster::new(c.as_str(), 0));
        }
    }
    if out.is_empty() {
        return out;
    }
    for c in demanded {
        if !out.iter().any(|t| &t.cluster == c) {
            out.push(TargetCluster::new(c.as_str(), 0));
        }
    }
    out
}

/// A callback told of one dependency object whose state changed.
type Notify = Box<dyn Fn(&DepRef) + Send + Sync>;

/// Who asks for which dependency objects, and where: per object, the clusters of each
/// asking user (a workload, or an interpreted object, by key).
#[derive(Default)]
struct Demand {
    by_ref: HashMap<DepRef, BTreeMap<String, BTreeSet<String>>>,
    /// Per user, the dependency objects it references.
    by_user: HashMap<String, BTreeSet<DepRef>>,
}

impl Demand {
    /// Records that `user` asks for `refs` in `clusters` (nothing when placed nowhere);
    /// answers the objects whose demand changed.
    fn set(
        &mut self,
        user: &str,
        refs: BTreeSet<DepRef>,
        clusters: BTreeSet<String>,
    ) -> Vec<DepRef> {
        // Placed nowhere, it asks for nothing.
        let refs = if clusters.is_empty() {
            BTreeSet::new()
        } else {
            refs
        };
        let mut changed = Vec::new();
        let before = self.by_user.remove(user).unwrap_or_default();
        for r in before.difference(&refs) {
            if let Some(m) = self.by_ref.get_mut(r) {
                m.remove(user);
                if m.is_empty() {
                    self.by_ref.remove(r);
                }
            }
            changed.push(r.clone());
        }
        for r in &refs {
            let m = self.by_ref.entry(r.clone()).or_default();
            if m.get(user) != Some(&clusters) {
                m.insert(user.to_string(), clusters.clone());
                changed.push(r.clone());
            }
        }
        if !refs.is_empty() {
            self.by_user.insert(user.to_string(), refs);
        }
        changed
    }

    /// The clusters where `r` is asked for.
    fn clusters(&self, r: &DepRef) -> BTreeSet<String> {
        self.by_ref
            .get(r)
            .map(|m| m.values().flatten().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether anyone asks for `r`.
    fn contains(&self, r: &DepRef) -> bool {
        self.by_ref.contains_key(r)
    }
}

#[derive(Default)]
struct State {
    /// Dependency objects with a copy Placement.
    copied: HashSet<DepRef>,
    /// Where the built-in workloads referencing each object run.
    workloads: Demand,
    /// Where the interpreted objects referencing each object have copies.
    interpreted: Demand,
}

impl State {
    fn writer(&self, r: &DepRef) -> Writer {
        writer(self.copied.contains(r) || self.interpreted.contains(r))
    }
}

/// What the copy and workload controllers of one process share about dependency objects
/// (see the module documentation).
#[derive(Default)]
pub struct DepWriters {
    state: Mutex<State>,
    /// Told when the copy path should look at an object again: the clusters asking for an
    /// object it owns changed, or an interpreted object's references to it did.
    on_demand: OnceLock<Notify>,
    /// Told when an object's writer changed (the workload controller re-syncs the
    /// workloads referencing it).
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

    fn tell(&self, cb: &OnceLock<Notify>, refs: &[DepRef]) {
        if let Some(f) = cb.get() {
            refs.iter().for_each(f);
        }
    }

    /// Records whether `r` has a copy Placement.
    pub fn set_copied(&self, r: &DepRef, copied: bool) {
        let moved = {
            let mut st = lock(&self.state);
            let before = st.writer(r);
            if copied {
                st.copied.insert(r.clone());
            } else {
                st.copied.remove(r);
            }
            st.writer(r) != before
        };
        if moved {
            self.tell(&self.on_copied, std::slice::from_ref(r));
        }
    }

    /// Which path writes `r`'s member copies.
    pub fn writer(&self, r: &DepRef) -> Writer {
        lock(&self.state).writer(r)
    }

    /// Records that `workload` references `refs` and runs in `clusters` (both empty: it is
    /// gone).
    pub fn set_demand(&self, workload: &str, refs: BTreeSet<DepRef>, clusters: BTreeSet<String>) {
        let changed: Vec<DepRef> = {
            let mut st = lock(&self.state);
            let changed = st.workloads.set(workload, refs, clusters);
            // Only the copy path's objects concern it: the others are the workloads' own.
            changed
                .into_iter()
                .filter(|r| st.writer(r) == Writer::Copies)
                .collect()
        };
        self.tell(&self.on_demand, &changed);
    }

    /// Records that the interpreted object `object` (by key) references `refs` from its pod
    /// template and has copies in `clusters` (both empty: it is gone, or references
    /// nothing).
    pub fn set_referenced(&self, object: &str, refs: BTreeSet<DepRef>, clusters: BTreeSet<String>) {
        let (changed, moved) = {
            let mut st = lock(&self.state);
            let touched: BTreeSet<DepRef> = st
                .interpreted
                .by_user
                .get(object)
                .into_iter()
                .flatten()
                .chain(&refs)
                .cloned()
                .collect();
            let before: Vec<Writer> = touched.iter().map(|r| st.writer(r)).collect();
            let changed = st.interpreted.set(object, refs, clusters);
            let moved: Vec<DepRef> = touched
                .into_iter()
                .zip(before)
                .filter(|(r, w)| st.writer(r) != *w)
                .map(|(r, _)| r)
                .collect();
            (changed, moved)
        };
        // The copy path writes or removes its copies even when the object is no longer its
        // own: what it wrote is its to take back.
        self.tell(&self.on_demand, &changed);
        self.tell(&self.on_copied, &moved);
    }

    /// The clusters where workloads referencing `r` run.
    pub fn demanded(&self, r: &DepRef) -> BTreeSet<String> {
        lock(&self.state).workloads.clusters(r)
    }

    /// The clusters holding a copy of an interpreted object that references `r`.
    pub fn referenced(&self, r: &DepRef) -> BTreeSet<String> {
        lock(&self.state).interpreted.clusters(r)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn dest(clusters: &[&str]) -> Vec<TargetCluster> {
        clusters.iter().map(|c| TargetCluster::new(*c, 0)).collect()
    }

    /// Shared state whose callbacks record the names they are told of: (state, told to
    /// the copy path of demand, told to the workload path of copy ownership).
    fn watched() -> (DepWriters, Seen, Seen) {
        let w = DepWriters::default();
        let demand_seen: Seen = Arc::default();
        let copied_seen: Seen = Arc::default();
        let (d, c) = (demand_seen.clone(), copied_seen.clone());
        w.on_demand_change(move |r| lock(&d).push(r.name.clone()));
        w.on_copied_change(move |r| lock(&c).push(r.name.clone()));
        (w, demand_seen, copied_seen)
    }

    type Seen = Arc<Mutex<Vec<String>>>;

    /// The ConfigMap `name` of namespace `ns`.
    fn cm(name: &str) -> DepRef {
        DepRef {
            kind: DepKind::ConfigMap,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn refs(names: &[&str]) -> BTreeSet<DepRef> {
        names.iter().map(|n| cm(n)).collect()
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
        // (what, placed, referenced by interpreted objects, demanded by workloads, written to)
        type Case = (
            &'static str,
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
        );
        let cases: [Case; 9] = [
            ("the policy's alone", &["a"], &[], &[], &["a"]),
            ("a workload elsewhere", &["a"], &[], &["b"], &["a", "b"]),
            (
                "a workload in the same cluster",
                &["a", "b"],
                &[],
                &["b"],
                &["a", "b"],
            ),
            (
                "placed order, then the workloads' by name",
                &["c"],
                &[],
                &["b", "a"],
                &["c", "a", "b"],
            ),
            (
                "placed nowhere: not the copy path's to add to",
                &[],
                &[],
                &["a"],
                &[],
            ),
            (
                "an interpreted object's clusters alone",
                &[],
                &["b", "a"],
                &[],
                &["a", "b"],
            ),
            (
                "an interpreted object's, then the workloads'",
                &[],
                &["b"],
                &["a", "b"],
                &["b", "a"],
            ),
            (
                "placed, then an interpreted object's, then the workloads'",
                &["c"],
                &["c", "b"],
                &["a"],
                &["c", "b", "a"],
            ),
            ("nobody asks", &[], &[], &[], &[]),
        ];
        for (what, placed, referenced, demanded, want) in cases {
            let got = copy_destinations(&dest(placed), &set(referenced), &set(demanded));
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
        let (w, demand_seen, copied_seen) = watched();

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
        // Only x is the copy path's to look at again.
        assert_eq!(*lock(&demand_seen), ["x"]);
        // Gone.
        w.set_demand("web", BTreeSet::new(), BTreeSet::new());
        w.set_demand("api", BTreeSet::new(), BTreeSet::new());
        assert!(w.demanded(&cm("x")).is_empty());
        let st = lock(&w.state);
        assert!(st.workloads.by_ref.is_empty() && st.workloads.by_user.is_empty());
    }

    #[test]
    fn an_interpreted_reference_makes_an_object_the_copy_paths() {
        let (w, demand_seen, copied_seen) = watched();
        let take = |seen: &Seen| std::mem::take(&mut *lock(seen));

        // A workload's own dependency: the copy path is not told.
        w.set_demand("deployment/api", refs(&["x"]), set(&["c"]));
        assert!(take(&demand_seen).is_empty());
        // A Rollout in a and b names x and y: both become the copy path's.
        w.set_referenced("rollout/web", refs(&["x", "y"]), set(&["a", "b"]));
        assert_eq!(w.writer(&cm("x")), Writer::Copies);
        assert_eq!(w.referenced(&cm("x")), set(&["a", "b"]));
        assert_eq!(w.demanded(&cm("x")), set(&["c"]));
        assert_eq!(take(&demand_seen), ["x", "y"]);
        assert_eq!(take(&copied_seen), ["x", "y"]);
        // Placed nowhere: it asks for nothing, and x and y go back to the workloads' path,
        // the copy path told to take its copies back.
        w.set_referenced("rollout/web", refs(&["x", "y"]), BTreeSet::new());
        assert_eq!(w.writer(&cm("x")), Writer::Dependencies);
        assert!(w.referenced(&cm("y")).is_empty());
        assert_eq!(take(&demand_seen), ["x", "y"]);
        assert_eq!(take(&copied_seen), ["x", "y"]);
        // A copy Placement and a reference: the writer stays the copy path when one goes.
        w.set_copied(&cm("x"), true);
        w.set_referenced("rollout/web", refs(&["x"]), set(&["a"]));
        assert_eq!(take(&copied_seen), ["x"], "only the Placement moved it");
        assert_eq!(take(&demand_seen), ["x"]);
        w.set_referenced("rollout/web", BTreeSet::new(), BTreeSet::new());
        assert_eq!(w.writer(&cm("x")), Writer::Copies);
        assert!(take(&copied_seen).is_empty());
        assert_eq!(take(&demand_seen), ["x"]);
        let st = lock(&w.state);
        assert!(st.interpreted.by_ref.is_empty() && st.interpreted.by_user.is_empty());
    }
}

//! What each member should do for one workload, given the Placement's destinations and
//! which members still hold a copy: hold a share, remove its copy, or wait.
//!
//! A member that left `destClusters` keeps its copy until every destination reports its
//! full share available on the current spec, so moving replicas never drops availability
//! below what the new placement provides (a destination that cannot become ready keeps
//! the old copy running; a member that is down cannot be cleaned until it returns).

use std::collections::{BTreeMap, BTreeSet};

/// One member's part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberPlan {
    /// Hold a copy with this many replicas.
    Hold(i32),
    /// Remove its copy: the replacements are ready.
    Remove,
    /// Keep its copy as it is until the replacements are ready.
    Wait,
}

/// Plans every member that is a destination or holds a copy. `holding` lists members whose
/// copy exists or cannot be ruled out; `dest_ready` says the destinations are all ready.
pub fn plan(
    dest: &[(String, i32)],
    holding: &BTreeSet<String>,
    dest_ready: bool,
) -> BTreeMap<String, MemberPlan> {
    let mut out: BTreeMap<String, MemberPlan> = dest
        .iter()
        .map(|(c, r)| (c.clone(), MemberPlan::Hold(*r)))
        .collect();
    for c in holding {
        out.entry(c.clone()).or_insert(if dest_ready {
            MemberPlan::Remove
        } else {
            MemberPlan::Wait
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: &[(&str, i32)]) -> Vec<(String, i32)> {
        v.iter().map(|(c, r)| (c.to_string(), *r)).collect()
    }
    fn h(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn table() {
        use MemberPlan::*;
        type Case = (
            &'static str,
            Vec<(String, i32)>,
            BTreeSet<String>,
            bool,
            Vec<(&'static str, MemberPlan)>,
        );
        let cases: Vec<Case> = vec![
            (
                "fresh",
                d(&[("a", 3), ("b", 7)]),
                h(&[]),
                false,
                vec![("a", Hold(3)), ("b", Hold(7))],
            ),
            (
                "rescaled",
                d(&[("a", 7), ("b", 13)]),
                h(&["a", "b"]),
                true,
                vec![("a", Hold(7)), ("b", Hold(13))],
            ),
            (
                "moved, not ready yet",
                d(&[("b", 10)]),
                h(&["a", "b"]),
                false,
                vec![("a", Wait), ("b", Hold(10))],
            ),
            (
                "moved and ready",
                d(&[("b", 10)]),
                h(&["a", "b"]),
                true,
                vec![("a", Remove), ("b", Hold(10))],
            ),
            ("unscheduled", d(&[]), h(&["a"]), true, vec![("a", Remove)]),
            ("nothing", d(&[]), h(&[]), true, vec![]),
        ];
        for (name, dest, holding, ready, want) in cases {
            let got = plan(&dest, &holding, ready);
            let got: Vec<(&str, MemberPlan)> = got.iter().map(|(c, p)| (c.as_str(), *p)).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}

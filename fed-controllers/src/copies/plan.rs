//! Which step each member takes for one federated object: what it should hold (a copy, or
//! nothing), compared with what its cache shows, and when the federated object's cleanup
//! finalizer may be added or removed. Pure: the caller reads the caches and applies.

use serde_json::Value;

use fed_api::placement::TargetCluster;

use super::drift::{in_sync, merged};
use super::member_copy::{member_copy, with_share};
use crate::workload::ownership::{Ownership, check};
use fed_api::interpreter::ResourceInterpreterSpec;

/// What member `cluster` should hold of the federated object `fed` (as cached, `None` when
/// gone) placed on `dest`: its copy (with its share of the replicas where the kind's
/// `interpreter` says they are, when the placement divides them), or nothing when the
/// object is gone or being deleted, has no uid yet, or the cluster is not one of its
/// destinations.
pub fn wanted(
    fed: Option<&Value>,
    dest: &[TargetCluster],
    cluster: &str,
    interpreter: Option<&ResourceInterpreterSpec>,
) -> Option<Value> {
    let fed = fed?;
    let meta = &fed["metadata"];
    if !meta["deletionTimestamp"].is_null() {
        return None;
    }
    let uid = meta["uid"].as_str().filter(|u| !u.is_empty())?;
    let target = dest.iter().find(|t| t.cluster == cluster)?;
    Some(member_object(fed, uid, target, interpreter))
}

/// The object destination `target` of `fed` (Meridian's copy of the object with `uid`)
/// holds before override policies: the copy, with the destination's share where the
/// kind's `interpreter` says the replicas are. `fedctl plan` shows the same.
pub fn member_object(
    fed: &Value,
    uid: &str,
    target: &TargetCluster,
    interpreter: Option<&ResourceInterpreterSpec>,
) -> Value {
    with_share(member_copy(fed, uid), interpreter, target.replicas)
}

/// One member's step for one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Create this copy (its namespace first).
    Create(Value),
    /// Write this over the member's copy (it drifted or belongs to an older incarnation).
    Update(Value),
    /// Delete Meridian's copy.
    Delete,
    /// Nothing to do.
    Leave,
    /// Someone else's object holds the name: never overwritten.
    Refuse,
}

/// The step that makes `actual` (the member's cached object under the name, if any) what
/// `want` says, for the federated object with `uid`.
pub fn step(want: Option<&Value>, actual: Option<&Value>, uid: &str) -> Step {
    match (want, check(actual)) {
        (Some(w), Ownership::Absent) => Step::Create(w.clone()),
        (Some(_), Ownership::Foreign) => Step::Refuse,
        (Some(w), Ownership::Managed { owner_uid }) => {
            let actual = actual.expect("managed means present");
            // A copy of an earlier object of the same name is Meridian's to take over.
            if owner_uid == uid && in_sync(actual, w) {
                Step::Leave
            } else {
                Step::Update(merged(actual, w))
            }
        }
        (None, Ownership::Managed { owner_uid }) if owner_uid == uid => Step::Delete,
        (None, _) => Step::Leave,
    }
}

/// What to do with the federated object's cleanup finalizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finalizer {
    /// Add it before the first copy is pushed, so a deletion waits for the cleanup.
    Add,
    /// Remove it: no member holds a copy any more.
    Remove,
    /// Keep things as they are.
    Leave,
}

/// The finalizer step for an object that `has` the finalizer or not, is `deleting` or not,
/// is `placed` on some cluster or not, with copies still `held` by members or not.
pub fn finalizer(has: bool, deleting: bool, placed: bool, held: bool) -> Finalizer {
    match (has, deleting, placed, held) {
        (false, false, true, _) => Finalizer::Add,
        // Deleted, or no longer governed: once the copies are gone nothing is left to clean.
        (true, true, _, false) | (true, false, false, false) => Finalizer::Remove,
        _ => Finalizer::Leave,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};

    fn fed() -> Value {
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "3"},
               "imagePullSecrets": [{"name": "registry"}]})
    }

    fn dest(clusters: &[&str]) -> Vec<TargetCluster> {
        clusters.iter().map(|c| TargetCluster::new(*c, 0)).collect()
    }

    fn copy_of(uid: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "web", "namespace": "shop", "uid": "m", "resourceVersion": "9",
                            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, OWNER_UID_LABEL: uid}},
               "imagePullSecrets": [{"name": "registry"}],
               "secrets": [{"name": "web-token-x"}]})
    }

    #[test]
    fn wanted_table() {
        let mut deleting = fed();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let mut no_uid = fed();
        no_uid["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("uid");
        let two = dest(&["a", "b"]);
        let cases = [
            ("placed here", Some(fed()), "a", true),
            ("placed elsewhere", Some(fed()), "c", false),
            ("gone", None, "a", false),
            ("being deleted", Some(deleting), "a", false),
            ("no uid yet", Some(no_uid), "a", false),
        ];
        for (what, obj, cluster, want) in cases {
            let got = wanted(obj.as_ref(), &two, cluster, None);
            assert_eq!(got.is_some(), want, "{what}");
            if let Some(copy) = got {
                assert_eq!(copy["metadata"]["labels"][OWNER_UID_LABEL], "u1");
                assert!(copy["metadata"].get("resourceVersion").is_none());
            }
        }
    }

    #[test]
    fn a_divided_object_gives_each_destination_its_share() {
        let rollouts: ResourceInterpreterSpec = serde_json::from_value(json!({
            "target": {"apiVersion": "example.com/v1", "kind": "Rollout"},
            "replicas": {"path": ".spec.replicas"}
        }))
        .expect("interpreter");
        let fed = json!({"apiVersion": "example.com/v1", "kind": "Rollout",
                         "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
                         "spec": {"replicas": 9}});
        let divided = vec![TargetCluster::new("a", 3), TargetCluster::new("b", 6)];
        let replicas = |cluster| {
            wanted(Some(&fed), &divided, cluster, Some(&rollouts))
                .map(|c| c["spec"]["replicas"].clone())
        };
        assert_eq!(replicas("a"), Some(json!(3)));
        assert_eq!(replicas("b"), Some(json!(6)));
        // A cluster without a share is no destination: no copy there.
        assert_eq!(replicas("c"), None);
        // Duplicated: every destination runs the whole count.
        let copies = dest(&["a", "b"]);
        let whole = wanted(Some(&fed), &copies, "b", Some(&rollouts)).expect("wanted");
        assert_eq!(whole["spec"]["replicas"], 9);
        // A member whose copy still has the old count has drifted.
        let want = wanted(Some(&fed), &divided, "a", Some(&rollouts)).expect("wanted");
        let mut held = want.clone();
        held["metadata"]["resourceVersion"] = json!("4");
        assert_eq!(step(Some(&want), Some(&held), "u1"), Step::Leave);
        held["spec"]["replicas"] = json!(2);
        assert!(
            matches!(step(Some(&want), Some(&held), "u1"), Step::Update(u) if u["spec"]["replicas"] == 3)
        );
    }

    #[test]
    fn step_table() {
        let want = wanted(Some(&fed()), &dest(&["a"]), "a", None).expect("wanted");
        let mut drifted = copy_of("u1");
        drifted["imagePullSecrets"] = json!([]);
        let foreign =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "web"}});
        // (what, want, actual, expected step kind)
        let cases: Vec<(&str, Option<&Value>, Option<Value>, &str)> = vec![
            ("absent: create", Some(&want), None, "create"),
            (
                "in sync (member's token secrets are no drift)",
                Some(&want),
                Some(copy_of("u1")),
                "leave",
            ),
            ("drifted: update", Some(&want), Some(drifted), "update"),
            (
                "older incarnation: take over",
                Some(&want),
                Some(copy_of("u0")),
                "update",
            ),
            (
                "someone else's: refuse",
                Some(&want),
                Some(foreign.clone()),
                "refuse",
            ),
            ("unwanted copy: delete", None, Some(copy_of("u1")), "delete"),
            (
                "unwanted, another object's copy: leave",
                None,
                Some(copy_of("u0")),
                "leave",
            ),
            (
                "unwanted, someone else's: leave",
                None,
                Some(foreign),
                "leave",
            ),
            ("unwanted and absent", None, None, "leave"),
        ];
        for (what, w, actual, expect) in cases {
            let got = step(w, actual.as_ref(), "u1");
            let kind = match &got {
                Step::Create(_) => "create",
                Step::Update(_) => "update",
                Step::Delete => "delete",
                Step::Leave => "leave",
                Step::Refuse => "refuse",
            };
            assert_eq!(kind, expect, "{what}");
            if let Step::Update(v) | Step::Create(v) = &got {
                assert!(in_sync(v, &want), "{what}: the write is in sync");
            }
        }
    }

    #[test]
    fn finalizer_table() {
        use Finalizer::*;
        // (has, deleting, placed, held) -> step
        let cases = [
            ((false, false, true, false), Add),
            ((false, false, false, false), Leave),
            ((true, false, true, true), Leave),
            ((true, true, true, true), Leave),
            ((true, true, true, false), Remove),
            ((true, true, false, false), Remove),
            ((true, false, false, true), Leave),
            ((true, false, false, false), Remove),
            ((false, true, true, true), Leave),
        ];
        for ((has, deleting, placed, held), want) in cases {
            assert_eq!(
                finalizer(has, deleting, placed, held),
                want,
                "{has} {deleting} {placed} {held}"
            );
        }
    }
}

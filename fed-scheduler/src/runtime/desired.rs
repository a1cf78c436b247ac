//! What a workload's Placement should say after a decision, and which writes get it there
//! from what the cache holds (pure: no client, no clock).
//!
//! The scheduler owns `spec` and the `Scheduled` condition plus `status.unschedulable`;
//! other conditions and `status.clusters` belong to the workload controller and are kept
//! as they are. Nothing is written when nothing changed.

use fed_api::common::Condition;
use fed_api::governance::PolicyChoice;
use fed_api::placement::{ClusterReason, Unschedulable, WorkloadReference};
use fed_api::{Placement, PlacementSpec, PlacementStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::explain::Outcome;
use crate::types::{TargetCluster, UnschedulableStatus};

use super::key::WorkloadKey;

/// The condition type the scheduler owns.
pub const SCHEDULED: &str = "Scheduled";

/// The scheduler's part of a Placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// Controller ownerReference to the workload.
    pub owner: OwnerReference,
    /// `spec`.
    pub spec: PlacementSpec,
    /// The `Scheduled` condition (without times).
    pub outcome: Outcome,
    /// `status.unschedulable` (`None` when everything fits).
    pub unschedulable: Option<Unschedulable>,
    /// `status.policy`: the governing policy and the ones it overruled.
    pub policy: Option<PolicyChoice>,
}

/// The writes that bring the cached Placement to [`Desired`].
#[derive(Debug, Clone)]
pub enum Plan {
    /// No Placement yet: create it, then write its status.
    Create(Box<Placement>),
    /// Update the existing one.
    Update {
        /// Merge patch for `metadata.ownerReferences`, `metadata.labels` and `spec`, when
        /// they differ.
        spec_patch: Option<serde_json::Value>,
        /// Whether `status` must be written.
        status: bool,
    },
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// `destClusters` in their one order (by cluster), whichever order the decision or the
/// stored Placement listed them in, so equal decisions compare and serialize equal.
pub fn dest(targets: &[TargetCluster]) -> Vec<TargetCluster> {
    let mut v = targets.to_vec();
    v.sort();
    v
}

/// Builds the desired state for a workload of `key` with `uid`.
pub fn desired(
    key: &WorkloadKey,
    uid: &str,
    dest_clusters: &[TargetCluster],
    outcome: Outcome,
    unschedulable: &UnschedulableStatus,
    policy: Option<PolicyChoice>,
) -> Desired {
    let owner = OwnerReference {
        api_version: key.kind.api_version().into(),
        kind: key.kind.as_str().into(),
        name: key.name.clone(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let spec = PlacementSpec {
        resource: WorkloadReference {
            api_version: key.kind.api_version().into(),
            kind: key.kind.as_str().into(),
            name: key.name.clone(),
            uid: Some(uid.to_owned()),
        },
        dest_clusters: dest(dest_clusters),
    };
    let unschedulable = self::unschedulable(unschedulable);
    Desired {
        owner,
        spec,
        outcome,
        unschedulable,
        policy,
    }
}

/// `status.unschedulable` for the core's account of unplaced replicas (`None` when every
/// replica was placed).
pub fn unschedulable(u: &UnschedulableStatus) -> Option<Unschedulable> {
    (u.replicas > 0).then(|| Unschedulable {
        replicas: to_i32(u.replicas),
        reasons: u
            .reasons
            .iter()
            .map(|c| ClusterReason {
                cluster: c.cluster.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect(),
    })
}

/// The ownerReferences `current` should carry: ours as the only controller, others kept.
fn owners(current: &[OwnerReference], ours: &OwnerReference) -> Vec<OwnerReference> {
    let mut v: Vec<OwnerReference> = current
        .iter()
        .filter(|o| o.controller != Some(true) && o.uid != ours.uid)
        .cloned()
        .collect();
    v.push(ours.clone());
    v
}

/// The status `current` should have (its other conditions and per-cluster state kept),
/// or `None` when it already has it. `now` stamps a changed condition.
pub fn status(
    current: Option<&PlacementStatus>,
    want: &Desired,
    now: &str,
) -> Option<PlacementStatus> {
    let mut next = current.cloned().unwrap_or_default();
    let status = if want.outcome.scheduled {
        "True"
    } else {
        "False"
    };
    let old = next.conditions.iter().find(|c| c.type_ == SCHEDULED);
    let same = old.is_some_and(|c| {
        c.status == status && c.reason == want.outcome.reason && c.message == want.outcome.message
    });
    if same && next.unschedulable == want.unschedulable && next.policy == want.policy {
        return None;
    }
    if !same {
        // The transition time moves only when the status flips, as in Kubernetes.
        let transition = match old {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Some(now.to_owned()),
        };
        let cond = Condition {
            type_: SCHEDULED.into(),
            status: status.into(),
            reason: want.outcome.reason.into(),
            message: want.outcome.message.clone(),
            last_probe_time: None,
            last_transition_time: transition,
        };
        match next.conditions.iter_mut().find(|c| c.type_ == SCHEDULED) {
            Some(c) => *c = cond,
            None => next.conditions.insert(0, cond),
        }
    }
    next.unschedulable = want.unschedulable.clone();
    next.policy = want.policy.clone();
    Some(next)
}

/// Drops what the scheduler never reads of a Placement it keeps: the per-cluster status
/// entries (the workload controller's, 100 of them when Duplicated over 100 clusters) and
/// managedFields. Its status writes patch only its own fields, so nothing dropped here is
/// written back.
pub fn slim(p: &mut Placement) {
    p.metadata.managed_fields = None;
    if let Some(s) = p.status.as_mut() {
        s.clusters = Vec::new();
    }
}

/// The writes from `current` (the cached Placement, if any) to `want`.
pub fn plan(key: &WorkloadKey, current: Option<&Placement>, want: &Desired, now: &str) -> Plan {
    plan_at(&key.namespace, &key.placement_name(), current, want, now)
}

/// [`plan`] for the Placement `namespace/name` (of a workload or of a copied object).
pub fn plan_at(
    namespace: &str,
    name: &str,
    current: Option<&Placement>,
    want: &Desired,
    now: &str,
) -> Plan {
    let resource = &want.spec.resource;
    let labels = fed_api::copies::placement_labels(&resource.api_version, &resource.kind);
    let Some(cur) = current else {
        let mut p = Placement::new(name, want.spec.clone());
        p.metadata = ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: (!labels.is_empty()).then_some(labels),
            owner_references: Some(vec![want.owner.clone()]),
            ..Default::default()
        };
        return Plan::Create(Box::new(p));
    };
    let cur_owners = cur.metadata.owner_references.as_deref().unwrap_or_default();
    let owned = cur_owners
        .iter()
        .filter(|o| o.controller == Some(true))
        .eq(std::iter::once(&want.owner));
    let cur_labels = cur.metadata.labels.as_ref();
    let missing: serde_json::Map<String, serde_json::Value> = labels
        .into_iter()
        .filter(|(k, v)| cur_labels.and_then(|l| l.get(k)) != Some(v))
        .map(|(k, v)| (k, v.into()))
        .collect();
    let mut meta = serde_json::Map::new();
    if !owned {
        meta.insert(
            "ownerReferences".into(),
            serde_json::to_value(owners(cur_owners, &want.owner)).unwrap_or_default(),
        );
    }
    if !missing.is_empty() {
        // A merge patch of `labels` adds these and keeps the others.
        meta.insert("labels".into(), missing.into());
    }
    let mut patch = serde_json::Map::new();
    if !meta.is_empty() {
        patch.insert("metadata".into(), meta.into());
    }
    if cur.spec != want.spec {
        patch.insert(
            "spec".into(),
            serde_json::to_value(&want.spec).unwrap_or_default(),
        );
    }
    Plan::Update {
        spec_patch: (!patch.is_empty()).then_some(serde_json::Value::Object(patch)),
        status: status(cur.status.as_ref(), want, now).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::key::WorkloadKind;
    use crate::types::UnschedulableCause;

    const NOW: &str = "2025-06-01T00:00:00Z";
    const LATER: &str = "2025-06-01T00:05:00Z";

    fn key() -> WorkloadKey {
        WorkloadKey::new(WorkloadKind::Deployment, "shop", "web")
    }

    fn want(dest: &[(&str, u32)], scheduled: bool, unplaced: u32) -> Desired {
        let targets: Vec<TargetCluster> = dest
            .iter()
            .map(|&(c, r)| TargetCluster::new(c, r))
            .collect();
        let unschedulable = UnschedulableStatus {
            replicas: unplaced,
            reasons: (unplaced > 0)
                .then(|| UnschedulableCause {
                    cluster: "c".into(),
                    reason: "InsufficientCapacity".into(),
                    message: "full".into(),
                })
                .into_iter()
                .collect(),
        };
        let outcome = Outcome {
            scheduled,
            reason: if scheduled {
                "Scheduled"
            } else {
                "Unschedulable"
            },
            message: format!("{dest:?}"),
        };
        desired(&key(), "uid-1", &targets, outcome, &unschedulable, None)
    }

    /// The Placement the API would hold after applying `plan` for `d`.
    fn applied(d: &Desired, now: &str) -> Placement {
        let Plan::Create(mut p) = plan(&key(), None, d, now) else {
            panic!("expected create");
        };
        p.status = status(None, d, now);
        *p
    }

    #[test]
    fn creates_with_owner_and_resource() {
        let d = want(&[("b", 7), ("a", 3)], true, 0);
        let p = applied(&d, NOW);
        assert_eq!(p.metadata.name.as_deref(), Some("deployment-web"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("shop"));
        let owner = &p.metadata.owner_references.as_ref().expect("owners")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("Deployment", "uid-1")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert_eq!(p.spec.resource.uid.as_deref(), Some("uid-1"));
        let names: Vec<&str> = p
            .spec
            .dest_clusters
            .iter()
            .map(|t| t.cluster.as_str())
            .collect();
        assert_eq!(names, ["a", "b"], "sorted");
        let cond = &p.status.as_ref().expect("status").conditions[0];
        assert_eq!(
            (cond.type_.as_str(), cond.status.as_str()),
            ("Scheduled", "True")
        );
        assert_eq!(cond.last_transition_time.as_deref(), Some(NOW));
    }

    #[test]
    fn writes_only_what_changed() {
        let d = want(&[("a", 3), ("b", 7)], true, 0);
        let cur = applied(&d, NOW);
        assert!(
            matches!(
                plan(&key(), Some(&cur), &d, LATER),
                Plan::Update {
                    spec_patch: None,
                    status: false
                }
            ),
            "unchanged: no writes"
        );

        let moved = want(&[("a", 10)], true, 0);
        let Plan::Update {
            spec_patch: Some(patch),
            status: true,
        } = plan(&key(), Some(&cur), &moved, LATER)
        else {
            panic!("expected a spec patch and a status write");
        };
        assert_eq!(
            patch["spec"]["destClusters"],
            serde_json::json!([{"cluster": "a", "replicas": 10}])
        );
        assert!(patch.get("metadata").is_none(), "owner already right");

        // A different owner (a recreated workload) is replaced; non-controller owners stay.
        let mut stale = cur.clone();
        let mut other = d.owner.clone();
        other.uid = "uid-0".into();
        let mut extra = d.owner.clone();
        extra.uid = "uid-x".into();
        extra.controller = None;
        stale.metadata.owner_references = Some(vec![other, extra]);
        let Plan::Update {
            spec_patch: Some(patch),
            status: false,
        } = plan(&key(), Some(&stale), &d, LATER)
        else {
            panic!("expected an owner patch");
        };
        let uids: Vec<&str> = patch["metadata"]["ownerReferences"]
            .as_array()
            .expect("owners")
            .iter()
            .filter_map(|o| o["uid"].as_str())
            .collect();
        assert_eq!(uids, ["uid-x", "uid-1"]);
    }

    #[test]
    fn copied_objects_placements_carry_the_copy_label() {
        use fed_api::copies::{COPY_PLACEMENT_LABEL, COPY_PLACEMENT_VALUE};
        let d = want(&[("a", 3)], true, 0);
        assert_eq!(
            applied(&d, NOW).metadata.labels,
            None,
            "a workload's has none"
        );
        let mut copy = d.clone();
        copy.spec.resource.api_version = "v1".into();
        copy.spec.resource.kind = "ServiceAccount".into();
        let Plan::Create(p) = plan_at("shop", "serviceaccount-web", None, &copy, NOW) else {
            panic!("expected create");
        };
        let label = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(COPY_PLACEMENT_LABEL));
        assert_eq!(label.map(String::as_str), Some(COPY_PLACEMENT_VALUE));
        let mut cur = *p;
        cur.status = status(None, &copy, NOW);
        // One written before the label existed gets it, the other labels kept.
        let mut old = cur.clone();
        old.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
        let Plan::Update {
            spec_patch: Some(patch),
            status: false,
        } = plan_at("shop", "serviceaccount-web", Some(&old), &copy, NOW)
        else {
            panic!("expected a label patch");
        };
        assert_eq!(
            patch,
            serde_json::json!({"metadata": {"labels": {COPY_PLACEMENT_LABEL: COPY_PLACEMENT_VALUE}}})
        );
        assert!(matches!(
            plan_at("shop", "serviceaccount-web", Some(&cur), &copy, NOW),
            Plan::Update {
                spec_patch: None,
                status: false
            }
        ));
    }

    #[test]
    fn status_keeps_foreign_parts_and_transition_times() {
        let d = want(&[("a", 3)], true, 0);
        let mut cur = applied(&d, NOW);
        let st = cur.status.as_mut().expect("status");
        st.conditions.push(Condition {
            type_: "Propagated".into(),
            status: "True".into(),
            reason: "InSync".into(),
            ..Default::default()
        });
        st.clusters.push(fed_api::placement::ClusterWorkloadStatus {
            cluster: "a".into(),
            replicas: 3,
            ..Default::default()
        });

        // Same status, new message: transition time kept.
        let d2 = want(&[("a", 2), ("b", 1)], true, 0);
        let next = status(cur.status.as_ref(), &d2, LATER).expect("changed");
        assert_eq!(next.conditions.len(), 2);
        assert_eq!(
            next.conditions[0].last_transition_time.as_deref(),
            Some(NOW)
        );
        assert_eq!(next.conditions[1].type_, "Propagated");
        assert_eq!(next.clusters.len(), 1);

        // Flipping to False moves it and records the shortfall.
        let d3 = want(&[("a", 2)], false, 1);
        let next = status(cur.status.as_ref(), &d3, LATER).expect("changed");
        assert_eq!(next.conditions[0].status, "False");
        assert_eq!(next.conditions[0].reason, "Unschedulable");
        assert_eq!(
            next.conditions[0].last_transition_time.as_deref(),
            Some(LATER)
        );
        let u = next.unschedulable.as_ref().expect("unschedulable");
        assert_eq!((u.replicas, u.reasons[0].cluster.as_str()), (1, "c"));
        // Fitting again clears it.
        let back = status(Some(&next), &d, LATER).expect("changed");
        assert!(back.unschedulable.is_none());
    }

    #[test]
    fn dest_is_ordered_by_cluster() {
        let d = dest(&[TargetCluster::new("b", 0), TargetCluster::new("a", 2)]);
        assert_eq!(
            d,
            vec![TargetCluster::new("a", 2), TargetCluster::new("b", 0)]
        );
    }

    #[test]
    fn a_new_policy_choice_is_a_status_write() {
        use fed_api::governance::{PolicyKind, PolicyRef, Specificity};
        let d = want(&[("a", 3)], true, 0);
        let p = applied(&d, NOW);
        assert!(status(p.status.as_ref(), &d, LATER).is_none());
        let mut chosen = d.clone();
        chosen.policy = Some(PolicyChoice {
            governing: PolicyRef {
                kind: PolicyKind::PropagationPolicy,
                namespace: Some("shop".into()),
                name: "web".into(),
                priority: 0,
                matched_by: Specificity::Name,
            },
            overruled: Vec::new(),
        });
        let next = status(p.status.as_ref(), &chosen, LATER).expect("changed");
        assert_eq!(next.policy, chosen.policy);
        // The condition did not change, so its transition time stays.
        assert_eq!(
            next.conditions[0].last_transition_time.as_deref(),
            Some(NOW)
        );
        assert!(status(Some(&next), &chosen, LATER).is_none());
    }
}

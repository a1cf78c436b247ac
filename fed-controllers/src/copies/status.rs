//! What the members' copies of a copied object report, combined: the federated object's own
//! `status` for the built-in kinds that have one worth reading on the federation
//! (DaemonSet, CronJob, Ingress, HorizontalPodAutoscaler, PodDisruptionBudget) and for
//! custom kinds a `ResourceInterpreter` describes, and what each member's copy says on its
//! Placement entry (its counts, its health, its own conditions). Pure: the copy controller
//! reads the member caches and writes the result.
//!
//! Counts are summed over the destinations, so `kubectl get ds` on the federation shows the
//! fleet. `observedGeneration` moves to the federated object's generation only once every
//! destination holds the current copy and has observed it, so `kubectl rollout status`
//! never finishes on a sum that still lacks a member.

use fed_api::ResourceInterpreterSpec;
use fed_api::common::Condition;
use fed_api::interpreter::AggregationOp;
use fed_api::placement::ClusterWorkloadStatus;
use serde_json::{Map, Value, json};

/// How a kind's member statuses combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusKind {
    /// `apps/v1` DaemonSet: the scheduling and readiness counts summed.
    DaemonSet,
    /// `batch/v1` CronJob: the latest schedule and success times.
    CronJob,
    /// `networking.k8s.io/v1` Ingress: every member's load-balancer addresses.
    Ingress,
    /// `autoscaling/v2` HorizontalPodAutoscaler: current and desired replicas summed.
    Autoscaler,
    /// `policy/v1` PodDisruptionBudget: healthy, expected and allowed counts summed.
    DisruptionBudget,
}

/// The DaemonSet status counts, all summed.
const DAEMONSET_COUNTS: [&str; 7] = [
    "currentNumberScheduled",
    "desiredNumberScheduled",
    "numberAvailable",
    "numberMisscheduled",
    "numberReady",
    "numberUnavailable",
    "updatedNumberScheduled",
];
/// The HorizontalPodAutoscaler status counts, summed.
const AUTOSCALER_COUNTS: [&str; 2] = ["currentReplicas", "desiredReplicas"];
/// The PodDisruptionBudget status counts, summed.
const BUDGET_COUNTS: [&str; 4] = [
    "currentHealthy",
    "desiredHealthy",
    "disruptionsAllowed",
    "expectedPods",
];
/// How many of a member copy's conditions its Placement entry shows, so a copy with a
/// runaway condition list cannot grow the Placement without bound.
const MAX_MEMBER_CONDITIONS: usize = 8;

impl StatusKind {
    /// The combination for objects of `kind` in `api_version`; `None` for kinds whose
    /// federated object keeps the status it has (a ConfigMap has none, a Role none either).
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        Some(match (group, kind) {
            ("apps", "DaemonSet") => Self::DaemonSet,
            ("batch", "CronJob") => Self::CronJob,
            ("networking.k8s.io", "Ingress") => Self::Ingress,
            ("autoscaling", "HorizontalPodAutoscaler") => Self::Autoscaler,
            ("policy", "PodDisruptionBudget") => Self::DisruptionBudget,
            _ => return None,
        })
    }

    /// Whether the kind's status carries `observedGeneration`.
    fn has_observed_generation(self) -> bool {
        matches!(
            self,
            Self::DaemonSet | Self::Autoscaler | Self::DisruptionBudget
        )
    }
}

/// How a kind's member statuses combine: a built-in rule, or a custom kind's interpreter.
#[derive(Clone, Debug, PartialEq)]
pub enum Rule {
    /// A built-in kind.
    BuiltIn(StatusKind),
    /// A custom kind, as its `ResourceInterpreter` says.
    Interpreted(ResourceInterpreterSpec),
}

/// One destination's copy as its member's cache shows it.
#[derive(Clone, Copy, Debug)]
pub struct MemberCopy<'a> {
    /// The member's object, when it holds one.
    pub object: Option<&'a Value>,
    /// Whether the member holds the current copy: nothing had to be written there in this
    /// pass, so its status is about what the federation asks now.
    pub current: bool,
}

impl MemberCopy<'_> {
    /// Whether the member has observed its copy's latest generation.
    fn observed(&self) -> bool {
        let Some(o) = self.object else { return false };
        let generation = o["metadata"]["generation"].as_i64().unwrap_or(0);
        let observed = o["status"]["observedGeneration"].as_i64();
        self.current && observed.is_some_and(|g| g >= generation)
    }
}

fn int(v: &Value, field: &str) -> i64 {
    v[field].as_i64().unwrap_or(0)
}

/// The latest of the members' times at `field` of their status (Kubernetes writes them as
/// RFC 3339 in UTC to the second, so they order as strings).
fn latest(members: &[MemberCopy], field: &str) -> Option<Value> {
    members
        .iter()
        .filter_map(|m| m.object?["status"][field].as_str())
        .max()
        .map(|t| Value::String(t.to_owned()))
}

/// The federated object's `status` as `rule` combines it from its destinations' copies, or
/// `None` when the rule combines nothing (an interpreter without `statusAggregation`).
/// `fed` is the federated object as cached (its generation and the status it carries now).
pub fn combined(rule: &Rule, fed: &Value, members: &[MemberCopy]) -> Option<Value> {
    match rule {
        Rule::BuiltIn(kind) => Some(federated(*kind, fed, members)),
        Rule::Interpreted(spec) => interpreted(spec, fed, members),
    }
}

/// The federated generation once every destination observed its copy, else the one the
/// federated status already says was observed.
fn observed_generation(fed: &Value, members: &[MemberCopy]) -> Option<i64> {
    if !members.is_empty() && members.iter().all(MemberCopy::observed) {
        fed["metadata"]["generation"].as_i64()
    } else {
        fed["status"]["observedGeneration"].as_i64()
    }
}

/// A custom kind's status: the federated object's current status with each aggregated
/// field set (the sum, least or largest of the members that report it; a field no member
/// reports is left as it is). `.status.observedGeneration` follows the federated
/// generation as for built-in kinds: the members' own generations mean nothing here.
fn interpreted(
    spec: &ResourceInterpreterSpec,
    fed: &Value,
    members: &[MemberCopy],
) -> Option<Value> {
    if spec.status_aggregation.is_empty() {
        return None;
    }
    let mut status = match &fed["status"] {
        Value::Object(m) => Value::Object(m.clone()),
        _ => Value::Object(Map::new()),
    };
    for a in &spec.status_aggregation {
        let Some(rest) = a.path.strip_prefix(".status.") else {
            continue;
        };
        let segments: Vec<&str> = rest.split('.').collect();
        let value = if a.path == ".status.observedGeneration" {
            observed_generation(fed, members).map(Value::from)
        } else {
            let pointer: String = segments.iter().map(|s| format!("/{s}")).collect();
            let values = members
                .iter()
                .filter_map(|m| m.object?["status"].pointer(&pointer)?.as_i64());
            match a.op {
                AggregationOp::Sum => {
                    let v: Vec<i64> = values.collect();
                    (!v.is_empty()).then(|| Value::from(v.iter().sum::<i64>()))
                }
                AggregationOp::Min => values.min().map(Value::from),
                AggregationOp::Max => values.max().map(Value::from),
            }
        };
        if let Some(v) = value {
            set_path(&mut status, &segments, v);
        }
    }
    Some(status)
}

/// Sets `value` at `segments` below `target`, making objects on the way (a non-object on
/// the way is replaced: the interpreter's path says what the field is).
fn set_path(target: &mut Value, segments: &[&str], value: Value) {
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut at = target;
    for s in parents {
        if !at[*s].is_object() {
            at[*s] = Value::Object(Map::new());
        }
        at = &mut at[*s];
    }
    at[*last] = value;
}

/// The federated object's `status` combined from its destinations' copies of a built-in
/// kind. `fed` is the federated object as cached (its generation and the status it
/// carries now).
pub fn federated(kind: StatusKind, fed: &Value, members: &[MemberCopy]) -> Value {
    let statuses: Vec<&Value> = members
        .iter()
        .filter_map(|m| m.object.map(|o| &o["status"]))
        .collect();
    let sum = |fields: &[&str]| -> Map<String, Value> {
        fields
            .iter()
            .map(|f| {
                let total: i64 = statuses.iter().map(|s| int(s, f)).sum();
                ((*f).to_owned(), json!(total))
            })
            .collect()
    };
    let mut status = match kind {
        StatusKind::DaemonSet => sum(&DAEMONSET_COUNTS),
        StatusKind::Autoscaler => {
            let mut s = sum(&AUTOSCALER_COUNTS);
            if let Some(t) = latest(members, "lastScaleTime") {
                s.insert("lastScaleTime".into(), t);
            }
            s
        }
        StatusKind::DisruptionBudget => sum(&BUDGET_COUNTS),
        StatusKind::CronJob => {
            let mut s = Map::new();
            for field in ["lastScheduleTime", "lastSuccessfulTime"] {
                if let Some(t) = latest(members, field) {
                    s.insert(field.into(), t);
                }
            }
            s
        }
        StatusKind::Ingress => {
            let mut ingress: Vec<Value> = Vec::new();
            for s in &statuses {
                for entry in s["loadBalancer"]["ingress"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if !ingress.contains(entry) {
                        ingress.push(entry.clone());
                    }
                }
            }
            let mut lb = Map::new();
            if !ingress.is_empty() {
                lb.insert("ingress".into(), Value::Array(ingress));
            }
            Map::from_iter([("loadBalancer".to_owned(), Value::Object(lb))])
        }
    };
    if kind.has_observed_generation()
        && let Some(g) = observed_generation(fed, members)
    {
        status.insert("observedGeneration".into(), json!(g));
    }
    Value::Object(status)
}

/// Fills `entry` (a destination's Placement entry) with what the member's copy reports:
/// the kind's counts (or, for an interpreted kind, its health) and the copy's own
/// conditions.
pub fn member_entry(rule: Option<&Rule>, copy: &Value, entry: &mut ClusterWorkloadStatus) {
    let status = &copy["status"];
    let kind = match rule {
        Some(Rule::BuiltIn(kind)) => Some(*kind),
        Some(Rule::Interpreted(spec)) => {
            entry.healthy = spec.health.as_ref().map(|h| {
                status["conditions"].as_array().is_some_and(|list| {
                    list.iter()
                        .any(|c| c["type"] == h.condition_type.as_str() && c["status"] == "True")
                })
            });
            None
        }
        None => None,
    };
    let count = |f: &str| status[f].as_i64().and_then(|v| i32::try_from(v).ok());
    match kind {
        Some(StatusKind::DaemonSet) => {
            entry.replicas = count("desiredNumberScheduled").unwrap_or(0);
            entry.ready_replicas = count("numberReady").unwrap_or(0);
            entry.available_replicas = count("numberAvailable").unwrap_or(0);
            entry.updated_replicas = count("updatedNumberScheduled").unwrap_or(0);
        }
        Some(StatusKind::Autoscaler) => {
            entry.current_replicas = count("currentReplicas");
            entry.desired_replicas = count("desiredReplicas");
        }
        Some(StatusKind::DisruptionBudget) => {
            entry.disruptions_allowed = count("disruptionsAllowed");
        }
        Some(StatusKind::CronJob | StatusKind::Ingress) | None => {}
    }
    if kind.is_some_and(StatusKind::has_observed_generation) {
        entry.observed_generation = status["observedGeneration"].as_i64();
    }
    entry.conditions = member_conditions(status);
}

/// The conditions of a member copy's `status` as its Placement entry shows them: at most
/// [`MAX_MEMBER_CONDITIONS`], with the fields of [`Condition`] only (a Deployment's
/// `lastUpdateTime`, which moves on every bit of progress, is not one of them).
pub fn member_conditions(status: &Value) -> Vec<Condition> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::from_value::<Condition>(c.clone()).ok())
        .take(MAX_MEMBER_CONDITIONS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(generation: i64, status: Value) -> Value {
        json!({"metadata": {"name": "x", "generation": generation}, "status": status})
    }

    fn fed(generation: i64, status: Value) -> Value {
        json!({"metadata": {"name": "x", "generation": generation}, "status": status})
    }

    #[test]
    fn kinds_by_group_and_kind() {
        assert_eq!(
            StatusKind::of("apps/v1", "DaemonSet"),
            Some(StatusKind::DaemonSet)
        );
        assert_eq!(
            StatusKind::of("autoscaling/v2", "HorizontalPodAutoscaler"),
            Some(StatusKind::Autoscaler)
        );
        assert_eq!(
            StatusKind::of("autoscaling/v1", "HorizontalPodAutoscaler"),
            Some(StatusKind::Autoscaler)
        );
        assert_eq!(StatusKind::of("v1", "ConfigMap"), None);
        // Same kind name in another group is not the built-in one.
        assert_eq!(StatusKind::of("example.com/v1", "DaemonSet"), None);
    }

    #[test]
    fn daemonset_sums_and_generation_waits_for_every_member() {
        let a = copy(
            2,
            json!({"observedGeneration": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                   "numberReady": 3, "numberAvailable": 3, "updatedNumberScheduled": 3}),
        );
        let b_old = copy(
            5,
            json!({"observedGeneration": 4, "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                   "numberReady": 1, "numberAvailable": 1, "numberUnavailable": 1,
                   "updatedNumberScheduled": 0}),
        );
        let b_new = copy(
            5,
            json!({"observedGeneration": 5, "desiredNumberScheduled": 2, "currentNumberScheduled": 2,
                   "numberReady": 2, "numberAvailable": 2, "updatedNumberScheduled": 2}),
        );
        let f = fed(7, json!({"observedGeneration": 6}));
        let m = |_, o, current| MemberCopy {
            object: Some(o),
            current,
        };
        // b has not observed its copy's latest generation: the old observedGeneration stays.
        let s = federated(
            StatusKind::DaemonSet,
            &f,
            &[m("a", &a, true), m("b", &b_old, true)],
        );
        assert_eq!(
            s,
            json!({"observedGeneration": 6, "desiredNumberScheduled": 5, "currentNumberScheduled": 5,
                   "numberReady": 4, "numberAvailable": 4, "numberUnavailable": 1,
                   "numberMisscheduled": 0, "updatedNumberScheduled": 3})
        );
        // Both observed and current: the federated generation is observed.
        let s = federated(
            StatusKind::DaemonSet,
            &f,
            &[m("a", &a, true), m("b", &b_new, true)],
        );
        assert_eq!(s["observedGeneration"], 7);
        assert_eq!(s["updatedNumberScheduled"], 5);
        // A copy just rewritten this pass: its status is about the old copy.
        let s = federated(
            StatusKind::DaemonSet,
            &f,
            &[m("a", &a, false), m("b", &b_new, true)],
        );
        assert_eq!(s["observedGeneration"], 6);
        // A destination without its copy yet.
        let none = MemberCopy {
            object: None,
            current: false,
        };
        let s = federated(
            StatusKind::DaemonSet,
            &f,
            &[m("a", &a, true), m("b", &b_new, true), none],
        );
        assert_eq!(s["observedGeneration"], 6);
        // Never observed before, not all observed now: no observedGeneration at all.
        let s = federated(StatusKind::DaemonSet, &fed(1, json!({})), &[none]);
        assert_eq!(s.get("observedGeneration"), None);
        assert_eq!(s["numberReady"], 0);
    }

    #[test]
    fn cronjob_takes_the_latest_times() {
        let a = copy(
            1,
            json!({"lastScheduleTime": "2026-11-27T10:00:00Z", "lastSuccessfulTime": "2026-11-27T10:00:05Z"}),
        );
        let b = copy(1, json!({"lastScheduleTime": "2026-11-27T10:05:00Z"}));
        let m = |_, o| MemberCopy {
            object: Some(o),
            current: true,
        };
        let s = federated(
            StatusKind::CronJob,
            &fed(1, json!({})),
            &[m("a", &a), m("b", &b)],
        );
        assert_eq!(
            s,
            json!({"lastScheduleTime": "2026-11-27T10:05:00Z",
                   "lastSuccessfulTime": "2026-11-27T10:00:05Z"})
        );
        let s = federated(StatusKind::CronJob, &fed(1, json!({})), &[]);
        assert_eq!(s, json!({}));
    }

    #[test]
    fn ingress_lists_every_member_address_once() {
        let a = copy(
            1,
            json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}, {"hostname": "a.example"}]}}),
        );
        let b = copy(
            1,
            json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}, {"ip": "10.0.0.1"}]}}),
        );
        let c = copy(1, json!({"loadBalancer": {}}));
        let m = |_, o| MemberCopy {
            object: Some(o),
            current: true,
        };
        let s = federated(
            StatusKind::Ingress,
            &fed(1, json!({})),
            &[m("a", &a), m("b", &b), m("c", &c)],
        );
        assert_eq!(
            s,
            json!({"loadBalancer": {"ingress": [
                {"ip": "10.0.0.1"}, {"hostname": "a.example"}, {"ip": "10.0.0.2"}]}})
        );
        // No address anywhere: an empty loadBalancer, as upstream shows a pending Ingress.
        let s = federated(StatusKind::Ingress, &fed(1, json!({})), &[m("c", &c)]);
        assert_eq!(s, json!({"loadBalancer": {}}));
    }

    #[test]
    fn autoscaler_and_budget_sums() {
        let a = copy(
            1,
            json!({"observedGeneration": 1, "currentReplicas": 2, "desiredReplicas": 4,
                   "lastScaleTime": "2026-11-27T10:00:00Z"}),
        );
        let b = copy(
            1,
            json!({"observedGeneration": 1, "currentReplicas": 3, "desiredReplicas": 3}),
        );
        let m = |_, o| MemberCopy {
            object: Some(o),
            current: true,
        };
        let s = federated(
            StatusKind::Autoscaler,
            &fed(1, json!({})),
            &[m("a", &a), m("b", &b)],
        );
        assert_eq!(
            s,
            json!({"observedGeneration": 1, "currentReplicas": 5, "desiredReplicas": 7,
                   "lastScaleTime": "2026-11-27T10:00:00Z"})
        );
        let p = copy(
            3,
            json!({"observedGeneration": 3, "currentHealthy": 3, "desiredHealthy": 2,
                   "expectedPods": 3, "disruptionsAllowed": 1}),
        );
        let s = federated(
            StatusKind::DisruptionBudget,
            &fed(1, json!({})),
            &[m("a", &p), m("b", &p)],
        );
        assert_eq!(
            s,
            json!({"observedGeneration": 1, "currentHealthy": 6, "desiredHealthy": 4,
                   "expectedPods": 6, "disruptionsAllowed": 2})
        );
    }

    #[test]
    fn member_entries() {
        let hpa = copy(
            1,
            json!({"observedGeneration": 1, "currentReplicas": 2, "desiredReplicas": 4,
                   "conditions": [
                       {"type": "AbleToScale", "status": "True", "reason": "SucceededRescale",
                        "lastTransitionTime": "2026-11-27T10:00:00Z"},
                       {"type": "ScalingActive", "status": "False", "reason": "FailedGetResourceMetric",
                        "message": "no metrics"},
                       {"status": "no type: not a condition"}]}),
        );
        let mut e = ClusterWorkloadStatus::default();
        member_entry(Some(&Rule::BuiltIn(StatusKind::Autoscaler)), &hpa, &mut e);
        assert_eq!((e.current_replicas, e.desired_replicas), (Some(2), Some(4)));
        assert_eq!(e.observed_generation, Some(1));
        let types: Vec<_> = e.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["AbleToScale", "ScalingActive"]);
        assert_eq!(e.conditions[1].message, "no metrics");

        let pdb = copy(1, json!({"disruptionsAllowed": 0}));
        let mut e = ClusterWorkloadStatus::default();
        member_entry(
            Some(&Rule::BuiltIn(StatusKind::DisruptionBudget)),
            &pdb,
            &mut e,
        );
        assert_eq!(e.disruptions_allowed, Some(0));

        let ds = copy(
            1,
            json!({"desiredNumberScheduled": 3, "numberReady": 2, "numberAvailable": 1,
                   "updatedNumberScheduled": 3}),
        );
        let mut e = ClusterWorkloadStatus::default();
        member_entry(Some(&Rule::BuiltIn(StatusKind::DaemonSet)), &ds, &mut e);
        assert_eq!(
            (
                e.replicas,
                e.ready_replicas,
                e.available_replicas,
                e.updated_replicas
            ),
            (3, 2, 1, 3)
        );

        // A custom resource: only its conditions.
        let cr = copy(
            1,
            json!({"conditions": [{"type": "Ready", "status": "True"}], "size": 3}),
        );
        let mut e = ClusterWorkloadStatus::default();
        member_entry(None, &cr, &mut e);
        assert_eq!(e.conditions.len(), 1);
        assert_eq!(e.replicas, 0);
        assert_eq!(e.observed_generation, None);

        // Conditions are bounded.
        let many: Vec<Value> = (0..20)
            .map(|i| json!({"type": format!("T{i}"), "status": "True"}))
            .collect();
        let mut e = ClusterWorkloadStatus::default();
        member_entry(None, &copy(1, json!({"conditions": many})), &mut e);
        assert_eq!(e.conditions.len(), MAX_MEMBER_CONDITIONS);
    }

    fn interpreter(aggregations: Value, health: Option<&str>) -> Rule {
        let mut spec = json!({
            "target": {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout"},
            "statusAggregation": aggregations,
        });
        if let Some(h) = health {
            spec["health"] = json!({"conditionType": h});
        }
        Rule::Interpreted(serde_json::from_value(spec).expect("spec"))
    }

    #[test]
    fn interpreted_status_sets_only_the_named_fields() {
        let rule = interpreter(
            json!([
                {"path": ".status.readyReplicas", "op": "Sum"},
                {"path": ".status.canary.weight", "op": "Min"},
                {"path": ".status.revision", "op": "Max"},
                {"path": ".status.observedGeneration", "op": "Min"},
                {"path": ".status.absentEverywhere", "op": "Sum"},
            ]),
            None,
        );
        let a = copy(
            3,
            json!({"observedGeneration": 3, "readyReplicas": 2, "canary": {"weight": 20}, "revision": 4}),
        );
        let b = copy(
            1,
            json!({"observedGeneration": 1, "readyReplicas": 3, "canary": {"weight": 10}, "revision": 7}),
        );
        let f = fed(
            5,
            json!({"phase": "Healthy", "readyReplicas": 1, "canary": "not an object"}),
        );
        let m = |o| MemberCopy {
            object: Some(o),
            current: true,
        };
        let s = combined(&rule, &f, &[m(&a), m(&b)]).expect("combined");
        assert_eq!(
            s,
            json!({"phase": "Healthy", "readyReplicas": 5, "canary": {"weight": 10},
                   "revision": 7, "observedGeneration": 5})
        );
        // A member not yet observed: the old observedGeneration (none) stays out.
        let stale = copy(4, json!({"observedGeneration": 3, "readyReplicas": 0}));
        let s = combined(&rule, &f, &[m(&a), m(&stale)]).expect("combined");
        assert_eq!(s.get("observedGeneration"), None);
        assert_eq!(s["readyReplicas"], 2);
        // Nothing to combine: nothing to write.
        assert_eq!(combined(&interpreter(json!([]), None), &f, &[m(&a)]), None);
    }

    #[test]
    fn interpreted_health_from_the_condition() {
        let rule = interpreter(json!([]), Some("Available"));
        let healthy = copy(
            1,
            json!({"conditions": [{"type": "Available", "status": "True"}]}),
        );
        let unhealthy = copy(
            1,
            json!({"conditions": [{"type": "Available", "status": "False", "reason": "Degraded"}]}),
        );
        let silent = copy(1, json!({}));
        for (c, want) in [(&healthy, true), (&unhealthy, false), (&silent, false)] {
            let mut e = ClusterWorkloadStatus::default();
            member_entry(Some(&rule), c, &mut e);
            assert_eq!(e.healthy, Some(want), "{c}");
        }
        let mut e = ClusterWorkloadStatus::default();
        member_entry(Some(&interpreter(json!([]), None)), &healthy, &mut e);
        assert_eq!(e.healthy, None);
        assert_eq!(e.conditions.len(), 1);
    }
}

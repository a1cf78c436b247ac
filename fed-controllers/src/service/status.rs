//! Which clusters serve a federated Service and what the federation shows of it: the
//! remote lb-agents each member's EndpointSlice lists, `Placement.status.clusters`, the
//! `Propagated` condition and the Service's `status.loadBalancer.ingress`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use fed_api::PlacementSpec;
use fed_api::placement::{ClusterWorkloadStatus, TargetCluster};
use serde_json::{Value, json};

use super::ClusterView;

/// What one member reports for one Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberState {
    /// Ready endpoints of the Service's own pods there.
    pub endpoints: u32,
    /// Whether the member holds Meridian's copy of the Service.
    pub holds: bool,
    /// Last sync error, empty when in sync.
    pub error: String,
    /// Whether that error is a name conflict: the member holds a Service or slice of that
    /// name that is not Meridian's.
    pub conflict: bool,
    /// Whether an override rule cannot make the member's copy (the error says which): the
    /// member is left as it is until the policy is fixed.
    pub override_failed: bool,
    /// Last successful sync (RFC 3339).
    pub last_sync_time: Option<String>,
}

/// Whether a cluster receives the Service's traffic: Ready, lb-agent known, ready endpoints.
pub fn healthy(view: Option<&ClusterView>, endpoints: u32) -> bool {
    view.is_some_and(|v| v.ready && v.lb_agent.is_some()) && endpoints > 0
}

/// The clusters among `pushed` that serve the Service, with their lb-agent addresses.
pub fn serving(
    pushed: &BTreeSet<String>,
    views: &[ClusterView],
    states: &BTreeMap<String, MemberState>,
) -> BTreeMap<String, Ipv4Addr> {
    pushed
        .iter()
        .filter_map(|c| {
            let view = views.iter().find(|v| v.name == *c)?;
            let endpoints = states.get(c).map_or(0, |s| s.endpoints);
            if !healthy(Some(view), endpoints) {
                return None;
            }
            let addr = view.lb_agent.as_ref()?.address.parse().ok()?;
            Some((c.clone(), addr))
        })
        .collect()
}

/// The remote lb-agents `member`'s EndpointSlice lists: every serving cluster but itself.
pub fn remotes(member: &str, serving: &BTreeMap<String, Ipv4Addr>) -> Vec<Ipv4Addr> {
    serving
        .iter()
        .filter(|(c, _)| c.as_str() != member)
        .map(|(_, a)| *a)
        .collect()
}

/// `Placement.spec.destClusters`: the clusters the Service is pushed to, replicas = their
/// ready endpoints.
pub fn dest_clusters(
    pushed: &BTreeSet<String>,
    states: &BTreeMap<String, MemberState>,
) -> Vec<TargetCluster> {
    pushed
        .iter()
        .map(|c| TargetCluster {
            cluster: c.clone(),
            replicas: states.get(c).map_or(0, |s| s.endpoints),
        })
        .collect()
}

/// The clusters a Placement names, whatever their counts.
pub fn cluster_names(spec: &PlacementSpec) -> BTreeSet<String> {
    spec.dest_clusters
        .iter()
        .map(|t| t.cluster.clone())
        .collect()
}

/// The message of the one Event a Service gets when it goes to other clusters (`before`
/// is `None` for a new Placement); `None` when the clusters stay, or a new Service has no
/// backends yet. A Service's only Event in the normal course, as the scheduler's
/// `Scheduled` is a workload's: member pushes and endpoint counts show on the Placement.
pub fn placed_message(
    before: Option<&BTreeSet<String>>,
    after: &BTreeSet<String>,
) -> Option<String> {
    let moved = before.map_or(!after.is_empty(), |b| b != after);
    if !moved {
        return None;
    }
    Some(if after.is_empty() {
        "no cluster runs its backends".to_owned()
    } else {
        let names: Vec<&str> = after.iter().map(String::as_str).collect();
        format!(
            "destClusters {}: the clusters that run its backends",
            names.join(" ")
        )
    })
}

/// `Placement.status.clusters` for the pushed clusters.
pub fn cluster_entries(
    pushed: &BTreeSet<String>,
    views: &[ClusterView],
    states: &BTreeMap<String, MemberState>,
) -> Vec<ClusterWorkloadStatus> {
    pushed
        .iter()
        .map(|c| {
            let st = states.get(c).cloned().unwrap_or_default();
            let view = views.iter().find(|v| v.name == *c);
            let endpoints = i32::try_from(st.endpoints).unwrap_or(i32::MAX);
            ClusterWorkloadStatus {
                cluster: c.clone(),
                replicas: endpoints,
                ready_replicas: endpoints,
                last_sync_time: st.last_sync_time.clone(),
                error: if view.is_none() {
                    format!("cluster {c} is not joined")
                } else {
                    st.error.clone()
                },
                endpoints: Some(endpoints),
                lb_agent: view.and_then(|v| v.lb_agent.as_ref().map(|a| a.address.clone())),
                healthy: Some(healthy(view, st.endpoints)),
                ..Default::default()
            }
        })
        .collect()
}

/// The `Propagated` condition: `(status, reason, message)`; a member's name conflict comes
/// first (it needs a person), then an override policy that cannot make some member's copy
/// (it needs the policy fixed), then any other error.
pub fn propagated(
    entries: &[ClusterWorkloadStatus],
    states: &BTreeMap<String, MemberState>,
) -> (&'static str, &'static str, String) {
    let errors = crate::fleet::status::member_errors(entries);
    if entries.is_empty() {
        (
            "False",
            "NoBackends",
            "no federated workload selected by the Service has replicas, and no PropagationPolicy selects it".into(),
        )
    } else if entries
        .iter()
        .any(|e| states.get(&e.cluster).is_some_and(|s| s.conflict))
    {
        ("False", "Conflict", errors.join("; "))
    } else if entries
        .iter()
        .any(|e| states.get(&e.cluster).is_some_and(|s| s.override_failed))
    {
        ("False", "OverrideFailed", errors.join("; "))
    } else if !errors.is_empty() {
        ("False", "SyncFailed", errors.join("; "))
    } else if entries
        .iter()
        .all(|e| states.get(&e.cluster).is_some_and(|s| s.holds))
    {
        ("True", "InSync", String::new())
    } else {
        (
            "False",
            "Progressing",
            "waiting for members to hold the Service".into(),
        )
    }
}

/// `status.loadBalancer` of the federated Service: the serving clusters' lb-agents, or the
/// Service's dedicated address in a cluster where it has one (where its own ports answer).
pub fn load_balancer(
    serving: &BTreeMap<String, Ipv4Addr>,
    dedicated: &BTreeMap<String, String>,
) -> Value {
    let ips: BTreeSet<Ipv4Addr> = serving
        .iter()
        .map(|(c, a)| dedicated.get(c).and_then(|d| d.parse().ok()).unwrap_or(*a))
        .collect();
    let ingress: Vec<Value> = ips.iter().map(|ip| json!({"ip": ip.to_string()})).collect();
    json!({ "ingress": ingress })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::test_view as view;

    fn state(endpoints: u32, holds: bool, error: &str) -> MemberState {
        MemberState {
            endpoints,
            holds,
            error: error.into(),
            conflict: false,
            override_failed: false,
            last_sync_time: Some("2026-01-01T00:00:00Z".into()),
        }
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_service_is_told_placed_only_when_its_clusters_change() {
        let (ab, a) = (set(&["a", "b"]), set(&["a"]));
        assert_eq!(
            placed_message(None, &ab).as_deref(),
            Some("destClusters a b: the clusters that run its backends")
        );
        assert_eq!(placed_message(None, &set(&[])), None, "no backends yet");
        assert_eq!(placed_message(Some(&ab), &ab), None, "same clusters");
        assert!(placed_message(Some(&ab), &a).is_some());
        assert_eq!(
            placed_message(Some(&a), &set(&[])).as_deref(),
            Some("no cluster runs its backends")
        );
    }

    #[test]
    fn each_member_lists_the_other_serving_clusters() {
        let views = vec![
            view("a", true, Some("127.0.1.1")),
            view("b", true, Some("127.0.1.2")),
            view("c", true, Some("127.0.1.3")),
            view("d", false, Some("127.0.1.4")),
            view("e", true, None),
        ];
        let states = BTreeMap::from([
            ("a".to_string(), state(2, true, "")),
            ("b".to_string(), state(1, true, "")),
            ("c".to_string(), state(0, true, "")),
            ("d".to_string(), state(3, true, "")),
            ("e".to_string(), state(3, true, "")),
        ]);
        let pushed = set(&["a", "b", "c", "d", "e"]);
        let s = serving(&pushed, &views, &states);
        assert_eq!(s.keys().cloned().collect::<Vec<_>>(), ["a", "b"]);
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(remotes("a", &s), vec![ip("127.0.1.2")]);
        assert_eq!(remotes("b", &s), vec![ip("127.0.1.1")]);
        assert_eq!(remotes("c", &s), vec![ip("127.0.1.1"), ip("127.0.1.2")]);
        // A cluster not among the pushed ones never serves, whatever it reports.
        let only_a = serving(&set(&["a"]), &views, &states);
        assert_eq!(remotes("a", &only_a), Vec::<Ipv4Addr>::new());
        assert_eq!(
            load_balancer(&s, &BTreeMap::new()),
            json!({"ingress": [{"ip": "127.0.1.1"}, {"ip": "127.0.1.2"}]})
        );
        // A dedicated address replaces its cluster's agent; one of a cluster that does not
        // serve is not shown.
        let dedicated = BTreeMap::from([
            ("b".to_string(), "127.2.2.1".to_string()),
            ("c".to_string(), "127.2.3.1".to_string()),
        ]);
        assert_eq!(
            load_balancer(&s, &dedicated),
            json!({"ingress": [{"ip": "127.0.1.1"}, {"ip": "127.2.2.1"}]})
        );
        assert_eq!(
            load_balancer(&BTreeMap::new(), &dedicated),
            json!({"ingress": []})
        );
    }

    #[test]
    fn placement_status_and_condition() {
        let views = vec![view("a", true, Some("127.0.1.1")), view("b", false, None)];
        let mut states = BTreeMap::from([
            ("a".to_string(), state(2, true, "")),
            ("b".to_string(), state(0, false, "")),
        ]);
        let pushed = set(&["a", "b", "z"]);
        let dest = dest_clusters(&pushed, &states);
        assert_eq!(dest[0].replicas, 2);
        let entries = cluster_entries(&pushed, &views, &states);
        assert_eq!(entries[0].endpoints, Some(2));
        assert_eq!(entries[0].lb_agent.as_deref(), Some("127.0.1.1"));
        assert_eq!(entries[0].healthy, Some(true));
        assert_eq!(entries[1].healthy, Some(false));
        assert_eq!(entries[1].lb_agent, None);
        assert!(entries[2].error.contains("not joined"));
        assert_eq!(propagated(&entries, &states).1, "SyncFailed");

        let pushed = set(&["a", "b"]);
        let entries = cluster_entries(&pushed, &views, &states);
        assert_eq!(propagated(&entries, &states).1, "Progressing");
        states.get_mut("b").unwrap().holds = true;
        assert_eq!(propagated(&entries, &states).0, "True");
        // Words do not make a conflict; the member's typed report does.
        states.get_mut("b").unwrap().error = "conflict: nothing of the sort".into();
        let entries = cluster_entries(&pushed, &views, &states);
        assert_eq!(propagated(&entries, &states).1, "SyncFailed");
        let b = states.get_mut("b").unwrap();
        b.error = "conflict: Service shop/web exists in b and is not managed by Meridian".into();
        b.conflict = true;
        let entries = cluster_entries(&pushed, &views, &states);
        let (st, reason, msg) = propagated(&entries, &states);
        assert_eq!((st, reason), ("False", "Conflict"));
        assert!(msg.starts_with("b: conflict:"), "{msg}");
        assert_eq!(propagated(&[], &states).1, "NoBackends");
        // An override that cannot apply in a: said before other errors, after conflicts.
        let a = states.get_mut("a").unwrap();
        a.error = "OverrideFailed: OverridePolicy shop/p rule 0: plaintext[0]: ...".into();
        a.override_failed = true;
        let entries = cluster_entries(&pushed, &views, &states);
        assert_eq!(propagated(&entries, &states).1, "Conflict");
        states.get_mut("b").unwrap().conflict = false;
        let (st, reason, msg) = propagated(&entries, &states);
        assert_eq!((st, reason), ("False", "OverrideFailed"));
        assert!(
            msg.contains("a: OverrideFailed: OverridePolicy shop/p"),
            "{msg}"
        );
    }
}

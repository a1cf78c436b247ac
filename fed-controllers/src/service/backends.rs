//! Which member clusters a federated Service belongs in: where the federated
//! Deployments/ReplicaSets whose pods it selects have replicas, plus every Ready cluster
//! matching the affinity of a PropagationPolicy that selects the Service itself.

use std::collections::{BTreeMap, BTreeSet};

use fed_api::PropagationPolicy;
use fed_api::placement::TargetCluster;
use fed_api::policy::{ClusterAffinity, ResourceSelector};
use serde_json::Value;

use super::ClusterView;

/// A federated workload in the Service's namespace, as far as selection goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadView {
    /// `Deployment` or `ReplicaSet`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Labels of its pod template.
    pub template_labels: BTreeMap<String, String>,
}

impl WorkloadView {
    /// Name of the workload's Placement, as the scheduler names it: `deployment-web`.
    pub fn placement_name(&self) -> String {
        format!("{}-{}", self.kind.to_lowercase(), self.name)
    }
}

/// Whether a Service selector picks pods with `labels`. An empty selector picks nothing:
/// such a Service has no managed endpoints (Kubernetes semantics).
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether a resource selector of a PropagationPolicy selects the Service.
fn resource_selects(sel: &ResourceSelector, name: &str, labels: &BTreeMap<String, String>) -> bool {
    sel.api_version == "v1"
        && sel.kind == "Service"
        && sel.name.as_ref().is_none_or(|n| n == name)
        && sel
            .label_selector
            .as_ref()
            .is_none_or(|s| s.matches(labels))
}

/// Whether a PropagationPolicy selects the Service `name` with `labels`.
pub fn policy_selects(
    p: &PropagationPolicy,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    p.spec
        .resource_selectors
        .iter()
        .any(|s| resource_selects(s, name, labels))
}

/// Whether a cluster satisfies a policy's cluster affinity (none: every cluster), by the
/// rules the scheduler filters with.
pub fn affinity_matches(a: Option<&ClusterAffinity>, c: &ClusterView) -> bool {
    fn known(s: &str) -> Option<&str> {
        Some(s).filter(|s| !s.is_empty())
    }
    a.is_none_or(|a| {
        a.mismatch(&c.name, &c.labels, known(&c.region), known(&c.zone))
            .is_none()
    })
}

/// The Service's selector (`spec.selector`) from its JSON.
pub fn selector_of(svc: &Value) -> BTreeMap<String, String> {
    string_map(&svc["spec"]["selector"])
}

/// A JSON object of strings as a map (other values skipped).
pub fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The backend clusters of a Service named `name` with `labels` and `selector`.
/// `dest_of` gives a workload Placement's `destClusters` by Placement name.
pub fn backend_clusters<'a>(
    name: &str,
    labels: &BTreeMap<String, String>,
    selector: &BTreeMap<String, String>,
    workloads: &[WorkloadView],
    dest_of: impl Fn(&str) -> Option<&'a [TargetCluster]>,
    policies: &[&PropagationPolicy],
    clusters: &[ClusterView],
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for w in workloads
        .iter()
        .filter(|w| selects(selector, &w.template_labels))
    {
        for t in dest_of(&w.placement_name()).unwrap_or_default() {
            if t.replicas > 0 {
                out.insert(t.cluster.clone());
            }
        }
    }
    for p in policies.iter().filter(|p| policy_selects(p, name, labels)) {
        let affinity = p.spec.placement.cluster_affinity.as_ref();
        for c in clusters
            .iter()
            .filter(|c| c.ready && affinity_matches(affinity, c))
        {
            out.insert(c.name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fed_api::PropagationPolicySpec;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn cluster(name: &str, ready: bool, region: &str) -> ClusterView {
        ClusterView {
            name: name.into(),
            ready,
            region: region.into(),
            labels: labels(&[("tier", if name == "c" { "edge" } else { "core" })]),
            ..Default::default()
        }
    }

    fn targets(t: &[(&str, u32)]) -> Vec<TargetCluster> {
        t.iter()
            .map(|(c, r)| TargetCluster {
                cluster: c.to_string(),
                replicas: *r,
            })
            .collect()
    }

    fn policy(yaml: &str) -> PropagationPolicy {
        let spec: PropagationPolicySpec = serde_yaml_ng::from_str(yaml).expect("policy");
        PropagationPolicy::new("p", spec)
    }

    #[test]
    fn workloads_whose_pods_are_selected_give_their_clusters_with_replicas() {
        let workloads = vec![
            WorkloadView {
                kind: "Deployment".into(),
                name: "web".into(),
                template_labels: labels(&[("app", "web"), ("track", "stable")]),
            },
            WorkloadView {
                kind: "ReplicaSet".into(),
                name: "canary".into(),
                template_labels: labels(&[("app", "web")]),
            },
            WorkloadView {
                kind: "Deployment".into(),
                name: "db".into(),
                template_labels: labels(&[("app", "db")]),
            },
        ];
        let web = targets(&[("a", 2), ("b", 0)]);
        let canary = targets(&[("c", 1)]);
        let db = targets(&[("d", 3)]);
        let dest_of = |p: &str| match p {
            "deployment-web" => Some(web.as_slice()),
            "replicaset-canary" => Some(canary.as_slice()),
            "deployment-db" => Some(db.as_slice()),
            _ => None,
        };
        let got = backend_clusters(
            "web",
            &BTreeMap::new(),
            &labels(&[("app", "web")]),
            &workloads,
            dest_of,
            &[],
            &[],
        );
        assert_eq!(got, BTreeSet::from(["a".to_string(), "c".to_string()]));
        // An empty selector selects nothing.
        let none = backend_clusters(
            "web",
            &BTreeMap::new(),
            &BTreeMap::new(),
            &workloads,
            dest_of,
            &[],
            &[],
        );
        assert!(none.is_empty());
    }

    #[test]
    fn a_policy_selecting_the_service_adds_ready_clusters_matching_its_affinity() {
        let clusters = vec![
            cluster("a", true, "eu"),
            cluster("b", false, "eu"),
            cluster("c", true, "us"),
            cluster("d", true, "eu"),
        ];
        let by_name = policy(
            "resourceSelectors: [{apiVersion: v1, kind: Service, name: web}]\nplacement: {clusterAffinity: {regions: [eu], exclude: [d]}}",
        );
        let by_label = policy(
            "resourceSelectors: [{apiVersion: v1, kind: Service, labelSelector: {matchLabels: {expose: global}}}]\nplacement: {clusterAffinity: {labelSelector: {matchLabels: {tier: edge}}}}",
        );
        let deployment = policy(
            "resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]\nplacement: {}",
        );
        let svc_labels = labels(&[("expose", "global")]);
        let got = backend_clusters(
            "web",
            &svc_labels,
            &BTreeMap::new(),
            &[],
            |_| None,
            &[&by_name, &by_label, &deployment],
            &clusters,
        );
        assert_eq!(got, BTreeSet::from(["a".to_string(), "c".to_string()]));
        assert!(!policy_selects(&by_name, "api", &svc_labels));
        assert!(!policy_selects(&by_label, "web", &BTreeMap::new()));
        assert!(!policy_selects(&deployment, "web", &svc_labels));
    }
}

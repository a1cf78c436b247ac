//! Which member clusters a federated Service belongs in: where the federated workloads
//! whose pods it selects run (Deployments, ReplicaSets, StatefulSets and Jobs where they
//! have replicas; DaemonSets and CronJobs, copied whole, wherever they have a copy), plus
//! every Ready cluster matching the affinity of a PropagationPolicy that selects the
//! Service itself.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use fed_api::PropagationPolicy;
use fed_api::copies::{Path, path, placement_of};
use fed_api::interpreter::FieldRef;
use fed_api::placement::TargetCluster;
use fed_api::policy::{ClusterAffinity, ResourceSelector};
use serde_json::Value;

use super::ClusterView;

/// A kind of federated object with a pod template, whose pods a Service may select: a
/// built-in one ([`BackendKind::ALL`]) or a custom one whose ResourceInterpreter names its
/// pod template ([`BackendKind::custom`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendKind {
    /// e.g. `apps/v1`.
    pub api_version: Cow<'static, str>,
    /// e.g. `StatefulSet`.
    pub kind: Cow<'static, str>,
    /// The plural resource name, e.g. `statefulsets` (empty for a custom kind: discovery
    /// finds it).
    pub plural: Cow<'static, str>,
    /// Where its pod template is, as a `ResourceInterpreter` names a custom kind's
    /// (`podTemplate.path`), so both are read by one reader ([`template_labels`]).
    pub template: Cow<'static, str>,
}

impl BackendKind {
    /// Every built-in kind with a pod template that the federation propagates: the divided
    /// workload kinds ([`fed_api::workload::WorkloadKind`]) and the kinds copied whole.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::new("apps/v1", "Deployment", "deployments", TEMPLATE),
        BackendKind::new("apps/v1", "ReplicaSet", "replicasets", TEMPLATE),
        BackendKind::new("apps/v1", "StatefulSet", "statefulsets", TEMPLATE),
        BackendKind::new("batch/v1", "Job", "jobs", TEMPLATE),
        BackendKind::new("apps/v1", "DaemonSet", "daemonsets", TEMPLATE),
        BackendKind::new(
            "batch/v1",
            "CronJob",
            "cronjobs",
            ".spec.jobTemplate.spec.template",
        ),
    ];

    const fn new(
        api_version: &'static str,
        kind: &'static str,
        plural: &'static str,
        template: &'static str,
    ) -> Self {
        BackendKind {
            api_version: Cow::Borrowed(api_version),
            kind: Cow::Borrowed(kind),
            plural: Cow::Borrowed(plural),
            template: Cow::Borrowed(template),
        }
    }

    /// A custom kind whose pod template is at `template` (its interpreter's
    /// `podTemplate.path`).
    pub fn custom(api_version: &str, kind: &str, template: &str) -> Self {
        BackendKind {
            api_version: Cow::Owned(api_version.to_owned()),
            kind: Cow::Owned(kind.to_owned()),
            plural: Cow::Borrowed(""),
            template: Cow::Owned(template.to_owned()),
        }
    }

    /// The backend kind of `kind` in `api_version`, if it is one.
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.api_version == api_version && k.kind == kind)
    }

    /// Name of the Placement of object `name` of this kind, as the scheduler names it:
    /// `statefulset-db` for a divided workload, `daemonset.apps-agent` for a copied one.
    pub fn placement_name(&self, name: &str) -> String {
        match path(&self.api_version, &self.kind) {
            Path::Workload => fed_api::workload::placement_name(&self.kind, name),
            // Only the name: a namespaced object's Placement is beside it.
            _ => placement_of(&self.api_version, &self.kind, None, name).1,
        }
    }

    /// Whether a `destClusters` entry of its Placement runs pods of the object: a divided
    /// workload's where it has a share (a cluster may be listed with none), a copied
    /// object's everywhere listed (whole copies are listed with `replicas: 0`, and a
    /// cluster without a share of a divided custom object is not listed).
    pub fn runs_in(&self, target: &TargetCluster) -> bool {
        match path(&self.api_version, &self.kind) {
            Path::Workload => target.replicas > 0,
            _ => true,
        }
    }
}

/// Where the pod template of every built-in kind but CronJob is.
const TEMPLATE: &str = ".spec.template";

/// The labels of the pod template of `object` (JSON) at `template` (a dotted path, as a
/// `ResourceInterpreter`'s `podTemplate.path`): none when it has no template there.
pub fn template_labels(object: &Value, template: &str) -> BTreeMap<String, String> {
    let at = FieldRef {
        path: template.to_owned(),
    };
    at.get(object)
        .map(|t| string_map(&t["metadata"]["labels"]))
        .unwrap_or_default()
}

/// A federated workload in the Service's namespace, as far as selection goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadView {
    /// Its kind.
    pub kind: BackendKind,
    /// Name.
    pub name: String,
    /// Labels of its pod template.
    pub template_labels: BTreeMap<String, String>,
}

impl WorkloadView {
    /// Name of the workload's Placement, as the scheduler names it: `deployment-web`.
    pub fn placement_name(&self) -> String {
        self.kind.placement_name(&self.name)
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
            if w.kind.runs_in(t) {
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
    use serde_json::json;

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

    fn view(api_version: &str, kind: &str, name: &str, l: &[(&str, &str)]) -> WorkloadView {
        WorkloadView {
            kind: BackendKind::of(api_version, kind).expect("a backend kind"),
            name: name.into(),
            template_labels: labels(l),
        }
    }

    fn policy(yaml: &str) -> PropagationPolicy {
        let spec: PropagationPolicySpec = serde_yaml_ng::from_str(yaml).expect("policy");
        PropagationPolicy::new("p", spec)
    }

    #[test]
    fn workloads_whose_pods_are_selected_give_their_clusters_with_replicas() {
        let workloads = vec![
            view(
                "apps/v1",
                "Deployment",
                "web",
                &[("app", "web"), ("track", "stable")],
            ),
            view("apps/v1", "ReplicaSet", "canary", &[("app", "web")]),
            view("apps/v1", "Deployment", "db", &[("app", "db")]),
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

    #[test]
    fn every_kind_with_a_pod_template_backs_a_service_where_it_runs() {
        // (apiVersion, kind, its Placement, destClusters, clusters running its pods)
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            &'static [(&'static str, u32)],
            &'static [&'static str],
        );
        let cases: [Case; 8] = [
            (
                "apps/v1",
                "StatefulSet",
                "statefulset-db",
                &[("a", 3), ("b", 0)],
                &["a"],
            ),
            ("batch/v1", "Job", "job-db", &[("b", 2)], &["b"]),
            (
                "apps/v1",
                "Deployment",
                "deployment-db",
                &[("c", 1)],
                &["c"],
            ),
            (
                "apps/v1",
                "ReplicaSet",
                "replicaset-db",
                &[("a", 1)],
                &["a"],
            ),
            // Copied whole: every listed cluster holds one, listed with no replicas.
            (
                "apps/v1",
                "DaemonSet",
                "daemonset.apps-db",
                &[("a", 0), ("c", 0)],
                &["a", "c"],
            ),
            (
                "batch/v1",
                "CronJob",
                "cronjob.batch-db",
                &[("b", 0)],
                &["b"],
            ),
            // Placed nowhere.
            ("apps/v1", "StatefulSet", "statefulset-db", &[], &[]),
            ("apps/v1", "DaemonSet", "daemonset.apps-db", &[], &[]),
        ];
        for (api_version, kind, placement, dest, want) in cases {
            let w = view(api_version, kind, "db", &[("app", "db")]);
            assert_eq!(w.placement_name(), placement, "{kind}");
            let dest = targets(dest);
            let got = backend_clusters(
                "db",
                &BTreeMap::new(),
                &labels(&[("app", "db")]),
                std::slice::from_ref(&w),
                |p| (p == placement).then_some(dest.as_slice()),
                &[],
                &[],
            );
            let want: BTreeSet<String> = want.iter().map(|c| c.to_string()).collect();
            assert_eq!(got, want, "{kind} on {dest:?}");
            // A workload whose Placement the scheduler has not written yet runs nowhere.
            let unplaced = backend_clusters(
                "db",
                &BTreeMap::new(),
                &labels(&[("app", "db")]),
                &[w],
                |_| None,
                &[],
                &[],
            );
            assert!(unplaced.is_empty(), "{kind} without a Placement");
        }
    }

    #[test]
    fn pods_of_two_kinds_in_different_clusters_give_both() {
        let workloads = vec![
            view(
                "apps/v1",
                "StatefulSet",
                "db",
                &[("app", "db"), ("role", "primary")],
            ),
            view("apps/v1", "DaemonSet", "db-edge", &[("app", "db")]),
            view("batch/v1", "Job", "db-migrate", &[("app", "migrate")]),
        ];
        let sts = targets(&[("a", 3)]);
        let ds = targets(&[("c", 0)]);
        let job = targets(&[("b", 1)]);
        let dest_of = |p: &str| match p {
            "statefulset-db" => Some(sts.as_slice()),
            "daemonset.apps-db-edge" => Some(ds.as_slice()),
            "job-db-migrate" => Some(job.as_slice()),
            _ => None,
        };
        let got = backend_clusters(
            "db",
            &BTreeMap::new(),
            &labels(&[("app", "db")]),
            &workloads,
            dest_of,
            &[],
            &[],
        );
        assert_eq!(got, BTreeSet::from(["a".to_string(), "c".to_string()]));
    }

    #[test]
    fn pod_template_labels_of_each_kind() {
        let template = json!({"metadata": {"labels": {"app": "db", "n": 1}}, "spec": {}});
        for k in BackendKind::ALL {
            let object = if k.kind == "CronJob" {
                json!({"metadata": {"labels": {"owner": "x"}},
                       "spec": {"jobTemplate": {"spec": {"template": template.clone()}}}})
            } else {
                json!({"metadata": {"labels": {"owner": "x"}},
                       "spec": {"replicas": 2, "template": template.clone()}})
            };
            assert_eq!(
                template_labels(&object, &k.template),
                labels(&[("app", "db")]),
                "{}: the pod template's string labels, not the object's",
                k.kind
            );
            assert!(template_labels(&json!({"spec": {}}), &k.template).is_empty());
        }
    }

    #[test]
    fn a_custom_kind_backs_a_service_wherever_it_has_a_copy() {
        let rollout = BackendKind::custom("example.com/v1", "Rollout", ".spec.template");
        let w = WorkloadView {
            kind: rollout,
            name: "web".into(),
            template_labels: labels(&[("app", "web")]),
        };
        assert_eq!(w.placement_name(), "rollout.example.com-web");
        // Divided (each listed cluster has a share) or copied whole (listed with none).
        for dest in [
            targets(&[("a", 1), ("b", 2)]),
            targets(&[("a", 0), ("b", 0)]),
        ] {
            let got = backend_clusters(
                "web",
                &BTreeMap::new(),
                &labels(&[("app", "web")]),
                std::slice::from_ref(&w),
                |p| (p == "rollout.example.com-web").then_some(dest.as_slice()),
                &[],
                &[],
            );
            assert_eq!(got, BTreeSet::from(["a".to_string(), "b".to_string()]));
        }
    }

    #[test]
    fn backend_kinds() {
        for k in BackendKind::ALL {
            assert_eq!(BackendKind::of(&k.api_version, &k.kind), Some(k.clone()));
        }
        for w in fed_api::workload::WorkloadKind::ALL {
            let k = BackendKind::of(w.api_version(), w.as_str());
            assert_eq!(k.map(|k| k.plural), Some(w.plural().into()), "{w:?}");
        }
        assert_eq!(BackendKind::of("apps/v1", "Job"), None);
        assert_eq!(BackendKind::of("v1", "ConfigMap"), None);
        assert_eq!(BackendKind::of("example.com/v1", "StatefulSet"), None);
    }
}

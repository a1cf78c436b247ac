//! Objects Meridian copies as they are into every selected cluster (`Duplicated`): which
//! kinds take that path, which kinds the policies ask to watch, and where each copied
//! object's Placement lives.
//!
//! Deployments, ReplicaSets, StatefulSets and Jobs are divided by the workload path and Services have their
//! own; Meridian's own kinds and Events are never propagated. Every other kind a policy
//! names is copied.

use std::collections::{BTreeMap, BTreeSet};

use crate::names::SYSTEM_NAMESPACE;
use crate::object::PropagationPolicy;

/// One copied object: its kind and where its Placement lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CopyKey {
    /// e.g. `rbac.authorization.k8s.io/v1`.
    pub api_version: String,
    /// e.g. `Role`.
    pub kind: String,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for CopyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Label on the Placement of a copied object, value [`COPY_PLACEMENT_VALUE`]: the copy
/// controller watches only Placements that carry it, so the Placement events of divided
/// workloads (most of them, and frequent) are neither sent to it nor decoded.
pub const COPY_PLACEMENT_LABEL: &str = "federation.meridian.dev/copy";
/// Value of [`COPY_PLACEMENT_LABEL`].
pub const COPY_PLACEMENT_VALUE: &str = "true";

/// The labels the Placement of an object of `kind` in `api_version` carries.
pub fn placement_labels(api_version: &str, kind: &str) -> BTreeMap<String, String> {
    match path(api_version, kind) {
        Path::Copy => BTreeMap::from([(
            COPY_PLACEMENT_LABEL.to_owned(),
            COPY_PLACEMENT_VALUE.to_owned(),
        )]),
        _ => BTreeMap::new(),
    }
}

/// Which path propagates objects of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Divided by the workload path ([`crate::workload::WorkloadKind`]: `apps/v1`
    /// Deployment, ReplicaSet and StatefulSet, `batch/v1` Job).
    Workload,
    /// Pushed with cross-cluster endpoints by the service path (`v1` Service).
    Service,
    /// Copied as it is.
    Copy,
    /// Never propagated (Meridian's own kinds, Events).
    Never,
}

/// The path of objects of `kind` in `api_version`.
pub fn path(api_version: &str, kind: &str) -> Path {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if crate::workload::WorkloadKind::of_group(group, kind).is_some() {
        return Path::Workload;
    }
    match (group, kind) {
        ("", "Service") => Path::Service,
        (crate::GROUP, _) | ("" | "events.k8s.io", "Event") => Path::Never,
        _ => Path::Copy,
    }
}

/// The `(apiVersion, kind)` pairs some policy's resource selectors name that take the copy
/// path: the kinds whose objects must be watched, sorted.
pub fn copied_kinds<'a>(
    policies: impl IntoIterator<Item = &'a PropagationPolicy>,
) -> BTreeSet<(String, String)> {
    policies
        .into_iter()
        .flat_map(|p| &p.spec.resource_selectors)
        .filter(|s| path(&s.api_version, &s.kind) == Path::Copy)
        .map(|s| (s.api_version.clone(), s.kind.clone()))
        .collect()
}

/// Namespace and name of the Placement of a copied object: beside a namespaced object,
/// in `meridian-system` for a cluster-scoped one; named by kind and group so two kinds of
/// one name in different groups (`Role` of RBAC and of a custom group) never share one.
pub fn placement_of(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
) -> (String, String) {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = kind.to_ascii_lowercase();
    let placement = if group.is_empty() {
        format!("{kind}-{name}")
    } else {
        format!("{kind}.{group}-{name}")
    };
    (namespace.unwrap_or(SYSTEM_NAMESPACE).to_owned(), placement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ResourceSelector;

    #[test]
    fn paths() {
        let cases = [
            ("apps/v1", "Deployment", Path::Workload),
            ("apps/v1", "ReplicaSet", Path::Workload),
            ("apps/v1", "StatefulSet", Path::Workload),
            ("batch/v1", "Job", Path::Workload),
            ("batch/v1", "CronJob", Path::Copy),
            ("apps/v1", "DaemonSet", Path::Copy),
            ("v1", "Service", Path::Service),
            ("v1", "ServiceAccount", Path::Copy),
            ("example.com/v1", "Service", Path::Copy),
            ("example.com/v1", "Deployment", Path::Copy),
            ("v1", "Event", Path::Never),
            ("events.k8s.io/v1", "Event", Path::Never),
            ("federation.meridian.dev/v1alpha1", "Placement", Path::Never),
            (
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                Path::Copy,
            ),
        ];
        for (api_version, kind, want) in cases {
            assert_eq!(path(api_version, kind), want, "{api_version} {kind}");
        }
    }

    #[test]
    fn kinds_named_by_policies() {
        let sel = |api_version: &str, kind: &str| ResourceSelector {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Default::default()
        };
        let mut a = PropagationPolicy::default();
        a.spec.resource_selectors = vec![
            sel("apps/v1", "Deployment"),
            sel("v1", "ServiceAccount"),
            sel("rbac.authorization.k8s.io/v1", "Role"),
        ];
        let mut b = PropagationPolicy::default();
        b.spec.resource_selectors = vec![sel("v1", "ServiceAccount"), sel("v1", "Service")];
        let got: Vec<(String, String)> = copied_kinds([&a, &b]).into_iter().collect();
        assert_eq!(
            got,
            vec![
                ("rbac.authorization.k8s.io/v1".into(), "Role".into()),
                ("v1".into(), "ServiceAccount".into()),
            ]
        );
        assert!(copied_kinds([]).is_empty());
    }

    #[test]
    fn placement_names() {
        let cases = [
            (
                "v1",
                "ServiceAccount",
                Some("shop"),
                "web",
                ("shop", "serviceaccount-web"),
            ),
            (
                "rbac.authorization.k8s.io/v1",
                "Role",
                Some("shop"),
                "reader",
                ("shop", "role.rbac.authorization.k8s.io-reader"),
            ),
            (
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                None,
                "reader",
                (
                    "meridian-system",
                    "clusterrole.rbac.authorization.k8s.io-reader",
                ),
            ),
        ];
        for (api_version, kind, ns, name, (want_ns, want_name)) in cases {
            assert_eq!(
                placement_of(api_version, kind, ns, name),
                (want_ns.to_owned(), want_name.to_owned())
            );
        }
    }
}

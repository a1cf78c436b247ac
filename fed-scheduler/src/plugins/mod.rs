//! The scheduling pipeline's plugins: filter → score → select → divide.
//!
//! Each plugin is a small type with a `NAME` that returns its result together with
//! reasons, so every decision can answer "why (not) cluster X?".

pub mod divide;
pub mod filter;
pub mod score;
pub mod select;

use std::collections::HashMap;

use crate::types::{ClusterState, PlacementRules, Workload};

/// What every plugin may read about the decision being made.
pub(crate) struct Ctx<'a> {
    pub workload: &'a Workload,
    pub placement: &'a PlacementRules,
    /// Plural resource name the cluster must serve, e.g. `deployments`.
    pub resource: String,
    /// The snapshot's id of (`workload.api_version`, `resource`); `None` when no cluster
    /// serves the pair.
    pub api: Option<u32>,
    /// Previous replicas per cluster.
    pub previous: HashMap<&'a str, u32>,
    pub mass_failure_guard: bool,
    /// `Duplicated` needs room for all replicas in each cluster.
    pub duplicated: bool,
    /// Placing copies of an object without pods: capacity does not matter.
    pub copies: bool,
}

impl<'a> Ctx<'a> {
    pub fn previous(&self, cluster: &str) -> u32 {
        self.previous.get(cluster).copied().unwrap_or(0)
    }

    /// A context for one plugin's tests: no resource, no previous decision, no guard.
    #[cfg(test)]
    pub fn plain(workload: &'a Workload, placement: &'a PlacementRules) -> Self {
        Self {
            workload,
            placement,
            resource: String::new(),
            api: None,
            previous: HashMap::new(),
            mass_failure_guard: false,
            duplicated: false,
            copies: false,
        }
    }
}

/// A cluster that passed the filters.
#[derive(Debug, Clone)]
pub(crate) struct Candidate<'s> {
    /// Index into the snapshot's (name-sorted) clusters and verdicts.
    pub index: usize,
    pub cluster: &'s ClusterState,
    /// Replicas of this workload it can hold: free-slot estimate plus what it already
    /// holds (those pods are part of `allocated`, so keeping them needs no new room).
    pub capacity: u64,
    pub limited_by: &'static str,
    pub previous: u32,
    pub score: u64,
}

/// Lowercase plural of a kind, as API discovery lists resources
/// (`Deployment` → `deployments`, `Ingress` → `ingresses`, `Policy` → `policies`).
pub(crate) fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s')
        || lower.ends_with("x")
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plurals() {
        for (k, p) in [
            ("Deployment", "deployments"),
            ("ReplicaSet", "replicasets"),
            ("StatefulSet", "statefulsets"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Gateway", "gateways"),
        ] {
            assert_eq!(super::plural(k), p);
        }
    }
}

//! What a scheduling decision says: where replicas go, what did not fit, and why per cluster.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use fed_api::cluster::TaintEffect;
use fed_api::placement::TargetCluster;
use fed_api::policy::SpreadField;

/// Why a plugin treated a cluster the way it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Not Ready and holds none of this workload's replicas.
    NotReady {
        /// Seconds offline, when known.
        offline_for: Option<i64>,
    },
    /// Offline within the failover toleration: its replicas stay counted in place.
    OfflineTolerated {
        /// Seconds offline, when known.
        offline_for: Option<i64>,
        /// Toleration in seconds.
        toleration: u64,
    },
    /// Offline for longer than the toleration: its replicas move elsewhere.
    OfflineBeyondToleration {
        /// Seconds offline, when known.
        offline_for: Option<i64>,
        /// Toleration in seconds.
        toleration: u64,
    },
    /// Would be evicted, but the snapshot's mass-failure guard pauses evictions.
    EvictionPaused,
    /// The cluster does not serve the workload's resource.
    KindNotServed {
        /// e.g. `apps/v1`.
        group_version: String,
        /// e.g. `deployments`.
        resource: String,
    },
    /// Not in `clusterAffinity.clusterNames`.
    NotInClusterNames,
    /// In `clusterAffinity.exclude`.
    Excluded,
    /// Labels do not match `clusterAffinity.labelSelector`.
    LabelSelectorMismatch,
    /// Region not in `clusterAffinity.regions`.
    RegionMismatch {
        /// The cluster's region.
        region: Option<String>,
    },
    /// Zone not in `clusterAffinity.zones`.
    ZoneMismatch {
        /// The cluster's zone.
        zone: Option<String>,
    },
    /// A taint the placement does not tolerate.
    TaintNotTolerated {
        /// Taint key.
        key: String,
        /// Taint effect.
        effect: TaintEffect,
    },
    /// Capacity cannot be estimated (no or bad resource summary).
    CapacityUnknown {
        /// Details.
        detail: String,
    },
    /// Fits fewer replicas than needed.
    InsufficientCapacity {
        /// Replicas that fit.
        fits: u64,
        /// Replicas needed.
        needed: u64,
        /// The binding resource.
        limited_by: &'static str,
    },
    /// Lacks the field a spread constraint groups by.
    MissingSpreadField {
        /// The field.
        field: SpreadField,
    },
    /// Its group was not chosen because of `maxGroups`.
    SpreadLimit {
        /// The field.
        field: SpreadField,
        /// The cluster's group.
        group: String,
        /// The limit.
        max_groups: u32,
    },
    /// Static weight rules give it weight 0.
    ZeroWeight,
    /// Federation v1 preferences have no entry for it and no `"*"`.
    NotInPreferences,
    /// Reached `maxReplicas` while replicas were still wanted.
    AtMaxReplicas {
        /// The bound.
        max: u64,
    },
    /// Selected, but the division gave it no replicas (too few replicas to go around).
    NoReplicasLeft,
    /// Selected and a fresh division would give it replicas, but the workload's replicas
    /// stay where they were placed (`failover.rebalanceOnRecovery` is false).
    NotRebalanced,
}

impl Reason {
    /// A short CamelCase code for conditions and `unschedulable.reasons`.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::NotReady { .. } => "ClusterNotReady",
            Reason::OfflineTolerated { .. } => "OfflineTolerated",
            Reason::OfflineBeyondToleration { .. } => "ClusterOffline",
            Reason::EvictionPaused => "EvictionPaused",
            Reason::KindNotServed { .. } => "KindNotServed",
            Reason::NotInClusterNames
            | Reason::Excluded
            | Reason::LabelSelectorMismatch
            | Reason::RegionMismatch { .. }
            | Reason::ZoneMismatch { .. } => "ClusterAffinityMismatch",
            Reason::TaintNotTolerated { .. } => "TaintNotTolerated",
            Reason::CapacityUnknown { .. } => "CapacityUnknown",
            Reason::InsufficientCapacity { .. } => "InsufficientCapacity",
            Reason::MissingSpreadField { .. } | Reason::SpreadLimit { .. } => "SpreadConstraint",
            Reason::ZeroWeight => "ZeroWeight",
            Reason::NotInPreferences => "NotInPreferences",
            Reason::AtMaxReplicas { .. } => "MaxReplicas",
            Reason::NoReplicasLeft => "NoReplicasLeft",
            Reason::NotRebalanced => "NotRebalanced",
        }
    }
}

fn offline(f: &mut fmt::Formatter<'_>, secs: Option<i64>) -> fmt::Result {
    match secs {
        Some(s) => write!(f, "offline for {s}s"),
        None => write!(f, "offline since an unknown time"),
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotReady { offline_for } => {
                write!(f, "not Ready (")?;
                offline(f, *offline_for)?;
                write!(f, ")")
            }
            Reason::OfflineTolerated {
                offline_for,
                toleration,
            } => {
                offline(f, *offline_for)?;
                write!(
                    f,
                    ", within the {toleration}s toleration: replicas kept in place"
                )
            }
            Reason::OfflineBeyondToleration {
                offline_for,
                toleration,
            } => {
                offline(f, *offline_for)?;
                write!(f, ", beyond the {toleration}s toleration: replicas moved")
            }
            Reason::EvictionPaused => write!(
                f,
                "mass-failure guard active: evictions paused, replicas kept"
            ),
            Reason::KindNotServed {
                group_version,
                resource,
            } => {
                write!(f, "does not serve {group_version} {resource}")
            }
            Reason::NotInClusterNames => write!(f, "not in clusterAffinity.clusterNames"),
            Reason::Excluded => write!(f, "excluded by clusterAffinity.exclude"),
            Reason::LabelSelectorMismatch => {
                write!(f, "labels do not match clusterAffinity.labelSelector")
            }
            Reason::RegionMismatch { region } => {
                write!(
                    f,
                    "region {:?} not in clusterAffinity.regions",
                    region.as_deref().unwrap_or("")
                )
            }
            Reason::ZoneMismatch { zone } => {
                write!(
                    f,
                    "zone {:?} not in clusterAffinity.zones",
                    zone.as_deref().unwrap_or("")
                )
            }
            Reason::TaintNotTolerated { key, effect } => {
                write!(f, "taint {key}:{effect:?} not tolerated")
            }
            Reason::CapacityUnknown { detail } => write!(f, "capacity unknown: {detail}"),
            Reason::InsufficientCapacity {
                fits,
                needed,
                limited_by,
            } => {
                write!(
                    f,
                    "fits {fits} of {needed} replicas (limited by {limited_by})"
                )
            }
            Reason::MissingSpreadField { field } => {
                write!(f, "has no {field:?} for the spread constraint")
            }
            Reason::SpreadLimit {
                field,
                group,
                max_groups,
            } => {
                write!(
                    f,
                    "{field:?} {group:?} not among the {max_groups} chosen groups"
                )
            }
            Reason::ZeroWeight => write!(f, "no static weight rule gives it a weight"),
            Reason::NotInPreferences => {
                write!(f, "not in replica-set-preferences and no \"*\" entry")
            }
            Reason::AtMaxReplicas { max } => write!(f, "at maxReplicas {max}"),
            Reason::NoReplicasLeft => write!(f, "selected but no replicas left for it"),
            Reason::NotRebalanced => write!(
                f,
                "selected, but replicas stay where they were placed (rebalanceOnRecovery is false)"
            ),
        }
    }
}

/// A reason together with the plugin that gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginReason {
    /// The plugin's `NAME`.
    pub plugin: &'static str,
    /// What it found.
    pub reason: Reason,
}

impl fmt::Display for PluginReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.plugin, self.reason)
    }
}

/// Where a cluster ended up in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterOutcome {
    /// Chosen and given replicas by the division (possibly zero, see reasons).
    Selected,
    /// Not schedulable now, but its replicas stay in place (offline within toleration,
    /// NoSchedule taint, paused eviction).
    Kept,
    /// Removed by a filter.
    Filtered,
    /// Passed the filters but the select step left it out.
    NotSelected,
}

/// The answer to "why (not) cluster X?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterVerdict {
    /// Cluster name.
    pub cluster: String,
    /// Outcome.
    pub outcome: ClusterOutcome,
    /// Replicas it gets.
    pub replicas: u32,
    /// Capacity estimate for this pod shape, when known.
    pub capacity: Option<u64>,
    /// Every reason any plugin gave.
    pub reasons: Vec<PluginReason>,
}

impl fmt::Display for ClusterVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {:?}, {} replicas",
            self.cluster, self.outcome, self.replicas
        )?;
        for r in &self.reasons {
            write!(f, "; {r}")?;
        }
        Ok(())
    }
}

/// Which division produced the numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    /// Every chosen cluster runs all replicas.
    Duplicated,
    /// Divided by static weights.
    StaticWeight,
    /// Divided by available capacity.
    DynamicWeight,
    /// Divided by the Federation v1 planner from the workload's annotation.
    FederationV1,
}

/// `Placement.status.unschedulable.reasons[]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableCause {
    /// Cluster name.
    pub cluster: String,
    /// Reason code.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `Placement.status.unschedulable`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableStatus {
    /// Replicas that fit nowhere.
    pub replicas: u32,
    /// Why, per cluster.
    pub reasons: Vec<UnschedulableCause>,
}

/// A successful decision (possibly with replicas that fit nowhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// `destClusters`, sorted by cluster name, only clusters with replicas.
    pub targets: Vec<TargetCluster>,
    /// Replicas the workload asked for.
    pub requested: u32,
    /// Replicas that fit nowhere, and why.
    pub unschedulable: UnschedulableStatus,
    /// Division used.
    pub strategy: Strategy,
    /// `namespace/name` of the policy used, if any.
    pub policy: Option<String>,
    /// Per-cluster verdicts, sorted by cluster name.
    pub clusters: Vec<ClusterVerdict>,
}

impl Decision {
    /// Replicas in `targets`, summed (for `Duplicated`, each cluster counts fully).
    pub fn placed(&self) -> u64 {
        self.targets.iter().map(|t| u64::from(t.replicas)).sum()
    }

    /// Verdict for one cluster.
    pub fn why(&self, cluster: &str) -> Option<&ClusterVerdict> {
        self.clusters
            .binary_search_by(|v| v.cluster.as_str().cmp(cluster))
            .ok()
            .map(|i| &self.clusters[i])
    }

    /// A one-line summary for the `Scheduled` condition message / Event.
    pub fn message(&self) -> String {
        let placed = self.requested - self.unschedulable.replicas;
        let mut m = format!(
            "{placed}/{} replicas placed in {} clusters ({:?})",
            self.requested,
            self.targets.len(),
            self.strategy
        );
        if self.unschedulable.replicas > 0 {
            m.push_str(&format!("; {} unschedulable:", self.unschedulable.replicas));
            for c in &self.unschedulable.reasons {
                m.push_str(&format!(" {} {} ({});", c.cluster, c.reason, c.message));
            }
            m.pop();
        }
        m
    }
}

/// Why nothing could be placed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnschedulableReason {
    /// No policy selects the workload and it carries no Federation v1 preferences.
    #[error(
        "no PropagationPolicy selects the workload and it has no replica-set-preferences annotation"
    )]
    NoPolicy,
    /// The Federation v1 annotation could not be read.
    #[error("invalid federation.kubernetes.io/replica-set-preferences: {0}")]
    InvalidPreferences(String),
    /// Every cluster was filtered out.
    #[error("no cluster passed the filters")]
    NoCandidates,
    /// Fewer groups than `minGroups` are available.
    #[error("spread by {field:?} needs {min} groups but only {available} are available")]
    SpreadUnsatisfiable {
        /// The field.
        field: SpreadField,
        /// Groups available.
        available: u32,
        /// `minGroups`.
        min: u32,
    },
}

impl UnschedulableReason {
    /// A short CamelCase code for the condition reason.
    pub fn code(&self) -> &'static str {
        match self {
            UnschedulableReason::NoPolicy => "NoPolicy",
            UnschedulableReason::InvalidPreferences(_) => "InvalidPreferences",
            UnschedulableReason::NoCandidates => "NoClusterFits",
            UnschedulableReason::SpreadUnsatisfiable { .. } => "SpreadConstraintUnsatisfiable",
        }
    }
}

/// The error of `schedule`: nothing placed, with the per-cluster story.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("unschedulable: {reason}")]
pub struct Unschedulable {
    /// The overall reason.
    #[source]
    pub reason: UnschedulableReason,
    /// Per-cluster verdicts (empty when no cluster was considered).
    pub clusters: Vec<ClusterVerdict>,
}

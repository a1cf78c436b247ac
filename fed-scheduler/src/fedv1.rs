//! Federation v1's replica planner, reproduced number for number.
//!
//! Federation v1 read `federation.kubernetes.io/replica-set-preferences` from a
//! ReplicaSet/Deployment and divided its replicas with a planner whose exact behaviour
//! users depended on. The facts reproduced here:
//! - clusters without an entry use the `"*"` entry; with neither they get 0;
//! - clusters are ordered by weight (descending), then by the 32-bit FNV-1 hash of the
//!   cluster name followed by the workload key (`namespace/name`), so single-replica
//!   workloads do not all land on the alphabetically first cluster;
//! - first every cluster gets `min(minReplicas, remaining, capacity)` in that order (note:
//!   not capped by `maxReplicas`);
//! - with `rebalance: false`, replicas currently running above that minimum are kept
//!   (bounded by `maxReplicas`, capacity and what remains) before anything else;
//! - the rest is handed out in rounds: each still-open cluster gets
//!   `ceil(remaining_at_round_start × weight / Σweights)`, less what it already keeps from
//!   the previous step, capped by the replicas left, `maxReplicas` and capacity; clusters
//!   that hit a cap close. Rounds stop when nothing changes or nothing remains;
//! - `overflow` reports, per capacity-capped cluster, how many more it would have taken
//!   (with `rebalance: false`, trimmed to what stayed unplaced).
//!
//! Where two clusters tie on weight and hash (practically never) we order by name, so
//! the result never depends on input order.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The annotation Federation v1 read preferences from.
pub const PREFERENCES_ANNOTATION: &str = "federation.kubernetes.io/replica-set-preferences";

/// Why the preferences annotation was rejected.
#[derive(Debug, Error)]
pub enum PreferencesError {
    /// Not valid JSON of the expected shape.
    #[error("not valid replica-set-preferences JSON")]
    Json(#[source] serde_json::Error),
    /// Negative numbers were given.
    #[error("cluster {cluster:?}: {field} must not be negative")]
    Negative {
        /// The cluster entry.
        cluster: String,
        /// The field.
        field: &'static str,
    },
}

/// `ReplicaAllocationPreferences`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preferences {
    /// Whether running replicas may be moved to reach the preferred layout.
    #[serde(default)]
    pub rebalance: bool,
    /// Per cluster name, or `"*"` for all others.
    #[serde(default)]
    pub clusters: BTreeMap<String, ClusterPreferences>,
}

/// `ClusterPreferences`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPreferences {
    /// Replicas the cluster should get first.
    #[serde(default)]
    pub min_replicas: i64,
    /// Upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i64>,
    /// Relative weight of the rest.
    #[serde(default)]
    pub weight: i64,
}

impl Preferences {
    /// Parses the annotation value.
    pub fn parse(json: &str) -> Result<Self, PreferencesError> {
        let p: Self = serde_json::from_str(json).map_err(PreferencesError::Json)?;
        for (name, c) in &p.clusters {
            let neg = |field| PreferencesError::Negative {
                cluster: name.clone(),
                field,
            };
            if c.min_replicas < 0 {
                return Err(neg("minReplicas"));
            }
            if c.weight < 0 {
                return Err(neg("weight"));
            }
            if c.max_replicas.is_some_and(|m| m < 0) {
                return Err(neg("maxReplicas"));
            }
        }
        Ok(p)
    }

    /// The entry governing `cluster`, if any.
    pub fn for_cluster(&self, cluster: &str) -> Option<&ClusterPreferences> {
        self.clusters
            .get(cluster)
            .or_else(|| self.clusters.get("*"))
    }
}

/// What the planner decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Replicas per available cluster (including zeros), by name.
    pub plan: BTreeMap<String, i64>,
    /// Replicas that would have gone to capacity-capped clusters.
    pub overflow: BTreeMap<String, i64>,
}

/// 32-bit FNV-1 (multiply, then xor) over the concatenated bytes.
fn fnv1_32(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for part in parts {
        for &b in *part {
            h = h.wrapping_mul(0x0100_0193);
            h ^= u32::from(b);
        }
    }
    h
}

struct Named<'a> {
    name: &'a str,
    idx: usize,
    hash: u32,
    pref: ClusterPreferences,
}

/// Plans `replicas` over `available` clusters like Federation v1's `Planner.Plan`.
/// `current` and `capacity` are keyed by cluster name; a missing capacity is unbounded.
pub fn plan(
    prefs: &Preferences,
    replicas: i64,
    available: &[&str],
    current: &HashMap<&str, i64>,
    capacity: &HashMap<&str, i64>,
    key: &str,
) -> Plan {
    let cur: Vec<Option<i64>> = available.iter().map(|n| current.get(n).copied()).collect();
    let cap: Vec<Option<i64>> = available.iter().map(|n| capacity.get(n).copied()).collect();
    let (planned, overflow) = plan_indexed(prefs, replicas, available, &cur, &cap, key);
    let mut out = Plan::default();
    for (i, name) in available.iter().enumerate() {
        out.plan.insert((*name).to_owned(), planned[i]);
        if let Some(o) = overflow[i] {
            out.overflow.insert((*name).to_owned(), o);
        }
    }
    out
}

/// [`plan`] over parallel slices (no maps, for the hot path): returns planned replicas and
/// overflow per index of `available`.
pub(crate) fn plan_indexed(
    prefs: &Preferences,
    replicas: i64,
    available: &[&str],
    current: &[Option<i64>],
    capacity: &[Option<i64>],
    key: &str,
) -> (Vec<i64>, Vec<Option<i64>>) {
    let mut result: Vec<i64> = vec![0; available.len()];
    let mut overflow: Vec<Option<i64>> = vec![None; available.len()];
    let mut list: Vec<Named<'_>> = Vec::with_capacity(available.len());
    let mut hasher_input = Vec::with_capacity(64);
    for (idx, &name) in available.iter().enumerate() {
        if let Some(p) = prefs.for_cluster(name) {
            hasher_input.clear();
            hasher_input.extend_from_slice(name.as_bytes());
            hasher_input.extend_from_slice(key.as_bytes());
            list.push(Named {
                name,
                idx,
                hash: fnv1_32(&[&hasher_input]),
                pref: *p,
            });
        }
    }
    list.sort_by(|a, b| {
        b.pref
            .weight
            .cmp(&a.pref.weight)
            .then(a.hash.cmp(&b.hash))
            .then(a.name.cmp(b.name))
    });

    let mut planned: Vec<i64> = vec![0; list.len()];
    let cap = |n: &Named<'_>| capacity[n.idx];
    let mut remaining = replicas;

    for (i, n) in list.iter().enumerate() {
        let mut min = n.pref.min_replicas.min(remaining);
        if let Some(c) = cap(n) {
            min = min.min(c);
        }
        remaining -= min;
        planned[i] = min;
    }

    // Replicas kept from the current layout, to be consumed before new ones are given.
    let mut preallocated: Vec<i64> = vec![0; list.len()];
    if !prefs.rebalance {
        for (i, n) in list.iter().enumerate() {
            if let Some(count) = current[n.idx]
                && count > planned[i]
            {
                let mut target = count;
                if let Some(max) = n.pref.max_replicas {
                    target = target.min(max);
                }
                if let Some(c) = cap(n) {
                    target = target.min(c);
                }
                let extra = (target - planned[i]).min(remaining).max(0);
                remaining -= extra;
                preallocated[i] = extra;
                planned[i] += extra;
            }
        }
    }

    let mut open: Vec<usize> = (0..list.len()).collect();
    let mut modified = true;
    while modified && remaining > 0 {
        modified = false;
        let weight_sum: i64 = open.iter().map(|&i| list[i].pref.weight).sum();
        if weight_sum <= 0 {
            break;
        }
        let this_round = i128::from(remaining);
        let mut still_open = Vec::with_capacity(open.len());
        for &i in &open {
            let n = &list[i];
            let start = planned[i];
            let w = i128::from(n.pref.weight);
            let ws = i128::from(weight_sum);
            // Rounded up, as the original does; i128 avoids its silent overflow.
            let share = i64::try_from((this_round * w + ws - 1) / ws).unwrap_or(i64::MAX);
            let mut extra = share.min(remaining);

            let used_prealloc = extra.min(preallocated[i]);
            preallocated[i] -= used_prealloc;
            extra -= used_prealloc;
            if used_prealloc > 0 {
                modified = true;
            }

            let mut total = start + extra;
            let mut full = false;
            if let Some(max) = n.pref.max_replicas
                && total > max
            {
                total = max;
                full = true;
            }
            if let Some(c) = cap(n)
                && total > c
            {
                overflow[n.idx] = Some(total - c);
                total = c;
                full = true;
            }
            if !full {
                still_open.push(i);
            }
            remaining -= total - start;
            planned[i] = total;
            if total > start {
                modified = true;
            }
        }
        open = still_open;
    }

    for (i, n) in list.iter().enumerate() {
        result[n.idx] = planned[i];
    }
    if !prefs.rebalance {
        for o in &mut overflow {
            *o = o.map(|v| v.min(remaining)).filter(|&v| v > 0);
        }
    }
    (result, overflow)
}

#[cfg(test)]
mod tests;

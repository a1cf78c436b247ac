//! Federated status lag: a workload's last destination copy reports its pods Ready (member
//! watch) → the federated object shows them Ready (federation watch), and of that, the part
//! until its Placement's status shows them. Times are when the benches' watches saw each.

use std::time::Instant;

use super::summary;

/// One workload's moments.
#[derive(Clone, Copy, Debug)]
pub struct Lag {
    /// Its last destination's copy reports every pod Ready.
    pub members_ready: Instant,
    /// Its Placement's status shows every destination's pods Ready (`None`: not seen).
    pub placement_ready: Option<Instant>,
    /// The federated object's status shows every pod Ready.
    pub federated_ready: Instant,
}

impl Lag {
    /// From the three moments, when the two that must be are known.
    pub fn of(
        members_ready: Option<Instant>,
        placement_ready: Option<Instant>,
        federated_ready: Option<Instant>,
    ) -> Option<Self> {
        Some(Lag {
            members_ready: members_ready?,
            placement_ready,
            federated_ready: federated_ready?,
        })
    }
}

fn ms(a: Instant, b: Instant) -> f64 {
    b.saturating_duration_since(a).as_secs_f64() * 1e3
}

/// Prints the status lag of `lags` (p50/p99/max), and the part until the Placement shows
/// it, under `label`.
pub fn report(label: &str, lags: &[Lag]) {
    summary(
        &format!("{label} (member copies Ready -> federated READY)"),
        lags.iter()
            .map(|l| ms(l.members_ready, l.federated_ready))
            .collect(),
    );
    summary(
        &format!("{label}   of which member copies Ready -> Placement status shows them"),
        lags.iter()
            .filter_map(|l| Some(ms(l.members_ready, l.placement_ready?)))
            .collect(),
    );
}

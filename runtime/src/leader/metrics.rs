//! The election's series in a component's registry: whether this replica leads (client-go
//! names it `leader_election_master_status`), and the writes the gate let through or
//! refused, by target (`federation`, `member`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Registry;

type NameLabels = Vec<(&'static str, String)>;
type WriteLabels = Vec<(&'static str, &'static str)>;

/// `<prefix>_leader_election_master_status{name}` and
/// `<prefix>_leader_election_writes_total{target,result}`.
#[derive(Debug, Clone, Default)]
pub struct ElectionMetrics {
    master: Family<NameLabels, Gauge>,
    writes: Family<WriteLabels, Counter>,
}

impl ElectionMetrics {
    /// The series, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "leader_election_master_status",
            "1 while this replica holds the leader Lease named by `name`, else 0",
            m.master.clone(),
        );
        registry.register(
            "leader_election_writes",
            "Writes (anything but GET) by target: admitted while leading, or refused",
            m.writes.clone(),
        );
        m
    }

    pub(super) fn leading(&self, name: &str, leading: bool) {
        self.master
            .get_or_create(&vec![("name", name.to_string())])
            .set(i64::from(leading));
    }

    pub(super) fn write(&self, target: &'static str, admitted: bool) {
        let result = if admitted { "admitted" } else { "refused" };
        self.writes
            .get_or_create(&vec![("target", target), ("result", result)])
            .inc();
    }
}

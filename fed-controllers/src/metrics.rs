//! The process's Prometheus metrics (one registry, prefix `meridian_controllers`).

use meridian_runtime::events::EventMetrics;
use meridian_runtime::leader::ElectionMetrics;
use meridian_runtime::metrics::Registry;
use meridian_runtime::queue::{QueueFamilies, QueueMetrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

type Labels = Vec<(&'static str, String)>;

fn latency_histogram() -> Histogram {
    // 5 ms .. ~10 s: loopback members answer in milliseconds, the probe timeout is seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

fn write_histogram() -> Histogram {
    // 0.5 ms .. ~16 s: member writes on loopback take about a millisecond, timeouts seconds.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

fn lag_histogram() -> Histogram {
    // 5 ms .. ~40 s: from a member change to the federation status that shows it.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Metrics of the workload controller, shared by its central loop and member tasks.
#[derive(Debug)]
pub struct WorkloadMetrics {
    queue_depth: Family<Labels, Gauge>,
    syncs: Family<Labels, Counter>,
    member_writes: Family<Labels, Counter>,
    member_write_latency: Family<Labels, Histogram, fn() -> Histogram>,
    status_lag: Histogram,
    reconciles: Family<Labels, Counter>,
    /// The central queue's series (`workqueue_*{queue="workloads"}`).
    pub queue: QueueMetrics,
    /// Every member queue's series, summed (`workqueue_*{queue="workload-members"}`).
    pub member_queues: QueueMetrics,
}

impl WorkloadMetrics {
    /// Keys waiting: `queue` is `central` (federation side) or `members` (summed over every
    /// member's queue, so the series count does not grow with the fleet).
    pub fn set_queue_depth(&self, central: usize, members: usize) {
        for (q, n) in [("central", central), ("members", members)] {
            self.queue_depth
                .get_or_create(&vec![("queue", q.to_string())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// One member sync of one workload: `created`, `updated`, `drift_reverted`, `removed`,
    /// `unchanged`, `conflict` or `error`.
    pub fn sync(&self, result: &str) {
        self.syncs
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// One write to a member (`verb` create/update/delete; `result` ok or error).
    pub fn member_write(&self, verb: &str, result: &str, seconds: f64) {
        self.member_writes
            .get_or_create(&vec![
                ("verb", verb.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.member_write_latency
            .get_or_create(&vec![("verb", verb.to_string())])
            .observe(seconds);
    }

    /// Time from the change that queued a workload to the federation status write showing it.
    pub fn status_lag(&self, seconds: f64) {
        self.status_lag.observe(seconds);
    }

    /// One federation-side reconcile of a workload (`ok` or `error`).
    pub fn reconcile(&self, result: &str) {
        self.reconciles
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }
}

/// Counters and gauges of the cluster and service controllers, and the workload
/// controller's.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    probes: Family<Labels, Counter>,
    probe_latency: Family<Labels, Histogram, fn() -> Histogram>,
    status_writes: Family<Labels, Counter>,
    lease_writes: Family<Labels, Counter>,
    watch_restarts: Family<Labels, Counter>,
    members: Gauge,
    offline: Gauge,
    mass_failure: Gauge,
    service_syncs: Family<Labels, Counter>,
    service_sync_latency: Histogram,
    service_member_writes: Family<Labels, Counter>,
    service_member_errors: Family<Labels, Counter>,
    /// The service controller's central queue (`workqueue_*{queue="services"}`).
    pub service_queue: QueueMetrics,
    /// Every member queue of the service controller, summed
    /// (`workqueue_*{queue="service-members"}`).
    pub service_member_queues: QueueMetrics,
    /// The Event recorder's counters (`events_total{result}`).
    pub events: EventMetrics,
    /// Leader election: whether this replica leads, writes admitted or refused.
    pub election: ElectionMetrics,
    /// The workload controller's metrics.
    pub workload: std::sync::Arc<WorkloadMetrics>,
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::new("meridian_controllers");
        let queues = QueueFamilies::register(&mut registry);
        let events = EventMetrics::register(&mut registry);
        let election = ElectionMetrics::register(&mut registry);
        let probes: Family<Labels, Counter> = registry.register_default(
            "cluster_probes",
            "Member health probes by cluster and result",
        );
        let probe_latency = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "cluster_probe_duration_seconds",
            "Member probe latency by cluster",
            probe_latency.clone(),
        );
        let status_writes: Family<Labels, Counter> =
            registry.register_default("cluster_status_writes", "Cluster status patches by result");
        let lease_writes: Family<Labels, Counter> = registry.register_default(
            "cluster_lease_writes",
            "Member Lease renewals (and creations) by result",
        );
        let watch_restarts: Family<Labels, Counter> = registry.register_default(
            "cluster_watch_restarts",
            "Member node/pod watch errors and restarts by cluster, resource and cause",
        );
        let members: Gauge = registry.register_default("clusters", "Member clusters known");
        let offline: Gauge =
            registry.register_default("clusters_offline", "Member clusters Offline");
        let mass_failure: Gauge =
            registry.register_default("mass_failure", "1 while the mass-failure guard is engaged");
        let service_syncs: Family<Labels, Counter> = registry.register_default(
            "service_syncs",
            "Service controller reconciles by result (ok, error)",
        );
        let service_sync_latency = latency_histogram();
        registry.register(
            "service_sync_duration_seconds",
            "Service controller reconcile latency",
            service_sync_latency.clone(),
        );
        let service_member_writes: Family<Labels, Counter> = registry.register_default(
            "service_member_writes",
            "Service controller writes into members by cluster, resource and operation",
        );
        let service_member_errors: Family<Labels, Counter> = registry.register_default(
            "service_member_errors",
            "Failed service controller syncs in members by cluster",
        );
        let workload = WorkloadMetrics {
            queue_depth: Family::default(),
            syncs: Family::default(),
            member_writes: Family::default(),
            member_write_latency: Family::new_with_constructor(
                write_histogram as fn() -> Histogram,
            ),
            status_lag: lag_histogram(),
            reconciles: Family::default(),
            queue: queues.queue("workloads"),
            member_queues: queues.queue("workload-members"),
        };
        registry.register(
            "workload_queue_depth",
            "Workload keys waiting, central queue and all member queues summed",
            workload.queue_depth.clone(),
        );
        registry.register(
            "workload_member_syncs",
            "Member syncs of one workload by result",
            workload.syncs.clone(),
        );
        registry.register(
            "workload_member_writes",
            "Writes to member clusters by verb and result",
            workload.member_writes.clone(),
        );
        registry.register(
            "workload_member_write_duration_seconds",
            "Latency of writes to member clusters by verb",
            workload.member_write_latency.clone(),
        );
        registry.register(
            "workload_status_lag_seconds",
            "From the change that queued a workload to the federation status write showing it",
            workload.status_lag.clone(),
        );
        registry.register(
            "workload_reconciles",
            "Federation-side reconciles of a workload by result",
            workload.reconciles.clone(),
        );
        Metrics {
            registry,
            probes,
            probe_latency,
            status_writes,
            lease_writes,
            watch_restarts,
            members,
            offline,
            mass_failure,
            service_syncs,
            service_sync_latency,
            service_member_writes,
            service_member_errors,
            service_queue: queues.queue("services"),
            service_member_queues: queues.queue("service-members"),
            events,
            election,
            workload: std::sync::Arc::new(workload),
        }
    }

    /// Records one service controller reconcile (`ok` or `error`).
    pub fn service_sync(&self, result: &str, seconds: f64) {
        self.service_syncs
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
        self.service_sync_latency.observe(seconds);
    }

    /// Records one write of the service controller into a member.
    pub fn service_member_write(&self, cluster: &str, resource: &str, op: &str) {
        self.service_member_writes
            .get_or_create(&vec![
                ("cluster", cluster.to_string()),
                ("resource", resource.to_string()),
                ("op", op.to_string()),
            ])
            .inc();
    }

    /// Records one failed service controller sync in a member.
    pub fn service_member_error(&self, cluster: &str) {
        self.service_member_errors
            .get_or_create(&vec![("cluster", cluster.to_string())])
            .inc();
    }

    /// Records one probe.
    pub fn probe(&self, cluster: &str, result: &str, seconds: f64) {
        self.probes
            .get_or_create(&vec![
                ("cluster", cluster.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.probe_latency
            .get_or_create(&vec![("cluster", cluster.to_string())])
            .observe(seconds);
    }

    /// Records one status patch (`ok` or `error`).
    pub fn status_write(&self, result: &str) {
        self.status_writes
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// Records one member Lease renewal (`ok` or `error`).
    pub fn lease_write(&self, result: &str) {
        self.lease_writes
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// Records a watch error or restart.
    pub fn watch_restart(&self, cluster: &str, resource: &str, cause: &str) {
        self.watch_restarts
            .get_or_create(&vec![
                ("cluster", cluster.to_string()),
                ("resource", resource.to_string()),
                ("cause", cause.to_string()),
            ])
            .inc();
    }

    /// Fleet-level gauges from the mass-failure guard.
    pub fn set_fleet(&self, members: usize, offline: usize, mass_failure: bool) {
        self.members.set(i64::try_from(members).unwrap_or(i64::MAX));
        self.offline.set(i64::try_from(offline).unwrap_or(i64::MAX));
        self.mass_failure.set(i64::from(mass_failure));
    }

    /// Drops a deleted cluster's series so the registry does not grow with churn.
    pub fn forget_cluster(&self, cluster: &str) {
        let c = cluster.to_string();
        for result in [
            "success",
            "Unreachable",
            "Timeout",
            "ProbeFailed",
            "Unauthorized",
            "TLSError",
            "InvalidConfig",
        ] {
            self.probes.remove(&vec![
                ("cluster", c.clone()),
                ("result", result.to_string()),
            ]);
        }
        self.probe_latency.remove(&vec![("cluster", c.clone())]);
        for resource in ["nodes", "pods"] {
            for cause in ["error", "idle", "recovered", "ended"] {
                self.watch_restarts.remove(&vec![
                    ("cluster", c.clone()),
                    ("resource", resource.to_string()),
                    ("cause", cause.to_string()),
                ]);
            }
        }
        for resource in ["services", "endpointslices", "configmaps"] {
            for op in ["create", "update", "delete"] {
                self.service_member_writes.remove(&vec![
                    ("cluster", c.clone()),
                    ("resource", resource.to_string()),
                    ("op", op.to_string()),
                ]);
            }
        }
        self.service_member_errors.remove(&vec![("cluster", c)]);
    }
}

meridian_runtime::component_metrics!(Metrics);

#[cfg(test)]
mod tests {
    use meridian_runtime::metrics::Exposition as _;

    use super::*;

    #[test]
    fn exposition_has_prefix_and_labels() {
        let m = Metrics::new();
        m.probe("eu-1", "success", 0.01);
        m.status_write("ok");
        m.lease_write("ok");
        m.watch_restart("eu-1", "nodes", "error");
        m.service_sync("ok", 0.01);
        m.service_member_write("eu-1", "services", "create");
        m.service_member_error("eu-1");
        let text = m.encode();
        assert!(
            text.contains(
                "meridian_controllers_cluster_probes_total{cluster=\"eu-1\",result=\"success\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("meridian_controllers_cluster_probe_duration_seconds_bucket"),
            "{text}"
        );
        assert!(
            text.contains("meridian_controllers_cluster_status_writes_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("meridian_controllers_cluster_lease_writes_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("meridian_controllers_service_syncs_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("meridian_controllers_service_member_writes_total{cluster=\"eu-1\",resource=\"services\",op=\"create\"} 1"),
            "{text}"
        );
        m.forget_cluster("eu-1");
        assert!(!m.encode().contains("cluster=\"eu-1\""));
    }

    #[test]
    fn workload_series() {
        let m = Metrics::new();
        m.workload.set_queue_depth(3, 40);
        m.workload.sync("created");
        m.workload.member_write("create", "ok", 0.002);
        m.workload.status_lag(0.3);
        m.workload.reconcile("ok");
        let text = m.encode();
        for want in [
            "meridian_controllers_workload_queue_depth{queue=\"central\"} 3",
            "meridian_controllers_workload_queue_depth{queue=\"members\"} 40",
            "meridian_controllers_workload_member_syncs_total{result=\"created\"} 1",
            "meridian_controllers_workload_member_writes_total{verb=\"create\",result=\"ok\"} 1",
            "meridian_controllers_workload_member_write_duration_seconds_count{verb=\"create\"} 1",
            "meridian_controllers_workload_status_lag_seconds_count 1",
            "meridian_controllers_workload_reconciles_total{result=\"ok\"} 1",
        ] {
            assert!(text.contains(want), "{want} missing in\n{text}");
        }
    }
}

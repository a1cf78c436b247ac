//! The scheduler's Prometheus metrics (one registry, prefix `meridian_scheduler`).

use meridian_runtime::events::EventMetrics;
use meridian_runtime::leader::ElectionMetrics;
use meridian_runtime::metrics::Registry;
use meridian_runtime::queue::{QueueFamilies, QueueMetrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

type Labels = Vec<(&'static str, &'static str)>;

/// Counters, gauges and latencies of the scheduling loop.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<Labels, Counter>,
    writes: Family<Labels, Counter>,
    evictions: Family<Labels, Counter>,
    /// The Event recorder's counters (`events_total{result}`).
    pub events: EventMetrics,
    /// The work queue's series (`workqueue_*{queue="workloads"}`).
    pub queue: QueueMetrics,
    /// Leader election: whether this replica leads, writes admitted or refused.
    pub election: ElectionMetrics,
    watch_errors: Family<Labels, Counter>,
    reconcile_seconds: Histogram,
    queue_depth: Gauge,
    queue_dropped: Gauge,
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::new("meridian_scheduler");
        let reconciles: Family<Labels, Counter> = registry.register_default(
            "reconciles",
            "Workload decisions by result (unchanged, written, requeued, error)",
        );
        let writes: Family<Labels, Counter> = registry.register_default(
            "placement_writes",
            "Placement writes by operation and result",
        );
        let evictions: Family<Labels, Counter> = registry.register_default(
            "evictions",
            "Moves away from offline clusters: allowed or throttled by the rate limit",
        );
        let events = EventMetrics::register(&mut registry);
        let queue = QueueFamilies::register(&mut registry).queue("workloads");
        let election = ElectionMetrics::register(&mut registry);
        let watch_errors: Family<Labels, Counter> = registry.register_default(
            "watch_errors",
            "Watch stream errors by kind (the watch backs off and resumes)",
        );
        // 100 µs .. ~3 s: a decision is microseconds, a write round trip milliseconds.
        let reconcile_seconds = Histogram::new(exponential_buckets(0.0001, 2.5, 12));
        registry.register(
            "reconcile_duration_seconds",
            "Time to decide and write one workload",
            reconcile_seconds.clone(),
        );
        let queue_depth: Gauge =
            registry.register_default("queue_depth", "Workloads waiting to be decided");
        let queue_dropped: Gauge = registry.register_default(
            "queue_dropped",
            "Workload keys dropped because the queue was full (picked up by the resync)",
        );
        Self {
            registry,
            reconciles,
            writes,
            evictions,
            events,
            queue,
            election,
            watch_errors,
            reconcile_seconds,
            queue_depth,
            queue_dropped,
        }
    }

    /// Counts a reconcile.
    pub fn reconcile(&self, result: &'static str, seconds: f64) {
        self.reconciles
            .get_or_create(&vec![("result", result)])
            .inc();
        self.reconcile_seconds.observe(seconds);
    }

    /// Counts a Placement write.
    pub fn write(&self, op: &'static str, result: &'static str) {
        self.writes
            .get_or_create(&vec![("op", op), ("result", result)])
            .inc();
    }

    /// Counts an eviction decision.
    pub fn eviction(&self, result: &'static str) {
        self.evictions
            .get_or_create(&vec![("result", result)])
            .inc();
    }

    /// Counts a watch error.
    pub fn watch_error(&self, kind: &'static str) {
        self.watch_errors.get_or_create(&vec![("kind", kind)]).inc();
    }

    /// Sets the queue gauges.
    pub fn queue(&self, depth: usize, dropped: u64) {
        self.queue_depth
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
        self.queue_dropped
            .set(i64::try_from(dropped).unwrap_or(i64::MAX));
    }
}

meridian_runtime::component_metrics!(Metrics);

#[cfg(test)]
mod tests {
    use meridian_runtime::metrics::Exposition as _;

    #[test]
    fn encodes_with_prefix() {
        let m = super::Metrics::new();
        m.reconcile("written", 0.001);
        m.write("create", "ok");
        m.queue(3, 1);
        let text = m.encode();
        assert!(
            text.contains("meridian_scheduler_reconciles_total{result=\"written\"} 1"),
            "{text}"
        );
        assert!(text.contains("meridian_scheduler_queue_depth 3"), "{text}");
    }
}

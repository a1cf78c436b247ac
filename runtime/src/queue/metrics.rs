//! The work queues' metrics: `<prefix>_workqueue_depth`, `_adds_total`, `_retries_total`
//! and `_dropped_total`, labelled by queue name (client-go's workqueue metrics, by name).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// The metric families every queue of a process reports into.
#[derive(Debug, Clone, Default)]
pub struct QueueFamilies {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    retries: Family<Labels, Counter>,
    dropped: Family<Labels, Counter>,
}

impl QueueFamilies {
    /// The families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let f = Self::default();
        registry.register(
            "workqueue_depth",
            "Keys waiting in a work queue",
            f.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Keys added to a work queue (not counting keys already waiting)",
            f.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Keys queued again after a failure, with back-off",
            f.retries.clone(),
        );
        registry.register(
            "workqueue_dropped",
            "Keys not queued because the queue was full",
            f.dropped.clone(),
        );
        f
    }

    /// The series of the queue called `name`. Queues given the same name (one per member
    /// cluster, say) add up in the same series.
    pub fn queue(&self, name: &'static str) -> QueueMetrics {
        let l = vec![("queue", name)];
        QueueMetrics {
            depth: self.depth.get_or_create(&l).clone(),
            adds: self.adds.get_or_create(&l).clone(),
            retries: self.retries.get_or_create(&l).clone(),
            dropped: self.dropped.get_or_create(&l).clone(),
        }
    }
}

/// One queue's series (the default reports nowhere).
#[derive(Debug, Clone, Default)]
pub struct QueueMetrics {
    pub(super) depth: Gauge,
    pub(super) adds: Counter,
    pub(super) retries: Counter,
    pub(super) dropped: Counter,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_of_one_name_share_their_series() {
        let mut r = Registry::new("meridian_test");
        let f = QueueFamilies::register(&mut r);
        let (a, b) = (f.queue("members"), f.queue("members"));
        a.depth.inc();
        b.depth.inc();
        a.adds.inc();
        let text = r.encode();
        for want in [
            "meridian_test_workqueue_depth{queue=\"members\"} 2",
            "meridian_test_workqueue_adds_total{queue=\"members\"} 1",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
    }
}

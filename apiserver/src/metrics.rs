//! Prometheus metrics of the API server: requests by verb/resource/code, latency, watchers,
//! storage commit latency.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Kubernetes verb (get, list, watch, create, update, patch, delete, ...).
    pub verb: String,
    /// Resource plural, or the non-resource path.
    pub resource: String,
    /// HTTP status code.
    pub code: u16,
}

/// Labels of a latency observation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// Kubernetes verb.
    pub verb: String,
    /// Resource plural.
    pub resource: String,
}

/// All metrics of one server.
pub struct Metrics {
    registry: Registry,
    /// Requests served.
    pub requests: Family<RequestLabels, Counter>,
    /// Request latency (seconds; watches excluded).
    pub latency: Family<LatencyLabels, Histogram>,
    /// Open watches.
    pub watchers: Gauge<i64, AtomicI64>,
    /// Latency of store writes (seconds).
    pub storage_write: Histogram,
}

fn buckets() -> impl Iterator<Item = f64> {
    [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    ]
    .into_iter()
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("meridian_apiserver");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency =
            Family::<LatencyLabels, Histogram>::new_with_constructor(|| Histogram::new(buckets()));
        let watchers = Gauge::<i64, AtomicI64>::default();
        let storage_write = Histogram::new(buckets());
        registry.register(
            "requests",
            "API requests by verb, resource and code",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "API request latency by verb and resource (watches excluded)",
            latency.clone(),
        );
        registry.register("watchers", "Open watch streams", watchers.clone());
        registry.register(
            "storage_write_duration_seconds",
            "Latency of durable store writes",
            storage_write.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            watchers,
            storage_write,
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A [`Storage`](meridian_store::Storage) wrapper that records write latency.
pub struct InstrumentedStore {
    inner: std::sync::Arc<dyn meridian_store::Storage>,
    writes: Histogram,
}

impl InstrumentedStore {
    /// Wraps `inner`, observing into `metrics.storage_write`.
    pub fn new(inner: std::sync::Arc<dyn meridian_store::Storage>, metrics: &Metrics) -> Self {
        Self {
            inner,
            writes: metrics.storage_write.clone(),
        }
    }

    async fn timed<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        let t = std::time::Instant::now();
        let r = f.await;
        self.writes.observe(t.elapsed().as_secs_f64());
        r
    }
}

#[async_trait::async_trait]
impl meridian_store::Storage for InstrumentedStore {
    async fn get(&self, key: &str) -> meridian_store::Result<Option<meridian_store::KeyValue>> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str) -> meridian_store::Result<meridian_store::ListResult> {
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        options: &meridian_store::ListOptions,
    ) -> meridian_store::Result<meridian_store::ListResult> {
        self.inner.list_page(prefix, options).await
    }
    async fn create(
        &self,
        key: &str,
        value: bytes::Bytes,
    ) -> meridian_store::Result<meridian_store::KeyValue> {
        self.timed(self.inner.create(key, value)).await
    }
    async fn update(
        &self,
        key: &str,
        value: bytes::Bytes,
        expected: meridian_store::Revision,
    ) -> meridian_store::Result<meridian_store::KeyValue> {
        self.timed(self.inner.update(key, value, expected)).await
    }
    async fn delete(
        &self,
        key: &str,
        expected: Option<meridian_store::Revision>,
    ) -> meridian_store::Result<meridian_store::DeleteResult> {
        self.timed(self.inner.delete(key, expected)).await
    }
    async fn watch(
        &self,
        prefix: &str,
        after: meridian_store::Revision,
    ) -> meridian_store::Result<meridian_store::WatchStream> {
        self.inner.watch(prefix, after).await
    }
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: meridian_store::Revision,
        progress: Option<std::time::Duration>,
    ) -> meridian_store::Result<meridian_store::ProgressWatchStream> {
        self.inner
            .watch_with_progress(prefix, after, progress)
            .await
    }
    fn current_revision(&self) -> meridian_store::Revision {
        self.inner.current_revision()
    }
    async fn latest_revision(&self) -> meridian_store::Result<meridian_store::Revision> {
        self.inner.latest_revision().await
    }
    async fn compact(&self, revision: meridian_store::Revision) -> meridian_store::Result<()> {
        self.inner.compact(revision).await
    }
}

//! The agent's Prometheus metrics (`meridian_lb_*`) and the handles the proxies keep per
//! Service so the request path does not look label sets up.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of per-Service series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceLabels {
    /// Namespace.
    pub namespace: String,
    /// Service.
    pub service: String,
}

/// Labels of per-backend series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    /// `ip:port` of a local endpoint or `cluster/<name>` of a remote agent.
    pub backend: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// Per-Service metric handles, cloned into each route.
#[derive(Clone, Debug)]
pub struct RouteMetrics {
    /// Requests (HTTP) and connections (TCP) received.
    pub requests: Counter,
    /// Requests answered with an error by the agent itself (no backend, upstream failure).
    pub errors: Counter,
    /// Time to the upstream's response head (HTTP) or connection setup (TCP), seconds.
    pub latency: Histogram,
}

/// All of the agent's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<ServiceLabels, Counter>,
    errors: Family<ServiceLabels, Counter>,
    latency: Family<ServiceLabels, Histogram, fn() -> Histogram>,
    /// Backend passes active checks and is not ejected (1) or not (0).
    pub upstream_healthy: Family<BackendLabels, Gauge>,
    /// Configurations rejected.
    pub config_errors: Counter,
    /// Retries on another backend.
    pub retries: Counter,
    /// Passive outlier ejections.
    pub ejections: Counter,
    /// Listen ports that could not be bound.
    pub listen_errors: Counter,
    /// HTTPS-listener connections closed without a route (no ClientHello, unknown name).
    pub tls_refused: Counter,
    /// Client requests refused as malformed, ambiguous or over a limit (HTTP/1).
    pub refused: Counter,
    /// Client connections closed because the connection limit was reached.
    pub connections_refused: Counter,
    /// UDP datagrams dropped (no backend, full flow table, send errors).
    pub udp_dropped: Counter,
    /// The DNS responder's counters.
    pub dns: crate::dns::DnsMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("meridian_lb");
        let requests = Family::<ServiceLabels, Counter>::default();
        let errors = Family::<ServiceLabels, Counter>::default();
        let latency = Family::<ServiceLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let upstream_healthy = Family::<BackendLabels, Gauge>::default();
        let config_errors = Counter::default();
        let retries = Counter::default();
        let ejections = Counter::default();
        let listen_errors = Counter::default();
        let tls_refused = Counter::default();
        let refused = Counter::default();
        let connections_refused = Counter::default();
        let udp_dropped = Counter::default();
        registry.register(
            "tls_refused",
            "HTTPS-listener connections closed without a route",
            tls_refused.clone(),
        );
        registry.register(
            "http_refused",
            "HTTP/1 requests refused as malformed, ambiguous or over a limit",
            refused.clone(),
        );
        registry.register(
            "connections_refused",
            "Client connections closed at the connection limit",
            connections_refused.clone(),
        );
        registry.register(
            "udp_dropped",
            "UDP datagrams dropped (no backend, flow table full, send error)",
            udp_dropped.clone(),
        );
        registry.register(
            "requests",
            "HTTP requests and TCP connections received",
            requests.clone(),
        );
        registry.register(
            "errors",
            "Requests and connections the agent failed (no backend, upstream error)",
            errors.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time to the upstream response head or TCP connection",
            latency.clone(),
        );
        registry.register(
            "upstream_healthy",
            "Backend passes active health checks and is not ejected",
            upstream_healthy.clone(),
        );
        registry.register(
            "config_errors",
            "lb-agent configurations rejected",
            config_errors.clone(),
        );
        registry.register("retries", "Retries on another backend", retries.clone());
        registry.register(
            "ejections",
            "Backends ejected by passive outlier detection",
            ejections.clone(),
        );
        registry.register(
            "listen_errors",
            "Listen ports that could not be bound",
            listen_errors.clone(),
        );
        let dns = crate::dns::DnsMetrics::new();
        dns.register(&mut registry);
        Self {
            registry,
            dns,
            requests,
            errors,
            latency,
            upstream_healthy,
            config_errors,
            retries,
            ejections,
            listen_errors,
            tls_refused,
            refused,
            connections_refused,
            udp_dropped,
        }
    }
}

impl Metrics {
    /// The handles of one Service.
    pub fn route(&self, namespace: &str, service: &str) -> RouteMetrics {
        let labels = ServiceLabels {
            namespace: namespace.to_string(),
            service: service.to_string(),
        };
        RouteMetrics {
            requests: self.requests.get_or_create(&labels).clone(),
            errors: self.errors.get_or_create(&labels).clone(),
            latency: self.latency.get_or_create(&labels).clone(),
        }
    }

    /// Sets a backend's health gauge.
    pub fn set_upstream(&self, backend: String, healthy: bool) {
        self.upstream_healthy
            .get_or_create(&BackendLabels { backend })
            .set(i64::from(healthy));
    }

    /// The exposition text.
    pub fn encode_text(&self) -> String {
        meridian_runtime::metrics::Exposition::encode(self)
    }

    /// Drops a backend's health series.
    pub fn remove_upstream(&self, backend: String) {
        self.upstream_healthy.remove(&BackendLabels { backend });
    }
}

impl meridian_runtime::metrics::Exposition for Metrics {
    fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(%error, "encoding metrics");
        }
        out
    }
}

//! One prometheus-client registry per process, named by a per-component prefix
//! (`meridian_scheduler_…`), and the text [`endpoints`](crate::endpoints) serves from it.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Metric;

/// Anything that renders the process's metrics in the Prometheus/OpenMetrics text format.
pub trait Exposition: Send + Sync {
    /// The exposition text.
    fn encode(&self) -> String;
}

/// A component's registry: every metric registered here is named `<prefix>_<name>`.
#[derive(Debug)]
pub struct Registry {
    inner: prometheus_client::registry::Registry,
}

impl Registry {
    /// An empty registry whose metrics are named `<prefix>_…`.
    pub fn new(prefix: &str) -> Self {
        Self {
            inner: prometheus_client::registry::Registry::with_prefix(prefix),
        }
    }

    /// Registers `metric` as `<prefix>_<name>` (counters get `_total`).
    pub fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.inner.register(name, help, metric);
    }

    /// A new `M` registered as `<prefix>_<name>`: the handle to count or set it with.
    pub fn register_default<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        let metric = M::default();
        self.register(name, help, metric.clone());
        metric
    }

    /// The underlying registry, for what [`Registry::register`] does not cover.
    pub fn inner_mut(&mut self) -> &mut prometheus_client::registry::Registry {
        &mut self.inner
    }

    /// The OpenMetrics text of every registered metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an error would be a bug in an encoder.
        if let Err(error) = encode(&mut out, &self.inner) {
            tracing::warn!(%error, "encoding metrics");
            out.clear();
        }
        out
    }
}

impl AsRef<Registry> for Registry {
    fn as_ref(&self) -> &Registry {
        self
    }
}

/// A component's metrics are exposed through the registry they were registered in.
impl<T: AsRef<Registry> + Send + Sync> Exposition for T {
    fn encode(&self) -> String {
        self.as_ref().encode()
    }
}

/// Declares a component's metrics type: exposed through the [`Registry`] in its `registry`
/// field, and `Default` as its `new()` (a fresh registry with every metric registered).
#[macro_export]
macro_rules! component_metrics {
    ($metrics:ty) => {
        impl ::std::convert::AsRef<$crate::metrics::Registry> for $metrics {
            fn as_ref(&self) -> &$crate::metrics::Registry {
                &self.registry
            }
        }

        impl ::std::default::Default for $metrics {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

/// Labels of a counter counted by outcome (`result="sent"`).
pub type ResultLabels = Vec<(&'static str, &'static str)>;

/// A counter family labelled by `result`, registered under `name`.
pub fn results(registry: &mut Registry, name: &str, help: &str) -> Family<ResultLabels, Counter> {
    registry.register_default(name, help)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix() {
        let mut r = Registry::new("meridian_test");
        let f = results(&mut r, "things", "Things by result");
        f.get_or_create(&vec![("result", "ok")]).inc();
        let text = Exposition::encode(&r);
        assert!(
            text.contains("meridian_test_things_total{result=\"ok\"} 1"),
            "{text}"
        );
    }

    struct Component {
        registry: Registry,
        hits: Counter,
    }

    impl Component {
        fn new() -> Self {
            let mut registry = Registry::new("meridian_component");
            let hits = registry.register_default("hits", "Hits");
            Self { registry, hits }
        }
    }

    crate::component_metrics!(Component);

    #[test]
    fn a_component_is_exposed_through_its_registry_and_defaults_to_new() {
        let c = Component::default();
        c.hits.inc();
        let text = Exposition::encode(&c);
        assert!(text.contains("meridian_component_hits_total 1"), "{text}");
    }
}

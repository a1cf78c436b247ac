//! The one Kubernetes Event recorder: components record Events about the objects they act
//! on (`kubectl describe` shows them), and a background writer creates them as core/v1
//! Events, a repeat raising the count of the Event already written ([`correlate`]).
//!
//! Recording never blocks a loop and never piles up: Events wait in a bounded buffer, a
//! full buffer drops the newest and counts it, an optional rate limit throttles a burst
//! (counted too), and at most `concurrency` writes are in flight. Events are best effort;
//! conditions and status stay the authoritative record.

pub mod correlate;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::Report;
use crate::metrics::{Registry, ResultLabels};
use crate::rate::TokenBucket;
use crate::sync::lock;
use correlate::{Correlator, Key, Outcome, Write, count_of};

/// Whether an Event reports normal progress or a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What an Event says, about which object.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// The object (its namespace is the Event's; cluster-scoped objects' Events go to the
    /// recorder's default namespace).
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub type_: EventType,
    /// A short CamelCase reason (`Scheduled`, `SyncFailed`).
    pub reason: String,
    /// What happened, for people (cut to 1 KiB).
    pub message: String,
}

/// The recorder's counters: `<prefix>_events_total{result}`, where result is `sent`
/// (created), `updated` (a repeat's count written), `dropped` (buffer full), `throttled`
/// (over the rate) or `failed`.
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    results: Family<ResultLabels, Counter>,
}

impl EventMetrics {
    /// The counters, registered in `registry` as `events`.
    pub fn register(registry: &mut Registry) -> Self {
        Self {
            results: crate::metrics::results(
                registry,
                "events",
                "Kubernetes Events: sent, updated (a repeat counted), dropped (buffer full), throttled (over the rate) or failed",
            ),
        }
    }

    fn count(&self, result: &'static str) {
        self.results.get_or_create(&vec![("result", result)]).inc();
    }
}

/// How the recorder writes.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Events waiting to be written at most; more are dropped.
    pub buffer: usize,
    /// Writes in flight at most.
    pub concurrency: usize,
    /// Deadline of one write.
    pub timeout: Duration,
    /// Distinct Events remembered to count repeats.
    pub cache: usize,
    /// Where Events about cluster-scoped objects go.
    pub default_namespace: String,
    /// Admission of Events (`None`: every Event that fits in the buffer).
    pub limit: Option<TokenBucket>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            buffer: 4096,
            concurrency: 16,
            timeout: Duration::from_secs(10),
            cache: 4096,
            default_namespace: "default".into(),
            limit: None,
        }
    }
}

struct Recorded {
    component: Arc<str>,
    spec: EventSpec,
    at: jiff::Timestamp,
}

struct Shared {
    tx: mpsc::Sender<Recorded>,
    limit: Option<Mutex<TokenBucket>>,
    metrics: EventMetrics,
}

/// Records Events for one component; clones (and [`Recorder::for_component`]) share one
/// buffer and writer. The writer stops once every recorder is dropped.
#[derive(Clone)]
pub struct Recorder {
    shared: Arc<Shared>,
    component: Arc<str>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("component", &self.component)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder writing through `client` as `component` (`reportingComponent`); its
    /// writer runs in a task of its own.
    pub fn spawn(
        client: Client,
        component: &str,
        settings: Settings,
        metrics: EventMetrics,
    ) -> Self {
        let (tx, rx) = mpsc::channel(settings.buffer.max(1));
        let shared = Arc::new(Shared {
            tx,
            limit: settings.limit.clone().map(Mutex::new),
            metrics: metrics.clone(),
        });
        tokio::spawn(write_loop(client, rx, settings, metrics));
        Self {
            shared,
            component: Arc::from(component),
        }
    }

    /// A recorder for another component, sharing this one's buffer and writer.
    pub fn for_component(&self, component: &str) -> Self {
        Self {
            shared: self.shared.clone(),
            component: Arc::from(component),
        }
    }

    fn admit(&self) -> bool {
        let admitted = self
            .shared
            .limit
            .as_ref()
            .is_none_or(|bucket| lock(bucket).try_take(tokio::time::Instant::now()).is_ok());
        if !admitted {
            self.shared.metrics.count("throttled");
        }
        admitted
    }

    fn recorded(&self, spec: EventSpec) -> Recorded {
        Recorded {
            component: self.component.clone(),
            spec,
            at: jiff::Timestamp::now(),
        }
    }

    /// Records an Event without waiting: dropped (and counted) when over the rate or the
    /// buffer is full.
    pub fn record(&self, spec: EventSpec) {
        if !self.admit() {
            return;
        }
        if self.shared.tx.try_send(self.recorded(spec)).is_err() {
            self.shared.metrics.count("dropped");
        }
    }

    /// Records an Event, waiting for room in the buffer (for a task that batches Events
    /// and may as well wait: its batches grow meanwhile). Dropped only when over the rate.
    pub async fn record_when_room(&self, spec: EventSpec) {
        if !self.admit() {
            return;
        }
        if self.shared.tx.send(self.recorded(spec)).await.is_err() {
            self.shared.metrics.count("dropped");
        }
    }
}

/// Why one write failed (logged and counted; nothing propagates).
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("writing event")]
    Api(#[source] kube::Error),
    #[error("writing event: timed out")]
    Timeout,
}

async fn send(client: &Client, write: &Write, timeout: Duration) -> Result<(), WriteError> {
    let request = async {
        match write {
            Write::Create(event) => {
                let ns = event.metadata.namespace.as_deref().unwrap_or_default();
                let api: Api<Event> = Api::namespaced(client.clone(), ns);
                api.create(&PostParams::default(), event).await.map(drop)
            }
            Write::Count {
                namespace,
                name,
                count,
                last,
            } => {
                let api: Api<Event> = Api::namespaced(client.clone(), namespace);
                let patch = serde_json::json!({"count": count, "lastTimestamp": Time(*last)});
                api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(drop)
            }
        }
    };
    match tokio::time::timeout(timeout, request).await {
        Ok(r) => r.map_err(WriteError::Api),
        Err(_) => Err(WriteError::Timeout),
    }
}

async fn write_loop(
    client: Client,
    mut rx: mpsc::Receiver<Recorded>,
    settings: Settings,
    metrics: EventMetrics,
) {
    let mut correlator = Correlator::new(settings.cache, &settings.default_namespace);
    let mut in_flight: JoinSet<(Key, i32, bool, Outcome)> = JoinSet::new();
    let concurrency = settings.concurrency.max(1);
    let spawn = |in_flight: &mut JoinSet<_>, key: Key, write: Write| {
        let (client, timeout) = (client.clone(), settings.timeout);
        in_flight.spawn(async move {
            let count = count_of(&write);
            let create = matches!(write, Write::Create(_));
            let outcome = match send(&client, &write, timeout).await {
                Ok(()) => Outcome::Written,
                Err(WriteError::Api(kube::Error::Api(s))) if !create && s.code == 404 => {
                    Outcome::Gone
                }
                Err(error) => {
                    tracing::debug!(error = %Report(&error), "event not written");
                    Outcome::Failed
                }
            };
            (key, count, create, outcome)
        });
    };
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                let Ok((key, count, create, outcome)) = done else { continue };
                match (outcome, create) {
                    (Outcome::Written, true) => metrics.count("sent"),
                    (Outcome::Written, false) => metrics.count("updated"),
                    // Created again next, and counted then.
                    (Outcome::Gone, _) => {}
                    (Outcome::Failed, _) => metrics.count("failed"),
                }
                if let Some(next) = correlator.finished(&key, count, outcome) {
                    spawn(&mut in_flight, key, next);
                }
            }
            recorded = rx.recv(), if open && in_flight.len() < concurrency => {
                let Some(r) = recorded else {
                    open = false;
                    continue;
                };
                if let Some((key, write)) = correlator.observe(&r.component, r.spec, r.at) {
                    spawn(&mut in_flight, key, write);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{Answer, Request, ScriptedApi};

    /// An API that creates every Event (echoing it) and answers count patches with
    /// `patch_status`.
    fn api(patch_status: u16) -> ScriptedApi {
        ScriptedApi::new(move |req| match req.method {
            http::Method::PATCH if patch_status != 200 => Answer::failure(patch_status),
            http::Method::POST => Answer::json(201, req.body.clone()),
            _ => Answer::json(200, req.body.clone()),
        })
    }

    fn spec(message: &str) -> EventSpec {
        EventSpec {
            regarding: ObjectReference {
                api_version: Some("apps/v1".into()),
                kind: Some("Deployment".into()),
                namespace: Some("shop".into()),
                name: Some("web".into()),
                ..Default::default()
            },
            type_: EventType::Normal,
            reason: "Pushed".into(),
            message: message.into(),
        }
    }

    async fn wait_for(api: &ScriptedApi, n: usize) -> Vec<Request> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let s = api.requests();
            if s.len() >= n {
                return s;
            }
            assert!(tokio::time::Instant::now() < deadline, "only {s:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn repeats_become_one_event_with_a_count() {
        let api = api(200);
        let client = api.client();
        let mut registry = Registry::new("meridian_test");
        let metrics = EventMetrics::register(&mut registry);
        let r = Recorder::spawn(client, "meridian-test", Settings::default(), metrics);
        for _ in 0..3 {
            r.record(spec("created shop/web in sim-1"));
        }
        // One create, then count writes until the API holds 3.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let writes = loop {
            let s = api.requests();
            let last = s.last().and_then(|r| r.body["count"].as_i64());
            if last == Some(3) {
                break s;
            }
            assert!(tokio::time::Instant::now() < deadline, "{s:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let posts: Vec<_> = writes
            .iter()
            .filter(|r| r.method == http::Method::POST)
            .collect();
        assert_eq!(posts.len(), 1, "{writes:?}");
        let body = &posts[0].body;
        assert_eq!(posts[0].path, "/api/v1/namespaces/shop/events");
        assert_eq!(body["count"], 1);
        assert_eq!(body["reportingComponent"], "meridian-test");
        assert_eq!(body["involvedObject"]["name"], "web");
        let name = body["metadata"]["name"].as_str().expect("name");
        for w in &writes[1..] {
            assert_eq!(
                (w.method.as_str(), w.path.as_str()),
                (
                    "PATCH",
                    format!("/api/v1/namespaces/shop/events/{name}").as_str()
                )
            );
        }
        // Another message is another Event.
        r.record(spec("created shop/web in sim-2"));
        let writes = wait_for(&api, writes.len() + 1).await;
        assert_eq!(writes.last().map(|w| w.method.as_str()), Some("POST"));
        assert!(
            registry
                .encode()
                .contains("meridian_test_events_total{result=\"sent\"} 2")
        );
    }

    #[tokio::test]
    async fn a_vanished_event_is_created_again() {
        let api = api(404);
        let r = Recorder::spawn(
            api.client(),
            "c",
            Settings::default(),
            EventMetrics::default(),
        );
        r.record(spec("m"));
        wait_for(&api, 1).await;
        r.record(spec("m"));
        let writes = wait_for(&api, 3).await;
        let kinds: Vec<(&str, i64)> = writes
            .iter()
            .map(|w| {
                (
                    w.method.as_str(),
                    w.body["count"].as_i64().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(kinds, [("POST", 1), ("PATCH", 2), ("POST", 2)]);
    }

    #[tokio::test]
    async fn a_full_buffer_or_the_rate_drops_and_counts() {
        let mut registry = Registry::new("meridian_test");
        let metrics = EventMetrics::register(&mut registry);
        // A writer that never gets to run its writes: a client with no API behind it is
        // fine, the buffer fills before anything is sent.
        let client = api(200).client();
        let settings = Settings {
            buffer: 1,
            limit: Some(TokenBucket::new(
                crate::rate::Rate::per_second(1.0),
                3,
                tokio::time::Instant::now(),
            )),
            ..Settings::default()
        };
        let r = Recorder::spawn(client, "c", settings, metrics);
        // Recorded before the writer task first runs (this test's runtime is single
        // threaded): one fits the buffer, two are dropped, the rest are over the rate.
        for i in 0..5 {
            r.record(spec(&format!("m{i}")));
        }
        let text = registry.encode();
        assert!(
            text.contains("meridian_test_events_total{result=\"dropped\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("meridian_test_events_total{result=\"throttled\"} 2"),
            "{text}"
        );
    }
}

//! Kubernetes Events for scheduling outcomes, sent best effort from a bounded queue so a
//! slow API server never holds up decisions, and at a bounded rate so a mass failover
//! does not spend the API server's capacity on Events while Placements wait (over the
//! rate or with the queue full, Events are dropped and counted; the `Scheduled`
//! condition stays the authoritative record).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

use super::metrics::Metrics;
use super::rate::TokenBucket;

/// The component name on every Event the scheduler writes.
pub const COMPONENT: &str = "meridian-scheduler";
/// Longest Event message; the condition carries the same text.
const MAX_MESSAGE: usize = 1024;

/// Errors of the Event sender (it logs and counts them; nothing propagates).
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The API rejected or failed the create.
    #[error("creating event: {0}")]
    Create(#[source] kube::Error),
    /// The API did not answer in time.
    #[error("creating event: timed out")]
    Timeout,
}

/// The object an Event is about.
#[derive(Debug, Clone)]
pub struct Involved {
    /// e.g. `federation.meridian.dev/v1alpha1`.
    pub api_version: String,
    /// e.g. `Placement`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID, when known.
    pub uid: Option<String>,
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A `v1` Event about `about`.
pub fn event(
    about: &Involved,
    warning: bool,
    reason: &str,
    message: String,
    now: jiff::Timestamp,
) -> Event {
    // Unique without a server round trip: object name, time and a process counter.
    let name = format!(
        "{}.{:x}{:04x}",
        about.name,
        now.as_nanosecond(),
        SEQ.fetch_add(1, Ordering::Relaxed) & 0xffff
    );
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(about.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(about.api_version.clone()),
            kind: Some(about.kind.clone()),
            name: Some(about.name.clone()),
            namespace: Some(about.namespace.clone()),
            uid: about.uid.clone(),
            ..Default::default()
        },
        reason: Some(reason.to_owned()),
        message: Some(truncate(message)),
        type_: Some(if warning { "Warning" } else { "Normal" }.to_owned()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource {
            component: Some(COMPONENT.to_owned()),
            host: None,
        }),
        reporting_component: Some(COMPONENT.to_owned()),
        ..Default::default()
    }
}

/// The sending side: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Event>,
    bucket: Arc<std::sync::Mutex<TokenBucket>>,
    metrics: Arc<Metrics>,
}

impl EventSink {
    /// Queues an Event, dropping it when over the rate or the queue is full.
    pub fn send(&self, e: Event) {
        let allowed = self
            .bucket
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_take(tokio::time::Instant::now())
            .is_ok();
        if !allowed {
            self.metrics.event("throttled");
        } else if self.tx.try_send(e).is_err() {
            self.metrics.event("dropped");
        }
    }
}

/// A sink with room for `capacity` Events admitted by `bucket`, and the task that sends
/// them (`concurrency` at a time, each with `timeout`) until every sink is dropped.
pub fn sink(
    client: Client,
    capacity: usize,
    bucket: TokenBucket,
    concurrency: usize,
    timeout: Duration,
    metrics: Arc<Metrics>,
) -> (EventSink, impl std::future::Future<Output = ()>) {
    let (tx, rx) = mpsc::channel::<Event>(capacity.max(1));
    let sink = EventSink {
        tx,
        bucket: Arc::new(std::sync::Mutex::new(bucket)),
        metrics: metrics.clone(),
    };
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
    let task = stream.for_each_concurrent(concurrency.max(1), move |e| {
        let client = client.clone();
        let metrics = metrics.clone();
        async move {
            let ns = e.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Event> = Api::namespaced(client, &ns);
            let result =
                match tokio::time::timeout(timeout, api.create(&PostParams::default(), &e)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(err)) => Err(EventError::Create(err)),
                    Err(_) => Err(EventError::Timeout),
                };
            match result {
                Ok(()) => metrics.event("sent"),
                Err(error) => {
                    metrics.event("failed");
                    tracing::debug!(%error, namespace = %ns, "event not written");
                }
            }
        }
    });
    (sink, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_events() {
        let about = Involved {
            api_version: fed_api::API_VERSION.into(),
            kind: "Placement".into(),
            namespace: "shop".into(),
            name: "deployment-web".into(),
            uid: Some("u".into()),
        };
        let now = jiff::Timestamp::from_second(1_750_000_000).expect("time");
        let a = event(&about, true, "FailedScheduling", "x".repeat(5000), now);
        let b = event(&about, false, "Scheduled", "ok".into(), now);
        assert_ne!(a.metadata.name, b.metadata.name);
        assert_eq!(a.type_.as_deref(), Some("Warning"));
        assert_eq!(a.message.as_ref().map(String::len), Some(MAX_MESSAGE));
        assert_eq!(b.involved_object.kind.as_deref(), Some("Placement"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
    }
}

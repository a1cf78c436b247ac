//! Event expiry: like kube-apiserver's `--event-ttl`, an Event is deleted once its last
//! recorded time is older than the TTL, so a control plane that writes an Event per action
//! holds the recent ones instead of every Event since it started.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::JsonPointer;
use serde_json::Value;

use crate::engine::{DeleteOptions, Engine};
use crate::registry::ResourceDef;

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);

/// The newest of the times an Event records (its creation, `lastTimestamp`, `eventTime`,
/// `series.lastObservedTime`), in Unix seconds; `None` when it records none.
fn last_seen(event: &Value) -> Option<i64> {
    [
        event.at("/metadata/creationTimestamp"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.at("/series/lastObservedTime"),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_str)
    .filter_map(|t| t.parse::<jiff::Timestamp>().ok())
    .map(|t| t.as_second())
    .max()
}

/// Deletes every Event of `def` last seen more than `ttl` ago; returns how many.
pub async fn expire_once(engine: &Engine, def: &ResourceDef, ttl: Duration) -> usize {
    let now = jiff::Timestamp::now().as_second();
    let ttl = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
    // Judged outside the cache's lock: parsing every Event must not hold up its writes.
    let all =
        engine
            .cache
            .resource(def)
            .list(&def.prefix(), None, None, engine.cache.revision(), |_| true);
    let expired = all
        .items
        .into_iter()
        .filter(|c| last_seen(&c.value()).is_some_and(|t| now.saturating_sub(t) > ttl));
    let mut deleted = 0;
    for c in expired {
        let opts = DeleteOptions {
            // Only the version judged expired: an Event updated meanwhile stays.
            resource_version: Some(c.rv.to_string()),
            ..DeleteOptions::default()
        };
        match engine.delete(def, c.namespace(), c.name(), &opts).await {
            Ok(_) => deleted += 1,
            Err(e) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(event = %c.key, error = %e.message, "expiring an Event failed")
            }
        }
    }
    deleted
}

/// Expires Events every tenth of `ttl` (at most every minute) until the process ends.
pub async fn run(engine: Arc<Engine>, ttl: Duration) {
    let Some(def) = engine.registry().lookup("", "v1", "events").cloned() else {
        return;
    };
    let period = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let n = expire_once(&engine, &def, ttl).await;
        if n > 0 {
            tracing::debug!(expired = n, "expired Events");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::last_seen;

    #[test]
    fn an_event_is_as_recent_as_the_newest_time_it_records() {
        let e = json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "lastTimestamp": "2026-01-01T00:10:00Z",
            "series": {"lastObservedTime": "2026-01-01T00:20:00.000000Z"}
        });
        let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_second();
        assert_eq!(last_seen(&e), Some(t("2026-01-01T00:20:00Z")));
        let created_only = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(last_seen(&created_only), Some(t("2026-01-01T00:00:00Z")));
        assert_eq!(last_seen(&json!({"lastTimestamp": null})), None);
    }
}

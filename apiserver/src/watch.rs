//! Watch streams: replay from a resourceVersion out of the cache's history, then follow the
//! shared live broadcast, with selectors, bookmarks and timeouts.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::api::{Body, Query, selectors};
use crate::cache::{CacheEvent, Cached, EventType, watch_frame};
use crate::engine::{Engine, Selectors};
use crate::metrics::Metrics;
use crate::registry::ResourceDef;
use crate::status::ApiError;
use crate::table;

/// How often an idle watch with bookmarks enabled gets one.
const BOOKMARK_PERIOD: Duration = Duration::from_secs(15);
/// Largest coalesced write of watch frames.
const MAX_BATCH: usize = 256 * 1024;
/// Frames buffered per watcher before its writer waits on the client.
const FRAME_BUFFER: usize = 256;

struct Filter {
    selectors: Selectors,
    prefix: String,
}

impl Filter {
    fn matches(&self, c: &Cached) -> bool {
        c.key.starts_with(&self.prefix) && self.selectors.matches(c)
    }
}

struct Encoder {
    def: Arc<ResourceDef>,
    /// Table frames with rows like these, or plain objects (`None`).
    table: Option<table::IncludeObject>,
}

impl Encoder {
    fn frame(&self, kind: EventType, obj: &Cached) -> Bytes {
        if let Some(include) = self.table {
            let t = table::single(&self.def, &obj.value(), false, include);
            watch_frame(kind.as_str(), t.to_string().as_bytes())
        } else {
            crate::convert::served_frame(&self.def, kind, obj)
        }
    }

    /// The frame a watcher with `filter` sees for `ev`, if any.
    fn event(&self, ev: &CacheEvent, filter: &Filter) -> Option<Bytes> {
        let now = filter.matches(&ev.obj);
        let before = ev.prev.as_ref().is_some_and(|p| filter.matches(p));
        let kind = match ev.kind {
            EventType::Added if now => EventType::Added,
            EventType::Modified if now && before => EventType::Modified,
            // Moving into or out of a selector looks like add/delete to the watcher.
            EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if now || before => EventType::Deleted,
            _ => return None,
        };
        if self.table.is_none()
            && kind == ev.kind
            && filter.selectors.label.is_none()
            && self.def.conversion.is_none()
        {
            return Some(ev.frame());
        }
        Some(self.frame(kind, &ev.obj))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": meta});
        watch_frame("BOOKMARK", obj.to_string().as_bytes())
    }
}

/// Starts a watch and returns the streaming response.
pub fn serve(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    def: Arc<ResourceDef>,
    namespace: Option<&str>,
    q: &Query,
    want_table: Option<table::IncludeObject>,
) -> Result<Response<Body>, ApiError> {
    let filter = Filter {
        selectors: selectors(&def, q)?,
        prefix: def.namespace_prefix(namespace),
    };
    let bookmarks = q.flag("allowWatchBookmarks");
    let send_initial = q.get("sendInitialEvents").map(|v| v == "true");
    let rv = q.get("resourceVersion").unwrap_or("");
    let timeout = match q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        Some(t) => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds \"{t}\"")))?,
        ),
        // Like kube-apiserver: between 30 and 60 minutes, so reconnects spread out.
        None => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
    };
    let rc = engine.cache.resource(&def).clone();
    let (initial, sub) = if rv.is_empty() || rv == "0" || send_initial == Some(true) {
        let (objects, sub) = rc.snapshot_and_subscribe();
        (Some(objects), sub)
    } else {
        let rev: u64 = rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion \"{rv}\"")))?;
        let sub = rc
            .subscribe(rev)
            .map_err(|e| ApiError::gone(e.to_string()))?;
        (None, sub)
    };
    let encoder = Encoder {
        def: def.clone(),
        table: want_table,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(FRAME_BUFFER);
    let cache = engine.cache.clone();
    metrics.watchers.inc();
    tokio::spawn(async move {
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut last = sub.revision;
        if let Some(objects) = initial {
            for c in objects.iter().filter(|c| filter.matches(c)) {
                if tx.send(encoder.frame(EventType::Added, c)).await.is_err() {
                    metrics.watchers.dec();
                    return;
                }
            }
            if send_initial == Some(true) && bookmarks {
                let _ = tx
                    .send(encoder.bookmark(last.max(cache.revision()), true))
                    .await;
            }
        }
        for ev in &sub.backlog {
            last = ev.rv;
            if let Some(f) = encoder.event(ev, &filter)
                && tx.send(f).await.is_err()
            {
                metrics.watchers.dec();
                return;
            }
        }
        let mut live = sub.live;
        let mut ticker = tokio::time::interval(BOOKMARK_PERIOD);
        ticker.tick().await;
        loop {
            tokio::select! {
                ev = live.recv() => match ev {
                    Ok(ev) => {
                        // Coalesce whatever else is already queued into one write: under load
                        // this turns many small HTTP/2 frames and TLS records into few.
                        let mut batch: Option<bytes::BytesMut> = None;
                        let mut single: Option<Bytes> = None;
                        let mut next = Some(ev);
                        let mut lagged = false;
                        while let Some(ev) = next.take() {
                            if ev.rv > last {
                                last = ev.rv;
                                if let Some(f) = encoder.event(&ev, &filter) {
                                    match (&mut batch, single.take()) {
                                        (Some(b), _) => b.extend_from_slice(&f),
                                        (None, None) => single = Some(f),
                                        (None, Some(first)) => {
                                            let mut b = bytes::BytesMut::with_capacity(first.len() + f.len() + 4096);
                                            b.extend_from_slice(&first);
                                            b.extend_from_slice(&f);
                                            batch = Some(b);
                                        }
                                    }
                                }
                            }
                            if batch.as_ref().is_some_and(|b| b.len() >= MAX_BATCH) {
                                break;
                            }
                            match live.try_recv() {
                                Ok(e) => next = Some(e),
                                Err(broadcast::error::TryRecvError::Lagged(_)) => lagged = true,
                                Err(_) => {}
                            }
                        }
                        let out = batch.map(|b| b.freeze()).or(single);
                        if let Some(f) = out
                            && tx.send(f).await.is_err()
                        {
                            break;
                        }
                        if lagged {
                            break;
                        }
                    }
                    // Too slow to keep up: close; the client resumes from its last revision.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = ticker.tick(), if bookmarks => {
                    // Read the revision first: once the queue is drained, every event up to it was seen.
                    let rev = cache.revision();
                    if live.is_empty() && rev > last {
                        if tx.send(encoder.bookmark(rev, false)).await.is_err() {
                            break;
                        }
                        last = rev;
                    }
                }
                _ = &mut deadline => break,
                _ = tx.closed() => break,
            }
        }
        metrics.watchers.dec();
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

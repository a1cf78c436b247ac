//! Watches on etcd: one etcd watch per stream, its responses turned into store events and progress reports.
//!
//! etcd reports a compacted start revision only some time after the watch was created, on
//! the stream; a range read at that revision fails at once, so [`start`] reads first and
//! answers [`StoreError::Compacted`] right away, as the other backends do. Progress comes from
//! etcd's periodic notifications, and from requests when the members answer them exactly.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::proto::{PbEvent, PbKeyValue};
use etcd_client::{
    GetOptions, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream,
};
use futures::StreamExt;
use tokio::sync::watch;
use tokio::time::Instant;

use super::errors::{out_of_range, store_error};
use super::members::Retry;
use super::{Inner, MAX_MESSAGE, header_revision, raw_revision, revision};
use crate::backend::WatchFrom;
use crate::{
    Event, EventKind, KeyValue, ProgressWatchStream, Result, Revision, StoreError, WatchItem,
};

/// How long a watch of a closed store keeps waiting for the store's own last writes.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Starts a watch of every change under store prefix `from.prefix` after revision
/// `from.after`.
pub(super) async fn start(inner: Arc<Inner>, from: WatchFrom<'_>) -> Result<ProgressWatchStream> {
    let WatchFrom {
        prefix,
        after,
        progress,
    } = from;
    inner.check_open()?;
    let compacted = inner.compacted.load(Ordering::Acquire);
    if after < compacted {
        return Err(StoreError::Compacted {
            compact_revision: compacted,
        });
    }
    let (start, end) = inner.keys.range(prefix);
    check_not_compacted(&inner, &start, &end, after + 1).await?;
    let options = WatchOptions::new()
        .with_range(end)
        .with_start_revision(raw_revision(after + 1))
        .with_prev_key()
        .with_progress_notify();
    let stream = inner
        .members
        .call(Retry::Always, |member| {
            let (start, options) = (start.clone(), options.clone());
            async move {
                member
                    .watch
                    .max_decoding_message_size(MAX_MESSAGE)
                    .watch(start, Some(options))
                    .await
            }
        })
        .await
        .map_err(|err| store_error("starting a watch", err))?;
    let (requests, responses) = stream.split();
    let state = EtcdWatch {
        closed: inner.closed.subscribe(),
        inner,
        requests,
        responses,
        pending: VecDeque::new(),
        delivered: after,
        progress,
        last_item: Instant::now(),
        closing: None,
        finished: false,
    };
    Ok(futures::stream::unfold(state, EtcdWatch::next).boxed())
}

/// Fails with [`StoreError::Compacted`] if etcd no longer holds revision `from` of `[start,
/// end)`; a revision not written yet is fine (the watch waits for it).
async fn check_not_compacted(
    inner: &Inner,
    start: &[u8],
    end: &[u8],
    from: Revision,
) -> Result<()> {
    let probe = GetOptions::new()
        .with_range(end.to_vec())
        .with_revision(raw_revision(from))
        .with_keys_only()
        .with_limit(1);
    let probed = inner
        .members
        .call(Retry::Always, |mut member| {
            let (start, probe) = (start.to_vec(), probe.clone());
            async move { member.kv.get(start, Some(probe)).await }
        })
        .await;
    match probed {
        Ok(_) => Ok(()),
        Err(err) if out_of_range(&err) => match inner.out_of_range(from).await {
            StoreError::FutureRevision { .. } => Ok(()),
            other => Err(other),
        },
        Err(err) => Err(store_error("starting a watch", err)),
    }
}

/// The state of one watch stream.
struct EtcdWatch {
    inner: Arc<Inner>,
    requests: WatchRequestSender,
    responses: WatchResponseStream,
    pending: VecDeque<WatchItem>,
    /// Every event up to this revision has been handed to `pending`.
    delivered: Revision,
    /// Ask for progress when this long passes without an item.
    progress: Option<Duration>,
    last_item: Instant,
    closed: watch::Receiver<Option<Revision>>,
    /// Once the store closed: the revision to deliver up to, and until when to wait for it.
    closing: Option<(Revision, Instant)>,
    finished: bool,
}

impl EtcdWatch {
    async fn next(mut self) -> Option<(Result<WatchItem>, Self)> {
        loop {
            if self.finished {
                return None;
            }
            if let Some(item) = self.pending.pop_front() {
                self.last_item = Instant::now();
                return Some((Ok(item), self));
            }
            if let Some((at, deadline)) = self.closing
                && (self.delivered >= at || Instant::now() >= deadline)
            {
                return self.fail(StoreError::Closed);
            }
            let progress_due = self.progress.map(|every| self.last_item + every);
            let close_deadline = self.closing.map(|(_, deadline)| deadline);
            tokio::select! {
                response = self.responses.next() => {
                    if let Err(err) = self.take(response) {
                        return self.fail(err);
                    }
                }
                _ = self.closed.changed(), if self.closing.is_none() => {
                    let at = (*self.closed.borrow()).unwrap_or(self.delivered);
                    self.closing = Some((at, Instant::now() + CLOSE_GRACE));
                    self.request_progress().await;
                }
                () = sleep_until(progress_due), if progress_due.is_some() && self.closing.is_none() => {
                    self.last_item = Instant::now();
                    self.request_progress().await;
                }
                () = sleep_until(close_deadline), if close_deadline.is_some() => {}
            }
        }
    }

    fn fail(mut self, err: StoreError) -> Option<(Result<WatchItem>, Self)> {
        self.finished = true;
        Some((Err(err), self))
    }

    /// Asks etcd for a progress report, if its answer can be trusted.
    async fn request_progress(&mut self) {
        if self.inner.progress_requests
            && let Err(err) = self.requests.request_progress().await
        {
            // The response side reports the broken stream.
            tracing::debug!(error = %err, "etcd progress request failed");
        }
    }

    /// Queues what one response of etcd says.
    fn take(&mut self, response: Option<Result<WatchResponse, etcd_client::Error>>) -> Result<()> {
        let response = match response {
            None => {
                return Err(StoreError::Unavailable {
                    context: "watching",
                    source: Arc::new(std::io::Error::other("etcd ended the watch stream")),
                });
            }
            Some(Err(err)) => return Err(store_error("watching", err)),
            Some(Ok(response)) => response,
        };
        if response.canceled() {
            let compacted = revision(response.compact_revision());
            if compacted > 0 {
                self.inner.observe_compaction(compacted);
                return Err(StoreError::Compacted {
                    compact_revision: compacted,
                });
            }
            // etcd cancels watches that lost their leader, or that it refused.
            return Err(StoreError::Unavailable {
                context: "watching",
                source: Arc::new(std::io::Error::other(format!(
                    "etcd canceled the watch: {}",
                    response.cancel_reason()
                ))),
            });
        }
        if response.created() && response.events().is_empty() {
            return Ok(());
        }
        let header = header_revision(response.header());
        let events = response.0.events;
        if events.is_empty() {
            // A progress notification: everything up to the header's revision was sent.
            if header > self.delivered {
                self.delivered = header;
                self.pending.push_back(WatchItem::Progress(header));
            }
            return Ok(());
        }
        for event in events {
            let event = self.event(event)?;
            self.delivered = self.delivered.max(event.revision());
            self.pending.push_back(WatchItem::Event(event));
        }
        Ok(())
    }

    fn event(&self, event: PbEvent) -> Result<Event> {
        let kind = if event.r#type == etcd_client::EventType::Delete as i32 {
            EventKind::Delete
        } else {
            EventKind::Put
        };
        let now = event.kv.ok_or_else(|| StoreError::Corrupt {
            detail: "etcd sent a watch event without its key".into(),
        })?;
        let prev = event.prev_kv.map(|kv| self.key_value(kv)).transpose()?;
        let kv = match (kind, &prev) {
            // A delete carries only the key and the delete's revision; the store reports
            // the deleted value at that revision.
            (EventKind::Delete, Some(prev)) => KeyValue {
                mod_revision: revision(now.mod_revision),
                ..prev.clone()
            },
            (EventKind::Delete, None) => KeyValue {
                key: self.inner.keys.store_key(&now.key)?,
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision(now.mod_revision),
            },
            (EventKind::Put, _) => self.key_value(now)?,
        };
        Ok(Event { kind, kv, prev })
    }

    fn key_value(&self, kv: PbKeyValue) -> Result<KeyValue> {
        self.inner.pb_key_value(kv)
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

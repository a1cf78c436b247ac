//! `EtcdStore`: the `Storage` trait on an etcd v3 cluster, so several API server replicas can share one store.
//!
//! resourceVersion is etcd's `mod_revision`. A create is a transaction on `create_revision ==
//! 0`, an update or a delete one on `mod_revision` (and on the key existing), so a lost race
//! answers with the key's current value in the same round trip. Listings read one revision
//! and page at it; watches start from a revision, carry each change's previous value, and pass
//! etcd's progress notifications on. Every key lives under the configured prefix (see
//! [`keys`]). Reads are linearizable (etcd's default).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::proto::PbKeyValue;
use etcd_client::{
    Compare, CompareOp, ConnectOptions, GetOptions, ResponseHeader, TlsOptions, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::sync::watch;

use crate::backend::{Backend, WatchFrom, Watches};
use crate::op::{Op, Outcome};
use crate::{
    DeleteResult, KeyValue, ListOptions, ListResult, ProgressWatchStream, Result, Revision,
    StoreError,
};

mod compactor;
mod errors;
pub(crate) mod keys;
pub mod local;
mod members;
mod watcher;

use errors::{out_of_range, store_error};
pub use keys::InvalidPrefix;
use keys::Keys;
use members::{Members, Retry};

/// kube-apiserver's `--etcd-prefix` default.
pub const DEFAULT_PREFIX: &str = "/registry";

/// kube-apiserver's `--etcd-compaction-interval` default.
pub const DEFAULT_COMPACTION_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// How many keys one range request of an unlimited listing reads: a listing of the whole
/// store goes out as several requests at one revision rather than one huge message.
const LIST_CHUNK: usize = 1000;

/// The largest response accepted from etcd (etcd's own largest send).
const MAX_MESSAGE: usize = i32::MAX as usize;

/// How to reach etcd and where the store lives in it.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// Client URLs of the members, e.g. `https://10.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key is stored under this prefix (e.g. `/registry`).
    pub prefix: String,
    /// TLS for `https://` endpoints.
    pub tls: Option<EtcdTls>,
    /// How often the replicas compact etcd's history; `None` leaves compaction to others.
    pub compaction_interval: Option<Duration>,
    /// How long one request may take before it fails with [`StoreError::Unavailable`].
    pub request_timeout: Duration,
    /// How long connecting to a member may take, and how long [`EtcdStore::connect`] waits
    /// for the cluster to answer (members starting, a leader being elected).
    pub dial_timeout: Duration,
    /// How often an HTTP/2 ping checks a member connection that has requests or watches
    /// open, and how long its answer may take before the connection counts as dead: a
    /// member cut off by a partition cannot say so, and its watches would stall silently.
    pub keep_alive: (Duration, Duration),
}

impl EtcdOptions {
    /// Options for `endpoints` with kube-apiserver's defaults: prefix `/registry`, compaction
    /// every 5 minutes, no TLS.
    pub fn new(endpoints: Vec<String>) -> Self {
        EtcdOptions {
            endpoints,
            prefix: DEFAULT_PREFIX.to_owned(),
            tls: None,
            compaction_interval: Some(DEFAULT_COMPACTION_INTERVAL),
            request_timeout: Duration::from_secs(15),
            dial_timeout: Duration::from_secs(20),
            // kube-apiserver's: a ping every 30 s, 10 s for the answer.
            keep_alive: (Duration::from_secs(30), Duration::from_secs(10)),
        }
    }
}

/// TLS to etcd: the CA that signed the members' certificates and this client's certificate.
#[derive(Clone)]
pub struct EtcdTls {
    /// PEM of the CA bundle trusted for the members' serving certificates.
    pub ca_pem: Vec<u8>,
    /// PEM of the client certificate and of its key, for etcd's `--client-cert-auth`.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("EtcdTls")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("client_certificate", &self.client.is_some())
            .finish()
    }
}

/// Why [`EtcdStore::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The prefix is not a path.
    #[error(transparent)]
    Prefix(#[from] InvalidPrefix),
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoints,
    /// An endpoint URL or the TLS material was refused by the client.
    #[error("invalid etcd client configuration")]
    Config(#[source] etcd_client::Error),
    /// etcd did not answer the first request.
    #[error("etcd did not answer")]
    Unreachable(#[source] StoreError),
}

/// A [`Storage`] on etcd v3.
///
/// Dropping it (or [`EtcdStore::close`]) stops its compaction rounds and ends its watches
/// with [`StoreError::Closed`] once they have delivered its own acknowledged writes.
pub struct EtcdStore {
    inner: Arc<Inner>,
    compactor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// What the store, its watches and its compactor share.
pub(crate) struct Inner {
    members: Members,
    keys: Keys,
    /// The revision of this handle's last acknowledged write (at first, the revision at connect).
    revision: AtomicU64,
    /// The newest compaction this handle knows of: watches and listings before it fail.
    compacted: AtomicU64,
    /// `Some(revision)` once closed: the last write acknowledged before closing.
    closed: watch::Sender<Option<Revision>>,
    /// Whether the members answer progress requests only once a watch has caught up (etcd
    /// 3.4.31, 3.5.13, 3.6 and later); older ones may answer ahead of undelivered events.
    progress_requests: bool,
}

impl EtcdStore {
    /// Connects to etcd and reads its current revision; starts the compaction rounds when
    /// `options.compaction_interval` is set. Must run inside a Tokio runtime.
    pub async fn connect(options: EtcdOptions) -> Result<Self, ConnectError> {
        let keys = Keys::new(&options.prefix)?;
        if options.endpoints.is_empty() {
            return Err(ConnectError::NoEndpoints);
        }
        let mut connect = ConnectOptions::new()
            .with_timeout(options.request_timeout)
            .with_connect_timeout(options.dial_timeout)
            // Notice a dead or cut-off member without waiting on TCP.
            .with_keep_alive(options.keep_alive.0, options.keep_alive.1)
            // A member cut off from the others must not serve watches that silently stall.
            .with_require_leader(true);
        if let Some(tls) = &options.tls {
            connect = connect.with_tls(tls_options(tls));
        }
        let members = Members::connect(&options.endpoints, &connect)
            .await
            .map_err(ConnectError::Config)?;
        let inner = Inner {
            members,
            keys,
            revision: AtomicU64::new(0),
            compacted: AtomicU64::new(0),
            closed: watch::Sender::new(None),
            progress_requests: false,
        };
        let deadline = tokio::time::Instant::now() + options.dial_timeout;
        let revision = loop {
            match inner.latest_revision().await {
                Ok(revision) => break revision,
                Err(StoreError::Unavailable { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => return Err(ConnectError::Unreachable(err)),
            }
        };
        inner.revision.store(revision, Ordering::Release);
        let version = inner.server_version().await;
        let inner = Arc::new(Inner {
            progress_requests: version.as_deref().is_some_and(exact_progress),
            ..inner
        });
        tracing::info!(
            endpoints = ?options.endpoints,
            prefix = %options.prefix,
            revision,
            version = version.as_deref().unwrap_or("unknown"),
            "connected to etcd"
        );
        let compactor = options
            .compaction_interval
            .map(|interval| tokio::spawn(compactor::run(Arc::downgrade(&inner), interval)));
        Ok(EtcdStore {
            inner,
            compactor: Mutex::new(compactor),
        })
    }

    /// Stops the compaction rounds, refuses further writes with [`StoreError::Closed`], and
    /// ends every watch once it has delivered the writes acknowledged so far.
    pub fn close(&self) {
        if let Some(task) = self
            .compactor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
        let at = self.inner.revision.load(Ordering::Acquire);
        self.inner.closed.send_if_modified(|closed| {
            let first = closed.is_none();
            if first {
                *closed = Some(at);
            }
            first
        });
    }

    /// The newest compaction this handle knows of (its own, another replica's that its
    /// compaction rounds saw, or one a watch reported).
    pub fn known_compaction(&self) -> Revision {
        self.inner.compacted.load(Ordering::Acquire)
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn tls_options(tls: &EtcdTls) -> TlsOptions {
    let mut options =
        TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(&tls.ca_pem));
    if let Some((cert, key)) = &tls.client {
        options = options.identity(etcd_client::Identity::from_pem(cert, key));
    }
    options
}

/// Whether etcd `version` answers progress requests only for watches that have caught up:
/// etcd-io/etcd#15220, fixed in 3.4.24 and 3.5.8, and #17507, fixed in 3.4.31 and 3.5.13.
fn exact_progress(version: &str) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor, patch) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, minor) => minor >= 6,
        (major, _) => major > 3,
    }
}

/// The revision in a response header (etcd always sends one).
fn header_revision(header: Option<&ResponseHeader>) -> Revision {
    header.map_or(0, |h| revision(h.revision()))
}

/// An etcd revision (an `i64` that is never negative) as a store revision.
fn revision(raw: i64) -> Revision {
    Revision::try_from(raw).unwrap_or(0)
}

/// A store revision as etcd's `i64`.
fn raw_revision(revision: Revision) -> i64 {
    i64::try_from(revision).unwrap_or(i64::MAX)
}

impl Inner {
    /// Records an acknowledged write at `revision`.
    fn acknowledged(&self, revision: Revision) {
        self.revision.fetch_max(revision, Ordering::AcqRel);
    }

    /// Records that etcd has been compacted up to `revision`.
    fn observe_compaction(&self, revision: Revision) {
        self.compacted.fetch_max(revision, Ordering::AcqRel);
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.borrow().is_some() {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// The member's etcd version, if it says.
    async fn server_version(&self) -> Option<String> {
        let status = self
            .members
            .call(Retry::Always, |mut member| async move {
                member.maintenance.status().await
            })
            .await;
        match status {
            Ok(status) => Some(status.version().to_owned()),
            Err(err) => {
                tracing::warn!(error = %err, "could not read the etcd version");
                None
            }
        }
    }

    /// The cluster's current revision, from a linearizable read of one key of the prefix.
    async fn latest_revision(&self) -> Result<Revision> {
        let key = self.keys.key(keys::COMPACT_KEY);
        let response = self
            .members
            .call(Retry::Always, |mut member| {
                let key = key.clone();
                async move {
                    member
                        .kv
                        .get(key, Some(GetOptions::new().with_count_only()))
                        .await
                }
            })
            .await
            .map_err(|err| store_error("reading the current revision", err))?;
        Ok(header_revision(response.header()))
    }

    /// `FutureRevision` if `wanted` is newer than the cluster's revision, else `Compacted`:
    /// the two meanings of etcd's OUT_OF_RANGE for a request at `wanted`.
    async fn out_of_range(&self, wanted: Revision) -> StoreError {
        match self.latest_revision().await {
            Ok(current) if wanted > current => StoreError::FutureRevision {
                revision: wanted,
                current,
            },
            Ok(_) => {
                // etcd refuses revisions below its compaction, so that is past `wanted`.
                self.observe_compaction(wanted + 1);
                StoreError::Compacted {
                    compact_revision: self.compacted.load(Ordering::Acquire),
                }
            }
            Err(err) => err,
        }
    }

    /// Compacts etcd's history up to `revision`.
    async fn compact(&self, revision: Revision) -> Result<()> {
        if revision <= self.compacted.load(Ordering::Acquire) {
            return Ok(());
        }
        let compacted = self
            .members
            .call(Retry::Always, |mut member| async move {
                member.kv.compact(raw_revision(revision), None).await
            })
            .await;
        match compacted {
            Ok(_) => {}
            Err(err) if out_of_range(&err) => {
                let current = self.latest_revision().await?;
                if revision > current {
                    return Err(StoreError::FutureRevision { revision, current });
                }
                // Another client compacted as far or further already: what was asked holds.
            }
            Err(err) => return Err(store_error("compacting", err)),
        }
        self.observe_compaction(revision);
        Ok(())
    }

    /// One range request: up to `limit` keys (`0`: all) of `[from, end)` at `revision`
    /// (`0`: the current one). Returns the items, whether more follow, and the revision read.
    async fn range(
        &self,
        from: Vec<u8>,
        end: Vec<u8>,
        revision: Revision,
        limit: usize,
    ) -> Result<(Vec<KeyValue>, bool, Revision)> {
        let options = GetOptions::new()
            .with_range(end)
            .with_revision(raw_revision(revision))
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let response = self
            .members
            .call(Retry::Always, |member| {
                let (from, options) = (from.clone(), options.clone());
                async move {
                    member
                        .kv
                        .max_decoding_message_size(MAX_MESSAGE)
                        .get(from, Some(options))
                        .await
                }
            })
            .await;
        let mut response = match response {
            Ok(response) => response,
            Err(err) if out_of_range(&err) => return Err(self.out_of_range(revision).await),
            Err(err) => return Err(store_error("listing keys", err)),
        };
        let read_at = header_revision(response.header());
        let more = response.more();
        let items = response
            .take_kvs()
            .into_iter()
            .map(|kv| self.key_value(kv))
            .collect::<Result<_>>()?;
        Ok((items, more, if revision == 0 { read_at } else { revision }))
    }

    /// A store key-value from etcd's.
    fn key_value(&self, kv: etcd_client::KeyValue) -> Result<KeyValue> {
        self.pb_key_value(kv.0)
    }

    /// A store key-value from etcd's protobuf one, taking its buffers without copying.
    fn pb_key_value(&self, kv: PbKeyValue) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.keys.store_key(&kv.key)?,
            value: Bytes::from(kv.value),
            create_revision: revision(kv.create_revision),
            mod_revision: revision(kv.mod_revision),
        })
    }

    /// The key's value as read in the failure branch of a transaction, if it exists.
    fn current_from(&self, response: &etcd_client::TxnResponse) -> Result<Option<KeyValue>> {
        for op in response.op_responses() {
            if let TxnOpResponse::Get(mut get) = op {
                return get
                    .take_kvs()
                    .into_iter()
                    .next()
                    .map(|kv| self.key_value(kv))
                    .transpose();
            }
        }
        Ok(None)
    }

    /// A write transaction (sent again only if it certainly did not reach etcd).
    async fn txn(&self, context: &'static str, txn: Txn) -> Result<etcd_client::TxnResponse> {
        self.check_open()?;
        self.members
            .call(Retry::IfNotSent, |mut member| {
                let txn = txn.clone();
                async move { member.kv.txn(txn).await }
            })
            .await
            .map_err(|err| store_error(context, err))
    }
}

/// The key exists (an absent key compares as all zeroes in etcd).
fn exists(key: &[u8]) -> Compare {
    Compare::create_revision(key.to_vec(), CompareOp::Greater, 0)
}

impl Backend for EtcdStore {
    async fn read(&self, key: &str) -> Result<Option<KeyValue>> {
        let inner = &self.inner;
        let raw = inner.keys.key(key);
        let mut response = inner
            .members
            .call(Retry::Always, |member| {
                let raw = raw.clone();
                async move {
                    member
                        .kv
                        .max_decoding_message_size(MAX_MESSAGE)
                        .get(raw, None)
                        .await
                }
            })
            .await
            .map_err(|err| store_error("reading a key", err))?;
        response
            .take_kvs()
            .into_iter()
            .next()
            .map(|kv| inner.key_value(kv))
            .transpose()
    }

    async fn read_page(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let inner = &self.inner;
        if let Some(revision) = options.revision {
            let compacted = inner.compacted.load(Ordering::Acquire);
            if revision < compacted {
                return Err(StoreError::Compacted {
                    compact_revision: compacted,
                });
            }
        }
        let (start, end) = inner.keys.range(prefix);
        let mut from = match options.after_key.as_deref() {
            Some(after) if after >= prefix => inner.keys.key_after(after),
            _ => start,
        };
        let mut revision = options.revision.unwrap_or(0);
        if options.limit != 0 {
            let (items, more, read_at) = inner.range(from, end, revision, options.limit).await?;
            return Ok(ListResult {
                items,
                revision: read_at,
                more,
            });
        }
        // No limit: read in chunks, every chunk at the first one's revision.
        let mut items = Vec::new();
        loop {
            let (chunk, more, read_at) = inner
                .range(std::mem::take(&mut from), end.clone(), revision, LIST_CHUNK)
                .await?;
            revision = read_at;
            let next = match chunk.last() {
                Some(last) if more => Some(inner.keys.key_after(&last.key)),
                None if more => {
                    return Err(StoreError::Corrupt {
                        detail: "etcd announced more keys after an empty page".into(),
                    });
                }
                _ => None,
            };
            items.extend(chunk);
            match next {
                Some(next) => from = next,
                None => {
                    return Ok(ListResult {
                        items,
                        revision,
                        more: false,
                    });
                }
            }
        }
    }

    async fn apply(&self, op: Op) -> Result<Outcome> {
        match op {
            Op::Create { key, value } => self.inner.create(key, value).await.map(Outcome::Put),
            Op::Update {
                key,
                value,
                expected,
            } => self
                .inner
                .update(key, value, expected)
                .await
                .map(Outcome::Put),
            Op::Delete { key, expected } => {
                self.inner.delete(key, expected).await.map(Outcome::Deleted)
            }
        }
    }

    fn revision(&self) -> Revision {
        self.inner.revision.load(Ordering::Acquire)
    }
}

impl Watches for EtcdStore {
    async fn watch_from(&self, from: WatchFrom<'_>) -> Result<ProgressWatchStream> {
        watcher::start(Arc::clone(&self.inner), from).await
    }

    async fn newest_revision(&self) -> Result<Revision> {
        self.inner.latest_revision().await
    }

    async fn discard_history(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }
}

/// Writes, one etcd transaction each.
impl Inner {
    /// A transaction on the key not existing (`create_revision == 0`).
    async fn create(&self, key: Arc<str>, value: Bytes) -> Result<KeyValue> {
        let raw = self.keys.key(&key);
        let txn = Txn::new()
            .when([Compare::create_revision(raw.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(raw, Vec::from(value.clone()), None)]);
        let response = self.txn("creating a key", txn).await?;
        if !response.succeeded() {
            return Err(StoreError::AlreadyExists { key });
        }
        let revision = header_revision(response.header());
        self.acknowledged(revision);
        Ok(KeyValue {
            key,
            value,
            create_revision: revision,
            mod_revision: revision,
        })
    }

    /// A transaction on the key's `mod_revision`; a lost race reads the current value.
    async fn update(
        &self,
        key: Arc<str>,
        value: Bytes,
        expected_mod_revision: Revision,
    ) -> Result<KeyValue> {
        let raw = self.keys.key(&key);
        let txn = Txn::new()
            .when([
                Compare::mod_revision(
                    raw.clone(),
                    CompareOp::Equal,
                    raw_revision(expected_mod_revision),
                ),
                exists(&raw),
            ])
            .and_then([
                TxnOp::put(raw.clone(), Vec::from(value.clone()), None),
                // The key's create_revision, without its value, for the answer.
                TxnOp::get(raw.clone(), Some(GetOptions::new().with_keys_only())),
            ])
            .or_else([TxnOp::get(raw, None)]);
        let response = self.txn("updating a key", txn).await?;
        if !response.succeeded() {
            return Err(match self.current_from(&response)? {
                None => StoreError::NotFound { key },
                Some(current) => StoreError::Conflict {
                    key,
                    expected: expected_mod_revision,
                    current: Some(current),
                },
            });
        }
        let revision = header_revision(response.header());
        self.acknowledged(revision);
        let create_revision = self
            .current_from(&response)?
            .map_or(revision, |kv| kv.create_revision);
        Ok(KeyValue {
            key,
            value,
            create_revision,
            mod_revision: revision,
        })
    }

    /// A transaction on the key existing (and on its `mod_revision` when given), returning
    /// the deleted value.
    async fn delete(
        &self,
        key: Arc<str>,
        expected_mod_revision: Option<Revision>,
    ) -> Result<DeleteResult> {
        let raw = self.keys.key(&key);
        let mut when = vec![exists(&raw)];
        if let Some(expected) = expected_mod_revision {
            when.push(Compare::mod_revision(
                raw.clone(),
                CompareOp::Equal,
                raw_revision(expected),
            ));
        }
        let txn = Txn::new()
            .when(when)
            .and_then([TxnOp::delete(
                raw.clone(),
                Some(etcd_client::DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(raw, None)]);
        let response = self.txn("deleting a key", txn).await?;
        if !response.succeeded() {
            return Err(
                match (self.current_from(&response)?, expected_mod_revision) {
                    (Some(current), Some(expected)) => StoreError::Conflict {
                        key,
                        expected,
                        current: Some(current),
                    },
                    _ => StoreError::NotFound { key },
                },
            );
        }
        let revision = header_revision(response.header());
        self.acknowledged(revision);
        let prev = response
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Delete(mut delete) => delete.take_prev_kvs().into_iter().next(),
                _ => None,
            })
            .ok_or_else(|| StoreError::Corrupt {
                detail: format!("etcd deleted {key:?} without returning its value"),
            })?;
        Ok(DeleteResult {
            prev: self.key_value(prev)?,
            revision,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_requests_are_trusted_from_fixed_versions_only() {
        for (version, exact) in [
            ("3.4.23", false),
            ("3.4.31", true),
            ("3.5.1", false),
            ("3.5.12", false),
            ("3.5.13", true),
            ("3.6.0", true),
            ("3.7.2", true),
            ("4.0.0", true),
            ("garbage", false),
        ] {
            assert_eq!(exact_progress(version), exact, "{version}");
        }
    }
}

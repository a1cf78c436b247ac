//! `EmbeddedStore`: a crash-safe single-file redb store whose one writer thread group-commits queued writes.
//!
//! Every write goes through a queue to a dedicated thread. The thread takes everything queued,
//! applies it in one redb write transaction (each request with its own precondition check and
//! revision, in queue order), commits once with `Durability::Immediate` (one sync to disk for the
//! whole group), then publishes the group's events and answers each request. A write's future
//! therefore resolves only once the write is on disk. Reads use their own redb read
//! transactions and never wait for the writer.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;

use bytes::Bytes;
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::history::History;
use crate::in_process::InProcess;
use crate::op::{self, Applied, Op, Outcome};
use crate::{KeyValue, ListOptions, ListResult, Result, Revision, StoreError, page, under_prefix};

/// Name of the data file inside the data directory.
pub const DATA_FILE: &str = "meridian.redb";

/// Key → `create_revision` (u64 LE) ‖ `mod_revision` (u64 LE) ‖ value.
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// Store-wide counters.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The revision of the last committed write, kept so revisions keep increasing across restarts
/// even when the newest keys were deleted.
const META_REVISION: &str = "revision";
const META_FORMAT: &str = "format";
const FORMAT_VERSION: u64 = 1;

/// Tuning of an [`EmbeddedStore`].
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How many recent events are kept in memory for watches (at least one).
    pub history_capacity: usize,
    /// The most write requests applied in one transaction (at least one).
    pub max_batch: usize,
    /// Bytes of redb's page cache. Small by default: the API server keeps its own copy of
    /// every object in memory, so a large page cache would hold everything twice.
    pub cache_size: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            history_capacity: 10_000,
            max_batch: 1024,
            cache_size: 32 << 20,
        }
    }
}

/// A durable [`Storage`](crate::Storage) in one redb file inside a data directory.
///
/// Dropping it stops the writer thread after the requests queued so far are committed (the drop
/// blocks for at most that one commit); [`EmbeddedStore::close`] does the same without blocking
/// the async runtime.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    requests: mpsc::Sender<Msg>,
    writer: Mutex<Option<JoinHandle<()>>>,
    created: bool,
    path: PathBuf,
}

/// What the store and its writer thread share.
struct Shared {
    db: Database,
    history: Arc<History>,
    /// The revision of the last committed write.
    revision: AtomicU64,
    commits: AtomicU64,
    writes: AtomicU64,
}

enum Msg {
    Write(Request),
    /// Commit what is queued before this message, then stop.
    Shutdown,
}

struct Request {
    op: Op,
    reply: oneshot::Sender<Result<Outcome>>,
}

fn backend<E>(context: &'static str) -> impl FnOnce(E) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |err| StoreError::backend(context, err)
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir` with default options. Blocks on file I/O.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir, EmbeddedOptions::default())
    }

    /// Opens (creating if needed) the store in `dir`. Blocks on file I/O.
    pub fn open_with(dir: impl AsRef<Path>, options: EmbeddedOptions) -> Result<Self> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(backend("creating the data directory"))?;
        let path = dir.join(DATA_FILE);
        let created = !path
            .try_exists()
            .map_err(backend("checking for the data file"))?;
        let db = redb::Builder::new()
            .set_cache_size(options.cache_size)
            .create(&path)
            .map_err(backend("opening the data file"))?;
        let revision = init(&db)?;
        tracing::info!(path = %path.display(), created, revision, "opened embedded store");

        let shared = Arc::new(Shared {
            db,
            // Events from before this open are not kept, so watches must start at or after it.
            history: Arc::new(History::new(options.history_capacity, revision)),
            revision: AtomicU64::new(revision),
            commits: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        let (requests, queue) = mpsc::channel();
        let max_batch = options.max_batch.max(1);
        let writer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("meridian-store-writer".into())
                .spawn(move || run_writer(&shared, &queue, max_batch))
                .map_err(backend("starting the writer thread"))?
        };
        Ok(EmbeddedStore {
            shared,
            requests,
            writer: Mutex::new(Some(writer)),
            created,
            path,
        })
    }

    /// Whether this open created the data file (a fresh store) rather than reopening one.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The data file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many write transactions were committed since open; with concurrent writers this is
    /// lower than [`EmbeddedStore::write_count`].
    pub fn commit_count(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    /// How many writes were committed since open.
    pub fn write_count(&self) -> u64 {
        self.shared.writes.load(Ordering::Relaxed)
    }

    /// Commits the writes queued so far, stops the writer thread and ends every watch with
    /// [`StoreError::Closed`]. Later writes fail with [`StoreError::Closed`]; reads still work
    /// until the store is dropped, which releases the file.
    pub async fn close(&self) -> Result<()> {
        let Some(writer) = self.stop_writer() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || writer.join())
            .await
            .map_err(backend("waiting for the writer thread"))?
            .map_err(|_| writer_panicked())
    }

    /// Asks the writer to stop and takes its handle, if no one did before.
    fn stop_writer(&self) -> Option<JoinHandle<()>> {
        // Fails only if the writer already exited, which is what is asked.
        let _ = self.requests.send(Msg::Shutdown);
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        if let Some(writer) = self.stop_writer()
            && writer.join().is_err()
        {
            tracing::error!("embedded store writer thread panicked");
        }
    }
}

fn writer_panicked() -> StoreError {
    StoreError::backend(
        "stopping the writer thread",
        std::io::Error::other("writer thread panicked"),
    )
}

/// Creates the tables of a fresh file, checks the format of an existing one, and returns the
/// persisted revision.
fn init(db: &Database) -> Result<Revision> {
    let txn = db
        .begin_write()
        .map_err(backend("starting the open transaction"))?;
    let revision = {
        txn.open_table(KV)
            .map_err(backend("opening the kv table"))?;
        let mut meta = txn
            .open_table(META)
            .map_err(backend("opening the meta table"))?;
        let format = meta
            .get(META_FORMAT)
            .map_err(backend("reading the format"))?
            .map(|guard| guard.value());
        match format {
            None => {
                meta.insert(META_FORMAT, FORMAT_VERSION)
                    .map_err(backend("writing the format"))?;
            }
            Some(FORMAT_VERSION) => {}
            Some(other) => {
                return Err(StoreError::Corrupt {
                    detail: format!("unsupported data format {other}, expected {FORMAT_VERSION}"),
                });
            }
        }
        let revision = meta
            .get(META_REVISION)
            .map_err(backend("reading the revision"))?
            .map(|guard| guard.value());
        match revision {
            Some(revision) => revision,
            None => {
                meta.insert(META_REVISION, 0)
                    .map_err(backend("writing the revision"))?;
                0
            }
        }
    };
    txn.commit()
        .map_err(backend("committing the open transaction"))?;
    Ok(revision)
}

/// The writer thread: group-commits queued requests until told to stop.
fn run_writer(shared: &Shared, queue: &mpsc::Receiver<Msg>, max_batch: usize) {
    let mut batch = Vec::with_capacity(max_batch);
    loop {
        match queue.recv() {
            Ok(Msg::Write(request)) => batch.push(request),
            Ok(Msg::Shutdown) | Err(mpsc::RecvError) => break,
        }
        // Everything that queued up while the previous group was being synced goes into this
        // group: the more writers wait, the more each sync carries.
        let mut stop = false;
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(Msg::Write(request)) => batch.push(request),
                Ok(Msg::Shutdown) => {
                    stop = true;
                    break;
                }
                Err(_) => break,
            }
        }
        shared.commit_batch(&mut batch);
        if stop {
            break;
        }
    }
    // Requests queued after the shutdown are dropped with the queue; their callers get `Closed`.
    shared.history.close();
}

impl Shared {
    /// Applies, commits and answers one group of requests, leaving `batch` empty.
    fn commit_batch(&self, batch: &mut Vec<Request>) {
        let base = self.revision.load(Ordering::Acquire);
        match self.apply_batch(batch, base) {
            Ok((results, revision)) => {
                if revision != base {
                    self.commits.fetch_add(1, Ordering::Relaxed);
                    self.writes.fetch_add(revision - base, Ordering::Relaxed);
                    self.revision.store(revision, Ordering::Release);
                }
                let mut events = Vec::with_capacity(results.len());
                let answers: Vec<Result<Outcome>> = results
                    .into_iter()
                    .map(|result| {
                        result.map(|applied| {
                            events.push(applied.event);
                            applied.outcome
                        })
                    })
                    .collect();
                // Published before answering, so a caller that saw its ack and then watches
                // from an earlier revision is sure to see its own event.
                self.history.publish(events);
                for (request, answer) in batch.drain(..).zip(answers) {
                    // The caller may have stopped waiting; the write stands regardless.
                    let _ = request.reply.send(answer);
                }
            }
            Err(err) => {
                tracing::error!(error = %err, requests = batch.len(), "group commit failed");
                for request in batch.drain(..) {
                    let _ = request.reply.send(Err(err.clone()));
                }
            }
        }
    }

    /// Runs one write transaction over `batch`; returns each request's result and the last
    /// revision used. An engine failure fails the whole group, since nothing of it committed.
    fn apply_batch(
        &self,
        batch: &[Request],
        base: Revision,
    ) -> Result<(Vec<Result<Applied>>, Revision)> {
        let mut txn = self
            .db
            .begin_write()
            .map_err(backend("starting a write transaction"))?;
        txn.set_durability(Durability::Immediate)
            .map_err(backend("setting durability"))?;
        let mut revision = base;
        let mut results = Vec::with_capacity(batch.len());
        {
            let mut kv = txn
                .open_table(KV)
                .map_err(backend("opening the kv table"))?;
            let mut encoded = Vec::new();
            for request in batch {
                let key = request.op.key();
                let current = match kv.get(&**key).map_err(backend("reading a key"))? {
                    None => None,
                    Some(raw) => match decode(key.clone(), raw.value()) {
                        Ok(current) => Some(current),
                        Err(err) => {
                            results.push(Err(err));
                            continue;
                        }
                    },
                };
                let applied = match op::apply(&request.op, current, revision + 1) {
                    Ok(applied) => applied,
                    Err(err) => {
                        results.push(Err(err));
                        continue;
                    }
                };
                match &applied.outcome {
                    Outcome::Put(new) => {
                        encode(new, &mut encoded);
                        kv.insert(&**key, encoded.as_slice())
                            .map_err(backend("writing a key"))?;
                    }
                    Outcome::Deleted(_) => {
                        kv.remove(&**key).map_err(backend("deleting a key"))?;
                    }
                }
                revision += 1;
                results.push(Ok(applied));
            }
            if revision != base {
                txn.open_table(META)
                    .map_err(backend("opening the meta table"))?
                    .insert(META_REVISION, revision)
                    .map_err(backend("writing the revision"))?;
            }
        }
        if revision == base {
            // Every precondition failed: nothing to make durable, so skip the sync.
            txn.abort()
                .map_err(backend("aborting a write transaction"))?;
        } else {
            txn.commit()
                .map_err(backend("committing a write transaction"))?;
        }
        Ok((results, revision))
    }

    fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let txn = self
            .db
            .begin_read()
            .map_err(backend("starting a read transaction"))?;
        let table = txn
            .open_table(KV)
            .map_err(backend("opening the kv table"))?;
        let raw = table.get(key).map_err(backend("reading a key"))?;
        raw.map(|raw| decode(key.into(), raw.value())).transpose()
    }

    /// The revision the newest committed read transaction sees.
    fn snapshot_revision(txn: &redb::ReadTransaction) -> Result<Revision> {
        Ok(txn
            .open_table(META)
            .map_err(backend("opening the meta table"))?
            .get(META_REVISION)
            .map_err(backend("reading the revision"))?
            .map_or(0, |guard| guard.value()))
    }

    /// One page of the keys under `prefix` at `revision` (the current one if `None`).
    ///
    /// For an older revision the caller has waited until the history holds every event up to
    /// the current revision, so the events after `revision` can be undone.
    fn list_page(
        &self,
        prefix: &str,
        options: &ListOptions,
        txn: redb::ReadTransaction,
    ) -> Result<ListResult> {
        // One read transaction for the revision and the items, so they describe one snapshot.
        let snapshot = Self::snapshot_revision(&txn)?;
        let revision = options.revision.unwrap_or(snapshot);
        let then = if revision < snapshot {
            page::state_before(&self.history.changes_between(prefix, revision, snapshot)?)
        } else {
            BTreeMap::new()
        };
        let table = txn
            .open_table(KV)
            .map_err(backend("opening the kv table"))?;
        let start = match options.after_key.as_deref() {
            Some(after) if after >= prefix => Bound::Excluded(after),
            _ => Bound::Included(prefix),
        };
        let current = table
            .range::<&str>((start, Bound::Unbounded))
            .map_err(backend("listing keys"))?
            .map(|entry| {
                let (key, raw) = entry.map_err(backend("listing keys"))?;
                decode(key.value().into(), raw.value())
            })
            .take_while(|kv| match kv {
                Ok(kv) => under_prefix(&kv.key, prefix),
                // Hand the failure on to fail the page.
                Err(_) => true,
            });
        let (items, more) = page::page(current, then, options.after_key.as_deref(), options.limit)?;
        Ok(ListResult {
            items,
            revision,
            more,
        })
    }
}

fn encode(kv: &KeyValue, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(16 + kv.value.len());
    out.extend_from_slice(&kv.create_revision.to_le_bytes());
    out.extend_from_slice(&kv.mod_revision.to_le_bytes());
    out.extend_from_slice(&kv.value);
}

fn decode(key: Arc<str>, raw: &[u8]) -> Result<KeyValue> {
    let Some((create, rest)) = raw.split_first_chunk::<8>() else {
        return Err(short_record(&key));
    };
    let Some((modified, value)) = rest.split_first_chunk::<8>() else {
        return Err(short_record(&key));
    };
    Ok(KeyValue {
        value: Bytes::copy_from_slice(value),
        create_revision: u64::from_le_bytes(*create),
        mod_revision: u64::from_le_bytes(*modified),
        key,
    })
}

fn short_record(key: &str) -> StoreError {
    StoreError::Corrupt {
        detail: format!("record of key {key:?} is shorter than its revision header"),
    }
}

impl InProcess for EmbeddedStore {
    fn history(&self) -> &Arc<History> {
        &self.shared.history
    }
}

impl Backend for EmbeddedStore {
    fn revision(&self) -> Revision {
        self.shared.revision.load(Ordering::Acquire)
    }

    async fn read(&self, key: &str) -> Result<Option<KeyValue>> {
        // A point read is a few page lookups, mostly cached: cheaper inline than a hop to the
        // blocking pool.
        self.shared.get(key)
    }

    async fn read_page(&self, prefix: &str, options: &ListOptions) -> Result<ListResult> {
        let current = self.revision();
        if let Some(revision) = options.revision
            && revision > current
        {
            return Err(StoreError::FutureRevision { revision, current });
        }
        // The read transaction starts after `current` was acknowledged, so it sees at least
        // that revision; to undo what came after an older one, the history must hold every
        // event up to what the transaction sees.
        let txn = self
            .shared
            .db
            .begin_read()
            .map_err(backend("starting a read transaction"))?;
        if options.revision.is_some() {
            let snapshot = Shared::snapshot_revision(&txn)?;
            self.shared.history.wait_published(snapshot).await?;
        }
        // A listing can read a large part of the file, so it runs on the blocking pool.
        let shared = Arc::clone(&self.shared);
        let prefix = prefix.to_owned();
        let options = options.clone();
        tokio::task::spawn_blocking(move || shared.list_page(&prefix, &options, txn))
            .await
            .map_err(backend("listing keys"))?
    }

    /// Queues `op` for the writer thread, which commits it in a batch with its neighbours.
    async fn apply(&self, op: Op) -> Result<Outcome> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(Msg::Write(Request { op, reply }))
            .map_err(|_| StoreError::Closed)?;
        // A dropped reply means the writer stopped before reaching this request. If the
        // caller stops waiting instead, the write may still be applied, as with etcd.
        answer.await.map_err(|_| StoreError::Closed)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_short_records_are_corrupt() {
        let kv = KeyValue {
            key: "/k".into(),
            value: Bytes::from_static(b"payload"),
            create_revision: 3,
            mod_revision: u64::MAX,
        };
        let mut raw = Vec::new();
        encode(&kv, &mut raw);
        assert_eq!(decode("/k".into(), &raw).ok(), Some(kv));
        assert!(matches!(
            decode("/k".into(), &raw[..15]),
            Err(StoreError::Corrupt { .. })
        ));
    }
}

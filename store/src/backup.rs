//! Backups of a whole store, for every backend: every key of one snapshot in the order of
//! the writes that made it (`mod_revision`), in a self-checking file, and a restore that
//! replays them in that order into an empty store.
//!
//! The file is checked as a whole (magic, version, every record, count and checksum) before
//! a restore writes anything, so a truncated or damaged file changes nothing. A restore
//! gives every key a new revision, as etcd's own snapshot restore does not: the order of the
//! keys' revisions is kept (ties, keys one write changed together, follow key order), their
//! numbers are not, so clients must list again, as after any restore.
//!
//! Format (integers big-endian): `MERIDIAN-BACKUP\n`, version `u32` (1), the snapshot's
//! revision `u64`, then per key: key length `u32`, key, value length `u32`, value, its
//! `mod_revision` `u64`; then the end mark `u32::MAX`, the key count `u64` and an FNV-1a
//! 64-bit checksum of every byte before it.

use bytes::Bytes;

use crate::{KeyValue, ListOptions, Revision, Storage, StoreError};

const MAGIC: &[u8] = b"MERIDIAN-BACKUP\n";
const VERSION: u32 = 1;
const END: u32 = u32::MAX;
/// Keys read per page of the snapshot.
const PAGE: usize = 1000;

/// One key of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The store key.
    pub key: String,
    /// Its value.
    pub value: Bytes,
    /// The revision that last wrote it in the store the backup was taken from.
    pub mod_revision: Revision,
}

/// A decoded backup: its entries in write order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The revision of the snapshot.
    pub revision: Revision,
    /// Every key, by `mod_revision` (then key).
    pub entries: Vec<Entry>,
}

/// Why a file is not a usable backup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// It does not start like a backup.
    #[error("not a Meridian backup (no MERIDIAN-BACKUP header)")]
    NotABackup,
    /// A version this build does not read.
    #[error("backup format version {0} is not supported (this build reads version {VERSION})")]
    Version(u32),
    /// It ends before its end mark, count and checksum: cut short.
    #[error("backup is truncated at byte {0} (copied or written only in part?)")]
    Truncated(usize),
    /// Its bytes are not what was written.
    #[error("backup is damaged: {0}")]
    Damaged(String),
}

/// Why a backup or restore failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The file is not a usable backup (nothing was written).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The target store already holds keys (nothing was written).
    #[error("the target store is not empty (it holds {key:?}): restore only into an empty store")]
    NotEmpty {
        /// One key it holds.
        key: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a backup or restore covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Keys copied.
    pub keys: usize,
    /// The snapshot's revision (backup) or the last revision written (restore).
    pub revision: Revision,
}

/// Whether `key` is the store's bookkeeping rather than data: the etcd compactors'
/// coordination key belongs to the cluster it is in.
fn is_bookkeeping(key: &str) -> bool {
    key == crate::etcd::keys::COMPACT_KEY
}

/// Reads every key of one snapshot of `store` (paged, every page at the first one's
/// revision), ordered by the writes that made them.
pub async fn take(store: &dyn Storage) -> Result<Backup, BackupError> {
    let mut options = ListOptions {
        limit: PAGE,
        ..ListOptions::default()
    };
    let mut kvs: Vec<KeyValue> = Vec::new();
    let revision = loop {
        let page = store.list_page("", &options).await?;
        options.revision = Some(page.revision);
        options.after_key = page.items.last().map(|kv| kv.key.to_string());
        kvs.extend(page.items);
        if !page.more {
            break page.revision;
        }
    };
    let mut entries: Vec<Entry> = kvs
        .into_iter()
        .filter(|kv| !is_bookkeeping(&kv.key))
        .map(|kv| Entry {
            key: kv.key.to_string(),
            value: kv.value,
            mod_revision: kv.mod_revision,
        })
        .collect();
    entries.sort_by(|a, b| (a.mod_revision, &a.key).cmp(&(b.mod_revision, &b.key)));
    Ok(Backup { revision, entries })
}

/// Writes `backup` into an empty `store`, one create per key in write order. Fails without
/// writing when the store holds any key.
pub async fn restore(store: &dyn Storage, backup: &Backup) -> Result<Summary, BackupError> {
    let existing = store
        .list_page(
            "",
            &ListOptions {
                limit: 2,
                ..ListOptions::default()
            },
        )
        .await?;
    if let Some(kv) = existing.items.iter().find(|kv| !is_bookkeeping(&kv.key)) {
        return Err(BackupError::NotEmpty {
            key: kv.key.to_string(),
        });
    }
    let mut revision = existing.revision;
    for entry in &backup.entries {
        revision = store
            .create(&entry.key, entry.value.clone())
            .await?
            .mod_revision;
    }
    Ok(Summary {
        keys: backup.entries.len(),
        revision,
    })
}

/// The file's bytes for `backup`.
pub fn encode(backup: &Backup) -> Vec<u8> {
    let size: usize = backup
        .entries
        .iter()
        .map(|e| 16 + e.key.len() + e.value.len())
        .sum();
    let mut out = Vec::with_capacity(MAGIC.len() + 32 + size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&backup.revision.to_be_bytes());
    for e in &backup.entries {
        put_bytes(&mut out, e.key.as_bytes());
        put_bytes(&mut out, &e.value);
        out.extend_from_slice(&e.mod_revision.to_be_bytes());
    }
    out.extend_from_slice(&END.to_be_bytes());
    out.extend_from_slice(&(backup.entries.len() as u64).to_be_bytes());
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_be_bytes());
    out
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys and values are far below 4 GiB (etcd's own request limit is 1.5 MiB).
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// The backup in `bytes`, checked whole: header, records, order, count and checksum.
pub fn decode(bytes: &[u8]) -> Result<Backup, FormatError> {
    let mut r = Reader { bytes, at: 0 };
    if !bytes.starts_with(MAGIC) {
        return Err(if MAGIC.starts_with(bytes) && !bytes.is_empty() {
            FormatError::Truncated(bytes.len())
        } else {
            FormatError::NotABackup
        });
    }
    r.at = MAGIC.len();
    let version = r.u32()?;
    if version != VERSION {
        return Err(FormatError::Version(version));
    }
    let revision = r.u64()?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut keys = std::collections::HashSet::new();
    loop {
        let len = r.u32()?;
        if len == END {
            break;
        }
        let key = String::from_utf8(r.take(len as usize)?.to_vec())
            .map_err(|_| FormatError::Damaged(format!("key at byte {} is not UTF-8", r.at)))?;
        let value_len = r.u32()? as usize;
        let value = Bytes::copy_from_slice(r.take(value_len)?);
        let mod_revision = r.u64()?;
        if !key.starts_with('/') {
            return Err(FormatError::Damaged(format!("{key:?} is not a store key")));
        }
        if mod_revision > revision {
            return Err(FormatError::Damaged(format!(
                "{key:?} was written at {mod_revision}, after the snapshot ({revision})"
            )));
        }
        if let Some(last) = entries.last()
            && (last.mod_revision, &last.key) >= (mod_revision, &key)
        {
            return Err(FormatError::Damaged(format!(
                "{key:?} is out of write order after {:?}",
                last.key
            )));
        }
        if !keys.insert(key.clone()) {
            return Err(FormatError::Damaged(format!("{key:?} appears twice")));
        }
        entries.push(Entry {
            key,
            value,
            mod_revision,
        });
    }
    let count = r.u64()?;
    let summed = r.at;
    let sum = r.u64()?;
    if r.at != bytes.len() {
        return Err(FormatError::Damaged(format!(
            "{} bytes follow the end",
            bytes.len() - r.at
        )));
    }
    if count != entries.len() as u64 {
        return Err(FormatError::Damaged(format!(
            "{} keys, the end says {count}",
            entries.len()
        )));
    }
    if sum != fnv1a(&bytes[..summed]) {
        return Err(FormatError::Damaged("checksum mismatch".into()));
    }
    Ok(Backup { revision, entries })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(FormatError::Truncated(self.bytes.len()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, FormatError> {
        let mut b = [0; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, FormatError> {
        let mut b = [0; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
}

/// FNV-1a, 64 bits: catches damaged bytes; the end mark and count catch truncation.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Backup {
        Backup {
            revision: 9,
            entries: vec![
                Entry {
                    key: "/core/namespaces/shop".into(),
                    value: Bytes::from_static(b"{\"kind\":\"Namespace\"}"),
                    mod_revision: 2,
                },
                Entry {
                    key: "/apps/deployments/shop/web".into(),
                    value: Bytes::from_static(b"{\"kind\":\"Deployment\"}"),
                    mod_revision: 7,
                },
                Entry {
                    key: "/core/configmaps/shop/a".into(),
                    value: Bytes::new(),
                    mod_revision: 7,
                },
            ],
        }
    }

    #[test]
    fn a_backup_round_trips() {
        assert_eq!(decode(&encode(&sample())).unwrap(), sample());
        let empty = Backup {
            revision: 0,
            entries: Vec::new(),
        };
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    }

    #[test]
    fn every_cut_of_the_file_is_refused_as_truncated() {
        let bytes = encode(&sample());
        for len in 1..bytes.len() {
            match decode(&bytes[..len]) {
                Err(FormatError::Truncated(_)) => {}
                other => panic!("cut at {len}: {other:?}"),
            }
        }
        assert_eq!(decode(b""), Err(FormatError::NotABackup));
        assert_eq!(decode(b"{\"kind\":\"List\"}"), Err(FormatError::NotABackup));
    }

    #[test]
    fn damaged_bytes_versions_and_trailing_bytes_are_refused() {
        let bytes = encode(&sample());
        // Flip one bit in every byte after the header, one at a time.
        for at in MAGIC.len() + 4..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x01;
            assert!(decode(&bad).is_err(), "a flipped bit at {at} went unseen");
        }
        let mut newer = bytes.clone();
        newer[MAGIC.len() + 3] = 2;
        assert_eq!(decode(&newer), Err(FormatError::Version(2)));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(FormatError::Damaged(_))));
    }

    #[test]
    fn entries_out_of_write_order_are_refused() {
        let mut backup = sample();
        backup.entries.swap(0, 1);
        let err = decode(&encode(&backup)).unwrap_err();
        assert!(err.to_string().contains("out of write order"), "{err}");
    }
}

//! Where the store's keys live in etcd: under one prefix, and nowhere else.
//!
//! Store keys are paths (`/apps/deployments/ns/name`); in etcd each one is the prefix followed
//! by the key (`/registry/apps/deployments/ns/name`). Every range the backend reads or watches
//! is the prefix plus `/` plus more, so keys of a sibling prefix (`/registry2/...`) or of other
//! applications sharing the cluster are never read, listed, watched or written.

use std::sync::Arc;

use crate::{Result, StoreError};

/// The key the replicas' compactors coordinate through (a store key, so inside the prefix).
pub(crate) const COMPACT_KEY: &str = "/compact_rev_key";

/// Why an etcd prefix was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("etcd prefix {prefix:?} must start with '/'")]
pub struct InvalidPrefix {
    /// The refused prefix.
    pub prefix: String,
}

/// Maps store keys to etcd keys under one prefix and back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    /// The prefix without a trailing `/` (`/registry`; empty for `/`).
    root: String,
}

impl Keys {
    /// Keys under `prefix` (e.g. `/registry`; a trailing `/` changes nothing).
    pub(crate) fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        if !prefix.starts_with('/') {
            return Err(InvalidPrefix {
                prefix: prefix.to_owned(),
            });
        }
        Ok(Keys {
            root: prefix.trim_end_matches('/').to_owned(),
        })
    }

    /// The etcd key of store key `key` (which starts with `/`).
    pub(crate) fn key(&self, key: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.root.len() + key.len());
        out.extend_from_slice(self.root.as_bytes());
        out.extend_from_slice(key.as_bytes());
        out
    }

    /// The etcd range `[start, end)` holding every store key under store prefix `prefix`
    /// (empty, or starting with `/`).
    pub(crate) fn range(&self, prefix: &str) -> (Vec<u8>, Vec<u8>) {
        let prefix = if prefix.is_empty() { "/" } else { prefix };
        let start = self.key(prefix);
        let end = range_end(&start);
        (start, end)
    }

    /// The etcd key just after store key `key`: where a page that ended at `key` continues.
    pub(crate) fn key_after(&self, key: &str) -> Vec<u8> {
        let mut out = self.key(key);
        out.push(0);
        out
    }

    /// The store key of etcd key `raw`, which must lie under the prefix.
    pub(crate) fn store_key(&self, raw: &[u8]) -> Result<Arc<str>> {
        let rest = raw
            .strip_prefix(self.root.as_bytes())
            .filter(|rest| rest.starts_with(b"/"))
            .ok_or_else(|| StoreError::Corrupt {
                detail: format!(
                    "etcd returned key {:?} outside the prefix {:?}",
                    String::from_utf8_lossy(raw),
                    self.root
                ),
            })?;
        std::str::from_utf8(rest)
            .map(Arc::from)
            .map_err(|_| StoreError::Corrupt {
                detail: format!("etcd key {:?} is not UTF-8", String::from_utf8_lossy(raw)),
            })
    }
}

/// The smallest key greater than every key starting with `start` (`start` is never empty and
/// starts with `/`, so the increment always finds a byte below 0xff).
fn range_end(start: &[u8]) -> Vec<u8> {
    let mut end = start.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Unreachable for a path; etcd reads `\0` as "to the end of the keyspace".
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_under_the_prefix() {
        let keys = Keys::new("/registry").unwrap();
        assert_eq!(keys, Keys::new("/registry/").unwrap());
        assert_eq!(
            keys.key("/apps/deployments/ns/web"),
            b"/registry/apps/deployments/ns/web"
        );
        assert_eq!(
            &*keys
                .store_key(b"/registry/apps/deployments/ns/web")
                .unwrap(),
            "/apps/deployments/ns/web"
        );
        assert_eq!(keys.key_after("/a/b"), b"/registry/a/b\0");
    }

    #[test]
    fn the_whole_store_is_the_prefix_and_a_slash() {
        let keys = Keys::new("/registry").unwrap();
        // Not `/registry` alone: that range would also hold `/registry2/...`.
        assert_eq!(
            keys.range(""),
            (b"/registry/".to_vec(), b"/registry0".to_vec())
        );
        assert_eq!(
            keys.range("/apps/"),
            (b"/registry/apps/".to_vec(), b"/registry/apps0".to_vec())
        );
        assert_eq!(
            keys.range("/a"),
            (b"/registry/a".to_vec(), b"/registry/b".to_vec())
        );
    }

    #[test]
    fn keys_outside_the_prefix_are_refused() {
        let keys = Keys::new("/registry").unwrap();
        for raw in [&b"/registry2/x"[..], b"/other/x", b"/registry", b"/regist"] {
            assert!(keys.store_key(raw).is_err(), "{raw:?}");
        }
        assert!(Keys::new("registry").is_err());
    }

    #[test]
    fn the_root_prefix_covers_every_path() {
        let keys = Keys::new("/").unwrap();
        assert_eq!(keys.key("/a"), b"/a");
        assert_eq!(keys.range(""), (b"/".to_vec(), b"0".to_vec()));
        assert_eq!(&*keys.store_key(b"/a").unwrap(), "/a");
    }

    #[test]
    fn range_end_carries_past_0xff() {
        assert_eq!(range_end(b"/a\xff\xff"), b"/b");
    }
}

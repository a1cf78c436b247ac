//! Backups across backends: a snapshot taken from one store (memory, embedded, etcd) restored
//! into an empty store of another keeps every key and value and the order of their writes;
//! a damaged file or a store that is not empty is refused with nothing written.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use meridian_store::backup::{self, BackupError, FormatError};
use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions};
use meridian_store::{EmbeddedStore, EtcdOptions, EtcdStore, MemoryStore, Storage};

/// Objects of several kinds written, updated and deleted so that write order differs from
/// key order and from creation order. Returns the keys expected, in write order.
async fn fill(store: &dyn Storage) -> Vec<(String, Bytes)> {
    let json = |kind: &str, n: u32| Bytes::from(format!("{{\"kind\":\"{kind}\",\"n\":{n}}}"));
    let mut keys = vec![
        ("/core/namespaces/shop", json("Namespace", 0)),
        ("/apps/deployments/shop/web", json("Deployment", 1)),
        ("/core/configmaps/shop/web-config", json("ConfigMap", 2)),
        ("/core/services/shop/web", json("Service", 3)),
        (
            "/federation.meridian.dev/propagationpolicies/shop/web",
            json("PropagationPolicy", 4),
        ),
        ("/core/secrets/shop/gone", json("Secret", 5)),
        (
            "/federation.meridian.dev/clusters/sim-1",
            json("Cluster", 6),
        ),
    ];
    for (key, value) in &keys {
        store.create(key, value.clone()).await.unwrap();
    }
    // The Deployment is updated last but one, the Secret deleted.
    let web = store.get(keys[1].0).await.unwrap().unwrap();
    keys[1].1 = json("Deployment", 10);
    store
        .update(keys[1].0, keys[1].1.clone(), web.mod_revision)
        .await
        .unwrap();
    let ns = store.get(keys[0].0).await.unwrap().unwrap();
    keys[0].1 = json("Namespace", 11);
    store
        .update(keys[0].0, keys[0].1.clone(), ns.mod_revision)
        .await
        .unwrap();
    store.delete("/core/secrets/shop/gone", None).await.unwrap();
    keys.remove(5);
    let order = [2, 3, 4, 5, 1, 0];
    order
        .iter()
        .map(|&i| (keys[i].0.to_owned(), keys[i].1.clone()))
        .collect()
}

/// Every key of `store` with its value, in the order of their mod_revisions.
async fn in_write_order(store: &dyn Storage) -> Vec<(String, Bytes)> {
    let mut items = store.list("").await.unwrap().items;
    items.retain(|kv| &*kv.key != "/compact_rev_key");
    items.sort_by_key(|kv| kv.mod_revision);
    items
        .into_iter()
        .map(|kv| (kv.key.to_string(), kv.value))
        .collect()
}

struct Etcd {
    store: EtcdStore,
    _etcd: LocalEtcd,
    _dir: tempfile::TempDir,
}

async fn etcd() -> Etcd {
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(LocalEtcdOptions {
        binary: common::etcd_binary(),
        dir: dir.path().to_owned(),
        members: 1,
        tls: None,
        extra_args: Vec::new(),
        hosts: Vec::new(),
    })
    .await
    .unwrap();
    let store = EtcdStore::connect(EtcdOptions {
        compaction_interval: None,
        ..EtcdOptions::new(etcd.endpoints())
    })
    .await
    .unwrap();
    Etcd {
        store,
        _etcd: etcd,
        _dir: dir,
    }
}

/// Backs `from` up through the file format and restores it into `to`; checks both.
async fn round_trip(from: &dyn Storage, to: &dyn Storage) {
    let expected = fill(from).await;
    assert_eq!(in_write_order(from).await, expected);
    let taken = backup::take(from).await.unwrap();
    let file = backup::encode(&taken);
    let decoded = backup::decode(&file).unwrap();
    assert_eq!(decoded, taken);
    let summary = backup::restore(to, &decoded).await.unwrap();
    assert_eq!(summary.keys, expected.len());
    assert_eq!(in_write_order(to).await, expected);
    // The restored revisions are new but in the same order, and the last is the store's.
    assert_eq!(summary.revision, to.latest_revision().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_to_etcd_keeps_every_object_and_the_write_order() {
    let dir = tempfile::tempdir().unwrap();
    let embedded = EmbeddedStore::open(dir.path()).unwrap();
    let etcd = etcd().await;
    round_trip(&embedded, &etcd.store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_to_memory_leaves_etcds_bookkeeping_behind() {
    let etcd = etcd().await;
    // A compaction round's key is the source cluster's, not data.
    etcd.store
        .create("/compact_rev_key", Bytes::from_static(b"x"))
        .await
        .unwrap();
    let memory = MemoryStore::new();
    let dir = tempfile::tempdir().unwrap();
    let embedded = EmbeddedStore::open(dir.path()).unwrap();
    let expected = fill(&etcd.store).await;
    let taken = backup::take(&etcd.store).await.unwrap();
    assert!(taken.entries.iter().all(|e| e.key != "/compact_rev_key"));
    for to in [&memory as &dyn Storage, &embedded] {
        backup::restore(to, &taken).await.unwrap();
        assert_eq!(in_write_order(to).await, expected);
    }
}

#[tokio::test]
async fn memory_to_embedded_round_trips() {
    let memory = MemoryStore::new();
    let dir = tempfile::tempdir().unwrap();
    let embedded = EmbeddedStore::open(dir.path()).unwrap();
    round_trip(&memory, &embedded).await;
}

#[tokio::test]
async fn a_truncated_file_or_a_full_store_writes_nothing() {
    let source = MemoryStore::new();
    fill(&source).await;
    let file = backup::encode(&backup::take(&source).await.unwrap());
    let target: Arc<dyn Storage> = Arc::new(MemoryStore::new());
    // What the command does: decode the whole file first, restore only what decoded.
    for cut in [file.len() - 1, file.len() / 2, 20] {
        let err = backup::decode(&file[..cut]).unwrap_err();
        assert!(matches!(err, FormatError::Truncated(_)), "{err}");
        assert!(err.to_string().contains("truncated"), "{err}");
    }
    assert_eq!(target.latest_revision().await.unwrap(), 0);

    let full = MemoryStore::new();
    full.create("/core/namespaces/x", Bytes::new())
        .await
        .unwrap();
    let before = full.latest_revision().await.unwrap();
    let err = backup::restore(&full, &backup::decode(&file).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackupError::NotEmpty { key } if key == "/core/namespaces/x"),
        "{err}"
    );
    assert_eq!(full.latest_revision().await.unwrap(), before);
}

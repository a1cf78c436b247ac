//! The conformance suite run against `EtcdStore` on a real etcd, plus what only etcd has: the prefix, TLS, several replicas, quorum.
//!
//! Every test starts its own etcd on free loopback ports with a temporary data directory
//! (killed when the test ends). The binary is `$ETCD`, or what `tools/install-etcd.sh`
//! installs; without one the tests fail.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Fixture, etcd_binary, next_event};
use etcd_client::GetOptions;
use futures::future::BoxFuture;
use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions, MemberHost, ServerTls};
use meridian_store::{EtcdOptions, EtcdStore, EtcdTls, ListOptions, Storage, StoreError};
use tokio::time::Instant;

/// etcd's periodic progress notifications come this often in these tests (10 minutes by
/// default), so watches see progress without waiting for writes.
const PROGRESS_NOTIFY: &str = "--experimental-watch-progress-notify-interval=250ms";

/// An etcd cluster of `members` in a temporary directory.
struct Cluster {
    etcd: LocalEtcd,
    // Dropped after `etcd`, so the members are dead before their directory goes.
    _dir: tempfile::TempDir,
}

async fn start_cluster(members: usize, tls: Option<ServerTls>, dir: tempfile::TempDir) -> Cluster {
    let etcd = LocalEtcd::start(LocalEtcdOptions {
        binary: etcd_binary(),
        dir: dir.path().to_owned(),
        members,
        tls,
        extra_args: vec![PROGRESS_NOTIFY.to_owned()],
        hosts: Vec::new(),
    })
    .await
    .expect("starting etcd");
    Cluster { etcd, _dir: dir }
}

/// Options for the tests: short timeouts, no compaction rounds unless a test asks.
fn options(endpoints: Vec<String>, prefix: &str) -> EtcdOptions {
    EtcdOptions {
        prefix: prefix.to_owned(),
        compaction_interval: None,
        request_timeout: Duration::from_secs(5),
        ..EtcdOptions::new(endpoints)
    }
}

async fn connect(cluster: &Cluster, prefix: &str) -> EtcdStore {
    EtcdStore::connect(options(cluster.etcd.endpoints(), prefix))
        .await
        .expect("connecting to etcd")
}

fn open(_history: usize) -> BoxFuture<'static, Fixture> {
    Box::pin(async move {
        let cluster = start_cluster(1, None, tempfile::tempdir().unwrap()).await;
        let store = connect(&cluster, "/registry").await;
        Fixture {
            store: Arc::new(store),
            guard: Box::new(cluster),
        }
    })
}

conformance_tests!(open);

/// Polls `condition` until it holds, failing the test after `patience`.
async fn eventually<F, Fut>(patience: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + patience;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what}: not within {patience:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn val(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_stays_under_the_prefix() {
    let cluster = start_cluster(1, None, tempfile::tempdir().unwrap()).await;
    let ours = connect(&cluster, "/registry").await;
    let sibling = connect(&cluster, "/registry2/").await;
    let mut raw = etcd_client::Client::connect(cluster.etcd.endpoints(), None)
        .await
        .unwrap();
    raw.put("/other/x", "not ours", None).await.unwrap();
    raw.put("/registryx", "not ours either", None)
        .await
        .unwrap();

    let mut watch = ours.watch("", ours.current_revision()).await.unwrap();
    let mine = ours
        .create("/apps/deployments/ns/web", val("a"))
        .await
        .unwrap();
    sibling
        .create("/apps/deployments/ns/web", val("b"))
        .await
        .unwrap();
    let mine2 = ours.create("/core/pods/ns/p", val("c")).await.unwrap();

    // Each prefix lists and watches only its own keys.
    let listed = ours.list("").await.unwrap();
    assert_eq!(listed.items, [mine.clone(), mine2.clone()]);
    assert_eq!(next_event(&mut watch).await.kv, mine);
    assert_eq!(next_event(&mut watch).await.kv, mine2);
    assert_eq!(sibling.list("").await.unwrap().items.len(), 1);
    assert_eq!(ours.get("/x").await.unwrap(), None);

    // And in etcd, the store's keys are the prefix followed by the store key.
    let all = raw
        .get("", Some(GetOptions::new().with_all_keys().with_keys_only()))
        .await
        .unwrap();
    let mut keys: Vec<String> = all
        .kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap().to_owned())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "/other/x",
            "/registry/apps/deployments/ns/web",
            "/registry/core/pods/ns/p",
            "/registry2/apps/deployments/ns/web",
            "/registryx",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlimited_listing_reads_chunks_at_one_revision() {
    const KEYS: usize = 2_500;
    let cluster = start_cluster(1, None, tempfile::tempdir().unwrap()).await;
    let store = Arc::new(connect(&cluster, "/registry").await);
    let writers: Vec<_> = (0..25)
        .map(|w| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for i in 0..KEYS / 25 {
                    store
                        .create(&format!("/big/{w:02}/{i:03}"), val("v0"))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    // Updates race with the listing; it must still be one snapshot.
    let updater = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for i in 0..200 {
                let key = format!("/big/{:02}/{:03}", i % 25, i / 25);
                let kv = store.get(&key).await.unwrap().unwrap();
                store
                    .update(&key, val("v1"), kv.mod_revision)
                    .await
                    .unwrap();
            }
        })
    };
    let list = store.list("/big/").await.unwrap();
    updater.await.unwrap();
    assert_eq!(list.items.len(), KEYS);
    assert!(!list.more);
    assert!(list.items.windows(2).all(|w| w[0].key < w[1].key));
    assert!(list.items.iter().all(|kv| kv.mod_revision <= list.revision));
    // Reading the same revision again gives the same items.
    let again = store
        .list_page(
            "/big/",
            &ListOptions {
                revision: Some(list.revision),
                ..ListOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(again.items, list.items);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_see_each_others_writes() {
    let cluster = start_cluster(1, None, tempfile::tempdir().unwrap()).await;
    let a = connect(&cluster, "/registry").await;
    let b = connect(&cluster, "/registry").await;
    let mut watch_b = b.watch("/r/", b.current_revision()).await.unwrap();

    let created = a.create("/r/x", val("1")).await.unwrap();
    assert_eq!(next_event(&mut watch_b).await.kv, created);
    // Reads are linearizable: B reads A's acknowledged write at once.
    assert_eq!(b.get("/r/x").await.unwrap(), Some(created.clone()));
    assert!(b.latest_revision().await.unwrap() >= created.mod_revision);

    // A race between replicas has one winner; the loser learns the current value.
    let updated = b
        .update("/r/x", val("2"), created.mod_revision)
        .await
        .unwrap();
    match a.update("/r/x", val("3"), created.mod_revision).await {
        Err(StoreError::Conflict { current, .. }) => assert_eq!(current, Some(updated.clone())),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(next_event(&mut watch_b).await.kv, updated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_take_turns_compacting() {
    const INTERVAL: Duration = Duration::from_millis(400);
    let cluster = start_cluster(1, None, tempfile::tempdir().unwrap()).await;
    let replica = |cluster: &Cluster| {
        EtcdStore::connect(EtcdOptions {
            compaction_interval: Some(INTERVAL),
            ..options(cluster.etcd.endpoints(), "/registry")
        })
    };
    let started = Instant::now();
    let a = replica(&cluster).await.unwrap();
    let b = replica(&cluster).await.unwrap();
    let first = a.create("/k/first", val("v")).await.unwrap();
    let before_first = first.mod_revision - 1;
    let (a, b) = (&a, &b);
    // Writes keep the revision moving, so every round has something to compact.
    eventually(
        Duration::from_secs(30),
        "a compaction past the first write",
        || async move {
            a.create(&format!("/k/{}", a.current_revision()), val("v"))
                .await
                .unwrap();
            matches!(
                b.watch("/k/", before_first).await,
                Err(StoreError::Compacted { .. })
            )
        },
    )
    .await;
    // Both replicas learn of the compaction (the loser from the shared key).
    eventually(
        Duration::from_secs(10),
        "both replicas know the compaction",
        || async move { a.known_compaction() > 0 && b.known_compaction() > 0 },
    )
    .await;

    // The shared key's version counts the rounds won: one winner per round, not one per
    // replica and round.
    let rounds = started.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let mut raw = etcd_client::Client::connect(cluster.etcd.endpoints(), None)
        .await
        .unwrap();
    let key = raw.get("/registry/compact_rev_key", None).await.unwrap();
    let version = key.kvs()[0].version();
    assert!(
        (version as f64) <= rounds + 2.0,
        "{version} compaction rounds won in {rounds:.1} intervals by two replicas"
    );
    // Compaction keeps at least one interval of history: the newest write is still watchable.
    let newest = a.create("/k/newest", val("v")).await.unwrap();
    assert!(a.watch("/k/", newest.mod_revision - 1).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_fails_reads_and_comes_back() {
    let mut cluster = start_cluster(1, None, tempfile::tempdir().unwrap()).await;
    let store = connect(&cluster, "/registry").await;
    let kv = store.create("/u/x", val("v")).await.unwrap();
    cluster.etcd.kill(0).unwrap();
    let err = store.latest_revision().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    let err = store.get("/u/x").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    cluster.etcd.restart(0).await.unwrap();
    let store = &store;
    eventually(
        Duration::from_secs(30),
        "etcd answering again",
        || async move { store.latest_revision().await.is_ok() },
    )
    .await;
    assert_eq!(store.get("/u/x").await.unwrap(), Some(kv));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_member_cluster_keeps_serving_without_one_member() {
    let mut cluster = start_cluster(3, None, tempfile::tempdir().unwrap()).await;
    let store = connect(&cluster, "/registry").await;
    let before = store.create("/t/before", val("v")).await.unwrap();
    let mut watch = store.watch("/t/", before.mod_revision).await.unwrap();
    cluster.etcd.kill(2).unwrap();
    // Two of three members are a quorum: writes and reads go on.
    let shared = &store;
    eventually(
        Duration::from_secs(30),
        "a write without member 2",
        || async move {
            match shared.create("/t/after", val("v")).await {
                // A retried write may have been applied by an attempt that timed out.
                Ok(_) | Err(StoreError::AlreadyExists { .. }) => true,
                Err(_) => false,
            }
        },
    )
    .await;
    let after = store
        .get("/t/after")
        .await
        .unwrap()
        .expect("the write is there");
    assert_eq!(store.list("/t/").await.unwrap().items.len(), 2);
    // The watch either carries on or reports why it stopped; it never skips.
    match common::next_item(&mut watch).await {
        Some(Ok(event)) => assert_eq!(event.kv, after),
        Some(Err(err)) => assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}"),
        None => panic!("the watch ended without saying why"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_cluster_comes_back_with_its_data_on_its_ports() {
    let dir = tempfile::tempdir().unwrap();
    let options = LocalEtcdOptions {
        binary: etcd_binary(),
        dir: dir.path().to_owned(),
        members: 3,
        tls: None,
        extra_args: Vec::new(),
        hosts: Vec::new(),
    };
    let etcd = LocalEtcd::start(options.clone()).await.unwrap();
    let ports = etcd.ports().to_vec();
    assert_eq!(ports.len(), 6);
    let store = EtcdStore::connect(self::options(etcd.endpoints(), "/registry"))
        .await
        .unwrap();
    let written = store.create("/t/kept", val("v")).await.unwrap();
    drop(store);
    // Every member stops on SIGTERM well within the grace period: none has to be killed.
    assert_eq!(etcd.stop(Duration::from_secs(20)).await, 0);

    let etcd = LocalEtcd::restart_on(options.clone(), ports.clone())
        .await
        .unwrap();
    assert_eq!(etcd.ports(), ports);
    let store = EtcdStore::connect(self::options(etcd.endpoints(), "/registry"))
        .await
        .unwrap();
    assert_eq!(store.get("/t/kept").await.unwrap(), Some(written));
    drop(store);
    drop(etcd);

    let err = LocalEtcd::restart_on(options, ports[..4].to_vec())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("3 members need 6 ports, not 4"),
        "{err}"
    );
}

/// A CA, etcd's serving certificate for 127.0.0.1 and a client certificate, written to `dir`.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: Vec<u8>,
    client_key: Vec<u8>,
}

fn pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let server_key = KeyPair::generate().unwrap();
    let mut server_params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    server_params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let server = server_params.signed_by(&server_key, &issuer).unwrap();

    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "federation-apiserver");
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client = client_params.signed_by(&client_key, &issuer).unwrap();

    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Pki {
        ca: write("ca.crt", ca.pem()),
        server_cert: write("server.crt", server.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_cert: client.pem().into_bytes(),
        client_key: client_key.serialize_pem().into_bytes(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let tls = ServerTls {
        cert_file: pki.server_cert.clone(),
        key_file: pki.server_key.clone(),
        trusted_ca_file: pki.ca.clone(),
        client_cert_auth: true,
    };
    let cluster = start_cluster(1, Some(tls), dir).await;
    assert!(cluster.etcd.endpoint(0).starts_with("https://"));
    let ca_pem = std::fs::read(&pki.ca).unwrap();

    let store = EtcdStore::connect(EtcdOptions {
        tls: Some(EtcdTls {
            ca_pem: ca_pem.clone(),
            client: Some((pki.client_cert.clone(), pki.client_key.clone())),
        }),
        ..options(cluster.etcd.endpoints(), "/registry")
    })
    .await
    .expect("connecting with a client certificate");
    let kv = store.create("/tls/x", val("v")).await.unwrap();
    assert_eq!(store.get("/tls/x").await.unwrap(), Some(kv));

    // Without a client certificate etcd refuses the connection.
    let refused = EtcdStore::connect(EtcdOptions {
        tls: Some(EtcdTls {
            ca_pem,
            client: None,
        }),
        dial_timeout: Duration::from_secs(2),
        ..options(cluster.etcd.endpoints(), "/registry")
    })
    .await;
    assert!(refused.is_err(), "connected without a client certificate");
}

/// A network namespace joined to this one by a veth pair: a test host with an address of
/// its own (`10.213.N.2`; this side is `10.213.N.1`) that can be cut off and healed.
/// Needs root and `ip` (iproute2); removed, with its link, when dropped.
struct Netns {
    name: String,
    link: String,
    host: std::net::IpAddr,
    guest: std::net::IpAddr,
}

impl Netns {
    fn create() -> Self {
        let pid = std::process::id();
        let subnet = format!("10.213.{}", pid % 250);
        let net = Netns {
            name: format!("meridian-{pid}"),
            link: format!("mg{pid}"),
            host: format!("{subnet}.1").parse().unwrap(),
            guest: format!("{subnet}.2").parse().unwrap(),
        };
        let outside = format!("mh{pid}");
        ip(&["netns", "add", &net.name]);
        ip(&[
            "link", "add", &outside, "type", "veth", "peer", "name", &net.link,
        ]);
        ip(&["link", "set", &net.link, "netns", &net.name]);
        ip(&["addr", "add", &format!("{}/24", net.host), "dev", &outside]);
        ip(&["link", "set", &outside, "up"]);
        net.inside(&[
            "addr",
            "add",
            &format!("{}/24", net.guest),
            "dev",
            &net.link,
        ]);
        net.inside(&["link", "set", &net.link, "up"]);
        net.inside(&["link", "set", "lo", "up"]);
        net
    }

    /// `ip args` run inside the namespace.
    fn inside(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Cuts the namespace off: its end of the link goes down, so nothing passes either way.
    fn cut(&self) {
        self.inside(&["link", "set", &self.link, "down"]);
    }

    fn heal(&self) {
        self.inside(&["link", "set", &self.link, "up"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair with it.
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// `ip args`, which must succeed.
fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("running ip (iproute2): the partition test needs it, as root");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_by_a_partition_is_left_behind_and_catches_up_when_healed() {
    let net = Netns::create();
    let dir = tempfile::tempdir().unwrap();
    let on_host = MemberHost {
        address: net.host,
        netns: None,
    };
    let etcd = LocalEtcd::start(LocalEtcdOptions {
        binary: etcd_binary(),
        dir: dir.path().to_owned(),
        members: 3,
        tls: None,
        extra_args: vec![PROGRESS_NOTIFY.to_owned()],
        hosts: vec![
            on_host.clone(),
            on_host,
            MemberHost {
                address: net.guest,
                netns: Some(net.name.clone()),
            },
        ],
    })
    .await
    .expect("starting etcd with a member in its own network namespace");
    // The store talks to the member that will be cut off first.
    let mut endpoints = etcd.endpoints();
    endpoints.rotate_right(1);
    assert!(
        endpoints[0].contains(&net.guest.to_string()),
        "{endpoints:?}"
    );
    // Pings every second, so a connection to a member that cannot answer is given up on in
    // seconds, not kube-apiserver's 40.
    let quick = |endpoints| EtcdOptions {
        keep_alive: (Duration::from_secs(1), Duration::from_secs(2)),
        ..options(endpoints, "/registry")
    };
    let store = EtcdStore::connect(quick(endpoints)).await.unwrap();
    let before = store.create("/p/before", val("v")).await.unwrap();
    let mut watch = store.watch("/p/", before.mod_revision).await.unwrap();

    net.cut();
    // The two members left are a quorum; the store leaves the cut-off one and writes go on.
    let shared = &store;
    eventually(
        Duration::from_secs(60),
        "a write with member 2 cut off",
        || async move {
            matches!(
                shared.create("/p/during", val("v")).await,
                // A retried write may have been applied by an attempt that timed out.
                Ok(_) | Err(StoreError::AlreadyExists { .. })
            )
        },
    )
    .await;
    for i in 0..20 {
        store.create(&format!("/p/k{i}"), val("v")).await.unwrap();
    }
    let during = store.get("/p/during").await.unwrap().expect("written");
    // The watch either carries on or says why it stopped; it never skips.
    match common::next_item(&mut watch).await {
        Some(Ok(event)) => assert_eq!(event.kv, during),
        Some(Err(err)) => assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}"),
        None => panic!("the watch ended without saying why"),
    }

    net.heal();
    // Healed, the member catches up: a linearizable read through it alone sees every write.
    let alone = EtcdStore::connect(quick(vec![etcd.endpoint(2).to_owned()]))
        .await
        .unwrap();
    let alone = &alone;
    eventually(
        Duration::from_secs(60),
        "member 2 serving every write after the heal",
        || async move { alone.list("/p/").await.is_ok_and(|l| l.items.len() == 22) },
    )
    .await;
    assert_eq!(alone.get("/p/during").await.unwrap(), Some(during));
    drop(etcd);
}

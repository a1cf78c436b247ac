//! The API server on etcd (`--storage-backend etcd`): objects live in etcd under the prefix,
//! survive the server, are shared by two servers, and `/readyz` follows etcd's reachability.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::Server;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions};
use serde_json::json;
use tokio::time::Instant;

async fn start_etcd(dir: &std::path::Path) -> LocalEtcd {
    LocalEtcd::start(LocalEtcdOptions {
        binary: meridian_e2e::etcd_path(),
        dir: dir.to_owned(),
        members: 1,
        tls: None,
        extra_args: Vec::new(),
        hosts: Vec::new(),
    })
    .await
    .expect("starting etcd")
}

fn etcd_flags(etcd: &LocalEtcd) -> Vec<String> {
    vec![
        "--storage-backend=etcd".to_owned(),
        format!("--etcd-servers={}", etcd.endpoints().join(",")),
        "--etcd-prefix=/meridian".to_owned(),
    ]
}

fn start_server(flags: &[String]) -> (Server, tempfile::TempDir) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Server::start(&flags)
}

async fn readyz(server: &Server) -> u16 {
    server
        .http()
        .send("GET", "/readyz", None, "", Vec::new())
        .await
        .status
}

/// Polls `condition` until it holds, failing after `patience`.
async fn eventually<F, Fut>(patience: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + patience;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what}: not within {patience:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_live_in_etcd_and_outlive_the_server() {
    let etcd_dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(etcd_dir.path()).await;
    let (mut server, _dir) = start_server(&etcd_flags(&etcd));
    let client = server.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "e"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "e");
    let created = cms
        .create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    let rv: i64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();

    // The object is in etcd under the prefix, and its resourceVersion is etcd's mod_revision.
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None)
        .await
        .unwrap();
    let stored = raw
        .get("/meridian/core/configmaps/e/one", None)
        .await
        .unwrap();
    assert_eq!(stored.kvs().len(), 1, "not stored under the prefix");
    assert_eq!(stored.kvs()[0].mod_revision(), rv);

    // A new server process on the same etcd serves it unchanged.
    server.restart();
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await, "e");
    let again = cms.get("one").await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(again.data, created.data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_etcd() {
    let etcd_dir = tempfile::tempdir().unwrap();
    let mut etcd = start_etcd(etcd_dir.path()).await;
    let (server, _dir) = start_server(&etcd_flags(&etcd));
    assert_eq!(readyz(&server).await, 200);
    etcd.kill(0).unwrap();
    eventually(
        Duration::from_secs(20),
        "/readyz failing without etcd",
        || async { readyz(&server).await == 503 },
    )
    .await;
    etcd.restart(0).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "/readyz back with etcd",
        || async { readyz(&server).await == 200 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_etcd() {
    let etcd_dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(etcd_dir.path()).await;
    let flags = etcd_flags(&etcd);
    let (a, _dir_a) = start_server(&flags);
    let (b, _dir_b) = start_server(&flags);
    let a_nss: Api<Namespace> = Api::all(a.client().await);
    a_nss
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "shared"}})).unwrap(),
        )
        .await
        .unwrap();
    let a_cms: Api<ConfigMap> = Api::namespaced(a.client().await, "shared");
    let b_cms: Api<ConfigMap> = Api::namespaced(b.client().await, "shared");
    let created = a_cms
        .create(&PostParams::default(), &config_map("x"))
        .await
        .unwrap();
    // B's watch cache follows etcd: the write through A shows up there.
    let b_cms = &b_cms;
    eventually(
        Duration::from_secs(10),
        "B serving A's write",
        || async move { b_cms.get_opt("x").await.unwrap().is_some() },
    )
    .await;
    let seen = b_cms.get("x").await.unwrap();
    assert_eq!(
        seen.metadata.resource_version,
        created.metadata.resource_version
    );
    // A conflicting update through B with the old resourceVersion after an update through A
    // gets 409, as within one server.
    let mut updated = created.clone();
    updated.data = Some([("k".to_owned(), "a".to_owned())].into());
    a_cms
        .replace("x", &PostParams::default(), &updated)
        .await
        .unwrap();
    let mut stale = created.clone();
    stale.data = Some([("k".to_owned(), "b".to_owned())].into());
    match b_cms.replace("x", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_credentials_from_one_directory() {
    let etcd_dir = tempfile::tempdir().unwrap();
    let etcd = start_etcd(etcd_dir.path()).await;
    let shared = tempfile::tempdir().unwrap();
    let mut flags = etcd_flags(&etcd);
    flags.push(format!("--credentials-dir={}", shared.path().display()));
    // The first replica generates the CA and the admin token; the second only reads them.
    let (a, _dir_a) = start_server(&flags);
    let generated: Vec<Vec<u8>> = ["ca.crt", "ca.key", "admin.token"]
        .iter()
        .map(|f| std::fs::read(shared.path().join(f)).unwrap())
        .collect();
    flags.push("--generate-credentials=false".to_owned());
    let (b, _dir_b) = start_server(&flags);
    let after: Vec<Vec<u8>> = ["ca.crt", "ca.key", "admin.token"]
        .iter()
        .map(|f| std::fs::read(shared.path().join(f)).unwrap())
        .collect();
    assert_eq!(
        after, generated,
        "the second replica rewrote the shared files"
    );

    // A's kubeconfig (CA and admin token) pointed at B's address works there: B's serving
    // certificate comes from the shared CA and it accepts the shared token.
    let kc = kube::config::Kubeconfig::read_from(a.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.cluster_url = b.url.parse().unwrap();
    let via_b = kube::Client::try_from(config).unwrap();
    let nss: Api<Namespace> = Api::all(via_b);
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "through-b"}})).unwrap(),
    )
    .await
    .unwrap();
    let a_nss: Api<Namespace> = Api::all(a.client().await);
    eventually(Duration::from_secs(10), "A serving B's write", || async {
        a_nss.get_opt("through-b").await.unwrap().is_some()
    })
    .await;
}

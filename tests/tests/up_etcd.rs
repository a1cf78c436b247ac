//! `fedctl up --storage etcd`: the local stack on a 3-member etcd with two API server
//! replicas sharing credentials; a write through one replica is read and watched through the
//! other, and everything (etcd too) stops with `fedctl up`.

use std::time::Duration;

use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::Up;
use serde_json::json;

fn config_map(value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": "shared"}, "data": {"k": value}}))
        .expect("a ConfigMap")
}

fn server_of(up: &Up, cluster: &str) -> String {
    up.kubectl(&[
        "config",
        "view",
        "-o",
        &format!("jsonpath={{.clusters[?(@.name==\"{cluster}\")].cluster.server}}"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fedctl_up_on_etcd_serves_one_federation_through_two_replicas() {
    let etcd = meridian_e2e::etcd_path();
    let mut up = Up::start_with(
        1,
        &[
            "--storage=etcd".into(),
            format!("--etcd-binary={}", etcd.display()),
        ],
    );
    let (a_url, b_url) = (server_of(&up, "meridian"), server_of(&up, "meridian-b"));
    assert!(
        a_url.starts_with("https://") && b_url.starts_with("https://") && a_url != b_url,
        "replicas at {a_url:?} and {b_url:?}"
    );
    // The fleet joined through the first replica is Ready as the second one serves it.
    let ready = up.kubectl(&[
        "--context",
        "meridian-b",
        "get",
        "clusters",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
    ]);
    assert_eq!(ready.trim(), "sim-1=True", "{ready}");

    let through_a: Api<ConfigMap> = Api::namespaced(up.client("meridian").await, "default");
    let through_b: Api<ConfigMap> = Api::namespaced(up.client("meridian-b").await, "default");
    let listed = through_b
        .list(&ListParams::default())
        .await
        .expect("list through B");
    let from = listed
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let mut watch = Box::pin(
        through_b
            .watch(
                &WatchParams::default().fields("metadata.name=shared"),
                &from,
            )
            .await
            .expect("watch through B"),
    );
    let created = through_a
        .create(&PostParams::default(), &config_map("from-a"))
        .await
        .expect("create through A");
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match watch.try_next().await.expect("watch event") {
                Some(WatchEvent::Added(cm)) => return cm,
                Some(WatchEvent::Bookmark(_)) => {}
                other => panic!("B's watch gave {other:?} before the create"),
            }
        }
    })
    .await
    .expect("B's watch saw A's create within 30 s");
    assert_eq!(
        seen.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(seen.data, created.data);

    // And the other way: an update through B, with A's resourceVersion, read through A.
    let mut change = created.clone();
    change.data = config_map("from-b").data;
    let updated = through_b
        .replace("shared", &PostParams::default(), &change)
        .await
        .expect("update through B");
    let read = through_a.get("shared").await.expect("get through A");
    assert_eq!(
        read.metadata.resource_version,
        updated.metadata.resource_version
    );
    assert_eq!(read.data, updated.data);

    let status = up.proc.terminate().expect("waiting for fedctl up");
    assert!(status.success(), "fedctl up exited with {status}");
    // etcd's members and both replicas are gone with it; the data stays.
    let ports = std::fs::read_to_string(up.data.join("etcd/ports")).expect("etcd's ports");
    let clients = ports.trim().split(',').step_by(2);
    let addresses = clients
        .map(|p| format!("127.0.0.1:{p}"))
        .chain([&a_url, &b_url].map(|u| u.trim_start_matches("https://").to_owned()));
    for address in addresses {
        assert!(
            std::net::TcpStream::connect(&address).is_err(),
            "{address} still accepts connections after fedctl up stopped"
        );
    }
    assert!(up.data.join("etcd/m0").exists() && up.data.join("federation-b/pki").exists());
}

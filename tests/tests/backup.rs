//! `fedctl backup`, `fedctl restore` and `fedctl migrate --to etcd` against real API servers:
//! objects of several kinds written through a server on the embedded store come back intact,
//! in the same resourceVersion order, from a restored embedded store and from etcd; a
//! truncated backup or a store that is not empty is refused and nothing is written.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use meridian_e2e::{KUBECONFIG_LINE, Proc};
use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions};
use serde_json::{Value, json};

const NS: &str = "shop";

fn fedctl(args: &[&str]) -> Output {
    Command::new(meridian_e2e::binary("fedctl"))
        .args(args)
        .output()
        .expect("running fedctl")
}

fn succeeded(args: &[&str]) -> String {
    let out = fedctl(args);
    assert!(
        out.status.success(),
        "fedctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn failed(args: &[&str]) -> String {
    let out = fedctl(args);
    assert!(!out.status.success(), "fedctl {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn server(data_dir: &Path, extra: &[String]) -> (Proc, kube::Client) {
    let proc = meridian_e2e::start_federation_apiserver(data_dir, extra, KUBECONFIG_LINE)
        .unwrap_or_else(|e| panic!("{e}"));
    let kubeconfig = proc.ready_value().expect("kubeconfig line").to_owned();
    let client = meridian_e2e::client(Path::new(&kubeconfig), None).await;
    (proc, client)
}

fn object<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// Objects of several kinds, some updated or deleted after others were written.
async fn write_objects(client: &kube::Client) {
    let pp = PostParams::default();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(&pp, &object(json!({"metadata": {"name": NS}})))
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    for name in ["a", "b", "c"] {
        cms.create(
            &pp,
            &object(
                json!({"metadata": {"name": name, "labels": {"app": "web"}}, "data": {"v": name}}),
            ),
        )
        .await
        .expect("configmap");
    }
    secrets
        .create(
            &pp,
            &object(json!({"metadata": {"name": "token"}, "stringData": {"t": "s3cret"}})),
        )
        .await
        .expect("secret");
    sas.create(&pp, &object(json!({"metadata": {"name": "web"}})))
        .await
        .expect("service account");
    let mut a = cms.get("a").await.expect("get a");
    a.data = Some([("v".to_owned(), "a, again".to_owned())].into());
    cms.replace("a", &pp, &a).await.expect("update a");
    cms.delete("b", &DeleteParams::default())
        .await
        .expect("delete b");
}

/// Every object in the namespace (and the namespace), by kind and name: its resourceVersion
/// and the object without it.
async fn objects(client: &kube::Client) -> BTreeMap<String, (u64, Value)> {
    async fn add<K>(out: &mut BTreeMap<String, (u64, Value)>, api: Api<K>, kind: &str)
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
    {
        for item in api.list(&ListParams::default()).await.expect("list") {
            insert(out, kind, &item);
        }
    }
    /// Adds `item` under `<kind>/<name>`: its resourceVersion, and it without one.
    fn insert(out: &mut BTreeMap<String, (u64, Value)>, kind: &str, item: &impl serde::Serialize) {
        let mut v = serde_json::to_value(item).expect("json");
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse().ok())
            .expect("a resourceVersion");
        v["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("resourceVersion");
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        out.insert(format!("{kind}/{name}"), (rv, v));
    }
    let mut out = BTreeMap::new();
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = nss.get(NS).await.expect("the namespace");
    insert(&mut out, "Namespace", &ns);
    add::<ConfigMap>(&mut out, Api::namespaced(client.clone(), NS), "ConfigMap").await;
    add::<Secret>(&mut out, Api::namespaced(client.clone(), NS), "Secret").await;
    add::<ServiceAccount>(
        &mut out,
        Api::namespaced(client.clone(), NS),
        "ServiceAccount",
    )
    .await;
    out
}

/// The same objects, equal but for resourceVersion, whose resourceVersions are in the same
/// order.
fn assert_same(
    before: &BTreeMap<String, (u64, Value)>,
    after: &BTreeMap<String, (u64, Value)>,
    what: &str,
) {
    let bodies = |m: &BTreeMap<String, (u64, Value)>| -> BTreeMap<String, Value> {
        m.iter().map(|(k, (_, v))| (k.clone(), v.clone())).collect()
    };
    assert_eq!(bodies(after), bodies(before), "{what}: objects differ");
    let order = |m: &BTreeMap<String, (u64, Value)>| -> Vec<String> {
        let mut keys: Vec<(u64, String)> = m.iter().map(|(k, (rv, _))| (*rv, k.clone())).collect();
        keys.sort();
        keys.into_iter().map(|(_, k)| k).collect()
    };
    assert_eq!(
        order(after),
        order(before),
        "{what}: resourceVersion order differs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_restore_and_migration_keep_objects_and_their_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    let (mut proc, client) = server(&source, &[]).await;
    write_objects(&client).await;
    let before = objects(&client).await;
    assert_eq!(before.len(), 5, "{:?}", before.keys());
    proc.terminate().expect("stopping the server");

    let source_arg = format!("--data-dir={}", source.display());
    let file = dir.path().join("federation.backup");
    let out = succeeded(&["backup", &source_arg, "-o", file.to_str().expect("utf-8")]);
    assert!(out.starts_with("backed up "), "{out}");

    // A truncated copy is refused before the target store is even created.
    let bytes = std::fs::read(&file).expect("the backup");
    let cut = dir.path().join("cut.backup");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).expect("cut copy");
    let restored = dir.path().join("restored");
    let restored_arg = format!("--data-dir={}", restored.display());
    let err = failed(&["restore", &restored_arg, "-f", cut.to_str().expect("utf-8")]);
    assert!(
        err.contains("truncated") && err.contains("nothing restored"),
        "{err}"
    );
    assert!(
        !restored.exists(),
        "a refused restore created {}",
        restored.display()
    );

    let out = succeeded(&[
        "restore",
        &restored_arg,
        "-f",
        file.to_str().expect("utf-8"),
    ]);
    assert!(out.contains("must list again"), "{out}");
    // Not twice into the same store.
    let err = failed(&[
        "restore",
        &restored_arg,
        "-f",
        file.to_str().expect("utf-8"),
    ]);
    assert!(err.contains("not empty"), "{err}");

    // Migration into a 3-member etcd.
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let etcd = LocalEtcd::start(LocalEtcdOptions::new(
        meridian_e2e::etcd_path(),
        etcd_dir.path().to_owned(),
        3,
    ))
    .await
    .expect("starting etcd");
    let servers = format!("--etcd-servers={}", etcd.endpoints().join(","));
    let out = succeeded(&["migrate", "--to", "etcd", &source_arg, &servers]);
    assert!(out.starts_with("migrated "), "{out}");

    let (_restored_server, client) = server(&restored, &[]).await;
    assert_same(&before, &objects(&client).await, "restored embedded store");
    let (_etcd_server, client) = server(
        &dir.path().join("on-etcd"),
        &["--storage-backend=etcd".to_owned(), servers.clone()],
    )
    .await;
    assert_same(&before, &objects(&client).await, "etcd after migration");
}

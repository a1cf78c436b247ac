//! Durability: writes under load, SIGKILL, restart — every acknowledged write survives,
//! resourceVersions keep increasing, and watches resume.

mod common;

use std::sync::{Arc, Mutex};

use common::Server;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    let (mut server, _dir) = Server::start(&[]);
    let client = server.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap(),
    )
    .await
    .unwrap();
    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
    let kill_tx = Arc::new(Mutex::new(Some(kill_tx)));
    let mut writers = Vec::new();
    for w in 0..16 {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "d");
        let acked = acked.clone();
        let kill_tx = kill_tx.clone();
        writers.push(tokio::spawn(async move {
            for i in 0.. {
                let name = format!("w{w}-{i}");
                let cm = json!({"metadata": {"name": name}, "data": {"i": i.to_string()}});
                match cms
                    .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
                    .await
                {
                    Ok(c) => {
                        let rv = c.metadata.resource_version.unwrap().parse().unwrap();
                        let mut a = acked.lock().unwrap();
                        a.push((name, rv));
                        if a.len() == 800
                            && let Some(tx) = kill_tx.lock().unwrap().take()
                        {
                            let _ = tx.send(());
                        }
                    }
                    // The server died under us: stop writing.
                    Err(_) => return,
                }
            }
        }));
    }
    kill_rx.await.unwrap();
    server.kill9();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 800);
    let max_rv = acked.iter().map(|(_, rv)| *rv).max().unwrap();

    server.restart();
    let client = server.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "d");
    let list = cms.list(&ListParams::default()).await.unwrap();
    let present: std::collections::HashMap<String, u64> = list
        .items
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.metadata
                    .resource_version
                    .clone()
                    .unwrap()
                    .parse()
                    .unwrap(),
            )
        })
        .collect();
    for (name, rv) in &acked {
        assert_eq!(
            present.get(name),
            Some(rv),
            "acknowledged write {name} at {rv} lost"
        );
    }
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv >= max_rv);

    // A watch from the last revision seen resumes and gets the next write, at a higher revision.
    let mut stream = Box::pin(
        cms.watch(&WatchParams::default(), &list_rv.to_string())
            .await
            .unwrap(),
    );
    let after = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "after"}})).unwrap(),
        )
        .await
        .unwrap();
    let after_rv: u64 = after.metadata.resource_version.unwrap().parse().unwrap();
    assert!(after_rv > list_rv);
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(c) => assert_eq!(c.metadata.name.as_deref(), Some("after")),
        other => panic!("unexpected {other:?}"),
    }
}

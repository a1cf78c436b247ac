//! Events expire after `--event-ttl`, counted from the newest time they record.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::Server;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn event(name: &str, last: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "ConfigMap", "namespace": "default", "name": "x"},
        "reason": "Tested", "message": "m", "type": "Normal",
        "lastTimestamp": last
    }))
    .unwrap()
}

#[tokio::test]
async fn events_past_the_ttl_are_deleted_and_recent_ones_stay() {
    let (server, _dir) = Server::start(&["--event-ttl=2s"]);
    let client = server.client().await;
    // `default` exists from the first start.
    Api::<Namespace>::all(client.clone())
        .get("default")
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client, "default");
    // Recorded a day from now: stays for the whole test.
    let future = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24)).to_string();
    events
        .create(&PostParams::default(), &event("recent", &future))
        .await
        .unwrap();
    // Created now, last recorded long ago: expires once its creation is 2 s old.
    events
        .create(
            &PostParams::default(),
            &event("old", "2020-01-01T00:00:00Z"),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names: Vec<String> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.metadata.name)
            .collect();
        if names == ["recent"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected only the recent Event left, have {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! Unit tests of the watch cache's object buffers and history bounds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use meridian_store::KeyValue;
use serde_json::{Value, json};
use tokio::time::Instant;

use apimachinery::Packer;

use super::{
    CacheEvent, EventType, HISTORY_MIN, HistoryBounds, ResourceState, Text, key_parts, to_cached,
    watch_frame,
};
use crate::kinds::core::{configmaps, secrets};

fn stored(name: &str, rv: u64) -> KeyValue {
    let def = configmaps();
    KeyValue {
        key: def.key("default", name).into(),
        value: Bytes::from(
            serde_json::to_vec(&json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
                "data": {"k": "v"}
            }))
            .unwrap(),
        ),
        create_revision: rv,
        mod_revision: rv,
    }
}

fn event(rv: u64, at: Instant) -> Arc<CacheEvent> {
    let obj = to_cached(
        &configmaps(),
        &stored("a", rv),
        rv,
        Some(&Packer::default()),
    )
    .unwrap();
    Arc::new(CacheEvent {
        rv,
        kind: EventType::Modified,
        obj,
        prev: None,
        at,
    })
}

fn state(events: impl IntoIterator<Item = Arc<CacheEvent>>) -> ResourceState {
    ResourceState {
        objects: BTreeMap::new(),
        history: events.into_iter().collect::<VecDeque<_>>(),
        horizon: 0,
        tx: None,
        broadcast_capacity: 64,
    }
}

#[test]
fn objects_are_held_in_either_form_and_framed_on_the_way_out() {
    for packer in [Some(Packer::default()), None] {
        held_and_framed(packer.as_ref());
    }
}

fn held_and_framed(packer: Option<&Packer>) {
    let c = to_cached(&configmaps(), &stored("a", 7), 7, packer).unwrap();
    let json = c.json();
    assert_eq!(c.json_len(), json.len());
    let v: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(v["metadata"]["resourceVersion"], "7");
    assert_eq!(v["data"]["k"], "v");
    assert_eq!(c.value(), v);
    assert!(!c.deleting);
    for (kind, name) in [
        (EventType::Added, "ADDED"),
        (EventType::Modified, "MODIFIED"),
    ] {
        let frame = c.frame_as(kind);
        assert_eq!(frame, watch_frame(name, &json));
        let parsed: Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(parsed["type"], name);
        assert_eq!(parsed["object"], v);
    }
}

#[test]
fn objects_of_a_resource_are_packed_against_its_first() {
    let def = configmaps();
    let packer = Packer::default();
    let mut packed = 0;
    let mut text = 0;
    for i in 0..50u64 {
        let name = format!("settings-{i}");
        let data: serde_json::Map<String, Value> = ["log-level", "listen-address", "upstream"]
            .iter()
            .map(|k| (k.to_string(), json!(format!("{k}-value-of-{name}"))))
            .collect();
        let kv = KeyValue {
            key: def.key("shop", &name).into(),
            value: Bytes::from(
                serde_json::to_vec(&json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "shop", "uid": format!("3f1c0a{i:02}-77aa-4d1e-9c0b-5e8f2d6a1b3c"),
                        "creationTimestamp": "2026-11-24T10:00:00Z",
                        "labels": {"app.kubernetes.io/name": "shop", "app.kubernetes.io/part-of": "storefront"}},
                    "data": data
                }))
                .unwrap(),
            ),
            create_revision: i + 1,
            mod_revision: i + 1,
        };
        let c = to_cached(&def, &kv, i + 1, Some(&packer)).unwrap();
        assert_eq!(c.value()["metadata"]["name"], name.as_str());
        assert_eq!(
            c.value()["data"]["upstream"],
            format!("upstream-value-of-{name}")
        );
        let Text::Packed(p) = &c.json else {
            panic!("a packer packs");
        };
        if i > 0 {
            packed += p.packed_len();
            text += c.json_len();
        }
    }
    assert!(packed * 3 < text, "{packed} bytes held for {text} of text");
}

#[test]
fn namespace_and_name_are_read_from_the_key() {
    let c = to_cached(&configmaps(), &stored("a", 7), 7, None).unwrap();
    assert_eq!((c.namespace(), c.name()), ("default", "a"));
    assert_eq!(c.field("metadata.namespace"), Some("default"));
    assert_eq!(c.field("metadata.name"), Some("a"));
    assert_eq!(key_parts("/apps/deployments/shop/web"), ("shop", "web"));
    assert_eq!(key_parts("/core/namespaces/shop"), ("", "shop"));
    assert_eq!(
        key_parts("/federation.meridian.dev/clusters/sim-1"),
        ("", "sim-1")
    );
}

#[test]
fn no_secret_becomes_a_dictionary() {
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
        "data": {"password": "c2VjcmV0".repeat(64)}})
    .to_string();
    let (secrets, maps) = (
        Packer::for_kind(secrets().kind),
        Packer::for_kind(configmaps().kind),
    );
    secrets.pack(secret.as_bytes());
    maps.pack(secret.as_bytes());
    assert_eq!(format!("{secrets:?}"), "Packer { dictionary: 0 bytes }");
    assert_ne!(format!("{maps:?}"), "Packer { dictionary: 0 bytes }");
}

#[test]
fn secrets_are_selected_by_type_and_deletion_is_flagged() {
    let def = secrets();
    let kv = KeyValue {
        key: def.key("default", "t").into(),
        value: Bytes::from(
            serde_json::to_vec(&json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                "metadata": {"name": "t", "namespace": "default",
                    "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]}
            }))
            .unwrap(),
        ),
        create_revision: 3,
        mod_revision: 3,
    };
    let c = to_cached(&def, &kv, 3, Some(&Packer::default())).unwrap();
    assert_eq!(c.field("type"), Some("kubernetes.io/service-account-token"));
    assert!(c.deleting);
}

#[test]
fn history_drops_events_older_than_the_window_down_to_the_minimum() {
    let t0 = Instant::now();
    let window = Duration::from_secs(150);
    let old = HISTORY_MIN + 50;
    let events = (1..=old as u64)
        .map(|rv| event(rv, t0))
        .chain((old as u64 + 1..=old as u64 + 10).map(|rv| event(rv, t0 + window)));
    let mut st = state(events);
    let bounds = HistoryBounds {
        max_events: 10_000,
        window,
    };
    // Nothing is past the window yet.
    st.trim(bounds, t0 + window);
    assert_eq!(st.history.len(), old + 10);
    assert_eq!(st.horizon, 0);
    // The old ones are, but the newest HISTORY_MIN stay whatever their age.
    st.trim(bounds, t0 + window + Duration::from_secs(1));
    assert_eq!(st.history.len(), HISTORY_MIN);
    let first = st.history.front().unwrap().rv;
    assert_eq!(
        st.horizon,
        first - 1,
        "the horizon is the last dropped revision"
    );
    assert_eq!(st.history.back().unwrap().rv, old as u64 + 10);
}

#[test]
fn history_never_holds_more_than_max_events() {
    let t0 = Instant::now();
    let mut st = state((1..=20).map(|rv| event(rv, t0)));
    st.trim(
        HistoryBounds {
            max_events: 5,
            window: Duration::from_secs(150),
        },
        t0,
    );
    let rvs: Vec<u64> = st.history.iter().map(|e| e.rv).collect();
    assert_eq!(rvs, vec![16, 17, 18, 19, 20]);
    assert_eq!(st.horizon, 15);
}

//! Unit tests of the watch cache's object buffers and history bounds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use meridian_store::KeyValue;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    CacheEvent, EventType, HISTORY_MIN, HistoryBounds, ResourceState, TextForm, to_cached,
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
    let obj = to_cached(&configmaps(), &stored("a", rv), rv, TextForm::Packed).unwrap();
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
    for form in [TextForm::Packed, TextForm::Plain] {
        held_and_framed(form);
    }
}

fn held_and_framed(form: TextForm) {
    let c = to_cached(&configmaps(), &stored("a", 7), 7, form).unwrap();
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
    let c = to_cached(&def, &kv, 3, TextForm::Packed).unwrap();
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

//! The cluster's Services and EndpointSlices as the runc runtime's Service proxy
//! ([`super::proxy`]) and cluster DNS ([`super::dns`]) follow them: one watch on each kind,
//! and on every change a fresh listing of both published on a `tokio::sync::watch`
//! channel, which both appliers read.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::controllers::endpoints::SERVICE_NAME_LABEL;
use crate::controllers::util::str_at;
use crate::controllers::{Seen, Sim, spawn_watch};

/// Every Service and EndpointSlice of the cluster at one moment.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// The Services.
    pub services: Vec<Value>,
    /// The EndpointSlices.
    pub slices: Vec<Value>,
}

/// Starts the watches; the receiver sees a new [`Listing`] after each change (the first
/// once the caches have been read).
pub(crate) fn spawn(sim: Arc<Sim>) -> (watch::Receiver<Arc<Listing>>, Vec<JoinHandle<()>>) {
    let (tx, rx) = watch::channel(Arc::new(Listing::default()));
    let changed = Arc::new(Notify::new());
    let (a, b) = (changed.clone(), changed.clone());
    let handles = vec![
        spawn_watch(sim.cache(&sim.kinds.services), move |_: Seen<'_>| {
            a.notify_one()
        }),
        spawn_watch(sim.cache(&sim.kinds.endpoint_slices), move |_: Seen<'_>| {
            b.notify_one()
        }),
        tokio::spawn(async move {
            loop {
                changed.notified().await;
                let list = |def: &meridian_apiserver::registry::ResourceDef| -> Vec<Value> {
                    sim.cache(def)
                        .list(&def.namespace_prefix(None), None, None, 0, |_| true)
                        .items
                        .iter()
                        .map(|c| c.value())
                        .collect()
                };
                let listing = Listing {
                    services: list(&sim.kinds.services),
                    slices: list(&sim.kinds.endpoint_slices),
                };
                if tx.send(Arc::new(listing)).is_err() {
                    // Nobody follows any more.
                    return;
                }
            }
        }),
    ];
    (rx, handles)
}

/// The EndpointSlices of the Service `namespace/name` (by the `kubernetes.io/service-name`
/// label, as kube-proxy and CoreDNS find them).
pub(crate) fn slices_of<'a>(slices: &'a [Value], namespace: &str, name: &str) -> Vec<&'a Value> {
    slices
        .iter()
        .filter(|s| {
            str_at(s, "/metadata/namespace") == Some(namespace)
                && s.pointer("/metadata/labels")
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .and_then(Value::as_str)
                    == Some(name)
        })
        .collect()
}

//! Which cluster currently serves which Service, as seen by this agent: what the DNS
//! responder answers from. Recomputed after every table rebuild and health round;
//! subscribers are woken only when it changes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use fed_api::lbconfig::LbConfig;
use tokio::sync::watch;

use crate::table::Table;

/// One snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Serving {
    /// The configuration in force (zone, clusters, addresses, client subnets).
    pub config: Option<Arc<LbConfig>>,
    /// namespace → service → clusters serving it.
    services: HashMap<String, HashMap<String, BTreeSet<String>>>,
}

impl Serving {
    /// Whether `cluster` serves `namespace/service`: this cluster when it has local ready
    /// endpoints passing checks; another when it is Ready in the configuration, has
    /// backends there and passes this agent's health checks.
    pub fn serves(&self, cluster: &str, namespace: &str, service: &str) -> bool {
        self.clusters(namespace, service)
            .is_some_and(|c| c.contains(cluster))
    }

    /// The clusters serving `namespace/service` (None for an unknown Service).
    pub fn clusters(&self, namespace: &str, service: &str) -> Option<&BTreeSet<String>> {
        self.services.get(namespace)?.get(service)
    }
}

/// Computes the snapshot from the table and the backends' current state.
pub fn compute(table: &Table, now: u64) -> Serving {
    let mut out = Serving {
        config: table.config.clone(),
        services: HashMap::new(),
    };
    for r in &table.routes {
        let set = out
            .services
            .entry(r.namespace.clone())
            .or_default()
            .entry(r.service.clone())
            .or_default();
        if r.local.iter().any(|b| b.available(now)) {
            set.insert(table.cluster.clone());
        }
        for e in &r.remote {
            let weight = e.weight.load(std::sync::atomic::Ordering::Relaxed);
            if weight > 0
                && e.backend.available(now)
                && let Some(c) = e.backend.cluster()
            {
                set.insert(c.to_string());
            }
        }
    }
    out
}

/// A cheap read handle on the current snapshot, with change notification.
#[derive(Clone, Debug)]
pub struct ServingView(pub(crate) watch::Receiver<Arc<Serving>>);

impl ServingView {
    /// See [`Serving::serves`].
    pub fn serves(&self, cluster: &str, namespace: &str, service: &str) -> bool {
        self.0.borrow().serves(cluster, namespace, service)
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Serving> {
        self.0.borrow().clone()
    }

    /// A receiver that is notified whenever the snapshot changes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Serving>> {
        self.0.clone()
    }
}

/// Publishes `next` if it differs from the current snapshot.
pub fn publish(tx: &watch::Sender<Arc<Serving>>, next: Serving) {
    tx.send_if_modified(|cur| {
        if **cur == next {
            false
        } else {
            *cur = Arc::new(next);
            true
        }
    });
}

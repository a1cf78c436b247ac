//! The runc runtime's volume provisioner: a runc cluster really stores each claim's data (a
//! host directory per claim, see [`super::volumes`]), so every PersistentVolumeClaim of it
//! is reported `Bound` with its requested size and access modes, as a default StorageClass's
//! dynamic provisioner and the volume binder would report it. Simulated clusters have no
//! provisioner: their claims stay `Pending` unless a StatefulSet made them.

use std::sync::Arc;

use meridian_apiserver::engine::Target;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::controllers::statefulset::bound_status;
use crate::controllers::util::{is_deleting, str_at};
use crate::controllers::{
    Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, done_unless_failed, ns_key, spawn_watch,
    spawn_worker, split_key,
};

/// The provisioner of one runc cluster.
pub(crate) struct Provisioner {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

impl Reconciler<String> for Provisioner {
    const NAME: &'static str = "runc-provisioner";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.pvcs;
        let (ns, name) = split_key(key);
        let Some(claim) = self.sim.cached(def, ns, name) else {
            return Ok(Requeue::No);
        };
        if is_deleting(&claim) || str_at(&claim, "/status/phase") == Some("Bound") {
            return Ok(Requeue::No);
        }
        let written = self
            .sim
            .merge_patch(
                def,
                ns,
                name,
                &json!({"status": bound_status(&claim)}),
                Target::Status,
            )
            .await;
        done_unless_failed(written)?;
        Ok(Requeue::No)
    }
}

/// Spawns the provisioner's watch and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let p = Arc::new(Provisioner {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let q = p.queue.clone();
    vec![
        spawn_watch(sim.cache(&sim.kinds.pvcs), move |ev| {
            if let Seen::Upsert { obj, .. } = ev {
                q.add(ns_key(obj.namespace(), obj.name()));
            }
        }),
        spawn_worker(sim, p.queue.clone(), p),
    ]
}

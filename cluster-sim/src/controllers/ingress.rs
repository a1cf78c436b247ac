//! The ingress controller: every Ingress of the sim's class (`spec.ingressClassName` absent
//! or [`INGRESS_CLASS`]) gets `status.loadBalancer.ingress` with the cluster's one shared
//! ingress address, as ingress-nginx does with `--publish-service`: the controller is exposed
//! by the LoadBalancer Service [`PUBLISH_NAMESPACE`]/[`PUBLISH_SERVICE`], which the
//! load-balancer loop ([`super::loadbalancer`]) gives an address from the cluster's pool, and
//! that address is copied onto each Ingress. The Service is created when the first Ingress of
//! the class appears, so a cluster without Ingresses spends no pool address on it. Ingresses
//! of other classes are left to their controllers (and lose an address this loop wrote only
//! if it is the shared one). Memory: none beyond the queue.

use std::sync::Arc;

use meridian_apiserver::engine::{Target, WriteOptions};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::util::{self, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

/// The IngressClass the sim's ingress controller implements (the cluster's default).
pub const INGRESS_CLASS: &str = "cluster-sim";
/// The `spec.controller` of [`INGRESS_CLASS`].
pub const INGRESS_CONTROLLER: &str = "meridian.dev/cluster-sim-ingress";
/// The namespace of the Service that exposes the ingress controller.
pub const PUBLISH_NAMESPACE: &str = "kube-system";
/// The LoadBalancer Service whose address every Ingress of the class reports.
pub const PUBLISH_SERVICE: &str = "cluster-sim-ingress";
/// The annotation that makes an IngressClass the default (upstream's).
const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

/// Whether the sim's controller serves this Ingress.
pub(crate) fn serves(ingress: &Value) -> bool {
    match str_at(ingress, "/spec/ingressClassName") {
        None => true,
        Some(class) => class == INGRESS_CLASS,
    }
}

/// The `status.loadBalancer.ingress` entries of an object (a Service or an Ingress), as
/// written (an Ingress's entries carry no `ipMode`: only the address and ports are kept).
fn lb_entries(obj: &Value) -> Vec<Value> {
    obj.pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let mut out = serde_json::Map::new();
            for k in ["ip", "hostname"] {
                if let Some(v) = e.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            Value::Object(out)
        })
        .collect()
}

/// The `status.loadBalancer.ingress` an Ingress should report: the publishing Service's
/// addresses when the sim serves it (none while the Service has none), else nothing of the
/// sim's (`None`: leave it to its own controller).
pub(crate) fn desired_entries(ingress: &Value, publish: Option<&Value>) -> Option<Vec<Value>> {
    serves(ingress).then(|| publish.map(lb_entries).unwrap_or_default())
}

/// Creates the IngressClass [`INGRESS_CLASS`], marked the cluster's default; one already
/// there is kept.
pub async fn ensure_ingress_class(sim: &Sim) -> Result<(), SimError> {
    let class = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {
            "name": INGRESS_CLASS,
            "annotations": {DEFAULT_CLASS_ANNOTATION: "true"},
        },
        "spec": {"controller": INGRESS_CONTROLLER},
    });
    match sim
        .engine
        .create(
            &sim.kinds.ingress_classes,
            "",
            class,
            &WriteOptions::by(super::CONTROLLER_MANAGER),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The ingress controller of one cluster.
pub(crate) struct IngressController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

impl IngressController {
    fn publish_service(&self) -> Option<Value> {
        let def = &self.sim.kinds.services;
        self.sim.cached(def, PUBLISH_NAMESPACE, PUBLISH_SERVICE)
    }

    /// Creates the publishing Service (a LoadBalancer with no selector: the controller's
    /// own pods are not simulated).
    async fn create_publish_service(&self) -> Result<(), SimError> {
        let svc = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": PUBLISH_SERVICE,
                "namespace": PUBLISH_NAMESPACE,
                "labels": {"app.kubernetes.io/name": PUBLISH_SERVICE},
            },
            "spec": {
                "type": "LoadBalancer",
                "ports": [
                    {"name": "http", "port": 80, "protocol": "TCP"},
                    {"name": "https", "port": 443, "protocol": "TCP"},
                ],
            },
        });
        match self
            .sim
            .engine
            .create(
                &self.sim.kinds.services,
                PUBLISH_NAMESPACE,
                svc,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Queues every Ingress (the shared address changed).
    fn queue_all(&self) {
        let def = &self.sim.kinds.ingresses;
        for i in self
            .sim
            .cache(def)
            .list(&def.namespace_prefix(None), None, None, 0, |_| true)
            .items
        {
            self.queue.add(ns_key(i.namespace(), i.name()));
        }
    }
}

impl Reconciler<String> for IngressController {
    const NAME: &'static str = "ingress";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.ingresses;
        let (ns, name) = split_key(key);
        let Some(ing) = self.sim.cached(def, ns, name) else {
            return Ok(Requeue::No);
        };
        let publish = self.publish_service();
        if serves(&ing) && publish.is_none() && !util::is_deleting(&ing) {
            // Its address arrives with the Service's (the Service's watch queues us).
            self.create_publish_service().await?;
            return Ok(Requeue::No);
        }
        let current = lb_entries(&ing);
        let want = match desired_entries(&ing, publish.as_ref()) {
            Some(w) => w,
            // Another class: remove only the sim's address, should it have written it.
            None => {
                let ours = publish.as_ref().map(lb_entries).unwrap_or_default();
                if current.is_empty() || current != ours {
                    return Ok(Requeue::No);
                }
                Vec::new()
            }
        };
        if current == want {
            return Ok(Requeue::No);
        }
        let ingress = if want.is_empty() {
            Value::Null
        } else {
            Value::Array(want)
        };
        let written = self
            .sim
            .merge_patch(
                def,
                ns,
                name,
                &json!({"status": {"loadBalancer": {"ingress": ingress}}}),
                Target::Status,
            )
            .await;
        super::done_unless_failed(written)?;
        Ok(Requeue::No)
    }
}

/// Spawns the ingress controller's watches (Ingresses, and the publishing Service) and
/// worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(IngressController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let q = c.queue.clone();
    let a = c.clone();
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.ingresses), move |e| {
            if let Seen::Upsert { obj, .. } = e {
                q.add(ns_key(obj.namespace(), obj.name()));
            }
        }),
        super::spawn_watch(sim.cache(&sim.kinds.services), move |e| {
            let obj = match e {
                Seen::Upsert { obj, .. } | Seen::Deleted { obj } => obj,
                Seen::Reset | Seen::Synced => return,
            };
            if obj.namespace() == PUBLISH_NAMESPACE && obj.name() == PUBLISH_SERVICE {
                a.queue_all();
            }
        }),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_ingresses_get_the_shared_address() {
        let publish = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}});
        let shared = vec![json!({"ip": "192.0.2.1"})];
        let ing = |class: Option<&str>| match class {
            Some(c) => json!({"spec": {"ingressClassName": c}}),
            None => json!({"spec": {}}),
        };
        let cases = [
            ("no class", ing(None), Some(&publish), Some(shared.clone())),
            (
                "the sim's class",
                ing(Some(INGRESS_CLASS)),
                Some(&publish),
                Some(shared.clone()),
            ),
            ("another class", ing(Some("nginx")), Some(&publish), None),
            ("no Service yet", ing(None), None, Some(Vec::new())),
            (
                "Service without an address yet",
                ing(None),
                Some(&json!({"status": {}})),
                Some(Vec::new()),
            ),
        ];
        for (name, ingress, svc, want) in cases {
            assert_eq!(desired_entries(&ingress, svc), want, "{name}");
        }
    }
}

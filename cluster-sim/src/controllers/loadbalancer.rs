//! The cloud load-balancer: Services of type LoadBalancer get `status.loadBalancer.ingress`
//! with the address their `spec.loadBalancerIP` asks for when it is in the cluster's pool,
//! else the first free pool address no other Service asks for (in pool order, so it is
//! deterministic); the address returns to the pool when the Service is deleted or stops
//! being a LoadBalancer. A Service asking for an address another Service holds, or finding
//! the pool exhausted, stays pending (with a Warning event) until an address frees up.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use meridian_apiserver::engine::{Target, WriteOptions};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::util::{lock, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, ns_key, split_key};

#[derive(Default)]
struct State {
    /// Pool index → Service key holding it.
    holder: HashMap<usize, String>,
    /// Service key → pool index.
    assigned: HashMap<String, usize>,
    /// LoadBalancer Services waiting for an address.
    waiting: BTreeSet<String>,
    /// Service key → the pool index its `spec.loadBalancerIP` asks for.
    requested: HashMap<String, usize>,
    /// Service key → the last warning reported for it, so a warning is reported once.
    warned: HashMap<String, String>,
}

impl State {
    fn release(&mut self, key: &str) -> bool {
        match self.assigned.remove(key) {
            Some(i) => {
                self.holder.remove(&i);
                true
            }
            None => false,
        }
    }
}

/// The load-balancer controller of one cluster.
pub(crate) struct LoadBalancerController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
    state: Mutex<State>,
}

fn ingress_ips(svc: &Value) -> Vec<&str> {
    svc.pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("ip").and_then(Value::as_str))
        .collect()
}

/// `spec.loadBalancerIP` of a LoadBalancer Service, if set.
fn requested_ip(svc: &Value) -> Option<&str> {
    if str_at(svc, "/spec/type") != Some("LoadBalancer") {
        return None;
    }
    str_at(svc, "/spec/loadBalancerIP").filter(|ip| !ip.is_empty())
}

/// What a LoadBalancer Service gets.
enum Outcome {
    /// This pool index; with a note when its request could not be honoured.
    Assigned(usize, Option<Warning>),
    /// Nothing yet.
    Pending(Warning),
}

/// A Warning event to report about a Service.
struct Warning {
    reason: &'static str,
    message: String,
}

impl LoadBalancerController {
    fn pool_index(&self, ip: &str) -> Option<usize> {
        let ip: IpAddr = ip.parse().ok()?;
        self.sim.config.lb_pool.iter().position(|p| *p == ip)
    }

    fn requested_index(&self, svc: &Value) -> Option<usize> {
        requested_ip(svc).and_then(|ip| self.pool_index(ip))
    }

    /// Decides the Service's address (under the state lock).
    fn choose(&self, st: &mut State, key: &str, svc: &Value) -> Outcome {
        let pool = &self.sim.config.lb_pool;
        let requested = requested_ip(svc);
        match requested.and_then(|ip| self.pool_index(ip)) {
            Some(want) => {
                if st.assigned.get(key) == Some(&want) {
                    return Outcome::Assigned(want, None);
                }
                if let Some(other) = st.holder.get(&want).filter(|h| h.as_str() != key) {
                    let message = format!(
                        "requested loadBalancerIP {} is in use by Service {other}",
                        pool[want]
                    );
                    // Holding another address meanwhile would hide the conflict.
                    if st.release(key) {
                        self.wake(st);
                    }
                    return Outcome::Pending(Warning {
                        reason: "LoadBalancerIPInUse",
                        message,
                    });
                }
                if st.release(key) {
                    self.wake(st);
                }
                st.holder.insert(want, key.to_string());
                st.assigned.insert(key.to_string(), want);
                Outcome::Assigned(want, None)
            }
            None => {
                let index = match st.assigned.get(key) {
                    Some(i) => Some(*i),
                    None => {
                        let asked: BTreeSet<usize> = st
                            .requested
                            .iter()
                            .filter(|(k, _)| k.as_str() != key)
                            .map(|(_, i)| *i)
                            .collect();
                        let free = (0..pool.len())
                            .find(|i| !st.holder.contains_key(i) && !asked.contains(i));
                        if let Some(i) = free {
                            st.holder.insert(i, key.to_string());
                            st.assigned.insert(key.to_string(), i);
                        }
                        free
                    }
                };
                let not_in_pool = requested.map(|ip| Warning {
                    reason: "LoadBalancerIPNotInPool",
                    message: format!(
                        "requested loadBalancerIP {ip} is not in the cluster's load-balancer pool; using the first free pool address"
                    ),
                });
                match index {
                    Some(i) => Outcome::Assigned(i, not_in_pool),
                    None => Outcome::Pending(not_in_pool.unwrap_or(Warning {
                        reason: "LoadBalancerPoolExhausted",
                        message: "no free address in the cluster's load-balancer pool".into(),
                    })),
                }
            }
        }
    }

    /// Reports a warning once per Service and message (log and Event).
    async fn warn(&self, ns: &str, name: &str, svc: &Value, w: &Warning) {
        let key = ns_key(ns, name);
        {
            let mut st = lock(&self.state);
            if st.warned.get(&key) == Some(&w.message) {
                return;
            }
            st.warned.insert(key.clone(), w.message.clone());
        }
        tracing::warn!(cluster = %self.sim.config.name, service = %key, reason = w.reason, "{}", w.message);
        let now = self.sim.now_rfc3339();
        let suffix: u64 = rand::random();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{name}.{suffix:016x}"), "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Service", "namespace": ns, "name": name,
                "uid": str_at(svc, "/metadata/uid").unwrap_or(""),
            },
            "type": "Warning",
            "reason": w.reason,
            "message": w.message,
            "source": {"component": "service-controller"},
            "reportingComponent": "service-controller",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        if let Err(e) = self
            .sim
            .engine
            .create(
                &self.sim.kinds.events,
                ns,
                event,
                &WriteOptions::by(super::CONTROLLER_MANAGER),
            )
            .await
        {
            tracing::debug!(service = %key, error = %e, "recording the event failed");
        }
    }

    /// Wakes the waiting Services: an address came free.
    fn wake(&self, st: &mut State) {
        for k in std::mem::take(&mut st.waiting) {
            self.queue.add(k);
        }
    }

    fn on_service(&self, seen: Seen<'_>) {
        let mut st = lock(&self.state);
        match seen {
            Seen::Reset => {}
            Seen::Synced => {
                // After a re-list, deletions missed while lagging show up as absences.
                let def = &self.sim.kinds.services;
                let cache = self.sim.cache(def);
                let exists = |k: &String| {
                    let (ns, name) = split_key(k);
                    cache.get(&def.key(ns, name)).is_some()
                };
                let gone: Vec<String> =
                    st.assigned.keys().filter(|k| !exists(k)).cloned().collect();
                let freed = !gone.is_empty();
                for k in gone {
                    st.release(&k);
                }
                st.requested.retain(|k, _| exists(k));
                st.warned.retain(|k, _| exists(k));
                if freed {
                    self.wake(&mut st);
                }
            }
            Seen::Deleted { obj } => {
                let key = ns_key(obj.namespace(), obj.name());
                st.waiting.remove(&key);
                st.requested.remove(&key);
                st.warned.remove(&key);
                if st.release(&key) {
                    self.wake(&mut st);
                }
            }
            Seen::Upsert { obj, .. } => {
                let key = ns_key(obj.namespace(), obj.name());
                let svc = obj.value();
                // Known before any reconcile, so first-free never hands out an address a
                // Service created just after asks for.
                match self.requested_index(&svc) {
                    Some(i) => st.requested.insert(key.clone(), i),
                    None => st.requested.remove(&key),
                };
                // Adopt addresses already written (after a restart) before anything is handed
                // out, so no address is given twice.
                if str_at(&svc, "/spec/type") == Some("LoadBalancer")
                    && !st.assigned.contains_key(&key)
                {
                    for ip in ingress_ips(&svc) {
                        if let Some(i) = self.pool_index(ip)
                            && !st.holder.contains_key(&i)
                        {
                            st.holder.insert(i, key.clone());
                            st.assigned.insert(key.clone(), i);
                            break;
                        }
                    }
                }
                self.queue.add(key);
            }
        }
    }

    async fn write_ingress(&self, ns: &str, name: &str, ingress: Value) -> Result<(), SimError> {
        let patch = json!({"status": {"loadBalancer": ingress}});
        let written = self
            .sim
            .merge_patch(&self.sim.kinds.services, ns, name, &patch, Target::Status)
            .await;
        super::done_unless_failed(written)
    }
}

impl Reconciler<String> for LoadBalancerController {
    const NAME: &'static str = "loadbalancer";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.services;
        let (ns, name) = split_key(key);
        let svc = self.sim.cached(def, ns, name);
        let is_lb = svc.as_ref().is_some_and(|s| {
            str_at(s, "/spec/type") == Some("LoadBalancer") && !super::util::is_deleting(s)
        });
        let Some(svc) = svc else {
            let mut st = lock(&self.state);
            st.waiting.remove(key);
            if st.release(key) {
                self.wake(&mut st);
            }
            return Ok(Requeue::No);
        };
        if !is_lb {
            {
                let mut st = lock(&self.state);
                st.waiting.remove(key);
                if st.release(key) {
                    self.wake(&mut st);
                }
            }
            if !ingress_ips(&svc).is_empty() {
                self.write_ingress(ns, name, json!({"ingress": null}))
                    .await?;
            }
            return Ok(Requeue::No);
        }
        let outcome = {
            let mut st = lock(&self.state);
            let outcome = self.choose(&mut st, key, &svc);
            match &outcome {
                Outcome::Assigned(..) => st.waiting.remove(key),
                // Stay pending until a release wakes us.
                Outcome::Pending(_) => st.waiting.insert(key.clone()),
            };
            outcome
        };
        let ip = match outcome {
            Outcome::Assigned(i, note) => {
                match note {
                    Some(w) => self.warn(ns, name, &svc, &w).await,
                    None => {
                        lock(&self.state).warned.remove(key);
                    }
                }
                self.sim.config.lb_pool[i].to_string()
            }
            Outcome::Pending(w) => {
                self.warn(ns, name, &svc, &w).await;
                if !ingress_ips(&svc).is_empty() {
                    self.write_ingress(ns, name, json!({"ingress": null}))
                        .await?;
                }
                return Ok(Requeue::No);
            }
        };
        if ingress_ips(&svc) == [ip.as_str()] {
            return Ok(Requeue::No);
        }
        self.write_ingress(ns, name, json!({"ingress": [{"ip": ip, "ipMode": "VIP"}]}))
            .await?;
        Ok(Requeue::No)
    }
}

/// Spawns the load-balancer controller's watch and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(LoadBalancerController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
        state: Mutex::new(State::default()),
    });
    let a = c.clone();
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.services), move |e| a.on_service(e)),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

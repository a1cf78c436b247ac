//! The cloud load-balancer: Services of type LoadBalancer get `status.loadBalancer.ingress`
//! with the first free address of the cluster's pool (in pool order, so it is deterministic);
//! the address returns to the pool when the Service is deleted or stops being a
//! LoadBalancer. With the pool exhausted a Service stays pending until an address frees up.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use federation_apiserver::engine::{PatchType, Target, WriteOptions};
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

impl LoadBalancerController {
    fn pool_index(&self, ip: &str) -> Option<usize> {
        let ip: IpAddr = ip.parse().ok()?;
        self.sim.config.lb_pool.iter().position(|p| *p == ip)
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
                let gone: Vec<String> = st
                    .assigned
                    .keys()
                    .filter(|k| {
                        let (ns, name) = split_key(k);
                        cache.get(&def.key(ns, name)).is_none()
                    })
                    .cloned()
                    .collect();
                let freed = !gone.is_empty();
                for k in gone {
                    st.release(&k);
                }
                if freed {
                    self.wake(&mut st);
                }
            }
            Seen::Deleted { obj } => {
                let key = ns_key(&obj.namespace, &obj.name);
                st.waiting.remove(&key);
                if st.release(&key) {
                    self.wake(&mut st);
                }
            }
            Seen::Upsert { obj, .. } => {
                let key = ns_key(&obj.namespace, &obj.name);
                let svc = obj.value();
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
        match self
            .sim
            .engine
            .patch(
                &self.sim.kinds.services,
                ns,
                name,
                PatchType::Merge,
                &patch,
                Target::Status,
                &WriteOptions::default(),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Reconciler<String> for LoadBalancerController {
    const NAME: &'static str = "loadbalancer";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.services;
        let (ns, name) = split_key(key);
        let svc = self
            .sim
            .cache(def)
            .get(&def.key(ns, name))
            .map(|c| c.value());
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
        let ip = {
            let mut st = lock(&self.state);
            let index = match st.assigned.get(key.as_str()) {
                Some(i) => Some(*i),
                None => {
                    let free =
                        (0..self.sim.config.lb_pool.len()).find(|i| !st.holder.contains_key(i));
                    if let Some(i) = free {
                        st.holder.insert(i, key.clone());
                        st.assigned.insert(key.clone(), i);
                    }
                    free
                }
            };
            match index {
                Some(i) => {
                    st.waiting.remove(key);
                    self.sim.config.lb_pool[i].to_string()
                }
                None => {
                    // Pool exhausted: stay pending until a release wakes us.
                    st.waiting.insert(key.clone());
                    return Ok(Requeue::No);
                }
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
        queue: Arc::new(WorkQueue::new()),
        state: Mutex::new(State::default()),
    });
    let a = c.clone();
    vec![
        super::spawn_watch(sim.cache(&sim.kinds.services), move |e| a.on_service(e)),
        super::spawn_worker(sim, c.queue.clone(), c),
    ]
}

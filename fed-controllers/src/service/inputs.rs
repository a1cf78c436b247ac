//! What the service controller hears from the federation and what it queues for it: each
//! watch event reduced to what concerns Services ([`Input`]), and the Services each input
//! concerns ([`Central::on_input`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use fed_api::{Cluster, Placement};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use meridian_runtime::error::Report;
use meridian_runtime::sync::lock;

use super::ServiceKey;
use super::controller::{Central, CentralKey, PlacementSlim, ignored, placement_slim, ready};
use crate::cluster::controller::fingerprint;
use crate::fleet::overrides::Changed;

pub(super) enum Input {
    Service(Box<Result<Event<Service>, watcher::Error>>),
    /// A workload of a backend kind changed in `namespace`: the template labels it had
    /// (`None`: not cached before) and has (`None`: deleted).
    Workload {
        namespace: String,
        labels: [Option<Arc<Labels>>; 2],
    },
    /// A Placement was created or deleted, or its destinations (or a Service Placement's
    /// spec or owner) changed.
    Placement(Box<Placement>),
    Policy(Option<String>),
    Cluster(Box<Result<Event<Cluster>, watcher::Error>>),
    Secret,
    /// The lb-agent listen port allocations are now this (the ConfigMap's data).
    ListenPorts(BTreeMap<String, String>),
    /// The address allocations changed.
    Ports,
    Subnets,
    /// The ResourceInterpreters changed: which custom kinds back Services may have.
    Interpreters,
    /// The CustomResourceDefinitions changed: a custom kind not served yet may be now.
    Definitions,
    /// An override policy changed (`None`: changes were missed).
    Overrides(Option<Changed>),
}

/// What of a Cluster the service controller reacts to: its connection (the member task
/// follows it), and the spec, labels, readiness and lb-agent its passes read.
#[derive(Clone, PartialEq)]
pub(super) struct Seen {
    connection: u64,
    relevant: String,
}

impl Seen {
    fn of(c: &Cluster) -> Self {
        Seen {
            connection: fingerprint(&c.spec, None),
            relevant: format!(
                "{:?}|{:?}|{}|{:?}",
                c.spec,
                c.labels(),
                ready(c),
                c.status.as_ref().and_then(|s| s.lb_agent.as_ref())
            ),
        }
    }
}

/// A Service's selector (`spec.selector`; none selects nothing).
fn selector(s: &Service) -> Labels {
    s.spec
        .as_ref()
        .and_then(|spec| spec.selector.clone())
        .unwrap_or_default()
}

impl Central {
    /// Queues a Service, unless its namespace is one Meridian leaves alone.
    fn push_service(&self, key: ServiceKey) {
        if !ignored(&key.namespace) {
            self.queue.add(CentralKey::Service(key));
        }
    }

    /// Queues what an input concerns.
    pub(super) fn on_input(&self, input: Input) {
        match input {
            Input::Service(ev) => match *ev {
                Ok(Event::Apply(s) | Event::InitApply(s)) => {
                    let key = ServiceKey::new(s.namespace().unwrap_or_default(), s.name_any());
                    lock(&self.selecting).set(key.clone(), selector(&s));
                    self.push_service(key);
                }
                Ok(Event::Delete(s)) => {
                    let key = ServiceKey::new(s.namespace().unwrap_or_default(), s.name_any());
                    lock(&self.selecting).remove(&key);
                    self.push_service(key);
                }
                Ok(Event::InitDone) => {
                    // The relist's Services (the store holds them now): those it no longer
                    // lists select nothing any more.
                    let all = self.caches.services.state();
                    lock(&self.selecting).replace(all.iter().map(|s| {
                        let key = ServiceKey::new(s.namespace().unwrap_or_default(), s.name_any());
                        (key, selector(s))
                    }));
                }
                Ok(Event::Init) => {}
                Err(error) => {
                    tracing::warn!(error = %Report(&error), "federation Service watch failed; retrying")
                }
            },
            Input::Workload { namespace, labels } => {
                // Only the Services that select its pods, before or after the change.
                let known: Vec<&Labels> = labels.iter().flatten().map(|l| &**l).collect();
                self.push_selecting(&namespace, &known);
            }
            Input::Policy(ns) => self.push_services(ns.as_deref()),
            Input::Placement(p) => {
                {
                    let ns = p.namespace().unwrap_or_default();
                    if p.spec.resource.kind == "Service" && p.spec.resource.api_version == "v1" {
                        self.queue.add(CentralKey::Service(ServiceKey::new(
                            ns,
                            p.spec.resource.name.clone(),
                        )));
                    } else {
                        // A workload moved: the Services selecting its pods follow. Kinds
                        // without a pod template back no Service. A workload not cached yet
                        // backs nothing a pass could see: its arrival in the cache
                        // (`Input::Workload`) queues its Services, and this Placement is
                        // cached by then. (Queueing the whole namespace here instead cost a
                        // pass of every Service in it each time the scheduler's Placement
                        // beat the workload's own event.)
                        let r = &p.spec.resource;
                        if let Some(l) =
                            self.caches
                                .workloads
                                .labels(&r.api_version, &r.kind, &ns, &r.name)
                        {
                            self.push_selecting(&ns, &[&l]);
                        }
                    }
                }
            }
            Input::Cluster(ev) => {
                // Whether the member tasks follow the change, and whether a pass does.
                let (reconnect, changed) = match *ev {
                    Ok(Event::Apply(c)) => {
                        let seen = Seen::of(&c);
                        let was = lock(&self.cluster_digests).insert(c.name_any(), seen.clone());
                        // Only a new Cluster or another connection restarts a member task: a
                        // readiness flip re-syncing the whole fleet made a thousand Clusters
                        // turning Ready a million member checks.
                        let reconnect =
                            was.as_ref().is_none_or(|w| w.connection != seen.connection);
                        (reconnect, was != Some(seen))
                    }
                    Ok(Event::Delete(c)) => {
                        lock(&self.cluster_digests).remove(&c.name_any());
                        (true, true)
                    }
                    Ok(Event::InitApply(c)) => {
                        lock(&self.cluster_digests).insert(c.name_any(), Seen::of(&c));
                        (false, false)
                    }
                    Ok(Event::InitDone) => (true, true),
                    Ok(Event::Init) => (false, false),
                    Err(error) => {
                        tracing::warn!(error = %Report(&error), "federation Cluster watch failed; retrying");
                        (false, false)
                    }
                };
                if reconnect {
                    self.sync_members();
                }
                if changed {
                    self.queue.add(CentralKey::Everything);
                }
            }
            Input::Secret => self.sync_members(),
            Input::Interpreters => {
                let all = self.caches.interpreters.state();
                let wanted = super::custom_kinds::wanted(
                    all.iter()
                        .map(|i| (i.metadata.name.as_deref().unwrap_or(""), &i.spec)),
                );
                // A started kind's first list re-queues the Services its objects back; a
                // dropped kind's objects back none any more.
                if self.caches.workloads.sync_custom(&wanted) {
                    self.push_services(None);
                }
            }
            Input::Definitions => self.caches.workloads.definitions_changed(),
            Input::ListenPorts(data) => {
                let old = std::mem::replace(&mut *lock(&self.listen_ports), data);
                let (changed, freed) =
                    super::ports::changed_services(&old, &lock(&self.listen_ports));
                if freed {
                    // A Service waiting for a port may get one now.
                    self.push_services(None);
                } else {
                    for (ns, name) in changed {
                        self.queue
                            .add(CentralKey::Service(ServiceKey::new(ns, name)));
                    }
                }
            }
            Input::Ports => self.push_services(None),
            Input::Subnets => self.queue.add(CentralKey::Global),
            Input::Overrides(changed) => {
                for k in self.service_keys(None) {
                    let ns = Some(k.namespace.as_str());
                    if changed
                        .as_ref()
                        .is_none_or(|c| c.may_affect("v1", "Service", ns))
                    {
                        self.queue.add(CentralKey::Service(k));
                    }
                }
            }
        }
    }
}

/// A pod template's labels: all [`Central::backends`] reads of a workload.
pub(super) type Labels = BTreeMap<String, String>;

/// A Placement event that concerns Services: not the status writes that follow every
/// Placement (a Service's own status is this controller's; a workload's reports members).
pub(super) fn placement_change(
    ev: Result<(Event<Placement>, Option<Arc<PlacementSlim>>), watcher::Error>,
) -> Option<Input> {
    let (ev, before) = ev.ok()?;
    let (p, deleted) = match ev {
        Event::Apply(p) | Event::InitApply(p) => (p, false),
        Event::Delete(p) => (p, true),
        Event::Init | Event::InitDone => return None,
    };
    let unchanged = !deleted
        && match (before.as_deref(), placement_slim(&p)) {
            (Some(PlacementSlim::Workload(was)), Some(PlacementSlim::Workload(is))) => *was == is,
            (Some(PlacementSlim::Service(was)), Some(PlacementSlim::Service(is))) => {
                was.spec == is.spec && was.metadata.owner_references == is.metadata.owner_references
            }
            _ => false,
        };
    (!unchanged).then(|| Input::Placement(Box::new(p)))
}

/// A workload event as the Services it may concern see it: its namespace and its
/// template labels before and after (`None` when they did not change).
pub(super) fn workload_change<K: Resource>(
    template_labels: impl Fn(&K) -> Option<Labels>,
    ev: Result<(Event<K>, Option<Arc<Labels>>), watcher::Error>,
) -> Option<Input> {
    let (ev, before) = ev.ok()?;
    let o = match &ev {
        Event::Apply(o) | Event::Delete(o) | Event::InitApply(o) => o,
        Event::Init | Event::InitDone => return None,
    };
    let namespace = o.meta().namespace.clone().unwrap_or_default();
    let after = match &ev {
        Event::Delete(_) => None,
        _ => template_labels(o).map(Arc::new),
    };
    // Replicas and status come and go; only the pod labels decide which Services it backs.
    if before.is_some() && before == after {
        return None;
    }
    Some(Input::Workload {
        namespace,
        labels: [before, after],
    })
}

pub(super) fn ns_of<K: Resource>(ev: &Result<Event<K>, watcher::Error>) -> Option<Option<String>> {
    match ev {
        Ok(Event::Apply(o) | Event::Delete(o) | Event::InitApply(o)) => {
            Some(o.meta().namespace.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(endpoint: &str, ready: &str, probed: &str) -> Cluster {
        serde_json::from_value(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "east", "labels": {"tier": "a"}},
            "spec": {"apiEndpoint": endpoint, "region": "eu"},
            "status": {"conditions": [{
                "type": "Ready", "status": ready, "lastProbeTime": probed,
                "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "R", "message": ""
            }]}
        }))
        .expect("cluster")
    }

    #[test]
    fn a_readiness_flip_is_a_pass_and_a_new_endpoint_a_reconnect() {
        let up = Seen::of(&cluster("https://a:6443", "True", "2026-01-01T00:00:05Z"));
        // The cluster controller's routine probe times are neither.
        assert!(up == Seen::of(&cluster("https://a:6443", "True", "2026-01-01T00:00:10Z")));
        let down = Seen::of(&cluster("https://a:6443", "False", "2026-01-01T00:00:10Z"));
        assert!(down != up, "readiness decides where Services route");
        assert_eq!(down.connection, up.connection, "the member task stays");
        let moved = Seen::of(&cluster("https://b:6443", "True", "2026-01-01T00:00:10Z"));
        assert_ne!(moved.connection, up.connection, "the member task follows");
    }
}

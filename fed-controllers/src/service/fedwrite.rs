//! The service controller's own writes to the federation: port and address allocations
//! (compare-and-swap on their ConfigMaps), the Service's finalizers and status, Events, and
//! its Placement.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fed_api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, SYSTEM_NAMESPACE};
use fed_api::placement::WorkloadReference;
use fed_api::{Placement, PlacementSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use meridian_runtime::answer;
use meridian_runtime::events::EventType;
use meridian_runtime::namespace;
use meridian_runtime::sync::lock;

use super::alloc_map::Held;
use super::controller::{Central, PlacementSlim, ReconcileError, rfc3339_now};
use super::dedicated::Dedicated;
use super::ports::Allocations;
use super::status::{self, MemberState};
use super::{ClusterView, ServiceKey, address_condition, ports};

impl Central {
    /// Writes the port allocations over the held map (see [`Self::write_allocation_map`]).
    pub(super) async fn write_allocations(
        &self,
        held: &mut Held<'_>,
        next: &BTreeMap<String, u16>,
    ) -> Result<(), ReconcileError> {
        self.write_allocation_map(held, ports::to_data(next)).await
    }

    /// The listen-port allocations with the Service's port ids in them, written first if
    /// they are not. Services that ask while the map is held are allocated by the next
    /// holder in one write: a burst of new Services costs a few writes of the map, not one
    /// each, one after the other.
    pub(super) async fn listen_ports(
        &self,
        key: &ServiceKey,
        ids: &[String],
    ) -> Result<Arc<Allocations>, ReconcileError> {
        let range = self.settings.port_range;
        // Most passes find their ports there: no turn needed.
        let alloc = self.allocations(self.listen_ports_map.current());
        if alloc.holds(&key.namespace, &key.name, ids, range) {
            return Ok(alloc);
        }
        lock(&self.port_requests).insert(key.clone(), ids.to_vec());
        let mut held = self.listen_ports_map.hold().await;
        // Still there unless an earlier holder allocated it (or tried to).
        lock(&self.port_requests).remove(key);
        let alloc = self.allocations(held.current());
        // Fails here, with the pool exhausted, only when this Service needs a port.
        if ports::assign(&alloc.ports, &key.namespace, &key.name, ids, range)?.is_none() {
            return Ok(alloc);
        }
        let waiting = std::mem::take(&mut *lock(&self.port_requests));
        let requests = std::iter::once((key, ids))
            .chain(waiting.iter().map(|(k, ids)| (k, ids.as_slice())))
            .map(|(k, ports)| ports::Request {
                namespace: &k.namespace,
                service: &k.name,
                ports,
            });
        let Some(next) = ports::assign_all(&alloc.ports, requests, range) else {
            return Ok(alloc);
        };
        self.write_allocations(&mut held, &next).await?;
        tracing::info!(%key, services = waiting.len() + 1, "lb-agent listen ports allocated");
        Ok(Arc::new(Allocations::of(next)))
    }

    /// The listen-port allocations in `cm`, parsed once per version of it.
    fn allocations(&self, cm: Option<Arc<ConfigMap>>) -> Arc<Allocations> {
        let version = cm
            .as_ref()
            .and_then(|c| c.metadata.resource_version.clone());
        let mut parsed = lock(&self.parsed_ports);
        if let Some((v, a)) = &*parsed
            && version.is_some()
            && *v == version
        {
            return a.clone();
        }
        let data = cm.and_then(|c| c.data.clone()).unwrap_or_default();
        let a = Arc::new(Allocations::parse(&data));
        *parsed = Some((version, a.clone()));
        a
    }

    /// Writes the held allocation ConfigMap with `data`: compare-and-swap on the
    /// resourceVersion of its newest copy (create when there is none), so a stale view
    /// fails and is retried. What the server accepted is what the next allocation builds on.
    pub(super) async fn write_allocation_map(
        &self,
        held: &mut Held<'_>,
        data: BTreeMap<String, String>,
    ) -> Result<(), ReconcileError> {
        let name = held.name();
        let api: Api<ConfigMap> = Api::namespaced(self.fed.clone(), SYSTEM_NAMESPACE);
        let op = format!("writing ConfigMap {SYSTEM_NAMESPACE}/{name}");
        let written = match held.current() {
            Some(cm) => {
                let mut cm = (*cm).clone();
                cm.data = Some(data);
                self.timed(&op, api.replace(name, &PostParams::default(), &cm))
                    .await
            }
            None => {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE,
                                 "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                    "data": data,
                }))?;
                self.ensure_system_namespace().await?;
                self.timed(&op, api.create(&PostParams::default(), &cm))
                    .await
            }
        };
        match written {
            Ok(cm) => {
                held.wrote(cm);
                Ok(())
            }
            Err(e) => {
                held.forget();
                Err(e)
            }
        }
    }

    /// Creates `meridian-system` for the allocation maps unless it exists.
    pub(super) async fn ensure_system_namespace(&self) -> Result<(), ReconcileError> {
        let ns = namespace::named(SYSTEM_NAMESPACE, []);
        self.timed("ensuring namespace", namespace::ensure(&self.fed, &ns))
            .await
            .map(drop)
    }

    pub(super) async fn set_finalizers(
        &self,
        key: &ServiceKey,
        svc: &Service,
        list: Vec<String>,
    ) -> Result<Service, ReconcileError> {
        let api = answer::api(
            self.fed.clone(),
            Some(&key.namespace),
            &ApiResource::erase::<Service>(&()),
        );
        // resourceVersion makes it a compare-and-swap: a concurrent change is retried.
        let patch =
            json!({"metadata": {"finalizers": list, "resourceVersion": svc.resource_version()}});
        let written = self
            .timed(
                &format!("finalizers of {key}"),
                api.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)),
            )
            .await?;
        // Pinned to the version read, the write made exactly this of it.
        let mut svc = svc.clone();
        svc.metadata.finalizers = Some(list);
        svc.metadata.resource_version = written.metadata.resource_version;
        Ok(svc)
    }

    /// The federated Service's status: `loadBalancer.ingress` and its
    /// `DedicatedAddressAllocated` condition, in one merge patch when either changed.
    pub(super) async fn write_service_status(
        &self,
        key: &ServiceKey,
        svc: &Service,
        v: &Value,
        serving: &BTreeMap<String, std::net::Ipv4Addr>,
        dedicated: &Dedicated,
    ) -> Result<(), ReconcileError> {
        let mut patch = serde_json::Map::new();
        let lb = status::load_balancer(serving, &dedicated.addresses);
        let current = v
            .pointer("/status/loadBalancer/ingress")
            .cloned()
            .unwrap_or_else(|| json!([]));
        if current != lb["ingress"] {
            patch.insert("loadBalancer".into(), lb);
        }
        let conditions = svc
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        let next = address_condition::conditions(
            conditions,
            dedicated.condition.as_ref(),
            svc.metadata.generation,
            &Time(now_seconds()),
        );
        let mut body = json!({});
        if let Some(next) = next {
            patch.insert("conditions".into(), serde_json::to_value(next)?);
            // A merge patch replaces the whole list, computed from the cached Service:
            // pinned to the version it was computed from, so a stale cache is a conflict
            // (retried) and never drops a condition or resets a transition time.
            body["metadata"] = json!({"resourceVersion": svc.resource_version()});
        }
        if patch.is_empty() {
            return Ok(());
        }
        body["status"] = Value::Object(patch);
        let api = answer::api(
            self.fed.clone(),
            Some(&key.namespace),
            &ApiResource::erase::<Service>(&()),
        );
        self.timed(
            &format!("status of {key}"),
            api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(body)),
        )
        .await?;
        Ok(())
    }

    pub(super) async fn write_placement(
        &self,
        key: &ServiceKey,
        svc: &Service,
        uid: &str,
        pushed: &BTreeSet<String>,
        views: &[ClusterView],
        states: &BTreeMap<String, MemberState>,
    ) -> Result<(), ReconcileError> {
        let name = key.placement_name();
        let api: Api<Placement> = Api::namespaced(self.fed.clone(), &key.namespace);
        let spec = PlacementSpec {
            resource: WorkloadReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: key.name.clone(),
                uid: Some(uid.to_string()),
            },
            dest_clusters: status::dest_clusters(pushed, states),
        };
        let owner = svc.controller_owner_ref(&()).map(|mut o: OwnerReference| {
            o.block_owner_deletion = Some(true);
            o
        });
        let cached = match self.caches.placements.get(&key.namespace, &name).as_deref() {
            Some(PlacementSlim::Workload(_)) => return Err(ReconcileError::PlacementTaken(name)),
            Some(PlacementSlim::Service(p)) => Some(Arc::new((**p).clone())),
            None => None,
        };
        // The last pass's write, until the watch brings it back (a replace on the cached
        // version would only lose the compare-and-swap).
        let current = self
            .placement_writes
            .current(key, cached)
            .map(Arc::unwrap_or_clone);
        let before = current.as_ref().map(|p| status::cluster_names(&p.spec));
        let after = status::cluster_names(&spec);
        let written = match current {
            Some(p) if p.spec == spec && p.owner_references().iter().any(|o| o.uid == uid) => Ok(p),
            Some(p) => {
                let mut next = p;
                next.spec = spec;
                next.metadata.owner_references = owner.map(|o| vec![o]);
                self.timed(
                    &format!("updating placement {name}"),
                    api.replace(&name, &PostParams::default(), &next),
                )
                .await
            }
            None => {
                let mut p = Placement::new(&name, spec);
                p.metadata.namespace = Some(key.namespace.clone());
                p.metadata.owner_references = owner.map(|o| vec![o]);
                self.timed(
                    &format!("creating placement {name}"),
                    api.create(&PostParams::default(), &p),
                )
                .await
            }
        };
        let placement = self.placement_written(key, written)?;
        if let Some(message) = status::placed_message(before.as_ref(), &after) {
            self.events.record(super::event(
                key,
                uid,
                EventType::Normal,
                "Placed",
                &message,
            ));
        }

        let entries = status::cluster_entries(pushed, views, states);
        let (st, reason, message) = status::propagated(&entries, states);
        let mut next = placement.clone();
        let s = next.status.get_or_insert_with(Default::default);
        s.clusters = entries;
        crate::member_sync::set_propagated(&mut s.conditions, st, reason, &message, &rfc3339_now());
        if next.status == placement.status {
            return Ok(());
        }
        let written = self
            .timed(
                &format!("status of placement {name}"),
                api.replace_status(&name, &PostParams::default(), &next),
            )
            .await;
        self.placement_written(key, written).map(|_| ())
    }

    /// Keeps what the server answered a write of the Service's Placement (the version the
    /// next pass builds on), or forgets it when the write failed.
    fn placement_written(
        &self,
        key: &ServiceKey,
        written: Result<Placement, ReconcileError>,
    ) -> Result<Placement, ReconcileError> {
        match &written {
            Ok(p) => self.placement_writes.wrote(key, p.clone()),
            Err(_) => self.placement_writes.forget(key),
        }
        written
    }
}

/// Now, to the second: Kubernetes writes condition times with second precision.
fn now_seconds() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}

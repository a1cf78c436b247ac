//! Applies the dedicated-address decisions of [`super::addresses`]: reads the opt-in and
//! the clusters' pools, writes `meridian-lb-addresses` when the allocation changes, and
//! reports an unusable opt-in, unusable pool entries or an exhausted pool with a Warning
//! Event (once per change, not per reconcile).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use fed_api::names::{LB_ADDRESSES_CONFIGMAP, SYSTEM_NAMESPACE};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_runtime::events::EventType;
use meridian_runtime::sync::lock;

use super::addresses::{self, Allocations};
use super::controller::{Central, ReconcileError};
use super::{ClusterView, ServiceKey};

/// Event reason when a cluster's pool has no free address for the Service.
pub const EXHAUSTED_REASON: &str = "AddressPoolExhausted";
/// Event reason for an unusable opt-in annotation or pool entry.
pub const INVALID_REASON: &str = "InvalidDedicatedAddress";

/// Each cluster's pool (clusters with an lb-agent that lists one), and the problems of the
/// entries left out.
pub fn pools(views: &[ClusterView]) -> (BTreeMap<String, Vec<Ipv4Addr>>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for v in views {
        let Some(agent) = &v.lb_agent else { continue };
        if agent.address_pool.is_empty() {
            continue;
        }
        let (pool, bad) = addresses::expand_pool(&agent.address_pool);
        problems.extend(bad.iter().map(|e| format!("cluster {}: {e}", v.name)));
        if !pool.is_empty() {
            out.insert(v.name.clone(), pool);
        }
    }
    (out, problems)
}

/// The lb-agents' own addresses: never handed to a Service.
pub fn reserved(views: &[ClusterView]) -> BTreeSet<Ipv4Addr> {
    views
        .iter()
        .filter_map(|v| v.lb_agent.as_ref()?.address.parse().ok())
        .collect()
}

impl Central {
    pub(super) fn address_allocations(&self) -> (Allocations, Option<Arc<ConfigMap>>) {
        let cm = self
            .caches
            .addresses
            .get(&ObjectRef::new(LB_ADDRESSES_CONFIGMAP).within(SYSTEM_NAMESPACE));
        let data = cm.as_ref().and_then(|c| c.data.clone()).unwrap_or_default();
        (addresses::parse(&data), cm)
    }

    /// The Service's dedicated address per cluster (empty unless it opted in), allocated
    /// and recorded before it is handed to the lb-agents.
    pub(super) async fn dedicated_addresses(
        &self,
        key: &ServiceKey,
        svc: &Service,
        uid: &str,
        views: &[ClusterView],
    ) -> Result<BTreeMap<String, String>, ReconcileError> {
        let mut problems: Vec<(&str, String)> = Vec::new();
        let opted_in = addresses::opted_in(svc.annotations()).unwrap_or_else(|e| {
            problems.push((INVALID_REASON, format!("{e}; no dedicated addresses")));
            false
        });
        let (pools, pool_problems) = if opted_in {
            pools(views)
        } else {
            Default::default()
        };
        problems.extend(pool_problems.into_iter().map(|p| (INVALID_REASON, p)));
        let (alloc, base) = self.address_allocations();
        let a = addresses::assign(&alloc, &key.namespace, &key.name, &pools, &reserved(views));
        if let Some(next) = &a.next {
            self.write_allocation_map(LB_ADDRESSES_CONFIGMAP, base, addresses::to_data(next))
                .await?;
            tracing::info!(%key, addresses = ?a.addresses, "dedicated addresses allocated");
        }
        if !a.exhausted.is_empty() {
            problems.push((
                EXHAUSTED_REASON,
                format!(
                    "no free address in the lb-agent address pool of {}; the Service is reached there only at the lb-agent's listen ports",
                    a.exhausted.join(", ")
                ),
            ));
        }
        self.report_address_problems(key, uid, &problems);
        Ok(a.addresses)
    }

    /// Frees a deleted Service's addresses.
    pub(super) async fn release_dedicated(&self, key: &ServiceKey) -> Result<(), ReconcileError> {
        let (alloc, base) = self.address_allocations();
        if let Some(next) = addresses::release(&alloc, &key.namespace, &key.name) {
            self.write_allocation_map(LB_ADDRESSES_CONFIGMAP, base, addresses::to_data(&next))
                .await?;
            tracing::info!(%key, "dedicated addresses released");
        }
        Ok(())
    }

    fn report_address_problems(&self, key: &ServiceKey, uid: &str, problems: &[(&str, String)]) {
        let digest: String = problems
            .iter()
            .map(|(r, m)| format!("{r}: {m}\n"))
            .collect();
        let mut reported = lock(&self.address_problems);
        if digest.is_empty() {
            reported.remove(key);
            return;
        }
        if reported.get(key) == Some(&digest) {
            return;
        }
        reported.insert(key.clone(), digest);
        for (reason, message) in problems {
            tracing::warn!(%key, reason, problem = %message, "dedicated address");
            self.events
                .record(super::event(key, uid, EventType::Warning, reason, message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::test_view as view;

    #[test]
    fn pools_come_from_agents_that_list_one() {
        let mut views = vec![
            view("a", true, Some("127.0.1.1")),
            view("b", false, Some("127.0.1.2")),
            view("c", true, None),
        ];
        views[0].lb_agent.as_mut().unwrap().address_pool = vec!["127.2.1.1".into(), "bad".into()];
        views[1].lb_agent.as_mut().unwrap().address_pool = vec!["127.2.2.0/30".into()];
        let (p, problems) = pools(&views);
        assert_eq!(
            p,
            BTreeMap::from([
                ("a".to_string(), vec![Ipv4Addr::new(127, 2, 1, 1)]),
                (
                    "b".to_string(),
                    vec![Ipv4Addr::new(127, 2, 2, 1), Ipv4Addr::new(127, 2, 2, 2)]
                ),
            ]),
            "an unready cluster keeps its pool: allocations do not follow readiness"
        );
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("cluster a") && problems[0].contains("\"bad\""));
        assert_eq!(
            reserved(&views),
            BTreeSet::from([Ipv4Addr::new(127, 0, 1, 1), Ipv4Addr::new(127, 0, 1, 2)])
        );
    }
}

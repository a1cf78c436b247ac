//! Applies the dedicated-address decisions of [`super::addresses`]: reads the opt-in and
//! the clusters' pools, writes `meridian-lb-addresses` when the allocation changes, decides
//! the Service's `DedicatedAddressAllocated` condition ([`super::address_condition`], written
//! with the rest of its status by the controller), and reports an unusable opt-in, unusable
//! pool entries or an exhausted pool with a Warning Event (once per change, not per
//! reconcile).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use meridian_runtime::events::EventType;
use meridian_runtime::sync::lock;

use super::address_condition::{self, Outcome, Verdict};
pub use super::address_condition::{EXHAUSTED_REASON, INVALID_REASON};
use super::addresses;
use super::controller::{Central, ReconcileError};
use super::{ClusterView, ServiceKey};

/// The clusters' address pools as the allocation reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pools {
    /// Each cluster's usable addresses (clusters with an lb-agent that lists a pool).
    pub usable: BTreeMap<String, Vec<Ipv4Addr>>,
    /// Clusters whose lb-agent lists a pool of which no entry is usable, sorted.
    pub unusable: Vec<String>,
    /// The problems of the entries left out.
    pub problems: Vec<String>,
}

/// Each cluster's pool, and what was left out of them.
pub fn pools(views: &[ClusterView]) -> Pools {
    let mut out = Pools::default();
    for v in views {
        let Some(agent) = &v.lb_agent else { continue };
        if agent.address_pool.is_empty() {
            continue;
        }
        let (pool, bad) = addresses::expand_pool(&agent.address_pool);
        out.problems
            .extend(bad.iter().map(|e| format!("cluster {}: {e}", v.name)));
        if pool.is_empty() {
            out.unusable.push(v.name.clone());
        } else {
            out.usable.insert(v.name.clone(), pool);
        }
    }
    out.unusable.sort();
    out
}

/// The lb-agents' own addresses: never handed to a Service.
pub fn reserved(views: &[ClusterView]) -> BTreeSet<Ipv4Addr> {
    views
        .iter()
        .filter_map(|v| v.lb_agent.as_ref()?.address.parse().ok())
        .collect()
}

/// A Service's dedicated addresses after one reconcile.
#[derive(Debug, Default)]
pub struct Dedicated {
    /// Its address per cluster (empty unless it opted in).
    pub addresses: BTreeMap<String, String>,
    /// Its `DedicatedAddressAllocated` condition; `None` when it has not opted in.
    pub condition: Option<Verdict>,
}

impl Central {
    /// The Service's dedicated address per cluster (empty unless it opted in), allocated
    /// and recorded before it is handed to the lb-agents, and the condition it comes to.
    pub(super) async fn dedicated_addresses(
        &self,
        key: &ServiceKey,
        svc: &Service,
        uid: &str,
        views: &[ClusterView],
    ) -> Result<Dedicated, ReconcileError> {
        let mut problems: Vec<(&str, String)> = Vec::new();
        let opt_in = addresses::opted_in(svc.annotations());
        if let Err(e) = &opt_in {
            problems.push((INVALID_REASON, format!("{e}; no dedicated addresses")));
        }
        let pools = if opt_in == Ok(true) {
            pools(views)
        } else {
            Pools::default()
        };
        problems.extend(pools.problems.iter().map(|p| (INVALID_REASON, p.clone())));
        let mut held = self.addresses_map.hold().await;
        let alloc = addresses::parse(&held.data());
        let a = addresses::assign(
            &alloc,
            &key.namespace,
            &key.name,
            &pools.usable,
            &reserved(views),
        );
        if let Some(next) = &a.next {
            self.write_allocation_map(&mut held, addresses::to_data(next))
                .await?;
            tracing::info!(%key, addresses = ?a.addresses, "dedicated addresses allocated");
        }
        drop(held);
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
        let condition = address_condition::decide(Outcome {
            opt_in: &opt_in,
            addresses: &a.addresses,
            exhausted: &a.exhausted,
            unusable: &pools.unusable,
        });
        Ok(Dedicated {
            addresses: a.addresses,
            condition,
        })
    }

    /// Frees a deleted Service's addresses.
    pub(super) async fn release_dedicated(&self, key: &ServiceKey) -> Result<(), ReconcileError> {
        let mut held = self.addresses_map.hold().await;
        let alloc = addresses::parse(&held.data());
        if let Some(next) = addresses::release(&alloc, &key.namespace, &key.name) {
            self.write_allocation_map(&mut held, addresses::to_data(&next))
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
            view("d", true, Some("127.0.1.4")),
        ];
        views[0].lb_agent.as_mut().unwrap().address_pool = vec!["127.2.1.1".into(), "bad".into()];
        views[1].lb_agent.as_mut().unwrap().address_pool = vec!["127.2.2.0/30".into()];
        views[3].lb_agent.as_mut().unwrap().address_pool = vec!["nope".into()];
        let p = pools(&views);
        assert_eq!(
            p.usable,
            BTreeMap::from([
                ("a".to_string(), vec![Ipv4Addr::new(127, 2, 1, 1)]),
                (
                    "b".to_string(),
                    vec![Ipv4Addr::new(127, 2, 2, 1), Ipv4Addr::new(127, 2, 2, 2)]
                ),
            ]),
            "an unready cluster keeps its pool: allocations do not follow readiness"
        );
        assert_eq!(
            p.unusable,
            ["d"],
            "a pool with nothing usable gives no address"
        );
        assert_eq!(p.problems.len(), 2);
        assert!(p.problems[0].contains("cluster a") && p.problems[0].contains("\"bad\""));
        assert!(p.problems[1].contains("cluster d"));
        assert_eq!(
            reserved(&views),
            BTreeSet::from([
                Ipv4Addr::new(127, 0, 1, 1),
                Ipv4Addr::new(127, 0, 1, 2),
                Ipv4Addr::new(127, 0, 1, 4)
            ])
        );
    }
}

//! Dedicated per-Service addresses: a federated Service annotated
//! `federation.meridian.dev/dedicated-address: "true"` gets one address of each cluster's
//! lb-agent address pool, where that lb-agent serves the Service's own ports.
//!
//! The allocations live in the federation ConfigMap `meridian-system/meridian-lb-addresses`
//! (key `<namespace>.<service>.<cluster>`), beside the listen ports' `meridian-lb-ports`,
//! rather than in each Service's status or an annotation: one object written with
//! compare-and-swap on its resourceVersion is what makes "never two Services on one
//! address" hold across concurrent writers and restarts (per-Service records would each be
//! written without seeing the others' in-flight choices), and it survives the controller's
//! restarts and re-lists as the ports do. These are the pure decisions; the controller
//! writes the ConfigMap.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// Allocation key → address.
pub type Allocations = BTreeMap<String, Ipv4Addr>;

/// Most addresses one pool entry may contribute (a /16): a pool is a list to search, and
/// a typo like `/8` must not make every reconcile walk sixteen million addresses.
pub const MAX_ENTRY_ADDRESSES: u32 = 1 << 16;

/// The allocation key of a Service's address in a cluster.
pub fn key(namespace: &str, service: &str, cluster: &str) -> String {
    format!("{namespace}.{service}.{cluster}")
}

/// Namespaces and Service names are DNS labels (no dots), so the prefix is unambiguous
/// even with dotted cluster names.
fn prefix(namespace: &str, service: &str) -> String {
    format!("{namespace}.{service}.")
}

/// Why the opt-in annotation is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: {value:?} is neither \"true\" nor \"false\"")]
pub struct OptInError {
    /// The annotation.
    pub annotation: &'static str,
    /// Its value.
    pub value: String,
}

/// Whether the Service asks for dedicated addresses (absent means no).
pub fn opted_in(annotations: &BTreeMap<String, String>) -> Result<bool, OptInError> {
    let annotation = fed_api::names::DEDICATED_ADDRESS_ANNOTATION;
    match annotations.get(annotation).map(|v| v.trim()) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(OptInError {
            annotation,
            value: v.to_string(),
        }),
    }
}

/// The entries of an `address-pool` annotation: comma-separated, blanks dropped.
pub fn pool_entries(annotation: &str) -> Vec<String> {
    annotation
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// A pool entry that is not an IPv4 address or an IPv4 CIDR of at most a /16.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("address pool entry {0:?} is not an IPv4 address or CIDR (at most a /16)")]
pub struct PoolEntryError(pub String);

/// A pool's addresses in order: single addresses as they are, a CIDR's usable hosts (its
/// network and broadcast addresses left out when it has more than two), duplicates once.
/// Unusable entries are returned beside the addresses, for the caller to report.
pub fn expand_pool(entries: &[String]) -> (Vec<Ipv4Addr>, Vec<PoolEntryError>) {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut bad = Vec::new();
    for e in entries {
        let Some(addresses) = expand_entry(e) else {
            bad.push(PoolEntryError(e.clone()));
            continue;
        };
        out.extend(addresses.into_iter().filter(|a| seen.insert(*a)));
    }
    (out, bad)
}

fn expand_entry(e: &str) -> Option<Vec<Ipv4Addr>> {
    let Some((ip, len)) = e.split_once('/') else {
        return Some(vec![e.parse().ok()?]);
    };
    let ip: Ipv4Addr = ip.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    let size = 1u64 << (32 - len);
    if size > u64::from(MAX_ENTRY_ADDRESSES) {
        return None;
    }
    let base = u32::from(ip) & !((size - 1) as u32);
    let (first, last) = if size > 2 {
        (1, size - 2)
    } else {
        (0, size - 1)
    };
    Some(
        (first..=last)
            .map(|i| Ipv4Addr::from(base + i as u32))
            .collect(),
    )
}

/// The ConfigMap's data as allocations; values that are not IPv4 addresses are dropped
/// (and so reallocated), never trusted.
pub fn parse(data: &BTreeMap<String, String>) -> Allocations {
    data.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.trim().parse().ok()?)))
        .collect()
}

/// The ConfigMap data for allocations.
pub fn to_data(alloc: &Allocations) -> BTreeMap<String, String> {
    alloc
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

/// What one Service gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// The new allocations; `None` when nothing changes.
    pub next: Option<Allocations>,
    /// The Service's address per cluster (for its `LbService.addresses`).
    pub addresses: BTreeMap<String, String>,
    /// Clusters whose pool had no free address for it, sorted.
    pub exhausted: Vec<String>,
}

/// The allocations after giving the Service one address in each cluster of `pools`
/// (cluster → its pool's addresses in order; empty when the Service has not opted in).
/// A valid existing address is kept (still in its cluster's pool, held by nobody else,
/// not `reserved`); a new one is the first free address of the pool; the Service's
/// addresses in clusters no longer listed are freed. Addresses are unique across all
/// clusters, since every cluster's DNS answers every cluster's addresses. `reserved` holds
/// addresses never handed out (the lb-agents' own).
pub fn assign(
    alloc: &Allocations,
    namespace: &str,
    service: &str,
    pools: &BTreeMap<String, Vec<Ipv4Addr>>,
    reserved: &BTreeSet<Ipv4Addr>,
) -> Assignment {
    let pre = prefix(namespace, service);
    let mine = |k: &str| k.starts_with(&pre);
    let mut used: BTreeSet<Ipv4Addr> = reserved.clone();
    used.extend(alloc.iter().filter(|(k, _)| !mine(k)).map(|(_, a)| *a));
    let mut next: Allocations = alloc
        .iter()
        .filter(|(k, _)| !mine(k))
        .map(|(k, a)| (k.clone(), *a))
        .collect();
    let mut out = Assignment::default();
    // Keep what is still valid first, so a new cluster never takes an address this
    // Service already holds elsewhere.
    let mut pending = Vec::new();
    for (cluster, pool) in pools {
        let k = key(namespace, service, cluster);
        match alloc.get(&k) {
            Some(a) if pool.contains(a) && used.insert(*a) => {
                next.insert(k, *a);
                out.addresses.insert(cluster.clone(), a.to_string());
            }
            _ => pending.push((cluster, k, pool)),
        }
    }
    for (cluster, k, pool) in pending {
        match pool.iter().find(|a| !used.contains(a)) {
            Some(a) => {
                used.insert(*a);
                next.insert(k, *a);
                out.addresses.insert(cluster.clone(), a.to_string());
            }
            None => out.exhausted.push(cluster.clone()),
        }
    }
    out.next = (next != *alloc).then_some(next);
    out
}

/// The allocations without the Service's addresses; `None` when it held none.
pub fn release(alloc: &Allocations, namespace: &str, service: &str) -> Option<Allocations> {
    let pre = prefix(namespace, service);
    let next: Allocations = alloc
        .iter()
        .filter(|(k, _)| !k.starts_with(&pre))
        .map(|(k, a)| (k.clone(), *a))
        .collect();
    (next.len() != alloc.len()).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn pool(v: &[&str]) -> Vec<Ipv4Addr> {
        v.iter().map(|s| ip(s)).collect()
    }

    fn alloc(v: &[(&str, &str)]) -> Allocations {
        v.iter().map(|(k, a)| (k.to_string(), ip(a))).collect()
    }

    fn pools(v: &[(&str, &[&str])]) -> BTreeMap<String, Vec<Ipv4Addr>> {
        v.iter().map(|(c, p)| (c.to_string(), pool(p))).collect()
    }

    fn addrs(v: &[(&str, &str)]) -> BTreeMap<String, String> {
        v.iter()
            .map(|(c, a)| (c.to_string(), a.to_string()))
            .collect()
    }

    #[test]
    fn opt_in_reads_true_false_and_rejects_the_rest() {
        let ann = |v: &str| {
            BTreeMap::from([(
                fed_api::names::DEDICATED_ADDRESS_ANNOTATION.to_string(),
                v.to_string(),
            )])
        };
        assert_eq!(opted_in(&BTreeMap::new()), Ok(false));
        assert_eq!(opted_in(&ann("true")), Ok(true));
        assert_eq!(opted_in(&ann(" True ")), Ok(true));
        assert_eq!(opted_in(&ann("false")), Ok(false));
        let err = opted_in(&ann("yes")).unwrap_err();
        assert!(err.to_string().contains("dedicated-address"), "{err}");
        assert_eq!(err.value, "yes");
    }

    #[test]
    fn pools_expand_addresses_and_cidrs_in_order() {
        let entries = pool_entries(" 10.0.0.9, 192.0.2.0/30 ,,10.0.0.9, 198.51.100.7/32");
        assert_eq!(entries.len(), 4);
        let (p, bad) = expand_pool(&entries);
        assert!(bad.is_empty());
        assert_eq!(
            p,
            pool(&["10.0.0.9", "192.0.2.1", "192.0.2.2", "198.51.100.7"]),
            "network and broadcast left out of a /30; duplicates once"
        );
        let (p, _) = expand_pool(&pool_entries("192.0.2.8/31"));
        assert_eq!(p, pool(&["192.0.2.8", "192.0.2.9"]));
        let (p, bad) = expand_pool(&pool_entries(
            "nope, 10.0.0.0/8, ::1, 10.1.0.0/33, 10.2.0.1",
        ));
        assert_eq!(p, pool(&["10.2.0.1"]));
        assert_eq!(
            bad.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
            ["nope", "10.0.0.0/8", "::1", "10.1.0.0/33"]
        );
        // A host address inside the CIDR names the same network.
        assert_eq!(expand_pool(&pool_entries("192.0.2.5/30")).0.len(), 2);
    }

    #[test]
    fn configmap_round_trips_and_drops_garbage() {
        let a = alloc(&[("shop.db.sim-1", "127.2.1.1")]);
        let mut data = to_data(&a);
        data.insert("shop.x.sim-1".into(), "not an ip".into());
        assert_eq!(parse(&data), a);
    }

    /// One case of the allocation table: the state before, the pools the Service is
    /// given, and what it must end with.
    struct Case {
        name: &'static str,
        before: &'static [(&'static str, &'static str)],
        pools: &'static [(&'static str, &'static [&'static str])],
        reserved: &'static [&'static str],
        addresses: &'static [(&'static str, &'static str)],
        exhausted: &'static [&'static str],
        after: &'static [(&'static str, &'static str)],
    }

    const P1: &[&str] = &["127.2.1.1", "127.2.1.2"];
    const P2: &[&str] = &["127.2.2.1", "127.2.2.2"];

    #[test]
    fn allocation_table() {
        let cases = [
            Case {
                name: "first allocation takes the first address of each pool",
                before: &[],
                pools: &[("sim-1", P1), ("sim-2", P2)],
                reserved: &[],
                addresses: &[("sim-1", "127.2.1.1"), ("sim-2", "127.2.2.1")],
                exhausted: &[],
                after: &[
                    ("shop.db.sim-1", "127.2.1.1"),
                    ("shop.db.sim-2", "127.2.2.1"),
                ],
            },
            Case {
                name: "existing allocations are kept though a lower address is free",
                before: &[("shop.db.sim-1", "127.2.1.2")],
                pools: &[("sim-1", P1)],
                reserved: &[],
                addresses: &[("sim-1", "127.2.1.2")],
                exhausted: &[],
                after: &[("shop.db.sim-1", "127.2.1.2")],
            },
            Case {
                name: "another Service's address is never taken",
                before: &[("shop.api.sim-1", "127.2.1.1")],
                pools: &[("sim-1", P1)],
                reserved: &[],
                addresses: &[("sim-1", "127.2.1.2")],
                exhausted: &[],
                after: &[
                    ("shop.api.sim-1", "127.2.1.1"),
                    ("shop.db.sim-1", "127.2.1.2"),
                ],
            },
            Case {
                name: "a hand-edited duplicate is moved off the other Service's address",
                before: &[
                    ("shop.api.sim-1", "127.2.1.1"),
                    ("shop.db.sim-1", "127.2.1.1"),
                ],
                pools: &[("sim-1", P1)],
                reserved: &[],
                addresses: &[("sim-1", "127.2.1.2")],
                exhausted: &[],
                after: &[
                    ("shop.api.sim-1", "127.2.1.1"),
                    ("shop.db.sim-1", "127.2.1.2"),
                ],
            },
            Case {
                name: "an address that left the pool is reallocated",
                before: &[("shop.db.sim-1", "127.9.9.9")],
                pools: &[("sim-1", P1)],
                reserved: &[],
                addresses: &[("sim-1", "127.2.1.1")],
                exhausted: &[],
                after: &[("shop.db.sim-1", "127.2.1.1")],
            },
            Case {
                name: "addresses are unique across clusters with overlapping pools",
                before: &[("shop.api.sim-2", "127.2.1.1")],
                pools: &[("sim-1", P1)],
                reserved: &[],
                addresses: &[("sim-1", "127.2.1.2")],
                exhausted: &[],
                after: &[
                    ("shop.api.sim-2", "127.2.1.1"),
                    ("shop.db.sim-1", "127.2.1.2"),
                ],
            },
            Case {
                name: "the lb-agents' own addresses are reserved",
                before: &[],
                pools: &[("sim-1", P1)],
                reserved: &["127.2.1.1"],
                addresses: &[("sim-1", "127.2.1.2")],
                exhausted: &[],
                after: &[("shop.db.sim-1", "127.2.1.2")],
            },
            Case {
                name: "an exhausted pool is reported and the other clusters still served",
                before: &[("shop.a.sim-1", "127.2.1.1"), ("shop.b.sim-1", "127.2.1.2")],
                pools: &[("sim-1", P1), ("sim-2", P2)],
                reserved: &[],
                addresses: &[("sim-2", "127.2.2.1")],
                exhausted: &["sim-1"],
                after: &[
                    ("shop.a.sim-1", "127.2.1.1"),
                    ("shop.b.sim-1", "127.2.1.2"),
                    ("shop.db.sim-2", "127.2.2.1"),
                ],
            },
            Case {
                name: "opting out (no pools) releases every address of the Service only",
                before: &[
                    ("shop.db.sim-1", "127.2.1.1"),
                    ("shop.db.sim-2", "127.2.2.1"),
                    ("shop.dbx.sim-1", "127.2.1.2"),
                ],
                pools: &[],
                reserved: &[],
                addresses: &[],
                exhausted: &[],
                after: &[("shop.dbx.sim-1", "127.2.1.2")],
            },
            Case {
                name: "a cluster that lost its pool releases the address there",
                before: &[
                    ("shop.db.sim-1", "127.2.1.1"),
                    ("shop.db.sim-2", "127.2.2.1"),
                ],
                pools: &[("sim-2", P2)],
                reserved: &[],
                addresses: &[("sim-2", "127.2.2.1")],
                exhausted: &[],
                after: &[("shop.db.sim-2", "127.2.2.1")],
            },
            Case {
                name: "dotted cluster names and a Service whose name extends another's",
                before: &[("shop.db-2.eu.example", "127.2.1.1")],
                pools: &[("eu.example", P1)],
                reserved: &[],
                addresses: &[("eu.example", "127.2.1.2")],
                exhausted: &[],
                after: &[
                    ("shop.db-2.eu.example", "127.2.1.1"),
                    ("shop.db.eu.example", "127.2.1.2"),
                ],
            },
        ];
        for c in cases {
            let before = alloc(c.before);
            let reserved = c.reserved.iter().map(|s| ip(s)).collect();
            let got = assign(&before, "shop", "db", &pools(c.pools), &reserved);
            assert_eq!(got.addresses, addrs(c.addresses), "{}", c.name);
            assert_eq!(got.exhausted, c.exhausted, "{}", c.name);
            let after = got.next.clone().unwrap_or_else(|| before.clone());
            assert_eq!(after, alloc(c.after), "{}", c.name);
            assert_eq!(got.next.is_none(), before == after, "{}", c.name);
            // Applying the result again changes nothing: stable across reconciles.
            let again = assign(&after, "shop", "db", &pools(c.pools), &reserved);
            assert_eq!(again.next, None, "{}: not stable", c.name);
            assert_eq!(again.addresses, got.addresses, "{}", c.name);
            // Never two keys on one address.
            let distinct: BTreeSet<_> = after.values().collect();
            assert_eq!(distinct.len(), after.len(), "{}", c.name);
        }
    }

    #[test]
    fn release_frees_only_the_service() {
        let a = alloc(&[
            ("shop.db.sim-1", "127.2.1.1"),
            ("shop.db-2.sim-1", "127.2.1.2"),
        ]);
        assert_eq!(
            release(&a, "shop", "db"),
            Some(alloc(&[("shop.db-2.sim-1", "127.2.1.2")]))
        );
        assert_eq!(release(&a, "shop", "web"), None);
    }
}

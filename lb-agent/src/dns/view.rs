//! The immutable snapshot the DNS responder answers from: names of the zone, which
//! clusters serve each Service, and where clients are. Built once per configuration or
//! health change and shared with the listeners behind an `Arc`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use fed_api::lbconfig::{LbConfig, PolicyKind};

use super::wire::{wire_label, wire_name};
use crate::policy::{self, Place};

/// A configuration the DNS view cannot be built from; names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsConfigError {
    /// `dnsZone` is not a usable DNS name.
    #[error("dnsZone {zone:?} {reason}")]
    Zone {
        /// The value.
        zone: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A field that becomes a DNS label (cluster, region, zone, namespace, service name).
    #[error("{field} {value:?} is not a DNS label: {reason}")]
    Label {
        /// Path of the field, e.g. `clusters[2].region`.
        field: String,
        /// The value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An lb-agent address that is not an IPv4 address.
    #[error("{field} {value:?} is not an IPv4 address")]
    Address {
        /// Path of the field, e.g. `clusters[0].address`.
        field: String,
        /// The value.
        value: String,
    },
    /// A client subnet that is not a CIDR.
    #[error("{field} {value:?} is not a CIDR (address/prefix-length)")]
    Cidr {
        /// Path of the field, e.g. `clientSubnets[1].cidr`.
        field: String,
        /// The value.
        value: String,
    },
    /// Two entries with the same key.
    #[error("{field} duplicates {key}")]
    Duplicate {
        /// Path of the second entry.
        field: String,
        /// The duplicated key.
        key: String,
    },
}

/// Index of a cluster in [`DnsView::clusters`] (sorted by name).
pub(crate) type ClusterId = u16;

/// What a name under the zone is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// A name that exists only because longer names exist under it (a namespace, a
    /// region or a zone level): NODATA for every type.
    EmptyNonTerminal,
    /// `ns-<cluster>`: the name server host of that cluster's lb-agent.
    NameServer(ClusterId),
    /// A Service name at some level.
    Service {
        /// Index in [`DnsView::services`].
        service: u32,
        /// Which clusters the name covers.
        scope: Scope,
    },
}

/// The clusters a Service name covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every cluster: `<svc>.<ns>.<dnsZone>`.
    Global,
    /// One region: `<svc>.<ns>.<region>.<dnsZone>`.
    Region(u16),
    /// One zone: `<svc>.<ns>.<zone>.<region>.<dnsZone>`.
    Zone(u16),
}

/// One cluster with an lb-agent.
#[derive(Clone, Debug)]
pub(crate) struct ClusterEntry {
    pub name: String,
    /// Its name as a label in wire form: SRV targets are `<cluster>.<svc>.<ns>.<dnsZone>`.
    pub label: Box<[u8]>,
    /// `ns-<name>` label in wire form.
    pub ns_label: Box<[u8]>,
    pub address: Ipv4Addr,
    pub region: Option<u16>,
    pub zone: Option<u16>,
}

/// One federated Service.
#[derive(Clone, Debug)]
pub(crate) struct ServiceEntry {
    /// Service name label in wire form.
    pub name_label: Box<[u8]>,
    /// Namespace label in wire form.
    pub namespace_label: Box<[u8]>,
    /// Clusters that are Ready and serve it, by cluster name.
    pub serving: Box<[ClusterId]>,
    /// Its traffic policy.
    pub policy: PolicyKind,
    /// `failover`: the tier of each cluster (by id); empty for other policies.
    pub tiers: Box<[u8]>,
    /// `weighted`: the share of each cluster (by id); empty for other policies.
    pub shares: Box<[u32]>,
    /// Dedicated address of each cluster (by id); empty when it has none anywhere.
    pub addresses: Box<[Option<Ipv4Addr>]>,
    /// Ports, for SRV records.
    pub ports: Box<[SrvPort]>,
}

/// One Service port as SRV records give it.
#[derive(Clone, Debug)]
pub(crate) struct SrvPort {
    /// `_<name>` in wire form (empty for an unnamed port).
    pub name_label: Box<[u8]>,
    /// The Service port number.
    pub port: u16,
    /// The lb-agents' listen port.
    pub listen_port: u16,
    /// A UDP port (`_udp`), else TCP (`_tcp`).
    pub udp: bool,
}

impl ServiceEntry {
    /// The address answered for the Service in cluster `c`: its dedicated one, else the
    /// cluster's lb-agent.
    pub(crate) fn address(&self, view: &DnsView, c: ClusterId) -> Ipv4Addr {
        self.addresses
            .get(c as usize)
            .copied()
            .flatten()
            .unwrap_or(view.clusters[c as usize].address)
    }

    /// The port an SRV record of `port` gives for cluster `c`: the Service's own port at a
    /// dedicated address, else the listen port.
    pub(crate) fn srv_port(&self, port: &SrvPort, c: ClusterId) -> u16 {
        match self.addresses.get(c as usize) {
            Some(Some(_)) => port.port,
            _ => port.listen_port,
        }
    }
}

/// One zone of a region.
#[derive(Clone, Debug)]
pub(crate) struct ZoneEntry {
    pub region: u16,
}

/// Where an asker is, as far as ordering answers goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Locality {
    /// The asker's own cluster, when it is this agent's cluster.
    pub(crate) cluster: Option<ClusterId>,
    /// Region id (regions known from clusters only: an unknown region matches nothing).
    pub(crate) region: Option<u16>,
    /// Zone id (a zone is identified with its region).
    pub(crate) zone: Option<u16>,
}

#[derive(Clone, Copy, Debug)]
enum Net {
    V4 { bits: u32, mask: u32 },
    V6 { bits: u128, mask: u128 },
}

#[derive(Clone, Debug)]
struct Subnet {
    net: Net,
    prefix: u8,
    locality: Locality,
}

/// Everything the responder needs to answer, computed ahead of queries.
#[derive(Clone, Debug)]
pub struct DnsView {
    /// The zone in lowercase wire form without the root label.
    pub(crate) zone: Box<[u8]>,
    pub(crate) ttl: u32,
    pub(crate) serial: u32,
    /// `ns-<this cluster>` label: the SOA's primary name server.
    pub(crate) self_ns_label: Box<[u8]>,
    pub(crate) clusters: Vec<ClusterEntry>,
    pub(crate) services: Vec<ServiceEntry>,
    pub(crate) zones: Vec<ZoneEntry>,
    /// Names under the zone, relative to it, lowercase wire form → what they are.
    pub(crate) names: HashMap<Box<[u8]>, Node>,
    /// Cluster name label (wire form) → id, for `<cluster>.<svc>.<ns>` hosts.
    pub(crate) cluster_labels: HashMap<Box<[u8]>, ClusterId>,
    /// Longest prefix first.
    subnets: Vec<Subnet>,
    own: Locality,
}

/// Interns region and zone names to small ids.
#[derive(Default)]
struct Places {
    regions: Vec<String>,
    zones: Vec<(u16, String)>,
}

impl Places {
    fn region(&mut self, name: &str) -> Option<u16> {
        if name.is_empty() {
            return None;
        }
        let name = name.to_ascii_lowercase();
        Some(match self.regions.iter().position(|r| *r == name) {
            Some(i) => i as u16,
            None => {
                self.regions.push(name);
                (self.regions.len() - 1) as u16
            }
        })
    }

    fn zone(&mut self, region: Option<u16>, name: &str) -> Option<u16> {
        let region = region?;
        if name.is_empty() {
            return None;
        }
        let key = (region, name.to_ascii_lowercase());
        Some(match self.zones.iter().position(|z| *z == key) {
            Some(i) => i as u16,
            None => {
                self.zones.push(key);
                (self.zones.len() - 1) as u16
            }
        })
    }

    fn find_region(&self, name: &str) -> Option<u16> {
        self.regions
            .iter()
            .position(|r| r.eq_ignore_ascii_case(name))
            .map(|i| i as u16)
    }

    fn find_zone(&self, region: Option<u16>, name: &str) -> Option<u16> {
        let region = region?;
        self.zones
            .iter()
            .position(|(r, z)| *r == region && z.eq_ignore_ascii_case(name))
            .map(|i| i as u16)
    }
}

fn label(field: impl Into<String>, value: &str) -> Result<Vec<u8>, DnsConfigError> {
    wire_label(value).map_err(|reason| DnsConfigError::Label {
        field: field.into(),
        value: value.to_string(),
        reason,
    })
}

impl DnsView {
    /// Builds the view of `cfg`. A cluster's lb-agent is answered for a Service when the
    /// cluster is `ready` and `serves(cluster, namespace, service)` says so; the caller
    /// decides the latter from its health checks and endpoints (see [`config_serves`] for
    /// the configuration's own backend counts).
    pub fn from_config(
        cfg: &LbConfig,
        serves: impl Fn(&str, &str, &str) -> bool,
    ) -> Result<DnsView, DnsConfigError> {
        let zone = wire_name(&cfg.dns_zone).map_err(|reason| DnsConfigError::Zone {
            zone: cfg.dns_zone.clone(),
            reason,
        })?;
        if cfg.cluster.is_empty() {
            return Err(DnsConfigError::Label {
                field: "cluster".into(),
                value: String::new(),
                reason: "is empty".into(),
            });
        }
        let self_ns_label = label("cluster", &format!("ns-{}", cfg.cluster))?;

        // Clusters sorted by name: answers of equal rank come out in name order.
        let mut order: Vec<usize> = (0..cfg.clusters.len()).collect();
        order.sort_by(|&a, &b| cfg.clusters[a].name.cmp(&cfg.clusters[b].name));
        let mut places = Places::default();
        let mut clusters: Vec<ClusterEntry> = Vec::with_capacity(order.len());
        let mut region_labels: Vec<Box<[u8]>> = Vec::new();
        let mut zone_labels: Vec<Box<[u8]>> = Vec::new();
        for &i in &order {
            let c = &cfg.clusters[i];
            let field = |f: &str| format!("clusters[{i}].{f}");
            if clusters.last().is_some_and(|p| p.name == c.name) {
                return Err(DnsConfigError::Duplicate {
                    field: field("name"),
                    key: c.name.clone(),
                });
            }
            let ns_label = label(field("name"), &format!("ns-{}", c.name))?;
            let name_label = label(field("name"), &c.name)?;
            let address = c
                .address
                .parse::<Ipv4Addr>()
                .map_err(|_| DnsConfigError::Address {
                    field: field("address"),
                    value: c.address.clone(),
                })?;
            let region = if c.region.is_empty() {
                None
            } else {
                let l = label(field("region"), &c.region)?;
                let id = places.region(&c.region);
                if region_labels.len() == id.map_or(0, |r| r as usize) {
                    region_labels.push(l.into());
                }
                id
            };
            let zone = if c.zone.is_empty() {
                None
            } else {
                let l = label(field("zone"), &c.zone)?;
                let id = places.zone(region, &c.zone);
                if let Some(id) = id
                    && zone_labels.len() == id as usize
                {
                    zone_labels.push(l.into());
                }
                id
            };
            clusters.push(ClusterEntry {
                name: c.name.clone(),
                label: name_label.into(),
                ns_label: ns_label.into(),
                address,
                region,
                zone,
            });
        }
        let zones: Vec<ZoneEntry> = places
            .zones
            .iter()
            .map(|&(region, _)| ZoneEntry { region })
            .collect();

        let mut names: HashMap<Box<[u8]>, Node> = HashMap::new();
        // Name servers first: they win over an empty non-terminal of the same name.
        for (id, c) in clusters.iter().enumerate() {
            names.insert(c.ns_label.clone(), Node::NameServer(id as ClusterId));
        }

        let mut services: Vec<ServiceEntry> = Vec::with_capacity(cfg.services.len());
        let mut seen = std::collections::HashSet::new();
        for (i, s) in cfg.services.iter().enumerate() {
            let name_label = label(format!("services[{i}].name"), &s.name)?;
            let namespace_label = label(format!("services[{i}].namespace"), &s.namespace)?;
            if !seen.insert((name_label.clone(), namespace_label.clone())) {
                return Err(DnsConfigError::Duplicate {
                    field: format!("services[{i}]"),
                    key: format!("{}/{}", s.namespace, s.name),
                });
            }
            let serving: Box<[ClusterId]> = order
                .iter()
                .enumerate()
                .filter(|&(_, &ci)| {
                    let c = &cfg.clusters[ci];
                    c.ready && serves(&c.name, &s.namespace, &s.name)
                })
                .map(|(id, _)| id as ClusterId)
                .collect();
            let service = services.len() as u32;
            let place = |ci: usize| Place {
                cluster: &cfg.clusters[ci].name,
                region: &cfg.clusters[ci].region,
                zone: &cfg.clusters[ci].zone,
            };
            let tiers: Box<[u8]> = match s.policy.kind {
                PolicyKind::Failover => order
                    .iter()
                    .map(|&ci| policy::failover_tier(&s.policy.order, &place(ci)))
                    .collect(),
                _ => Box::new([]),
            };
            let shares: Box<[u32]> = match s.policy.kind {
                PolicyKind::Weighted => order
                    .iter()
                    .map(|&ci| policy::share(&s.policy, &cfg.clusters[ci].name))
                    .collect(),
                _ => Box::new([]),
            };
            let addresses: Box<[Option<Ipv4Addr>]> = if s.addresses.is_empty() {
                Box::new([])
            } else {
                let mut out = Vec::with_capacity(order.len());
                for &ci in &order {
                    let name = &cfg.clusters[ci].name;
                    out.push(match s.addresses.get(name) {
                        None => None,
                        Some(a) => {
                            Some(a.parse::<Ipv4Addr>().map_err(|_| DnsConfigError::Address {
                                field: format!("services[{i}].addresses.{name}"),
                                value: a.clone(),
                            })?)
                        }
                    });
                }
                out.into()
            };
            let mut ports = Vec::with_capacity(s.ports.len());
            for (j, p) in s.ports.iter().enumerate() {
                let name_label: Box<[u8]> = if p.name.is_empty() {
                    Box::new([])
                } else {
                    label(
                        format!("services[{i}].ports[{j}].name"),
                        &format!("_{}", p.name),
                    )?
                    .into()
                };
                ports.push(SrvPort {
                    name_label,
                    port: p.port,
                    listen_port: p.listen_port,
                    udp: p.protocol == "udp",
                });
            }
            let svc_ns = [&name_label[..], &namespace_label[..]].concat();
            names.insert(
                svc_ns.clone().into(),
                Node::Service {
                    service,
                    scope: Scope::Global,
                },
            );
            names
                .entry(namespace_label.clone().into())
                .or_insert(Node::EmptyNonTerminal);
            for (r, region_label) in region_labels.iter().enumerate() {
                let scope = Scope::Region(r as u16);
                names.insert(
                    [&svc_ns[..], region_label].concat().into(),
                    Node::Service { service, scope },
                );
                for ent in [
                    [&namespace_label[..], region_label].concat(),
                    region_label.to_vec(),
                ] {
                    names.entry(ent.into()).or_insert(Node::EmptyNonTerminal);
                }
            }
            for (z, zone_label) in zone_labels.iter().enumerate() {
                let region_label = &region_labels[zones[z].region as usize];
                let zone_region = [&zone_label[..], region_label].concat();
                let scope = Scope::Zone(z as u16);
                names.insert(
                    [&svc_ns[..], &zone_region].concat().into(),
                    Node::Service { service, scope },
                );
                for ent in [[&namespace_label[..], &zone_region].concat(), zone_region] {
                    names.entry(ent.into()).or_insert(Node::EmptyNonTerminal);
                }
            }
            services.push(ServiceEntry {
                name_label: name_label.into(),
                namespace_label: namespace_label.into(),
                serving,
                policy: s.policy.kind,
                tiers,
                shares,
                addresses,
                ports: ports.into(),
            });
        }

        let mut subnets = Vec::with_capacity(cfg.client_subnets.len());
        for (i, s) in cfg.client_subnets.iter().enumerate() {
            let (net, prefix) = parse_cidr(&s.cidr).ok_or_else(|| DnsConfigError::Cidr {
                field: format!("clientSubnets[{i}].cidr"),
                value: s.cidr.clone(),
            })?;
            let region = places.find_region(&s.region);
            subnets.push(Subnet {
                net,
                prefix,
                locality: Locality {
                    cluster: None,
                    region,
                    zone: places.find_zone(region, &s.zone),
                },
            });
        }
        // Stable: of two equal prefixes the one listed first wins.
        subnets.sort_by_key(|s| std::cmp::Reverse(s.prefix));

        let own = clusters
            .iter()
            .position(|c| c.name == cfg.cluster)
            .map(|id| Locality {
                cluster: Some(id as ClusterId),
                region: clusters[id].region,
                zone: clusters[id].zone,
            })
            .unwrap_or_default();

        let serial = serial(cfg, &clusters, &region_labels, &zone_labels, &services);
        let cluster_labels = clusters
            .iter()
            .enumerate()
            .map(|(id, c)| (c.label.clone(), id as ClusterId))
            .collect();
        Ok(DnsView {
            cluster_labels,
            zone: zone.into(),
            ttl: cfg.ttl_seconds,
            serial,
            self_ns_label: self_ns_label.into(),
            clusters,
            services,
            zones,
            names,
            subnets,
            own,
        })
    }

    /// Where a client is: the longest `clientSubnets` prefix containing its address, else
    /// this agent's own cluster.
    pub fn locality(&self, client: IpAddr) -> Locality {
        let client = match client {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        self.subnets
            .iter()
            .find(|s| match (s.net, client) {
                (Net::V4 { bits, mask }, IpAddr::V4(a)) => u32::from(a) & mask == bits,
                (Net::V6 { bits, mask }, IpAddr::V6(a)) => u128::from(a) & mask == bits,
                _ => false,
            })
            .map_or(self.own, |s| s.locality)
    }

    /// Nearest-first rank of a cluster for an asker: 0 same cluster, 1 same zone, 2 same
    /// region, 3 the rest.
    pub(crate) fn rank(&self, asker: &Locality, cluster: ClusterId) -> u8 {
        let c = &self.clusters[cluster as usize];
        if asker.cluster == Some(cluster) {
            0
        } else if asker.zone.is_some() && asker.zone == c.zone {
            1
        } else if asker.region.is_some() && asker.region == c.region {
            2
        } else {
            3
        }
    }

    /// Whether a cluster is covered by a scope.
    pub(crate) fn in_scope(&self, scope: Scope, cluster: ClusterId) -> bool {
        let c = &self.clusters[cluster as usize];
        match scope {
            Scope::Global => true,
            Scope::Region(r) => c.region == Some(r),
            Scope::Zone(z) => c.zone == Some(z),
        }
    }

    /// The next wider scope: zone → its region → global.
    pub(crate) fn wider(&self, scope: Scope) -> Scope {
        match scope {
            Scope::Zone(z) => Scope::Region(self.zones[z as usize].region),
            Scope::Region(_) | Scope::Global => Scope::Global,
        }
    }

    /// The SOA serial of this view.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// The lb-agent addresses answered for `<service>.<namespace>` in the global name,
    /// nearest first to `client`; for logs, debugging endpoints and tests.
    pub fn global_answer(&self, namespace: &str, service: &str, client: IpAddr) -> Vec<Ipv4Addr> {
        let Some(s) = self.services.iter().find(|s| {
            s.name_label[1..].eq_ignore_ascii_case(service.as_bytes())
                && s.namespace_label[1..].eq_ignore_ascii_case(namespace.as_bytes())
        }) else {
            return Vec::new();
        };
        let asker = self.locality(client);
        let mut out = Vec::new();
        super::order::each_answer(self, s, Scope::Global, &asker, 0, |c, _, _| {
            out.push(s.address(self, c));
        });
        out
    }
}

/// The `serves` callback that trusts the configuration's per-cluster backend counts:
/// a cluster serves a Service when the service controller saw ready endpoints there.
pub fn config_serves(cfg: &LbConfig) -> impl Fn(&str, &str, &str) -> bool + '_ {
    // Indexed once: the view asks for every (cluster, Service) pair.
    let backends: HashMap<(&str, &str), &std::collections::BTreeMap<String, u32>> = cfg
        .services
        .iter()
        .map(|s| ((s.namespace.as_str(), s.name.as_str()), &s.backends))
        .collect();
    move |cluster, namespace, service| {
        backends
            .get(&(namespace, service))
            .and_then(|b| b.get(cluster))
            .is_some_and(|&n| n > 0)
    }
}

fn parse_cidr(cidr: &str) -> Option<(Net, u8)> {
    let (addr, prefix) = cidr.trim().split_once('/')?;
    let prefix: u8 = prefix.parse().ok()?;
    match addr.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            Some((
                Net::V4 {
                    bits: u32::from(a) & mask,
                    mask,
                },
                prefix,
            ))
        }
        IpAddr::V6(a) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            Some((
                Net::V6 {
                    bits: u128::from(a) & mask,
                    mask,
                },
                prefix,
            ))
        }
        _ => None,
    }
}

/// SOA serial: a hash of everything the zone answers, so every lb-agent with the same
/// configuration and health view reports the same serial and any change moves it. There
/// are no secondaries transferring the zone, so serial arithmetic order does not matter.
fn serial(
    cfg: &LbConfig,
    clusters: &[ClusterEntry],
    regions: &[Box<[u8]>],
    zones: &[Box<[u8]>],
    services: &[ServiceEntry],
) -> u32 {
    let mut h = Fnv1a::default();
    h.write(cfg.dns_zone.to_ascii_lowercase().as_bytes());
    h.write(&cfg.ttl_seconds.to_be_bytes());
    for c in clusters {
        h.write(c.name.as_bytes());
        h.write(&c.address.octets());
        h.write(c.region.map_or(&[][..], |r| &regions[r as usize]));
        h.write(c.zone.map_or(&[][..], |z| &zones[z as usize]));
    }
    for s in services {
        h.write(&s.namespace_label);
        h.write(&s.name_label);
        for &c in &s.serving {
            h.write(&c.to_be_bytes());
        }
        h.write(&[s.policy as u8]);
        h.write(&s.tiers);
        for w in &s.shares {
            h.write(&w.to_be_bytes());
        }
        for a in &s.addresses {
            h.write(&a.map_or([0; 4], |a| a.octets()));
        }
        for p in &s.ports {
            h.write(&p.name_label);
            h.write(
                &[
                    &p.port.to_be_bytes()[..],
                    &p.listen_port.to_be_bytes(),
                    &[u8::from(p.udp)],
                ]
                .concat(),
            );
        }
        h.write(b";");
    }
    h.0
}

struct Fnv1a(u32);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0x811c_9dc5)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u32::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0193);
        }
        // Field separator, so ("ab","c") and ("a","bc") differ.
        self.0 ^= 0xFF;
        self.0 = self.0.wrapping_mul(0x0100_0193);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::testutil::config;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn names_cover_every_level_and_the_levels_between() {
        let cfg = config();
        let v = DnsView::from_config(&cfg, config_serves(&cfg)).unwrap();
        let mut names: Vec<String> = v
            .names
            .iter()
            .filter(|(_, n)| !matches!(n, Node::Service { service, .. } if *service != 0))
            .map(|(k, n)| format!("{} {:?}", crate::dns::wire::display_name(k), n))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "eu-west. EmptyNonTerminal",
                "eu-west1-a.eu-west. EmptyNonTerminal",
                "ns-eu-1. NameServer(0)",
                "ns-us-1. NameServer(1)",
                "ns-us-2. NameServer(2)",
                "ns-us-3. NameServer(3)",
                "prod. EmptyNonTerminal",
                "prod.eu-west. EmptyNonTerminal",
                "prod.eu-west1-a.eu-west. EmptyNonTerminal",
                "prod.us-east. EmptyNonTerminal",
                "prod.us-east1-a.us-east. EmptyNonTerminal",
                "prod.us-east1-b.us-east. EmptyNonTerminal",
                "us-east. EmptyNonTerminal",
                "us-east1-a.us-east. EmptyNonTerminal",
                "us-east1-b.us-east. EmptyNonTerminal",
                "web.prod. Service { service: 0, scope: Global }",
                "web.prod.eu-west. Service { service: 0, scope: Region(0) }",
                "web.prod.eu-west1-a.eu-west. Service { service: 0, scope: Zone(0) }",
                "web.prod.us-east. Service { service: 0, scope: Region(1) }",
                "web.prod.us-east1-a.us-east. Service { service: 0, scope: Zone(1) }",
                "web.prod.us-east1-b.us-east. Service { service: 0, scope: Zone(2) }",
            ]
        );
    }

    #[test]
    fn serving_clusters_are_ready_and_accepted_by_the_callback() {
        let mut cfg = config();
        cfg.clusters[0].ready = false; // us-2
        let v = DnsView::from_config(&cfg, |c, _, s| s == "web" && c != "us-3").unwrap();
        let names: Vec<&str> = v.services[0]
            .serving
            .iter()
            .map(|&c| v.clusters[c as usize].name.as_str())
            .collect();
        assert_eq!(names, ["eu-1", "us-1"]);
        assert!(v.services[1].serving.is_empty());
    }

    #[test]
    fn locality_is_the_longest_matching_subnet_else_this_cluster() {
        let cfg = config();
        let v = DnsView::from_config(&cfg, config_serves(&cfg)).unwrap();
        let us_east = v.clusters[1].region;
        let zone_b = v.clusters[2].zone;
        // 10.2.0.0/16 → us-east; 10.2.1.0/24 → us-east1-b.
        let l = v.locality(ip("10.2.9.9"));
        assert_eq!((l.cluster, l.region, l.zone), (None, us_east, None));
        let l = v.locality(ip("10.2.1.7"));
        assert_eq!((l.cluster, l.region, l.zone), (None, us_east, zone_b));
        // IPv4-mapped IPv6 is treated as IPv4; native IPv6 matches the v6 subnet.
        assert_eq!(
            v.locality(ip("::ffff:10.2.1.7")),
            v.locality(ip("10.2.1.7"))
        );
        assert_eq!(v.locality(ip("fd00::1")).region, v.clusters[0].region);
        // Unknown client: this agent's own cluster (us-1).
        assert_eq!(v.locality(ip("192.0.2.1")), v.own);
        assert_eq!(v.own.cluster, Some(1));
    }

    #[test]
    fn global_answer_orders_same_cluster_zone_region_rest() {
        let cfg = config();
        let v = DnsView::from_config(&cfg, |_, _, _| true).unwrap();
        let addrs = |client: &str| -> Vec<String> {
            v.global_answer("prod", "web", ip(client))
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        // Own cluster us-1 (us-east1-a): us-1, then us-3 (same zone), us-2 (same region), eu-1.
        assert_eq!(
            addrs("192.0.2.1"),
            ["127.0.1.1", "127.0.1.3", "127.0.1.2", "127.0.1.4"]
        );
        // A client in us-east1-b: us-2, then the rest of us-east by name, then eu-1.
        assert_eq!(
            addrs("10.2.1.1"),
            ["127.0.1.2", "127.0.1.1", "127.0.1.3", "127.0.1.4"]
        );
        // A client in eu-west.
        assert_eq!(
            addrs("10.9.0.1"),
            ["127.0.1.4", "127.0.1.1", "127.0.1.2", "127.0.1.3"]
        );
        assert!(v.global_answer("prod", "nope", ip("10.9.0.1")).is_empty());
    }

    #[test]
    fn bad_fields_are_named() {
        let check = |edit: &dyn Fn(&mut LbConfig), expect: &str| {
            let mut cfg = config();
            edit(&mut cfg);
            let err = DnsView::from_config(&cfg, |_, _, _| true)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expect), "{err:?} should mention {expect:?}");
        };
        check(&|c| c.dns_zone = "".into(), "dnsZone \"\" is empty");
        check(&|c| c.dns_zone = "a..b".into(), "dnsZone");
        check(
            &|c| c.clusters[1].address = "nope".into(),
            "clusters[1].address \"nope\"",
        );
        check(&|c| c.clusters[1].address = "::1".into(), "not an IPv4");
        check(
            &|c| c.clusters[2].region = "us.east".into(),
            "clusters[2].region",
        );
        check(&|c| c.clusters[2].zone = "a b".into(), "clusters[2].zone");
        check(&|c| c.clusters[3].name = "a.b".into(), "clusters[3].name");
        check(
            &|c| c.clusters[3].name = "us-1".into(),
            "clusters[3].name duplicates us-1",
        );
        check(&|c| c.cluster = "x/y".into(), "cluster \"ns-x/y\"");
        check(
            &|c| c.cluster = String::new(),
            "cluster \"\" is not a DNS label: is empty",
        );
        check(
            &|c| c.services[1].namespace = "Bad_ns!".into(),
            "services[1].namespace",
        );
        check(
            &|c| c.services[1].name = "web".into(),
            "services[1] duplicates prod/web",
        );
        check(
            &|c| c.client_subnets[0].cidr = "10.0.0.0".into(),
            "clientSubnets[0].cidr",
        );
        check(
            &|c| c.client_subnets[1].cidr = "10.0.0.0/33".into(),
            "clientSubnets[1].cidr",
        );
        check(
            &|c| c.client_subnets[1].cidr = "fd00::/129".into(),
            "clientSubnets[1].cidr",
        );
    }

    #[test]
    fn serial_follows_content_only() {
        let cfg = config();
        let a = DnsView::from_config(&cfg, config_serves(&cfg)).unwrap();
        let b = DnsView::from_config(&cfg, config_serves(&cfg)).unwrap();
        assert_eq!(a.serial(), b.serial());
        let fewer = DnsView::from_config(&cfg, |c, _, _| c != "eu-1").unwrap();
        assert_ne!(a.serial(), fewer.serial());
        let mut moved = cfg.clone();
        moved.clusters[0].address = "127.0.9.9".into();
        assert_ne!(
            a.serial(),
            DnsView::from_config(&moved, config_serves(&moved))
                .unwrap()
                .serial()
        );
        let mut renamed = cfg.clone();
        for c in &mut renamed.clusters {
            c.region = c.region.replace("us-east", "us-central");
        }
        assert_ne!(
            a.serial(),
            DnsView::from_config(&renamed, config_serves(&renamed))
                .unwrap()
                .serial()
        );
        // The order the clusters are listed in is not content.
        let mut shuffled = cfg.clone();
        shuffled.clusters.reverse();
        assert_eq!(
            a.serial(),
            DnsView::from_config(&shuffled, config_serves(&shuffled))
                .unwrap()
                .serial()
        );
    }

    #[test]
    fn cidr_parsing_masks_host_bits() {
        let (net, prefix) = parse_cidr("10.1.2.3/8").unwrap();
        assert!(matches!(
            net,
            Net::V4 {
                bits: 0x0A00_0000,
                mask: 0xFF00_0000
            }
        ));
        assert_eq!(prefix, 8);
        assert!(matches!(
            parse_cidr("0.0.0.0/0").unwrap().0,
            Net::V4 { bits: 0, mask: 0 }
        ));
        assert!(matches!(
            parse_cidr("::/0").unwrap().0,
            Net::V6 { bits: 0, mask: 0 }
        ));
        assert!(parse_cidr("10.0.0.0/x").is_none());
    }
}

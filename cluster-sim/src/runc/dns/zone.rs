//! The records of the cluster domain, built from the cached Services and EndpointSlices as
//! the Kubernetes DNS-based service discovery specification (kubernetes/dns
//! `docs/specification.md`) lays them out.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_json::Value;

use crate::controllers::util::str_at;
use crate::runc::services::slices_of;

/// The cluster's DNS domain (what kubelets default `--cluster-domain` to).
pub(crate) const CLUSTER_DOMAIN: &str = "cluster.local";

/// What a name in the zone holds. Names are lowercase, dotted, with the trailing dot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    /// The name exists but has no records of its own (an empty non-terminal such as
    /// `svc.cluster.local.`, or a headless Service without ready endpoints): NODATA.
    Empty,
    /// A records: a ClusterIP, a headless Service's ready endpoints, one endpoint's address.
    Addresses(Vec<Ipv4Addr>),
    /// An ExternalName Service: a CNAME to its `externalName` (dotted, trailing dot).
    Alias(String),
    /// SRV records of one named port.
    Srv(Vec<SrvTarget>),
}

/// One SRV record's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SrvTarget {
    /// The port number.
    pub port: u16,
    /// The target name (dotted, trailing dot), an A name of this zone.
    pub target: String,
}

/// The zone at one moment: every name under [`CLUSTER_DOMAIN`] and what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Zone {
    /// Name → node.
    pub names: BTreeMap<String, Node>,
    /// SOA serial: changes with each published zone, so resolvers can tell versions apart.
    pub serial: u32,
}

/// One ready endpoint of a Service: its address and DNS label (its `hostname`, else its
/// address dashed, as CoreDNS names endpoints without one), and its ports.
struct Endpoint {
    ip: Ipv4Addr,
    label: String,
    ports: Vec<(String, String, u16)>,
}

/// The lowercase `_tcp` / `_udp` / `_sctp` label of a protocol.
fn proto_label(protocol: &str) -> String {
    format!("_{}", protocol.to_ascii_lowercase())
}

/// The endpoints of `slices` a headless Service's names list: ready ones, or every one not
/// terminating when the Service publishes not-ready addresses.
fn endpoints(slices: &[&Value], publish_not_ready: bool) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    for slice in slices {
        let ports: Vec<(String, String, u16)> = slice
            .pointer("/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let port = p.get("port").and_then(Value::as_u64)?;
                Some((
                    str_at(p, "/name").unwrap_or("").to_string(),
                    str_at(p, "/protocol").unwrap_or("TCP").to_string(),
                    u16::try_from(port).ok()?,
                ))
            })
            .collect();
        for ep in slice
            .pointer("/endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let flag = |f: &str| {
                ep.pointer(&format!("/conditions/{f}"))
                    .and_then(Value::as_bool)
            };
            // An absent `ready` means ready (the EndpointSlice API's rule).
            let ready = flag("ready") != Some(false);
            if !(ready || publish_not_ready && flag("terminating") != Some(true)) {
                continue;
            }
            let Some(ip) = ep
                .pointer("/addresses/0")
                .and_then(Value::as_str)
                .and_then(|a| a.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            let label = str_at(ep, "/hostname")
                .filter(|h| !h.is_empty())
                .map_or_else(|| ip.to_string().replace('.', "-"), str::to_ascii_lowercase);
            match out.iter_mut().find(|e| e.ip == ip) {
                Some(e) => e.ports.extend(ports.iter().cloned()),
                None => out.push(Endpoint {
                    ip,
                    label,
                    ports: ports.clone(),
                }),
            }
        }
    }
    out.sort_by_key(|e| e.ip);
    out
}

impl Zone {
    /// The zone of `services` with their EndpointSlices `slices`, at `serial`.
    pub(crate) fn build(services: &[Value], slices: &[Value], serial: u32) -> Zone {
        // The apex exists (with its SOA) even without a Service.
        let mut zone = Zone {
            names: BTreeMap::from([(format!("{CLUSTER_DOMAIN}."), Node::Empty)]),
            serial,
        };
        for svc in services {
            let (Some(ns), Some(name)) = (
                str_at(svc, "/metadata/namespace"),
                str_at(svc, "/metadata/name"),
            ) else {
                continue;
            };
            let base = format!("{name}.{ns}.svc.{CLUSTER_DOMAIN}.").to_ascii_lowercase();
            if str_at(svc, "/spec/type") == Some("ExternalName") {
                if let Some(target) = str_at(svc, "/spec/externalName").filter(|t| !t.is_empty()) {
                    let target = target.trim_end_matches('.').to_ascii_lowercase() + ".";
                    zone.insert(base, Node::Alias(target));
                }
                continue;
            }
            let cluster_ip = str_at(svc, "/spec/clusterIP").unwrap_or("");
            if cluster_ip != "None" {
                // A ClusterIP (IPv4 here; a Service without one yet has no name yet).
                let Ok(ip) = cluster_ip.parse::<Ipv4Addr>() else {
                    continue;
                };
                zone.insert(base.clone(), Node::Addresses(vec![ip]));
                for port in svc
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let (Some(port_name), Some(number)) = (
                        str_at(port, "/name").filter(|n| !n.is_empty()),
                        port.get("port")
                            .and_then(Value::as_u64)
                            .and_then(|p| u16::try_from(p).ok()),
                    ) else {
                        continue;
                    };
                    let proto = proto_label(str_at(port, "/protocol").unwrap_or("TCP"));
                    zone.insert(
                        format!("_{port_name}.{proto}.{base}").to_ascii_lowercase(),
                        Node::Srv(vec![SrvTarget {
                            port: number,
                            target: base.clone(),
                        }]),
                    );
                }
                continue;
            }
            // Headless: the ready endpoints, each also by its own name, and SRV records
            // naming each endpoint's port.
            let own = slices_of(slices, ns, name);
            let publish = svc
                .pointer("/spec/publishNotReadyAddresses")
                .and_then(Value::as_bool)
                == Some(true);
            let eps = endpoints(&own, publish);
            zone.insert(
                base.clone(),
                if eps.is_empty() {
                    Node::Empty
                } else {
                    Node::Addresses(eps.iter().map(|e| e.ip).collect())
                },
            );
            let mut srv: BTreeMap<String, Vec<SrvTarget>> = BTreeMap::new();
            for e in &eps {
                let host = format!("{}.{base}", e.label);
                match zone.names.get_mut(&host) {
                    Some(Node::Addresses(ips)) => ips.push(e.ip),
                    _ => zone.insert(host.clone(), Node::Addresses(vec![e.ip])),
                }
                for (port_name, protocol, number) in &e.ports {
                    if port_name.is_empty() {
                        continue;
                    }
                    srv.entry(
                        format!("_{port_name}.{}.{base}", proto_label(protocol))
                            .to_ascii_lowercase(),
                    )
                    .or_default()
                    .push(SrvTarget {
                        port: *number,
                        target: host.clone(),
                    });
                }
            }
            for (name, targets) in srv {
                zone.insert(name, Node::Srv(targets));
            }
        }
        zone
    }

    /// Sets `name`, and makes each of its ancestors down to the domain exist.
    fn insert(&mut self, name: String, node: Node) {
        let apex = format!("{CLUSTER_DOMAIN}.");
        let mut rest = name.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            if parent.len() < apex.len() {
                break;
            }
            self.names.entry(parent.to_string()).or_insert(Node::Empty);
            rest = parent;
        }
        self.names.insert(name, node);
    }

    /// What `name` (lowercase, dotted, trailing dot) holds, if it exists.
    pub(crate) fn get(&self, name: &str) -> Option<&Node> {
        self.names.get(name)
    }
}

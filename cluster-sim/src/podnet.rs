//! Pod addressing: which `/24` each node's pods come from, under the default overlay scheme
//! (`10.244.<node>.0/24`, the same in every cluster, as separate real clusters would have) or
//! the loopback scheme (`127.<10 + cluster>.<node>.0/24`, unique across the fleet and bindable
//! on Linux without any setup, so pods can serve real traffic).
//!
//! Reserved loopback ranges under the loopback scheme:
//! - `127.0.0.0` – `127.9.255.255`: not used for pods (`127.0.0.1` serves the clusters' API
//!   servers and the admin API; `127.0.1.0/24` is for lb-agents, e.g. through `--lb-pool`;
//!   `127.1.<cluster index>.0/24` holds the Service ClusterIPs of `runtime: runc` clusters,
//!   see [`ServiceNet`]);
//! - `127.10.0.0` – `127.199.255.255`: pods (at most [`LOOPBACK_MAX_CLUSTERS`] clusters of
//!   at most [`LOOPBACK_MAX_NODES`] nodes, [`MAX_PODS_PER_NODE`] pod addresses per node);
//! - `127.200.0.0` – `127.255.255.255`: the default load-balancer pools
//!   (`127.200.<cluster index>.0/24`).
//!
//! Clusters with `runtime: runc` use the sandbox scheme whatever the fleet's `podNetwork`:
//! each pod has its own network namespace, so its address must be routable from the host
//! rather than a loopback one. Its ranges lie in `100.64.0.0/10` (RFC 6598 shared address
//! space: private, never routed to the Internet, and rarely used by a host's own networks),
//! all on one bridge the `cluster-sim` process owns (see [`SandboxNet`]); the host does not
//! forward between them (no NAT, no default-route leakage), so each cluster's pods see only
//! their own cluster and the host's addresses:
//! - `100.64.0.1`: the process's own address on the bridge, where the API servers of a fleet
//!   with runc clusters listen so that pods reach them ([`SANDBOX_HOST`]);
//! - `100.(65 + cluster).0.0/16`: one runc cluster's network (at most
//!   [`SANDBOX_MAX_CLUSTERS`] clusters, fleet indexes `0` to `62`):
//!   - `.<node>.0/24` for `node` below [`SANDBOX_MAX_NODES`]: node `node`'s pods (`.2` to
//!     `.254`); a simulated serving pod's (`servePods`: a pod whose images the runtime does
//!     not have) is given to the host as a `/32` on the bridge while it serves, since its
//!     echo server runs in the `cluster-sim` process (`crate::runc::net`), so runc pods and
//!     the host reach it like any pod; pods of other runc clusters do too (the host
//!     delivers to its own addresses; it only does not forward);
//!   - `.252.0/22`: addresses the host owns (a `local` route on the bridge):
//!     `.253.0/24` the default load-balancer pool, `.254.0/24` the Service ClusterIPs
//!     ([`ServiceNet`]), `.255.1` the pods' gateway (the bridge, with the whole `/16`),
//!     `.255.10` the cluster DNS server (`runc/dns`), which pods' `resolv.conf` names.

use std::net::Ipv4Addr;

use serde::Deserialize;

/// First pod CIDR of the overlay scheme: node `i` gets `10.244.i.0/24` counting on through
/// `10.255.255.0/24`, then continues in `100.64.0.0/10` for very large clusters.
const POD_NET: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 0);
/// How many `/24`s fit from `POD_NET` to the end of `10.0.0.0/8`.
const POD_NET_BLOCKS: u32 = 12 * 256;
/// Overflow range for node pod CIDRs.
const POD_NET_OVERFLOW: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 0);

/// Second octet of the first cluster's loopback pod range.
const LOOPBACK_FIRST_OCTET: u32 = 10;
/// Clusters a loopback fleet may have (`127.10` to `127.199`).
pub const LOOPBACK_MAX_CLUSTERS: u32 = 190;
/// Nodes a loopback cluster may have (one `/24` each in the cluster's `/16`).
pub const LOOPBACK_MAX_NODES: u32 = 256;
/// Pod addresses per node in either scheme: `.2` to `.254` (`.1` is the node's bridge).
pub const MAX_PODS_PER_NODE: u32 = 253;
/// First and last address of the loopback pod range.
pub const LOOPBACK_POD_RANGE: (Ipv4Addr, Ipv4Addr) = (
    Ipv4Addr::new(127, 10, 0, 0),
    Ipv4Addr::new(127, 199, 255, 255),
);

/// The sandbox scheme's first `/16` (`100.64.0.0`), the process's own.
const SANDBOX_NET: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 0);
/// The `cluster-sim` process's own address on its bridge (see the module doc).
pub const SANDBOX_HOST: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
/// Runc clusters the sandbox scheme holds: fleet indexes `0` to `62`, one `/16` each after
/// the process's own in `100.64.0.0/10`.
pub const SANDBOX_MAX_CLUSTERS: u32 = 63;
/// Nodes a runc cluster may have (one `/24` each below the host-owned `.252.0/22`).
pub const SANDBOX_MAX_NODES: u32 = 252;

/// The addresses of one runc cluster's sandboxed pods (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxNet {
    /// The cluster's `/16`.
    pub base: Ipv4Addr,
}

impl SandboxNet {
    /// The network of the runc cluster with fleet index `cluster`, if the scheme holds it.
    pub fn of(cluster: u32) -> Option<Self> {
        (cluster < SANDBOX_MAX_CLUSTERS).then(|| Self {
            base: ipv4_add(SANDBOX_NET, (cluster + 1) << 16),
        })
    }

    /// The `/16` length of [`Self::base`] as `ip` wants it.
    pub const PREFIX: u8 = 16;

    /// The pods' gateway: the bridge's address in this network.
    pub fn gateway(self) -> Ipv4Addr {
        ipv4_add(self.base, (255 << 8) | 1)
    }

    /// The cluster DNS server's address (what pods' `resolv.conf` names).
    pub fn dns(self) -> Ipv4Addr {
        ipv4_add(self.base, (255 << 8) | 10)
    }

    /// The host-owned `/22` (load balancers, ClusterIPs, gateway, DNS): its base address.
    pub fn host_owned(self) -> Ipv4Addr {
        ipv4_add(self.base, 252 << 8)
    }

    /// The default load-balancer pool, as a CIDR.
    pub fn lb_pool(self) -> String {
        format!("{}/24", ipv4_add(self.base, 253 << 8))
    }

    /// Where ClusterIPs are allocated.
    pub fn services(self) -> ServiceNet {
        ServiceNet {
            base: ipv4_add(self.base, 254 << 8),
            size: 256,
        }
    }
}

/// How pods are addressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "camelCase")]
pub enum PodNetwork {
    /// `10.244.<node>.<slot>`: realistic, the same ranges in every cluster, not reachable.
    #[default]
    Overlay,
    /// `127.<10 + cluster index>.<node>.<slot>`: unique across the fleet and reachable on
    /// this host, so `--serve-pods` can answer on them.
    Loopback,
    /// `100.(65 + cluster).<node>.<slot>` ([`SandboxNet`]): each pod in its own network
    /// namespace; what `runtime: runc` clusters use, never chosen for a fleet.
    #[serde(skip)]
    #[value(skip)]
    Sandbox,
}

impl PodNetwork {
    /// The base address of a node's pod CIDR (a `/24`), or `None` past the scheme's limits.
    pub fn node_cidr_base(self, cluster: u32, node: u32) -> Option<Ipv4Addr> {
        match self {
            PodNetwork::Overlay => Some(if node < POD_NET_BLOCKS {
                ipv4_add(POD_NET, node * 256)
            } else {
                ipv4_add(
                    POD_NET_OVERFLOW,
                    (node - POD_NET_BLOCKS).saturating_mul(256),
                )
            }),
            PodNetwork::Loopback => (cluster < LOOPBACK_MAX_CLUSTERS && node < LOOPBACK_MAX_NODES)
                .then(|| Ipv4Addr::new(127, (LOOPBACK_FIRST_OCTET + cluster) as u8, node as u8, 0)),
            PodNetwork::Sandbox => SandboxNet::of(cluster)
                .filter(|_| node < SANDBOX_MAX_NODES)
                .map(|n| ipv4_add(n.base, node << 8)),
        }
    }

    /// The node index encoded by a pod CIDR this scheme wrote for `cluster`.
    pub fn node_index(self, cluster: u32, cidr: &str) -> Option<u32> {
        let (addr, bits) = cidr.split_once('/')?;
        if bits != "24" {
            return None;
        }
        let addr: Ipv4Addr = addr.parse().ok()?;
        match self {
            PodNetwork::Overlay => {
                let a = u32::from(addr);
                let (net, over) = (u32::from(POD_NET), u32::from(POD_NET_OVERFLOW));
                if a >= net && (a - net) / 256 < POD_NET_BLOCKS {
                    Some((a - net) / 256)
                } else if a >= over && (a - over) < (1 << 22) {
                    Some(POD_NET_BLOCKS + (a - over) / 256)
                } else {
                    None
                }
            }
            PodNetwork::Loopback => {
                let [a, b, c, d] = addr.octets();
                (a == 127 && u32::from(b) == LOOPBACK_FIRST_OCTET + cluster && d == 0)
                    .then_some(u32::from(c))
            }
            PodNetwork::Sandbox => {
                let net = SandboxNet::of(cluster)?;
                let [a, b, c, d] = addr.octets();
                let [na, nb, ..] = net.base.octets();
                (a == na && b == nb && u32::from(c) < SANDBOX_MAX_NODES && d == 0)
                    .then_some(u32::from(c))
            }
        }
    }

    /// Whether `ip` lies in the range this scheme hands to pods of any cluster (overlay
    /// addresses are never bound, so only the loopback scheme reserves anything).
    pub fn reserves(self, ip: Ipv4Addr) -> bool {
        self == PodNetwork::Loopback && (LOOPBACK_POD_RANGE.0..=LOOPBACK_POD_RANGE.1).contains(&ip)
    }
}

/// A cluster's Service CIDR, where ClusterIPs are allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceNet {
    /// The network address.
    pub base: Ipv4Addr,
    /// How many addresses it spans (the first and last are not allocated).
    pub size: u32,
}

impl ServiceNet {
    /// `10.96.0.0/16` for a simulated cluster (kubeadm's default, the same in every cluster);
    /// [`SandboxNet::services`] for a cluster whose pods really run, so that its ClusterIPs
    /// are host addresses the runtime's Service proxy can bind and pods reach, unique in the
    /// fleet (`100.(65 + cluster).254.0/24`).
    pub fn of(runs_pods: bool, cluster: u32) -> Self {
        match SandboxNet::of(cluster).filter(|_| runs_pods) {
            Some(net) => net.services(),
            None => Self {
                base: Ipv4Addr::new(10, 96, 0, 0),
                size: 1 << 16,
            },
        }
    }

    /// The offset of `ip` in this network, if it is in it.
    pub fn offset(self, ip: &str) -> Option<u32> {
        let a = u32::from(ip.parse::<Ipv4Addr>().ok()?);
        let base = u32::from(self.base);
        (a >= base && a - base < self.size).then(|| a - base)
    }

    /// The address at `offset`.
    pub fn addr(self, offset: u32) -> Ipv4Addr {
        ipv4_add(self.base, offset)
    }
}

/// IPv4 address plus an offset.
fn ipv4_add(base: Ipv4Addr, offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base).wrapping_add(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_cidrs_round_trip() {
        let o = PodNetwork::Overlay;
        for i in [
            0,
            1,
            255,
            256,
            POD_NET_BLOCKS - 1,
            POD_NET_BLOCKS,
            5000,
            19_000,
        ] {
            let cidr = format!("{}/24", o.node_cidr_base(7, i).unwrap());
            assert_eq!(o.node_index(7, &cidr), Some(i), "{cidr}");
        }
        assert_eq!(o.node_cidr_base(0, 1).unwrap().to_string(), "10.244.1.0");
        assert_eq!(o.node_index(0, "10.0.0.0/24"), None);
    }

    #[test]
    fn service_nets() {
        let sim = ServiceNet::of(false, 3);
        assert_eq!(sim.addr(1).to_string(), "10.96.0.1");
        assert_eq!(sim.offset("10.96.1.2"), Some(258));
        assert_eq!(sim.offset("10.97.0.1"), None);
        assert_eq!(sim.offset("None"), None);
        let runc = ServiceNet::of(true, 3);
        assert_eq!(runc.addr(1).to_string(), "100.68.254.1");
        assert_eq!(runc.offset("100.68.254.254"), Some(254));
        assert_eq!(runc.offset("100.69.254.1"), None);
        // Never a pod address.
        assert!(!PodNetwork::Loopback.reserves(runc.addr(1)));
        assert_eq!(
            PodNetwork::Sandbox.node_index(3, "100.68.254.0/24"),
            None,
            "ClusterIPs are not a node's"
        );
    }

    #[test]
    fn sandbox_plan() {
        let s = PodNetwork::Sandbox;
        let first = SandboxNet::of(0).unwrap();
        assert_eq!(first.base.to_string(), "100.65.0.0");
        assert_eq!(first.gateway().to_string(), "100.65.255.1");
        assert_eq!(first.dns().to_string(), "100.65.255.10");
        assert_eq!(first.host_owned().to_string(), "100.65.252.0");
        assert_eq!(first.lb_pool(), "100.65.253.0/24");
        let last = SandboxNet::of(SANDBOX_MAX_CLUSTERS - 1).unwrap();
        assert_eq!(last.base.to_string(), "100.127.0.0");
        assert_eq!(SandboxNet::of(SANDBOX_MAX_CLUSTERS), None);
        // The process's own address is in no cluster's network.
        assert_eq!(u32::from(SANDBOX_HOST) >> 16, u32::from(SANDBOX_NET) >> 16);
        assert_eq!(s.node_cidr_base(2, 5).unwrap().to_string(), "100.67.5.0");
        assert_eq!(
            s.node_cidr_base(2, SANDBOX_MAX_NODES - 1)
                .unwrap()
                .to_string(),
            "100.67.251.0"
        );
        assert_eq!(s.node_cidr_base(2, SANDBOX_MAX_NODES), None);
        assert_eq!(s.node_cidr_base(SANDBOX_MAX_CLUSTERS, 0), None);
        assert_eq!(s.node_index(2, "100.67.5.0/24"), Some(5));
        assert_eq!(s.node_index(3, "100.67.5.0/24"), None);
        assert_eq!(s.node_index(2, "100.67.252.0/24"), None);
        // Everything stays in 100.64.0.0/10.
        for ip in [last.dns(), last.services().addr(254), SANDBOX_HOST] {
            assert_eq!(
                u32::from(ip) >> 22,
                u32::from(Ipv4Addr::new(100, 64, 0, 0)) >> 22
            );
        }
    }

    #[test]
    fn loopback_cidrs_are_per_cluster_and_bounded() {
        let l = PodNetwork::Loopback;
        assert_eq!(l.node_cidr_base(0, 0).unwrap().to_string(), "127.10.0.0");
        assert_eq!(l.node_cidr_base(2, 5).unwrap().to_string(), "127.12.5.0");
        assert_eq!(
            l.node_cidr_base(LOOPBACK_MAX_CLUSTERS - 1, LOOPBACK_MAX_NODES - 1)
                .unwrap()
                .to_string(),
            "127.199.255.0"
        );
        assert_eq!(l.node_cidr_base(LOOPBACK_MAX_CLUSTERS, 0), None);
        assert_eq!(l.node_cidr_base(0, LOOPBACK_MAX_NODES), None);
        assert_eq!(l.node_index(2, "127.12.5.0/24"), Some(5));
        // Another cluster's CIDR is not ours.
        assert_eq!(l.node_index(3, "127.12.5.0/24"), None);
        assert!(l.reserves(Ipv4Addr::new(127, 10, 0, 2)));
        assert!(!l.reserves(Ipv4Addr::new(127, 0, 1, 1)));
        assert!(!l.reserves(Ipv4Addr::new(127, 200, 0, 1)));
        assert!(!PodNetwork::Overlay.reserves(Ipv4Addr::new(127, 10, 0, 2)));
    }
}

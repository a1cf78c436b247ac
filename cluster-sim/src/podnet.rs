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
    /// `127.1.<cluster>.0/24` for a cluster whose pods really run, so that its ClusterIPs
    /// are loopback addresses the runtime's Service proxy can bind, unique in the fleet.
    pub fn of(runs_pods: bool, cluster: u32) -> Self {
        if runs_pods {
            Self {
                base: Ipv4Addr::new(127, 1, (cluster % 256) as u8, 0),
                size: 256,
            }
        } else {
            Self {
                base: Ipv4Addr::new(10, 96, 0, 0),
                size: 1 << 16,
            }
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
        assert_eq!(runc.addr(1).to_string(), "127.1.3.1");
        assert_eq!(runc.offset("127.1.3.254"), Some(254));
        assert_eq!(runc.offset("127.1.4.1"), None);
        // Never a pod address.
        assert!(!PodNetwork::Loopback.reserves(runc.addr(1)));
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

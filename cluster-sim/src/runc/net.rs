//! The pods' network of the runc runtime, set up with iproute2's `ip`: one bridge per
//! `cluster-sim` process, holding the process's own address ([`SANDBOX_HOST`]) and each runc
//! cluster's gateway and host-owned range ([`SandboxNet`]); for each pod a network namespace
//! whose `eth0`, one end of a veth pair whose other end joins the bridge, holds the pod IP,
//! with loopback up and the default route via the cluster's gateway.
//!
//! One bridge per process rather than per cluster: the process's own address (where the API
//! servers listen) needs a home that every cluster's pods reach, and one device is one thing
//! to create and remove. Clusters stay apart all the same: each has its own `/16`, and the
//! host does not forward between them.
//!
//! Simulated serving pods of a runc cluster (`servePods`; pods whose images are not in the
//! image directory) have no namespace: their echo servers run in this process, so each one's
//! pod IP is given to the host as a `/32` on the bridge while it serves
//! ([`add_host_address`], [`remove_host_address`]; see `controllers::containers`). The
//! cluster's sandboxed pods reach it on-link, the host locally, like a pod's address.
//!
//! Names carry the process id, so that a crashed run's leftovers are found and removed at
//! the next start ([`remove_leftovers`]): the bridge is `ms<pid>br`, veths' host ends
//! `ms<pid>v<n>` (interface names have at most 15 bytes), namespaces are named like the
//! pod's containers (`msim-<pid>-<cluster>-<pod>`).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{CONTAINER_PREFIX, RuncError, command};
use crate::podnet::{SANDBOX_HOST, SandboxNet};

/// Where `ip netns` keeps its namespaces (what runc's namespace `path` names).
const NETNS_DIR: &str = "/run/netns";

/// The bridge of the process `pid`.
fn bridge_name(pid: u32) -> String {
    format!("ms{pid}br")
}

/// The host end of this process's `n`th veth (`n` wraps at 2^20 to fit 15 bytes).
fn veth_name(pid: u32, n: u32) -> String {
    format!("ms{pid}v{:x}", n & 0xf_ffff)
}

/// The process id in a bridge's or veth's name this module gave it.
fn link_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ms")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    (tail == "br" || tail.starts_with('v'))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The process id in a namespace name (`msim-<pid>-...`).
fn netns_pid(name: &str) -> Option<u32> {
    name.strip_prefix(CONTAINER_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The path runc joins for the namespace `name`.
pub(crate) fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

async fn ip(args: &[&str]) -> Result<(), RuncError> {
    command::run("ip", args).await.map(|_| ())
}

/// Creates this process's bridge with its own address (once per process, before any
/// cluster's). Fails, with `ip`'s message, without root.
pub async fn create_bridge() -> Result<(), RuncError> {
    let br = bridge_name(std::process::id());
    ip(&["link", "add", "name", &br, "type", "bridge"]).await?;
    ip(&["link", "set", &br, "up"]).await?;
    ip(&["addr", "add", &format!("{SANDBOX_HOST}/32"), "dev", &br]).await
}

/// Gives the bridge a runc cluster's gateway (with the cluster's whole `/16` on-link) and
/// makes the host own the cluster's host-owned range, where its ClusterIPs, load-balancer
/// addresses and DNS server are bound.
pub async fn add_cluster(net: SandboxNet) -> Result<(), RuncError> {
    let br = bridge_name(std::process::id());
    ip(&[
        "addr",
        "add",
        &format!("{}/{}", net.gateway(), SandboxNet::PREFIX),
        "dev",
        &br,
    ])
    .await?;
    ip(&[
        "route",
        "add",
        "local",
        &format!("{}/22", net.host_owned()),
        "dev",
        &br,
    ])
    .await
}

/// Gives the host a simulated serving pod's address, a `/32` on the bridge, so that its echo
/// server can bind it and the cluster's pods (on-link: the bridge answers ARP for it) and
/// the host reach it. Idempotent (`replace`), so a pod served again is no error.
pub(crate) async fn add_host_address(pod_ip: Ipv4Addr) -> Result<(), RuncError> {
    let br = bridge_name(std::process::id());
    ip(&["addr", "replace", &format!("{pod_ip}/32"), "dev", &br]).await
}

/// Takes a simulated pod's address back from the host (the pod stopped serving); the bridge
/// takes any left at exit with it.
pub(crate) async fn remove_host_address(pod_ip: Ipv4Addr) {
    let br = bridge_name(std::process::id());
    if let Err(e) = ip(&["addr", "del", &format!("{pod_ip}/32"), "dev", &br]).await {
        tracing::warn!(%pod_ip, error = %e, "cannot remove a simulated pod's address from the bridge");
    }
}

/// Removes this process's bridge (at exit; the pods' namespaces went with their pods).
pub fn remove_bridge() {
    command::run_blocking("ip", &["link", "del", &bridge_name(std::process::id())]);
}

/// Counts veths, for unique names.
static VETHS: AtomicU32 = AtomicU32::new(0);

/// Creates the namespace `name` for a pod at `pod_ip` in `net` (replacing one of that name
/// that a failed attempt left) and returns its path.
pub(crate) async fn create_pod_netns(
    name: &str,
    pod_ip: Ipv4Addr,
    net: SandboxNet,
) -> Result<PathBuf, RuncError> {
    let pid = std::process::id();
    let veth = veth_name(pid, VETHS.fetch_add(1, Ordering::Relaxed));
    // A namespace left by an attempt that failed half-way (its veth goes with it).
    let _ = ip(&["netns", "del", name]).await;
    ip(&["netns", "add", name]).await?;
    let set_up = async {
        ip(&[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", name,
        ])
        .await?;
        ip(&["link", "set", &veth, "master", &bridge_name(pid), "up"]).await?;
        let addr = format!("{pod_ip}/{}", SandboxNet::PREFIX);
        ip(&["-n", name, "addr", "add", &addr, "dev", "eth0"]).await?;
        ip(&["-n", name, "link", "set", "eth0", "up"]).await?;
        ip(&["-n", name, "link", "set", "lo", "up"]).await?;
        let gw = net.gateway().to_string();
        ip(&["-n", name, "route", "add", "default", "via", &gw]).await
    };
    match set_up.await {
        Ok(()) => Ok(netns_path(name)),
        Err(e) => {
            let _ = ip(&["netns", "del", name]).await;
            Err(e)
        }
    }
}

/// Removes a pod's namespace (after its containers are gone), and its veth with it.
pub(crate) async fn remove_pod_netns(name: &str) {
    if let Err(e) = ip(&["netns", "del", name]).await {
        tracing::warn!(netns = name, error = %e, "cannot remove the pod's network namespace");
    }
}

/// Removes this process's namespaces (at exit, no grace period).
pub(crate) fn remove_own_netns(prefix: &str) {
    for name in netns_names() {
        if name.starts_with(prefix) {
            command::run_blocking("ip", &["netns", "del", &name]);
        }
    }
}

/// The names of the namespaces `ip netns` knows.
fn netns_names() -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect()
}

/// Removes the namespaces, veths and bridges of `cluster-sim` processes that no longer run.
pub(crate) fn remove_leftovers(dead: impl Fn(u32) -> bool) {
    for name in netns_names() {
        if netns_pid(&name).is_some_and(&dead) {
            tracing::info!(netns = %name, "removing a network namespace a previous run left behind");
            command::run_blocking("ip", &["netns", "del", &name]);
        }
    }
    for entry in std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if link_pid(&name).is_some_and(&dead) {
            tracing::info!(link = %name, "removing a network device a previous run left behind");
            command::run_blocking("ip", &["link", "del", &name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_carry_the_pid() {
        let pid = 4_194_304; // Linux's largest pid.
        assert_eq!(bridge_name(pid), "ms4194304br");
        assert!(
            veth_name(pid, u32::MAX).len() <= 15,
            "{}",
            veth_name(pid, u32::MAX)
        );
        assert_eq!(link_pid(&bridge_name(pid)), Some(pid));
        assert_eq!(link_pid(&veth_name(pid, 0x1234)), Some(pid));
        for other in ["eth0", "msx1br", "ms12", "ms12eth", "docker0"] {
            assert_eq!(link_pid(other), None, "{other}");
        }
        assert_eq!(netns_pid("msim-77-0-deadbeef"), Some(77));
        assert_eq!(netns_pid("cni-1234"), None);
    }
}

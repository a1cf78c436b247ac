//! The lb-agents of a local (`fedctl up`) fleet: each simulated cluster gets its
//! `meridian-system/meridian-lb-agent` LoadBalancer Service asking for its own loopback
//! address `127.0.1.<n>` and offering the loopback block `127.2.<n>.0/24` as its pool of
//! dedicated Service addresses, and an lb-agent process bound there reading that cluster's
//! API.

use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::Context;
use fed_api::names::{LB_ADDRESS_POOL_ANNOTATION, LB_AGENT_SERVICE, SYSTEM_NAMESPACE};
use serde_json::{Value, json};

/// Ports every local lb-agent listens on (each on its own address).
pub const HTTP_PORT: u16 = 8080;
/// HTTPS port: TLS routed by SNI, passed through.
pub const HTTPS_PORT: u16 = 8443;
/// Peer (lb-agent to lb-agent) port.
pub const PEER_PORT: u16 = 8081;
/// DNS port (UDP and TCP).
pub const DNS_PORT: u16 = 5353;
/// /metrics, /healthz, /readyz port.
pub const METRICS_PORT: u16 = 9090;

/// The address of the n-th (1-based) simulated cluster's lb-agent.
pub fn address(n: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, n as u8)
}

/// The n-th cluster's pool of dedicated Service addresses: loopback addresses, like the
/// agents' own, outside the sims' pod network (`127.10.0.0` and up).
pub fn address_pool(n: u32) -> String {
    format!("127.2.{n}.0/24")
}

/// The member Service that publishes an lb-agent's address, ports and address pool.
pub fn service(n: u32) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": LB_AGENT_SERVICE,
            "namespace": SYSTEM_NAMESPACE,
            "labels": {"app.kubernetes.io/name": "lb-agent", "app.kubernetes.io/part-of": "meridian"},
            "annotations": {LB_ADDRESS_POOL_ANNOTATION: address_pool(n)},
        },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerIP": address(n).to_string(),
            "selector": {"app.kubernetes.io/name": "lb-agent"},
            "ports": [
                {"name": "http", "port": HTTP_PORT, "protocol": "TCP"},
                {"name": "https", "port": HTTPS_PORT, "protocol": "TCP"},
                {"name": "peer", "port": PEER_PORT, "protocol": "TCP"},
                {"name": "peer-udp", "port": PEER_PORT, "protocol": "UDP"},
                {"name": "dns", "port": DNS_PORT, "protocol": "UDP"},
                {"name": "dns-tcp", "port": DNS_PORT, "protocol": "TCP"},
            ],
        },
    })
}

/// Creates the lb-agent Service in a member unless it exists (its spec is immutable in
/// the parts that matter, so an existing one keeps it and only gets the pool annotation).
pub async fn ensure_service(member: &kube::Client, n: u32) -> anyhow::Result<()> {
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let api: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(member.clone(), SYSTEM_NAMESPACE);
    let svc = serde_json::from_value(service(n))?;
    match api.create(&PostParams::default(), &svc).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch =
                json!({"metadata": {"annotations": {LB_ADDRESS_POOL_ANNOTATION: address_pool(n)}}});
            api.patch(
                LB_AGENT_SERVICE,
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
            .context("annotating the lb-agent Service with its address pool")?;
            Ok(())
        }
        Err(e) => Err(e).context("creating the lb-agent Service"),
    }
}

/// Command-line arguments of the n-th cluster's lb-agent.
pub fn args(n: u32, sim_kubeconfig: &Path) -> Vec<String> {
    let ip = address(n);
    vec![
        format!("--kubeconfig={}", sim_kubeconfig.display()),
        format!("--context=sim-{n}"),
        format!("--cluster=sim-{n}"),
        format!("--bind={ip}"),
        format!("--http-port={HTTP_PORT}"),
        format!("--https-port={HTTPS_PORT}"),
        format!("--peer-port={PEER_PORT}"),
        format!("--dns-port={DNS_PORT}"),
        format!("--metrics-addr={ip}:{METRICS_PORT}"),
    ]
}

/// Checks the local fleet fits the lb-agent address plan.
pub fn check_fleet_size(clusters: u32) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=254).contains(&clusters),
        "--clusters must be between 1 and 254 (lb-agents get 127.0.1.1 to 127.0.1.254)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cluster_gets_its_own_address_and_the_service_asks_for_it() {
        assert_eq!(address(3).to_string(), "127.0.1.3");
        let s = service(3);
        assert_eq!(s["spec"]["loadBalancerIP"], "127.0.1.3");
        assert_eq!(
            s["metadata"]["annotations"][LB_ADDRESS_POOL_ANNOTATION],
            "127.2.3.0/24"
        );
        let names: Vec<&str> = s["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["http", "https", "peer", "peer-udp", "dns", "dns-tcp"]
        );
        assert!(args(3, Path::new("/k")).contains(&"--bind=127.0.1.3".to_string()));
        assert!(check_fleet_size(255).is_err());
        assert!(check_fleet_size(3).is_ok());
    }
}

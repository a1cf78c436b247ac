//! The Service proxy of a `runtime: runc` cluster, what kube-proxy does, in user space: each
//! TCP port of a Service is served on its ClusterIP (an address the host owns on the pods'
//! bridge, see [`ServiceNet`](crate::podnet::ServiceNet)) and on its load-balancer addresses
//! (the cluster's pool), and each connection goes to one of the Service's ready endpoints
//! (`<podIP>:<targetPort>` from its EndpointSlices), taken in turn. A port without ready
//! endpoints refuses connections, as kube-proxy's REJECT rule does.
//!
//! [`routes`] decides from the cached Services and EndpointSlices; [`run`] binds and
//! closes listeners as that changes, following their listings ([`super::services`]).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::services::Listing;
use crate::controllers::endpoints::SERVICE_NAME_LABEL;
use crate::controllers::util::{lock, str_at};

/// Frontend address → the ready endpoints behind it.
pub(crate) type Routes = BTreeMap<SocketAddr, Vec<SocketAddr>>;

/// The addresses of `svc` that take traffic: its ClusterIP and load-balancer ingress IPs.
fn frontends(svc: &Value) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = str_at(svc, "/spec/clusterIP")
        .and_then(|ip| ip.parse().ok())
        .into_iter()
        .collect();
    if str_at(svc, "/spec/type") == Some("LoadBalancer") {
        ips.extend(
            svc.pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| str_at(i, "/ip").and_then(|ip| ip.parse::<IpAddr>().ok())),
        );
    }
    ips
}

/// The ready endpoints of the Service port named `port_name` (`""` for an unnamed port),
/// from the Service's EndpointSlices.
fn backends(slices: &[&Value], port_name: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in slices {
        let Some(port) = slice
            .pointer("/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| str_at(p, "/name").unwrap_or("") == port_name)
            .and_then(|p| p.get("port").and_then(Value::as_u64))
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for ep in slice
            .pointer("/endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // An absent `ready` means ready (the EndpointSlice API's rule).
            if ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            out.extend(
                ep.pointer("/addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                    .take(1)
                    .map(|ip| SocketAddr::new(ip, port)),
            );
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Every TCP frontend of `services` with its ready endpoints in `slices` (headless and
/// ExternalName Services have no frontend).
pub(crate) fn routes(services: &[Value], slices: &[Value]) -> Routes {
    let mut out = Routes::new();
    for svc in services {
        if str_at(svc, "/spec/type") == Some("ExternalName") {
            continue;
        }
        let ns = str_at(svc, "/metadata/namespace").unwrap_or("");
        let name = str_at(svc, "/metadata/name").unwrap_or("");
        let own: Vec<&Value> = slices
            .iter()
            .filter(|s| {
                str_at(s, "/metadata/namespace") == Some(ns)
                    && s.pointer("/metadata/labels")
                        .and_then(|l| l.get(SERVICE_NAME_LABEL))
                        .and_then(Value::as_str)
                        == Some(name)
            })
            .collect();
        let ips = frontends(svc);
        for port in svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if str_at(port, "/protocol").unwrap_or("TCP") != "TCP" {
                continue;
            }
            let Some(number) = port
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            let to = backends(&own, str_at(port, "/name").unwrap_or(""));
            for ip in &ips {
                out.insert(SocketAddr::new(*ip, number), to.clone());
            }
        }
    }
    out
}

/// One bound frontend.
struct Frontend {
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    task: JoinHandle<()>,
}

impl Drop for Frontend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts on `listener` and joins each connection to the next backend in turn.
async fn serve(listener: TcpListener, backends: Arc<Mutex<Vec<SocketAddr>>>) {
    let next = AtomicUsize::new(0);
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let to = {
            let b = lock(&backends);
            (!b.is_empty()).then(|| b[next.fetch_add(1, Ordering::Relaxed) % b.len()])
        };
        // No ready endpoint: the connection is closed at once (kube-proxy rejects it).
        let Some(to) = to else { continue };
        tokio::spawn(async move {
            match TcpStream::connect(to).await {
                Ok(mut server) => {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
                Err(e) => tracing::debug!(backend = %to, error = %e, "service backend refused"),
            }
        });
    }
}

/// Binds, updates and closes the frontends of one cluster so they match [`routes`] of each
/// listing of its Services and EndpointSlices.
pub(crate) async fn run(mut listings: watch::Receiver<Arc<Listing>>) {
    let mut bound: HashMap<SocketAddr, Frontend> = HashMap::new();
    while listings.changed().await.is_ok() {
        let listing = listings.borrow_and_update().clone();
        let want = routes(&listing.services, &listing.slices);
        bound.retain(|addr, _| want.contains_key(addr));
        for (addr, to) in want {
            if let Some(f) = bound.get(&addr) {
                *lock(&f.backends) = to;
                continue;
            }
            match TcpListener::bind(addr).await {
                Ok(listener) => {
                    let backends = Arc::new(Mutex::new(to));
                    let task = tokio::spawn(serve(listener, backends.clone()));
                    bound.insert(addr, Frontend { backends, task });
                }
                Err(e) => {
                    tracing::warn!(address = %addr, error = %e, "cannot serve a Service address");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn slice(svc: &str, port_name: &str, port: u16, endpoints: Value) -> Value {
        json!({"metadata": {"namespace": "ns", "labels": {SERVICE_NAME_LABEL: svc}},
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            "endpoints": endpoints})
    }

    #[test]
    fn routes_go_to_ready_endpoints_of_each_port() {
        let services = vec![
            json!({"metadata": {"namespace": "ns", "name": "api"},
                "spec": {"type": "LoadBalancer", "clusterIP": "127.1.0.1",
                    "ports": [{"name": "https", "port": 443, "targetPort": "https"},
                              {"name": "dns", "port": 53, "protocol": "UDP"}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "127.200.0.10"}]}}}),
            json!({"metadata": {"namespace": "ns", "name": "metrics"},
                "spec": {"clusterIP": "127.1.0.2", "ports": [{"port": 8080}]}}),
            json!({"metadata": {"namespace": "ns", "name": "headless"},
                "spec": {"clusterIP": "None", "ports": [{"port": 80}]}}),
            json!({"metadata": {"namespace": "ns", "name": "ext"},
                "spec": {"type": "ExternalName", "externalName": "example.com"}}),
        ];
        let slices = vec![
            slice(
                "api",
                "https",
                6443,
                json!([
                    {"addresses": ["127.10.0.3"], "conditions": {"ready": true}},
                    {"addresses": ["127.10.0.4"], "conditions": {"ready": false}},
                    {"addresses": ["127.10.0.2"]},
                ]),
            ),
            // Another namespace's slice of the same name is not this Service's.
            json!({"metadata": {"namespace": "other", "labels": {SERVICE_NAME_LABEL: "api"}},
                "ports": [{"name": "https", "port": 1}],
                "endpoints": [{"addresses": ["127.10.0.9"]}]}),
            slice("metrics", "", 8081, json!([{"addresses": ["127.10.0.5"]}])),
        ];
        let r = routes(&services, &slices);
        let api = vec![addr("127.10.0.2:6443"), addr("127.10.0.3:6443")];
        assert_eq!(
            r,
            Routes::from([
                (addr("127.1.0.1:443"), api.clone()),
                (addr("127.200.0.10:443"), api),
                (addr("127.1.0.2:8080"), vec![addr("127.10.0.5:8081")]),
            ])
        );
    }

    #[test]
    fn a_port_without_ready_endpoints_is_still_served() {
        let services = vec![json!({"metadata": {"namespace": "ns", "name": "a"},
            "spec": {"clusterIP": "127.1.0.1", "ports": [{"port": 80}]}})];
        let r = routes(&services, &[]);
        assert_eq!(r, Routes::from([(addr("127.1.0.1:80"), vec![])]));
    }
}

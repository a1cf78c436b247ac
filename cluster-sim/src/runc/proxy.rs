//! The Service proxy of a `runtime: runc` cluster, what kube-proxy does, in user space: each
//! TCP and UDP port of a Service is served on its ClusterIP (an address the host owns on the
//! pods' bridge, see [`ServiceNet`](crate::podnet::ServiceNet)) and on its load-balancer
//! addresses (the cluster's pool), and each connection goes to one of the Service's ready
//! endpoints (`<podIP>:<targetPort>` from its EndpointSlices), taken in turn. A TCP port
//! without ready endpoints refuses connections, as kube-proxy's REJECT rule does (a UDP one
//! drops datagrams).
//!
//! UDP has no connections: as kube-proxy's conntrack entries do, each client address is a
//! flow with its own upstream socket to the endpoint chosen for its first datagram, and the
//! endpoint's replies go back to the client from the frontend address; a flow quiet both
//! ways for [`UDP_IDLE`] is forgotten, so the client's next datagram may go elsewhere.
//!
//! [`routes`] decides from the cached Services and EndpointSlices; [`run`] binds and
//! closes listeners as that changes, following their listings ([`super::services`]).

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::services::{Listing, slices_of};
use crate::controllers::util::{lock, str_at};

/// How long a UDP flow lives without a datagram either way (kube-proxy's conntrack keeps a
/// UDP entry 30 seconds).
pub(crate) const UDP_IDLE: Duration = Duration::from_secs(30);

/// The transport of a Service port the proxy serves (SCTP is not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Protocol {
    /// TCP: connections joined to an endpoint.
    Tcp,
    /// UDP: datagrams relayed per client flow.
    Udp,
}

/// (protocol, frontend address) → the ready endpoints behind it.
pub(crate) type Routes = BTreeMap<(Protocol, SocketAddr), Vec<SocketAddr>>;

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

/// Every TCP and UDP frontend of `services` with its ready endpoints in `slices` (headless
/// and ExternalName Services have no frontend).
pub(crate) fn routes(services: &[Value], slices: &[Value]) -> Routes {
    let mut out = Routes::new();
    for svc in services {
        if str_at(svc, "/spec/type") == Some("ExternalName") {
            continue;
        }
        let ns = str_at(svc, "/metadata/namespace").unwrap_or("");
        let name = str_at(svc, "/metadata/name").unwrap_or("");
        let own = slices_of(slices, ns, name);
        let ips = frontends(svc);
        for port in svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let protocol = match str_at(port, "/protocol").unwrap_or("TCP") {
                "TCP" => Protocol::Tcp,
                "UDP" => Protocol::Udp,
                _ => continue,
            };
            let Some(number) = port
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            let to = backends(&own, str_at(port, "/name").unwrap_or(""));
            for ip in &ips {
                out.insert((protocol, SocketAddr::new(*ip, number)), to.clone());
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

/// The next backend in turn, if there is any.
fn pick(backends: &Mutex<Vec<SocketAddr>>, next: &AtomicUsize) -> Option<SocketAddr> {
    let b = lock(backends);
    (!b.is_empty()).then(|| b[next.fetch_add(1, Ordering::Relaxed) % b.len()])
}

/// Accepts on `listener` and joins each connection to the next backend in turn.
async fn serve(listener: TcpListener, backends: Arc<Mutex<Vec<SocketAddr>>>) {
    let next = AtomicUsize::new(0);
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let to = pick(&backends, &next);
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

/// One client's UDP flow: its upstream socket (connected to the endpoint) and when a
/// datagram last went either way.
#[derive(Clone)]
struct Flow {
    upstream: Arc<UdpSocket>,
    last: Arc<Mutex<Instant>>,
}

type Flows = Arc<Mutex<HashMap<SocketAddr, Flow>>>;

/// Relays the datagrams arriving on `frontend`: each client's to the backend its flow chose,
/// the backend's replies back to the client; flows end after `idle` without traffic.
async fn serve_udp(frontend: UdpSocket, backends: Arc<Mutex<Vec<SocketAddr>>>, idle: Duration) {
    let frontend = Arc::new(frontend);
    let flows: Flows = Arc::default();
    let next = AtomicUsize::new(0);
    let mut buf = vec![0u8; 65_535];
    loop {
        let Ok((len, client)) = frontend.recv_from(&mut buf).await else {
            continue;
        };
        let existing = lock(&flows).get(&client).cloned();
        let flow = match existing {
            Some(f) => f,
            // No ready endpoint: the datagram is dropped.
            None => match open_flow(&backends, &next).await {
                Some(f) => {
                    lock(&flows).insert(client, f.clone());
                    tokio::spawn(relay_back(
                        f.clone(),
                        frontend.clone(),
                        client,
                        flows.clone(),
                        idle,
                    ));
                    f
                }
                None => continue,
            },
        };
        *lock(&flow.last) = Instant::now();
        if let Err(e) = flow.upstream.send(&buf[..len]).await {
            tracing::debug!(client = %client, error = %e, "cannot relay a datagram");
        }
    }
}

/// An upstream socket connected to the next backend.
async fn open_flow(backends: &Mutex<Vec<SocketAddr>>, next: &AtomicUsize) -> Option<Flow> {
    let to = pick(backends, next)?;
    let any: SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let upstream = UdpSocket::bind(any).await.ok()?;
    upstream.connect(to).await.ok()?;
    Some(Flow {
        upstream: Arc::new(upstream),
        last: Arc::new(Mutex::new(Instant::now())),
    })
}

/// Sends the backend's replies of `flow` to `client` until the flow has been idle for
/// `idle` (or the backend refused), then forgets it.
async fn relay_back(
    flow: Flow,
    frontend: Arc<UdpSocket>,
    client: SocketAddr,
    flows: Flows,
    idle: Duration,
) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let deadline = *lock(&flow.last) + idle;
        match tokio::time::timeout_at(deadline, flow.upstream.recv(&mut buf)).await {
            Ok(Ok(n)) => {
                *lock(&flow.last) = Instant::now();
                let _ = frontend.send_to(&buf[..n], client).await;
            }
            // A datagram from the client moved the deadline on meanwhile.
            Err(_) if *lock(&flow.last) + idle > Instant::now() => {}
            _ => break,
        }
    }
    let mut f = lock(&flows);
    if f.get(&client)
        .is_some_and(|current| Arc::ptr_eq(&current.upstream, &flow.upstream))
    {
        f.remove(&client);
    }
}

/// Binds, updates and closes the frontends of one cluster so they match [`routes`] of each
/// listing of its Services and EndpointSlices.
pub(crate) async fn run(mut listings: watch::Receiver<Arc<Listing>>) {
    let mut bound: HashMap<(Protocol, SocketAddr), Frontend> = HashMap::new();
    while listings.changed().await.is_ok() {
        let listing = listings.borrow_and_update().clone();
        let want = routes(&listing.services, &listing.slices);
        bound.retain(|addr, _| want.contains_key(addr));
        for (key, to) in want {
            if let Some(f) = bound.get(&key) {
                *lock(&f.backends) = to;
                continue;
            }
            let (protocol, addr) = key;
            let backends = Arc::new(Mutex::new(to));
            let task = match protocol {
                Protocol::Tcp => TcpListener::bind(addr)
                    .await
                    .map(|l| tokio::spawn(serve(l, backends.clone()))),
                Protocol::Udp => UdpSocket::bind(addr)
                    .await
                    .map(|s| tokio::spawn(serve_udp(s, backends.clone(), UDP_IDLE))),
            };
            match task {
                Ok(task) => {
                    bound.insert(key, Frontend { backends, task });
                }
                Err(e) => {
                    tracing::warn!(address = %addr, ?protocol, error = %e, "cannot serve a Service address");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controllers::endpoints::SERVICE_NAME_LABEL;

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
        use Protocol::{Tcp, Udp};
        assert_eq!(
            r,
            Routes::from([
                ((Tcp, addr("127.1.0.1:443")), api.clone()),
                ((Tcp, addr("127.200.0.10:443")), api),
                ((Udp, addr("127.1.0.1:53")), vec![]),
                ((Udp, addr("127.200.0.10:53")), vec![]),
                ((Tcp, addr("127.1.0.2:8080")), vec![addr("127.10.0.5:8081")]),
            ])
        );
    }

    #[test]
    fn a_port_without_ready_endpoints_is_still_served() {
        let services = vec![json!({"metadata": {"namespace": "ns", "name": "a"},
            "spec": {"clusterIP": "127.1.0.1", "ports": [{"port": 80}]}})];
        let r = routes(&services, &[]);
        assert_eq!(
            r,
            Routes::from([((Protocol::Tcp, addr("127.1.0.1:80")), vec![])])
        );
    }

    /// A UDP echo server: (its address, the source addresses it saw, in order).
    async fn echo() -> (SocketAddr, Arc<Mutex<Vec<SocketAddr>>>) {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let at = socket.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1500];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                log.lock().unwrap().push(from);
                let _ = socket.send_to(&buf[..n], from).await;
            }
        });
        (at, seen)
    }

    async fn roundtrip(client: &UdpSocket, to: SocketAddr, data: &[u8]) -> Vec<u8> {
        client.send_to(data, to).await.unwrap();
        let mut buf = [0u8; 1500];
        let (n, from) = tokio::time::timeout(Duration::from_secs(5), client.recv_from(&mut buf))
            .await
            .expect("a reply")
            .unwrap();
        assert_eq!(from, to, "the reply comes from the frontend address");
        buf[..n].to_vec()
    }

    #[tokio::test]
    async fn udp_flows_keep_their_backend_until_idle() {
        let (a, seen_a) = echo().await;
        let (b, seen_b) = echo().await;
        let frontend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let front = frontend.local_addr().unwrap();
        // Long enough that a loaded machine does not idle a flow out between two
        // datagrams of this test.
        let idle = Duration::from_secs(1);
        tokio::spawn(serve_udp(frontend, Arc::new(Mutex::new(vec![a, b])), idle));
        let one = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let two = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        // One flow per client, each to the next backend, its datagrams all to that one.
        assert_eq!(roundtrip(&one, front, b"1a").await, b"1a");
        assert_eq!(roundtrip(&two, front, b"2a").await, b"2a");
        assert_eq!(roundtrip(&one, front, b"1b").await, b"1b");
        let (sa, sb) = (
            seen_a.lock().unwrap().clone(),
            seen_b.lock().unwrap().clone(),
        );
        assert_eq!(sa.len(), 2, "client one's datagrams: {sa:?}");
        assert_eq!(sa[0], sa[1], "one upstream socket per flow");
        assert_eq!(sb.len(), 1);
        // Quiet past the idle time: the flow is forgotten, and the next datagram opens a
        // new one, to the next backend in turn.
        tokio::time::sleep(idle * 5 / 2).await;
        assert_eq!(roundtrip(&one, front, b"1c").await, b"1c");
        assert_eq!(
            seen_a.lock().unwrap().len() + seen_b.lock().unwrap().len(),
            4
        );
        assert_eq!(seen_a.lock().unwrap().len(), 3);
        assert_ne!(seen_a.lock().unwrap()[2], sa[0], "a new upstream socket");
    }

    #[tokio::test]
    async fn udp_without_backends_drops_datagrams() {
        let frontend = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let front = frontend.local_addr().unwrap();
        let backends = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(serve_udp(frontend, backends.clone(), UDP_IDLE));
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(b"x", front).await.unwrap();
        let mut buf = [0u8; 16];
        assert!(
            tokio::time::timeout(Duration::from_millis(300), client.recv_from(&mut buf))
                .await
                .is_err()
        );
        // An endpoint turns ready: the next datagram reaches it.
        let (a, _) = echo().await;
        *backends.lock().unwrap() = vec![a];
        assert_eq!(roundtrip(&client, front, b"y").await, b"y");
    }
}

//! The container runtime behind `--serve-pods`: every Running and Ready pod listens on its
//! address at each `containerPort` of its containers: TCP ports answer HTTP (over TLS when
//! named `https`, `https-*`, `tls` or `tls-*`; see [`super::responder`]), UDP ports echo
//! datagrams behind a line naming the pod.
//!
//! The kubelet starts a pod's listeners *before* it writes `Ready=True`, so a Ready pod in
//! the API is always listening. This loop follows the API afterwards: a pod that stops being
//! Ready or Running, starts terminating or is deleted has its listeners closed and its open
//! connections dropped (after the API says so, as with a real pod). While the cluster is
//! `down`, flapping down or partitioned every listener is closed, and reopened when the
//! fault clears. `pod-fail` makes one pod answer a fixed status or refuse connections.
//!
//! In a `runtime: runc` cluster only the pods the kubelet simulates serve here (those runc
//! runs listen in their own network namespaces). Their addresses are the sandbox scheme's,
//! which no host interface holds: each is given to the host (a `/32` on the runtime's
//! bridge, [`crate::runc::net::add_host_address`]) before its ports are bound, and taken
//! back when the pod stops serving, so the cluster's runc pods and the host reach it.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::net::{TcpListener, TcpSocket, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::responder::{self, Behaviour, Identity};
use super::util::{self, condition_true, lock, str_at};
use super::{Reconciler, Requeue, Seen, Sim, SimError, WorkQueue, split_key};
use crate::faults::{Fault, Faults};
use tokio_rustls::TlsAcceptor;

/// How a pod's server misbehaves on request (`cluster-sim ctl pod-fail`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailMode {
    /// Answer every request with this status.
    Status(u16),
    /// Close the listeners: connections are refused while the pod stays Ready in the API.
    Refuse,
}

/// What a pod's port speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum PortKind {
    /// HTTP/1.1 and h2c.
    Http,
    /// HTTP/1.1 and h2 over TLS.
    Tls,
    /// A UDP echo.
    Udp,
}

impl PortKind {
    fn of(protocol: &str, name: &str) -> Option<Self> {
        let tls = ["https", "tls"]
            .iter()
            .any(|p| name == *p || name.strip_prefix(p).is_some_and(|r| r.starts_with('-')));
        match protocol {
            "TCP" if tls => Some(PortKind::Tls),
            "TCP" => Some(PortKind::Http),
            "UDP" => Some(PortKind::Udp),
            _ => None,
        }
    }
}

/// Where one pod serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodAddress {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) ip: Ipv4Addr,
    /// Container ports (TCP and UDP), sorted, without duplicates.
    pub(crate) ports: Vec<(u16, PortKind)>,
}

impl PodAddress {
    /// The address of `pod` at `ip`, or `None` if it has no TCP or UDP container port.
    pub(crate) fn of(pod: &Value, ip: &str) -> Option<Self> {
        let ip: Ipv4Addr = ip.parse().ok()?;
        let mut ports: Vec<(u16, PortKind)> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("ports").and_then(Value::as_array))
            .flatten()
            .filter_map(|p| {
                let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                let name = p.get("name").and_then(Value::as_str).unwrap_or("");
                let port = p.get("containerPort").and_then(Value::as_u64)?;
                let port = u16::try_from(port).ok().filter(|p| *p != 0)?;
                Some((port, PortKind::of(protocol, name)?))
            })
            .collect();
        ports.sort_unstable();
        ports.dedup();
        if ports.is_empty() {
            return None;
        }
        Some(Self {
            namespace: str_at(pod, "/metadata/namespace").unwrap_or("").to_string(),
            name: str_at(pod, "/metadata/name").unwrap_or("").to_string(),
            ip,
            ports,
        })
    }
}

/// One pod's server.
struct Served {
    address: PodAddress,
    /// The pod's resourceVersion when the kubelet started it: views of the pod no newer than
    /// this predate the kubelet's `Ready` write, so they must not stop it.
    intent_rv: u64,
    identity: Arc<Identity>,
    behaviour: Arc<Behaviour>,
    /// Accept loops, one per port; empty while not listening.
    listeners: Vec<JoinHandle<()>>,
    /// Bumped when the listeners close, ending the connections they accepted.
    generation: watch::Sender<u64>,
}

impl Served {
    fn new(cluster: &str, address: PodAddress) -> Self {
        Self {
            identity: Arc::new(Identity {
                cluster: cluster.to_string(),
                namespace: address.namespace.clone(),
                pod: address.name.clone(),
            }),
            address,
            intent_rv: 0,
            behaviour: Arc::default(),
            listeners: Vec::new(),
            generation: watch::channel(0).0,
        }
    }

    /// Binds every port (all or none) and starts serving, unless already listening.
    fn listen(&mut self, faults: &Faults, tls: &dyn Fn() -> Option<TlsAcceptor>) -> io::Result<()> {
        if !self.listeners.is_empty() {
            return Ok(());
        }
        let sockets = self
            .address
            .ports
            .iter()
            .map(|&(port, kind)| {
                let addr = SocketAddr::new(self.address.ip.into(), port);
                Ok(match kind {
                    PortKind::Udp => Socket::Udp(bind_udp(addr)?),
                    PortKind::Http => Socket::Tcp(bind(addr)?, None),
                    PortKind::Tls => Socket::Tcp(
                        bind(addr)?,
                        Some(tls().ok_or_else(|| io::Error::other("no TLS certificate"))?),
                    ),
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        self.listeners = sockets
            .into_iter()
            .map(|s| match s {
                Socket::Tcp(l, tls) => responder::spawn(
                    l,
                    self.identity.clone(),
                    self.behaviour.clone(),
                    faults.clone(),
                    self.generation.subscribe(),
                    tls,
                ),
                Socket::Udp(u) => tokio::spawn(udp_echo(u, self.identity.clone())),
            })
            .collect();
        Ok(())
    }

    /// Stops accepting and drops open connections; the returned tasks end (and release
    /// their sockets) once awaited.
    fn close(&mut self) -> Vec<JoinHandle<()>> {
        if self.listeners.is_empty() {
            return Vec::new();
        }
        self.generation.send_modify(|g| *g += 1);
        let handles = std::mem::take(&mut self.listeners);
        for h in &handles {
            h.abort();
        }
        handles
    }
}

/// A bound port of a pod.
enum Socket {
    Tcp(TcpListener, Option<TlsAcceptor>),
    Udp(UdpSocket),
}

fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("binding udp {addr}: {e}")))?;
    socket.set_nonblocking(true)?;
    UdpSocket::from_std(socket)
}

/// Echoes each datagram back behind a line naming the pod: `<cluster> <ns>/<pod>\n<data>`.
async fn udp_echo(socket: UdpSocket, id: Arc<Identity>) {
    let mut buf = vec![0u8; 65_535];
    let prefix = format!("{} {}/{}\n", id.cluster, id.namespace, id.pod);
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let mut out = prefix.clone().into_bytes();
        out.extend_from_slice(&buf[..n]);
        let _ = socket.send_to(&out, peer).await;
    }
}

/// Binds with SO_REUSEADDR, so a pod restarted on the same address is not held off by
/// connections of its previous life in TIME_WAIT.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket
        .bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
    socket.listen(1024)
}

/// Waits until aborted accept loops are gone, so their ports are free again.
async fn join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

#[derive(Default)]
struct State {
    /// The fleet stopped: nothing listens any more.
    shut_down: bool,
    /// Pod key → its server (listening or not).
    served: HashMap<String, Served>,
    /// Pod key → how it fails.
    failing: HashMap<String, FailMode>,
}

/// The pod servers of one cluster.
pub struct Containers {
    cluster: String,
    faults: Faults,
    /// The cluster's pod serving certificate, made when a TLS port first needs it.
    tls: std::sync::OnceLock<Option<TlsAcceptor>>,
    /// Whether every listener is closed for the cluster's fault (set once they are).
    suspension: watch::Sender<bool>,
    state: Mutex<State>,
    queue: Arc<WorkQueue<String>>,
    /// Set in a runc cluster, where pod addresses are given to the host while served: held
    /// across a pod's start or stop, so that an address another pod starts on is never
    /// taken back underneath it.
    host_addresses: Option<tokio::sync::Mutex<()>>,
}

impl Containers {
    /// The servers of cluster `cluster`, obeying its fault switch; `sandbox`: the cluster's
    /// pods are addressed by the sandbox scheme (a runc cluster), whose addresses the host
    /// takes while they are served.
    pub(crate) fn new(cluster: &str, faults: Faults, sandbox: bool) -> Self {
        Self {
            cluster: cluster.to_string(),
            faults,
            tls: std::sync::OnceLock::new(),
            suspension: watch::channel(false).0,
            state: Mutex::default(),
            queue: Arc::new(WorkQueue::default()),
            host_addresses: sandbox.then(tokio::sync::Mutex::default),
        }
    }

    /// Gives `ip` to the host, in a runc cluster.
    async fn claim_address(&self, ip: Ipv4Addr) -> io::Result<()> {
        if self.host_addresses.is_none() {
            return Ok(());
        }
        crate::runc::net::add_host_address(ip)
            .await
            .map_err(|e| io::Error::other(format!("giving {ip} to the host: {e}")))
    }

    /// Takes `ip` back from the host, in a runc cluster, unless a pod still serves on it.
    async fn release_address(&self, ip: Ipv4Addr) {
        if self.host_addresses.is_none() || address_in_use(&lock(&self.state).served, ip) {
            return;
        }
        crate::runc::net::remove_host_address(ip).await;
    }

    /// Whether the cluster's fault keeps every pod from listening.
    fn suspended(&self) -> bool {
        self.faults.down_now().0 || self.faults.current() == Fault::Partitioned
    }

    /// Waits until the fault watch has applied `suspended` to every pod: all listeners
    /// closed (`true`), or reopening handed to the worker (`false`).
    pub(crate) async fn suspension_applied(&self, suspended: bool) {
        let _ = self
            .suspension
            .subscribe()
            .wait_for(|s| *s == suspended)
            .await;
    }

    /// Closes every listener at once (the cluster went down or was partitioned).
    async fn suspend_all(&self) {
        let closing: Vec<JoinHandle<()>> = lock(&self.state)
            .served
            .values_mut()
            .flat_map(Served::close)
            .collect();
        join(closing).await;
    }

    /// Makes `ns/name` fail as `mode` (`None`: heal it). Takes effect at once.
    pub fn set_failure(&self, key: &str, mode: Option<FailMode>) {
        let mut st = lock(&self.state);
        match mode {
            Some(m) => st.failing.insert(key.to_string(), m),
            None => st.failing.remove(key),
        };
        drop(st);
        self.queue.add(key.to_string());
    }

    /// The addresses `ns/name` listens on right now (empty if none).
    pub fn listening(&self, key: &str) -> Vec<SocketAddr> {
        let st = lock(&self.state);
        match st.served.get(key) {
            Some(s) if !s.listeners.is_empty() => s
                .address
                .ports
                .iter()
                .map(|(p, _)| SocketAddr::new(s.address.ip.into(), *p))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Starts a pod the kubelet is about to report Ready (its view of the pod was at `rv`).
    pub(crate) async fn start(&self, key: &str, address: PodAddress, rv: u64) -> io::Result<()> {
        self.serve(key, address, Some(rv)).await
    }

    /// Serves `key` at `address`, listening unless faulted or refusing.
    async fn serve(&self, key: &str, address: PodAddress, intent: Option<u64>) -> io::Result<()> {
        let _addresses = match &self.host_addresses {
            Some(m) => Some(m.lock().await),
            None => None,
        };
        // A pod that moved (new address or ports) is a new process: the old one goes first.
        let (moved, old_ip) = {
            let mut st = lock(&self.state);
            match st.served.get(key) {
                Some(s) if s.address != address => st
                    .served
                    .remove(key)
                    .map(|mut s| (s.close(), Some(s.address.ip)))
                    .unwrap_or_default(),
                _ => (Vec::new(), None),
            }
        };
        join(moved).await;
        if let Some(old) = old_ip.filter(|ip| *ip != address.ip) {
            self.release_address(old).await;
        }
        self.claim_address(address.ip).await?;
        let suspended = self.suspended();
        let (result, closing) = {
            let mut st = lock(&self.state);
            let fail = st.failing.get(key).copied();
            let shut_down = st.shut_down;
            let s = st
                .served
                .entry(key.to_string())
                .or_insert_with(|| Served::new(&self.cluster, address));
            if let Some(rv) = intent {
                s.intent_rv = s.intent_rv.max(rv);
            }
            let status = match fail {
                Some(FailMode::Status(code)) => code,
                _ => 0,
            };
            s.behaviour
                .fail_status
                .store(status, std::sync::atomic::Ordering::Relaxed);
            if suspended || shut_down || fail == Some(FailMode::Refuse) {
                (Ok(()), s.close())
            } else {
                let tls = || {
                    self.tls
                        .get_or_init(|| responder::tls_acceptor(&self.cluster))
                        .clone()
                };
                (s.listen(&self.faults, &tls), Vec::new())
            }
        };
        join(closing).await;
        result
    }

    /// Stops `key`: it is gone (`rv` `None`), or its view at `rv` says it must not serve —
    /// unless that view predates the kubelet starting it.
    async fn stop(&self, key: &str, rv: Option<u64>) {
        let _addresses = match &self.host_addresses {
            Some(m) => Some(m.lock().await),
            None => None,
        };
        let (closing, ip) = {
            let mut st = lock(&self.state);
            if rv.is_none() {
                st.failing.remove(key);
            }
            match (st.served.get(key), rv) {
                (None, _) => return,
                (Some(s), Some(rv)) if rv <= s.intent_rv => return,
                _ => match st.served.remove(key) {
                    Some(mut s) => (s.close(), s.address.ip),
                    None => return,
                },
            }
        };
        join(closing).await;
        self.release_address(ip).await;
    }

    /// Closes every listener and connection for good (the fleet is stopping).
    pub fn shut_down(&self) {
        let mut st = lock(&self.state);
        st.shut_down = true;
        for s in st.served.values_mut() {
            s.close();
        }
    }

    fn keys(&self) -> Vec<String> {
        lock(&self.state).served.keys().cloned().collect()
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for s in lock(&self.state).served.values_mut() {
            s.close();
        }
    }
}

/// Whether a pod of `served` (listening or not) has the address `ip`.
fn address_in_use(served: &HashMap<String, Served>, ip: Ipv4Addr) -> bool {
    served.values().any(|s| s.address.ip == ip)
}

/// The address a pod serves at if the API says it runs and is Ready.
fn servable(pod: &Value) -> Option<PodAddress> {
    if util::is_deleting(pod)
        || str_at(pod, "/status/phase") != Some("Running")
        || !condition_true(pod, "Ready")
    {
        return None;
    }
    PodAddress::of(pod, str_at(pod, "/status/podIP")?)
}

/// A live pod the kubelet has not reported running yet.
fn not_started(pod: &Value) -> bool {
    !util::is_deleting(pod)
        && matches!(str_at(pod, "/status/phase"), None | Some("Pending"))
        && str_at(pod, "/status/podIP").is_none()
}

struct ContainerLoop {
    sim: Arc<Sim>,
    rt: Arc<Containers>,
}

impl Reconciler<String> for ContainerLoop {
    const NAME: &'static str = "containers";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let def = &self.sim.kinds.pods;
        let (ns, name) = split_key(key);
        let Some(cached) = self.sim.cache(def).get(&def.key(ns, name)) else {
            self.rt.stop(key, None).await;
            return Ok(Requeue::No);
        };
        // Runc runs this pod: it listens in its own network namespace, not here.
        if let Some(rt) = &self.sim.runc
            && rt.supervises(key, &cached.uid).is_some()
        {
            return Ok(Requeue::No);
        }
        let pod = cached.value();
        match servable(&pod) {
            Some(address) => self
                .rt
                .serve(key, address, None)
                .await
                .map_err(|e| SimError::Invalid(format!("pod {key}: {e}")))?,
            // Not started in the API yet: the kubelet starts listeners just before it writes
            // Running/Ready, so a still-pending view (whatever its resourceVersion — other
            // writers touch the pod too) must not stop what the kubelet started.
            None if not_started(&pod) => {}
            None => self.rt.stop(key, Some(cached.rv)).await,
        }
        Ok(Requeue::No)
    }
}

/// Spawns the pod watch, the fault watch and the worker of one cluster's container runtime.
pub(crate) fn spawn(sim: Arc<Sim>, rt: Arc<Containers>) -> Vec<JoinHandle<()>> {
    let queue = rt.queue.clone();
    let (a, b) = (rt.clone(), rt.clone());
    let q = queue.clone();
    let pods = super::spawn_watch(sim.cache(&sim.kinds.pods), move |seen| match seen {
        Seen::Reset => {}
        // After a re-list, deletions missed while lagging show up as absences.
        Seen::Synced => a.keys().into_iter().for_each(|k| q.add(k)),
        Seen::Upsert { obj, .. } | Seen::Deleted { obj } => {
            q.add(super::ns_key(obj.namespace(), obj.name()));
        }
    });
    let q = queue.clone();
    let faults = tokio::spawn(async move {
        let mut changes = b.faults.subscribe();
        let mut was = b.suspended();
        loop {
            // Flapping changes phase on a timer, not through the switch.
            let (_, next) = b.faults.down_now();
            let wake = async move {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                () = wake => {}
            }
            let now = b.suspended();
            if now != was {
                was = now;
                // Closing is immediate; reopening goes through the worker, which retries
                // an address still held by a closing listener.
                if now {
                    b.suspend_all().await;
                }
                b.keys().into_iter().for_each(|k| q.add(k));
                b.suspension.send_replace(now);
            }
        }
    });
    vec![
        pods,
        faults,
        super::spawn_worker(sim.clone(), queue, Arc::new(ContainerLoop { sim, rt })),
    ]
}

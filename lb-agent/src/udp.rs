//! The UDP proxy: datagrams from one client address form a flow, pinned to one backend
//! chosen by policy (local endpoints first, remote agents second) until it idles out or its
//! backend stops being available; answers come back to the client from the address it
//! wrote to. Remote agents get each datagram on their peer port behind a one-line
//! `MERIDIAN/1 UDP` preamble and answer from their peer port with one status byte first:
//! [`ANSWER`] and their endpoint's datagram, or [`UNSERVED`] when they have no endpoint for
//! it — then the client's next datagram goes to another cluster.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::agent::{BindKey, Shared};
use crate::backend::{Backend, InFlight, now_ms};
use crate::balance::{Tried, failed, pick};
use crate::table::{PortRoute, Proto};

/// Largest datagram relayed.
const MAX_DATAGRAM: usize = 65_535;
/// Status byte of a peer answer carrying the endpoint's datagram after it.
pub const ANSWER: u8 = 0;
/// Status byte of a peer answer saying no local endpoint took the datagram.
pub const UNSERVED: u8 = 1;

/// UDP flow settings.
#[derive(Clone, Copy, Debug)]
pub struct UdpSettings {
    /// A flow with no datagram either way for this long is closed.
    pub idle_timeout: Duration,
    /// Most flows per socket; datagrams of further clients are dropped.
    pub max_flows: usize,
}

impl Default for UdpSettings {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(60),
            max_flows: 16_384,
        }
    }
}

/// Where a socket's datagrams come from.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// A listen port or dedicated address: the route is the one bound there.
    Bind(BindKey),
    /// The peer port: the route is named by each datagram's preamble; local only.
    Peer,
}

/// The peer-protocol preamble of a datagram for a remote agent.
pub fn preamble(route: &PortRoute, from: &str) -> String {
    format!(
        "MERIDIAN/1 UDP {} {} {} {}\n",
        route.namespace, route.service, route.port.port, from
    )
}

struct Flow {
    route: Arc<PortRoute>,
    backend: Arc<Backend>,
    upstream: Arc<UdpSocket>,
    /// Prepended to each datagram (remote agents).
    preamble: Option<Vec<u8>>,
    /// Last datagram either way, ms of [`now_ms`].
    last: Arc<AtomicU64>,
    /// The remote agent answered [`UNSERVED`]: the next datagram goes elsewhere.
    unserved: Arc<AtomicBool>,
    reader: JoinHandle<()>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

type Flows = Arc<Mutex<HashMap<SocketAddr, Flow>>>;

/// One receiving socket with its flows: what its receive loop and every flow's reader task
/// work with. Cloning it clones three `Arc`s.
#[derive(Clone)]
struct Port {
    shared: Arc<Shared>,
    socket: Arc<UdpSocket>,
    flows: Flows,
}

fn lock(flows: &Flows) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Flow>> {
    flows.lock().unwrap_or_else(|e| e.into_inner())
}

/// Relays datagrams arriving on `socket` until the task is dropped.
pub async fn serve(socket: UdpSocket, shared: Arc<Shared>, source: Source) {
    let port = Port {
        shared,
        socket: Arc::new(socket),
        flows: Arc::default(),
    };
    let (shared, socket) = (&port.shared, &port.socket);
    let sweeper = tokio::spawn(sweep(port.flows.clone(), shared.settings.udp.idle_timeout));
    let _sweeper = AbortOnDrop(sweeper);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, client) = match socket.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(error) => {
                // Per-datagram errors (ICMP feedback): never fatal.
                tracing::debug!(%error, "udp receive");
                tokio::task::yield_now().await;
                continue;
            }
        };
        let (route, payload, local_only) = match source {
            Source::Bind(key) => {
                let route = shared.table.borrow().route_for_bind(key).cloned();
                (route, &buf[..n], false)
            }
            Source::Peer => match split_preamble(&buf[..n]) {
                Some((ns, svc, port, payload)) => {
                    let route = shared.table.borrow().route_for_peer(ns, svc, port).cloned();
                    (route, payload, true)
                }
                None => (None, &[][..], true),
            },
        };
        let peer = matches!(source, Source::Peer);
        let Some(route) = route.filter(|r| r.proto == Proto::Udp) else {
            shared.metrics.udp_dropped.inc();
            if peer {
                let _ = socket.send_to(&[UNSERVED], client).await;
            }
            continue;
        };
        let target = Target {
            client,
            local_only,
            peer,
        };
        if let Err(error) = relay(&port, target, &route, payload).await {
            shared.metrics.udp_dropped.inc();
            tracing::debug!(%client, %error, "udp datagram dropped");
            if peer {
                // The sending agent tries another cluster with the client's next datagram.
                let _ = socket.send_to(&[UNSERVED], client).await;
            }
        }
    }
}

/// `(namespace, service, port, payload)` of a peer datagram.
fn split_preamble(d: &[u8]) -> Option<(&str, &str, &str, &[u8])> {
    let end = d.iter().take(1024).position(|b| *b == b'\n')?;
    let line = std::str::from_utf8(&d[..end]).ok()?;
    match crate::peer::parse(line)? {
        crate::peer::Request::Udp {
            namespace,
            service,
            port,
            ..
        } => Some((namespace, service, port, &d[end + 1..])),
        _ => None,
    }
}

/// Who a flow answers and how it may choose.
#[derive(Clone, Copy)]
struct Target {
    /// Where answers go.
    client: SocketAddr,
    /// Local endpoints only (datagrams another agent sent).
    local_only: bool,
    /// The client is another agent: answers carry a status byte.
    peer: bool,
}

/// Whether a flow may keep its backend: same route, backend still taking traffic.
fn still_good(flow: &Flow, route: &Arc<PortRoute>, now: u64) -> bool {
    if !Arc::ptr_eq(&flow.route, route) && flow.route.service_key != route.service_key {
        return false;
    }
    if flow.unserved.load(Ordering::Relaxed) {
        return false;
    }
    if !flow.backend.available(now) {
        return false;
    }
    // A remote agent that reported no ready endpoints any more.
    route
        .remote
        .iter()
        .find(|e| Arc::ptr_eq(&e.backend, &flow.backend))
        .is_none_or(|e| e.weight.load(Ordering::Relaxed) > 0)
}

async fn relay(
    port: &Port,
    target: Target,
    route: &Arc<PortRoute>,
    payload: &[u8],
) -> io::Result<()> {
    let flows = &port.flows;
    let now = now_ms();
    let mut avoid = None;
    let existing = {
        let mut map = lock(flows);
        match map.get(&target.client) {
            Some(f) if still_good(f, route, now) => {
                f.last.store(now, Ordering::Relaxed);
                Some((f.upstream.clone(), f.preamble.clone()))
            }
            Some(_) => {
                if let Some(old) = map.remove(&target.client)
                    && old.unserved.load(Ordering::Relaxed)
                {
                    avoid = Some(old.backend.clone());
                }
                None
            }
            None => None,
        }
    };
    let (upstream, preamble) = match existing {
        Some(x) => x,
        None => {
            if lock(flows).len() >= port.shared.settings.udp.max_flows {
                return Err(io::Error::other("flow table full"));
            }
            let flow = open(port, target, route, avoid).await?;
            let x = (flow.upstream.clone(), flow.preamble.clone());
            lock(flows).insert(target.client, flow);
            x
        }
    };
    match preamble {
        Some(mut p) => {
            p.extend_from_slice(payload);
            upstream.send(&p).await?;
        }
        None => {
            upstream.send(payload).await?;
        }
    }
    Ok(())
}

/// A new flow for the client on `route`: a connected socket to the chosen backend (not
/// `avoid`, which just said it has nothing) and a task relaying its answers.
async fn open(
    port: &Port,
    target: Target,
    route: &Arc<PortRoute>,
    avoid: Option<Arc<Backend>>,
) -> io::Result<Flow> {
    let mut tried = Tried::default();
    if let Some(b) = &avoid {
        tried.add(b);
    }
    let choice = pick(route, target.local_only, &tried, now_ms())
        .or_else(|| pick(route, target.local_only, &Tried::default(), now_ms()))
        .ok_or_else(|| io::Error::other(format!("no backend for {}", route.service_key)))?;
    let backend = choice.backend.clone();
    let addr = backend.tcp_addr();
    let bind: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let upstream = Arc::new(UdpSocket::bind(bind).await?);
    upstream.connect(addr).await?;
    let preamble = choice
        .remote
        .then(|| preamble(route, &port.shared.settings.cluster).into_bytes());
    let last = Arc::new(AtomicU64::new(now_ms()));
    let unserved = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(answers(
        port.clone(),
        route.clone(),
        backend.start(),
        upstream.clone(),
        Answers {
            target,
            remote: choice.remote,
            last: last.clone(),
            unserved: unserved.clone(),
        },
    ));
    Ok(Flow {
        route: route.clone(),
        backend,
        upstream,
        preamble,
        last,
        unserved,
        reader,
    })
}

/// How one flow's answers are relayed.
struct Answers {
    target: Target,
    /// The backend is a remote agent: its answers carry a status byte.
    remote: bool,
    last: Arc<AtomicU64>,
    unserved: Arc<AtomicBool>,
}

/// Relays the backend's datagrams to the client until the flow idles out, the backend
/// refuses (ICMP port unreachable: counted against it, the flow closes so the next
/// datagram picks again), a remote agent answers [`UNSERVED`], or the backend is killed
/// after draining. Answers to another agent carry the [`ANSWER`] byte first.
async fn answers(
    port: Port,
    route: Arc<PortRoute>,
    flight: InFlight,
    upstream: Arc<UdpSocket>,
    a: Answers,
) {
    let Port {
        shared,
        socket,
        flows,
    } = port;
    let backend = flight.0.clone();
    let killed = backend.killed();
    tokio::pin!(killed);
    // Room for the status byte in front when the client is another agent.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    buf[0] = ANSWER;
    let at = usize::from(a.target.peer);
    let mut answered = false;
    loop {
        let r = tokio::select! {
            r = upstream.recv(&mut buf[at..]) => r,
            () = &mut killed => break,
        };
        match r {
            Ok(n) => {
                let data = &buf[at..at + n];
                let data = if a.remote {
                    match data.split_first() {
                        Some((&ANSWER, rest)) => rest,
                        _ => {
                            // Nothing there for it: the client's next datagram goes on.
                            a.unserved.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                } else {
                    data
                };
                a.last.store(now_ms(), Ordering::Relaxed);
                if !answered {
                    answered = true;
                    backend.record_success();
                }
                let out = if a.target.peer {
                    // Status byte, then the data (which sits right behind it unless a
                    // remote agent's own status byte was stripped).
                    if a.remote {
                        let mut v = Vec::with_capacity(data.len() + 1);
                        v.push(ANSWER);
                        v.extend_from_slice(data);
                        std::borrow::Cow::Owned(v)
                    } else {
                        std::borrow::Cow::Borrowed(&buf[..n + 1])
                    }
                } else {
                    std::borrow::Cow::Borrowed(data)
                };
                if socket.send_to(&out, a.target.client).await.is_err() {
                    shared.metrics.udp_dropped.inc();
                }
            }
            Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
                failed(&shared, &route, &backend);
                if a.target.peer {
                    let _ = socket.send_to(&[UNSERVED], a.target.client).await;
                }
                break;
            }
            Err(error) => {
                tracing::debug!(%error, "udp upstream receive");
                break;
            }
        }
    }
    // Only this flow's own entry: a newer one for the same client stays. (Dropping it
    // aborts this very task, which takes effect at its next await: there is none.) An
    // unserved flow stays, marked, so the next datagram knows whom to avoid.
    if !a.unserved.load(Ordering::Relaxed) {
        let mut map = lock(&flows);
        if map
            .get(&a.target.client)
            .is_some_and(|f| Arc::ptr_eq(&f.upstream, &upstream))
        {
            map.remove(&a.target.client);
        }
    }
    drop(flight);
}

/// Closes flows idle past `idle`.
async fn sweep(flows: Flows, idle: Duration) {
    let mut tick = tokio::time::interval((idle / 4).max(Duration::from_millis(100)));
    loop {
        tick.tick().await;
        let cutoff = now_ms().saturating_sub(idle.as_millis() as u64);
        lock(&flows).retain(|_, f| f.last.load(Ordering::Relaxed) > cutoff);
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether a UDP endpoint refuses datagrams (ICMP port unreachable) within `timeout`: the
/// one active check a UDP endpoint allows. An empty datagram is sent; silence or any
/// answer counts as alive.
pub async fn probe(addr: SocketAddr, timeout: Duration) -> bool {
    let bind: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let Ok(s) = UdpSocket::bind(bind).await else {
        return true;
    };
    if s.connect(addr).await.is_err() || s.send(&[]).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 512];
    !matches!(
        tokio::time::timeout(timeout, s.recv(&mut buf)).await,
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused
    )
}

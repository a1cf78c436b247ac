//! The UDP proxy: datagrams from one client address form a flow, pinned to one backend
//! chosen by policy (local endpoints first, remote agents second) until it idles out or its
//! backend stops being available; answers come back to the client from the address it
//! wrote to. Remote agents get each datagram on their peer port behind a one-line
//! `MERIDIAN/1 UDP` preamble and send their endpoint's answers straight back.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
    reader: JoinHandle<()>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

type Flows = Arc<Mutex<HashMap<SocketAddr, Flow>>>;

fn lock(flows: &Flows) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Flow>> {
    flows.lock().unwrap_or_else(|e| e.into_inner())
}

/// Relays datagrams arriving on `socket` until the task is dropped.
pub async fn serve(socket: UdpSocket, shared: Arc<Shared>, source: Source) {
    let socket = Arc::new(socket);
    let flows: Flows = Arc::default();
    let sweeper = tokio::spawn(sweep(flows.clone(), shared.settings.udp.idle_timeout));
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
        let Some(route) = route.filter(|r| r.proto == Proto::Udp) else {
            shared.metrics.udp_dropped.inc();
            continue;
        };
        if let Err(error) = relay(
            &shared, &socket, &flows, client, &route, payload, local_only,
        )
        .await
        {
            shared.metrics.udp_dropped.inc();
            tracing::debug!(%client, %error, "udp datagram dropped");
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

/// Whether a flow may keep its backend: same route, backend still taking traffic.
fn still_good(flow: &Flow, route: &Arc<PortRoute>, now: u64) -> bool {
    if !Arc::ptr_eq(&flow.route, route) && flow.route.service_key != route.service_key {
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
    shared: &Arc<Shared>,
    socket: &Arc<UdpSocket>,
    flows: &Flows,
    client: SocketAddr,
    route: &Arc<PortRoute>,
    payload: &[u8],
    local_only: bool,
) -> io::Result<()> {
    let now = now_ms();
    let existing = {
        let mut map = lock(flows);
        match map.get(&client) {
            Some(f) if still_good(f, route, now) => {
                f.last.store(now, Ordering::Relaxed);
                Some((f.upstream.clone(), f.preamble.clone()))
            }
            Some(_) => {
                map.remove(&client);
                None
            }
            None => None,
        }
    };
    let (upstream, preamble) = match existing {
        Some(x) => x,
        None => {
            if lock(flows).len() >= shared.settings.udp.max_flows {
                return Err(io::Error::other("flow table full"));
            }
            let flow = open(shared, socket, flows, client, route, local_only).await?;
            let x = (flow.upstream.clone(), flow.preamble.clone());
            lock(flows).insert(client, flow);
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

/// A new flow for `client` on `route`: a connected socket to the chosen backend and a task
/// relaying its answers.
async fn open(
    shared: &Arc<Shared>,
    socket: &Arc<UdpSocket>,
    flows: &Flows,
    client: SocketAddr,
    route: &Arc<PortRoute>,
    local_only: bool,
) -> io::Result<Flow> {
    let choice = pick(route, local_only, &Tried::default(), now_ms())
        .ok_or_else(|| io::Error::other(format!("no backend for {}", route.service_key)))?;
    let backend = choice.backend.clone();
    let target = backend.tcp_addr();
    let bind: SocketAddr = if target.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let upstream = Arc::new(UdpSocket::bind(bind).await?);
    upstream.connect(target).await?;
    let preamble = choice
        .remote
        .then(|| preamble(route, &shared.settings.cluster).into_bytes());
    let last = Arc::new(AtomicU64::new(now_ms()));
    let reader = tokio::spawn(answers(
        shared.clone(),
        route.clone(),
        backend.start(),
        upstream.clone(),
        socket.clone(),
        flows.clone(),
        client,
        last.clone(),
    ));
    Ok(Flow {
        route: route.clone(),
        backend,
        upstream,
        preamble,
        last,
        reader,
    })
}

/// Relays the backend's datagrams to the client until the flow idles out, the backend
/// refuses (ICMP port unreachable: counted against it, the flow closes so the next
/// datagram picks again) or the backend is killed after draining.
#[allow(clippy::too_many_arguments)]
async fn answers(
    shared: Arc<Shared>,
    route: Arc<PortRoute>,
    flight: InFlight,
    upstream: Arc<UdpSocket>,
    socket: Arc<UdpSocket>,
    flows: Flows,
    client: SocketAddr,
    last: Arc<AtomicU64>,
) {
    let backend = flight.0.clone();
    let killed = backend.killed();
    tokio::pin!(killed);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut answered = false;
    loop {
        let r = tokio::select! {
            r = upstream.recv(&mut buf) => r,
            () = &mut killed => break,
        };
        match r {
            Ok(n) => {
                last.store(now_ms(), Ordering::Relaxed);
                if !answered {
                    answered = true;
                    backend.record_success();
                }
                if socket.send_to(&buf[..n], client).await.is_err() {
                    shared.metrics.udp_dropped.inc();
                }
            }
            Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
                failed(&shared, &route, &backend);
                break;
            }
            Err(error) => {
                tracing::debug!(%error, "udp upstream receive");
                break;
            }
        }
    }
    // Only this flow's own entry: a newer one for the same client stays. (Dropping it
    // aborts this very task, which takes effect at its next await: there is none.)
    let mut map = lock(&flows);
    if map
        .get(&client)
        .is_some_and(|f| Arc::ptr_eq(&f.upstream, &upstream))
    {
        map.remove(&client);
    }
    drop(map);
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

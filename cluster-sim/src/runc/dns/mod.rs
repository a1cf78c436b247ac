//! The cluster DNS of a `runtime: runc` cluster, what CoreDNS with its `kubernetes` plugin
//! gives a real cluster: a server on the cluster's DNS address
//! ([`SandboxNet::dns`](crate::podnet::SandboxNet::dns)) port 53, UDP and TCP, that pods'
//! `resolv.conf` names ([`super::resolv`]), answering from the cluster's cached Services and
//! EndpointSlices per the Kubernetes DNS specification (kubernetes/dns
//! `docs/specification.md`), in `cluster.local`:
//!
//! - `<svc>.<ns>.svc.cluster.local` A: the ClusterIP; for a headless Service, its ready
//!   endpoints' addresses (all not terminating with `publishNotReadyAddresses`), and each
//!   endpoint as `<hostname>.<svc>.<ns>.svc.cluster.local` (StatefulSet pods through their
//!   `subdomain`) or, without a hostname, by its address dashed (`100-65-0-2.<svc>...`);
//!   an ExternalName Service: a CNAME to its `externalName`;
//! - `_<port>._<proto>.<svc>.<ns>.svc.cluster.local` SRV for each named port: the Service
//!   name and port, or for a headless Service each endpoint's name and port;
//! - an existing name asked for another type (AAAA: the clusters are IPv4 only) is NODATA,
//!   an unknown name in the domain NXDOMAIN, both with the SOA in the authority section.
//!
//! There is no upstream server to forward other names to (the sandboxed pods only reach
//! their cluster and the host): every name outside `cluster.local` gets NXDOMAIN. Not
//! REFUSED: musl's resolver ignores a REFUSED and waits for its timeout, so each miss of
//! the search path would cost seconds. Pod A records (`<a-b-c-d>.<ns>.pod`) and PTR records
//! are not served.
//!
//! [`zone`] builds the records, [`answer`] answers one query (pure; wire format from
//! `meridian-dns-wire`, shared with lb-agent), [`spawn`] runs the listeners, which answer
//! from the latest zone.

mod answer;
#[cfg(test)]
mod tests;
mod zone;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) use answer::{Transport, UDP, answer};
pub(crate) use zone::{CLUSTER_DOMAIN, Zone};

use super::services::Listing;

/// How long a TCP connection may stay idle between queries (RFC 7766 suggests seconds).
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Starts the cluster DNS on `addr`: a task that rebuilds the zone from each listing, and
/// the UDP and TCP listeners.
pub(crate) fn spawn(
    addr: SocketAddr,
    listings: watch::Receiver<Arc<Listing>>,
) -> Vec<JoinHandle<()>> {
    let (tx, zone) = watch::channel(Arc::new(Zone::default()));
    vec![
        tokio::spawn(follow(listings, tx)),
        tokio::spawn(serve_udp(addr, zone.clone())),
        tokio::spawn(serve_tcp(addr, zone)),
    ]
}

/// Publishes the zone of each listing, with a new serial each time.
async fn follow(mut listings: watch::Receiver<Arc<Listing>>, tx: watch::Sender<Arc<Zone>>) {
    let mut serial: u32 = 0;
    while listings.changed().await.is_ok() {
        let listing = listings.borrow_and_update().clone();
        serial = serial.wrapping_add(1);
        let zone = Zone::build(&listing.services, &listing.slices, serial);
        if tx.send(Arc::new(zone)).is_err() {
            return;
        }
    }
}

async fn serve_udp(addr: SocketAddr, zone: watch::Receiver<Arc<Zone>>) {
    let socket = match UdpSocket::bind(addr).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(address = %addr, error = %e, "cannot serve the cluster DNS over UDP");
            return;
        }
    };
    let mut buf = vec![0u8; 65_535];
    let mut out = Vec::with_capacity(1232);
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let z = zone.borrow().clone();
        if answer(&z, &buf[..len], UDP, &mut out).is_some()
            && let Err(e) = socket.send_to(&out, from).await
        {
            tracing::debug!(client = %from, error = %e, "cannot send a DNS response");
        }
    }
}

async fn serve_tcp(addr: SocketAddr, zone: watch::Receiver<Arc<Zone>>) {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(address = %addr, error = %e, "cannot serve the cluster DNS over TCP");
            return;
        }
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(serve_connection(stream, zone.clone()));
    }
}

/// Answers the length-prefixed queries of one connection until the client closes it or
/// stays idle past [`TCP_IDLE`].
async fn serve_connection(mut stream: TcpStream, zone: watch::Receiver<Arc<Zone>>) {
    let mut query = Vec::new();
    let mut out = Vec::new();
    loop {
        let Ok(Ok(len)) = tokio::time::timeout(TCP_IDLE, stream.read_u16()).await else {
            return;
        };
        query.resize(usize::from(len), 0);
        if stream.read_exact(&mut query).await.is_err() {
            return;
        }
        let z = zone.borrow().clone();
        if answer(&z, &query, Transport::Tcp, &mut out).is_none() {
            continue;
        }
        let mut framed = Vec::with_capacity(out.len() + 2);
        framed.extend_from_slice(&(out.len() as u16).to_be_bytes());
        framed.extend_from_slice(&out);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}

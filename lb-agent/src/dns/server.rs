//! The DNS listeners: a UDP loop and a TCP acceptor (RFC 7766 length framing, several
//! queries per connection, idle timeout), both answering from the latest published view.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{Semaphore, watch};

use super::answer::{DEFAULT_UDP_PAYLOAD, Transport, answer};
use super::metrics::DnsMetrics;
use super::view::DnsView;

/// Tunables of the listeners.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Largest UDP response sent and advertised (EDNS0); larger answers are truncated.
    pub udp_max_payload: u16,
    /// A TCP connection with no complete query for this long is closed.
    pub tcp_idle_timeout: Duration,
    /// Open TCP connections at most; further ones are closed on accept.
    pub tcp_max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            udp_max_payload: DEFAULT_UDP_PAYLOAD,
            // RFC 7766 §6.2.3 suggests seconds, not minutes, for a busy server.
            tcp_idle_timeout: Duration::from_secs(10),
            tcp_max_connections: 1024,
        }
    }
}

/// The view in use, refreshed from the watch channel only when a new one was published
/// (a version check, no lock, on the hot path). When the publisher is gone the last view
/// keeps being served.
struct CurrentView {
    rx: watch::Receiver<Arc<DnsView>>,
    view: Arc<DnsView>,
}

impl CurrentView {
    fn new(mut rx: watch::Receiver<Arc<DnsView>>) -> CurrentView {
        let view = rx.borrow_and_update().clone();
        CurrentView { rx, view }
    }

    fn get(&mut self) -> &DnsView {
        if self.rx.has_changed().unwrap_or(false) {
            self.view = self.rx.borrow_and_update().clone();
        }
        &self.view
    }
}

/// Most datagrams answered in one turn before the task yields, so one busy socket cannot
/// starve the other tasks of its worker.
const UDP_BATCH: usize = 64;

/// Binds `n` UDP sockets on `addr` with `SO_REUSEPORT`: the kernel spreads clients over
/// them by address hash, so each can be served by its own task on its own worker without
/// any shared state on the hot path. `n` is at least 1.
pub fn bind_udp_sockets(addr: SocketAddr, n: usize) -> io::Result<Vec<UdpSocket>> {
    use socket2::{Domain, Protocol, Socket, Type};
    (0..n.max(1))
        .map(|_| {
            let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
            s.set_reuse_port(true)?;
            s.set_nonblocking(true)?;
            s.bind(&addr.into())?;
            UdpSocket::from_std(s.into())
        })
        .collect()
}

/// Answers queries on `socket` until the task is dropped. Errors of single datagrams are
/// counted and logged, never fatal.
///
/// Once the socket is readable, queued datagrams are received and answered with
/// non-blocking calls until the queue is empty (or [`UDP_BATCH`] were answered): one trip
/// through the reactor per burst instead of one per query.
pub async fn serve_udp(
    socket: UdpSocket,
    view: watch::Receiver<Arc<DnsView>>,
    metrics: DnsMetrics,
    options: ServeOptions,
) {
    let mut view = CurrentView::new(view);
    let transport = Transport::Udp {
        max_payload: options.udp_max_payload,
    };
    // EDNS0 queries are small; 4096 leaves room for whatever a client pads in.
    let mut query = vec![0u8; 4096];
    let mut response = Vec::with_capacity(usize::from(options.udp_max_payload).max(512));
    loop {
        if let Err(e) = socket.readable().await {
            tracing::debug!(error = %e, "dns: udp socket not readable");
            tokio::task::yield_now().await;
            continue;
        }
        let mut full = true;
        for _ in 0..UDP_BATCH {
            let (len, peer) = match socket.try_recv_from(&mut query) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    full = false;
                    break;
                }
                Err(e) => {
                    metrics.dropped();
                    tracing::debug!(error = %e, "dns: udp receive failed");
                    // Errors reported on receive are per-datagram (ICMP feedback and
                    // the like); yield so a persistent one cannot starve the runtime.
                    break;
                }
            };
            let Some(answered) = answer(
                view.get(),
                &query[..len],
                peer.ip(),
                transport,
                &mut response,
            ) else {
                metrics.dropped();
                continue;
            };
            // Counted before sending, so a client that has its answer sees it counted.
            metrics.answered(&answered);
            let sent = match socket.try_send_to(&response, peer) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    socket.send_to(&response, peer).await
                }
                other => other,
            };
            if let Err(e) = sent {
                metrics.dropped();
                tracing::debug!(%peer, error = %e, "dns: udp send failed");
            }
        }
        if full {
            tokio::task::yield_now().await;
        }
    }
}

/// Accepts DNS-over-TCP connections on `listener` until the task is dropped; each
/// connection runs in its own task.
pub async fn serve_tcp(
    listener: TcpListener,
    view: watch::Receiver<Arc<DnsView>>,
    metrics: DnsMetrics,
    options: ServeOptions,
) {
    let slots = Arc::new(Semaphore::new(options.tcp_max_connections));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Typically out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "dns: tcp accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            metrics.tcp_rejected();
            continue;
        };
        metrics.tcp_accepted();
        let view = view.clone();
        let metrics = metrics.clone();
        let idle = options.tcp_idle_timeout;
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, peer, view, &metrics, idle).await {
                tracing::debug!(%peer, error = %e, "dns: tcp connection ended");
            }
            drop(permit);
        });
    }
}

/// Serves one TCP connection: queries are answered in order; responses are flushed once
/// no further query is already buffered, so pipelined queries share writes.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    view: watch::Receiver<Arc<DnsView>>,
    metrics: &DnsMetrics,
    idle: Duration,
) -> io::Result<()> {
    // Best effort: small responses should not wait for Nagle.
    let _ = stream.set_nodelay(true);
    let client: IpAddr = peer.ip();
    let (read, write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut write = BufWriter::new(write);
    let mut view = CurrentView::new(view);
    let mut query = Vec::with_capacity(512);
    let mut response = Vec::with_capacity(1024);
    loop {
        let len = match tokio::time::timeout(idle, read.read_u16()).await {
            Err(_) => return Ok(()),
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(r) => r?,
        };
        query.resize(usize::from(len), 0);
        tokio::time::timeout(idle, read.read_exact(&mut query))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "partial query"))??;
        let Some(answered) = answer(view.get(), &query, client, Transport::Tcp, &mut response)
        else {
            // Not a query: the peer is not speaking DNS to us, stop reading it.
            metrics.dropped();
            return Ok(());
        };
        metrics.answered(&answered);
        write.write_u16(response.len() as u16).await?;
        write.write_all(&response).await?;
        if read.buffer().is_empty() {
            write.flush().await?;
        }
    }
}

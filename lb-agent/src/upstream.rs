//! Pooled keep-alive connections to upstreams: raw HTTP/1.1 streams for the lean forwarding
//! path ([`crate::h1`]) and hyper HTTP/1.1 senders for the hyper path, both checked out per
//! request and returned when the response ends; one HTTP/2 (h2c) connection per backend is
//! shared by all requests.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use crate::backend::{Backend, InFlight};

/// Body of a request sent upstream: the client's, or nothing (which can be re-sent).
pub type UpBody = Either<Incoming, Empty<Bytes>>;

/// Idle HTTP/1.1 connections kept per backend.
const MAX_IDLE_H1: usize = 256;

/// The idle connections of one backend.
#[derive(Default)]
pub struct Pools {
    raw: Mutex<Vec<TcpStream>>,
    h1: Mutex<Vec<http1::SendRequest<UpBody>>>,
    h2: Mutex<Option<http2::SendRequest<UpBody>>>,
}

impl Pools {
    /// Forgets every idle connection: raw ones close here, hyper's once their tasks see no
    /// sender.
    pub fn clear(&self) {
        self.raw.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.h1.lock().unwrap_or_else(|e| e.into_inner()).clear();
        *self.h2.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn take_raw(&self) -> Option<TcpStream> {
        self.raw.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn take_h1(&self) -> Option<http1::SendRequest<UpBody>> {
        self.h1.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn put_h1(&self, sender: http1::SendRequest<UpBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.h1.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_H1 {
            idle.push(sender);
        }
    }
}

/// A connection ready to take one request.
pub enum Sender {
    /// HTTP/1.1: exclusive until the response body ends.
    H1(http1::SendRequest<UpBody>),
    /// HTTP/2: shared.
    H2(http2::SendRequest<UpBody>),
}

/// Why no connection could be had. Nothing was sent, so any request may be retried.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The TCP connect did not finish in time.
    #[error("connect to {0} timed out")]
    Timeout(SocketAddr),
    /// The TCP connect failed.
    #[error("connect to {addr}: {source}")]
    Io {
        /// Upstream.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP handshake failed.
    #[error("handshake with {addr}: {source}")]
    Handshake {
        /// Upstream.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: hyper::Error,
    },
}

/// Opens a TCP connection with a deadline.
pub async fn connect_tcp(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => return Err(ConnectError::Timeout(addr)),
        Ok(Err(source)) => return Err(ConnectError::Io { addr, source }),
        Ok(Ok(s)) => s,
    };
    // Proxied request/response heads are small writes: do not wait for Nagle.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A pooled connection to `backend`'s HTTP address, or a new one.
pub async fn checkout(
    backend: &Arc<Backend>,
    h2: bool,
    timeout: Duration,
) -> Result<Sender, ConnectError> {
    let addr = backend.http_addr();
    if h2 {
        let shared = backend
            .pools
            .h2
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(s) = shared.filter(|s| !s.is_closed()) {
            return Ok(Sender::H2(s));
        }
        let io = TokioIo::new(connect_tcp(addr, timeout).await?);
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await
            .map_err(|source| ConnectError::Handshake { addr, source })?;
        drive(backend, conn);
        *backend.pools.h2.lock().unwrap_or_else(|e| e.into_inner()) = Some(sender.clone());
        return Ok(Sender::H2(sender));
    }
    while let Some(mut s) = backend.pools.take_h1() {
        if s.is_ready() {
            return Ok(Sender::H1(s));
        }
        // A connection whose previous response just ended may not have turned idle yet.
        if let Ok(Ok(())) = tokio::time::timeout(timeout, s.ready()).await {
            return Ok(Sender::H1(s));
        }
    }
    let io = TokioIo::new(connect_tcp(addr, timeout).await?);
    let (sender, conn) = http1::Builder::new()
        .handshake(io)
        .await
        .map_err(|source| ConnectError::Handshake { addr, source })?;
    drive(backend, conn);
    Ok(Sender::H1(sender))
}

/// An idle raw connection to `backend`'s HTTP address that still looks open (`true`: it
/// was pooled), or a new one. `fresh` skips the pool.
pub async fn checkout_raw(
    backend: &Backend,
    fresh: bool,
    timeout: Duration,
) -> Result<(TcpStream, bool), ConnectError> {
    if !fresh {
        while let Some(s) = backend.pools.take_raw() {
            if is_quiet(&s) {
                return Ok((s, true));
            }
        }
    }
    Ok((connect_tcp(backend.http_addr(), timeout).await?, false))
}

/// Whether an idle connection has nothing to say, as it should: one with anything to read
/// was closed (or reset) by the upstream, or sent something unasked. This asks the kernel
/// with one non-blocking peek rather than tokio's cached readiness, which lags a close that
/// arrived since the reactor last polled, and would send a request into a closed socket.
fn is_quiet(stream: &TcpStream) -> bool {
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit()];
    matches!(
        socket2::SockRef::from(stream).peek(&mut byte),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    )
}

/// Gives an idle raw connection back to `backend`'s pool (dropped when the backend is
/// draining or the pool is full).
pub fn checkin_raw(backend: &Backend, stream: TcpStream) {
    if backend.is_draining() {
        return;
    }
    let mut idle = backend.pools.raw.lock().unwrap_or_else(|e| e.into_inner());
    if idle.len() < MAX_IDLE_H1 {
        idle.push(stream);
    }
}

/// Runs a connection until it ends or its backend is killed after draining.
fn drive<F>(backend: &Arc<Backend>, conn: F)
where
    F: std::future::Future<Output = hyper::Result<()>> + Send + 'static,
{
    let killed = backend.killed();
    tokio::spawn(async move {
        tokio::select! {
            r = conn => if let Err(error) = r {
                tracing::debug!(%error, "upstream connection ended");
            },
            _ = killed => {}
        }
    });
}

/// Why a response body from upstream ended early.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The upstream connection failed while the body was read.
    #[error(transparent)]
    Upstream(#[from] hyper::Error),
    /// HTTP/2 streams outlive their connection's driver future (hyper finishes them on its
    /// own task), so the drain timeout is enforced on each response body instead.
    #[error("backend closed after its drain timeout")]
    Killed,
}

/// A response body from upstream that gives its HTTP/1.1 connection back to the pool when
/// it ends, holds the backend's in-flight count until then, and ends with
/// [`BodyError::Killed`] when the backend is closed after draining.
pub struct PooledBody {
    inner: Incoming,
    sender: Option<http1::SendRequest<UpBody>>,
    flight: Option<InFlight>,
    /// Resolves when the backend is closed; `None` once it did.
    killed: Option<Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
}

impl PooledBody {
    /// Wraps `inner`; `sender` is returned to `flight`'s backend pool at the end.
    pub fn new(
        inner: Incoming,
        sender: Option<http1::SendRequest<UpBody>>,
        flight: InFlight,
    ) -> Self {
        Self {
            inner,
            sender,
            killed: Some(Box::pin(flight.0.killed())),
            flight: Some(flight),
        }
    }

    fn finish(&mut self) {
        if let Some(flight) = self.flight.take()
            && let Some(sender) = self.sender.take()
        {
            flight.0.pools.put_h1(sender);
        }
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
        // Otherwise the body was abandoned mid-way: the connection cannot be reused and
        // closes when its sender is dropped here.
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let Some(killed) = this.killed.as_mut() else {
            return Poll::Ready(None);
        };
        if killed.as_mut().poll(cx).is_ready() {
            this.killed = None;
            this.sender = None;
            return Poll::Ready(Some(Err(BodyError::Killed)));
        }
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            this.finish();
        }
        r.map_err(BodyError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

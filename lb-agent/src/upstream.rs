//! Keep-alive connections to upstreams. An HTTP/1.1 connection has no task of its own: the
//! client connection that uses it polls it while its request and response are in flight,
//! then keeps it for its next request (the common keep-alive case touches no shared pool and
//! wakes no other task); it goes to the backend's idle pool when the client connection
//! moves to another backend or closes. One HTTP/2 (h2c) connection per backend, run by its
//! own task, is shared by all requests.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
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
    h1: Mutex<Vec<H1Conn>>,
    h2: Mutex<Option<http2::SendRequest<UpBody>>>,
    /// Bumped by [`Pools::clear`]: connections opened before are not reused, even those a
    /// client connection holds outside the pool.
    epoch: AtomicU64,
}

impl Pools {
    /// Forgets every idle connection (closing them) and retires the ones in use.
    pub fn clear(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let idle = std::mem::take(&mut *self.h1.lock().unwrap_or_else(|e| e.into_inner()));
        drop(idle);
        *self.h2.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn take_h1(&self) -> Option<H1Conn> {
        self.h1.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn put_h1(&self, conn: H1Conn) {
        if conn.epoch != self.epoch() || conn.sender.is_closed() {
            return;
        }
        let mut idle = self.h1.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE_H1 {
            idle.push(conn);
        }
    }
}

type UpConn = http1::Connection<TokioIo<TcpStream>, UpBody>;

/// An HTTP/1.1 connection polled by whoever uses it.
pub struct H1Conn {
    sender: http1::SendRequest<UpBody>,
    /// Boxed: the connection state is large and an `H1Conn` moves for every request.
    conn: Box<UpConn>,
    /// Resolves when the backend is killed after draining: the connection ends then.
    killed: Pin<Box<dyn Future<Output = ()> + Send>>,
    epoch: u64,
}

impl H1Conn {
    /// Drives the connection's I/O; Ready once it has ended (closed, failed or killed).
    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        poll_conn(&mut self.conn, &mut self.killed, cx)
    }

    /// Whether it can take a request now: not retired, still open and idle. Idle
    /// connections are not polled, so this also reads a close the upstream sent meanwhile.
    fn usable(&mut self, pools: &Pools) -> bool {
        if self.epoch != pools.epoch() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        // The first poll may only now finish the previous exchange and turn idle.
        for _ in 0..2 {
            if self.poll_io(&mut cx).is_ready() {
                return false;
            }
            if self.sender.is_ready() {
                return true;
            }
        }
        false
    }

    /// Sends `req`, driving the connection until the response head arrives; the connection
    /// comes back unless it ended. On failure, the request comes back if it was never
    /// written.
    pub async fn send(
        self,
        req: Request<UpBody>,
    ) -> Result<(Response<Incoming>, Option<H1Conn>), (Option<Request<UpBody>>, hyper::Error)> {
        let H1Conn {
            mut sender,
            mut conn,
            mut killed,
            epoch,
        } = self;
        let mut response = std::pin::pin!(sender.try_send_request(req));
        // The request is queued already: polling the connection first writes it, and
        // reads the answer in the same turn when it is there.
        let answered = std::future::poll_fn(|cx| {
            if poll_conn(&mut conn, &mut killed, cx).is_ready() {
                return Poll::Ready(None);
            }
            response.as_mut().poll(cx).map(Some)
        })
        .await;
        let result = match answered {
            Some(r) => r,
            None => {
                // The connection ended (perhaps right after the answer, `Connection: close`):
                // dropping it settles the request, with the answer or the error.
                drop(conn);
                return match response.await {
                    Ok(resp) => Ok((resp, None)),
                    Err(mut e) => Err((e.take_message(), e.into_error())),
                };
            }
        };
        match result {
            Ok(resp) => Ok((
                resp,
                Some(H1Conn {
                    sender,
                    conn,
                    killed,
                    epoch,
                }),
            )),
            Err(mut e) => Err((e.take_message(), e.into_error())),
        }
    }
}

fn poll_conn(
    conn: &mut UpConn,
    killed: &mut Pin<Box<dyn Future<Output = ()> + Send>>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    if killed.as_mut().poll(cx).is_ready() {
        return Poll::Ready(());
    }
    match Pin::new(conn).poll(cx) {
        Poll::Ready(Err(error)) => {
            tracing::debug!(%error, "upstream connection ended");
            Poll::Ready(())
        }
        Poll::Ready(Ok(())) => Poll::Ready(()),
        Poll::Pending => Poll::Pending,
    }
}

/// The upstream HTTP/1.1 connection a client connection used last, kept for its next
/// request; returned to its backend's pool when the client connection closes.
#[derive(Default)]
pub struct Affinity(Mutex<Option<(Arc<Backend>, H1Conn)>>);

impl Affinity {
    fn take(&self) -> Option<(Arc<Backend>, H1Conn)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn keep(&self, backend: Arc<Backend>, conn: H1Conn) {
        let previous = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((backend, conn));
        // Two responses of one client connection ended together (h2c clients): pool one.
        if let Some((b, c)) = previous {
            b.pools.put_h1(c);
        }
    }
}

impl Drop for Affinity {
    fn drop(&mut self) {
        if let Some((b, c)) = self.take() {
            b.pools.put_h1(c);
        }
    }
}

/// A connection ready to take one request.
pub enum Sender {
    /// HTTP/1.1: exclusive until the response body ends.
    H1(H1Conn),
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

/// A connection to `backend`'s HTTP address: the one `affinity` holds, a pooled one or a
/// new one.
pub async fn checkout(
    backend: &Arc<Backend>,
    affinity: &Affinity,
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
        drive_h2(backend, conn);
        *backend.pools.h2.lock().unwrap_or_else(|e| e.into_inner()) = Some(sender.clone());
        return Ok(Sender::H2(sender));
    }
    if let Some((b, mut c)) = affinity.take() {
        if Arc::ptr_eq(&b, backend) {
            if c.usable(&backend.pools) {
                return Ok(Sender::H1(c));
            }
        } else {
            b.pools.put_h1(c);
        }
    }
    while let Some(mut c) = backend.pools.take_h1() {
        if c.usable(&backend.pools) {
            return Ok(Sender::H1(c));
        }
    }
    let epoch = backend.pools.epoch();
    let io = TokioIo::new(connect_tcp(addr, timeout).await?);
    let (sender, conn) = http1::Builder::new()
        .handshake(io)
        .await
        .map_err(|source| ConnectError::Handshake { addr, source })?;
    Ok(Sender::H1(H1Conn {
        sender,
        conn: Box::new(conn),
        killed: Box::pin(backend.killed()),
        epoch,
    }))
}

/// Runs a shared connection until it ends or its backend is killed after draining.
fn drive_h2<F>(backend: &Arc<Backend>, conn: F)
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

/// A response body from upstream that drives its HTTP/1.1 connection, gives it back to the
/// client connection when it ends and holds the backend's in-flight count until then.
pub struct PooledBody {
    inner: Incoming,
    conn: Option<H1Conn>,
    affinity: Option<Arc<Affinity>>,
    flight: Option<InFlight>,
}

impl PooledBody {
    /// Wraps `inner`; `conn` goes back to `affinity` at the end.
    pub fn new(inner: Incoming, conn: Option<(H1Conn, Arc<Affinity>)>, flight: InFlight) -> Self {
        let (conn, affinity) = conn.unzip();
        Self {
            inner,
            conn,
            affinity,
            flight: Some(flight),
        }
    }

    fn finish(&mut self) {
        if let Some(flight) = self.flight.take()
            && let Some(conn) = self.conn.take()
            && let Some(affinity) = self.affinity.take()
        {
            affinity.keep(flight.0.clone(), conn);
        }
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if self.inner.is_end_stream() {
            self.finish();
        }
        // Otherwise the body was abandoned mid-way: the connection cannot be reused and
        // closes when it is dropped here.
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(conn) = &mut this.conn
            && conn.poll_io(cx).is_ready()
        {
            // Ended or killed: whatever it delivered is still read below, then the body
            // ends or fails.
            this.conn = None;
        }
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = r {
            this.finish();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

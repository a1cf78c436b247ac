//! The lean HTTP/1.x path of the L7 proxy. A client connection's request heads are read
//! into one reusable buffer, parsed with `httparse`, routed by Host (http listener) or by
//! the listen port, and forwarded over pooled raw keep-alive connections to HTTP/1.1
//! upstreams, heads rewritten straight from the parsed bytes and bodies relayed as they
//! come (see [`forward`]); an `Upgrade` (WebSocket) answered `101` becomes a tunnel. What
//! this path does not handle — the h2c preface, CONNECT, `Expect`, routes to h2c upstreams —
//! is handed, with the bytes already read, to hyper's server ([`crate::http`]) for the rest
//! of the connection. Heads over the limits and every ambiguous framing are answered 4xx
//! and the connection closed; a connection idle between requests, or slow to send a head,
//! is closed too.

pub mod chunked;
pub mod codec;
mod forward;
pub mod rewind;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::agent::{BindKey, Shared};
use crate::table::Proto;
use codec::{Framing, HeadLimits, Parsed, RequestHead};

/// Bytes read from a socket and not consumed yet: `buf[start..end]`.
#[derive(Debug)]
struct Window {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// Initial size of a connection's read buffers; heads may grow one up to [`MAX_HEAD`].
const BUF: usize = 16 * 1024;

impl Window {
    fn new() -> Self {
        Self {
            buf: vec![0; BUF],
            start: 0,
            end: 0,
        }
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more from `s` behind what is pending; `Ok(0)` at end of stream.
    async fn fill(&mut self, s: &mut TcpStream) -> io::Result<usize> {
        self.fill_up_to(s, codec::MAX_HEAD).await
    }

    /// Like [`Window::fill`], growing the buffer up to `max` bytes.
    async fn fill_up_to(&mut self, s: &mut TcpStream, max: usize) -> io::Result<usize> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < max {
                self.buf.resize(self.buf.len() * 2, 0);
            } else {
                return Err(io::Error::other("head too large"));
            }
        }
        let n = s.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }
}

/// One client connection and its reusable buffers.
struct Conn {
    client: TcpStream,
    /// From the client.
    inbuf: Window,
    /// From the upstream of the current request.
    upbuf: Window,
    /// The current request.
    head: RequestHead,
    /// What is written next (a head and the body bytes that came with it).
    out: Vec<u8>,
    /// The connection closes with a request body left unread.
    linger: bool,
}

/// How the lean path left a connection.
enum End {
    Closed,
    /// To hyper, with the pending bytes.
    Handoff,
}

/// Serves one client connection until it closes; `bind` selects port routing (a listen
/// port or dedicated address) over Host routing.
pub async fn serve(stream: TcpStream, shared: Arc<Shared>, bind: Option<BindKey>) {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        client: stream,
        inbuf: Window::new(),
        upbuf: Window::new(),
        head: RequestHead::default(),
        out: Vec::with_capacity(1024),
        linger: false,
    };
    match conn.run(&shared, bind).await {
        End::Handoff => {
            let pre = conn.inbuf.pending().to_vec();
            let io = rewind::Rewind::new(pre, conn.client);
            crate::http::serve(io, shared, bind).await;
        }
        End::Closed if conn.linger => conn.linger().await,
        End::Closed => {}
    }
}

/// How long a closing connection may keep sending the body nobody reads.
const LINGER: Duration = Duration::from_secs(2);

impl Conn {
    async fn run(&mut self, shared: &Shared, bind: Option<BindKey>) -> End {
        let l = &shared.settings.limits;
        let limits = HeadLimits {
            max_head: l.max_head,
            max_headers: l.max_headers,
            max_request_line: l.max_request_line,
        };
        loop {
            // Idle until the next request starts, then a bounded time for its whole head.
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                match codec::parse_request(self.inbuf.pending(), &mut self.head, &limits) {
                    Ok(Parsed::Complete) => break,
                    Ok(Parsed::Handoff) => return End::Handoff,
                    Ok(Parsed::Partial) => {}
                    Err(e) => {
                        shared.metrics.refused.inc();
                        self.refuse(e.status(), &e.to_string()).await;
                        return End::Closed;
                    }
                }
                let started = !self.inbuf.pending().is_empty();
                let wait = match deadline {
                    Some(d) => d,
                    None if started => {
                        let d = tokio::time::Instant::now() + l.head_timeout;
                        deadline = Some(d);
                        d
                    }
                    None => tokio::time::Instant::now() + l.idle_timeout,
                };
                match tokio::time::timeout_at(
                    wait,
                    self.inbuf.fill_up_to(&mut self.client, l.max_head),
                )
                .await
                {
                    Ok(Ok(0)) => return End::Closed,
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        tracing::debug!(%error, "client connection ended");
                        return End::Closed;
                    }
                    Err(_) if started => {
                        shared.metrics.refused.inc();
                        self.refuse(408, "request head not received in time\n")
                            .await;
                        return End::Closed;
                    }
                    // Idle keep-alive connection: closed quietly, as servers do.
                    Err(_) => return End::Closed,
                }
            }
            let table = shared.table.borrow().clone();
            let route = match bind {
                Some(key) => table.route_for_bind(key),
                None => self.head.host_str().and_then(|h| table.route_for_host(h)),
            };
            let keep = match route {
                // hyper's client speaks h2c; the head is still pending for its server.
                Some(r) if r.proto != Proto::Http => return End::Handoff,
                Some(route) => {
                    self.inbuf.consume(self.head.len);
                    forward::forward(self, shared, route, table.forwarded_by.as_ref()).await
                }
                None => {
                    self.inbuf.consume(self.head.len);
                    let text = format!(
                        "no federated service for host {:?}\n",
                        self.head.host_str().unwrap_or("")
                    );
                    self.answer(404, &text, None).await
                }
            };
            if !keep {
                return End::Closed;
            }
        }
    }

    /// Answers a head that cannot be served, then the connection closes (as hyper does).
    async fn refuse(&mut self, code: u16, text: &str) {
        tracing::debug!(code, error = %text.trim_end(), "bad request head");
        self.head.is_head = false;
        self.head.http10 = false;
        self.linger = true;
        codec::write_plain(&mut self.out, code, text, &self.head, true, None);
        let _ = self.client.write_all(&self.out).await;
    }

    /// Closes after an answer sent before the request body was read: a close with unread
    /// data would reset the connection and could destroy the answer in the client's
    /// buffers, so the write side closes first and the body is discarded for a while.
    async fn linger(&mut self) {
        let _ = self.client.shutdown().await;
        let discard = async {
            loop {
                match self.client.read(&mut self.inbuf.buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(LINGER, discard).await;
    }

    /// Sends the agent's own answer to the current request; returns whether the connection
    /// stays open (not when the request's body was left unread). `error` marks it for other
    /// agents (see [`codec::MERIDIAN_ERROR_HEADER`]).
    async fn answer(&mut self, code: u16, text: &str, error: Option<&str>) -> bool {
        let close = !self.head.keep_alive || self.head.framing != Framing::Empty;
        self.linger |= self.head.framing != Framing::Empty;
        codec::write_plain(&mut self.out, code, text, &self.head, close, error);
        self.client.write_all(&self.out).await.is_ok() && !close
    }
}

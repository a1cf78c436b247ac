//! The lean HTTP/1.x path of the L7 proxy. A client connection's request heads are read
//! into one reusable buffer, parsed with `httparse`, routed by Host (http listener) or by
//! the listen port, and forwarded over pooled raw keep-alive connections to HTTP/1.1
//! upstreams, heads rewritten straight from the parsed bytes and bodies relayed as they
//! come (see [`forward`]). What this path does not handle — the h2c preface, Upgrade,
//! CONNECT, `Expect`, routes to h2c upstreams — is handed, with the bytes already read, to
//! hyper's server ([`crate::http`]) for the rest of the connection.

pub mod chunked;
pub mod codec;
mod forward;
pub mod rewind;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::agent::Shared;
use crate::table::Proto;
use codec::{Framing, HeadError, MAX_HEAD, Parsed, RequestHead};

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
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else if self.buf.len() < MAX_HEAD {
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

/// Serves one client connection until it closes; `listen_port` selects port routing.
pub async fn serve(stream: TcpStream, shared: Arc<Shared>, listen_port: Option<u16>) {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        client: stream,
        inbuf: Window::new(),
        upbuf: Window::new(),
        head: RequestHead::default(),
        out: Vec::with_capacity(1024),
        linger: false,
    };
    match conn.run(&shared, listen_port).await {
        End::Handoff => {
            let pre = conn.inbuf.pending().to_vec();
            let io = rewind::Rewind::new(pre, conn.client);
            crate::http::serve(io, shared, listen_port).await;
        }
        End::Closed if conn.linger => conn.linger().await,
        End::Closed => {}
    }
}

/// How long a closing connection may keep sending the body nobody reads.
const LINGER: Duration = Duration::from_secs(2);

impl Conn {
    async fn run(&mut self, shared: &Shared, listen_port: Option<u16>) -> End {
        loop {
            loop {
                match codec::parse_request(self.inbuf.pending(), &mut self.head) {
                    Ok(Parsed::Complete) => break,
                    Ok(Parsed::Handoff) => return End::Handoff,
                    Ok(Parsed::Partial) => {}
                    Err(e) => {
                        self.refuse(e).await;
                        return End::Closed;
                    }
                }
                match self.inbuf.fill(&mut self.client).await {
                    Ok(0) => return End::Closed,
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "client connection ended");
                        return End::Closed;
                    }
                }
            }
            let table = shared.table.borrow().clone();
            let route = match listen_port {
                Some(p) => table.listen.get(&p),
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
                    self.answer(404, &text).await
                }
            };
            if !keep {
                return End::Closed;
            }
        }
    }

    /// Answers a head that cannot be served, then the connection closes (as hyper does).
    async fn refuse(&mut self, e: HeadError) {
        tracing::debug!(error = %e, "bad request head");
        let code = match e {
            HeadError::TooLarge => 431,
            _ => 400,
        };
        self.head.is_head = false;
        self.head.http10 = false;
        self.linger = true;
        codec::write_plain(&mut self.out, code, &format!("{e}\n"), &self.head, true);
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
    /// stays open (not when the request's body was left unread).
    async fn answer(&mut self, code: u16, text: &str) -> bool {
        let close = !self.head.keep_alive || self.head.framing != Framing::Empty;
        self.linger |= self.head.framing != Framing::Empty;
        codec::write_plain(&mut self.out, code, text, &self.head, close);
        self.client.write_all(&self.out).await.is_ok() && !close
    }
}

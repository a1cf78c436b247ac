//! Forwards one parsed request upstream and relays the response: backend choice, pooled raw
//! connections, retries on another backend (any request that was never written; idempotent
//! empty-bodied ones that were, up to `retries`), outlier accounting and metrics, as the
//! hyper path does. A pooled connection the upstream dropped while idle is no fault of the
//! backend: the request goes again on a new connection to it when it may. A remote agent
//! that answers `x-meridian-error: unserved` had no backend for it: a request without a
//! body goes to another cluster whatever its method. A `101` to an upgrade request turns
//! both connections into one tunnel until either side closes.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use http::HeaderValue;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::WriteHalf;

use super::chunked::Chunked;
use super::codec::{self, Framing, ParsedResponse};
use super::{Conn, Window};
use crate::agent::Shared;
use crate::backend::Backend;
use crate::balance::{Attempts, failed};
use crate::metrics::RouteMetrics;
use crate::table::PortRoute;
use crate::upstream::{checkin_raw, checkout_raw};

/// Why an attempt did not deliver a response.
enum Failure {
    /// No connection could be had.
    Connect(crate::upstream::ConnectError),
    /// Nothing was written: any request may go elsewhere.
    Unsent(io::Error),
    /// Written (in part or whole), but no complete response head came back; `quiet` when
    /// not one response byte did.
    Sent { error: io::Error, quiet: bool },
    /// The client's chunked body is malformed.
    BadBody,
    /// A remote agent answered that it had no backend for the request (it read no body).
    Unserved,
    /// A remote agent answered that its backends failed with a replayable request.
    RemoteFailed,
    /// The client went away, or the response broke after its head reached the client:
    /// the client connection can only be closed.
    Abort,
}

/// Forwards the request in `conn.head` (its head consumed, its body pending); returns
/// whether the client connection stays open.
pub(super) async fn forward(
    conn: &mut Conn,
    shared: &Shared,
    route: &PortRoute,
    forwarded_by: Option<&HeaderValue>,
) -> bool {
    route.metrics.requests.inc();
    let started = Instant::now();
    // Loop prevention: a request another agent forwarded is served by local endpoints only.
    let local_only = conn.head.forwarded;
    let replayable = conn.head.idempotent && conn.head.framing == Framing::Empty;
    let mut tries = Attempts::default();
    loop {
        let choice = match tries.next(shared, route, local_only) {
            Ok(choice) => choice,
            Err(g) => {
                let (metrics, status) = (&route.metrics, g.status.as_u16());
                return own_answer(conn, metrics, started, status, &g.text, g.kind).await;
            }
        };
        let backend = choice.backend;
        let fwd = if choice.remote {
            forwarded_by.map(HeaderValue::as_bytes)
        } else {
            None
        };
        let mut fresh = false;
        let outcome = loop {
            let (up, reused) =
                match checkout_raw(backend, fresh, shared.settings.connect_timeout).await {
                    Ok(x) => x,
                    Err(e) => break Err(Failure::Connect(e)),
                };
            // Remote agents get the global name; local endpoints the client's Host.
            let host = if choice.remote {
                Some(route.remote_host.as_bytes())
            } else if conn.head.has_host {
                Some(&conn.head.host[..])
            } else {
                None
            };
            codec::write_upstream_head(&mut conn.out, &conn.head, host, fwd);
            let _flight = backend.start();
            let attempt = exchange(conn, up, backend, shared, route, started);
            let r = tokio::select! {
                r = attempt => r,
                // Drain timeout passed after the backend left the configuration.
                () = backend.killed() => Err(Failure::Abort),
            };
            match r {
                // A pooled connection the upstream closed while it sat idle: not the
                // backend's fault; again on a new connection when the request allows it.
                Err(Failure::Unsent(_)) if reused => fresh = true,
                Err(Failure::Sent { quiet: true, .. }) if reused && replayable => fresh = true,
                r => break r,
            }
        };
        match outcome {
            Ok(keep) => return keep,
            Err(Failure::Connect(e)) => {
                failed(shared, route, backend);
                tries.last_error = Some(e.to_string());
            }
            Err(Failure::Unsent(e)) => {
                failed(shared, route, backend);
                tries.last_error = Some(e.to_string());
            }
            Err(Failure::Unserved) => {
                // Its HEALTH answer will say so too.
                tries.remote_unserved();
            }
            Err(Failure::RemoteFailed) => {
                // That cluster's trouble, not its agent's: counted as a try, not a failure.
                tries.sent_failures += 1;
                if tries.sent_failures > shared.settings.retries {
                    let text = format!(
                        "{}: upstream failed in every cluster tried\n",
                        route.service_key
                    );
                    return own_answer(conn, &route.metrics, started, 502, &text, "failed").await;
                }
                tries.last_error = Some("the other cluster's backends failed".into());
            }
            Err(Failure::Sent { error, .. }) => {
                failed(shared, route, backend);
                tries.sent_failures += 1;
                if !replayable || tries.sent_failures > shared.settings.retries {
                    let text = format!("{}: upstream failed: {error}\n", route.service_key);
                    return own_answer(conn, &route.metrics, started, 502, &text, "failed").await;
                }
                tries.last_error = Some(error.to_string());
            }
            Err(Failure::BadBody) => {
                conn.head.keep_alive = false;
                shared.metrics.refused.inc();
                let text = "malformed chunked request body\n";
                return own_answer(conn, &route.metrics, started, 400, text, "unserved").await;
            }
            Err(Failure::Abort) => return false,
        }
    }
}

/// The agent's own answer to a routed request, counted as an error; `kind` is its
/// `x-meridian-error` value.
async fn own_answer(
    conn: &mut Conn,
    metrics: &RouteMetrics,
    started: Instant,
    code: u16,
    text: &str,
    kind: &str,
) -> bool {
    metrics.latency.observe(started.elapsed().as_secs_f64());
    metrics.errors.inc();
    conn.answer(code, text, Some(kind)).await
}

fn sent(error: io::Error, quiet: bool) -> Failure {
    Failure::Sent { error, quiet }
}

/// Writes all of `data`, telling whether anything at all was written when it fails.
async fn write_first(up: &mut TcpStream, data: &[u8]) -> Result<(), Failure> {
    let mut written = 0;
    while written < data.len() {
        match up.write(&data[written..]).await {
            Ok(0) => {
                let e = io::Error::from(io::ErrorKind::WriteZero);
                return Err(if written == 0 {
                    Failure::Unsent(e)
                } else {
                    sent(e, true)
                });
            }
            Ok(n) => written += n,
            Err(e) if written == 0 => return Err(Failure::Unsent(e)),
            Err(e) => return Err(sent(e, true)),
        }
    }
    Ok(())
}

/// Reads more of the client's body; its end is the client's failure.
async fn fill_client(inbuf: &mut Window, client: &mut TcpStream) -> Result<(), Failure> {
    match inbuf.fill(client).await {
        Ok(0) | Err(_) => Err(Failure::Abort),
        Ok(_) => Ok(()),
    }
}

/// Reads more of the response body after its head went to the client.
async fn fill_body(upbuf: &mut Window, up: &mut TcpStream) -> Result<(), Failure> {
    match upbuf.fill(up).await {
        Ok(0) => {
            tracing::debug!("upstream closed inside a response body");
            Err(Failure::Abort)
        }
        Err(error) => {
            tracing::debug!(%error, "upstream failed inside a response body");
            Err(Failure::Abort)
        }
        Ok(_) => Ok(()),
    }
}

/// One attempt on `up`: `conn.out` holds the upstream head. Sends the request, relays the
/// response; returns whether the client connection stays open.
async fn exchange(
    conn: &mut Conn,
    mut up: TcpStream,
    backend: &Arc<Backend>,
    shared: &Shared,
    route: &PortRoute,
    started: Instant,
) -> Result<bool, Failure> {
    let metrics = &route.metrics;
    let Conn {
        client,
        inbuf,
        upbuf,
        head,
        out,
        linger,
    } = conn;

    // The head goes out with whatever body bytes came with it, in one write.
    let mut chunked = Chunked::default();
    let first = match head.framing {
        Framing::Empty | Framing::ToEof => 0,
        Framing::Length(n) => inbuf
            .pending()
            .len()
            .min(usize::try_from(n).unwrap_or(usize::MAX)),
        Framing::Chunked => chunked
            .feed(inbuf.pending(), |_| {})
            .map_err(|_| Failure::BadBody)?,
    };
    out.extend_from_slice(&inbuf.pending()[..first]);
    write_first(&mut up, out).await?;
    inbuf.consume(first);
    // The rest of the body, unless the upstream answers before it has all of it (e.g.
    // 413): then that answer is relayed and both connections close afterwards.
    let mut body_sent = true;
    if head.framing != Framing::Empty {
        let (rd, mut wr) = up.split();
        tokio::select! {
            biased;
            r = send_rest(&mut wr, client, inbuf, head.framing, first, &mut chunked) => r?,
            _ = rd.readable() => {
                body_sent = false;
                head.keep_alive = false;
                *linger = true;
            }
        }
    }

    // The response head; interim (1xx) ones are dropped.
    let mut heard = false;
    let resp = loop {
        match codec::parse_response(upbuf.pending(), head, out) {
            Ok(ParsedResponse::Final(r)) => break r,
            Ok(ParsedResponse::Interim(len)) => {
                upbuf.consume(len);
                continue;
            }
            Ok(ParsedResponse::Partial) => {}
            Err(e) => return Err(sent(io::Error::other(format!("bad response: {e}")), false)),
        }
        match upbuf.fill(&mut up).await {
            Ok(0) => {
                let what = if heard {
                    "connection closed inside the response head"
                } else {
                    "connection closed before the response"
                };
                upbuf.consume(upbuf.pending().len());
                return Err(sent(io::Error::other(what), !heard));
            }
            Ok(_) => heard = true,
            Err(e) => {
                upbuf.consume(upbuf.pending().len());
                return Err(sent(e, !heard));
            }
        }
    };
    upbuf.consume(resp.len);
    if resp.unserved && backend.cluster().is_some() && body_sent && head.framing == Framing::Empty {
        // The remote agent reached no backend: drop its answer and the connection (its
        // body is left unread) and let another cluster have the request.
        upbuf.consume(upbuf.pending().len());
        return Err(Failure::Unserved);
    }
    if resp.agent_failed
        && backend.cluster().is_some()
        && head.idempotent
        && head.framing == Framing::Empty
    {
        // The remote agent's backends failed this idempotent request: another cluster may
        // still answer it.
        upbuf.consume(upbuf.pending().len());
        return Err(Failure::RemoteFailed);
    }
    metrics.latency.observe(started.elapsed().as_secs_f64());
    if resp.code >= 500 {
        failed(shared, route, backend);
    } else {
        backend.record_success();
    }
    if resp.switching {
        return tunnel(client, up, inbuf, upbuf, out).await;
    }

    // The head goes to the client with the body bytes that came with it, in one write.
    let result = relay_body(client, &mut up, upbuf, out, resp.framing, resp.dechunk).await;
    if result.is_err() {
        upbuf.consume(upbuf.pending().len());
        return Err(Failure::Abort);
    }
    // Anything past the response would be answering a request never sent.
    if resp.upstream_reusable && body_sent && upbuf.pending().is_empty() {
        checkin_raw(backend, up);
    } else {
        upbuf.consume(upbuf.pending().len());
    }
    Ok(resp.client_keep_alive)
}

/// After a `101`: sends the client its head (with whatever the upstream already sent
/// behind it) and the upstream whatever the client already sent, then relays both ways
/// until either side closes. The client connection ends with the tunnel.
async fn tunnel(
    client: &mut TcpStream,
    mut up: TcpStream,
    inbuf: &mut Window,
    upbuf: &mut Window,
    out: &mut Vec<u8>,
) -> Result<bool, Failure> {
    out.extend_from_slice(upbuf.pending());
    upbuf.consume(upbuf.pending().len());
    client.write_all(out).await.map_err(|_| Failure::Abort)?;
    if !inbuf.pending().is_empty() {
        up.write_all(inbuf.pending())
            .await
            .map_err(|_| Failure::Abort)?;
        inbuf.consume(inbuf.pending().len());
    }
    if let Err(error) = tokio::io::copy_bidirectional(client, &mut up).await {
        tracing::debug!(%error, "tunnel ended");
    }
    Ok(false)
}

/// Sends what is left of the request body after its first `first` bytes.
async fn send_rest(
    up: &mut WriteHalf<'_>,
    client: &mut TcpStream,
    inbuf: &mut Window,
    framing: Framing,
    first: usize,
    chunked: &mut Chunked,
) -> Result<(), Failure> {
    match framing {
        Framing::Length(n) => {
            let mut left = n - first as u64;
            while left > 0 {
                fill_client(inbuf, client).await?;
                let take = inbuf
                    .pending()
                    .len()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                up.write_all(&inbuf.pending()[..take])
                    .await
                    .map_err(|e| sent(e, true))?;
                inbuf.consume(take);
                left -= take as u64;
            }
        }
        Framing::Chunked => {
            while !chunked.done() {
                fill_client(inbuf, client).await?;
                let take = chunked
                    .feed(inbuf.pending(), |_| {})
                    .map_err(|_| Failure::BadBody)?;
                up.write_all(&inbuf.pending()[..take])
                    .await
                    .map_err(|e| sent(e, true))?;
                inbuf.consume(take);
            }
        }
        Framing::Empty | Framing::ToEof => {}
    }
    Ok(())
}

/// Writes `out` (the response head) and the response body to the client.
async fn relay_body(
    client: &mut TcpStream,
    up: &mut TcpStream,
    upbuf: &mut Window,
    out: &mut Vec<u8>,
    framing: Framing,
    dechunk: bool,
) -> Result<(), Failure> {
    let to_client = |e: io::Error| {
        tracing::debug!(error = %e, "client went away inside a response");
        Failure::Abort
    };
    match framing {
        Framing::Empty => client.write_all(out).await.map_err(to_client)?,
        Framing::Length(n) => {
            let first = upbuf
                .pending()
                .len()
                .min(usize::try_from(n).unwrap_or(usize::MAX));
            out.extend_from_slice(&upbuf.pending()[..first]);
            upbuf.consume(first);
            client.write_all(out).await.map_err(to_client)?;
            let mut left = n - first as u64;
            while left > 0 {
                fill_body(upbuf, up).await?;
                let take = upbuf
                    .pending()
                    .len()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                client
                    .write_all(&upbuf.pending()[..take])
                    .await
                    .map_err(to_client)?;
                upbuf.consume(take);
                left -= take as u64;
            }
        }
        Framing::Chunked => {
            let mut chunked = Chunked::default();
            loop {
                let take = if dechunk {
                    // An HTTP/1.0 client gets the payload only, delimited by the close.
                    chunked.feed(upbuf.pending(), |d| out.extend_from_slice(d))
                } else {
                    chunked.feed(upbuf.pending(), |_| {})
                }
                .map_err(|_| {
                    tracing::debug!("malformed chunked response body");
                    Failure::Abort
                })?;
                if !dechunk {
                    out.extend_from_slice(&upbuf.pending()[..take]);
                }
                upbuf.consume(take);
                client.write_all(out).await.map_err(to_client)?;
                out.clear();
                if chunked.done() {
                    break;
                }
                fill_body(upbuf, up).await?;
            }
        }
        Framing::ToEof => {
            out.extend_from_slice(upbuf.pending());
            upbuf.consume(upbuf.pending().len());
            client.write_all(out).await.map_err(to_client)?;
            loop {
                match upbuf.fill(up).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(%error, "upstream failed inside a response body");
                        return Err(Failure::Abort);
                    }
                }
                client.write_all(upbuf.pending()).await.map_err(to_client)?;
                upbuf.consume(upbuf.pending().len());
            }
        }
    }
    Ok(())
}

//! The L4 proxy (plain TCP and TLS passed through): a client connection is spliced to a
//! local endpoint or, through the peer protocol's `STREAM`, to a remote lb-agent that has
//! connected it to one of its own endpoints. A connect failure, or a remote agent that has
//! no endpoint left, tries another backend, so a stream is only lost once it has started.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::agent::Shared;
use crate::backend::{Backend, now_ms};
use crate::balance::{Choice, Tried, failed, pick};
use crate::table::{PortRoute, SniRoute};
use crate::upstream::{ConnectError, connect_tcp};

/// The peer-protocol line that asks a remote agent for a stream to one of its endpoints;
/// it answers `OK` once connected, or `ERR <reason>`.
pub fn stream_preamble(route: &PortRoute, from: &str) -> String {
    format!(
        "MERIDIAN/1 STREAM {} {} {} {}\n",
        route.namespace, route.service, route.port.port, from
    )
}

/// Why one backend could not be had for a stream.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No connection to the backend (or the remote agent).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The remote agent's answer did not come, or was not `OK`/`ERR`.
    #[error("remote agent {addr}: {source}")]
    Handshake {
        /// The agent's peer address.
        addr: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: io::Error,
    },
    /// The remote agent has no endpoint that takes the stream: not the agent's fault.
    #[error("remote agent has no endpoint: {0}")]
    Unserved(String),
}

/// Reads the remote agent's one-line answer byte by byte, so nothing after it is consumed.
async fn read_answer(s: &mut TcpStream) -> io::Result<String> {
    let mut line = Vec::with_capacity(16);
    loop {
        let b = s.read_u8().await?;
        if b == b'\n' {
            return Ok(String::from_utf8_lossy(&line).into_owned());
        }
        if line.len() >= 256 {
            return Err(io::Error::other("answer line too long"));
        }
        line.push(b);
    }
}

/// Opens a stream to one chosen backend.
async fn open(
    shared: &Shared,
    route: &PortRoute,
    choice: &Choice<'_>,
) -> Result<TcpStream, OpenError> {
    let addr = choice.backend.tcp_addr();
    let timeout = shared.settings.connect_timeout;
    let mut s = connect_tcp(addr, timeout).await?;
    if !choice.remote {
        return Ok(s);
    }
    let handshake = async {
        s.write_all(stream_preamble(route, &shared.settings.cluster).as_bytes())
            .await?;
        read_answer(&mut s).await
    };
    // The remote agent connects to its endpoint before it answers: allow for both.
    let answer = match tokio::time::timeout(timeout * 2, handshake).await {
        Ok(Ok(a)) => a,
        Ok(Err(source)) => return Err(OpenError::Handshake { addr, source }),
        Err(_) => {
            let source = io::Error::new(io::ErrorKind::TimedOut, "no answer");
            return Err(OpenError::Handshake { addr, source });
        }
    };
    match answer.strip_prefix("ERR ") {
        _ if answer == "OK" => Ok(s),
        Some(reason) => Err(OpenError::Unserved(reason.to_string())),
        None => Err(OpenError::Handshake {
            addr,
            source: io::Error::other(format!("unexpected answer {answer:?}")),
        }),
    }
}

/// A stream to a backend of `route`, trying backends by policy until one connects;
/// `local_only` for streams another agent sent.
pub async fn connect(
    shared: &Shared,
    route: &PortRoute,
    local_only: bool,
) -> Option<(TcpStream, Arc<Backend>)> {
    let mut tried = Tried::default();
    let mut attempts = 0u32;
    while let Some(choice) = pick(route, local_only, &tried, now_ms()) {
        tried.add(choice.backend);
        if attempts > 0 {
            shared.metrics.retries.inc();
        }
        attempts += 1;
        match open(shared, route, &choice).await {
            Ok(s) => {
                choice.backend.record_success();
                return Some((s, choice.backend.clone()));
            }
            Err(error @ OpenError::Unserved(_)) => {
                // Its HEALTH answer will say so too; meanwhile the stream goes elsewhere.
                tracing::debug!(%error, "remote agent cannot take the stream");
            }
            Err(error) => {
                tracing::debug!(%error, "stream upstream connect failed; trying another backend");
                failed(shared, route, choice.backend);
            }
        }
    }
    None
}

/// Proxies one connection; `preread` are client bytes already read (a ClientHello, or
/// what followed a peer preamble).
pub async fn serve(
    client: TcpStream,
    shared: Arc<Shared>,
    route: Arc<PortRoute>,
    local_only: bool,
    preread: &[u8],
) {
    let _ = client.set_nodelay(true);
    route.metrics.requests.inc();
    let started = Instant::now();
    let upstream = connect(&shared, &route, local_only).await;
    route
        .metrics
        .latency
        .observe(started.elapsed().as_secs_f64());
    let Some((server, backend)) = upstream else {
        route.metrics.errors.inc();
        tracing::debug!(service = %route.service_key, "no reachable backend for stream");
        return;
    };
    splice(client, server, &backend, preread).await;
}

/// Relays both ways until either side ends, or the backend is killed after draining.
pub async fn splice(
    mut client: TcpStream,
    mut server: TcpStream,
    backend: &Arc<Backend>,
    preread: &[u8],
) {
    let _flight = backend.start();
    if !preread.is_empty() && server.write_all(preread).await.is_err() {
        return;
    }
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut client, &mut server) => {
            if let Err(error) = r {
                tracing::debug!(%error, "stream ended");
            }
        }
        // Drain timeout passed after the backend left the configuration.
        _ = backend.killed() => {}
    }
}

/// How long a client may take to send its ClientHello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one connection of the shared HTTPS listener: reads the ClientHello, routes by its
/// server name to a Service's TLS port and passes the stream through untouched — or, for a
/// Service that names a certificate, terminates TLS ([`crate::terminate`]). A name that
/// routes nowhere gets an `unrecognized_name` alert.
pub async fn serve_tls(mut client: TcpStream, shared: Arc<Shared>) {
    let mut buf = Vec::with_capacity(2048);
    let read = async {
        loop {
            match crate::sni::parse(&buf) {
                Ok(crate::sni::Hello::Partial) => {}
                Ok(crate::sni::Hello::Complete(name)) => return Ok(name),
                Err(e) => return Err(io::Error::other(e)),
            }
            let mut chunk = [0u8; 4096];
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let name = match tokio::time::timeout(HELLO_TIMEOUT, read).await {
        Ok(Ok(name)) => name,
        Ok(Err(error)) => {
            shared.metrics.tls_refused.inc();
            tracing::debug!(%error, "no usable ClientHello");
            return;
        }
        Err(_) => {
            shared.metrics.tls_refused.inc();
            return;
        }
    };
    let route = {
        let table = shared.table.borrow();
        name.as_deref()
            .and_then(|n| table.route_for_sni(n))
            .cloned()
    };
    match route {
        Some(SniRoute::Pass(route)) => serve(client, shared, route, false, &buf).await,
        Some(SniRoute::Terminate(config)) => {
            crate::terminate::serve(client, buf, config, shared).await;
        }
        Some(SniRoute::Broken(why)) => {
            shared.metrics.tls_refused.inc();
            tracing::warn!(server_name = ?name, %why, "cannot terminate TLS");
            let _ = client.write_all(&crate::sni::INTERNAL_ERROR_ALERT).await;
            let _ = client.shutdown().await;
        }
        None => {
            shared.metrics.tls_refused.inc();
            tracing::debug!(server_name = ?name, "no federated TLS service for the server name");
            let _ = client.write_all(&crate::sni::UNRECOGNIZED_NAME_ALERT).await;
            let _ = client.shutdown().await;
        }
    }
}

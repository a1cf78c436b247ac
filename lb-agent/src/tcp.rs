//! The L4 proxy: a client connection is spliced to a local endpoint or, through the peer
//! protocol, to a remote lb-agent; connect failures try another backend.

use std::sync::Arc;
use std::time::Instant;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::agent::Shared;
use crate::backend::now_ms;
use crate::balance::{Tried, pick};
use crate::table::PortRoute;
use crate::upstream::connect_tcp;

/// The peer-protocol line that asks a remote agent for a raw stream to its local endpoints.
pub fn tcp_preamble(route: &PortRoute, from: &str) -> String {
    format!(
        "MERIDIAN/1 TCP {} {} {} {}\n",
        route.namespace, route.service, route.port.port, from
    )
}

/// Proxies one connection; `preread` are client bytes already read (after a peer preamble).
pub async fn serve(
    mut client: TcpStream,
    shared: Arc<Shared>,
    route: Arc<PortRoute>,
    local_only: bool,
    preread: &[u8],
) {
    let _ = client.set_nodelay(true);
    route.metrics.requests.inc();
    let started = Instant::now();
    let mut tried = Tried::default();
    let mut upstream = None;
    while let Some(choice) = pick(&route, local_only, &tried, now_ms()) {
        let backend = choice.backend.clone();
        tried.add(&backend);
        let attempt = async {
            let mut s = connect_tcp(backend.tcp_addr(), shared.settings.connect_timeout).await?;
            if choice.remote {
                let line = tcp_preamble(&route, &shared.settings.cluster);
                s.write_all(line.as_bytes()).await.map_err(|source| {
                    crate::upstream::ConnectError::Io {
                        addr: backend.tcp_addr(),
                        source,
                    }
                })?;
            }
            Ok::<_, crate::upstream::ConnectError>(s)
        };
        match attempt.await {
            Ok(s) => {
                backend.record_success();
                upstream = Some((s, backend));
                break;
            }
            Err(error) => {
                tracing::debug!(%error, "tcp upstream connect failed; trying another backend");
                shared.metrics.retries.inc();
                if backend.record_failure(&shared.settings.outlier) {
                    shared.metrics.ejections.inc();
                }
            }
        }
    }
    route
        .metrics
        .latency
        .observe(started.elapsed().as_secs_f64());
    let Some((mut server, backend)) = upstream else {
        route.metrics.errors.inc();
        tracing::debug!(service = %route.service_key, "no reachable backend for tcp connection");
        return;
    };
    let _flight = backend.start();
    if !preread.is_empty() && server.write_all(preread).await.is_err() {
        route.metrics.errors.inc();
        return;
    }
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut client, &mut server) => {
            if let Err(error) = r {
                tracing::debug!(%error, "tcp stream ended");
            }
        }
        // Drain timeout passed after the backend left the configuration.
        _ = backend.killed() => {}
    }
}

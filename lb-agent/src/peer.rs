//! The peer listener (lb-agent to lb-agent): streams to local endpoints (`STREAM`, which
//! answers whether it got one, and the older `TCP`, which does not) and `HEALTH` answers,
//! plus the client side of `HEALTH` used by active checks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::agent::Shared;
use crate::backend::now_ms;

/// Longest accepted preamble line.
const MAX_LINE: usize = 1024;
/// Time a peer has to send its preamble.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(5);

/// A parsed preamble.
#[derive(Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Raw stream to a local endpoint of a Service port, answered `OK` once connected or
    /// `ERR <reason>` when no local endpoint takes it.
    Stream {
        /// Namespace.
        namespace: &'a str,
        /// Service.
        service: &'a str,
        /// Port number (or name).
        port: &'a str,
        /// Asking cluster.
        from: &'a str,
    },
    /// A datagram (on the peer UDP socket) for a local endpoint of a UDP Service port.
    Udp {
        /// Namespace.
        namespace: &'a str,
        /// Service.
        service: &'a str,
        /// Port number (or name).
        port: &'a str,
        /// Sending cluster.
        from: &'a str,
    },
    /// Raw stream to a local endpoint of a Service port, without an answer (older agents).
    Tcp {
        /// Namespace.
        namespace: &'a str,
        /// Service.
        service: &'a str,
        /// Port number (or name).
        port: &'a str,
        /// Asking cluster.
        from: &'a str,
    },
    /// Ready local endpoints per Service.
    Health {
        /// Asking cluster.
        from: &'a str,
    },
}

/// Parses one preamble line (without its newline).
pub fn parse(line: &str) -> Option<Request<'_>> {
    let mut words = line.trim_end_matches('\r').split(' ');
    if words.next()? != "MERIDIAN/1" {
        return None;
    }
    let r = match words.next()? {
        "STREAM" => Request::Stream {
            namespace: words.next()?,
            service: words.next()?,
            port: words.next()?,
            from: words.next()?,
        },
        "UDP" => Request::Udp {
            namespace: words.next()?,
            service: words.next()?,
            port: words.next()?,
            from: words.next()?,
        },
        "TCP" => Request::Tcp {
            namespace: words.next()?,
            service: words.next()?,
            port: words.next()?,
            from: words.next()?,
        },
        "HEALTH" => Request::Health {
            from: words.next()?,
        },
        _ => return None,
    };
    words.next().is_none().then_some(r)
}

/// Parses a `HEALTH` answer: `OK ns/svc=N ...`.
pub fn parse_health(line: &str) -> Option<HashMap<String, u32>> {
    let mut words = line.split_whitespace();
    if words.next()? != "OK" {
        return None;
    }
    words
        .map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Reads up to the first newline; returns the line and the bytes after it.
async fn read_line(stream: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = vec![0u8; MAX_LINE];
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Err(std::io::Error::other("line too long"));
        }
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        len += n;
        if let Some(i) = buf[..len].iter().position(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(&buf[..i]).into_owned();
            return Ok((line, buf[i + 1..len].to_vec()));
        }
    }
}

/// Serves one peer connection.
pub async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let (line, rest) = match tokio::time::timeout(PREAMBLE_TIMEOUT, read_line(&mut stream)).await {
        Ok(Ok(x)) => x,
        Ok(Err(error)) => {
            tracing::debug!(%error, "peer preamble");
            return;
        }
        Err(_) => return,
    };
    let table = shared.table.borrow().clone();
    match parse(&line) {
        Some(Request::Health { .. }) => {
            let _ = stream
                .write_all(table.health_line(now_ms()).as_bytes())
                .await;
            let _ = stream.shutdown().await;
        }
        Some(Request::Tcp {
            namespace,
            service,
            port,
            from,
        }) => {
            let Some(route) = table.route_for_peer(namespace, service, port).cloned() else {
                tracing::debug!(%namespace, %service, %port, %from, "peer asked for an unknown service port");
                return;
            };
            crate::tcp::serve(stream, shared, route, true, &rest).await;
        }
        Some(Request::Stream {
            namespace,
            service,
            port,
            from,
        }) => {
            let route = table.route_for_peer(namespace, service, port).cloned();
            let upstream = match &route {
                Some(r) if r.proto.is_stream() => {
                    r.metrics.requests.inc();
                    crate::tcp::connect(&shared, r, true).await
                }
                _ => None,
            };
            let Some((server, backend)) = upstream else {
                tracing::debug!(%namespace, %service, %port, %from, "peer stream: no local endpoint");
                if let Some(r) = &route {
                    r.metrics.errors.inc();
                }
                let _ = stream.write_all(b"ERR no-endpoint\n").await;
                let _ = stream.shutdown().await;
                return;
            };
            if stream.write_all(b"OK\n").await.is_err() {
                return;
            }
            crate::tcp::splice(stream, server, &backend, &rest).await;
        }
        Some(Request::Udp { .. }) | None => {
            tracing::debug!(line = %line.escape_debug(), "bad peer preamble");
            let _ = stream.write_all(b"ERR bad preamble\n").await;
        }
    }
}

/// Asks the agent at `peer` for its `HEALTH` line.
pub async fn health_check(
    peer: SocketAddr,
    me: &str,
    timeout: Duration,
) -> Option<HashMap<String, u32>> {
    let ask = async {
        let mut s = TcpStream::connect(peer).await.ok()?;
        s.write_all(format!("MERIDIAN/1 HEALTH {me}\n").as_bytes())
            .await
            .ok()?;
        let mut out = Vec::new();
        // The answer is one line and the peer closes; cap what a broken peer can send.
        (&mut s).take(1 << 20).read_to_end(&mut out).await.ok()?;
        let text = String::from_utf8(out).ok()?;
        parse_health(text.lines().next()?)
    };
    tokio::time::timeout(timeout, ask).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preambles() {
        assert_eq!(
            parse("MERIDIAN/1 TCP shop web 80 east"),
            Some(Request::Tcp {
                namespace: "shop",
                service: "web",
                port: "80",
                from: "east"
            })
        );
        assert_eq!(
            parse("MERIDIAN/1 STREAM shop web https east"),
            Some(Request::Stream {
                namespace: "shop",
                service: "web",
                port: "https",
                from: "east"
            })
        );
        assert_eq!(
            parse("MERIDIAN/1 HEALTH east\r"),
            Some(Request::Health { from: "east" })
        );
        for bad in [
            "",
            "MERIDIAN/2 HEALTH a",
            "MERIDIAN/1 TCP shop web 80",
            "MERIDIAN/1 HEALTH a b",
            "MERIDIAN/1 PING a",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn health_answers() {
        let m = parse_health("OK shop/web=3 a/b=0").unwrap();
        assert_eq!(m["shop/web"], 3);
        assert_eq!(m["a/b"], 0);
        assert!(parse_health("OK").unwrap().is_empty());
        assert!(parse_health("ERR x").is_none());
        assert!(parse_health("OK shop/web=x").is_none());
    }
}

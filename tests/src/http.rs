//! A minimal blocking HTTP/1.1 client for end-to-end checks through lb-agents: one request
//! per connection, status, headers and body back, with a deadline.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased (last value wins).
    pub headers: BTreeMap<String, String>,
    /// Body as text.
    pub body: String,
}

impl Response {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The cluster-sim cluster whose pod answered (`x-sim-cluster`), `?` when none said.
    pub fn sim_cluster(&self) -> String {
        self.header("x-sim-cluster").unwrap_or("?").to_string()
    }
}

/// `GET /` over TLS to `addr` with SNI and `Host` `name`, on a new connection.
pub fn tls_get(
    config: &std::sync::Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<Response> {
    let timeout = Duration::from_secs(5);
    let tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    let server =
        rustls::pki_types::ServerName::try_from(name.to_string()).map_err(std::io::Error::other)?;
    let conn =
        rustls::ClientConnection::new(config.clone(), server).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without close_notify after a complete response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    parse(&raw).ok_or_else(|| std::io::Error::other(format!("bad response {raw:?}")))
}

/// Sends `method path` with `Host: host` to `addr` and reads the whole response
/// (`Connection: close`), failing on any I/O error or after `timeout`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    timeout: Duration,
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse(&raw).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("malformed response: {:?}", String::from_utf8_lossy(&raw)),
        )
    })
}

/// `GET path` with `Host: host`.
pub fn get(addr: SocketAddr, host: &str, path: &str) -> std::io::Result<Response> {
    request(addr, "GET", host, path, Duration::from_secs(5))
}

/// Reads a whole response (head and body, chunked or not) as received.
pub fn parse(raw: &[u8]) -> Option<Response> {
    let text = String::from_utf8_lossy(raw);
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else {
        rest.to_string()
    };
    Some(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut s: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n")?;
        let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if n == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..n)?);
        s = rest.get(n + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_bodies() {
        let r = parse(b"HTTP/1.1 200 OK\r\nX-Sim-Pod: p\r\nContent-Length: 3\r\n\r\nabc").unwrap();
        assert_eq!(
            (r.status, r.header("x-sim-pod"), r.body.as_str()),
            (200, Some("p"), "abc")
        );
        let r = parse(b"HTTP/1.1 503 No\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!((r.status, r.body.as_str()), (503, "abcde"));
        assert!(parse(b"garbage").is_none());
    }
}

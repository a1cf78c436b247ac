//! DNS lookups for end-to-end checks, read with hickory-proto (an independent DNS codec):
//! one A query over UDP to a given server, the answer's addresses in order.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};

/// A DNS answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Response code.
    pub rcode: ResponseCode,
    /// A records, in the order the server gave them.
    pub addresses: Vec<String>,
    /// Whether the server answered authoritatively.
    pub authoritative: bool,
}

/// Asks `server` for the A records of `name` over UDP.
pub fn lookup_a(server: SocketAddr, name: &str) -> std::io::Result<Answer> {
    let mut q = Message::query();
    q.add_query(Query::query(
        Name::from_ascii(name).map_err(std::io::Error::other)?,
        RecordType::A,
    ));
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_read_timeout(Some(Duration::from_secs(3)))?;
    socket.send_to(&q.to_vec().map_err(std::io::Error::other)?, server)?;
    let mut buf = [0u8; 4096];
    let (len, _) = socket.recv_from(&mut buf)?;
    let m = Message::from_vec(&buf[..len]).map_err(std::io::Error::other)?;
    Ok(Answer {
        rcode: m.metadata.response_code,
        addresses: m
            .answers
            .iter()
            .filter(|r| r.record_type() == RecordType::A)
            .map(|r| r.data.to_string())
            .collect(),
        authoritative: m.metadata.authoritative,
    })
}

//! DNS lookups for end-to-end checks, read with hickory-proto (an independent DNS codec):
//! one A query over UDP to a given server, the answer's addresses in order; any query over
//! UDP or TCP, the whole response.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
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

/// Asks `server` for the `rtype` records of `name` over TCP (length-prefixed, RFC 1035
/// §4.2.2) or UDP, from an unspecified local address; returns the whole response.
pub fn query(
    server: SocketAddr,
    name: &str,
    rtype: RecordType,
    tcp: bool,
) -> std::io::Result<Message> {
    let mut q = Message::query();
    q.add_query(Query::query(
        Name::from_ascii(name).map_err(std::io::Error::other)?,
        rtype,
    ));
    let bytes = q.to_vec().map_err(std::io::Error::other)?;
    let timeout = Some(Duration::from_secs(3));
    let response = if tcp {
        let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(3))?;
        stream.set_read_timeout(timeout)?;
        let len = u16::try_from(bytes.len()).map_err(std::io::Error::other)?;
        stream.write_all(&[&len.to_be_bytes()[..], &bytes].concat())?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len)?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut buf)?;
        buf
    } else {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.set_read_timeout(timeout)?;
        socket.send_to(&bytes, server)?;
        let mut buf = [0u8; 65_535];
        let (len, _) = socket.recv_from(&mut buf)?;
        buf[..len].to_vec()
    };
    Message::from_vec(&response).map_err(std::io::Error::other)
}

//! Blocking clients for the protocols the lb-agents route besides plain HTTP, for
//! end-to-end checks: a WebSocket client, a UDP request with a deadline, SRV and
//! client-subnet DNS queries (read with hickory-proto), an h2c stream read line by line, and a
//! TLS client configuration for the simulated pods' self-signed certificates.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};

/// An open WebSocket connection (client side).
pub struct WebSocket {
    stream: TcpStream,
    /// The first message the server sent (the simulated pods name themselves).
    pub greeting: String,
}

fn io_err(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.into())
}

impl WebSocket {
    /// Upgrades a connection to `addr` with `Host: host`; fails unless the answer is 101.
    pub fn connect(addr: SocketAddr, host: &str, timeout: Duration) -> std::io::Result<Self> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        write!(
            stream,
            "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )?;
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte)? == 0 {
                return Err(io_err(format!(
                    "closed during the handshake: {:?}",
                    String::from_utf8_lossy(&head)
                )));
            }
            head.push(byte[0]);
        }
        if !head.starts_with(b"HTTP/1.1 101") {
            return Err(io_err(format!(
                "not switched: {:?}",
                String::from_utf8_lossy(&head)
            )));
        }
        let mut ws = WebSocket {
            stream,
            greeting: String::new(),
        };
        ws.greeting = ws.receive()?;
        Ok(ws)
    }

    /// Sends one masked text message.
    pub fn send(&mut self, text: &str) -> std::io::Result<()> {
        let mask = [0x5a, 0x17, 0xc3, 0x08];
        let data = text.as_bytes();
        let mut frame = vec![0x81];
        match data.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(data.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame)
    }

    /// Reads one unmasked text message.
    pub fn receive(&mut self) -> std::io::Result<String> {
        let mut head = [0u8; 2];
        self.stream.read_exact(&mut head)?;
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                self.stream.read_exact(&mut b)?;
                usize::from(u16::from_be_bytes(b))
            }
            127 => return Err(io_err("message too large")),
            n => usize::from(n),
        };
        let mut data = vec![0u8; len];
        self.stream.read_exact(&mut data)?;
        Ok(String::from_utf8_lossy(&data).into_owned())
    }

    /// Sends `text` and reads the echo.
    pub fn echo(&mut self, text: &str) -> std::io::Result<String> {
        self.send(text)?;
        self.receive()
    }
}

/// Sends `data` to `addr` from `socket` and waits up to `timeout` for one answer.
pub fn udp_ask(
    socket: &UdpSocket,
    addr: SocketAddr,
    data: &[u8],
    timeout: Duration,
) -> std::io::Result<Vec<u8>> {
    socket.set_read_timeout(Some(timeout))?;
    socket.send_to(data, addr)?;
    let mut buf = [0u8; 65_535];
    let (n, _) = socket.recv_from(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// One SRV record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srv {
    /// Priority.
    pub priority: u16,
    /// Weight.
    pub weight: u16,
    /// Port.
    pub port: u16,
    /// Target host, lower-case, with the trailing dot.
    pub target: String,
}

fn ask(server: SocketAddr, m: &Message) -> std::io::Result<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    let answer = udp_ask(
        &socket,
        server,
        &m.to_vec().map_err(std::io::Error::other)?,
        Duration::from_secs(3),
    )?;
    Message::from_vec(&answer).map_err(std::io::Error::other)
}

/// The SRV records of `name` from `server`, in the order given.
pub fn lookup_srv(server: SocketAddr, name: &str) -> std::io::Result<Vec<Srv>> {
    let mut q = Message::query();
    q.add_query(Query::query(
        Name::from_ascii(name).map_err(std::io::Error::other)?,
        RecordType::SRV,
    ));
    let m = ask(server, &q)?;
    Ok(m.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(s) => Some(Srv {
                priority: s.priority,
                weight: s.weight,
                port: s.port,
                target: s.target.to_string().to_ascii_lowercase(),
            }),
            _ => None,
        })
        .collect())
}

/// The A records of `name` as answered for a client in `subnet` (EDNS Client Subnet, as a
/// resolver sends it), with query ID `id`.
pub fn lookup_a_for(
    server: SocketAddr,
    name: &str,
    subnet: Option<(IpAddr, u8)>,
    id: u16,
) -> std::io::Result<Vec<String>> {
    let mut q = Message::query();
    q.metadata.id = id;
    q.add_query(Query::query(
        Name::from_ascii(name).map_err(std::io::Error::other)?,
        RecordType::A,
    ));
    if let Some((ip, prefix)) = subnet {
        let mut e = Edns::new();
        e.options_mut()
            .insert(EdnsOption::Subnet(ClientSubnet::new(ip, prefix, 0)));
        q.set_edns(e);
    }
    let m = ask(server, &q)?;
    Ok(m.answers
        .iter()
        .filter(|r| r.record_type() == RecordType::A)
        .map(|r| r.data.to_string())
        .collect())
}

/// A rustls client configuration that accepts any server certificate, with `alpn` offered:
/// the simulated pods' certificates are self-signed per cluster, and which pod answered is
/// read from the response, not from the certificate. Signatures are still checked.
pub fn any_cert_tls_config(alpn: &[&[u8]]) -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config
}

/// The verifier behind [`any_cert_tls_config`].
#[derive(Debug)]
struct AnyCert(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

//! The server name of a TLS ClientHello (RFC 8446 §4.1.2, RFC 6066 §3), read from the
//! first bytes of a connection without terminating TLS: the handshake message may span
//! several records and arrive in any number of reads.

/// Most bytes read while looking for a complete ClientHello (records and their headers).
pub const MAX_HELLO: usize = 64 * 1024;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXTENSION_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST: u8 = 0;
const RECORD_HEADER: usize = 5;

/// What the bytes read so far say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed.
    Partial,
    /// A complete ClientHello; its `server_name` host name, if it sent one.
    Complete(Option<String>),
}

/// Why the bytes are not a usable ClientHello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    /// The first record is not a TLS handshake record.
    #[error("not a TLS handshake")]
    NotTls,
    /// The first handshake message is not a ClientHello, or a length is inconsistent.
    #[error("malformed ClientHello")]
    Malformed,
    /// The ClientHello did not end within [`MAX_HELLO`] bytes.
    #[error("ClientHello too large")]
    TooLarge,
}

/// Reads the ClientHello at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Hello, HelloError> {
    // The handshake message, joined from the fragments of successive records.
    let mut joined: Vec<u8> = Vec::new();
    let mut single: Option<&[u8]> = None;
    let mut pos = 0;
    loop {
        let Some(header) = buf.get(pos..pos + RECORD_HEADER) else {
            return partial(buf);
        };
        // A record header: handshake type, a 3.x legacy version, a sane length.
        if header[0] != CONTENT_HANDSHAKE || header[1] != 3 {
            return Err(HelloError::NotTls);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > (1 << 14) + 2048 {
            return Err(HelloError::Malformed);
        }
        let Some(fragment) = buf.get(pos + RECORD_HEADER..pos + RECORD_HEADER + len) else {
            return partial(buf);
        };
        pos += RECORD_HEADER + len;
        let message: &[u8] = match (single, joined.is_empty()) {
            (None, true) => {
                single = Some(fragment);
                fragment
            }
            (Some(first), true) => {
                joined.extend_from_slice(first);
                joined.extend_from_slice(fragment);
                &joined
            }
            (_, false) => {
                joined.extend_from_slice(fragment);
                &joined
            }
        };
        if message[0] != HANDSHAKE_CLIENT_HELLO {
            return Err(HelloError::Malformed);
        }
        let Some(len_bytes) = message.get(1..4) else {
            continue;
        };
        let body_len = (usize::from(len_bytes[0]) << 16)
            | (usize::from(len_bytes[1]) << 8)
            | usize::from(len_bytes[2]);
        if 4 + body_len > MAX_HELLO {
            return Err(HelloError::TooLarge);
        }
        if let Some(body) = message.get(4..4 + body_len) {
            return server_name(body).map(Hello::Complete);
        }
    }
}

fn partial(buf: &[u8]) -> Result<Hello, HelloError> {
    if buf.len() >= MAX_HELLO {
        Err(HelloError::TooLarge)
    } else {
        Ok(Hello::Partial)
    }
}

/// A cursor over a ClientHello body; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if n > self.buf.len() {
            return Err(HelloError::Malformed);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, HelloError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, HelloError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self) -> Result<&'a [u8], HelloError> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Result<&'a [u8], HelloError> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// The host name of the `server_name` extension of a ClientHello body.
fn server_name(body: &[u8]) -> Result<Option<String>, HelloError> {
    let mut r = Reader { buf: body };
    r.take(2 + 32)?; // legacy_version, random
    r.vec8()?; // legacy_session_id
    r.vec16()?; // cipher_suites
    r.vec8()?; // legacy_compression_methods
    if r.buf.is_empty() {
        // SSL 3.0-era hellos end here: no extensions at all.
        return Ok(None);
    }
    let mut exts = Reader { buf: r.vec16()? };
    while !exts.buf.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        if kind != EXTENSION_SERVER_NAME {
            continue;
        }
        let mut list = Reader {
            buf: Reader { buf: data }.vec16()?,
        };
        while !list.buf.is_empty() {
            let name_type = list.u8()?;
            let name = list.vec16()?;
            if name_type == NAME_TYPE_HOST {
                // RFC 6066: ASCII, no trailing dot; anything else cannot name a route.
                if name.is_empty() || !name.iter().all(|b| b.is_ascii_graphic()) {
                    return Err(HelloError::Malformed);
                }
                let text = std::str::from_utf8(name).map_err(|_| HelloError::Malformed)?;
                return Ok(Some(text.to_ascii_lowercase()));
            }
        }
        return Ok(None);
    }
    Ok(None)
}

/// A fatal `unrecognized_name` alert (RFC 6066 §3), sent before closing a connection whose
/// server name routes nowhere, so the client reports why.
pub const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [21, 3, 3, 0, 2, 2, 112];
/// A fatal `internal_error` alert: the name routes to a Service whose termination cannot be
/// done (its certificate is missing or unusable).
pub const INTERNAL_ERROR_ALERT: [u8; 7] = [21, 3, 3, 0, 2, 2, 80];

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as rustls writes it for `name`.
    pub(crate) fn rustls_hello(name: &str) -> Vec<u8> {
        use std::sync::Arc;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn reads_the_name_of_a_real_client_hello_through_any_split() {
        let hello = rustls_hello("Web.Shop.global.test");
        for cut in 0..hello.len() {
            assert_eq!(parse(&hello[..cut]), Ok(Hello::Partial), "cut {cut}");
        }
        assert_eq!(
            parse(&hello),
            Ok(Hello::Complete(Some("web.shop.global.test".into())))
        );
        // Followed by more bytes (the client's next flight): still the same answer.
        let mut more = hello.clone();
        more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
        assert_eq!(
            parse(&more),
            Ok(Hello::Complete(Some("web.shop.global.test".into())))
        );
    }

    #[test]
    fn a_hello_fragmented_over_records_is_joined() {
        let hello = rustls_hello("db.shop.svc.cluster.local");
        let message = &hello[RECORD_HEADER..];
        let mut split = Vec::new();
        for piece in message.chunks(7) {
            split.extend_from_slice(&[CONTENT_HANDSHAKE, 3, 1, 0, piece.len() as u8]);
            split.extend_from_slice(piece);
        }
        assert_eq!(
            parse(&split),
            Ok(Hello::Complete(Some("db.shop.svc.cluster.local".into())))
        );
    }

    #[test]
    fn rejects_what_is_not_a_client_hello() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(HelloError::NotTls));
        assert_eq!(parse(&[22, 3, 1, 0, 0]), Err(HelloError::Malformed));
        // A ServerHello (type 2).
        assert_eq!(
            parse(&[22, 3, 3, 0, 4, 2, 0, 0, 0]),
            Err(HelloError::Malformed)
        );
        // A ClientHello whose body is shorter than its fields say.
        assert_eq!(
            parse(&[22, 3, 3, 0, 6, 1, 0, 0, 2, 3, 3]),
            Err(HelloError::Malformed)
        );
        // One that claims more than the cap.
        assert_eq!(
            parse(&[22, 3, 3, 0, 4, 1, 0xff, 0xff, 0xff]),
            Err(HelloError::TooLarge)
        );
    }

    proptest::proptest! {
        /// Nothing panics, whatever arrives, and a verdict on a prefix is either `Partial`
        /// or the same as on the whole input.
        #[test]
        fn never_panics_and_prefixes_agree(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600), cut in 0usize..600) {
            let whole = parse(&bytes);
            let cut = cut.min(bytes.len());
            match parse(&bytes[..cut]) {
                Ok(Hello::Partial) => {}
                other => proptest::prop_assert_eq!(other, whole),
            }
        }

        /// Mutating one byte of a real ClientHello never panics and never yields a name that
        /// is not printable ASCII.
        #[test]
        fn mutated_real_hellos(at in 0usize..4096, value in proptest::num::u8::ANY) {
            let mut hello = rustls_hello("api.prod.global.test");
            let at = at % hello.len();
            hello[at] = value;
            if let Ok(Hello::Complete(Some(name))) = parse(&hello) {
                proptest::prop_assert!(name.bytes().all(|b| b.is_ascii_graphic()));
            }
        }
    }
}

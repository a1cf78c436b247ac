//! HTTP/1.x heads for the lean forwarding path: request and response heads parsed with
//! `httparse` and rewritten for the next hop straight from the parsed slices (hop-by-hop
//! headers removed), and the body framing they declare. Chunked bodies are followed by
//! [`super::chunked`].
//!
//! Requests are read strictly, because what this proxy accepts and what an upstream
//! accepts must never differ (request smuggling): bare LF line ends, obs-fold, whitespace
//! before a colon, repeated `Content-Length`, `Transfer-Encoding` other than exactly
//! `chunked` or on HTTP/1.0, and both framing headers at once are all refused.

use std::io::Write as _;
use std::mem::MaybeUninit;

/// Most header slots parsed in one head (hyper's limit); [`HeadLimits::max_headers`] may
/// lower the number accepted.
pub const MAX_HEADERS: usize = 100;
/// Largest head ever buffered; [`HeadLimits::max_head`] may lower it.
pub const MAX_HEAD: usize = 64 * 1024;

/// What a request head may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLimits {
    /// Largest head, bytes (at most [`MAX_HEAD`]).
    pub max_head: usize,
    /// Most header fields (at most [`MAX_HEADERS`]).
    pub max_headers: usize,
    /// Longest request line, bytes.
    pub max_request_line: usize,
}

impl Default for HeadLimits {
    fn default() -> Self {
        Self {
            max_head: MAX_HEAD,
            max_headers: MAX_HEADERS,
            max_request_line: 8 * 1024,
        }
    }
}

/// The start of the HTTP/2 connection preface (prior knowledge h2c).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    #[default]
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding, relayed as it is.
    Chunked,
    /// Until the connection closes (responses only).
    ToEof,
}

/// Why a head was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Not HTTP/1.x syntax (obs-fold and whitespace before a colon included).
    #[error("malformed head")]
    Malformed,
    /// A line ends in LF without CR.
    #[error("bare LF line ending")]
    BareLf,
    /// Over the header count or head size limit.
    #[error("head too large")]
    TooLarge,
    /// A request line over the limit.
    #[error("request line too long")]
    LineTooLong,
    /// Both `Content-Length` and `Transfer-Encoding`, a repeated or bad length, a transfer
    /// coding other than exactly `chunked`, or one on HTTP/1.0 (requests).
    #[error("ambiguous or invalid body framing")]
    Framing,
    /// More than one `Host`.
    #[error("more than one Host header")]
    DuplicateHost,
}

impl HeadError {
    /// The status a client gets for it.
    pub fn status(self) -> u16 {
        match self {
            HeadError::TooLarge => 431,
            HeadError::LineTooLong => 414,
            _ => 400,
        }
    }
}

/// Outcome of [`parse_request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// The head is in the [`RequestHead`]; `len` bytes of the buffer were the head.
    Complete,
    /// The lean path does not handle this request: h2c preface, CONNECT or `Expect`
    /// (hyper's server does).
    Handoff,
}

/// The parts of a client request the forwarding path needs, owned so that the client
/// buffer can be read into again; reused from request to request.
#[derive(Debug, Default)]
pub struct RequestHead {
    /// Request line (origin-form target, HTTP/1.1) and the headers that go upstream as
    /// they are: everything but Host and the hop-by-hop headers. No final CRLF.
    pub upstream: Vec<u8>,
    /// The Host header value, or the authority of an absolute-form target.
    pub host: Vec<u8>,
    /// Whether there was a Host (or an authority).
    pub has_host: bool,
    /// Bytes of the head in the buffer.
    pub len: usize,
    /// Body framing.
    pub framing: Framing,
    /// GET, HEAD, OPTIONS, PUT or DELETE: may be sent again when its body is empty.
    pub idempotent: bool,
    /// HEAD: the response has no body.
    pub is_head: bool,
    /// The client speaks HTTP/1.0.
    pub http10: bool,
    /// The client wants the connection kept open after the response.
    pub keep_alive: bool,
    /// Carries `x-meridian-forwarded-by`: another agent forwarded it.
    pub forwarded: bool,
    /// Asks to switch protocols (`Upgrade` named in `Connection`): its Upgrade value, sent
    /// on with `connection: upgrade`; a `101` answer turns the connection into a tunnel.
    pub upgrade: Option<Vec<u8>>,
}

impl RequestHead {
    /// The Host as text, if any and valid UTF-8.
    pub fn host_str(&self) -> Option<&str> {
        if self.has_host {
            std::str::from_utf8(&self.host).ok()
        } else {
            None
        }
    }
}

/// What the `Connection` headers of a message say.
#[derive(Clone, Copy, Debug, Default)]
struct ConnectionTokens {
    close: bool,
    keep_alive: bool,
    upgrade: bool,
    /// Names other headers (which are then hop-by-hop too).
    names_others: bool,
}

fn connection_tokens<'a>(values: impl Iterator<Item = &'a [u8]>) -> ConnectionTokens {
    let mut t = ConnectionTokens::default();
    for v in values {
        for token in v.split(|b| *b == b',') {
            let token = token.trim_ascii();
            if token.eq_ignore_ascii_case(b"close") {
                t.close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                t.keep_alive = true;
            } else if token.eq_ignore_ascii_case(b"upgrade") {
                t.upgrade = true;
            } else if !token.is_empty() {
                t.names_others = true;
            }
        }
    }
    t
}

/// Whether `name` is listed in one of the `Connection` headers.
fn named_in_connection(headers: &[httparse::Header<'_>], name: &[u8]) -> bool {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| h.value.split(|b| *b == b','))
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(name))
}

/// Headers that describe one hop and never travel further (besides Transfer-Encoding and
/// the headers named in Connection, which are handled apart).
fn is_hop_by_hop(name: &str) -> bool {
    let n = name.as_bytes();
    match n.len() {
        2 => n.eq_ignore_ascii_case(b"te"),
        7 => n.eq_ignore_ascii_case(b"upgrade"),
        10 => n.eq_ignore_ascii_case(b"connection") || n.eq_ignore_ascii_case(b"keep-alive"),
        16 => n.eq_ignore_ascii_case(b"proxy-connection"),
        18 => n.eq_ignore_ascii_case(b"proxy-authenticate"),
        _ => false,
    }
}

fn is(name: &str, lower: &str) -> bool {
    name.len() == lower.len() && name.eq_ignore_ascii_case(lower)
}

/// Whether the last coding of `Transfer-Encoding` values is chunked.
fn ends_chunked<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut last: &[u8] = b"";
    for v in values {
        for c in v.split(|b| *b == b',') {
            let c = c.trim_ascii();
            if !c.is_empty() {
                last = c;
            }
        }
    }
    last.eq_ignore_ascii_case(b"chunked")
}

/// The value of the one `Content-Length` header of a request: a plain decimal number.
fn request_content_length(value: &[u8]) -> Result<u64, HeadError> {
    let v = value.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(HeadError::Framing);
    }
    Ok(v.iter().fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0')))
}

/// Target bytes every URI parser takes: RFC 3986 unreserved, sub-delims, `%`, `:`, `@`,
/// `/` and `?`.
const PLAIN_TARGET: [bool; 256] = {
    let mut t = [false; 256];
    let ok = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=%:@/?";
    let mut i = 0;
    while i < ok.len() {
        t[ok[i] as usize] = true;
        i += 1;
    }
    t
};

/// What follows `http://` or `https://` (any case) at the start of a target.
fn strip_scheme(target: &[u8]) -> Option<&[u8]> {
    for scheme in [&b"http://"[..], b"https://"] {
        if target.len() >= scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Some(&target[scheme.len()..]);
        }
    }
    None
}

/// Whether a line of the head ends in LF alone.
fn has_bare_lf(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && (i == 0 || head[i - 1] != b'\r'))
}

/// The value of one or several equal `Content-Length` headers.
fn content_length<'a>(values: impl Iterator<Item = &'a [u8]>) -> Result<Option<u64>, HeadError> {
    let mut out = None;
    for v in values {
        for part in v.split(|b| *b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(HeadError::Framing);
            }
            let n = part
                .iter()
                .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
            match out {
                Some(prev) if prev != n => return Err(HeadError::Framing),
                _ => out = Some(n),
            }
        }
    }
    Ok(out)
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Parses the request head at the start of `buf` into `head`, within `limits`.
pub fn parse_request(
    buf: &[u8],
    head: &mut RequestHead,
    limits: &HeadLimits,
) -> Result<Parsed, HeadError> {
    // Prior-knowledge h2c: hyper's server takes the whole connection.
    let n = buf.len().min(H2_PREFACE.len());
    if buf[..n] == H2_PREFACE[..n] {
        return Ok(if n == H2_PREFACE.len() {
            Parsed::Handoff
        } else {
            Parsed::Partial
        });
    }
    let max_head = limits.max_head.min(MAX_HEAD);
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            let line_end = buf.iter().position(|b| *b == b'\n');
            return if line_end.unwrap_or(buf.len()) > limits.max_request_line {
                Err(HeadError::LineTooLong)
            } else if buf.len() >= max_head {
                Err(HeadError::TooLarge)
            } else {
                Ok(Parsed::Partial)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Malformed);
    };
    let line_len = buf.iter().position(|b| *b == b'\n').unwrap_or(len);
    if line_len > limits.max_request_line {
        return Err(HeadError::LineTooLong);
    }
    if len > max_head || req.headers.len() > limits.max_headers {
        return Err(HeadError::TooLarge);
    }
    // httparse takes a bare LF as a line end; an upstream may not, and then the two would
    // see different headers.
    if has_bare_lf(&buf[..len]) {
        return Err(HeadError::BareLf);
    }
    let headers: &[httparse::Header<'_>] = req.headers;
    if method == "CONNECT" {
        return Ok(Parsed::Handoff);
    }
    let mut has_connection = false;
    let mut te: Option<&[u8]> = None;
    let mut cl: Option<&[u8]> = None;
    let mut host: Option<&[u8]> = None;
    let mut upgrade: Option<&[u8]> = None;
    head.forwarded = false;
    for h in headers {
        let name = h.name;
        if is(name, "expect") {
            return Ok(Parsed::Handoff);
        } else if is(name, "upgrade") {
            upgrade = Some(h.value);
        } else if is(name, "connection") {
            has_connection = true;
        } else if is(name, "transfer-encoding") {
            if te.replace(h.value).is_some() {
                return Err(HeadError::Framing);
            }
        } else if is(name, "content-length") {
            if cl.replace(h.value).is_some() {
                return Err(HeadError::Framing);
            }
        } else if is(name, "host") {
            if host.is_some() {
                return Err(HeadError::DuplicateHost);
            }
            host = Some(h.value);
        } else if is(name, fed_api::names::FORWARDED_BY_HEADER) {
            head.forwarded = true;
        }
    }
    let values = |n: &'static str| {
        headers
            .iter()
            .filter(move |h| is(h.name, n))
            .map(|h| h.value)
    };
    head.framing = match (te, cl) {
        (Some(_), Some(_)) => return Err(HeadError::Framing),
        (Some(coding), None) => {
            if minor == 0 || !coding.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(HeadError::Framing);
            }
            Framing::Chunked
        }
        (None, Some(v)) => match request_content_length(v)? {
            0 => Framing::Empty,
            n => Framing::Length(n),
        },
        (None, None) => Framing::Empty,
    };
    let conn = if has_connection {
        connection_tokens(values("connection"))
    } else {
        ConnectionTokens::default()
    };
    head.http10 = minor == 0;
    head.keep_alive = if head.http10 {
        conn.keep_alive && !conn.close
    } else {
        !conn.close
    };
    head.is_head = method == "HEAD";
    head.idempotent = matches!(method, "GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE");
    head.len = len;
    // An Upgrade not named in Connection is an ordinary (hop-by-hop) header.
    head.upgrade = match upgrade {
        Some(v) if conn.upgrade && !head.http10 => Some(v.to_vec()),
        _ => None,
    };

    // The target in origin form; an absolute-form authority stands in for a missing Host.
    let target = target.as_bytes();
    let (authority, origin): (Option<&[u8]>, &[u8]) =
        if target.first() == Some(&b'/') || target == b"*" {
            // Bytes httparse lets through but an upstream's URI parser may not (`<`, `"`,
            // ...): read the target as hyper does before agreeing to it.
            // A fragment has no place in a request (and URI parsers drop it silently).
            if !target.iter().all(|b| PLAIN_TARGET[usize::from(*b)])
                && (target.contains(&b'#') || http::uri::PathAndQuery::try_from(target).is_err())
            {
                return Err(HeadError::Malformed);
            }
            (None, target)
        } else if let Some(rest) = strip_scheme(target) {
            // Absolute form: an http(s) URI with a valid authority, as hyper reads it.
            let end = rest
                .iter()
                .position(|b| *b == b'/' || *b == b'?')
                .unwrap_or(rest.len());
            if end == 0 || target.contains(&b'#') || http::Uri::try_from(target).is_err() {
                return Err(HeadError::Malformed);
            }
            (Some(&rest[..end]), &rest[end..])
        } else {
            return Err(HeadError::Malformed);
        };
    head.host.clear();
    head.has_host = match host.or(authority) {
        Some(h) => {
            head.host.extend_from_slice(h);
            true
        }
        None => false,
    };

    let out = &mut head.upstream;
    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    if origin.is_empty() || origin[0] == b'?' {
        out.push(b'/');
    }
    out.extend_from_slice(origin);
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for h in headers {
        let name = h.name;
        // Transfer-Encoding stays: the chunked body is relayed as it came.
        if is_hop_by_hop(name)
            || is(name, "host")
            || (conn.names_others && named_in_connection(headers, name.as_bytes()))
        {
            continue;
        }
        push_header(out, name, h.value);
    }
    Ok(Parsed::Complete)
}

/// The response as the client gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code.
    pub code: u16,
    /// Bytes of the head in the upstream buffer.
    pub len: usize,
    /// How the upstream body is delimited.
    pub framing: Framing,
    /// The chunked body goes to an HTTP/1.0 client: relay only its payload.
    pub dechunk: bool,
    /// The upstream connection may carry another request afterwards.
    pub upstream_reusable: bool,
    /// The client connection stays open afterwards.
    pub client_keep_alive: bool,
    /// A `101` to an upgrade request: both connections become one tunnel.
    pub switching: bool,
    /// An lb-agent's own answer saying no backend received the request
    /// (`x-meridian-error: unserved`): it may go to another cluster.
    pub unserved: bool,
    /// An lb-agent's own answer saying its backends failed after the request may have
    /// reached one (`x-meridian-error: failed`): an idempotent request may go elsewhere.
    pub agent_failed: bool,
}

/// Outcome of [`parse_response`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParsedResponse {
    /// More bytes are needed.
    Partial,
    /// An interim (1xx) response of `len` bytes, dropped.
    Interim(usize),
    /// A final response; its head for the client is in `out`.
    Final(ResponseHead),
}

/// Parses the upstream response head at the start of `buf` for `req` and writes the head the
/// client gets into `out` (cleared first).
pub fn parse_response(
    buf: &[u8],
    req: &RequestHead,
    out: &mut Vec<u8>,
) -> Result<ParsedResponse, HeadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return if buf.len() >= MAX_HEAD {
                Err(HeadError::TooLarge)
            } else {
                Ok(ParsedResponse::Partial)
            };
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    };
    let (Some(code), Some(minor)) = (resp.code, resp.version) else {
        return Err(HeadError::Malformed);
    };
    // A 101 answers an upgrade request only; unasked, it is as wrong as garbage.
    if (code == 101 && req.upgrade.is_none()) || !(100..=999).contains(&code) {
        return Err(HeadError::Malformed);
    }
    let headers: &[httparse::Header<'_>] = resp.headers;
    if code == 101 {
        return Ok(ParsedResponse::Final(switching_head(
            len,
            resp.reason.unwrap_or(""),
            headers,
            out,
        )));
    }
    if code < 200 {
        return Ok(ParsedResponse::Interim(len));
    }
    let mut has_connection = false;
    let mut has_te = false;
    let mut has_cl = false;
    for h in headers {
        if is(h.name, "connection") {
            has_connection = true;
        } else if is(h.name, "transfer-encoding") {
            has_te = true;
        } else if is(h.name, "content-length") {
            has_cl = true;
        }
    }
    let values = |n: &'static str| {
        headers
            .iter()
            .filter(move |h| is(h.name, n))
            .map(|h| h.value)
    };
    let bodiless = req.is_head || code == 204 || code == 304;
    let framing = if bodiless {
        Framing::Empty
    } else if has_te {
        if ends_chunked(values("transfer-encoding")) {
            Framing::Chunked
        } else {
            Framing::ToEof
        }
    } else if has_cl {
        match content_length(values("content-length"))? {
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::ToEof,
        }
    } else {
        Framing::ToEof
    };
    let conn = if has_connection {
        connection_tokens(values("connection"))
    } else {
        ConnectionTokens::default()
    };
    let upstream_keep_alive = if minor == 0 {
        conn.keep_alive && !conn.close
    } else {
        !conn.close
    };
    let agent_error = |kind: &[u8]| {
        headers.iter().any(|h| {
            is(h.name, MERIDIAN_ERROR_HEADER) && h.value.trim_ascii().eq_ignore_ascii_case(kind)
        })
    };
    let (unserved, agent_failed) = (agent_error(b"unserved"), agent_error(b"failed"));
    let dechunk = framing == Framing::Chunked && req.http10;
    let client_keep_alive = req.keep_alive && framing != Framing::ToEof && !dechunk;

    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&[
        b'0' + (code / 100) as u8,
        b'0' + (code / 10 % 10) as u8,
        b'0' + (code % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(resp.reason.unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in headers {
        let name = h.name;
        if is_hop_by_hop(name)
            || (has_te && is(name, "content-length"))
            || (is(name, "transfer-encoding") && req.http10)
            || (conn.names_others && named_in_connection(headers, name.as_bytes()))
        {
            continue;
        }
        push_header(out, name, h.value);
    }
    if !client_keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if req.http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(ParsedResponse::Final(ResponseHead {
        code,
        len,
        framing,
        dechunk,
        upstream_reusable: upstream_keep_alive && framing != Framing::ToEof,
        client_keep_alive,
        switching: false,
        unserved,
        agent_failed,
    }))
}

/// The head of a `101 Switching Protocols` for the client: the upstream's headers with its
/// Upgrade value and `connection: upgrade` (both hop-by-hop, so set here again).
fn switching_head(
    len: usize,
    reason: &str,
    headers: &[httparse::Header<'_>],
    out: &mut Vec<u8>,
) -> ResponseHead {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 101 ");
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut upgrade: Option<&[u8]> = None;
    for h in headers {
        if is(h.name, "upgrade") {
            upgrade = Some(h.value);
        }
        if is_hop_by_hop(h.name) || is(h.name, "content-length") || is(h.name, "transfer-encoding")
        {
            continue;
        }
        push_header(out, h.name, h.value);
    }
    out.extend_from_slice(b"connection: upgrade\r\n");
    if let Some(u) = upgrade {
        push_header(out, "upgrade", u);
    }
    out.extend_from_slice(b"\r\n");
    ResponseHead {
        code: 101,
        len,
        framing: Framing::Empty,
        dechunk: false,
        upstream_reusable: false,
        client_keep_alive: false,
        switching: true,
        unserved: false,
        agent_failed: false,
    }
}

/// Header on an lb-agent's own error answers: `unserved` when no backend received the
/// request (another cluster may take it whatever its method), `failed` when one may have.
pub const MERIDIAN_ERROR_HEADER: &str = "x-meridian-error";

/// Writes the head of a request for one upstream attempt: the stored part, then Host
/// (`host`) and the forwarding header (`forwarded_by`), then the blank line.
pub fn write_upstream_head(
    out: &mut Vec<u8>,
    head: &RequestHead,
    host: Option<&[u8]>,
    forwarded_by: Option<&[u8]>,
) {
    out.clear();
    out.extend_from_slice(&head.upstream);
    if let Some(h) = host {
        push_header(out, "host", h);
    }
    if let Some(f) = forwarded_by {
        push_header(out, fed_api::names::FORWARDED_BY_HEADER, f);
    }
    if let Some(u) = &head.upgrade {
        out.extend_from_slice(b"connection: upgrade\r\n");
        push_header(out, "upgrade", u);
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes a complete plain-text answer of the agent itself: no body after HEAD; the
/// connection closes after it (`close`) or stays open (said explicitly to HTTP/1.0);
/// `error` is the [`MERIDIAN_ERROR_HEADER`] value, if any.
pub fn write_plain(
    out: &mut Vec<u8>,
    code: u16,
    text: &str,
    req: &RequestHead,
    close: bool,
    error: Option<&str>,
) {
    out.clear();
    let reason = http::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let _ = write!(
        out,
        "HTTP/1.1 {code} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n",
        text.len()
    );
    if let Some(e) = error {
        push_header(out, MERIDIAN_ERROR_HEADER, e.as_bytes());
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if req.http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !req.is_head {
        out.extend_from_slice(text.as_bytes());
    }
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;

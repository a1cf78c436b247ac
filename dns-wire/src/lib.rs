//! DNS wire format: the parts of RFC 1035 and RFC 6891 (EDNS0) an authoritative responder
//! for one zone needs — reading a query and writing records into a reused buffer, and the
//! response around them ([`Response`]).
//!
//! Shared by the lb-agent's responder for the federation zone and cluster-sim's cluster
//! DNS of `runtime: runc` clusters; `tests/fuzz.rs` checks the query side against
//! hickory-proto.

mod response;

pub use response::{Answered, DEFAULT_UDP_PAYLOAD, Rcode, Response, Section, Started, Transport};

/// Length of the fixed message header.
pub const HEADER_LEN: usize = 12;
/// Longest name on the wire, root label included (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;
/// Longest label.
pub const MAX_LABEL_LEN: usize = 63;
/// Largest UDP payload without EDNS0.
pub const CLASSIC_UDP_PAYLOAD: u16 = 512;
/// Size of the OPT record we append when the query carried one (root name, no options).
pub const OPT_RECORD_LEN: usize = 11;
/// First byte of a compression pointer.
const POINTER: u8 = 0xC0;
/// Compression pointers can only reach offsets below this.
pub const POINTER_LIMIT: usize = 0x4000;

/// Record types the responder knows by name.
pub mod rtype {
    /// IPv4 address.
    pub const A: u16 = 1;
    /// Name server.
    pub const NS: u16 = 2;
    /// Canonical name.
    pub const CNAME: u16 = 5;
    /// Start of authority.
    pub const SOA: u16 = 6;
    /// Pointer.
    pub const PTR: u16 = 12;
    /// Mail exchange.
    pub const MX: u16 = 15;
    /// Text.
    pub const TXT: u16 = 16;
    /// IPv6 address.
    pub const AAAA: u16 = 28;
    /// Service locator.
    pub const SRV: u16 = 33;
    /// EDNS0 pseudo-record.
    pub const OPT: u16 = 41;
    /// HTTPS binding.
    pub const HTTPS: u16 = 65;
    /// Incremental zone transfer.
    pub const IXFR: u16 = 251;
    /// Zone transfer.
    pub const AXFR: u16 = 252;
    /// Any type.
    pub const ANY: u16 = 255;
}

/// Class IN.
pub const CLASS_IN: u16 = 1;
/// Class ANY (QCLASS only).
pub const CLASS_ANY: u16 = 255;

/// Header flag bits (second and third header bytes as one `u16`).
pub mod flags {
    /// Response.
    pub const QR: u16 = 0x8000;
    /// Authoritative answer.
    pub const AA: u16 = 0x0400;
    /// Truncated.
    pub const TC: u16 = 0x0200;
    /// Recursion desired (copied from the query).
    pub const RD: u16 = 0x0100;
    /// Checking disabled (copied from the query, RFC 6840 §5.9).
    pub const CD: u16 = 0x0010;
    /// Opcode field.
    pub const OPCODE_MASK: u16 = 0x7800;
}

/// Why a query cannot be answered normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// Too short to hold a header, or a response: no reply at all (replying to a
    /// response could start a loop between two servers).
    Ignore,
    /// The header is readable but the rest is not: reply FORMERR.
    Malformed,
}

/// The fixed header of a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message ID, echoed.
    pub id: u16,
    /// Flags and codes.
    pub flags: u16,
    /// Question count.
    pub qdcount: u16,
    /// Answer count.
    pub ancount: u16,
    /// Authority count.
    pub nscount: u16,
    /// Additional count.
    pub arcount: u16,
}

impl Header {
    /// Reads the header of a message that is not a response.
    pub fn parse(msg: &[u8]) -> Result<Header, QueryError> {
        if msg.len() < HEADER_LEN {
            return Err(QueryError::Ignore);
        }
        let h = Header {
            id: be16(msg, 0),
            flags: be16(msg, 2),
            qdcount: be16(msg, 4),
            ancount: be16(msg, 6),
            nscount: be16(msg, 8),
            arcount: be16(msg, 10),
        };
        if h.flags & flags::QR != 0 {
            return Err(QueryError::Ignore);
        }
        Ok(h)
    }

    /// The opcode (0 = QUERY).
    pub fn opcode(&self) -> u8 {
        ((self.flags & flags::OPCODE_MASK) >> 11) as u8
    }
}

/// A question name, lowercased, in wire form without the root label, with the offset of
/// each label so answers can point into the question the client sent.
#[derive(Clone)]
pub struct QName {
    buf: [u8; MAX_NAME_LEN],
    len: u8,
    label_count: u8,
    /// Offset of each label within the name (at most 127 labels fit in 255 bytes).
    label_offsets: [u8; 128],
}

impl QName {
    /// Lowercased wire form without the root label.
    pub fn wire(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Number of labels (root excluded).
    pub fn label_count(&self) -> usize {
        self.label_count as usize
    }

    /// Offset within the name of label `i` (0 = leftmost); `label_count()` gives the end
    /// (the root label).
    pub fn label_offset(&self, i: usize) -> usize {
        if i == self.label_count() {
            self.len as usize
        } else {
            self.label_offsets[i] as usize
        }
    }
}

impl std::fmt::Debug for QName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&display_name(self.wire()))
    }
}

/// The single question of a query.
#[derive(Clone, Debug)]
pub struct Question {
    /// The name, lowercased.
    pub name: QName,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
    /// Offset just past the question in the query.
    pub end: usize,
}

impl Question {
    /// Reads the question that starts right after the header. Compression pointers are
    /// refused: there is nothing earlier in the message they could usefully point at.
    pub fn parse(msg: &[u8]) -> Result<Question, QueryError> {
        let mut name = QName {
            buf: [0; MAX_NAME_LEN],
            len: 0,
            label_count: 0,
            label_offsets: [0; 128],
        };
        let mut pos = HEADER_LEN;
        loop {
            let &len = msg.get(pos).ok_or(QueryError::Malformed)?;
            let len = len as usize;
            if len == 0 {
                pos += 1;
                break;
            }
            if len > MAX_LABEL_LEN {
                // Pointers (0xC0) and the reserved label types (0x40, 0x80).
                return Err(QueryError::Malformed);
            }
            let label = msg
                .get(pos + 1..pos + 1 + len)
                .ok_or(QueryError::Malformed)?;
            let at = name.len as usize;
            // +1 for the root label that ends every name.
            if at + 1 + len + 1 > MAX_NAME_LEN {
                return Err(QueryError::Malformed);
            }
            name.label_offsets[name.label_count as usize] = at as u8;
            name.buf[at] = len as u8;
            for (dst, src) in name.buf[at + 1..at + 1 + len].iter_mut().zip(label) {
                *dst = src.to_ascii_lowercase();
            }
            name.len = (at + 1 + len) as u8;
            name.label_count += 1;
            pos += 1 + len;
        }
        let fixed = msg.get(pos..pos + 4).ok_or(QueryError::Malformed)?;
        Ok(Question {
            name,
            qtype: be16(fixed, 0),
            qclass: be16(fixed, 2),
            end: pos + 4,
        })
    }
}

/// What the client said in its OPT record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edns {
    /// Requestor's UDP payload size.
    pub udp_payload: u16,
    /// EDNS version.
    pub version: u8,
    /// EDNS Client Subnet option, sent by resolvers on behalf of their clients.
    pub client_subnet: Option<ClientSubnetOption>,
}

/// Option code of EDNS Client Subnet (RFC 7871).
pub const OPTION_CLIENT_SUBNET: u16 = 8;

/// The EDNS Client Subnet option of a query: the network of the client a resolver asks
/// for, truncated to `source_prefix` bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientSubnetOption {
    /// The address, bits past `source_prefix` zero.
    pub address: std::net::IpAddr,
    /// SOURCE PREFIX-LENGTH.
    pub source_prefix: u8,
}

impl ClientSubnetOption {
    fn family_and_len(&self) -> (u16, usize) {
        let family = if self.address.is_ipv4() { 1 } else { 2 };
        (family, usize::from(self.source_prefix).div_ceil(8))
    }

    /// Bytes the option takes in an OPT record (code and length included).
    pub fn wire_len(&self) -> usize {
        8 + self.family_and_len().1
    }

    /// Appends the option echoing the query's, with the SCOPE PREFIX-LENGTH the answer is
    /// valid for.
    pub fn put(&self, out: &mut Vec<u8>, scope_prefix: u8) {
        let (family, len) = self.family_and_len();
        put16(out, OPTION_CLIENT_SUBNET);
        put16(out, (4 + len) as u16);
        put16(out, family);
        out.push(self.source_prefix);
        out.push(scope_prefix);
        match self.address {
            std::net::IpAddr::V4(a) => out.extend_from_slice(&a.octets()[..len]),
            std::net::IpAddr::V6(a) => out.extend_from_slice(&a.octets()[..len]),
        }
    }

    /// Reads the option data (after code and length). RFC 7871 §7.1.2: a family other than
    /// IPv4/IPv6, a prefix longer than the family's, an address of the wrong length or
    /// with bits set past the prefix is a FORMERR.
    fn parse(data: &[u8]) -> Result<ClientSubnetOption, QueryError> {
        if data.len() < 4 {
            return Err(QueryError::Malformed);
        }
        let source_prefix = data[2];
        let address = &data[4..];
        let max_prefix = match be16(data, 0) {
            1 => 32,
            2 => 128,
            _ => return Err(QueryError::Malformed),
        };
        if source_prefix > max_prefix || address.len() != usize::from(source_prefix).div_ceil(8) {
            return Err(QueryError::Malformed);
        }
        let mut bytes = [0u8; 16];
        bytes[..address.len()].copy_from_slice(address);
        if !source_prefix.is_multiple_of(8) {
            let last = address.len() - 1;
            if bytes[last] & (0xFF >> (source_prefix % 8)) != 0 {
                return Err(QueryError::Malformed);
            }
        }
        let address = if max_prefix == 32 {
            std::net::IpAddr::from([bytes[0], bytes[1], bytes[2], bytes[3]])
        } else {
            std::net::IpAddr::from(bytes)
        };
        Ok(ClientSubnetOption {
            address,
            source_prefix,
        })
    }
}

/// Reads the options of an OPT record, keeping the Client Subnet one.
fn parse_options(mut rdata: &[u8]) -> Result<Option<ClientSubnetOption>, QueryError> {
    let mut client_subnet = None;
    while !rdata.is_empty() {
        if rdata.len() < 4 {
            return Err(QueryError::Malformed);
        }
        let code = be16(rdata, 0);
        let len = usize::from(be16(rdata, 2));
        let data = rdata.get(4..4 + len).ok_or(QueryError::Malformed)?;
        if code == OPTION_CLIENT_SUBNET {
            client_subnet = Some(ClientSubnetOption::parse(data)?);
        }
        rdata = &rdata[4 + len..];
    }
    Ok(client_subnet)
}

/// Walks the answer, authority and additional sections after the question and returns
/// the OPT record if there is one. More than one OPT, or an OPT not owned by the root, is
/// malformed (RFC 6891 §6.1.1).
pub fn parse_edns(
    msg: &[u8],
    header: &Header,
    question_end: usize,
) -> Result<Option<Edns>, QueryError> {
    let mut pos = question_end;
    let mut edns = None;
    let before_additional = header.ancount as usize + header.nscount as usize;
    for i in 0..before_additional + header.arcount as usize {
        let name_start = pos;
        pos = skip_name(msg, pos)?;
        let fixed = msg.get(pos..pos + 10).ok_or(QueryError::Malformed)?;
        let rtype = be16(fixed, 0);
        let rdlen = be16(fixed, 8) as usize;
        pos += 10;
        let rdata = msg.get(pos..pos + rdlen).ok_or(QueryError::Malformed)?;
        if rtype == rtype::OPT {
            if i < before_additional || edns.is_some() || msg[name_start] != 0 {
                return Err(QueryError::Malformed);
            }
            edns = Some(Edns {
                udp_payload: be16(fixed, 2),
                version: fixed[5],
                client_subnet: parse_options(rdata)?,
            });
        }
        pos += rdlen;
    }
    Ok(edns)
}

/// Skips a name that may end in a compression pointer; returns the offset after it.
fn skip_name(msg: &[u8], mut pos: usize) -> Result<usize, QueryError> {
    loop {
        let &len = msg.get(pos).ok_or(QueryError::Malformed)?;
        match len {
            0 => return Ok(pos + 1),
            l if l & POINTER == POINTER => {
                return if pos + 2 <= msg.len() {
                    Ok(pos + 2)
                } else {
                    Err(QueryError::Malformed)
                };
            }
            l if l as usize <= MAX_LABEL_LEN => pos += 1 + l as usize,
            _ => return Err(QueryError::Malformed),
        }
    }
}

/// Reads a big-endian `u16` at `at`; the caller has checked the bounds.
pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Overwrites the big-endian `u16` at `at`.
pub fn set16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u16`.
pub fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u32`.
pub fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a compression pointer to `offset`, which must be below [`POINTER_LIMIT`].
pub fn put_pointer(out: &mut Vec<u8>, offset: usize) {
    debug_assert!(offset < POINTER_LIMIT);
    put16(out, 0xC000 | offset as u16);
}

/// Appends one label (length byte and bytes).
pub fn put_label(out: &mut Vec<u8>, label: &[u8]) {
    debug_assert!(!label.is_empty() && label.len() <= MAX_LABEL_LEN);
    out.push(label.len() as u8);
    out.extend_from_slice(label);
}

/// Appends the fixed part of a resource record (type, class IN, TTL) and a placeholder
/// RDLENGTH; returns where RDATA starts, for [`end_rdata`].
pub fn begin_record(out: &mut Vec<u8>, rtype: u16, ttl: u32) -> usize {
    put16(out, rtype);
    put16(out, CLASS_IN);
    put32(out, ttl);
    put16(out, 0);
    out.len()
}

/// Fills in RDLENGTH of the record whose RDATA started at `rdata_start`.
pub fn end_rdata(out: &mut [u8], rdata_start: usize) {
    let len = (out.len() - rdata_start) as u16;
    set16(out, rdata_start - 2, len);
}

/// Appends an OPT record advertising `udp_payload`, with the upper bits of an extended
/// RCODE (RFC 6891 §6.1.3) and optionally a Client Subnet option with its scope.
pub fn put_opt(
    out: &mut Vec<u8>,
    udp_payload: u16,
    extended_rcode_high: u8,
    client_subnet: Option<(&ClientSubnetOption, u8)>,
) {
    out.push(0);
    put16(out, rtype::OPT);
    put16(out, udp_payload);
    out.extend_from_slice(&[extended_rcode_high, 0, 0, 0]);
    let start = out.len() + 2;
    put16(out, 0);
    if let Some((option, scope)) = client_subnet {
        option.put(out, scope);
    }
    end_rdata(out, start);
}

/// Converts a dotted name to lowercase wire form without the root label, checking label
/// and name lengths. A trailing dot is accepted.
pub fn wire_name(dotted: &str) -> Result<Vec<u8>, String> {
    let dotted = dotted.strip_suffix('.').unwrap_or(dotted);
    if dotted.is_empty() {
        return Err("is empty".into());
    }
    let mut wire = Vec::with_capacity(dotted.len() + 1);
    for label in dotted.split('.') {
        wire.extend_from_slice(&wire_label(label)?);
    }
    if wire.len() + 1 > MAX_NAME_LEN {
        return Err(format!("is longer than {MAX_NAME_LEN} bytes on the wire"));
    }
    Ok(wire)
}

/// One label in wire form (length byte first), lowercased. Letters, digits, `-` and `_`
/// only, so that every name Meridian builds reads back as the same labels.
pub fn wire_label(label: &str) -> Result<Vec<u8>, String> {
    if label.is_empty() {
        return Err("has an empty label".into());
    }
    if label.len() > MAX_LABEL_LEN {
        return Err(format!(
            "label {label:?} is longer than {MAX_LABEL_LEN} bytes"
        ));
    }
    if let Some(c) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!("label {label:?} contains {c:?}"));
    }
    let mut wire = Vec::with_capacity(label.len() + 1);
    wire.push(label.len() as u8);
    wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    Ok(wire)
}

/// Dotted form of a wire name without the root label, for logs and errors.
pub fn display_name(wire: &[u8]) -> String {
    let mut s = String::new();
    let mut pos = 0;
    while pos < wire.len() {
        let len = wire[pos] as usize;
        let end = (pos + 1 + len).min(wire.len());
        s.push_str(&String::from_utf8_lossy(&wire[pos + 1..end]));
        s.push('.');
        pos = end;
    }
    if s.is_empty() {
        s.push('.');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[&str], qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name {
            put_label(&mut q, l.as_bytes());
        }
        q.push(0);
        put16(&mut q, qtype);
        put16(&mut q, CLASS_IN);
        q
    }

    #[test]
    fn header_of_short_messages_and_responses_is_ignored() {
        assert_eq!(Header::parse(&[0; 11]), Err(QueryError::Ignore));
        let mut q = query(&["a"], rtype::A);
        q[2] |= 0x80;
        assert_eq!(Header::parse(&q), Err(QueryError::Ignore));
        q[2] = 0x28; // opcode 5 (UPDATE)
        let h = Header::parse(&q).unwrap();
        assert_eq!((h.id, h.opcode(), h.qdcount), (0x1234, 5, 1));
    }

    #[test]
    fn question_is_lowercased_with_label_offsets() {
        let q = query(&["Web", "PROD", "Global"], rtype::AAAA);
        let question = Question::parse(&q).unwrap();
        assert_eq!(question.name.wire(), b"\x03web\x04prod\x06global");
        assert_eq!(question.name.label_count(), 3);
        assert_eq!(
            (0..=3)
                .map(|i| question.name.label_offset(i))
                .collect::<Vec<_>>(),
            [0, 4, 9, 16]
        );
        assert_eq!((question.qtype, question.qclass), (rtype::AAAA, CLASS_IN));
        assert_eq!(question.end, q.len());
        assert_eq!(format!("{:?}", question.name), "web.prod.global.");
    }

    #[test]
    fn malformed_questions_are_rejected() {
        let good = query(&["a", "b"], rtype::A);
        // Truncated anywhere inside the question.
        for cut in HEADER_LEN..good.len() {
            assert_eq!(
                Question::parse(&good[..cut]).unwrap_err(),
                QueryError::Malformed,
                "cut at {cut}"
            );
        }
        // A compression pointer, a reserved label type, a label longer than 63.
        for first in [0xC0, 0x40, 64] {
            let mut q = good.clone();
            q[HEADER_LEN] = first;
            assert_eq!(Question::parse(&q).unwrap_err(), QueryError::Malformed);
        }
        // A name longer than 255 bytes.
        let long: Vec<String> = (0..5).map(|_| "x".repeat(63)).collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        assert_eq!(
            Question::parse(&query(&long, rtype::A)).unwrap_err(),
            QueryError::Malformed
        );
        // 253 characters (255 bytes on the wire) is the limit and is fine.
        let max: Vec<String> = (0..4)
            .map(|i| "y".repeat(if i < 3 { 63 } else { 61 }))
            .collect();
        let max: Vec<&str> = max.iter().map(String::as_str).collect();
        assert!(Question::parse(&query(&max, rtype::A)).is_ok());
    }

    #[test]
    fn edns_is_found_in_the_additional_section_only_once() {
        let mut q = query(&["a"], rtype::A);
        let end = q.len();
        let plain = Header::parse(&q).unwrap();
        assert_eq!(parse_edns(&q, &plain, end), Ok(None));
        put_opt(&mut q, 1232, 0, None);
        q[11] = 1;
        let h = Header::parse(&q).unwrap();
        assert_eq!(
            parse_edns(&q, &h, end),
            Ok(Some(Edns {
                udp_payload: 1232,
                version: 0,
                client_subnet: None,
            }))
        );
        // Claimed but missing, or twice.
        q[11] = 2;
        assert_eq!(
            parse_edns(&q, &Header::parse(&q).unwrap(), end),
            Err(QueryError::Malformed)
        );
        put_opt(&mut q, 4096, 0, None);
        assert_eq!(
            parse_edns(&q, &Header::parse(&q).unwrap(), end),
            Err(QueryError::Malformed)
        );
        // An OPT in the answer section.
        q[11] = 0;
        q[7] = 1;
        q.truncate(end + OPT_RECORD_LEN);
        assert_eq!(
            parse_edns(&q, &Header::parse(&q).unwrap(), end),
            Err(QueryError::Malformed)
        );
        // A non-OPT additional record with a compressed owner is skipped.
        let mut q = query(&["a"], rtype::A);
        put_pointer(&mut q, HEADER_LEN);
        begin_record(&mut q, rtype::A, 0);
        let rdata = q.len();
        q.extend_from_slice(&[1, 2, 3, 4]);
        end_rdata(&mut q, rdata);
        q[11] = 1;
        assert_eq!(parse_edns(&q, &Header::parse(&q).unwrap(), end), Ok(None));
        // ... but not when its RDATA runs past the end.
        q.pop();
        assert_eq!(
            parse_edns(&q, &Header::parse(&q).unwrap(), end),
            Err(QueryError::Malformed)
        );
    }

    fn with_option(option: &[u8]) -> Result<Option<Edns>, QueryError> {
        let mut q = query(&["a"], rtype::A);
        let end = q.len();
        put_opt(&mut q, 1232, 0, None);
        q.extend_from_slice(option);
        let rdlen = option.len() as u16;
        let at = q.len() - option.len() - 2;
        set16(&mut q, at, rdlen);
        q[11] = 1;
        parse_edns(&q, &Header::parse(&q).unwrap(), end)
    }

    #[test]
    fn client_subnet_option_is_read_and_checked() {
        // 10.9.1.0/24, after an unknown option (cookie, code 10).
        let opt = [
            &[0, 10, 0, 2, 0xAB, 0xCD][..],
            &[0, 8, 0, 7, 0, 1, 24, 0, 10, 9, 1],
        ]
        .concat();
        let ecs = with_option(&opt).unwrap().unwrap().client_subnet.unwrap();
        assert_eq!(ecs.address, "10.9.1.0".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(ecs.source_prefix, 24);
        let mut echoed = Vec::new();
        ecs.put(&mut echoed, 16);
        assert_eq!(echoed, [0, 8, 0, 7, 0, 1, 24, 16, 10, 9, 1]);
        assert_eq!(ecs.wire_len(), echoed.len());
        // fd00:1::/32 and 0.0.0.0/0.
        let v6 = with_option(&[0, 8, 0, 8, 0, 2, 32, 0, 0xFD, 0, 0, 1])
            .unwrap()
            .unwrap();
        assert_eq!(
            v6.client_subnet.unwrap().address,
            "fd00:1::".parse::<std::net::IpAddr>().unwrap()
        );
        let zero = with_option(&[0, 8, 0, 4, 0, 1, 0, 0]).unwrap().unwrap();
        assert_eq!(zero.client_subnet.unwrap().source_prefix, 0);
        for bad in [
            &[0, 8, 0, 7, 0, 3, 24, 0, 10, 9, 1][..], // family 3
            &[0, 8, 0, 7, 0, 1, 33, 0, 10, 9, 1],     // /33
            &[0, 8, 0, 6, 0, 1, 24, 0, 10, 9],        // address too short
            &[0, 8, 0, 7, 0, 1, 20, 0, 10, 9, 1],     // bits set past /20
            &[0, 8, 0, 3, 0, 1, 0],                   // option too short
            &[0, 8, 0, 9, 0, 1, 24, 0, 10, 9, 1],     // option runs past the record
            &[0, 8, 0],                               // option header cut
        ] {
            assert_eq!(with_option(bad), Err(QueryError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn dotted_names_convert_to_wire_form() {
        assert_eq!(
            wire_name("Global.Meridian.test.").unwrap(),
            b"\x06global\x08meridian\x04test"
        );
        assert_eq!(display_name(b"\x06global\x04test"), "global.test.");
        assert_eq!(display_name(b""), ".");
        for bad in ["", ".", "a..b", "a b.c", "x/y", &"z".repeat(64)] {
            assert!(wire_name(bad).is_err(), "{bad:?}");
        }
        let long = vec!["a".repeat(60); 5].join(".");
        assert!(wire_name(&long).unwrap_err().contains("longer than 255"));
        assert_eq!(wire_label("us_east-1").unwrap(), b"\x09us_east-1");
    }

    #[test]
    fn records_get_their_rdata_length() {
        let mut out = Vec::new();
        put_pointer(&mut out, HEADER_LEN);
        let start = begin_record(&mut out, rtype::A, 30);
        out.extend_from_slice(&[10, 0, 0, 1]);
        end_rdata(&mut out, start);
        assert_eq!(out, [0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 10, 0, 0, 1]);
        let mut opt = Vec::new();
        put_opt(&mut opt, 1232, 1, None);
        assert_eq!(opt.len(), OPT_RECORD_LEN);
        assert_eq!(opt, [0, 0, 41, 0x04, 0xD0, 1, 0, 0, 0, 0, 0]);
    }
}

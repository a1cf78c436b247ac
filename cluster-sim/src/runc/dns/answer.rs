//! Answering one query from a [`Zone`]: a pure function from query bytes to response bytes.

use meridian_dns_wire::{
    self as wire, CLASS_ANY, CLASS_IN, CLASSIC_UDP_PAYLOAD, Edns, HEADER_LEN, Header,
    OPT_RECORD_LEN, Question, begin_record, end_rdata, flags, put_opt, put_pointer, put32, rtype,
};

use super::zone::{CLUSTER_DOMAIN, Node, Zone};

/// TTL of every record, and the negative-caching TTL (the SOA minimum): CoreDNS's default
/// for its `kubernetes` plugin, short so that pods see Service changes quickly.
pub(crate) const TTL: u32 = 5;
/// Largest UDP response this server sends, and the payload size it advertises: the DNS
/// Flag Day 2020 value.
pub(crate) const MAX_UDP_PAYLOAD: u16 = 1232;
/// SOA timers (nothing transfers this zone; they only need to be plausible).
const SOA_REFRESH: u32 = 7200;
const SOA_RETRY: u32 = 1800;
const SOA_EXPIRE: u32 = 86_400;

/// How the query arrived, which bounds the response size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// UDP: 512 bytes, or what the client's EDNS offers up to [`MAX_UDP_PAYLOAD`].
    Udp,
    /// TCP (length-framed): up to 65,535 bytes.
    Tcp,
}

/// Response codes this server gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rcode {
    /// Success, NODATA included.
    NoError,
    /// The query could not be read.
    FormErr,
    /// The name does not exist (in the zone, or anywhere this server knows of).
    NxDomain,
    /// Opcode other than QUERY.
    NotImp,
    /// Zone transfers and classes other than IN.
    Refused,
    /// EDNS version other than 0 (RFC 6891 §6.1.3).
    BadVers,
}

impl Rcode {
    fn code(self) -> u16 {
        match self {
            Rcode::NoError => 0,
            Rcode::FormErr => 1,
            Rcode::NxDomain => 3,
            Rcode::NotImp => 4,
            Rcode::Refused => 5,
            Rcode::BadVers => 16,
        }
    }
}

/// What was answered, for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answered {
    /// Response code.
    pub rcode: Rcode,
    /// Records in the answer section.
    pub answers: u16,
    /// The response did not fit and was cut to the question with TC set.
    pub truncated: bool,
}

/// Answers `query` from `zone` into `out` (cleared first). `None`, with `out` empty, when
/// the message must not be answered: too short to carry an ID, or itself a response.
pub(crate) fn answer(
    zone: &Zone,
    query: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Option<Answered> {
    out.clear();
    let header = Header::parse(query).ok()?;
    let mut r = Response::new(out, &header, transport);
    if header.opcode() != 0 {
        return Some(r.finish(Rcode::NotImp));
    }
    if header.qdcount != 1 {
        return Some(r.finish(Rcode::FormErr));
    }
    let Ok(question) = Question::parse(query) else {
        return Some(r.finish(Rcode::FormErr));
    };
    r.echo_question(&query[HEADER_LEN..question.end]);
    let Ok(edns) = wire::parse_edns(query, &header, question.end) else {
        return Some(r.finish(Rcode::FormErr));
    };
    r.set_edns(edns);
    if edns.is_some_and(|e| e.version != 0) {
        return Some(r.finish(Rcode::BadVers));
    }
    let qtype = question.qtype;
    if qtype == rtype::OPT {
        return Some(r.finish(Rcode::FormErr));
    }
    if !(question.qclass == CLASS_IN || question.qclass == CLASS_ANY)
        || qtype == rtype::AXFR
        || qtype == rtype::IXFR
    {
        return Some(r.finish(Rcode::Refused));
    }
    let name = wire::display_name(question.name.wire());
    let apex = format!("{CLUSTER_DOMAIN}.");
    if !(name == apex || name.ends_with(&format!(".{apex}"))) {
        // No upstream to forward to: every name outside the cluster domain does not exist
        // as far as this server knows. NXDOMAIN rather than REFUSED: resolvers (musl's)
        // ignore a REFUSED and wait for their timeout, which would turn each search-path
        // miss into seconds.
        return Some(r.finish(Rcode::NxDomain));
    }
    r.out_flags |= flags::AA;
    let Some(node) = zone.get(&name) else {
        soa(zone, &mut r, Section::Authority);
        return Some(r.finish(Rcode::NxDomain));
    };
    let wants = |t: u16| qtype == t || qtype == rtype::ANY;
    match node {
        Node::Empty if name == apex && wants(rtype::SOA) => soa(zone, &mut r, Section::Answer),
        Node::Addresses(ips) if wants(rtype::A) => {
            for ip in ips {
                put_pointer(r.out, HEADER_LEN);
                address(&mut r, Section::Answer, *ip);
            }
        }
        Node::Alias(target) => {
            put_pointer(r.out, HEADER_LEN);
            let start = begin_record(r.out, rtype::CNAME, TTL);
            put_name(r.out, target);
            end_rdata(r.out, start);
            r.count(Section::Answer);
            // A target inside the zone is followed here, as CoreDNS does: there is no
            // recursive resolver to do it.
            if qtype != rtype::CNAME
                && let Some(Node::Addresses(ips)) = zone.get(target)
                && wants(rtype::A)
            {
                for ip in ips {
                    put_name(r.out, target);
                    address(&mut r, Section::Answer, *ip);
                }
            }
        }
        Node::Srv(targets) if wants(rtype::SRV) => {
            let weight = (100 / targets.len().max(1)).max(1) as u16;
            for t in targets {
                put_pointer(r.out, HEADER_LEN);
                let start = begin_record(r.out, rtype::SRV, TTL);
                for v in [0, weight, t.port] {
                    r.out.extend_from_slice(&v.to_be_bytes());
                }
                put_name(r.out, &t.target);
                end_rdata(r.out, start);
                r.count(Section::Answer);
            }
            // The targets' addresses as additional records, saving a round trip.
            for t in targets {
                if let Some(Node::Addresses(ips)) = zone.get(&t.target) {
                    for ip in ips {
                        put_name(r.out, &t.target);
                        address(&mut r, Section::Additional, *ip);
                    }
                }
            }
        }
        // The name exists without records of that type: NODATA.
        _ => soa(zone, &mut r, Section::Authority),
    }
    Some(r.finish(Rcode::NoError))
}

/// Appends a dotted name in wire form, uncompressed. Names in the zone come from object
/// names the API validated; anything unwritable is written as the root.
fn put_name(out: &mut Vec<u8>, dotted: &str) {
    if let Ok(wire) = wire::wire_name(dotted) {
        out.extend_from_slice(&wire);
    }
    out.push(0);
}

/// Appends the fixed part and RDATA of an A record whose owner was just written.
fn address(r: &mut Response, section: Section, ip: std::net::Ipv4Addr) {
    let start = begin_record(r.out, rtype::A, TTL);
    r.out.extend_from_slice(&ip.octets());
    end_rdata(r.out, start);
    r.count(section);
}

/// The zone's SOA record (owner the domain).
fn soa(zone: &Zone, r: &mut Response, section: Section) {
    put_name(r.out, CLUSTER_DOMAIN);
    let start = begin_record(r.out, rtype::SOA, TTL);
    put_name(r.out, &format!("ns.dns.{CLUSTER_DOMAIN}"));
    put_name(r.out, &format!("hostmaster.{CLUSTER_DOMAIN}"));
    for v in [zone.serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, TTL] {
        put32(r.out, v);
    }
    end_rdata(r.out, start);
    r.count(section);
}

#[derive(Clone, Copy)]
enum Section {
    Answer = 0,
    Authority = 1,
    Additional = 2,
}

/// A response being written: header fields kept aside and patched in by `finish`.
struct Response<'a> {
    out: &'a mut Vec<u8>,
    out_flags: u16,
    qdcount: u16,
    counts: [u16; 3],
    question_end: usize,
    edns: Option<Edns>,
    /// Largest response the client can take.
    limit: usize,
    transport: Transport,
}

impl<'a> Response<'a> {
    fn new(out: &'a mut Vec<u8>, query: &Header, transport: Transport) -> Response<'a> {
        out.extend_from_slice(&query.id.to_be_bytes());
        out.extend_from_slice(&[0; HEADER_LEN - 2]);
        Response {
            out,
            out_flags: flags::QR | (query.flags & (flags::OPCODE_MASK | flags::RD | flags::CD)),
            qdcount: 0,
            counts: [0; 3],
            question_end: HEADER_LEN,
            edns: None,
            limit: match transport {
                Transport::Udp => CLASSIC_UDP_PAYLOAD as usize,
                Transport::Tcp => u16::MAX as usize,
            },
            transport,
        }
    }

    fn echo_question(&mut self, question: &[u8]) {
        self.out.extend_from_slice(question);
        self.qdcount = 1;
        self.question_end = self.out.len();
    }

    fn set_edns(&mut self, edns: Option<Edns>) {
        self.edns = edns;
        if let (Transport::Udp, Some(e)) = (self.transport, edns) {
            self.limit = e.udp_payload.clamp(CLASSIC_UDP_PAYLOAD, MAX_UDP_PAYLOAD) as usize;
        }
    }

    fn count(&mut self, section: Section) {
        self.counts[section as usize] += 1;
    }

    /// Sets TC and drops every record when the response does not fit the client's limit
    /// (RFC 2181 §9: no partial RRsets; the client retries over TCP), appends OPT when the
    /// query had one, and fills in the header.
    fn finish(self, rcode: Rcode) -> Answered {
        let opt_len = if self.edns.is_some() {
            OPT_RECORD_LEN
        } else {
            0
        };
        let mut out_flags = self.out_flags | (rcode.code() & 0xF);
        let mut counts = self.counts;
        let truncated = self.out.len() + opt_len > self.limit;
        if truncated {
            self.out.truncate(self.question_end);
            counts = [0; 3];
            out_flags |= flags::TC;
        }
        if self.edns.is_some() {
            put_opt(self.out, MAX_UDP_PAYLOAD, (rcode.code() >> 4) as u8, None);
            counts[Section::Additional as usize] += 1;
        }
        let h = &mut self.out[2..HEADER_LEN];
        h[0..2].copy_from_slice(&out_flags.to_be_bytes());
        h[2..4].copy_from_slice(&self.qdcount.to_be_bytes());
        for (i, c) in counts.iter().enumerate() {
            h[4 + 2 * i..6 + 2 * i].copy_from_slice(&c.to_be_bytes());
        }
        Answered {
            rcode,
            answers: counts[Section::Answer as usize],
            truncated,
        }
    }
}

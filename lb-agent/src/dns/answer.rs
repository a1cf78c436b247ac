//! Answering one query from a [`DnsView`]: a pure function from query bytes to response
//! bytes, writing into a buffer the caller reuses so the hot path does not allocate.

use std::net::IpAddr;

use super::derived::{Derived, derive};
use super::order::each_answer;
use super::view::{DnsView, Locality, Node, Scope};
use super::wire::{
    self, CLASS_ANY, CLASS_IN, CLASSIC_UDP_PAYLOAD, Edns, HEADER_LEN, Header, OPT_RECORD_LEN,
    Question, begin_record, end_rdata, flags, put_label, put_opt, put_pointer, put32, rtype,
};

/// UDP payload size advertised in responses over TCP, where the server's UDP limit is not
/// known: the DNS Flag Day 2020 default.
pub const DEFAULT_UDP_PAYLOAD: u16 = 1232;

/// SOA timers. Nothing transfers this zone (every lb-agent builds it from the same
/// configuration), so refresh/retry/expire only need to be plausible; the minimum, which
/// resolvers use as the negative-caching TTL, is the configured TTL.
const SOA_REFRESH: u32 = 3600;
const SOA_RETRY: u32 = 600;
const SOA_EXPIRE: u32 = 86_400;
/// Mailbox label of the SOA RNAME: `hostmaster.<dnsZone>`.
const HOSTMASTER: &[u8] = b"hostmaster";

/// How the query arrived, which bounds the response size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// UDP; `max_payload` is the largest response this server sends (and advertises in
    /// its OPT record) whatever the client offers. Below 512 counts as 512.
    Udp {
        /// Largest UDP response, bytes.
        max_payload: u16,
    },
    /// TCP (length-framed): up to 65,535 bytes.
    Tcp,
}

/// Response code, EDNS extended codes included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rcode {
    /// Success (including NODATA: no records of that type).
    NoError,
    /// The query could not be parsed.
    FormErr,
    /// The name does not exist in the zone.
    NxDomain,
    /// Opcode other than QUERY.
    NotImp,
    /// Not this server's zone, class or business (zone transfers).
    Refused,
    /// EDNS version other than 0 (RFC 6891 §6.1.3).
    BadVers,
}

impl Rcode {
    /// The full 12-bit code.
    pub fn code(self) -> u16 {
        match self {
            Rcode::NoError => 0,
            Rcode::FormErr => 1,
            Rcode::NxDomain => 3,
            Rcode::NotImp => 4,
            Rcode::Refused => 5,
            Rcode::BadVers => 16,
        }
    }

    /// Mnemonic, as in RFC 6895.
    pub fn as_str(self) -> &'static str {
        match self {
            Rcode::NoError => "NOERROR",
            Rcode::FormErr => "FORMERR",
            Rcode::NxDomain => "NXDOMAIN",
            Rcode::NotImp => "NOTIMP",
            Rcode::Refused => "REFUSED",
            Rcode::BadVers => "BADVERS",
        }
    }
}

/// What was answered, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    /// Response code.
    pub rcode: Rcode,
    /// QTYPE of the question (0 when there was no readable question).
    pub qtype: u16,
    /// Records in the answer section.
    pub answers: u16,
    /// The response did not fit and was cut to the question with TC set.
    pub truncated: bool,
}

/// Answers `query` from `view` for a client at `client` into `out` (cleared first). An
/// EDNS Client Subnet option in the query stands for `client` when ordering answers.
/// Returns `None`, with `out` empty, when the message must not be answered at all: too
/// short to carry an ID, or itself a response.
pub fn answer(
    view: &DnsView,
    query: &[u8],
    client: IpAddr,
    transport: Transport,
    out: &mut Vec<u8>,
) -> Option<Answered> {
    out.clear();
    let header = Header::parse(query).ok()?;
    let mut r = Response::new(out, &header, transport);
    if header.opcode() != 0 {
        return Some(r.finish(Rcode::NotImp, 0));
    }
    if header.qdcount != 1 {
        return Some(r.finish(Rcode::FormErr, 0));
    }
    let Ok(question) = Question::parse(query) else {
        return Some(r.finish(Rcode::FormErr, 0));
    };
    r.echo_question(&query[HEADER_LEN..question.end]);
    let qtype = question.qtype;
    let Ok(edns) = wire::parse_edns(query, &header, question.end) else {
        return Some(r.finish(Rcode::FormErr, qtype));
    };
    r.set_edns(edns);
    // Behind a resolver that sends EDNS Client Subnet, the client is the subnet it names
    // (a zero-length prefix means the client asked to stay anonymous).
    let client = edns
        .and_then(|e| e.client_subnet)
        .filter(|c| c.source_prefix > 0)
        .map_or(client, |c| c.address);
    if edns.is_some_and(|e| e.version != 0) {
        return Some(r.finish(Rcode::BadVers, qtype));
    }
    if qtype == rtype::OPT {
        return Some(r.finish(Rcode::FormErr, qtype));
    }
    if !(question.qclass == CLASS_IN || question.qclass == CLASS_ANY)
        || qtype == rtype::AXFR
        || qtype == rtype::IXFR
    {
        return Some(r.finish(Rcode::Refused, qtype));
    }
    let Some(rel_labels) = relative_labels(view, &question) else {
        return Some(r.finish(Rcode::Refused, qtype));
    };
    r.authoritative();
    let name = question.name.wire();
    let rel_len = question.name.label_offset(rel_labels);
    let at = Names {
        zone: HEADER_LEN + rel_len,
        // Only read for zone-level names, which have at least four relative labels.
        region: HEADER_LEN + question.name.label_offset(3.min(rel_labels)),
        // Only read for SRV names, which have four.
        service: HEADER_LEN + question.name.label_offset(2.min(rel_labels)),
        seed: header.id,
    };
    let rcode = if rel_labels == 0 {
        apex(view, &mut r, qtype, at);
        Rcode::NoError
    } else {
        match view.names.get(&name[..rel_len]) {
            None => match derive(view, &question.name, rel_labels) {
                None => {
                    soa(view, &mut r, Section::Authority, at);
                    Rcode::NxDomain
                }
                Some(Derived::Empty) => {
                    soa(view, &mut r, Section::Authority, at);
                    Rcode::NoError
                }
                Some(Derived::Host { service, cluster }) => {
                    if qtype == rtype::A || qtype == rtype::ANY {
                        let ip = view.services[service as usize].address(view, cluster);
                        address_record(view, &mut r, Section::Answer, HEADER_LEN, ip);
                    } else {
                        soa(view, &mut r, Section::Authority, at);
                    }
                    Rcode::NoError
                }
                Some(Derived::Srv { service, port }) => {
                    let asker = view.locality(client);
                    srv(view, &mut r, qtype, service as usize, port, &asker, at);
                    Rcode::NoError
                }
            },
            Some(Node::EmptyNonTerminal) => {
                soa(view, &mut r, Section::Authority, at);
                Rcode::NoError
            }
            Some(&Node::NameServer(c)) => {
                if qtype == rtype::A || qtype == rtype::ANY {
                    a_record(view, &mut r, Section::Answer, HEADER_LEN, c);
                } else {
                    soa(view, &mut r, Section::Authority, at);
                }
                Rcode::NoError
            }
            Some(&Node::Service { service, scope }) => {
                let asker = view.locality(client);
                service_name(view, &mut r, qtype, service as usize, scope, &asker, at);
                Rcode::NoError
            }
        }
    };
    Some(r.finish(rcode, qtype))
}

/// Number of labels left of the zone in the question name, or `None` when the name is
/// not in the zone.
fn relative_labels(view: &DnsView, question: &Question) -> Option<usize> {
    let name = question.name.wire();
    let rel_len = name.len().checked_sub(view.zone.len())?;
    if name[rel_len..] != *view.zone {
        return None;
    }
    // The suffix must start on a label boundary ("xglobal.test" is not in "global.test").
    (0..=question.name.label_count()).find(|&i| question.name.label_offset(i) == rel_len)
}

/// Offsets in the response of names the records point at (all inside the echoed question).
#[derive(Clone, Copy)]
struct Names {
    /// `<dnsZone>`.
    zone: usize,
    /// `<region>.<dnsZone>` of a zone-level question.
    region: usize,
    /// `<svc>.<ns>.<dnsZone>` of an SRV question.
    service: usize,
    /// The query ID: what `weighted` answers choose by.
    seed: u16,
}

fn apex(view: &DnsView, r: &mut Response, qtype: u16, at: Names) {
    let (soa_answer, ns_answer) = match qtype {
        rtype::SOA => (true, false),
        rtype::NS => (false, true),
        rtype::ANY => (true, true),
        _ => (false, false),
    };
    if soa_answer {
        soa(view, r, Section::Answer, at);
    }
    if ns_answer {
        for c in &view.clusters {
            put_pointer(r.out, at.zone);
            let start = begin_record(r.out, rtype::NS, view.ttl);
            put_label(r.out, &c.ns_label[1..]);
            put_pointer(r.out, at.zone);
            end_rdata(r.out, start);
            r.count(Section::Answer);
        }
        // Glue: the name servers live inside the zone they serve.
        for c in &view.clusters {
            put_label(r.out, &c.ns_label[1..]);
            put_pointer(r.out, at.zone);
            let start = begin_record(r.out, rtype::A, view.ttl);
            r.out.extend_from_slice(&c.address.octets());
            end_rdata(r.out, start);
            r.count(Section::Additional);
        }
    }
    if !soa_answer && !ns_answer {
        soa(view, r, Section::Authority, at);
    }
}

/// Answers a Service name: the serving clusters of its scope nearest first, or, when its
/// zone or region has none, a CNAME to the next wider name followed (as the authority for
/// that name too) by that name's answer.
fn service_name(
    view: &DnsView,
    r: &mut Response,
    qtype: u16,
    service: usize,
    mut scope: Scope,
    asker: &Locality,
    at: Names,
) {
    let s = &view.services[service];
    let mut owner = HEADER_LEN;
    loop {
        let serving = s.serving.iter().any(|&c| view.in_scope(scope, c));
        if serving && (qtype == rtype::A || qtype == rtype::ANY) {
            let dependent = each_answer(view, s, scope, asker, at.seed, |c, _, _| {
                address_record(view, r, Section::Answer, owner, s.address(view, c));
            });
            if dependent {
                // The choice depends on where the client is.
                r.client_dependent();
            }
            return;
        }
        if serving || scope == Scope::Global {
            soa(view, r, Section::Authority, at);
            return;
        }
        let wider = view.wider(scope);
        put_pointer(r.out, owner);
        let start = begin_record(r.out, rtype::CNAME, view.ttl);
        put_label(r.out, &s.name_label[1..]);
        put_label(r.out, &s.namespace_label[1..]);
        put_pointer(
            r.out,
            match wider {
                Scope::Global => at.zone,
                _ => at.region,
            },
        );
        end_rdata(r.out, start);
        r.count(Section::Answer);
        if qtype == rtype::CNAME {
            return;
        }
        owner = start;
        scope = wider;
    }
}

fn a_record(view: &DnsView, r: &mut Response, section: Section, owner: usize, cluster: u16) {
    address_record(
        view,
        r,
        section,
        owner,
        view.clusters[cluster as usize].address,
    );
}

fn address_record(
    view: &DnsView,
    r: &mut Response,
    section: Section,
    owner: usize,
    ip: std::net::Ipv4Addr,
) {
    put_pointer(r.out, owner);
    let start = begin_record(r.out, rtype::A, view.ttl);
    r.out.extend_from_slice(&ip.octets());
    end_rdata(r.out, start);
    r.count(section);
}

/// SRV records of one Service port: one per answered cluster (policy order, priority and
/// weight), target `<cluster>.<svc>.<ns>.<dnsZone>` with its address as glue, port the
/// listen port (the Service's own port at a dedicated address). Other types: NODATA.
fn srv(
    view: &DnsView,
    r: &mut Response,
    qtype: u16,
    service: usize,
    port: usize,
    asker: &Locality,
    at: Names,
) {
    if qtype != rtype::SRV && qtype != rtype::ANY {
        soa(view, r, Section::Authority, at);
        return;
    }
    let s = &view.services[service];
    let p = &s.ports[port];
    // Targets first, glue after: the additional section follows the answers.
    let mut targets = [0u16; 64];
    let mut n = 0;
    let dependent = each_answer(
        view,
        s,
        Scope::Global,
        asker,
        at.seed,
        |c, priority, weight| {
            put_pointer(r.out, HEADER_LEN);
            let start = begin_record(r.out, rtype::SRV, view.ttl);
            for v in [priority, weight, s.srv_port(p, c)] {
                r.out.extend_from_slice(&v.to_be_bytes());
            }
            put_label(r.out, &view.clusters[c as usize].label[1..]);
            put_pointer(r.out, at.service);
            end_rdata(r.out, start);
            r.count(Section::Answer);
            if n < targets.len() {
                targets[n] = c;
                n += 1;
            }
        },
    );
    if dependent {
        r.client_dependent();
    }
    for &c in &targets[..n] {
        put_label(r.out, &view.clusters[c as usize].label[1..]);
        put_pointer(r.out, at.service);
        let start = begin_record(r.out, rtype::A, view.ttl);
        r.out.extend_from_slice(&s.address(view, c).octets());
        end_rdata(r.out, start);
        r.count(Section::Additional);
    }
    if n == 0 {
        soa(view, r, Section::Authority, at);
    }
}

fn soa(view: &DnsView, r: &mut Response, section: Section, at: Names) {
    put_pointer(r.out, at.zone);
    let start = begin_record(r.out, rtype::SOA, view.ttl);
    put_label(r.out, &view.self_ns_label[1..]);
    put_pointer(r.out, at.zone);
    put_label(r.out, HOSTMASTER);
    put_pointer(r.out, at.zone);
    for v in [view.serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, view.ttl] {
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
    flags: u16,
    qdcount: u16,
    counts: [u16; 3],
    question_end: usize,
    edns: Option<Edns>,
    /// Largest response the client can take.
    limit: usize,
    /// UDP payload we advertise in our OPT record.
    advertise: u16,
    /// SCOPE PREFIX-LENGTH of an echoed Client Subnet option: 0 unless the answer
    /// depends on the client's address.
    client_scope: u8,
    transport: Transport,
}

impl<'a> Response<'a> {
    fn new(out: &'a mut Vec<u8>, query: &Header, transport: Transport) -> Response<'a> {
        out.extend_from_slice(&query.id.to_be_bytes());
        out.extend_from_slice(&[0; HEADER_LEN - 2]);
        let advertise = match transport {
            Transport::Udp { max_payload } => max_payload.max(CLASSIC_UDP_PAYLOAD),
            Transport::Tcp => DEFAULT_UDP_PAYLOAD,
        };
        Response {
            out,
            flags: flags::QR | (query.flags & (flags::OPCODE_MASK | flags::RD | flags::CD)),
            qdcount: 0,
            counts: [0; 3],
            question_end: HEADER_LEN,
            edns: None,
            limit: CLASSIC_UDP_PAYLOAD as usize,
            advertise,
            client_scope: 0,
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
        self.limit = match (self.transport, edns) {
            (Transport::Tcp, _) => u16::MAX as usize,
            (Transport::Udp { .. }, None) => CLASSIC_UDP_PAYLOAD as usize,
            (Transport::Udp { .. }, Some(e)) => {
                e.udp_payload.clamp(CLASSIC_UDP_PAYLOAD, self.advertise) as usize
            }
        };
    }

    /// The answer was chosen for the client's address: a Client Subnet option is echoed
    /// with the query's source prefix as scope (what our locality decision looked at).
    fn client_dependent(&mut self) {
        if let Some(c) = self.edns.and_then(|e| e.client_subnet) {
            self.client_scope = c.source_prefix;
        }
    }

    fn authoritative(&mut self) {
        self.flags |= flags::AA;
    }

    fn count(&mut self, section: Section) {
        self.counts[section as usize] += 1;
    }

    /// Sets TC and drops every record when the response does not fit the client's limit
    /// (RFC 2181 §9: no partial RRsets; the client retries over TCP), appends OPT when the
    /// query had one, and fills in the header.
    fn finish(self, rcode: Rcode, qtype: u16) -> Answered {
        let client_subnet = self.edns.and_then(|e| e.client_subnet);
        let opt_len = match self.edns {
            None => 0,
            Some(_) => OPT_RECORD_LEN + client_subnet.map_or(0, |c| c.wire_len()),
        };
        let mut flags = self.flags | (rcode.code() & 0xF);
        let mut counts = self.counts;
        let truncated = self.out.len() + opt_len > self.limit;
        if truncated {
            self.out.truncate(self.question_end);
            counts = [0; 3];
            flags |= flags::TC;
        }
        if self.edns.is_some() {
            let option = client_subnet.as_ref().map(|c| (c, self.client_scope));
            put_opt(self.out, self.advertise, (rcode.code() >> 4) as u8, option);
            counts[Section::Additional as usize] += 1;
        }
        let h = &mut self.out[2..HEADER_LEN];
        h[0..2].copy_from_slice(&flags.to_be_bytes());
        h[2..4].copy_from_slice(&self.qdcount.to_be_bytes());
        for (i, c) in counts.iter().enumerate() {
            h[4 + 2 * i..6 + 2 * i].copy_from_slice(&c.to_be_bytes());
        }
        Answered {
            rcode,
            qtype,
            answers: counts[Section::Answer as usize],
            truncated,
        }
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "answer_policy_tests.rs"]
mod policy_tests;

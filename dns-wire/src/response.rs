//! Writing a response: the checks every authoritative responder makes of a query before it
//! looks at the name ([`Response::respond`]), and the header, truncation and OPT record it
//! ends with ([`Response::finish`]). The responders (lb-agent's for the federation zone,
//! cluster-sim's cluster DNS) write the records in between.

use crate::{
    CLASS_ANY, CLASS_IN, CLASSIC_UDP_PAYLOAD, Edns, HEADER_LEN, Header, OPT_RECORD_LEN, Question,
    flags, parse_edns, put_opt, rtype,
};

/// UDP payload size advertised in responses over TCP, where the server's UDP limit is not
/// known: the DNS Flag Day 2020 default.
pub const DEFAULT_UDP_PAYLOAD: u16 = 1232;

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
    /// The name does not exist.
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

/// What was answered, for metrics, logs and tests.
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

/// A section records are counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Answers.
    Answer = 0,
    /// Authority (an SOA for negative answers).
    Authority = 1,
    /// Additional records (addresses of SRV targets, glue).
    Additional = 2,
}

/// A query that passed the checks of [`Response::respond`], with its response begun.
pub struct Started<'a> {
    /// The response, question echoed, EDNS noted.
    pub response: Response<'a>,
    /// The question (class IN or ANY, not a zone transfer, not OPT).
    pub question: Question,
    /// The query's EDNS (version 0), if it had one.
    pub edns: Option<Edns>,
}

/// A response being written into a reused buffer: header fields kept aside and patched in
/// by [`Response::finish`].
pub struct Response<'a> {
    /// The message so far; records are appended here.
    pub out: &'a mut Vec<u8>,
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
    qtype: u16,
}

impl<'a> Response<'a> {
    /// Answers `query` into `out` (cleared first): the checks of every responder
    /// ([`Response::start`]'s), then `write` for a query that passed them, which writes the
    /// records and [`finish`](Response::finish)es. `None`, with `out` empty, when the message
    /// must not be answered at all.
    pub fn respond(
        query: &[u8],
        transport: Transport,
        out: &'a mut Vec<u8>,
        write: impl FnOnce(Started<'a>) -> Answered,
    ) -> Option<Answered> {
        Some(match Self::start(query, transport, out)? {
            Ok(started) => write(started),
            Err(answered) => answered,
        })
    }

    /// Reads `query` and begins its response in `out` (cleared first). `None`, with `out`
    /// empty, when the message must not be answered at all: too short to carry an ID, or
    /// itself a response. `Some(Err)` when it is answered by the checks alone, `out` holding
    /// the whole response: another opcode (NOTIMP), not exactly one readable question or a
    /// bad OPT (FORMERR), an EDNS version other than 0 (BADVERS), a class other than IN or
    /// ANY, or a zone transfer (REFUSED).
    fn start(
        query: &[u8],
        transport: Transport,
        out: &'a mut Vec<u8>,
    ) -> Option<Result<Started<'a>, Answered>> {
        out.clear();
        let header = Header::parse(query).ok()?;
        let mut r = Response::new(out, &header, transport);
        if header.opcode() != 0 {
            return Some(Err(r.finish(Rcode::NotImp)));
        }
        if header.qdcount != 1 {
            return Some(Err(r.finish(Rcode::FormErr)));
        }
        let Ok(question) = Question::parse(query) else {
            return Some(Err(r.finish(Rcode::FormErr)));
        };
        r.echo_question(&query[HEADER_LEN..question.end], question.qtype);
        let Ok(edns) = parse_edns(query, &header, question.end) else {
            return Some(Err(r.finish(Rcode::FormErr)));
        };
        r.set_edns(edns);
        if edns.is_some_and(|e| e.version != 0) {
            return Some(Err(r.finish(Rcode::BadVers)));
        }
        let qtype = question.qtype;
        if qtype == rtype::OPT {
            return Some(Err(r.finish(Rcode::FormErr)));
        }
        if !(question.qclass == CLASS_IN || question.qclass == CLASS_ANY)
            || qtype == rtype::AXFR
            || qtype == rtype::IXFR
        {
            return Some(Err(r.finish(Rcode::Refused)));
        }
        Some(Ok(Started {
            response: r,
            question,
            edns,
        }))
    }

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
            qtype: 0,
        }
    }

    fn echo_question(&mut self, question: &[u8], qtype: u16) {
        self.out.extend_from_slice(question);
        self.qdcount = 1;
        self.question_end = self.out.len();
        self.qtype = qtype;
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
    /// with the query's source prefix as scope (what the decision looked at).
    pub fn client_dependent(&mut self) {
        if let Some(c) = self.edns.and_then(|e| e.client_subnet) {
            self.client_scope = c.source_prefix;
        }
    }

    /// Sets AA: the name is in this server's zone.
    pub fn authoritative(&mut self) {
        self.flags |= flags::AA;
    }

    /// Counts a record just written in `section`.
    pub fn count(&mut self, section: Section) {
        self.counts[section as usize] += 1;
    }

    /// Sets TC and drops every record when the response does not fit the client's limit
    /// (RFC 2181 §9: no partial RRsets; the client retries over TCP), appends OPT when the
    /// query had one, and fills in the header.
    pub fn finish(self, rcode: Rcode) -> Answered {
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
            qtype: self.qtype,
            answers: counts[Section::Answer as usize],
            truncated,
        }
    }
}

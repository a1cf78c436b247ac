//! Answering one query from a [`DnsView`]: a pure function from query bytes to response
//! bytes, writing into a buffer the caller reuses so the hot path does not allocate.

use std::net::IpAddr;

use super::derived::{Derived, derive};
use super::order::each_answer;
use super::view::{DnsView, Locality, Node, Scope};
pub use super::wire::{Answered, DEFAULT_UDP_PAYLOAD, Rcode, Transport};
use super::wire::{
    HEADER_LEN, Question, Response, Section, Started, be16, begin_record, end_rdata, put_label,
    put_pointer, put32, rtype,
};

/// SOA timers. Nothing transfers this zone (every lb-agent builds it from the same
/// configuration), so refresh/retry/expire only need to be plausible; the minimum, which
/// resolvers use as the negative-caching TTL, is the configured TTL.
const SOA_REFRESH: u32 = 3600;
const SOA_RETRY: u32 = 600;
const SOA_EXPIRE: u32 = 86_400;
/// Mailbox label of the SOA RNAME: `hostmaster.<dnsZone>`.
const HOSTMASTER: &[u8] = b"hostmaster";

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
    Response::respond(query, transport, out, |started| {
        records(view, query, client, started)
    })
}

/// The records answering a query from `client` that passed the common checks, and the
/// finished response.
fn records(view: &DnsView, query: &[u8], client: IpAddr, started: Started<'_>) -> Answered {
    let Started {
        response: mut r,
        question,
        edns,
    } = started;
    let qtype = question.qtype;
    // Behind a resolver that sends EDNS Client Subnet, the client is the subnet it names
    // (a zero-length prefix means the client asked to stay anonymous).
    let client = edns
        .and_then(|e| e.client_subnet)
        .filter(|c| c.source_prefix > 0)
        .map_or(client, |c| c.address);
    let Some(rel_labels) = relative_labels(view, &question) else {
        return r.finish(Rcode::Refused);
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
        seed: be16(query, 0),
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
    r.finish(rcode)
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

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "answer_policy_tests.rs"]
mod policy_tests;

//! Answering one query from a [`Zone`]: a pure function from query bytes to response bytes.

use meridian_dns_wire::{
    self as wire, HEADER_LEN, Response, Section, Started, begin_record, end_rdata, put_pointer,
    put32, rtype,
};
pub(crate) use meridian_dns_wire::{Answered, Rcode, Transport};

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

/// How this server takes queries over UDP: responses up to [`MAX_UDP_PAYLOAD`].
pub(crate) const UDP: Transport = Transport::Udp {
    max_payload: MAX_UDP_PAYLOAD,
};

/// Answers `query` from `zone` into `out` (cleared first). `None`, with `out` empty, when
/// the message must not be answered: too short to carry an ID, or itself a response.
pub(crate) fn answer(
    zone: &Zone,
    query: &[u8],
    transport: Transport,
    out: &mut Vec<u8>,
) -> Option<Answered> {
    Response::respond(query, transport, out, |started| records(zone, started))
}

/// The records answering a query that passed the common checks, and the finished response.
fn records(zone: &Zone, started: Started<'_>) -> Answered {
    let Started {
        response: mut r,
        question,
        ..
    } = started;
    let qtype = question.qtype;
    let name = wire::display_name(question.name.wire());
    let apex = format!("{CLUSTER_DOMAIN}.");
    if !(name == apex || name.ends_with(&format!(".{apex}"))) {
        // No upstream to forward to: every name outside the cluster domain does not exist
        // as far as this server knows. NXDOMAIN rather than REFUSED: resolvers (musl's)
        // ignore a REFUSED and wait for their timeout, which would turn each search-path
        // miss into seconds.
        return r.finish(Rcode::NxDomain);
    }
    r.authoritative();
    let Some(node) = zone.get(&name) else {
        soa(zone, &mut r, Section::Authority);
        return r.finish(Rcode::NxDomain);
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
    r.finish(Rcode::NoError)
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

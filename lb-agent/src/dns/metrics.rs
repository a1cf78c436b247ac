//! Prometheus counters of the DNS responder: responses by rcode and qtype, truncations,
//! dropped messages, TCP connections.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::answer::{Answered, Rcode};
use super::wire::rtype;

/// Labels of a response.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResponseLabels {
    /// `NOERROR`, `NXDOMAIN`, `REFUSED`, `FORMERR`, `NOTIMP` or `BADVERS`.
    pub rcode: &'static str,
    /// `A`, `AAAA`, `NS`, `SOA`, `CNAME`, `ANY`, ... or `OTHER`.
    pub qtype: &'static str,
}

const RCODES: [Rcode; 6] = [
    Rcode::NoError,
    Rcode::FormErr,
    Rcode::NxDomain,
    Rcode::NotImp,
    Rcode::Refused,
    Rcode::BadVers,
];

/// QTYPEs counted under their own name; the rest are `OTHER`, which keeps the label set
/// bounded whatever clients send.
const QTYPES: [(u16, &str); 13] = [
    (rtype::A, "A"),
    (rtype::NS, "NS"),
    (rtype::CNAME, "CNAME"),
    (rtype::SOA, "SOA"),
    (rtype::PTR, "PTR"),
    (rtype::MX, "MX"),
    (rtype::TXT, "TXT"),
    (rtype::AAAA, "AAAA"),
    (rtype::SRV, "SRV"),
    (rtype::HTTPS, "HTTPS"),
    (rtype::AXFR, "AXFR"),
    (rtype::ANY, "ANY"),
    (0, "OTHER"),
];

/// Counters of one DNS responder (UDP and TCP share them). Cheap to clone; register once
/// with [`DnsMetrics::register`].
#[derive(Clone, Debug)]
pub struct DnsMetrics {
    responses: Family<ResponseLabels, Counter>,
    /// The family's counters resolved ahead, `[rcode][qtype]`, so counting a response
    /// is one atomic add instead of a locked map lookup.
    by_code: Vec<Counter>,
    truncated: Counter,
    dropped: Counter,
    tcp_connections: Counter,
    tcp_rejected: Counter,
}

impl Default for DnsMetrics {
    fn default() -> Self {
        let responses = Family::<ResponseLabels, Counter>::default();
        let mut by_code = Vec::with_capacity(RCODES.len() * QTYPES.len());
        for rcode in RCODES {
            for (_, qtype) in QTYPES {
                by_code.push(
                    responses
                        .get_or_create(&ResponseLabels {
                            rcode: rcode.as_str(),
                            qtype,
                        })
                        .clone(),
                );
            }
        }
        DnsMetrics {
            responses,
            by_code,
            truncated: Counter::default(),
            dropped: Counter::default(),
            tcp_connections: Counter::default(),
            tcp_rejected: Counter::default(),
        }
    }
}

impl DnsMetrics {
    /// New counters, all zero.
    pub fn new() -> DnsMetrics {
        DnsMetrics::default()
    }

    /// Registers the counters in `registry` (give it a prefix such as `lb_agent`) as
    /// `dns_responses{rcode,qtype}`, `dns_truncated`, `dns_dropped`,
    /// `dns_tcp_connections` and `dns_tcp_rejected` (all `_total`).
    pub fn register(&self, registry: &mut Registry) {
        let dns = registry.sub_registry_with_prefix("dns");
        dns.register(
            "responses",
            "DNS responses sent, by response code and query type",
            self.responses.clone(),
        );
        dns.register(
            "truncated",
            "UDP responses sent with TC set because the answer did not fit",
            self.truncated.clone(),
        );
        dns.register(
            "dropped",
            "DNS messages not answered (not a query, unreadable, or a socket error)",
            self.dropped.clone(),
        );
        dns.register(
            "tcp_connections",
            "DNS TCP connections accepted",
            self.tcp_connections.clone(),
        );
        dns.register(
            "tcp_rejected",
            "DNS TCP connections closed at once because too many were open",
            self.tcp_rejected.clone(),
        );
    }

    /// Counts one response.
    pub fn answered(&self, a: &Answered) {
        let r = RCODES.iter().position(|&c| c == a.rcode).unwrap_or(0);
        let q = QTYPES
            .iter()
            .position(|&(t, _)| t == a.qtype)
            .unwrap_or(QTYPES.len() - 1);
        self.by_code[r * QTYPES.len() + q].inc();
        if a.truncated {
            self.truncated.inc();
        }
    }

    /// Counts a message left unanswered.
    pub fn dropped(&self) {
        self.dropped.inc();
    }

    pub(crate) fn tcp_accepted(&self) {
        self.tcp_connections.inc();
    }

    pub(crate) fn tcp_rejected(&self) {
        self.tcp_rejected.inc();
    }

    /// Responses counted so far with this rcode and qtype mnemonic (for tests and
    /// debugging endpoints).
    pub fn responses(&self, rcode: Rcode, qtype: &'static str) -> u64 {
        self.responses
            .get_or_create(&ResponseLabels {
                rcode: rcode.as_str(),
                qtype,
            })
            .get()
    }

    /// Responses sent truncated.
    pub fn truncated_total(&self) -> u64 {
        self.truncated.get()
    }

    /// Messages left unanswered.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn responses_are_counted_by_rcode_and_qtype_and_exported() {
        let m = DnsMetrics::new();
        let mut registry = Registry::with_prefix("lb_agent");
        m.register(&mut registry);
        let a = |rcode, qtype, truncated| Answered {
            rcode,
            qtype,
            answers: 0,
            truncated,
        };
        m.answered(&a(Rcode::NoError, rtype::A, false));
        m.answered(&a(Rcode::NoError, rtype::A, true));
        m.answered(&a(Rcode::NxDomain, rtype::AAAA, false));
        m.answered(&a(Rcode::Refused, 999, false));
        m.dropped();
        assert_eq!(m.responses(Rcode::NoError, "A"), 2);
        assert_eq!(m.responses(Rcode::NxDomain, "AAAA"), 1);
        assert_eq!(m.responses(Rcode::Refused, "OTHER"), 1);
        assert_eq!(m.responses(Rcode::NoError, "AAAA"), 0);
        assert_eq!((m.truncated_total(), m.dropped_total()), (1, 1));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"lb_agent_dns_responses_total{rcode="NOERROR",qtype="A"} 2"#),
            "{text}"
        );
        assert!(text.contains("lb_agent_dns_truncated_total 1"), "{text}");
        assert!(text.contains("lb_agent_dns_dropped_total 1"), "{text}");
    }
}

//! Names under a Service that are not kept in the view's name table, because there would
//! be one per Service and port or per Service and cluster: `_<port>._<tcp|udp>.<svc>.<ns>`
//! (SRV records of a port, by name or number) and `<cluster>.<svc>.<ns>` (the address of a
//! cluster's lb-agent, or its dedicated address, for that Service: the SRV targets).

use super::view::{ClusterId, DnsView, Node, Scope};
use super::wire::QName;

/// What a derived name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Derived {
    /// SRV records of one port of a Service.
    Srv {
        /// Index in [`DnsView::services`].
        service: u32,
        /// Index in its ports.
        port: usize,
    },
    /// `_tcp.<svc>.<ns>` or `_udp.<svc>.<ns>`: exists, holds no data.
    Empty,
    /// One cluster's address for a Service.
    Host {
        /// Index in [`DnsView::services`].
        service: u32,
        /// The cluster.
        cluster: ClusterId,
    },
}

/// The global Service node `labels` (relative wire form) names, if any.
fn global_service(view: &DnsView, labels: &[u8]) -> Option<u32> {
    match view.names.get(labels) {
        Some(&Node::Service {
            service,
            scope: Scope::Global,
        }) => Some(service),
        _ => None,
    }
}

/// Reads `name` (with `rel_labels` labels left of the zone) as a derived name.
pub(crate) fn derive(view: &DnsView, name: &QName, rel_labels: usize) -> Option<Derived> {
    let wire = name.wire();
    let rel_len = name.label_offset(rel_labels);
    let label = |i: usize| &wire[name.label_offset(i)..name.label_offset(i + 1)];
    // `_tcp.<svc>.<ns>`.
    if rel_labels == 3 && is_proto(label(0)).is_some() {
        global_service(view, &wire[name.label_offset(1)..rel_len])?;
        return Some(Derived::Empty);
    }
    if rel_labels == 4 && label(0).get(1) == Some(&b'_') {
        let udp = is_proto(label(1))?;
        let service = global_service(view, &wire[name.label_offset(2)..rel_len])?;
        let s = &view.services[service as usize];
        let wanted = label(0);
        let number = std::str::from_utf8(&wanted[2..])
            .ok()
            .and_then(|n| n.parse::<u16>().ok());
        let port = s
            .ports
            .iter()
            .position(|p| p.udp == udp && (&*p.name_label == wanted || Some(p.port) == number))?;
        return Some(Derived::Srv { service, port });
    }
    if rel_labels == 3 {
        let service = global_service(view, &wire[name.label_offset(1)..rel_len])?;
        let cluster = *view.cluster_labels.get(label(0))?;
        return Some(Derived::Host { service, cluster });
    }
    None
}

/// `Some(true)` for `_udp`, `Some(false)` for `_tcp` (lowercased wire labels).
fn is_proto(label: &[u8]) -> Option<bool> {
    match label {
        b"\x04_udp" => Some(true),
        b"\x04_tcp" => Some(false),
        _ => None,
    }
}

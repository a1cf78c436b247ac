//! What a member should hold for a federated Service — the Service copy and Meridian's
//! `<name>-meridian` EndpointSlice — and what a member tells: its lb-agent's address and
//! ports, and the ready endpoints of a Service there. Pure functions over JSON objects.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use fed_api::cluster::LbAgentStatus;
use fed_api::lbconfig::LbPort;
use fed_api::names::{ENDPOINTSLICE_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_LABEL};
use serde_json::{Map, Value, json};

use fed_api::overrides::apply::{MemberCluster, OverrideError, Policy};

use super::ServiceKey;
use crate::copies::member_copy::overridden;
use crate::copies::record;
use crate::workload::{desired::member_metadata, drift};

/// Label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages an EndpointSlice.
pub const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// `spec` fields a member's API server allocates for itself: never copied, never drift.
const ALLOCATED: [&str; 4] = [
    "clusterIP",
    "clusterIPs",
    "healthCheckNodePort",
    "ipFamilies",
];

/// Takes out of a Service's spec what a member allocates for itself. A headless Service's
/// `clusterIP: None` (and its `clusterIPs: [None]`) is no allocation but what the Service
/// is (a StatefulSet's governing Service, whose DNS names its pods): it is kept, so each
/// member's copy is headless too.
fn remove_allocated(spec: &mut Map<String, Value>) {
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    for f in ALLOCATED {
        if !(headless && matches!(f, "clusterIP" | "clusterIPs")) {
            spec.remove(f);
        }
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
}

/// The member copy of a federated Service: its metadata with Meridian's labels, its spec
/// without the addresses and node ports the federation (or another cluster) allocated.
pub fn member_service(fed: &Value, uid: &str) -> Value {
    let mut spec = fed["spec"].as_object().cloned().unwrap_or_default();
    remove_allocated(&mut spec);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": member_metadata(fed, uid),
        "spec": spec,
    })
}

/// The Service copy (from [`member_service`]) cluster `c` gets under the `selected`
/// override policies. What the member allocates (cluster IPs, node ports, the health-check
/// node port) and its status stay the member's: an override that sets them is taken out
/// again, and one that removes them finds nothing to remove (the member's values are kept
/// on every write, see [`service_merged`]).
pub fn overridden_service(
    copy: &Value,
    c: &MemberCluster<'_>,
    selected: &[&Policy],
    uid: &str,
) -> Result<Value, OverrideError> {
    let mut out = overridden(copy, "Service", c, selected, uid)?;
    if let Some(o) = out.as_object_mut() {
        o.remove("status");
        if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
            remove_allocated(spec);
        }
    }
    // The record describes the copy as pushed.
    if record::Record::read(&out).is_some() {
        record::stamp(&mut out);
    }
    Ok(out)
}

/// Whether a member's Service matches the copy Meridian wants (defaults and allocated
/// values are not drift).
pub fn service_in_sync(actual: &Value, desired: &Value) -> bool {
    drift::in_sync(actual, &member_allocations_kept(actual, desired))
}

/// `desired` with the allocated fields it sets (a headless Service's `clusterIP: None`)
/// taken from `actual` where the member holds other values: they are immutable there, so
/// a copy made otherwise (before its Service was copied headless) is left as it is rather
/// than rewritten in vain on every sync.
fn member_allocations_kept<'a>(actual: &Value, desired: &'a Value) -> Cow<'a, Value> {
    let differs = |f: &str| {
        let have = &actual["spec"][f];
        desired["spec"]
            .get(f)
            .is_some_and(|want| !have.is_null() && have != want)
    };
    if !ALLOCATED.into_iter().any(differs) {
        return Cow::Borrowed(desired);
    }
    let mut out = desired.clone();
    for f in ALLOCATED.into_iter().filter(|f| differs(f)) {
        out["spec"][f] = actual["spec"][f].clone();
    }
    Cow::Owned(out)
}

/// The Service to write over a drifted `actual`: the desired spec, with the values the
/// member allocated (cluster IPs, node ports) kept, since they are immutable there.
pub fn service_merged(actual: &Value, desired: &Value) -> Value {
    let mut out = drift::merged(actual, desired);
    for f in ALLOCATED {
        if let Some(v) = actual["spec"].get(f).filter(|v| !v.is_null()) {
            out["spec"][f] = v.clone();
        }
    }
    let have = actual["spec"]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(ports) = out["spec"]["ports"].as_array_mut() {
        for p in ports.iter_mut() {
            let same = have.iter().find(|h| {
                h["port"] == p["port"] && h["protocol"] == p["protocol"] && h["name"] == p["name"]
            });
            if let Some(n) = same
                .and_then(|h| h.get("nodePort"))
                .filter(|n| !n.is_null())
            {
                p["nodePort"] = n.clone();
            }
        }
    }
    out
}

/// The TCP and UDP ports of a federated Service as the lb-agents serve them, with their
/// allocated listen ports; `None` while a port has no allocation.
pub fn lb_ports(svc: &Value, listen_port: impl Fn(&str) -> Option<u16>) -> Option<Vec<LbPort>> {
    let mut out = Vec::new();
    for p in proxied_ports(svc) {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        let port = p["port"].as_u64().and_then(|n| u16::try_from(n).ok())?;
        let protocol = if is_udp(p) {
            "udp"
        } else {
            LbPort::protocol_of(&name, p["appProtocol"].as_str())
        };
        out.push(LbPort {
            protocol: protocol.to_string(),
            listen_port: listen_port(&port_id(&name, port))?,
            name,
            port,
        });
    }
    Some(out)
}

fn is_udp(port: &Value) -> bool {
    port["protocol"].as_str() == Some("UDP")
}

/// The ports of a Service the lb-agents proxy: TCP and UDP (SCTP is not proxied).
pub fn proxied_ports(svc: &Value) -> impl Iterator<Item = &Value> {
    svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| matches!(p["protocol"].as_str().unwrap_or("TCP"), "TCP" | "UDP"))
}

/// How a Service port is named in the port allocation: its name, or its number when unnamed.
pub fn port_id(name: &str, port: u16) -> String {
    if name.is_empty() {
        port.to_string()
    } else {
        name.to_string()
    }
}

/// The allocation ids of a Service's proxied ports.
pub fn port_ids(svc: &Value) -> Vec<String> {
    proxied_ports(svc)
        .filter_map(|p| {
            let port = p["port"].as_u64().and_then(|n| u16::try_from(n).ok())?;
            Some(port_id(p["name"].as_str().unwrap_or_default(), port))
        })
        .collect()
}

/// Meridian's EndpointSlice for a Service in one member: one ready endpoint per remote
/// lb-agent address (sorted, deduplicated), ports named like the Service's with the
/// allocated listen ports.
pub fn slice(key: &ServiceKey, uid: &str, remotes: &[Ipv4Addr], ports: &[LbPort]) -> Value {
    let addresses: BTreeSet<&Ipv4Addr> = remotes.iter().collect();
    let endpoints: Vec<Value> = addresses
        .into_iter()
        .map(|a| json!({"addresses": [a.to_string()], "conditions": {"ready": true}}))
        .collect();
    let ports: Vec<Value> = ports
        .iter()
        .map(|p| {
            let protocol = if p.protocol == "udp" { "UDP" } else { "TCP" };
            json!({"name": p.name, "port": p.listen_port, "protocol": protocol})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": key.slice_name(),
            "namespace": key.namespace,
            "labels": {
                SERVICE_NAME_LABEL: key.name,
                SLICE_MANAGED_BY_LABEL: ENDPOINTSLICE_MANAGER,
                MANAGED_BY_LABEL: MANAGED_BY_VALUE,
                OWNER_UID_LABEL: uid,
            },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    })
}

/// The top-level fields of an EndpointSlice Meridian owns.
const SLICE_OWNED: [&str; 3] = ["addressType", "endpoints", "ports"];

/// Whether a member's EndpointSlice matches the one Meridian wants.
pub fn slice_in_sync(actual: &Value, desired: &Value) -> bool {
    drift::contains(
        &actual["metadata"]["labels"],
        &desired["metadata"]["labels"],
    ) && SLICE_OWNED.iter().all(|f| {
        let empty = |v: &Value| v.is_null() || v.as_array().is_some_and(Vec::is_empty);
        (empty(&actual[*f]) && empty(&desired[*f])) || drift::contains(&actual[*f], &desired[*f])
    })
}

/// The EndpointSlice to write over a drifted `actual`: its metadata kept, our labels laid
/// over it, the owned fields replaced.
pub fn slice_merged(actual: &Value, desired: &Value) -> Value {
    let mut out = actual.clone();
    let mut labels: Map<String, Value> = actual["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if let Some(want) = desired["metadata"]["labels"].as_object() {
        labels.extend(want.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out["metadata"]["labels"] = Value::Object(labels);
    for f in SLICE_OWNED {
        out[f] = desired[f].clone();
    }
    out
}

/// A member's lb-agent from its `meridian-lb-agent` Service: the first ingress IPv4
/// address and the ports named `http`, `dns` and `peer` (all required), and its address
/// pool annotation's entries.
pub fn lb_agent_of(svc: &Value) -> Option<LbAgentStatus> {
    let address: Ipv4Addr = svc
        .pointer("/status/loadBalancer/ingress/0/ip")
        .and_then(Value::as_str)?
        .parse()
        .ok()?;
    let port = |name: &str| {
        svc["spec"]["ports"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)?["port"]
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
    };
    Some(LbAgentStatus {
        address: address.to_string(),
        http_port: Some(port("http")?),
        dns_port: Some(port("dns")?),
        peer_port: Some(port("peer")?),
        address_pool: svc
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(fed_api::names::LB_ADDRESS_POOL_ANNOTATION))
            .and_then(Value::as_str)
            .map(super::addresses::pool_entries)
            .unwrap_or_default(),
    })
}

/// Ready endpoints of a Service in a member: distinct addresses of ready endpoints in its
/// EndpointSlices, except the ones Meridian writes (those are remote lb-agents).
/// An endpoint whose readiness is not stated counts as ready (Kubernetes semantics).
pub fn ready_endpoints<'a>(slices: impl IntoIterator<Item = &'a Value>) -> u32 {
    let mut addresses = BTreeSet::new();
    for s in slices {
        if s["metadata"]["labels"][SLICE_MANAGED_BY_LABEL] == ENDPOINTSLICE_MANAGER {
            continue;
        }
        for e in s["endpoints"].as_array().into_iter().flatten() {
            if e["conditions"]["ready"] == Value::Bool(false) {
                continue;
            }
            if let Some(a) = e["addresses"][0].as_str() {
                addresses.insert(a.to_string());
            }
        }
    }
    u32::try_from(addresses.len()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                         "labels": {"app": "web"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "x"}},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"],
                     "healthCheckNodePort": 31000, "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080},
                               {"name": "dns", "port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}
        })
    }

    #[test]
    fn member_copy_drops_allocated_fields_and_status() {
        let c = member_service(&fed(), "u1");
        assert_eq!(c["metadata"]["labels"][MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        assert_eq!(c["metadata"]["labels"][OWNER_UID_LABEL], "u1");
        assert_eq!(c["metadata"]["labels"]["app"], "web");
        assert!(c["metadata"].get("resourceVersion").is_none());
        assert!(c["metadata"].get("uid").is_none());
        assert_eq!(c["metadata"]["annotations"], json!({"team": "x"}));
        for f in ["clusterIP", "clusterIPs", "healthCheckNodePort"] {
            assert!(c["spec"].get(f).is_none(), "{f}");
        }
        assert!(c["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(c["spec"]["ports"][0]["targetPort"], 8080);
        assert!(c.get("status").is_none());
    }

    #[test]
    fn a_headless_service_stays_headless_in_members() {
        let mut headless = fed();
        headless["spec"]["type"] = json!("ClusterIP");
        headless["spec"]["clusterIP"] = json!("None");
        headless["spec"]["clusterIPs"] = json!(["None"]);
        headless["spec"]["ipFamilies"] = json!(["IPv4"]);
        let c = member_service(&headless, "u1");
        assert_eq!(c["spec"]["clusterIP"], "None");
        assert_eq!(c["spec"]["clusterIPs"], json!(["None"]));
        assert!(
            c["spec"].get("ipFamilies").is_none(),
            "the member's to allocate"
        );
        let cluster = MemberCluster {
            name: "a",
            labels: &std::collections::BTreeMap::new(),
            region: None,
            zone: None,
        };
        let out = overridden_service(&c, &cluster, &[], "u1").expect("copy");
        assert_eq!(out["spec"]["clusterIP"], "None");
        let mut member = c.clone();
        member["spec"]["ipFamilies"] = json!(["IPv4"]);
        assert!(service_in_sync(&member, &c));
        // A copy made with a cluster IP keeps it (immutable): no drift, no write in vain.
        member["spec"]["clusterIP"] = json!("10.96.0.9");
        member["spec"]["clusterIPs"] = json!(["10.96.0.9"]);
        assert!(service_in_sync(&member, &c));
        member["spec"]["selector"] = json!({"app": "evil"});
        assert!(!service_in_sync(&member, &c));
        assert!(service_in_sync(&service_merged(&member, &c), &c));
    }

    #[test]
    fn member_allocations_are_not_drift_and_survive_a_revert() {
        let want = member_service(&fed(), "u1");
        let mut member = want.clone();
        member["metadata"]["resourceVersion"] = json!("3");
        member["spec"]["clusterIP"] = json!("10.96.0.9");
        member["spec"]["ports"][0]["nodePort"] = json!(31234);
        member["spec"]["sessionAffinity"] = json!("None");
        assert!(service_in_sync(&member, &want));
        member["spec"]["selector"] = json!({"app": "evil"});
        assert!(!service_in_sync(&member, &want));
        let fixed = service_merged(&member, &want);
        assert!(service_in_sync(&fixed, &want));
        assert_eq!(fixed["spec"]["clusterIP"], "10.96.0.9");
        assert_eq!(fixed["spec"]["ports"][0]["nodePort"], 31234);
        assert_eq!(fixed["metadata"]["resourceVersion"], "3");
    }

    #[test]
    fn overrides_never_touch_what_the_member_allocates() {
        use fed_api::{Cluster, ClusterSpec};
        let policy = Policy {
            namespace: Some("shop".into()),
            name: "svc".into(),
            spec: serde_json::from_value(json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Service", "name": "web"}],
                "overrideRules": [{"targetCluster": {"clusterNames": ["a"]}, "overriders": {
                    "annotationsOverrider": [{"operator": "add", "value": {"lb.example/scheme": "internal"}}],
                    "plaintext": [
                        {"path": "/spec/clusterIP", "operator": "add", "value": "10.0.0.99"},
                        {"path": "/spec/ports/0/nodePort", "operator": "add", "value": 30999},
                        {"path": "/status", "operator": "add", "value": {"loadBalancer": {}}}
                    ]
                }}]
            }))
            .unwrap(),
        };
        let (a, b) = (
            Cluster::new("a", ClusterSpec::default()),
            Cluster::new("b", ClusterSpec::default()),
        );
        let copy = member_service(&fed(), "u1");
        let got = overridden_service(&copy, &MemberCluster::of(&a), &[&policy], "u1").unwrap();
        assert_eq!(
            got["metadata"]["annotations"],
            json!({"team": "x", "lb.example/scheme": "internal",
                   (record::RECORD_ANNOTATION): record::Record::of(&got).to_string()})
        );
        assert!(got["spec"].get("clusterIP").is_none(), "{got}");
        assert!(got["spec"]["ports"][0].get("nodePort").is_none(), "{got}");
        assert!(got.get("status").is_none());
        let plain = overridden_service(&copy, &MemberCluster::of(&b), &[&policy], "u1").unwrap();
        assert_eq!(plain, copy);
        // The member's allocations survive the write that brings the override, and the one
        // that takes it away again.
        let mut member = copy.clone();
        member["spec"]["clusterIP"] = json!("10.96.0.9");
        member["spec"]["ports"][0]["nodePort"] = json!(31234);
        assert!(!service_in_sync(&member, &got));
        let with = service_merged(&member, &got);
        assert!(service_in_sync(&with, &got));
        assert_eq!(with["spec"]["clusterIP"], "10.96.0.9");
        assert_eq!(with["spec"]["ports"][0]["nodePort"], 31234);
        assert!(!service_in_sync(&with, &copy));
        let without = service_merged(&with, &copy);
        assert!(service_in_sync(&without, &copy));
        assert_eq!(without["metadata"]["annotations"], json!({"team": "x"}));
        assert_eq!(without["spec"]["clusterIP"], "10.96.0.9");
        // Removing an allocated field finds nothing to remove: the rule fails.
        let removing = Policy {
            spec: serde_json::from_value(json!({
                "resourceSelectors": [{"apiVersion": "v1", "kind": "Service"}],
                "overrideRules": [{"overriders": {"plaintext": [
                    {"path": "/spec/clusterIP", "operator": "remove"}
                ]}}]
            }))
            .unwrap(),
            ..policy.clone()
        };
        assert!(overridden_service(&copy, &MemberCluster::of(&b), &[&removing], "u1").is_err());
    }

    #[test]
    fn lb_ports_cover_tcp_and_udp_ports_once_allocated() {
        let mut svc = fed();
        svc["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sig", "port": 9, "protocol": "SCTP"}));
        assert_eq!(port_ids(&svc), vec!["http".to_string(), "dns".to_string()]);
        assert_eq!(lb_ports(&svc, |_| None), None);
        let ports = lb_ports(&svc, |id| match id {
            "http" => Some(30001),
            "dns" => Some(30002),
            _ => None,
        })
        .expect("allocated");
        assert_eq!(
            ports,
            vec![
                LbPort {
                    name: "http".into(),
                    port: 80,
                    protocol: "http".into(),
                    listen_port: 30001
                },
                LbPort {
                    name: "dns".into(),
                    port: 53,
                    protocol: "udp".into(),
                    listen_port: 30002
                }
            ]
        );
        assert_eq!(port_id("", 8080), "8080");
        let s = slice(&ServiceKey::new("shop", "web"), "u1", &[], &ports);
        assert_eq!(
            s["ports"][1],
            json!({"name": "dns", "port": 30002, "protocol": "UDP"})
        );
    }

    #[test]
    fn slice_lists_remote_agents_with_listen_ports() {
        let key = ServiceKey::new("shop", "web");
        let ports = [LbPort {
            name: "http".into(),
            port: 80,
            protocol: "http".into(),
            listen_port: 30001,
        }];
        let remotes: Vec<Ipv4Addr> =
            vec!["127.0.1.3".parse().unwrap(), "127.0.1.2".parse().unwrap()];
        let s = slice(&key, "u1", &remotes, &ports);
        assert_eq!(s["metadata"]["name"], "web-meridian");
        assert_eq!(s["metadata"]["labels"][SERVICE_NAME_LABEL], "web");
        assert_eq!(
            s["metadata"]["labels"][SLICE_MANAGED_BY_LABEL],
            ENDPOINTSLICE_MANAGER
        );
        assert_eq!(s["addressType"], "IPv4");
        assert_eq!(
            s["endpoints"],
            json!([{"addresses": ["127.0.1.2"], "conditions": {"ready": true}},
                   {"addresses": ["127.0.1.3"], "conditions": {"ready": true}}])
        );
        assert_eq!(
            s["ports"],
            json!([{"name": "http", "port": 30001, "protocol": "TCP"}])
        );
        let empty = slice(&key, "u1", &[], &ports);
        assert_eq!(empty["endpoints"], json!([]));

        // Drift: an endpoint added in the member is reverted, server defaults are not drift.
        let mut member = s.clone();
        member["endpoints"][0]["conditions"]["serving"] = json!(true);
        assert!(slice_in_sync(&member, &s));
        member["endpoints"] = json!([{"addresses": ["10.9.9.9"]}]);
        assert!(!slice_in_sync(&member, &s));
        assert!(slice_in_sync(&slice_merged(&member, &s), &s));
        let mut bare = empty.clone();
        bare.as_object_mut().unwrap().remove("endpoints");
        assert!(slice_in_sync(&bare, &empty));
    }

    #[test]
    fn lb_agent_needs_an_address_and_all_three_ports() {
        let mut svc = json!({
            "spec": {"type": "LoadBalancer", "ports": [
                {"name": "http", "port": 8080}, {"name": "dns", "port": 5353, "protocol": "UDP"},
                {"name": "peer", "port": 15001}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "127.0.1.1"}]}}
        });
        assert_eq!(
            lb_agent_of(&svc),
            Some(LbAgentStatus {
                address: "127.0.1.1".into(),
                http_port: Some(8080),
                dns_port: Some(5353),
                peer_port: Some(15001),
                address_pool: Vec::new(),
            })
        );
        svc["metadata"] = json!({"annotations": {
            fed_api::names::LB_ADDRESS_POOL_ANNOTATION: "127.2.1.0/24, 10.0.0.9"}});
        assert_eq!(
            lb_agent_of(&svc).unwrap().address_pool,
            ["127.2.1.0/24", "10.0.0.9"]
        );
        svc["status"]["loadBalancer"]["ingress"] = json!([{"hostname": "lb.example"}]);
        assert_eq!(lb_agent_of(&svc), None);
        svc["status"]["loadBalancer"]["ingress"] = json!([{"ip": "127.0.1.1"}]);
        svc["spec"]["ports"] = json!([{"name": "http", "port": 8080}]);
        assert_eq!(lb_agent_of(&svc), None);
    }

    #[test]
    fn ready_endpoints_count_local_ready_addresses_once() {
        let local = json!({"metadata": {"labels": {SLICE_MANAGED_BY_LABEL: "endpointslice-controller.k8s.io"}},
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                          {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                          {"addresses": ["10.0.0.3"]}]});
        let other_ports = json!({"metadata": {"labels": {}},
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}]});
        let ours = json!({"metadata": {"labels": {SLICE_MANAGED_BY_LABEL: ENDPOINTSLICE_MANAGER}},
            "endpoints": [{"addresses": ["127.0.1.2"], "conditions": {"ready": true}}]});
        assert_eq!(ready_endpoints([&local, &other_ports, &ours]), 2);
        assert_eq!(ready_endpoints([&ours]), 0);
    }
}

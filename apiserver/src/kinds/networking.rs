//! `networking.k8s.io/v1` Ingress, IngressClass and NetworkPolicy.

use apimachinery::JsonPointer;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use serde_json::{Value, json};

use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, age_column, column, default_at, no_default, str_column};
use crate::registry::ResourceDef;
use crate::status::Cause;

const GROUP: &str = "networking.k8s.io";

/// A service backend's port: a number in range or a named port.
fn backend(b: &Value, field: &str, errs: &mut Vec<Cause>) {
    let service = b.get("service");
    let resource = b.get("resource");
    match (service, resource) {
        (Some(_), Some(_)) => errs.push(invalid(
            field,
            b,
            "cannot set both resource and service backends",
        )),
        (None, None) => errs.push(invalid(field, b, "resource or service backend is required")),
        (Some(s), None) => {
            if s.get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                errs.push(required(&format!("{field}.service.name")));
            }
            let p = s.get("port");
            match (
                p.and_then(|p| p.get("number")),
                p.and_then(|p| p.get("name")),
            ) {
                (Some(_), Some(_)) => errs.push(invalid(
                    &format!("{field}.service.port"),
                    p.unwrap_or(&Value::Null),
                    "cannot set both port name & port number",
                )),
                (Some(n), None) => {
                    errs.extend(validate::port(n, &format!("{field}.service.port.number")))
                }
                (None, Some(_)) => {}
                (None, None) => errs.push(invalid(
                    &format!("{field}.service.port"),
                    p.unwrap_or(&Value::Null),
                    "port name or number is required",
                )),
            }
        }
        (None, Some(_)) => {}
    }
}

/// A rule's host: a DNS subdomain, optionally with a leading `*.`; never an IP address.
fn host(h: &str, field: &str, errs: &mut Vec<Cause>) {
    if h.parse::<std::net::IpAddr>().is_ok() {
        errs.push(invalid(
            field,
            &Value::from(h),
            "must be a DNS name, not an IP address",
        ));
        return;
    }
    let name = h.strip_prefix("*.").unwrap_or(h);
    if let Err(msgs) = apimachinery::validation::dns1123_subdomain(name) {
        for m in msgs {
            errs.push(invalid(field, &Value::from(h), &m));
        }
    }
}

fn validate_ingress(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    if let Some(b) = o.at("/spec/defaultBackend") {
        backend(b, "spec.defaultBackend", &mut errs);
    }
    let rules = o.at("/spec/rules").and_then(Value::as_array);
    if rules.is_none_or(Vec::is_empty) && o.at("/spec/defaultBackend").is_none() {
        errs.push(invalid(
            "spec",
            o.get("spec").unwrap_or(&Value::Null),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    for (i, r) in rules.into_iter().flatten().enumerate() {
        if let Some(h) = r.get("host").and_then(Value::as_str) {
            host(h, &format!("spec.rules[{i}].host"), &mut errs);
        }
        let paths = r.at("/http/paths").and_then(Value::as_array);
        if r.get("http").is_some() && paths.is_none_or(Vec::is_empty) {
            errs.push(required(&format!("spec.rules[{i}].http.paths")));
        }
        for (j, p) in paths.into_iter().flatten().enumerate() {
            let f = format!("spec.rules[{i}].http.paths[{j}]");
            let ty = p.get("pathType");
            match ty.and_then(Value::as_str) {
                None => errs.push(Cause {
                    message: "Required value: pathType must be specified".into(),
                    ..required(&format!("{f}.pathType"))
                }),
                Some("Exact" | "Prefix") => {
                    let path = p.get("path").and_then(Value::as_str).unwrap_or("");
                    if !path.starts_with('/') {
                        errs.push(invalid(
                            &format!("{f}.path"),
                            &Value::from(path),
                            "must be an absolute path",
                        ));
                    }
                }
                Some("ImplementationSpecific") => {}
                Some(_) => errs.push(not_supported(
                    &format!("{f}.pathType"),
                    ty.unwrap_or(&Value::Null),
                    &["Exact", "ImplementationSpecific", "Prefix"],
                )),
            }
            match p.get("backend") {
                Some(b) => backend(b, &format!("{f}.backend"), &mut errs),
                None => errs.push(required(&format!("{f}.backend"))),
            }
        }
    }
    for (i, t) in o
        .at("/spec/tls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, h) in t
            .get("hosts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(h) = h.as_str() {
                host(h, &format!("spec.tls[{i}].hosts[{j}]"), &mut errs);
            }
        }
    }
    errs
}

fn ingress_hosts(o: &Value) -> Value {
    let hosts: Vec<&str> = o
        .at("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("host").and_then(Value::as_str))
        .collect();
    Value::from(if hosts.is_empty() {
        "*".to_string()
    } else {
        hosts.join(",")
    })
}

fn ingress_address(o: &Value) -> Value {
    Value::from(super::load_balancer_addresses(o).join(","))
}

fn ingress_ports(o: &Value) -> Value {
    let tls = o
        .at("/spec/tls")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    Value::from(if tls { "80, 443" } else { "80" })
}

/// `networking.k8s.io/v1` Ingress: `status` subresource.
pub fn ingresses() -> ResourceDef {
    let mut d = ResourceDef::new(
        GROUP,
        "v1",
        "Ingress",
        "ingresses",
        "ingress",
        true,
        FnHooks::typed::<Ingress>(no_default, validate_ingress),
    );
    d.short_names = &["ing"];
    d.definition = "io.k8s.api.networking.v1.Ingress";
    d.status_subresource = true;
    d.tracks_generation = true;
    d.columns = vec![
        column(
            "Class",
            "string",
            "The name of the IngressClass resource that should be used for additional configuration",
            false,
            |o| {
                Value::from(
                    o.at("/spec/ingressClassName")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>"),
                )
            },
        ),
        column(
            "Hosts",
            "string",
            "Hosts that incoming requests are matched against before the ingress rule",
            false,
            ingress_hosts,
        ),
        column(
            "Address",
            "string",
            "Address is a list containing ingress points for the load-balancer",
            false,
            ingress_address,
        ),
        column(
            "Ports",
            "string",
            "Ports of TLS configurations that open",
            false,
            ingress_ports,
        ),
    ];
    d
}

fn validate_ingress_class(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, false);
    match o.at("/spec/controller").and_then(Value::as_str) {
        None | Some("") => errs.push(required("spec.controller")),
        Some(c) => {
            // A domain-prefixed path such as `example.com/ingress-controller`.
            let ok = c.split_once('/').is_some_and(|(domain, path)| {
                apimachinery::validation::dns1123_subdomain(domain).is_ok() && !path.is_empty()
            });
            if !ok || c.len() > 250 {
                errs.push(invalid(
                    "spec.controller",
                    &Value::from(c),
                    "must be a domain-prefixed path (such as \"acme.io/foo\")",
                ));
            }
        }
    }
    errs.extend(validate::unchanged(o, old, &["spec.controller"]));
    errs
}

/// `networking.k8s.io/v1` IngressClass (cluster-scoped).
pub fn ingress_classes() -> ResourceDef {
    let mut d = ResourceDef::new(
        GROUP,
        "v1",
        "IngressClass",
        "ingressclasses",
        "ingressclass",
        false,
        FnHooks::typed::<IngressClass>(no_default, validate_ingress_class),
    );
    d.definition = "io.k8s.api.networking.v1.IngressClass";
    d.columns = vec![
        str_column(
            "Controller",
            "Controller that is responsible for handling this class",
            "/spec/controller",
        ),
        column(
            "Parameters",
            "string",
            "A reference to a resource with additional parameters",
            false,
            |o| {
                let Some(p) = o.at("/spec/parameters") else {
                    return Value::from("<none>");
                };
                let f = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
                let kind = match f("apiGroup") {
                    "" => f("kind").to_string(),
                    g => format!("{}.{g}", f("kind")),
                };
                Value::from(format!("{kind}/{}", f("name")))
            },
        ),
    ];
    d
}

fn default_network_policy(o: &mut Value) {
    if o.at("/spec/policyTypes").is_none_or(Value::is_null) {
        let mut types = vec![json!("Ingress")];
        if o.at("/spec/egress").is_some_and(|e| !e.is_null()) {
            types.push(json!("Egress"));
        }
        default_at(o, &["spec", "policyTypes"], Value::Array(types));
    }
    for dir in ["ingress", "egress"] {
        if let Some(rules) = o
            .at_mut(&format!("/spec/{dir}"))
            .and_then(Value::as_array_mut)
        {
            for r in rules {
                if let Some(ports) = r.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports {
                        default_at(p, &["protocol"], json!("TCP"));
                    }
                }
            }
        }
    }
}

fn validate_network_policy(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    match o.at("/spec/podSelector") {
        Some(sel) => errs.extend(validate::label_selector(sel, "spec.podSelector")),
        None => errs.push(required("spec.podSelector")),
    }
    for (i, t) in o
        .at("/spec/policyTypes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !matches!(t.as_str(), Some("Ingress" | "Egress")) {
            errs.push(not_supported(
                &format!("spec.policyTypes[{i}]"),
                t,
                &["Egress", "Ingress"],
            ));
        }
    }
    for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, r) in o
            .at(&format!("/spec/{dir}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            for (j, p) in r
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let f = format!("spec.{dir}[{i}].ports[{j}]");
                if let Some(port) = p.get("port").filter(|v| v.is_number()) {
                    errs.extend(validate::port(port, &format!("{f}.port")));
                    if let Some(end) = p.get("endPort") {
                        let below = end.as_i64() < port.as_i64();
                        if below {
                            errs.push(invalid(
                                &format!("{f}.endPort"),
                                end,
                                "must be greater than or equal to `port`",
                            ));
                        }
                    }
                }
                if let Some(proto) = p.get("protocol")
                    && !matches!(proto.as_str(), Some("TCP" | "UDP" | "SCTP"))
                {
                    errs.push(not_supported(
                        &format!("{f}.protocol"),
                        proto,
                        &["SCTP", "TCP", "UDP"],
                    ));
                }
            }
            for (j, peer) in r
                .get(peers)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let f = format!("spec.{dir}[{i}].{peers}[{j}]");
                for sel in ["podSelector", "namespaceSelector"] {
                    if let Some(s) = peer.get(sel) {
                        errs.extend(validate::label_selector(s, &format!("{f}.{sel}")));
                    }
                }
                if let Some(cidr) = peer.at("/ipBlock/cidr")
                    && !cidr.as_str().is_some_and(valid_cidr)
                {
                    errs.push(invalid(
                        &format!("{f}.ipBlock.cidr"),
                        cidr,
                        "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                    ));
                }
            }
        }
    }
    errs
}

fn valid_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let max = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => 32,
        Ok(std::net::IpAddr::V6(_)) => 128,
        Err(_) => return false,
    };
    bits.parse::<u8>().is_ok_and(|b| b <= max)
}

/// `networking.k8s.io/v1` NetworkPolicy.
pub fn network_policies() -> ResourceDef {
    let mut d = ResourceDef::new(
        GROUP,
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        "networkpolicy",
        true,
        FnHooks::typed::<NetworkPolicy>(default_network_policy, validate_network_policy),
    );
    d.short_names = &["netpol"];
    d.definition = "io.k8s.api.networking.v1.NetworkPolicy";
    d.tracks_generation = true;
    d.columns = vec![
        column(
            "Pod-Selector",
            "string",
            "Selects the pods to which this NetworkPolicy object applies",
            false,
            |o| {
                let sel = o.at("/spec/podSelector").cloned().unwrap_or(Value::Null);
                let s = apimachinery::selector::LabelSelector::from_json(&sel)
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                Value::from(if s.is_empty() {
                    "<none>".to_string()
                } else {
                    s
                })
            },
        ),
        age_column(),
    ];
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn an_ingress_path_needs_a_type_and_a_port_in_range() {
        let mut ing = json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}],
                "tls": [{"hosts": ["shop.example.com"], "secretName": "tls"}]},
        });
        assert!(validate_ingress(&ing, None).is_empty());
        assert_eq!(ingress_hosts(&ing), "shop.example.com");
        assert_eq!(ingress_ports(&ing), "80, 443");
        let path = &mut ing["spec"]["rules"][0]["http"]["paths"][0];
        path.as_object_mut().unwrap().remove("pathType");
        path["backend"]["service"]["port"]["number"] = json!(70000);
        assert_eq!(
            fields(&validate_ingress(&ing, None)),
            [
                "spec.rules[0].http.paths[0].pathType",
                "spec.rules[0].http.paths[0].backend.service.port.number"
            ]
        );
        ing["spec"]["rules"][0]["host"] = json!("10.0.0.1");
        assert!(fields(&validate_ingress(&ing, None)).contains(&"spec.rules[0].host"));
    }

    #[test]
    fn a_network_policy_defaults_its_types_and_checks_ports() {
        let mut np = json!({
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}},
                "egress": [{"ports": [{"port": 53}]}],
                "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
                    "ports": [{"port": 5432, "endPort": 5431}]}]},
        });
        default_network_policy(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(np["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            fields(&validate_network_policy(&np, None)),
            ["spec.ingress[0].ports[0].endPort"]
        );
        np["spec"]["ingress"][0]["ports"][0]["endPort"] = json!(5433);
        np["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"] = json!("10.0.0.0/40");
        assert_eq!(
            fields(&validate_network_policy(&np, None)),
            ["spec.ingress[0].from[0].ipBlock.cidr"]
        );
    }

    #[test]
    fn an_ingress_class_names_a_controller_it_keeps() {
        let ic =
            json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}});
        assert!(validate_ingress_class(&ic, None).is_empty());
        let mut changed = ic.clone();
        changed["spec"]["controller"] = json!("example.com/other");
        assert_eq!(
            fields(&validate_ingress_class(&changed, Some(&ic))),
            ["spec.controller"]
        );
        changed["spec"]["controller"] = json!("nginx");
        assert_eq!(
            fields(&validate_ingress_class(&changed, None)),
            ["spec.controller"]
        );
    }
}

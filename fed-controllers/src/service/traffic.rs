//! Where a federated Service's traffic goes beyond "nearest first": its traffic policy,
//! read from its annotations, and the federation's client subnets, read from the
//! `meridian-client-subnets` ConfigMap. Pure functions; a bad value is reported with the
//! annotation or key it came from and never reaches the lb-agents.

use std::collections::BTreeMap;
use std::net::IpAddr;

use fed_api::lbconfig::{ClientSubnet, PolicyKind, TrafficPolicy};
use fed_api::names::{
    FAILOVER_ORDER_ANNOTATION, TLS_SECRET_ANNOTATION, TRAFFIC_POLICY_ANNOTATION, WEIGHTS_ANNOTATION,
};

/// A traffic-policy annotation that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {annotation}: {reason}")]
pub struct PolicyError {
    /// The annotation at fault.
    pub annotation: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

fn bad(annotation: &'static str, reason: impl Into<String>) -> PolicyError {
    PolicyError {
        annotation,
        reason: reason.into(),
    }
}

/// Names in a comma-separated list, trimmed, empty entries dropped.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The traffic policy a Service's annotations ask for (`nearest` when they ask nothing).
/// `failover` needs an order; `weighted` needs weights, one per cluster, not all zero.
pub fn policy(annotations: &BTreeMap<String, String>) -> Result<TrafficPolicy, PolicyError> {
    let get = |k: &str| annotations.get(k).map(String::as_str);
    let kind = match get(TRAFFIC_POLICY_ANNOTATION).map(str::trim) {
        None | Some("") | Some("nearest") => PolicyKind::Nearest,
        Some("failover") => PolicyKind::Failover,
        Some("weighted") => PolicyKind::Weighted,
        Some("geo") => PolicyKind::Geo,
        Some(other) => {
            return Err(bad(
                TRAFFIC_POLICY_ANNOTATION,
                format!("{other:?} is not nearest, failover, weighted or geo"),
            ));
        }
    };
    let mut p = TrafficPolicy {
        kind,
        ..Default::default()
    };
    match kind {
        PolicyKind::Failover => {
            p.order = list(get(FAILOVER_ORDER_ANNOTATION).unwrap_or_default())
                .map(String::from)
                .collect();
            if p.order.is_empty() {
                return Err(bad(
                    FAILOVER_ORDER_ANNOTATION,
                    "failover needs cluster, region or zone names, most preferred first",
                ));
            }
        }
        PolicyKind::Weighted => {
            for entry in list(get(WEIGHTS_ANNOTATION).unwrap_or_default()) {
                let (cluster, weight) = entry
                    .split_once('=')
                    .map(|(c, w)| (c.trim(), w.trim()))
                    .ok_or_else(|| {
                        bad(
                            WEIGHTS_ANNOTATION,
                            format!("{entry:?} is not <cluster>=<weight>"),
                        )
                    })?;
                let weight: u32 = weight.parse().map_err(|_| {
                    bad(
                        WEIGHTS_ANNOTATION,
                        format!("weight {weight:?} of {cluster} is not a whole number"),
                    )
                })?;
                if cluster.is_empty() || p.weights.insert(cluster.to_string(), weight).is_some() {
                    return Err(bad(
                        WEIGHTS_ANNOTATION,
                        format!("cluster {cluster:?} is empty or listed twice"),
                    ));
                }
            }
            if p.weights.values().all(|w| *w == 0) {
                return Err(bad(
                    WEIGHTS_ANNOTATION,
                    "weighted needs at least one weight above 0",
                ));
            }
        }
        PolicyKind::Nearest | PolicyKind::Geo => {}
    }
    Ok(p)
}

/// The TLS Secret a Service's annotation names for termination at the lb-agents, if it
/// names a valid Secret name (a DNS subdomain).
pub fn tls_secret(annotations: &BTreeMap<String, String>) -> Result<Option<String>, PolicyError> {
    let Some(name) = annotations.get(TLS_SECRET_ANNOTATION).map(|s| s.trim()) else {
        return Ok(None);
    };
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !valid {
        return Err(bad(
            TLS_SECRET_ANNOTATION,
            format!("{name:?} is not a Secret name"),
        ));
    }
    Ok(Some(name.to_string()))
}

/// The client subnets of the ConfigMap's data: each value `<cidr> <region> [<zone>]`.
/// Entries that cannot be used are left out and described (by key) in the second list.
pub fn client_subnets(data: &BTreeMap<String, String>) -> (Vec<ClientSubnet>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (key, value) in data {
        let words: Vec<&str> = value.split_whitespace().collect();
        let (cidr, region, zone) = match words.as_slice() {
            [c, r] => (*c, *r, ""),
            [c, r, z] => (*c, *r, *z),
            _ => {
                problems.push(format!(
                    "{key}: {value:?} is not \"<cidr> <region> [<zone>]\""
                ));
                continue;
            }
        };
        if !is_cidr(cidr) {
            problems.push(format!("{key}: {cidr:?} is not a CIDR"));
            continue;
        }
        out.push(ClientSubnet {
            cidr: cidr.to_string(),
            region: region.to_string(),
            zone: zone.to_string(),
        });
    }
    (out, problems)
}

fn is_cidr(s: &str) -> bool {
    let Some((addr, bits)) = s.split_once('/') else {
        return false;
    };
    match (addr.parse::<IpAddr>(), bits.parse::<u8>()) {
        (Ok(IpAddr::V4(_)), Ok(b)) => b <= 32,
        (Ok(IpAddr::V6(_)), Ok(b)) => b <= 128,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn policies_from_annotations() {
        assert_eq!(policy(&ann(&[])), Ok(TrafficPolicy::default()));
        let p = policy(&ann(&[
            (TRAFFIC_POLICY_ANNOTATION, "failover"),
            (FAILOVER_ORDER_ANNOTATION, " sim-2, eu-west ,,sim-1"),
        ]))
        .unwrap();
        assert_eq!(
            (p.kind, p.order),
            (
                PolicyKind::Failover,
                vec!["sim-2".into(), "eu-west".into(), "sim-1".into()]
            )
        );
        let p = policy(&ann(&[
            (TRAFFIC_POLICY_ANNOTATION, "weighted"),
            (WEIGHTS_ANNOTATION, "sim-1=90, sim-2 = 10"),
        ]))
        .unwrap();
        assert_eq!(
            p.weights,
            [("sim-1".to_string(), 90), ("sim-2".to_string(), 10)].into()
        );
        assert_eq!(
            policy(&ann(&[(TRAFFIC_POLICY_ANNOTATION, "geo")]))
                .unwrap()
                .kind,
            PolicyKind::Geo
        );
        // Order and weights only count for their own policy.
        let p = policy(&ann(&[(WEIGHTS_ANNOTATION, "x=1")])).unwrap();
        assert!(p.is_default());
    }

    #[test]
    fn bad_policies_name_the_annotation() {
        for (pairs, annotation) in [
            (
                vec![(TRAFFIC_POLICY_ANNOTATION, "random")],
                TRAFFIC_POLICY_ANNOTATION,
            ),
            (
                vec![(TRAFFIC_POLICY_ANNOTATION, "failover")],
                FAILOVER_ORDER_ANNOTATION,
            ),
            (
                vec![(TRAFFIC_POLICY_ANNOTATION, "weighted")],
                WEIGHTS_ANNOTATION,
            ),
            (
                vec![
                    (TRAFFIC_POLICY_ANNOTATION, "weighted"),
                    (WEIGHTS_ANNOTATION, "a"),
                ],
                WEIGHTS_ANNOTATION,
            ),
            (
                vec![
                    (TRAFFIC_POLICY_ANNOTATION, "weighted"),
                    (WEIGHTS_ANNOTATION, "a=x"),
                ],
                WEIGHTS_ANNOTATION,
            ),
            (
                vec![
                    (TRAFFIC_POLICY_ANNOTATION, "weighted"),
                    (WEIGHTS_ANNOTATION, "a=1,a=2"),
                ],
                WEIGHTS_ANNOTATION,
            ),
            (
                vec![
                    (TRAFFIC_POLICY_ANNOTATION, "weighted"),
                    (WEIGHTS_ANNOTATION, "a=0"),
                ],
                WEIGHTS_ANNOTATION,
            ),
        ] {
            let e = policy(&ann(&pairs)).unwrap_err();
            assert_eq!(e.annotation, annotation, "{pairs:?}: {e}");
        }
    }

    #[test]
    fn tls_secret_names() {
        assert_eq!(tls_secret(&ann(&[])), Ok(None));
        assert_eq!(
            tls_secret(&ann(&[(TLS_SECRET_ANNOTATION, " web-tls ")])),
            Ok(Some("web-tls".into()))
        );
        for bad in ["", "Web", "-x", "a_b"] {
            assert!(
                tls_secret(&ann(&[(TLS_SECRET_ANNOTATION, bad)])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn client_subnets_from_configmap_data() {
        let data = ann(&[
            ("office", "10.1.0.0/16 eu-west eu-west-1a"),
            ("vpn", " 192.168.0.0/16   us-east "),
            ("v6", "fd00::/64 eu-west"),
            ("bad-cidr", "10.0.0.0/40 eu"),
            ("bad-shape", "10.0.0.0/8"),
        ]);
        let (subnets, problems) = client_subnets(&data);
        let got: Vec<(&str, &str, &str)> = subnets
            .iter()
            .map(|s| (s.cidr.as_str(), s.region.as_str(), s.zone.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("10.1.0.0/16", "eu-west", "eu-west-1a"),
                ("fd00::/64", "eu-west", ""),
                ("192.168.0.0/16", "us-east", ""),
            ]
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("bad-cidr") && problems[1].starts_with("bad-shape"));
    }
}

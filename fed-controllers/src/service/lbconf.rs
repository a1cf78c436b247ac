//! The lb-agent configuration ([`LbConfig`]) each member gets: every cluster with a known
//! lb-agent, every federated Service with its ports and the ready endpoints of the clusters
//! that can serve it. The same for all members but for the `cluster` field.

use std::collections::BTreeMap;

use fed_api::lbconfig::{ClientSubnet, LbCluster, LbConfig, LbPort, LbService, TrafficPolicy};

use super::{ClusterView, ServiceKey};

/// The clusters with a complete lb-agent, sorted by name.
pub fn clusters(views: &[ClusterView]) -> Vec<LbCluster> {
    let mut out: Vec<LbCluster> = views
        .iter()
        .filter_map(|c| {
            let a = c.lb_agent.as_ref()?;
            let port = |p: Option<i32>| p.and_then(|p| u16::try_from(p).ok());
            Some(LbCluster {
                name: c.name.clone(),
                region: c.region.clone(),
                zone: c.zone.clone(),
                address: a.address.clone(),
                http_port: port(a.http_port)?,
                peer_port: port(a.peer_port)?,
                dns_port: port(a.dns_port)?,
                ready: c.ready,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// One Service's entry: its ports, its traffic policy and, as backends, the clusters that
/// can serve it — Ready, holding the Service, with ready endpoints.
pub fn service(
    key: &ServiceKey,
    ports: Vec<LbPort>,
    policy: TrafficPolicy,
    endpoints: &BTreeMap<String, u32>,
    views: &[ClusterView],
) -> LbService {
    let ready = |c: &str| views.iter().any(|v| v.name == c && v.ready);
    LbService {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
        ports,
        backends: endpoints
            .iter()
            .filter(|(c, n)| **n > 0 && ready(c))
            .map(|(c, n)| (c.clone(), *n))
            .collect(),
        policy,
        ..Default::default()
    }
}

/// The configuration of the lb-agent in `cluster`.
pub fn build(
    cluster: &str,
    dns_zone: &str,
    ttl_seconds: u32,
    clusters: &[LbCluster],
    services: &[LbService],
    client_subnets: &[ClientSubnet],
) -> LbConfig {
    let mut services = services.to_vec();
    services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    LbConfig {
        dns_zone: dns_zone.to_string(),
        cluster: cluster.to_string(),
        ttl_seconds,
        clusters: clusters.to_vec(),
        services,
        client_subnets: client_subnets.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::test_view as view;

    #[test]
    fn config_lists_agents_and_serving_backends() {
        let views = vec![
            view("c", true, Some("127.0.1.3")),
            view("a", false, Some("127.0.1.1")),
            view("b", true, Some("127.0.1.2")),
            view("d", true, None),
        ];
        let lb = clusters(&views);
        assert_eq!(
            lb.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(lb[0].address, "127.0.1.1");
        assert!(!lb[0].ready && lb[1].ready);
        assert_eq!(
            (lb[1].http_port, lb[1].peer_port, lb[1].dns_port),
            (8080, 15001, 5353)
        );

        let ports = vec![LbPort {
            name: "http".into(),
            port: 80,
            protocol: "http".into(),
            listen_port: 30000,
        }];
        let endpoints = BTreeMap::from([
            ("a".to_string(), 2),
            ("b".to_string(), 3),
            ("c".to_string(), 0),
            ("d".to_string(), 1),
        ]);
        let web = service(
            &ServiceKey::new("shop", "web"),
            ports.clone(),
            TrafficPolicy::default(),
            &endpoints,
            &views,
        );
        // a is not Ready, c has no endpoints: only b and d serve.
        assert_eq!(
            web.backends,
            BTreeMap::from([("b".to_string(), 3), ("d".to_string(), 1)])
        );
        let api = service(
            &ServiceKey::new("dev", "api"),
            ports,
            TrafficPolicy::default(),
            &BTreeMap::new(),
            &views,
        );
        let subnets = [ClientSubnet {
            cidr: "10.0.0.0/8".into(),
            region: "eu".into(),
            zone: String::new(),
        }];
        let cfg = build(
            "b",
            "global.test",
            7,
            &lb,
            &[web.clone(), api.clone()],
            &subnets,
        );
        assert_eq!(cfg.client_subnets, subnets);
        assert_eq!(cfg.cluster, "b");
        assert_eq!(cfg.dns_zone, "global.test");
        assert_eq!(cfg.ttl_seconds, 7);
        assert_eq!(cfg.services, vec![api, web], "sorted by namespace and name");
        let other = build("c", "global.test", 7, &lb, &cfg.services, &subnets);
        assert_eq!(other.services, cfg.services);
        assert_ne!(other, cfg);
    }
}

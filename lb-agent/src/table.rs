//! The routing table: built from [`Inputs`] by a plain function, it maps Host names, TLS
//! server names, listen ports and dedicated addresses to Service ports, each with its local
//! and remote backends ranked by the Service's traffic policy. Backends are kept in a
//! [`Registry`] across rebuilds so their health and in-flight counts survive configuration
//! changes; those that leave are handed back for draining.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use fed_api::lbconfig::{LbConfig, LbPort, PolicyKind};
use http::HeaderValue;

use crate::backend::{Backend, BackendKey};
use crate::inputs::Inputs;
use crate::metrics::{Metrics, RouteMetrics};
use crate::policy::{self, Place};

/// How a Service port is proxied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 upstream.
    Http,
    /// HTTP/2 cleartext upstream.
    H2c,
    /// TLS passed through as a byte stream, routed by SNI on the HTTPS listener.
    Tls,
    /// Layer 4.
    Tcp,
    /// UDP datagrams.
    Udp,
}

impl Proto {
    fn of(port: &LbPort) -> Self {
        match port.protocol.as_str() {
            "http" => Proto::Http,
            "h2c" => Proto::H2c,
            "tls" => Proto::Tls,
            "udp" => Proto::Udp,
            _ => Proto::Tcp,
        }
    }

    /// Proxied as a byte stream (TCP splice).
    pub fn is_stream(self) -> bool {
        matches!(self, Proto::Tcp | Proto::Tls)
    }

    /// Proxied at L7.
    pub fn is_http(self) -> bool {
        matches!(self, Proto::Http | Proto::H2c)
    }
}

/// A remote lb-agent serving a Service, with its current weight and policy rank.
#[derive(Debug)]
pub struct RemoteEntry {
    /// The agent.
    pub backend: Arc<Backend>,
    /// Ready endpoints there: the last fresh `HEALTH` answer, else the configuration's.
    pub weight: AtomicU32,
    /// The configuration's count.
    pub config_weight: u32,
    /// Policy tier (lower is tried first).
    pub tier: u8,
    /// Share under the `weighted` policy.
    pub share: u32,
}

/// One Service port and where its traffic may go.
#[derive(Debug)]
pub struct PortRoute {
    /// Namespace.
    pub namespace: String,
    /// Service.
    pub service: String,
    /// `ns/svc`, as in `HEALTH` answers.
    pub service_key: String,
    /// The port.
    pub port: LbPort,
    /// Proxy protocol.
    pub proto: Proto,
    /// Local ready endpoints.
    pub local: Vec<Arc<Backend>>,
    /// Remote lb-agents.
    pub remote: Vec<RemoteEntry>,
    /// Policy tier of the local endpoints.
    pub local_tier: u8,
    /// Share of the local endpoints under the `weighted` policy.
    pub local_share: u32,
    /// The distinct tiers of this route, lowest first.
    pub tiers: Vec<u8>,
    /// The `weighted` policy is in force.
    pub weighted: bool,
    /// Host sent to remote agents: `<svc>.<ns>.<dnsZone>`.
    pub remote_host: HeaderValue,
    /// Rotates the scan start so equal scores spread.
    pub rr: AtomicUsize,
    /// Per-service metric handles.
    pub metrics: RouteMetrics,
}

/// What the HTTPS listener does with a server name.
#[derive(Debug, Clone)]
pub enum SniRoute {
    /// Pass the stream through to the Service's TLS port.
    Pass(Arc<PortRoute>),
    /// Terminate with the Service's certificate and route the HTTP inside by Host.
    Terminate(Arc<rustls::ServerConfig>),
    /// The Service asks for termination but it cannot be done (why): the client gets an
    /// alert rather than a stream to backends that may not speak TLS.
    Broken(Arc<str>),
}

/// Everything the proxies look up.
#[derive(Debug, Default)]
pub struct Table {
    /// The configuration in force.
    pub config: Option<Arc<LbConfig>>,
    /// This agent's cluster.
    pub cluster: String,
    /// `x-meridian-forwarded-by` value for this agent.
    pub forwarded_by: Option<HeaderValue>,
    /// Lower-case Host (without port) → the Service's HTTP port.
    pub hosts: HashMap<String, Arc<PortRoute>>,
    /// Lower-case TLS server name → what the HTTPS listener does with it.
    pub sni: HashMap<String, SniRoute>,
    /// Listen port → Service port (TCP and UDP listen ports never share a number).
    pub listen: HashMap<u16, Arc<PortRoute>>,
    /// This cluster's dedicated `address:service port` → Service port.
    pub dedicated: HashMap<SocketAddr, Arc<PortRoute>>,
    /// Every Service port.
    pub routes: Vec<Arc<PortRoute>>,
    /// Every backend in use.
    pub backends: Vec<Arc<Backend>>,
}

fn lookup<'a, T>(map: &'a HashMap<String, T>, name: &str) -> Option<&'a T> {
    let name = name.trim_end_matches('.');
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        map.get(&name.to_ascii_lowercase())
    } else {
        map.get(name)
    }
}

impl Table {
    /// The route for a Host header value (any case, port suffix ignored).
    pub fn route_for_host(&self, host: &str) -> Option<&Arc<PortRoute>> {
        lookup(&self.hosts, strip_port(host))
    }

    /// What to do with a TLS server name (any case).
    pub fn route_for_sni(&self, name: &str) -> Option<&SniRoute> {
        lookup(&self.sni, name)
    }

    /// The route of a Service port by namespace, name and port number or name (peer `TCP`).
    pub fn route_for_peer(&self, ns: &str, svc: &str, port: &str) -> Option<&Arc<PortRoute>> {
        let number = port.parse::<u16>().ok();
        self.routes.iter().find(|r| {
            r.namespace == ns
                && r.service == svc
                && (Some(r.port.port) == number || r.port.name == port)
        })
    }

    /// The `HEALTH` answer: ready local endpoints of every Service.
    pub fn health_line(&self, now: u64) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for r in &self.routes {
            let n = r.local.iter().filter(|b| b.available(now)).count();
            match counts.iter_mut().find(|(k, _)| *k == r.service_key) {
                Some((_, c)) => *c = (*c).max(n),
                None => counts.push((&r.service_key, n)),
            }
        }
        let mut line = String::from("OK");
        for (k, n) in counts {
            line.push_str(&format!(" {k}={n}"));
        }
        line.push('\n');
        line
    }
}

impl PortRoute {
    /// Whether `backend` (one of this route's) may be ejected now: fewer of its kind
    /// (local endpoints, remote agents) are ejected than the cap allows.
    pub fn may_eject(
        &self,
        backend: &Arc<Backend>,
        settings: &crate::backend::OutlierSettings,
    ) -> bool {
        let (ejected, len) = if backend.cluster().is_some() {
            let n = self
                .remote
                .iter()
                .filter(|e| e.backend.is_ejected())
                .count();
            (n, self.remote.len())
        } else {
            let n = self.local.iter().filter(|b| b.is_ejected()).count();
            (n, self.local.len())
        };
        settings.may_eject(ejected, len)
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host;
    }
    match host.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// Backends by key, kept across table rebuilds.
#[derive(Debug, Default)]
pub struct Registry {
    backends: HashMap<BackendKey, Arc<Backend>>,
}

impl Registry {
    fn get(&mut self, key: BackendKey, used: &mut HashSet<BackendKey>) -> Arc<Backend> {
        used.insert(key.clone());
        self.backends
            .entry(key.clone())
            .or_insert_with(|| Backend::new(key))
            .clone()
    }
}

/// The port of a Service that names route to: the one named `preferred`, else the first
/// that `fits`.
fn named_port<'a>(
    routes: &'a [Arc<PortRoute>],
    preferred: &str,
    fits: impl Fn(Proto) -> bool,
) -> Option<&'a Arc<PortRoute>> {
    routes
        .iter()
        .find(|r| fits(r.proto) && r.port.name == preferred)
        .or_else(|| routes.iter().find(|r| fits(r.proto)))
}

/// The HTTPS listener's handling of a Service that terminates TLS with Secret `secret`.
fn terminated(
    inputs: &Inputs,
    namespace: &str,
    secret: &str,
    http_route: Option<&Arc<PortRoute>>,
) -> SniRoute {
    let key = (namespace.to_string(), secret.to_string());
    let broken = |why: String| SniRoute::Broken(why.into());
    if http_route.is_none() {
        return broken(format!(
            "no HTTP port to route the requests of {namespace} to"
        ));
    }
    match inputs.tls.get(&key) {
        None => broken(format!(
            "TLS Secret {namespace}/{secret} not found in this cluster"
        )),
        Some(pair) => match crate::terminate::server_config(pair) {
            Ok(config) => SniRoute::Terminate(config),
            Err(e) => broken(format!("TLS Secret {namespace}/{secret}: {e}")),
        },
    }
}

/// Where a cluster of the configuration is (only its name when it is not listed).
fn place_of<'a>(config: &'a LbConfig, name: &'a str) -> Place<'a> {
    config
        .clusters
        .iter()
        .find(|c| c.name == name)
        .map(|c| Place {
            cluster: &c.name,
            region: &c.region,
            zone: &c.zone,
        })
        .unwrap_or(Place {
            cluster: name,
            ..Place::default()
        })
}

/// Builds the table for `inputs`; returns it with the backends that are no longer used
/// (to be drained). `peer_fresh` is how long a `HEALTH` answer counts as current.
pub fn build(
    inputs: &Inputs,
    registry: &mut Registry,
    metrics: &Metrics,
    peer_fresh: Duration,
) -> (Table, Vec<Arc<Backend>>) {
    let mut used = HashSet::new();
    let mut table = Table {
        config: inputs.config.clone(),
        ..Table::default()
    };
    if let Some(config) = &inputs.config {
        table.cluster = config.cluster.clone();
        table.forwarded_by = HeaderValue::from_str(&config.cluster).ok();
        let zone = config.dns_zone.trim_end_matches('.').to_ascii_lowercase();
        // Region and zone-level names: every locality present in the configuration.
        let mut regions = BTreeSet::new();
        let mut zones = BTreeSet::new();
        for c in &config.clusters {
            if !c.region.is_empty() {
                regions.insert(c.region.to_ascii_lowercase());
                if !c.zone.is_empty() {
                    zones.insert(format!(
                        "{}.{}",
                        c.zone.to_ascii_lowercase(),
                        c.region.to_ascii_lowercase()
                    ));
                }
            }
        }
        let me = place_of(config, &config.cluster);
        for svc in &config.services {
            let service_key = format!("{}/{}", svc.namespace, svc.name);
            let remote_host = HeaderValue::from_str(&format!(
                "{}.{}.{}",
                svc.name, svc.namespace, config.dns_zone
            ))
            .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
            let mut remotes_of_service = Vec::new();
            for c in &config.clusters {
                let backends = svc.backends.get(&c.name).copied().unwrap_or(0);
                if c.name == config.cluster || !c.ready || backends == 0 {
                    continue;
                }
                let Ok(ip) = c.address.parse::<IpAddr>() else {
                    continue;
                };
                let key = BackendKey::Remote {
                    cluster: c.name.clone(),
                    http: SocketAddr::new(ip, c.http_port),
                    peer: SocketAddr::new(ip, c.peer_port),
                };
                let tier = policy::tier(&svc.policy, &me, &place_of(config, &c.name));
                let share = policy::share(&svc.policy, &c.name);
                remotes_of_service.push((registry.get(key, &mut used), backends, tier, share));
            }
            let local_tier = policy::tier(&svc.policy, &me, &me);
            let mut tiers: Vec<u8> = remotes_of_service
                .iter()
                .map(|r| r.2)
                .chain([local_tier])
                .collect();
            tiers.sort_unstable();
            tiers.dedup();
            let route_metrics = metrics.route(&svc.namespace, &svc.name);
            let dedicated_ip = svc
                .addresses
                .get(&config.cluster)
                .and_then(|a| a.parse::<IpAddr>().ok());
            let mut routes = Vec::with_capacity(svc.ports.len());
            for port in &svc.ports {
                let proto = Proto::of(port);
                let key = (svc.namespace.clone(), svc.name.clone(), port.name.clone());
                let local = inputs
                    .local
                    .get(&key)
                    .map(|addrs| {
                        addrs
                            .iter()
                            .map(|a| {
                                let k = if proto == Proto::Udp {
                                    BackendKey::LocalUdp(*a)
                                } else {
                                    BackendKey::Local(*a)
                                };
                                registry.get(k, &mut used)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let remote = remotes_of_service
                    .iter()
                    .map(|(b, w, tier, share)| RemoteEntry {
                        weight: AtomicU32::new(
                            b.peer_count(&service_key, peer_fresh).unwrap_or(*w),
                        ),
                        backend: b.clone(),
                        config_weight: *w,
                        tier: *tier,
                        share: *share,
                    })
                    .collect();
                let route = Arc::new(PortRoute {
                    namespace: svc.namespace.clone(),
                    service: svc.name.clone(),
                    service_key: service_key.clone(),
                    port: port.clone(),
                    proto,
                    local,
                    remote,
                    local_tier,
                    local_share: policy::share(&svc.policy, &config.cluster),
                    tiers: tiers.clone(),
                    weighted: svc.policy.kind == PolicyKind::Weighted,
                    remote_host: remote_host.clone(),
                    rr: AtomicUsize::new(0),
                    metrics: route_metrics.clone(),
                });
                table.listen.insert(port.listen_port, route.clone());
                if let Some(ip) = dedicated_ip {
                    table
                        .dedicated
                        .insert(SocketAddr::new(ip, port.port), route.clone());
                }
                routes.push(route);
            }
            let http_route = named_port(&routes, "http", Proto::is_http);
            // A Service that names a certificate is terminated (its HTTP port takes the
            // requests); else its TLS port passes the stream through.
            let tls_route = match &svc.tls_secret {
                Some(secret) => Some(terminated(inputs, &svc.namespace, secret, http_route)),
                None => named_port(&routes, "https", |p| p == Proto::Tls)
                    .map(|r| SniRoute::Pass(r.clone())),
            };
            if http_route.is_some() || tls_route.is_some() {
                let base = format!(
                    "{}.{}",
                    svc.name.to_ascii_lowercase(),
                    svc.namespace.to_ascii_lowercase()
                );
                let mut names = vec![
                    format!("{base}.{zone}"),
                    base.clone(),
                    format!("{base}.svc"),
                    format!("{base}.svc.cluster.local"),
                ];
                names.extend(regions.iter().map(|r| format!("{base}.{r}.{zone}")));
                names.extend(zones.iter().map(|z| format!("{base}.{z}.{zone}")));
                for n in names {
                    if let Some(r) = http_route {
                        table.hosts.insert(n.clone(), r.clone());
                    }
                    if let Some(r) = &tls_route {
                        table.sni.insert(n, r.clone());
                    }
                }
            }
            table.routes.extend(routes);
        }
    }
    table.backends = used
        .iter()
        .filter_map(|k| registry.backends.get(k).cloned())
        .collect();
    let gone: Vec<BackendKey> = registry
        .backends
        .keys()
        .filter(|k| !used.contains(*k))
        .cloned()
        .collect();
    let removed = gone
        .into_iter()
        .filter_map(|k| registry.backends.remove(&k))
        .collect();
    (table, removed)
}

/// Refreshes remote weights from a `HEALTH` answer of `backend`.
pub fn apply_peer_counts(table: &Table, backend: &Arc<Backend>, fresh: Duration) {
    for r in &table.routes {
        for e in &r.remote {
            if Arc::ptr_eq(&e.backend, backend) {
                let w = backend
                    .peer_count(&r.service_key, fresh)
                    .unwrap_or(e.config_weight);
                e.weight.store(w, Ordering::Relaxed);
            }
        }
    }
}

/// The table of `inputs` built with a fresh registry, as tests of several modules want it.
#[cfg(test)]
pub(crate) fn build_fresh(inputs: &Inputs) -> (Table, Registry) {
    let mut reg = Registry::default();
    let (t, _) = build(
        inputs,
        &mut reg,
        &Metrics::default(),
        Duration::from_secs(3),
    );
    (t, reg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::LocalEndpoints;

    pub(crate) fn config() -> LbConfig {
        serde_json::from_value(serde_json::json!({
            "dnsZone": "global.test", "cluster": "a",
            "clusters": [
                {"name": "a", "region": "eu", "zone": "eu-1", "address": "127.0.1.1", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "b", "region": "us", "zone": "us-1", "address": "127.0.1.2", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": true},
                {"name": "c", "address": "127.0.1.3", "httpPort": 80, "peerPort": 81, "dnsPort": 53, "ready": false}
            ],
            "services": [{"namespace": "shop", "name": "web",
                "ports": [{"name": "metrics", "port": 9090, "protocol": "http", "listenPort": 30001},
                          {"name": "http", "port": 80, "protocol": "http", "listenPort": 30000},
                          {"name": "db", "port": 5432, "protocol": "tcp", "listenPort": 30002}],
                "backends": {"a": 2, "b": 3, "c": 4}}]
        }))
        .unwrap()
    }

    fn inputs() -> Inputs {
        let mut local = LocalEndpoints::new();
        local.insert(
            ("shop".into(), "web".into(), "http".into()),
            ["10.0.0.1:8080".parse().unwrap()].into(),
        );
        Inputs::fixed(config(), local)
    }

    #[test]
    fn host_names_route_to_the_http_port() {
        let (t, _) = build_fresh(&inputs());
        for host in [
            "web.shop.global.test",
            "WEB.shop.global.test:8080",
            "web.shop",
            "web.shop.svc",
            "web.shop.svc.cluster.local",
            "web.shop.eu.global.test",
            "web.shop.us-1.us.global.test",
            "web.shop.global.test.",
        ] {
            let r = t.route_for_host(host).unwrap_or_else(|| panic!("{host}"));
            assert_eq!(r.port.name, "http", "{host}");
        }
        for host in [
            "web.other",
            "nope.shop.global.test",
            "web.shop.asia.global.test",
        ] {
            assert!(t.route_for_host(host).is_none(), "{host}");
        }
        assert_eq!(t.listen[&30002].proto, Proto::Tcp);
        assert_eq!(t.listen[&30001].port.port, 9090);
        assert_eq!(
            t.route_for_peer("shop", "web", "5432").unwrap().port.name,
            "db"
        );
    }

    #[test]
    fn remotes_are_ready_other_clusters_with_backends() {
        let (t, _) = build_fresh(&inputs());
        let r = &t.listen[&30000];
        assert_eq!(r.local.len(), 1);
        let remotes: Vec<_> = r.remote.iter().map(|e| e.backend.cluster()).collect();
        assert_eq!(remotes, vec![Some("b")]);
        assert_eq!(r.remote[0].weight.load(Ordering::Relaxed), 3);
        assert!(t.listen[&30002].local.is_empty());
        assert_eq!(t.health_line(crate::backend::now_ms()), "OK shop/web=1\n");
    }

    #[test]
    fn rebuild_keeps_backend_state_and_returns_removed() {
        let mut reg = Registry::default();
        let (t1, removed) = build(
            &inputs(),
            &mut reg,
            &Metrics::default(),
            Duration::from_secs(3),
        );
        assert!(removed.is_empty());
        let b = t1.listen[&30000].local[0].clone();
        let _g = b.start();
        let (t2, removed) = build(
            &inputs(),
            &mut reg,
            &Metrics::default(),
            Duration::from_secs(3),
        );
        assert!(Arc::ptr_eq(&t2.listen[&30000].local[0], &b));
        assert_eq!(t2.listen[&30000].local[0].active(), 1);
        assert!(removed.is_empty());
        let mut gone = inputs();
        gone.local = Arc::default();
        let (_, removed) = build(&gone, &mut reg, &Metrics::default(), Duration::from_secs(3));
        assert_eq!(removed.len(), 1);
        assert!(Arc::ptr_eq(&removed[0], &b));
    }
}

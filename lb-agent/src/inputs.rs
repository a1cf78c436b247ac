//! What the routing core is fed: the validated `LbConfig` and the local ready endpoints,
//! both derived by plain functions from API objects so they can be tested without a cluster.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use fed_api::lbconfig::LbConfig;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages an EndpointSlice.
pub const SLICE_MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";

/// Key of one Service port's local endpoints: namespace, Service name, port name.
pub type PortKey = (String, String, String);

/// Ready local endpoints per Service port name (EndpointSlice port name == Service port name).
pub type LocalEndpoints = BTreeMap<PortKey, BTreeSet<SocketAddr>>;

/// A certificate chain and its key, PEM, from a `kubernetes.io/tls` Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsPair {
    /// `tls.crt`.
    pub cert_pem: Vec<u8>,
    /// `tls.key`.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for TlsPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.write_str("TlsPair")
    }
}

/// The local `kubernetes.io/tls` Secrets by namespace and name.
pub type TlsSecrets = BTreeMap<(String, String), TlsPair>;

/// A Secret's certificate and key, if it is a `kubernetes.io/tls` Secret that has both.
pub fn tls_pair(secret: &Secret) -> Option<((String, String), TlsPair)> {
    if secret.type_.as_deref() != Some("kubernetes.io/tls") {
        return None;
    }
    let data = secret.data.as_ref()?;
    let key = (
        secret.metadata.namespace.clone().unwrap_or_default(),
        secret.metadata.name.clone().unwrap_or_default(),
    );
    Some((
        key,
        TlsPair {
            cert_pem: data.get("tls.crt")?.0.clone(),
            key_pem: data.get("tls.key")?.0.clone(),
        },
    ))
}

/// One snapshot of the agent's inputs.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// The last configuration that passed validation (kept while later ones are bad).
    pub config: Option<Arc<LbConfig>>,
    /// Why the latest configuration was rejected, if it was.
    pub config_error: Option<String>,
    /// Ready endpoints of local pods.
    pub local: Arc<LocalEndpoints>,
    /// Local TLS Secrets (for Services that terminate TLS at the agent).
    pub tls: Arc<TlsSecrets>,
    /// Both sources have been listed at least once.
    pub synced: bool,
}

impl Inputs {
    /// Inputs known in full at once (a static file, a test): listed already, no TLS Secrets.
    pub fn fixed(config: LbConfig, local: LocalEndpoints) -> Self {
        Self {
            config: Some(Arc::new(config)),
            config_error: None,
            local: Arc::new(local),
            tls: Arc::default(),
            synced: true,
        }
    }
}

/// Why a configuration is rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `config.json` is absent from the ConfigMap.
    #[error("ConfigMap has no key {0}")]
    MissingKey(&'static str),
    /// The JSON does not parse as an `LbConfig`.
    #[error("config.json does not parse: {0}")]
    Parse(String),
    /// The configuration is for another cluster.
    #[error("configuration is for cluster {found:?}, this agent is {expected:?}")]
    WrongCluster {
        /// `--cluster`.
        expected: String,
        /// `cluster` in the configuration.
        found: String,
    },
    /// A field is invalid.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Parses and validates `config.json` for cluster `me`.
pub fn parse_config(json: Option<&str>, me: &str) -> Result<LbConfig, ConfigError> {
    let json = json.ok_or(ConfigError::MissingKey(fed_api::names::LB_AGENT_CONFIG_KEY))?;
    let config: LbConfig =
        serde_json::from_str(json).map_err(|e| ConfigError::Parse(e.to_string()))?;
    validate(&config, me)?;
    Ok(config)
}

/// Checks what the routing core relies on; every problem is reported at once.
pub fn validate(config: &LbConfig, me: &str) -> Result<(), ConfigError> {
    if config.cluster != me {
        return Err(ConfigError::WrongCluster {
            expected: me.to_string(),
            found: config.cluster.clone(),
        });
    }
    let mut problems = Vec::new();
    if config.dns_zone.trim().is_empty() {
        problems.push("dnsZone is empty".to_string());
    }
    let mut names = HashSet::new();
    for c in &config.clusters {
        if !names.insert(c.name.as_str()) {
            problems.push(format!("cluster {} listed twice", c.name));
        }
        if c.address.parse::<IpAddr>().is_err() {
            problems.push(format!(
                "cluster {}: address {:?} is not an IP",
                c.name, c.address
            ));
        }
    }
    let mut listen = HashSet::new();
    let mut services = HashSet::new();
    for s in &config.services {
        if !services.insert((s.namespace.as_str(), s.name.as_str())) {
            problems.push(format!("service {}/{} listed twice", s.namespace, s.name));
        }
        for (cluster, a) in &s.addresses {
            if a.parse::<IpAddr>().is_err() {
                problems.push(format!(
                    "service {}/{}: address {a:?} of cluster {cluster} is not an IP",
                    s.namespace, s.name
                ));
            }
        }
        for p in &s.ports {
            if !matches!(p.protocol.as_str(), "http" | "h2c" | "tls" | "tcp" | "udp") {
                problems.push(format!(
                    "service {}/{} port {}: protocol {:?} is not http, h2c, tls, tcp or udp",
                    s.namespace, s.name, p.port, p.protocol
                ));
            }
            if p.listen_port == 0 {
                problems.push(format!(
                    "service {}/{} port {}: listenPort is 0",
                    s.namespace, s.name, p.port
                ));
            } else if !listen.insert(p.listen_port) {
                problems.push(format!(
                    "listenPort {} used by more than one Service port",
                    p.listen_port
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(problems.join("; ")))
    }
}

/// Whether a slice holds local pods (not Meridian's remote-agent slice) of a named Service.
pub fn is_local_slice(slice: &EndpointSlice) -> Option<&str> {
    let labels = slice.metadata.labels.as_ref()?;
    if labels.get(SLICE_MANAGED_BY_LABEL).map(String::as_str)
        == Some(fed_api::names::ENDPOINTSLICE_MANAGER)
    {
        return None;
    }
    labels.get(SERVICE_NAME_LABEL).map(String::as_str)
}

/// Ready endpoints of the given local slices, per Service port name.
pub fn local_endpoints<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>) -> LocalEndpoints {
    let mut out = LocalEndpoints::new();
    for slice in slices {
        let Some(service) = is_local_slice(slice) else {
            continue;
        };
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        let ports = slice.ports.as_deref().unwrap_or_default();
        for endpoint in &slice.endpoints {
            // Kubernetes semantics: a missing `ready` condition means ready.
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                let Ok(ip) = address.parse::<IpAddr>() else {
                    continue;
                };
                for port in ports {
                    let Some(number) = port.port.and_then(|p| u16::try_from(p).ok()) else {
                        continue;
                    };
                    // TCP and UDP (SCTP is not proxied); the Service port's protocol
                    // decides how the endpoint is used.
                    if port
                        .protocol
                        .as_deref()
                        .is_some_and(|p| p != "TCP" && p != "UDP")
                    {
                        continue;
                    }
                    out.entry((
                        namespace.clone(),
                        service.to_string(),
                        port.name.clone().unwrap_or_default(),
                    ))
                    .or_default()
                    .insert(SocketAddr::new(ip, number));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn ready_endpoints_by_port_name_ignoring_meridian_slices() {
        let local = slice(json!({
            "metadata": {"name": "web-abc", "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "s", "port": 9, "protocol": "SCTP"}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"]},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false}}
            ]
        }));
        let remote = slice(json!({
            "metadata": {"name": "web-meridian", "namespace": "shop",
                "labels": {"kubernetes.io/service-name": "web",
                    "endpointslice.kubernetes.io/managed-by": "service-controller.meridian.dev"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 30000}],
            "endpoints": [{"addresses": ["127.0.1.2"]}]
        }));
        let unlabelled = slice(json!({
            "metadata": {"name": "x", "namespace": "shop"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.9.9.9"]}]
        }));
        let got = local_endpoints([&local, &remote, &unlabelled]);
        let key = ("shop".to_string(), "web".to_string(), "http".to_string());
        let want: BTreeSet<SocketAddr> = ["10.0.0.1:8080", "10.0.0.2:8080"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(got.get(&key), Some(&want));
        let dns = ("shop".to_string(), "web".to_string(), "dns".to_string());
        assert_eq!(
            got.get(&dns).map(BTreeSet::len),
            Some(2),
            "UDP endpoints too"
        );
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn config_validation_reports_every_problem() {
        let ok = r#"{"dnsZone":"g.test","cluster":"a","clusters":[{"name":"a","address":"127.0.1.1","httpPort":80,"peerPort":81,"dnsPort":53,"ready":true}],
            "services":[{"namespace":"d","name":"w","ports":[{"name":"http","port":80,"protocol":"http","listenPort":30000}]}]}"#;
        assert!(parse_config(Some(ok), "a").is_ok());
        assert!(matches!(
            parse_config(Some(ok), "b"),
            Err(ConfigError::WrongCluster { .. })
        ));
        assert!(matches!(
            parse_config(Some("{"), "a"),
            Err(ConfigError::Parse(_))
        ));
        assert_eq!(
            parse_config(None, "a"),
            Err(ConfigError::MissingKey("config.json"))
        );
        let bad = r#"{"dnsZone":"","cluster":"a","clusters":[{"name":"a","address":"nope","httpPort":80,"peerPort":81,"dnsPort":53,"ready":true}],
            "services":[{"namespace":"d","name":"w","ports":[{"port":80,"protocol":"sctp","listenPort":30000},{"port":81,"protocol":"tcp","listenPort":30000}]}]}"#;
        let Err(ConfigError::Invalid(msg)) = parse_config(Some(bad), "a") else {
            panic!("expected invalid")
        };
        for needle in ["dnsZone", "not an IP", "sctp", "30000"] {
            assert!(msg.contains(needle), "{msg} lacks {needle}");
        }
    }
}

//! Reads a member's credentials (CA bundle, token Secret) from its Cluster spec; shared by
//! every controller that talks to members. Clients themselves come from
//! [`crate::member_client`] (one multiplexed connection per member); [`member_config`]
//! remains for callers that need a plain kube configuration.
//!
//! TLS is always verified against `spec.caBundle` and only it; there is no insecure mode.
//! Tokens never appear in errors or logs.

use std::time::Duration;

use base64::Engine as _;
use fed_api::ClusterSpec;
use fed_api::common::NamespacedName;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{AuthInfo, Config};

/// Why a member's client could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// `spec.caBundle` is missing: we refuse to trust anything else.
    #[error("spec.caBundle is required: TLS to members is always verified")]
    MissingCaBundle,
    /// `spec.caBundle` is not base64 of PEM certificates.
    #[error("spec.caBundle is not a base64-encoded PEM bundle: {0}")]
    InvalidCaBundle(String),
    /// `spec.apiEndpoint` is not an https URL.
    #[error("spec.apiEndpoint {endpoint:?} is not a valid https URL")]
    InvalidEndpoint {
        /// The endpoint as written.
        endpoint: String,
    },
    /// `spec.secretRef` is missing.
    #[error("spec.secretRef is required")]
    MissingSecretRef,
    /// The Secret does not exist.
    #[error("credentials Secret {0} not found")]
    SecretNotFound(String),
    /// The Secret exists but has no usable `data.token`.
    #[error("credentials Secret {0} has no data.token")]
    MissingToken(String),
    /// The token holds characters an HTTP header cannot carry.
    #[error("the credentials token contains characters not allowed in an HTTP header")]
    InvalidToken,
    /// Reading the Secret failed.
    #[error("reading credentials Secret {name}")]
    ReadSecret {
        /// `namespace/name` of the Secret.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Reading the Secret timed out.
    #[error("reading credentials Secret {0}: timed out")]
    ReadTimeout(String),
    /// kube refused the assembled configuration.
    #[error("building auth configuration")]
    Auth(#[source] serde_json::Error),
}

/// DER certificates out of a base64-encoded PEM bundle (`spec.caBundle`).
pub fn ca_certificates(ca_bundle: &str) -> Result<Vec<Vec<u8>>, CredentialsError> {
    let engine = base64::engine::general_purpose::STANDARD;
    let compact: String = ca_bundle.split_whitespace().collect();
    let pem = engine
        .decode(compact)
        .map_err(|e| CredentialsError::InvalidCaBundle(format!("base64: {e}")))?;
    let pem = String::from_utf8(pem)
        .map_err(|_| CredentialsError::InvalidCaBundle("not UTF-8 PEM".into()))?;
    let mut certs = Vec::new();
    let mut body: Option<String> = None;
    for line in pem.lines().map(str::trim) {
        match (&mut body, line) {
            (None, "-----BEGIN CERTIFICATE-----") => body = Some(String::new()),
            (Some(b), "-----END CERTIFICATE-----") => {
                let der = engine.decode(b.as_bytes()).map_err(|e| {
                    CredentialsError::InvalidCaBundle(format!("certificate body: {e}"))
                })?;
                certs.push(der);
                body = None;
            }
            (Some(b), l) => b.push_str(l),
            (None, _) => {}
        }
    }
    if body.is_some() {
        return Err(CredentialsError::InvalidCaBundle(
            "unterminated certificate".into(),
        ));
    }
    if certs.is_empty() {
        return Err(CredentialsError::InvalidCaBundle("no certificates".into()));
    }
    Ok(certs)
}

/// Timeouts applied to every member client.
#[derive(Clone, Copy, Debug)]
pub struct ClientTimeouts {
    /// TCP + TLS connect.
    pub connect: Duration,
    /// Writing a request.
    pub write: Duration,
}

/// The kube client configuration for a member: endpoint, its CA only, bearer token.
pub fn member_config(
    spec: &ClusterSpec,
    token: &str,
    timeouts: ClientTimeouts,
) -> Result<Config, CredentialsError> {
    let invalid = || CredentialsError::InvalidEndpoint {
        endpoint: spec.api_endpoint.clone(),
    };
    let uri: http::Uri = spec.api_endpoint.parse().map_err(|_| invalid())?;
    if uri.scheme_str() != Some("https") || uri.host().is_none() {
        return Err(invalid());
    }
    let ca = ca_certificates(
        spec.ca_bundle
            .as_deref()
            .ok_or(CredentialsError::MissingCaBundle)?,
    )?;
    let mut config = Config::new(uri);
    config.root_cert = Some(ca);
    config.accept_invalid_certs = false;
    config.connect_timeout = Some(timeouts.connect);
    config.write_timeout = Some(timeouts.write);
    // Watches are long-lived; per-request deadlines are applied by the callers instead.
    config.read_timeout = None;
    // Our own loops decide retries (with backoff and their own deadlines).
    config.default_retry = false;
    // AuthInfo's token is a secrecy string; deserializing is how to set it without
    // naming that crate, and keeps the token out of Debug output.
    config.auth_info = serde_json::from_value::<AuthInfo>(serde_json::json!({ "token": token }))
        .map_err(CredentialsError::Auth)?;
    Ok(config)
}

/// `namespace/name`, for messages.
pub fn display_ref(r: &NamespacedName) -> String {
    format!("{}/{}", r.namespace, r.name)
}

/// Reads the member's bearer token from the federation Secret named by `spec.secretRef`.
pub async fn load_token(
    fed: &kube::Client,
    spec: &ClusterSpec,
    timeout: Duration,
) -> Result<String, CredentialsError> {
    let r = spec
        .secret_ref
        .as_ref()
        .ok_or(CredentialsError::MissingSecretRef)?;
    let name = display_ref(r);
    let api: Api<Secret> = Api::namespaced(fed.clone(), &r.namespace);
    let secret = match tokio::time::timeout(timeout, api.get_opt(&r.name)).await {
        Err(_) => return Err(CredentialsError::ReadTimeout(name)),
        Ok(Err(source)) => return Err(CredentialsError::ReadSecret { name, source }),
        Ok(Ok(None)) => return Err(CredentialsError::SecretNotFound(name)),
        Ok(Ok(Some(s))) => s,
    };
    token_of(&secret).ok_or(CredentialsError::MissingToken(name))
}

/// `data.token` of a Secret, trimmed (tokens pasted from files often end in a newline).
pub fn token_of(secret: &Secret) -> Option<String> {
    let bytes = &secret.data.as_ref()?.get("token")?.0;
    let token = std::str::from_utf8(bytes).ok()?.trim();
    (!token.is_empty()).then(|| token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nAAEC\nAwQ=\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nBQY=\n-----END CERTIFICATE-----\n";

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn ca_bundle_table() {
        assert_eq!(
            ca_certificates(&b64(PEM)).ok(),
            Some(vec![vec![0, 1, 2, 3, 4], vec![5, 6]])
        );
        for bad in [
            "%%%",
            &b64("no pem here"),
            &b64("-----BEGIN CERTIFICATE-----\nAAEC\n"),
        ] {
            assert!(
                matches!(
                    ca_certificates(bad),
                    Err(CredentialsError::InvalidCaBundle(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn config_requires_https_and_ca() {
        let t = ClientTimeouts {
            connect: Duration::from_secs(3),
            write: Duration::from_secs(3),
        };
        let spec = |ep: &str, ca: Option<String>| ClusterSpec {
            api_endpoint: ep.into(),
            ca_bundle: ca,
            ..Default::default()
        };
        let ok = member_config(&spec("https://10.0.0.1:6443", Some(b64(PEM))), "s3cret", t)
            .expect("valid");
        assert!(!ok.accept_invalid_certs);
        assert_eq!(ok.root_cert.as_ref().map(Vec::len), Some(2));
        assert!(
            !format!("{ok:?}").contains("s3cret"),
            "token must not leak into Debug"
        );
        assert!(matches!(
            member_config(&spec("http://10.0.0.1", Some(b64(PEM))), "t", t),
            Err(CredentialsError::InvalidEndpoint { .. })
        ));
        assert!(matches!(
            member_config(&spec("https://10.0.0.1", None), "t", t),
            Err(CredentialsError::MissingCaBundle)
        ));
    }

    #[test]
    fn token_is_trimmed() {
        let s = Secret {
            data: Some(
                [(
                    "token".to_string(),
                    k8s_openapi::ByteString(b"abc\n".to_vec()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        assert_eq!(token_of(&s).as_deref(), Some("abc"));
        assert_eq!(token_of(&Secret::default()), None);
    }
}

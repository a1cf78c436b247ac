//! TLS terminated at the agent, for Services that name a certificate Secret
//! (`LbService.tlsSecret`): the HTTPS listener completes the handshake with that
//! certificate (HTTP/1.1 or h2 by ALPN) and serves the requests inside as the HTTP listener
//! does, routed by Host to the Service's HTTP port, local endpoints first.

use std::io;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::agent::Shared;
use crate::inputs::TlsPair;

/// Why a Service's certificate cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// `tls.crt` holds no certificate.
    #[error("no certificate in tls.crt")]
    NoCertificate,
    /// `tls.key` holds no private key.
    #[error("no private key in tls.key")]
    NoKey,
    /// The PEM does not parse.
    #[error("unreadable PEM: {0}")]
    Pem(#[source] io::Error),
    /// rustls refuses the pair (key does not match, unsupported key type).
    #[error("certificate and key refused: {0}")]
    Rejected(#[source] rustls::Error),
}

/// The server configuration for a certificate and key.
pub fn server_config(pair: &TlsPair) -> Result<Arc<rustls::ServerConfig>, CertError> {
    let certs = rustls_pemfile::certs(&mut pair.cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(CertError::Pem)?;
    if certs.is_empty() {
        return Err(CertError::NoCertificate);
    }
    let key = rustls_pemfile::private_key(&mut pair.key_pem.as_slice())
        .map_err(CertError::Pem)?
        .ok_or(CertError::NoKey)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(CertError::Rejected)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(CertError::Rejected)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Completes the handshake on `client` (whose first bytes, the ClientHello, were already
/// read into `hello`) and serves the HTTP inside until the connection ends.
pub async fn serve(
    client: TcpStream,
    hello: Vec<u8>,
    config: Arc<rustls::ServerConfig>,
    shared: Arc<Shared>,
) {
    let io = crate::h1::rewind::Rewind::new(hello, client);
    let tls = match tokio_rustls::TlsAcceptor::from(config).accept(io).await {
        Ok(s) => s,
        Err(error) => {
            shared.metrics.tls_refused.inc();
            tracing::debug!(%error, "TLS handshake failed");
            return;
        }
    };
    crate::http::serve(tls, shared, None).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> TlsPair {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["web.shop".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        TlsPair {
            cert_pem: cert.pem().into_bytes(),
            key_pem: key.serialize_pem().into_bytes(),
        }
    }

    #[test]
    fn certificates_load_and_bad_ones_say_why() {
        let good = pair();
        let config = server_config(&good).unwrap();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let no_cert = TlsPair {
            cert_pem: Vec::new(),
            ..good.clone()
        };
        assert!(matches!(
            server_config(&no_cert),
            Err(CertError::NoCertificate)
        ));
        let no_key = TlsPair {
            key_pem: b"nothing".to_vec(),
            ..good.clone()
        };
        assert!(matches!(server_config(&no_key), Err(CertError::NoKey)));
        let other = pair();
        let mismatched = TlsPair {
            key_pem: other.key_pem,
            ..good
        };
        assert!(matches!(
            server_config(&mismatched),
            Err(CertError::Rejected(_))
        ));
    }
}

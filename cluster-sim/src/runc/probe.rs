//! Running one probe check: `httpGet` (HTTP, or HTTPS without verifying the certificate, as
//! the kubelet does), `tcpSocket`, or `exec` in the container with `runc exec`.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::policy::Check;

/// Accepts any server certificate: the kubelet does not verify probe targets.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
                .with_no_client_auth()
        });
    match config {
        Ok(c) => tokio_rustls::TlsConnector::from(Arc::new(c)),
        // The ring provider always supports the default versions.
        Err(_) => tokio_rustls::TlsConnector::from(Arc::new(
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
        )),
    }
}

/// Sends one HTTP/1.1 GET and reads the status code.
async fn http_get<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
    path: &str,
) -> std::io::Result<u16> {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    while !buf.windows(2).any(|w| w == b"\r\n") {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no HTTP status line"))
}

/// Runs one check against a container with pod IP `pod_ip` and runc id `id`; `true` on
/// success. A check that outlives `timeout` fails.
pub(crate) async fn check(check: &Check, pod_ip: &str, id: &str, timeout: Duration) -> bool {
    let work = async {
        match check {
            Check::Tcp { host, port } => {
                let h = host.as_deref().unwrap_or(pod_ip);
                TcpStream::connect((h, *port)).await.is_ok()
            }
            Check::Http {
                https,
                host,
                port,
                path,
            } => {
                let h = host.as_deref().unwrap_or(pod_ip);
                let Ok(tcp) = TcpStream::connect((h, *port)).await else {
                    return false;
                };
                let status = if *https {
                    let Ok(name) = ServerName::try_from(h.to_string()) else {
                        return false;
                    };
                    match tls_connector().connect(name, tcp).await {
                        Ok(tls) => http_get(tls, h, path).await,
                        Err(_) => return false,
                    }
                } else {
                    http_get(tcp, h, path).await
                };
                status.is_ok_and(|s| (200..400).contains(&s))
            }
            Check::Exec(cmd) => {
                let mut args = vec!["exec", id];
                args.extend(cmd.iter().map(String::as_str));
                super::command::run("runc", &args).await.is_ok()
            }
        }
    };
    tokio::time::timeout(timeout, work).await.unwrap_or(false)
}

//! Certificates and credentials: a CA, a serving certificate and an admin client
//! credential generated on first start and reused afterwards.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Errors creating or loading certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Generating or signing a certificate failed.
    #[error("generating certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Reading or writing a credential file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

const CA_COMMON_NAME: &str = "meridian-ca";

/// PEM material for one certificate and its key.
#[derive(Clone, Debug)]
pub struct CertKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
}

/// A certificate authority able to sign serving and client certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub cert_pem: String,
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    params
}

impl Authority {
    /// A fresh CA with a new key.
    pub fn generate() -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let params = ca_params();
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its PEM certificate and key, as written by [`Authority::generate`].
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(key_pem)?;
        // The issuer needs only the subject name and key; both are ours.
        Ok(Self {
            cert_pem: cert_pem.to_string(),
            issuer: Issuer::new(ca_params(), key),
        })
    }

    /// The CA key, PEM.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A serving certificate for `localhost`, `127.0.0.1`, `::1` and `extra` names/addresses.
    pub fn serving_cert(&self, extra: &[String]) -> Result<CertKey, PkiError> {
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        for n in extra {
            if !n.is_empty() && !names.contains(n) {
                names.push(n.clone());
            }
        }
        let mut params = CertificateParams::default();
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.clone().try_into().map(SanType::DnsName),
            })
            .collect::<Result<_, _>>()?;
        params
            .distinguished_name
            .push(DnType::CommonName, "meridian-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        self.sign(params)
    }

    /// A client certificate for `user` in `groups` (CN = user, O = groups).
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<CertKey, PkiError> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<CertKey, PkiError> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes a file atomically (temp file + rename) with owner-only permissions for secrets.
pub fn write_private(path: &Path, contents: &str) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| PkiError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(contents.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_reloaded_from_pem_signs_certificates() {
        let ca = Authority::generate().unwrap();
        let again = Authority::from_pem(&ca.cert_pem, &ca.key_pem()).unwrap();
        let serving = again
            .serving_cert(&["10.1.2.3".into(), "api.example".into()])
            .unwrap();
        assert!(serving.cert_pem.contains("BEGIN CERTIFICATE"));
        let client = again.client_cert("admin", &["system:masters"]).unwrap();
        assert!(client.key_pem.contains("PRIVATE KEY"));
    }
}

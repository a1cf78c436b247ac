//! The API client of a process: from a kubeconfig file (and a context in it), or, in a pod
//! with no kubeconfig given, from the pod's service account (its token and CA, mounted by
//! the kubelet, and the API server address Kubernetes puts in its environment).

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Where the kubelet mounts a pod's service-account credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why no client configuration could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {}", path.display())]
    ReadKubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// The kubeconfig has no usable context, cluster or user.
    #[error("kubeconfig {}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// No kubeconfig was given and the process does not run in a pod.
    #[error("no --kubeconfig given and not in a pod (KUBERNETES_SERVICE_HOST is not set)")]
    NoConfig,
    /// A service-account file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The service account's CA file holds no PEM certificate.
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
    /// The API server address is not a URL.
    #[error("API server address {0:?}")]
    Server(String, #[source] http::uri::InvalidUri),
    /// The client could not be built from the configuration.
    #[error("building the API client")]
    Build(#[source] kube::Error),
}

/// A pod's service account: the API server, a bearer token file (re-read as the kubelet
/// rotates it) and the cluster CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InCluster {
    /// `https://host:port` of the API server.
    pub server: String,
    /// The token file.
    pub token_file: PathBuf,
    /// The CA bundle (PEM).
    pub ca_file: PathBuf,
}

impl InCluster {
    /// The standard mount and the `KUBERNETES_SERVICE_HOST`/`_PORT` variables.
    pub fn from_env() -> Result<Self, ClientError> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| ClientError::NoConfig)?;
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
        Ok(Self::at(&host, &port, Path::new(SERVICE_ACCOUNT_DIR)))
    }

    /// The server at `host:port` with the credentials mounted in `dir`.
    pub fn at(host: &str, port: &str, dir: &Path) -> Self {
        // An IPv6 service address needs brackets in a URL.
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        Self {
            server: format!("https://{host}:{port}"),
            token_file: dir.join("token"),
            ca_file: dir.join("ca.crt"),
        }
    }

    /// The client configuration.
    pub fn config(&self) -> Result<kube::Config, ClientError> {
        let uri = self
            .server
            .parse()
            .map_err(|e| ClientError::Server(self.server.clone(), e))?;
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| ClientError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        // Fail now, not at the first request, when the token is missing.
        read(&self.token_file)?;
        let pem = read(&self.ca_file)?;
        let certs: Vec<Vec<u8>> = rustls_pemfile::certs(&mut pem.as_slice())
            .filter_map(Result::ok)
            .map(|c| c.to_vec())
            .collect();
        if certs.is_empty() {
            return Err(ClientError::NoCertificate(self.ca_file.clone()));
        }
        let mut config = kube::Config::new(uri);
        config.root_cert = Some(certs);
        config.root_cert_file = Some(self.ca_file.clone());
        config.auth_info.token_file = Some(self.token_file.display().to_string());
        Ok(config)
    }
}

/// Where a process's client configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A kubeconfig file; `context` or its current context.
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The context (default: the file's current context).
        context: Option<String>,
    },
    /// The pod's service account.
    InCluster(InCluster),
}

impl Source {
    /// A kubeconfig when one is given, else the pod's service account.
    pub fn from_flags(
        kubeconfig: Option<&Path>,
        context: Option<&str>,
    ) -> Result<Self, ClientError> {
        match kubeconfig {
            Some(path) => Ok(Source::Kubeconfig {
                path: path.to_path_buf(),
                context: context.map(str::to_string),
            }),
            None => InCluster::from_env().map(Source::InCluster),
        }
    }

    /// The client configuration.
    pub async fn config(&self) -> Result<kube::Config, ClientError> {
        match self {
            Source::Kubeconfig { path, context } => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig {
                        path: path.clone(),
                        source,
                    })?;
                let options = KubeConfigOptions {
                    context: context.clone(),
                    ..Default::default()
                };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|source| ClientError::Kubeconfig {
                        path: path.clone(),
                        source,
                    })
            }
            Source::InCluster(c) => c.config(),
        }
    }

    /// A client with kube's default stack.
    pub async fn client(&self) -> Result<kube::Client, ClientError> {
        kube::Client::try_from(self.config().await?).map_err(ClientError::Build)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed test certificate (`openssl req -x509`, P-256, CN=testca).
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBdjCCAR2gAwIBAgIUV7mtAs2h+Xg28576tf64bIHcuAowCgYIKoZIzj0EAwIw
ETEPMA0GA1UEAwwGdGVzdGNhMB4XDTI2MTEyNjA4NDAzMFoXDTM2MTEyMzA4NDAz
MFowETEPMA0GA1UEAwwGdGVzdGNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
jHaX1mkWlz45d63Pqh3d77gGUn08nccdfp3guvmzA4+n9B9wyIbk2agwUZMPc5Sa
tP/goJ0IisQ5njyhJBqnDqNTMFEwHQYDVR0OBBYEFKDW/9iZoZC+KvIytX/NRdMR
T5q+MB8GA1UdIwQYMBaAFKDW/9iZoZC+KvIytX/NRdMRT5q+MA8GA1UdEwEB/wQF
MAMBAf8wCgYIKoZIzj0EAwIDRwAwRAIgKDokBti4ksuKlKtJApTay/vZNpdu3zm0
X+07iFSEFY4CIGsW1S9yimd1Dd4UGHvG+eWEDnDnufOJqbbS/41qMeO2
-----END CERTIFICATE-----
";

    #[test]
    fn in_cluster_reads_the_mounted_credentials() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = InCluster::at("10.96.0.1", "443", dir.path());
        assert_eq!(c.server, "https://10.96.0.1:443");
        assert!(matches!(c.config(), Err(ClientError::Read { .. })));
        std::fs::write(dir.path().join("token"), "t0ken").expect("token");
        std::fs::write(dir.path().join("ca.crt"), "not a certificate").expect("ca");
        assert!(matches!(c.config(), Err(ClientError::NoCertificate(_))));
        std::fs::write(dir.path().join("ca.crt"), CA).expect("ca");
        let config = c.config().expect("config");
        assert_eq!(config.cluster_url.to_string(), "https://10.96.0.1:443/");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            config.auth_info.token_file.as_deref(),
            Some(dir.path().join("token").to_str().expect("utf-8"))
        );
        let v6 = InCluster::at("fd00::1", "6443", dir.path());
        assert_eq!(v6.server, "https://[fd00::1]:6443");
    }

    #[tokio::test]
    async fn kubeconfig_context_is_honoured() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
             clusters:\n- name: a\n  cluster: {server: 'https://127.0.0.1:1'}\n\
             - name: b\n  cluster: {server: 'https://127.0.0.1:2'}\n\
             contexts:\n- name: a\n  context: {cluster: a, user: u}\n\
             - name: b\n  context: {cluster: b, user: u}\n\
             users:\n- name: u\n  user: {token: t}\n",
        )
        .expect("write");
        let src = Source::from_flags(Some(&path), Some("b")).expect("source");
        let config = src.config().await.expect("config");
        assert_eq!(config.cluster_url.port_u16(), Some(2));
        let missing = Source::from_flags(Some(&dir.path().join("nope")), None).expect("source");
        assert!(matches!(
            missing.config().await,
            Err(ClientError::ReadKubeconfig { .. })
        ));
    }
}

//! Test harness: starts the real `federation-apiserver` binary on a loopback port and gives
//! kube-rs clients and kubectl invocations pointed at it.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running server process.
pub struct Server {
    child: Child,
    /// Its data directory (kept across restarts).
    pub dir: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The admin kubeconfig it wrote; `None` when it said it has none to write.
    pub written_kubeconfig: Option<PathBuf>,
    extra: Vec<String>,
}

impl Server {
    /// Starts a server with a fresh data directory.
    pub fn start(extra: &[&str]) -> (Self, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Self::start_in(dir.path(), extra);
        (s, dir)
    }

    /// Starts a server on an existing data directory, returning once it listens.
    pub fn start_in(dir: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_federation-apiserver"))
            .arg("--secure-port=0")
            .arg(format!("--data-dir={}", dir.display()))
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting federation-apiserver");
        // The server prints its address once it is listening: read until then.
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut url = None;
        let mut kubeconfig = None;
        for line in lines.by_ref() {
            let line = line.expect("reading server output");
            if let Some(u) = line.strip_prefix("federation-apiserver listening on ") {
                url = Some(u.trim().to_string());
            }
            if let Some(k) = line.strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(k.trim()));
                break;
            }
            if line.starts_with("# no admin kubeconfig") {
                break;
            }
        }
        // Keep draining so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            dir: dir.to_path_buf(),
            url: url.expect("server did not report its address"),
            written_kubeconfig: kubeconfig,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The admin token from the kubeconfig.
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("pki/admin.token"))
            .expect("admin token")
            .trim()
            .to_string()
    }

    /// The admin kubeconfig (the server must have written one).
    pub fn kubeconfig(&self) -> &Path {
        self.written_kubeconfig
            .as_deref()
            .expect("server did not report its kubeconfig")
    }

    /// A kube-rs client with the admin kubeconfig.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("client config");
        kube::Client::try_from(cfg).expect("client")
    }

    /// Kills the process with SIGKILL (no clean shutdown).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills and starts again on the same data directory.
    pub fn restart(&mut self) {
        self.kill9();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        // The old process is dead; dropping its handle only reaps it.
        *self = Self::start_in(&self.dir.clone(), &extra);
    }

    /// A raw HTTPS client trusting the server's CA, with an optional bearer token.
    pub fn http(&self) -> RawClient {
        RawClient::new(self)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Minimal HTTPS client for requests kube-rs will not send (bad bodies, no credentials).
pub struct RawClient {
    base: String,
    tls: std::sync::Arc<rustls::ClientConfig>,
}

/// A raw response.
pub struct RawResponse {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body.
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }
}

impl RawClient {
    fn new(s: &Server) -> Self {
        let ca = std::fs::read_to_string(s.dir.join("pki/ca.crt")).expect("ca");
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pemfile::certs(&mut ca.as_bytes()) {
            roots.add(c.expect("pem")).expect("root");
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("tls versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Self {
            base: s.url.clone(),
            tls: std::sync::Arc::new(tls),
        }
    }

    /// Sends one HTTP/1.1 request.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: Vec<u8>,
    ) -> RawResponse {
        self.send_with(method, path, token, &[("content-type", content_type)], body)
            .await
    }

    /// Sends one HTTP/1.1 request with the given headers.
    pub async fn send_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> RawResponse {
        use http_body_util::{BodyExt, Full};
        let authority = self.base.trim_start_matches("https://").to_string();
        let tcp = tokio::net::TcpStream::connect(&authority)
            .await
            .expect("connect");
        let connector = tokio_rustls::TlsConnector::from(self.tls.clone());
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let tls = connector.connect(name, tcp).await.expect("tls");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .expect("handshake");
        tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", authority);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let resp = sender
            .send_request(
                req.body(Full::new(bytes::Bytes::from(body)))
                    .expect("request"),
            )
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec();
        RawResponse {
            status,
            headers,
            body,
        }
    }
}

/// Creates a namespace.
pub async fn namespace(client: &kube::Client, name: &str) {
    let nss: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    nss.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .expect("create namespace");
}

/// A Deployment of `replicas` nginx pods labelled `app: <name>`.
pub fn deployment(name: &str, replicas: i32) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                                          "env": [{"name": "A", "value": "1"}]}]}
            }
        }
    }))
    .unwrap()
}

/// The `Status` of an API error (panics on any other error).
pub fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

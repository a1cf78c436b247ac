//! The `federation-apiserver` command: flags (named as kube-apiserver names them), first-start
//! credential generation in `--data-dir`, and the serving loop.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use meridian_store::Storage;

use meridian_apiserver::auth::{TokenAuthenticator, UserInfo};
use meridian_apiserver::pki;

/// Meridian's federation API server.
#[derive(Parser, Debug, Clone)]
#[command(name = "federation-apiserver", version)]
pub struct Args {
    /// Logging.
    #[command(flatten)]
    pub log: meridian_runtime::telemetry::LogArgs,
    /// Port to serve HTTPS on (0 picks a free port).
    #[arg(long, env = "MERIDIAN_SECURE_PORT", default_value_t = 6443)]
    pub secure_port: u16,
    /// Address to listen on.
    #[arg(long, env = "MERIDIAN_BIND_ADDRESS", default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Address clients use to reach this server (added to the serving certificate).
    #[arg(long, env = "MERIDIAN_ADVERTISE_ADDRESS")]
    pub advertise_address: Option<String>,
    /// Static bearer tokens, kube-apiserver format: token,user,uid,"group1,group2".
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// CA bundle that signs accepted client certificates (default: the generated CA).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Serving certificate (default: generated in --data-dir).
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// Serving key (default: generated in --data-dir).
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Directory holding the CA (`ca.crt`, `ca.key`) and the admin token (`admin.token`);
    /// replicas sharing etcd share it (default: `<data-dir>/pki`).
    #[arg(long, env = "MERIDIAN_CREDENTIALS_DIR")]
    pub credentials_dir: Option<PathBuf>,
    /// The admin (`system:masters`) bearer token (default: `admin.token` in --credentials-dir).
    #[arg(long, env = "MERIDIAN_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Generate a missing CA and admin token in --credentials-dir. `false`: the credentials
    /// come from files and nothing is written there (replicas after the first, Secrets).
    #[arg(long, env = "MERIDIAN_GENERATE_CREDENTIALS", default_value_t = true, action = clap::ArgAction::Set)]
    pub generate_credentials: bool,
    /// Directory for the store, credentials and admin.kubeconfig.
    #[arg(long, env = "MERIDIAN_DATA_DIR", default_value = "meridian-data")]
    pub data_dir: PathBuf,
    /// `embedded` (durable, in --data-dir), `etcd` (--etcd-servers; several replicas may
    /// share it) or `memory` (lost on exit).
    #[arg(long, env = "MERIDIAN_STORAGE_BACKEND", default_value = "embedded", value_parser = ["embedded", "etcd", "memory"])]
    pub storage_backend: String,
    /// etcd servers to connect with (scheme://ip:port), comma separated.
    #[arg(long, env = "MERIDIAN_ETCD_SERVERS", value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// The prefix of every key in etcd.
    #[arg(long, env = "MERIDIAN_ETCD_PREFIX", default_value = meridian_store::etcd::DEFAULT_PREFIX)]
    pub etcd_prefix: String,
    /// CA bundle that signed the etcd servers' certificates.
    #[arg(long, env = "MERIDIAN_ETCD_CAFILE")]
    pub etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd's client-certificate authentication.
    #[arg(long, env = "MERIDIAN_ETCD_CERTFILE")]
    pub etcd_certfile: Option<PathBuf>,
    /// Key of --etcd-certfile.
    #[arg(long, env = "MERIDIAN_ETCD_KEYFILE")]
    pub etcd_keyfile: Option<PathBuf>,
    /// How often the API servers sharing etcd compact its history (`0s` turns it off).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub etcd_compaction_interval: std::time::Duration,
    /// Events kept per resource for watches that resume from a resourceVersion.
    #[arg(long, default_value_t = meridian_apiserver::cache::HISTORY_PER_RESOURCE)]
    pub watch_history: usize,
    /// How long Events are kept after the last time they record (e.g. `1h`, `30m`, `90s`).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub event_ttl: std::time::Duration,
    /// Write the address actually bound (useful with --secure-port 0) to this file.
    #[arg(long)]
    pub address_file: Option<PathBuf>,
    /// Admission plugins to turn off, comma separated, as kube-apiserver's flag of that
    /// name. `MemberCleanup` gives every federated workload (Deployment, ReplicaSet,
    /// StatefulSet, Job) the member-cleanup finalizer when it is created, which the workload
    /// controller removes once the member copies are gone; turn it off for an API server
    /// that runs without the controllers, whose workload deletions would wait for them.
    #[arg(long, value_delimiter = ',', value_parser = [MEMBER_CLEANUP])]
    pub disable_admission_plugins: Vec<String>,
}

/// The name of the member-cleanup admission plugin.
const MEMBER_CLEANUP: &str = "MemberCleanup";

/// A duration as kube-apiserver flags write them: a number with `h`, `m`, `s` or `ms`.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{s:?}: missing unit (h, m, s or ms)"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("{s:?}: not a duration"))?;
    let secs = |k: u64| std::time::Duration::from_secs(n.saturating_mul(k));
    match unit {
        "h" => Ok(secs(3600)),
        "m" => Ok(secs(60)),
        "s" => Ok(secs(1)),
        "ms" => Ok(std::time::Duration::from_millis(n)),
        _ => Err(format!("{s:?}: unknown unit {unit:?} (h, m, s or ms)")),
    }
}

/// What start-up produced.
pub struct Started {
    /// The bound address.
    pub addr: SocketAddr,
    /// Path of the admin kubeconfig; `None` when there is no admin token to put in one
    /// (credentials from files without an admin token file).
    pub kubeconfig: Option<PathBuf>,
}

/// Creates `p` and its parents, owner-only (they hold keys and tokens).
pub(crate) fn ensure_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
}

/// A kubeconfig for the admin of one server: cluster and context `name`, user `<name>-admin`.
pub fn kubeconfig(server: &str, ca_pem: Option<&str>, token: &str, name: &str) -> String {
    kubeconfig_for(server, ca_pem, token, name, &format!("{name}-admin"))
}

/// A kubeconfig for one user of one server: cluster and context `name`, the token's user
/// entry `user`.
pub fn kubeconfig_for(
    server: &str,
    ca_pem: Option<&str>,
    token: &str,
    name: &str,
    user: &str,
) -> String {
    use base64::Engine;
    let ca = ca_pem
        .map(|p| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(p)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n{ca}contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\ncurrent-context: {name}\nusers:\n- name: {user}\n  user:\n    token: {token}\n"
    )
}

/// Where the flags say the credentials come from.
fn credential_options(args: &Args) -> crate::credentials::CredentialOptions {
    let own = args.data_dir.join("pki");
    crate::credentials::CredentialOptions {
        shared_dir: args.credentials_dir.clone().unwrap_or_else(|| own.clone()),
        own_dir: own,
        admin_token_file: args.admin_token_file.clone(),
        generate: args.generate_credentials,
        serving: args
            .tls_cert_file
            .clone()
            .zip(args.tls_private_key_file.clone()),
        serving_names: args.advertise_address.iter().cloned().collect(),
        client_ca_file: args.client_ca_file.clone(),
    }
}

/// How the server opens its embedded store.
///
/// The watch cache is the store's only watcher and reads every event as soon as it is
/// published, so the store's own history only has to cover a few write groups (each
/// event holds the new value and the previous one). Reads are served from the cache, so
/// the page cache only serves the writer's lookups of the keys it updates: a few MB keep
/// the B-tree's inner pages, and leaves come from the kernel's cache of the file.
fn store_options() -> meridian_store::EmbeddedOptions {
    let defaults = meridian_store::EmbeddedOptions::default();
    meridian_store::EmbeddedOptions {
        history_capacity: 4 * defaults.max_batch,
        cache_size: 4 << 20,
        ..defaults
    }
}

/// Starts the server; returns once it is listening, leaving it running in the background
/// until `shutdown` is set.
pub async fn start(
    args: &Args,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(Started, Arc<dyn Storage>)> {
    let backend = crate::storage::Backend::from_args(args)?;
    ensure_dir(&args.data_dir).with_context(|| format!("creating {}", args.data_dir.display()))?;
    let creds = crate::credentials::load(&credential_options(args))?;
    let mut tokens = match &args.token_auth_file {
        Some(p) => TokenAuthenticator::load(p)?,
        None => TokenAuthenticator::default(),
    };
    if let Some(token) = &creds.admin_token {
        tokens.add(
            token.clone(),
            UserInfo {
                name: "admin".into(),
                uid: "admin".into(),
                groups: vec!["system:masters".into()],
            },
        );
    }
    for t in &creds.component_tokens {
        tokens.add(
            t.token.clone(),
            UserInfo {
                name: t.user.into(),
                uid: t.component.into(),
                groups: Vec::new(),
            },
        );
    }
    let store = crate::storage::open(backend, &args.data_dir, store_options()).await?;
    let metrics = Arc::new(meridian_apiserver::metrics::Metrics::default());
    let store: Arc<dyn Storage> = Arc::new(meridian_apiserver::metrics::InstrumentedStore::new(
        store, &metrics,
    ));
    let registry = crate::kinds::registry_with(crate::kinds::Admission {
        member_cleanup: !args
            .disable_admission_plugins
            .iter()
            .any(|p| p == MEMBER_CLEANUP),
    });
    let engine =
        meridian_apiserver::server::build_engine(registry, store.clone(), args.watch_history)
            .await?;
    meridian_apiserver::system_namespaces::ensure(&engine).await?;
    meridian_apiserver::bootstrap_policy::ensure_with(&engine, crate::component_policy::policy())
        .await?;
    let listener =
        meridian_apiserver::server::bind(SocketAddr::new(args.bind_address, args.secure_port))
            .await?;
    let addr = listener.local_addr()?;
    let host = args.advertise_address.clone().unwrap_or_else(|| {
        if args.bind_address.is_unspecified() {
            "127.0.0.1".into()
        } else {
            args.bind_address.to_string()
        }
    });
    let server_url = if host.contains(':') {
        format!("https://[{host}]:{}", addr.port())
    } else {
        format!("https://{host}:{}", addr.port())
    };
    let api = meridian_apiserver::server::api_server(
        engine,
        tokens,
        format!("{host}:{}", addr.port()),
        metrics,
    );
    let tls = meridian_apiserver::server::tls_config(
        &creds.cert_pem,
        &creds.key_pem,
        creds.client_ca_pem.as_deref(),
    )?;
    // Without an admin token (credentials from files, tokens from --token-auth-file) there
    // is no admin kubeconfig to write.
    let kubeconfig_path = args.data_dir.join("admin.kubeconfig");
    let written = if let Some(token) = &creds.admin_token {
        pki::write_private(
            &kubeconfig_path,
            &kubeconfig(
                &server_url,
                creds.ca_for_clients.as_deref(),
                token,
                "meridian",
            ),
        )?;
        Some(std::fs::canonicalize(&kubeconfig_path).unwrap_or(kubeconfig_path))
    } else {
        if kubeconfig_path.exists() {
            // One from an earlier run would hold a token this server no longer accepts.
            std::fs::remove_file(&kubeconfig_path)
                .with_context(|| format!("removing {}", kubeconfig_path.display()))?;
        }
        None
    };
    // A component without a token here (its token is in --token-auth-file) has none; one
    // left from an earlier run would hold a token this server no longer accepts.
    for (component, _) in crate::credentials::COMPONENTS {
        let path = args.data_dir.join(format!("{component}.kubeconfig"));
        if !creds
            .component_tokens
            .iter()
            .any(|t| t.component == component)
        {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", path.display()));
                }
                _ => {}
            }
        }
    }
    // One kubeconfig per component, beside the admin's: what `fedctl up` and the tests run
    // fed-scheduler and fed-controllers with, each as its own least-privilege user.
    for t in &creds.component_tokens {
        let path = args.data_dir.join(format!("{}.kubeconfig", t.component));
        pki::write_private(
            &path,
            &kubeconfig_for(
                &server_url,
                creds.ca_for_clients.as_deref(),
                &t.token,
                "meridian",
                t.component,
            ),
        )?;
    }
    if let Some(f) = &args.address_file {
        pki::write_private(f, &addr.to_string())?;
    }
    tokio::spawn(meridian_apiserver::event_ttl::run(
        api.engine.clone(),
        args.event_ttl,
    ));
    tokio::spawn(meridian_apiserver::server::serve(
        listener, tls, api, shutdown,
    ));
    Ok((
        Started {
            addr,
            kubeconfig: written,
        },
        store,
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn durations_take_kube_apiserver_units() {
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("5d").is_err());
    }
}

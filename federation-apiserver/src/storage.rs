//! The storage flags (kube-apiserver's names) checked all at once, and the backend they choose opened.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use meridian_store::{EtcdOptions, EtcdStore, EtcdTls, Storage};

use crate::cli::Args;

/// Every problem found with the storage flags, one line each.
#[derive(Debug, thiserror::Error)]
#[error("invalid storage flags:\n  {}", .0.join("\n  "))]
pub struct FlagErrors(pub Vec<String>);

/// The backend the flags chose.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded store in `<data-dir>/store`.
    Embedded,
    /// Nothing kept across restarts.
    Memory,
    /// An etcd cluster.
    Etcd(EtcdOptions),
}

/// What the etcd flags say, before any file is read.
struct EtcdFlags<'a> {
    servers: &'a [String],
    prefix: &'a str,
    cafile: Option<&'a Path>,
    certfile: Option<&'a Path>,
    keyfile: Option<&'a Path>,
    compaction_interval: Duration,
}

impl Backend {
    /// The backend `args` choose, or every reason they are wrong. Reads the TLS files.
    pub fn from_args(args: &Args) -> Result<Self, FlagErrors> {
        let etcd = EtcdFlags {
            servers: &args.etcd_servers,
            prefix: &args.etcd_prefix,
            cafile: args.etcd_cafile.as_deref(),
            certfile: args.etcd_certfile.as_deref(),
            keyfile: args.etcd_keyfile.as_deref(),
            compaction_interval: args.etcd_compaction_interval,
        };
        let mut errors = Vec::new();
        let backend = match args.storage_backend.as_str() {
            "memory" | "embedded" => {
                if !etcd.servers.is_empty() {
                    errors.push(format!(
                        "--etcd-servers is only used with --storage-backend etcd, not {}",
                        args.storage_backend
                    ));
                }
                if args.storage_backend == "memory" {
                    Backend::Memory
                } else {
                    Backend::Embedded
                }
            }
            "etcd" => Backend::Etcd(etcd_options(&etcd, &mut errors)),
            other => {
                errors.push(format!(
                    "--storage-backend {other:?} must be embedded, etcd or memory"
                ));
                Backend::Memory
            }
        };
        if errors.is_empty() {
            Ok(backend)
        } else {
            Err(FlagErrors(errors))
        }
    }
}

/// The etcd options the flags describe; problems go to `errors`.
fn etcd_options(flags: &EtcdFlags<'_>, errors: &mut Vec<String>) -> EtcdOptions {
    if flags.servers.is_empty() {
        errors.push("--etcd-servers is required with --storage-backend etcd".into());
    }
    let mut https = false;
    for server in flags.servers {
        match server_scheme(server) {
            Ok(secure) => https |= secure,
            Err(why) => errors.push(format!("--etcd-servers {server:?}: {why}")),
        }
    }
    if flags.servers.iter().any(|s| s.starts_with("http://")) && https {
        errors.push("--etcd-servers mixes http:// and https:// servers".into());
    }
    if !flags.prefix.starts_with('/') {
        errors.push(format!(
            "--etcd-prefix {:?} must start with '/'",
            flags.prefix
        ));
    }
    let tls_flags = flags.cafile.is_some() || flags.certfile.is_some() || flags.keyfile.is_some();
    if https && flags.cafile.is_none() {
        errors.push("--etcd-cafile is required for https:// etcd servers".into());
    }
    if tls_flags && !https && !flags.servers.is_empty() {
        errors.push(
            "--etcd-cafile, --etcd-certfile and --etcd-keyfile need https:// --etcd-servers".into(),
        );
    }
    if flags.certfile.is_some() != flags.keyfile.is_some() {
        errors.push("--etcd-certfile and --etcd-keyfile go together".into());
    }
    let mut read = |flag: &str, path: Option<&Path>| {
        path.and_then(|path| match std::fs::read(path) {
            Ok(pem) => Some(pem),
            Err(err) => {
                errors.push(format!("{flag} {}: {err}", path.display()));
                None
            }
        })
    };
    let ca = read("--etcd-cafile", flags.cafile);
    let cert = read("--etcd-certfile", flags.certfile);
    let key = read("--etcd-keyfile", flags.keyfile);
    let tls = ca.map(|ca_pem| EtcdTls {
        ca_pem,
        client: cert.zip(key),
    });
    EtcdOptions {
        prefix: flags.prefix.to_owned(),
        tls,
        // kube-apiserver: 0 turns the compaction rounds off.
        compaction_interval: (!flags.compaction_interval.is_zero())
            .then_some(flags.compaction_interval),
        ..EtcdOptions::new(flags.servers.to_vec())
    }
}

/// Whether `server` is an `https://` URL; an error says what is wrong with it.
fn server_scheme(server: &str) -> Result<bool, String> {
    let uri: http::Uri = server
        .parse()
        .map_err(|_| "not a URL like https://10.0.0.1:2379".to_owned())?;
    let secure = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err("the scheme must be http:// or https://".into()),
    };
    match uri.authority() {
        Some(authority) if authority.port_u16().is_some() => {}
        _ => return Err("host and port are required, like https://10.0.0.1:2379".into()),
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err("a server URL has no path".into());
    }
    Ok(secure)
}

/// Opens the chosen backend; the embedded one in `<data_dir>/store`.
pub async fn open(
    backend: Backend,
    data_dir: &Path,
    embedded: meridian_store::EmbeddedOptions,
) -> anyhow::Result<Arc<dyn Storage>> {
    use anyhow::Context;
    Ok(match backend {
        Backend::Memory => Arc::new(meridian_store::MemoryStore::new()),
        Backend::Embedded => {
            let dir: PathBuf = data_dir.join("store");
            crate::cli::ensure_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let store = tokio::task::spawn_blocking(move || {
                meridian_store::EmbeddedStore::open_with(&dir, embedded)
            })
            .await?
            .context("opening the embedded store")?;
            Arc::new(store)
        }
        Backend::Etcd(options) => {
            let servers = options.endpoints.join(",");
            let store = EtcdStore::connect(options)
                .await
                .with_context(|| format!("connecting to etcd at {servers}"))?;
            Arc::new(store)
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn backend(flags: &[&str]) -> Result<Backend, FlagErrors> {
        let args = Args::try_parse_from(["federation-apiserver"].iter().chain(flags).copied())
            .expect("the flags parse");
        Backend::from_args(&args)
    }

    #[test]
    fn embedded_is_the_default_and_etcd_takes_kube_apiserver_defaults() {
        assert!(matches!(backend(&[]), Ok(Backend::Embedded)));
        assert!(matches!(
            backend(&["--storage-backend", "memory"]),
            Ok(Backend::Memory)
        ));
        let Ok(Backend::Etcd(options)) = backend(&[
            "--storage-backend",
            "etcd",
            "--etcd-servers",
            "http://127.0.0.1:2379,http://127.0.0.2:2379",
        ]) else {
            panic!("etcd flags refused");
        };
        assert_eq!(
            options.endpoints,
            ["http://127.0.0.1:2379", "http://127.0.0.2:2379"]
        );
        assert_eq!(options.prefix, "/registry");
        assert_eq!(options.compaction_interval, Some(Duration::from_secs(300)));
        assert!(options.tls.is_none());
    }

    #[test]
    fn tls_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["ca.crt", "client.crt", "client.key"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let path = |name: &str| dir.path().join(name).display().to_string();
        let Ok(Backend::Etcd(options)) = backend(&[
            "--storage-backend=etcd",
            "--etcd-servers=https://10.0.0.1:2379",
            &format!("--etcd-cafile={}", path("ca.crt")),
            &format!("--etcd-certfile={}", path("client.crt")),
            &format!("--etcd-keyfile={}", path("client.key")),
            "--etcd-prefix=/meridian",
            "--etcd-compaction-interval=0s",
        ]) else {
            panic!("TLS flags refused");
        };
        let tls = options.tls.expect("TLS configured");
        assert_eq!(tls.ca_pem, b"ca.crt");
        assert_eq!(
            tls.client,
            Some((b"client.crt".to_vec(), b"client.key".to_vec()))
        );
        assert_eq!(options.prefix, "/meridian");
        assert_eq!(options.compaction_interval, None);
    }

    #[test]
    fn every_bad_flag_is_reported_at_once() {
        let Err(FlagErrors(errors)) = backend(&[
            "--storage-backend=etcd",
            "--etcd-servers=https://10.0.0.1:2379,ftp://x:1,10.0.0.3",
            "--etcd-prefix=registry",
            "--etcd-certfile=/nonexistent/client.crt",
        ]) else {
            panic!("bad flags accepted");
        };
        let wanted = [
            "ftp://x:1",
            "\"10.0.0.3\"",
            "--etcd-prefix \"registry\"",
            "--etcd-cafile is required",
            "--etcd-certfile and --etcd-keyfile go together",
            "--etcd-certfile /nonexistent/client.crt",
        ];
        for want in wanted {
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "no error about {want:?} in {errors:#?}"
            );
        }
        assert_eq!(errors.len(), wanted.len(), "{errors:#?}");
    }

    #[test]
    fn etcd_flags_without_etcd_and_etcd_without_servers_are_refused() {
        let Err(FlagErrors(errors)) = backend(&["--etcd-servers=http://127.0.0.1:2379"]) else {
            panic!("accepted");
        };
        assert!(errors[0].contains("only used with --storage-backend etcd"));
        let Err(FlagErrors(errors)) = backend(&["--storage-backend=etcd"]) else {
            panic!("accepted");
        };
        assert!(errors[0].contains("--etcd-servers is required"));
        let Err(FlagErrors(errors)) = backend(&[
            "--storage-backend=etcd",
            "--etcd-servers=http://127.0.0.1:2379",
            "--etcd-cafile=/x",
        ]) else {
            panic!("accepted");
        };
        assert!(
            errors.iter().any(|e| e.contains("need https://")),
            "{errors:?}"
        );
    }
}

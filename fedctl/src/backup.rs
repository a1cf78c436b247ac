//! `fedctl backup`, `fedctl restore` and `fedctl migrate --to etcd`: the federation's store
//! (embedded, opened from the API server's data directory while the server is stopped; or
//! etcd) copied to a file, from a file, or from the embedded store into etcd, through
//! [`meridian_store::backup`].

use std::path::{Path, PathBuf};

use anyhow::Context;
use meridian_store::backup::{self, Backup, Summary};
use meridian_store::{EmbeddedStore, EtcdOptions, EtcdStore, EtcdTls, Storage};

/// The store backends `fedctl` reads and writes.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store of a stopped API server (`<data-dir>/store`).
    Embedded,
    /// An etcd cluster.
    Etcd,
}

/// Which store, with the API server's own flag names.
#[derive(clap::Args, Debug, Clone)]
pub struct StoreArgs {
    /// `embedded` or `etcd`.
    #[arg(long, value_enum, default_value = "embedded")]
    pub storage_backend: Backend,
    /// The API server's --data-dir, for the embedded store (`fedctl up` uses
    /// `<its data dir>/federation`). The server must be stopped.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// etcd, for `--storage-backend etcd`.
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// An etcd cluster, with the API server's flag names.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EtcdArgs {
    /// etcd servers (scheme://ip:port), comma separated.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// The prefix of every key in etcd.
    #[arg(long, default_value = meridian_store::etcd::DEFAULT_PREFIX)]
    pub etcd_prefix: String,
    /// CA bundle of the etcd servers' certificates.
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// Client certificate for etcd.
    #[arg(long, requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,
    /// Key of --etcd-certfile.
    #[arg(long, requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,
}

/// An open store, closed cleanly when done (the embedded one commits and releases its file).
enum Opened {
    Embedded(EmbeddedStore),
    Etcd(EtcdStore),
}

impl Opened {
    fn store(&self) -> &dyn Storage {
        match self {
            Opened::Embedded(s) => s,
            Opened::Etcd(s) => s,
        }
    }

    async fn close(self) -> anyhow::Result<()> {
        if let Opened::Embedded(s) = self {
            s.close().await.context("closing the embedded store")?;
        }
        Ok(())
    }
}

/// What the store flags name, in words.
fn describe(args: &StoreArgs) -> String {
    match args.storage_backend {
        Backend::Embedded => format!(
            "the embedded store in {}",
            args.data_dir
                .as_deref()
                .map(|d| d.join("store"))
                .unwrap_or_default()
                .display()
        ),
        Backend::Etcd => format!(
            "etcd at {} under {}",
            args.etcd.etcd_servers.join(","),
            args.etcd.etcd_prefix
        ),
    }
}

/// Opens the store; `must_exist`: an embedded store that is not there is an error rather
/// than a new empty one (a backup of a mistyped directory would be empty).
async fn open(args: &StoreArgs, must_exist: bool) -> anyhow::Result<Opened> {
    match args.storage_backend {
        Backend::Embedded => {
            let dir = args
                .data_dir
                .as_deref()
                .context("--data-dir is required with --storage-backend embedded")?
                .join("store");
            if must_exist && !dir.join(meridian_store::DATA_FILE).exists() {
                anyhow::bail!(
                    "no embedded store in {} (give the API server's --data-dir)",
                    dir.display()
                );
            }
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let opening = dir.clone();
            let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(&opening))
                .await?
                .with_context(|| {
                    format!(
                        "opening the embedded store in {} (stop the API server using it first)",
                        dir.display()
                    )
                })?;
            Ok(Opened::Embedded(store))
        }
        Backend::Etcd => {
            let args = &args.etcd;
            anyhow::ensure!(
                !args.etcd_servers.is_empty(),
                "--etcd-servers is required with --storage-backend etcd"
            );
            let read =
                |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
            let tls = match &args.etcd_cafile {
                Some(ca) => Some(EtcdTls {
                    ca_pem: read(ca)?,
                    client: match (&args.etcd_certfile, &args.etcd_keyfile) {
                        (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
                        _ => None,
                    },
                }),
                None => None,
            };
            let options = EtcdOptions {
                prefix: args.etcd_prefix.clone(),
                tls,
                // A copy is no API server: it takes no part in the compaction rounds.
                compaction_interval: None,
                ..EtcdOptions::new(args.etcd_servers.clone())
            };
            let servers = args.etcd_servers.join(",");
            let store = EtcdStore::connect(options)
                .await
                .with_context(|| format!("connecting to etcd at {servers}"))?;
            Ok(Opened::Etcd(store))
        }
    }
}

/// `fedctl backup`: writes a snapshot of the store to `file` (through a temporary file, so
/// a failed backup leaves no partial one).
pub async fn backup(args: &StoreArgs, file: &Path) -> anyhow::Result<Summary> {
    let opened = open(args, true).await?;
    let taken = backup::take(opened.store())
        .await
        .with_context(|| format!("reading {}", describe(args)))?;
    opened.close().await?;
    let tmp = file.with_extension("partial");
    std::fs::write(&tmp, backup::encode(&taken))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("writing {}", file.display()))?;
    Ok(Summary {
        keys: taken.entries.len(),
        revision: taken.revision,
    })
}

/// `fedctl restore`: checks the whole file, then writes it into the (empty) store.
pub async fn restore(args: &StoreArgs, file: &Path) -> anyhow::Result<Summary> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let decoded: Backup =
        backup::decode(&bytes).with_context(|| format!("{} (nothing restored)", file.display()))?;
    write(args, &decoded).await
}

async fn write(args: &StoreArgs, decoded: &Backup) -> anyhow::Result<Summary> {
    let opened = open(args, false).await?;
    let summary = backup::restore(opened.store(), decoded)
        .await
        .with_context(|| format!("restoring into {}", describe(args)))?;
    opened.close().await?;
    Ok(summary)
}

/// `fedctl migrate --to etcd`: copies the embedded store of the stopped API server whose
/// data directory is `from` into the (empty) etcd `to` names.
pub async fn migrate(from: &Path, to: &EtcdArgs) -> anyhow::Result<Summary> {
    let source = StoreArgs {
        storage_backend: Backend::Embedded,
        data_dir: Some(from.to_owned()),
        etcd: EtcdArgs::default(),
    };
    let target = StoreArgs {
        storage_backend: Backend::Etcd,
        data_dir: None,
        etcd: to.clone(),
    };
    let opened = open(&source, true).await?;
    let taken = backup::take(opened.store())
        .await
        .with_context(|| format!("reading {}", describe(&source)))?;
    opened.close().await?;
    write(&target, &taken).await
}

/// What to tell after a restore or migration: resourceVersions are new.
pub const RELIST_NOTE: &str = "Objects kept their order but have new resourceVersions: clients (controllers, \
     kubectl watches) must list again, as after an etcd snapshot restore.";

//! The image directory `tools/build-images.sh` writes (`images.json`, the OCI layout `oci/`)
//! and the cache of unpacked images: each digest unpacked once with `umoci unpack`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::RuncError;

/// One entry of `images.json`.
#[derive(Clone, Debug, Deserialize)]
struct Entry {
    /// Full reference, e.g. `ghcr.io/meridian-dev/federation-apiserver:0.1.0`.
    reference: String,
    /// The layout's ref name, e.g. `federation-apiserver:0.1.0`.
    #[serde(rename = "ref")]
    ref_name: String,
    /// Manifest digest.
    digest: String,
}

impl Entry {
    /// Whether a pod's `image` names this entry.
    fn names(&self, image: &str) -> bool {
        self.reference == image || self.ref_name == image
    }
}

/// An unpacked image.
#[derive(Debug)]
pub(crate) struct Unpacked {
    /// `sha256:...` of the manifest.
    pub(crate) digest: String,
    /// The unpacked root filesystem.
    pub(crate) rootfs: PathBuf,
    /// umoci's `config.json` for it.
    pub(crate) config: Value,
    /// How many of `config.process.args` are the entrypoint.
    pub(crate) entrypoint_len: usize,
}

/// The images one fleet can run, and their unpacked cache.
pub(crate) struct Images {
    dir: PathBuf,
    cache: PathBuf,
    unpacked: tokio::sync::Mutex<HashMap<String, Arc<Unpacked>>>,
}

impl Images {
    /// Images from `dir` (holding `images.json` and `oci/`), unpacked under `cache`.
    pub(crate) fn new(dir: PathBuf, cache: PathBuf) -> Self {
        Self {
            dir,
            cache,
            unpacked: Default::default(),
        }
    }

    /// The entry for `image`: `images.json` is read on every lookup, so images built while
    /// the fleet runs are found.
    fn entry(&self, image: &str) -> Result<Option<Entry>, RuncError> {
        Ok(self.entries()?.into_iter().find(|e| e.names(image)))
    }

    /// Every entry of `images.json`, read now.
    fn entries(&self) -> Result<Vec<Entry>, RuncError> {
        let path = self.dir.join("images.json");
        let text = std::fs::read_to_string(&path).map_err(|e| RuncError::io(&path, e))?;
        serde_json::from_str(&text).map_err(|e| RuncError::Image(format!("{path:?}: {e}")))
    }

    /// Whether the directory has every one of `images` now (without unpacking any).
    pub(crate) fn has_all<'a>(
        &self,
        mut images: impl Iterator<Item = &'a str>,
    ) -> Result<bool, RuncError> {
        let entries = self.entries()?;
        Ok(images.all(|i| entries.iter().any(|e| e.names(i))))
    }

    /// The unpacked image for a pod's `image`, or `None` if the directory does not have it.
    pub(crate) async fn get(&self, image: &str) -> Result<Option<Arc<Unpacked>>, RuncError> {
        let Some(entry) = self.entry(image)? else {
            return Ok(None);
        };
        let mut cache = self.unpacked.lock().await;
        if let Some(u) = cache.get(&entry.digest) {
            return Ok(Some(u.clone()));
        }
        let hex = entry.digest.trim_start_matches("sha256:");
        let bundle = self.cache.join(hex);
        if !bundle.join("config.json").exists() {
            let tmp = self.cache.join(format!("{hex}.partial"));
            let _ = std::fs::remove_dir_all(&tmp);
            std::fs::create_dir_all(&self.cache).map_err(|e| RuncError::io(&self.cache, e))?;
            let layout = format!("{}:{}", self.dir.join("oci").display(), entry.ref_name);
            super::command::run("umoci", &["unpack", "--image", &layout, &path_str(&tmp)]).await?;
            std::fs::rename(&tmp, &bundle).map_err(|e| RuncError::io(&bundle, e))?;
        }
        let cfg_path = bundle.join("config.json");
        let config: Value = serde_json::from_slice(
            &std::fs::read(&cfg_path).map_err(|e| RuncError::io(&cfg_path, e))?,
        )
        .map_err(|e| RuncError::Image(format!("{cfg_path:?}: {e}")))?;
        let entrypoint_len = entrypoint_len(&self.dir.join("oci"), &entry.digest)?;
        let u = Arc::new(Unpacked {
            digest: entry.digest.clone(),
            rootfs: bundle.join("rootfs"),
            config,
            entrypoint_len,
        });
        cache.insert(entry.digest, u.clone());
        Ok(Some(u))
    }
}

/// A path as a string argument.
pub(crate) fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// The length of the image config's `Entrypoint`, read from the layout's manifest.
fn entrypoint_len(layout: &Path, digest: &str) -> Result<usize, RuncError> {
    let blob = |d: &str| -> Result<Value, RuncError> {
        let p = layout
            .join("blobs/sha256")
            .join(d.trim_start_matches("sha256:"));
        let bytes = std::fs::read(&p).map_err(|e| RuncError::io(&p, e))?;
        serde_json::from_slice(&bytes).map_err(|e| RuncError::Image(format!("{p:?}: {e}")))
    };
    let manifest = blob(digest)?;
    let config_digest = manifest
        .pointer("/config/digest")
        .and_then(Value::as_str)
        .ok_or_else(|| RuncError::Image(format!("manifest {digest} has no config")))?;
    let config = blob(config_digest)?;
    Ok(config
        .pointer("/config/Entrypoint")
        .and_then(Value::as_array)
        .map_or(0, Vec::len))
}

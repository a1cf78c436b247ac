//! Helm as the tests drive it: the binary from tools/install-helm.sh (or `$HELM` / `$HELM3`),
//! run with its config, cache and data in a scratch directory and a given kubeconfig.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Helm `major` (4 or 3): `$HELM` (4) or `$HELM3` (3), else installed by tools/install-helm.sh.
pub fn helm_path(major: u8) -> PathBuf {
    let var = if major == 3 { "HELM3" } else { "HELM" };
    crate::tool_path(
        var,
        "install-helm.sh",
        &[&major.to_string()],
        &format!("Helm {major}"),
    )
}

/// One Helm major against one kubeconfig, with its own XDG directories.
pub struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: String,
}

impl Helm {
    /// Helm `major` with `KUBECONFIG=kubeconfig` (a path or a colon-separated list).
    pub fn new(major: u8, kubeconfig: &str) -> Self {
        Self {
            bin: helm_path(major),
            home: tempfile::tempdir().expect("temporary directory"),
            kubeconfig: kubeconfig.to_string(),
        }
    }

    /// The scratch directory (XDG homes live under it; charts may be created there).
    pub fn dir(&self) -> &Path {
        self.home.path()
    }

    /// Runs `helm args`.
    pub fn run(&self, args: &[&str]) -> Output {
        let home = self.home.path();
        Command::new(&self.bin)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("XDG_DATA_HOME", home.join("data"))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()))
    }

    /// `helm args`, which must succeed; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "helm {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

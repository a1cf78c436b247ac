//! The local etcd of `fedctl up --storage etcd`: where its binary is found, and a 3-member
//! cluster on loopback in `<data>/etcd` that comes back on the same ports, with its data,
//! when `fedctl up` runs again.

use std::path::{Path, PathBuf};

use anyhow::Context;
use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions};

/// Members of the local cluster: three, so it has a real quorum.
pub const MEMBERS: usize = 3;

/// The file in the etcd directory that keeps the members' ports between runs.
const PORTS_FILE: &str = "ports";

/// The etcd binary: `given` (`--etcd-binary` or `$ETCD`), else `etcd` next to fedctl (where
/// its other binaries are), else `etcd` on `PATH`.
pub fn binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        anyhow::ensure!(
            path.is_file(),
            "etcd binary {} does not exist (install etcd with tools/install-etcd.sh, which prints its path)",
            path.display()
        );
        return Ok(path.to_owned());
    }
    let exe = std::env::current_exe().context("locating fedctl")?;
    let beside = exe.parent().map(|d| d.join("etcd"));
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("etcd")).collect())
        .unwrap_or_default();
    beside
        .into_iter()
        .chain(on_path)
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--storage etcd needs the etcd binary, found neither next to fedctl nor on PATH: \
                 install it with tools/install-etcd.sh (etcd 3.5 into .tools/bin) and pass \
                 --etcd-binary .tools/bin/etcd (or set ETCD)"
            )
        })
}

/// Starts the cluster in `dir`: on the ports of the previous run when its members' data is
/// there, else a new cluster (its ports kept for the next run).
pub async fn start(dir: &Path, binary: PathBuf) -> anyhow::Result<LocalEtcd> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let options = LocalEtcdOptions {
        binary,
        dir: dir.to_owned(),
        members: MEMBERS,
        tls: None,
        extra_args: Vec::new(),
        hosts: Vec::new(),
    };
    let ports_file = dir.join(PORTS_FILE);
    let previous = std::fs::read_to_string(&ports_file).ok();
    let has_data = (0..MEMBERS).all(|i| dir.join(format!("m{i}")).exists());
    let etcd = match previous {
        Some(text) if has_data => {
            let ports =
                parse_ports(&text).with_context(|| format!("reading {}", ports_file.display()))?;
            LocalEtcd::restart_on(options, ports).await.with_context(|| {
                format!(
                    "restarting the local etcd in {} on its earlier ports (remove that directory to start an empty one)",
                    dir.display()
                )
            })?
        }
        _ => {
            // Members' data without its ports (or the reverse) cannot be brought back.
            for i in 0..MEMBERS {
                let member = dir.join(format!("m{i}"));
                if member.exists() {
                    std::fs::remove_dir_all(&member)
                        .with_context(|| format!("removing {}", member.display()))?;
                }
            }
            let etcd = LocalEtcd::start(options)
                .await
                .context("starting the local etcd")?;
            std::fs::write(&ports_file, format_ports(etcd.ports()))
                .with_context(|| format!("writing {}", ports_file.display()))?;
            etcd
        }
    };
    Ok(etcd)
}

fn format_ports(ports: &[u16]) -> String {
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!("{}\n", list.join(","))
}

fn parse_ports(text: &str) -> anyhow::Result<Vec<u16>> {
    let ports = text
        .trim()
        .split(',')
        .map(|p| {
            p.parse::<u16>()
                .with_context(|| format!("{p:?} is not a port"))
        })
        .collect::<anyhow::Result<Vec<u16>>>()?;
    anyhow::ensure!(
        ports.len() == 2 * MEMBERS,
        "{} ports for {MEMBERS} members, not {}",
        2 * MEMBERS,
        ports.len()
    );
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_round_trip_and_bad_files_are_refused() {
        let ports = [2379, 2380, 2381, 2382, 2383, 2384];
        assert_eq!(parse_ports(&format_ports(&ports)).unwrap(), ports);
        assert!(
            parse_ports("2379,2380")
                .unwrap_err()
                .to_string()
                .contains("not 2")
        );
        assert!(
            parse_ports("1,2,3,4,5,x")
                .unwrap_err()
                .to_string()
                .contains("\"x\" is not a port")
        );
    }

    #[test]
    fn a_given_binary_must_exist_and_the_error_says_how_to_install_one() {
        let err = binary(Some(Path::new("/nonexistent/etcd"))).unwrap_err();
        assert!(err.to_string().contains("tools/install-etcd.sh"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("etcd");
        std::fs::write(&fake, "").unwrap();
        assert_eq!(binary(Some(&fake)).unwrap(), fake);
    }
}

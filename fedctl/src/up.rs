//! `fedctl up`: the whole federation on one machine — the API server (embedded store), a
//! simulated member fleet (pods answering HTTP on loopback addresses), the controllers, the
//! scheduler and an lb-agent per simulated cluster, with every simulated cluster joined — as
//! child processes of the sibling binaries, until Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_yaml_ng::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::join::{self, JoinOptions};
use crate::lbagents;

/// Options of `fedctl up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Where federation state, credentials and kubeconfigs live (kept across restarts).
    pub data_dir: PathBuf,
    /// Simulated member clusters.
    pub clusters: u32,
    /// Nodes per simulated cluster.
    pub nodes: u32,
    /// Regions the simulated clusters are spread over.
    pub regions: String,
    /// Port of the federation API server (0 picks one).
    pub port: u16,
}

/// The DNS zone the local lb-agents answer for.
pub const DNS_ZONE: &str = "global.meridian.test";

/// A sibling binary of this fedctl (they are built and installed together).
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating fedctl")?;
    let p = exe.parent().map(|d| d.join(name)).unwrap_or_default();
    if p.exists() {
        Ok(p)
    } else {
        anyhow::bail!(
            "{} not found next to fedctl: build the workspace binaries (cargo build --release --workspace --bins)",
            p.display()
        )
    }
}

/// Spawns a component and returns once it printed a line starting with `ready` (its other
/// output goes to a log file in the data directory).
async fn spawn(
    name: &str,
    args: &[String],
    ready: &str,
    log_dir: &Path,
) -> anyhow::Result<(Child, Vec<String>)> {
    let log = std::fs::File::create(log_dir.join(format!("{name}.log")))?;
    let mut child = Command::new(sibling(name)?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await? {
            let done = line.starts_with(ready);
            seen.push(line);
            if done {
                return Ok::<_, std::io::Error>(true);
            }
        }
        Ok(false)
    };
    match tokio::time::timeout(Duration::from_secs(60), read).await {
        Ok(Ok(true)) => {}
        _ => anyhow::bail!(
            "{name} did not start; see {}",
            log_dir.join(format!("{name}.log")).display()
        ),
    }
    // Keep draining so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, seen))
}

/// Merges kubeconfigs: clusters, contexts and users of all; the first file's current context.
fn merge_kubeconfigs(paths: &[&Path]) -> anyhow::Result<String> {
    let mut merged: Option<Value> = None;
    for p in paths {
        let v: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(p)?)?;
        match &mut merged {
            None => merged = Some(v),
            Some(m) => {
                for list in ["clusters", "contexts", "users"] {
                    if let (Some(Value::Sequence(dst)), Some(Value::Sequence(src))) =
                        (m.get_mut(list).cloned(), v.get(list))
                    {
                        let mut dst = dst;
                        dst.extend(src.iter().cloned());
                        m[list] = Value::Sequence(dst);
                    }
                }
            }
        }
    }
    Ok(serde_yaml_ng::to_string(&merged.context("no kubeconfig")?)?)
}

/// Runs everything until Ctrl-C or SIGTERM.
pub async fn up(o: &UpOptions) -> anyhow::Result<()> {
    lbagents::check_fleet_size(o.clusters)?;
    std::fs::create_dir_all(&o.data_dir)?;
    let data = std::fs::canonicalize(&o.data_dir)?;
    let logs = data.join("logs");
    std::fs::create_dir_all(&logs)?;
    let (apiserver, banner) = spawn(
        "federation-apiserver",
        &[
            format!("--secure-port={}", o.port),
            format!("--data-dir={}", data.join("federation").display()),
        ],
        "export KUBECONFIG=",
        &logs,
    )
    .await?;
    let fed_kc = PathBuf::from(
        banner
            .last()
            .map(|l| l.trim_start_matches("export KUBECONFIG="))
            .unwrap_or_default(),
    );
    let sim_kc = data.join("sim.kubeconfig");
    let (sim, _) = spawn(
        "cluster-sim",
        &[
            format!("--clusters={}", o.clusters),
            format!("--nodes={}", o.nodes),
            format!("--regions={}", o.regions),
            format!("--kubeconfig-out={}", sim_kc.display()),
            "--pod-network=loopback".into(),
            "--serve-pods".into(),
            "--lb-pool=127.0.1.{n}".into(),
        ],
        "admin API:",
        &logs,
    )
    .await?;
    let kubeconfig = data.join("kubeconfig");
    federation_write(&kubeconfig, &merge_kubeconfigs(&[&fed_kc, &sim_kc])?)?;
    let fed_arg = format!("--kubeconfig={}", fed_kc.display());
    // One replica of each: no Lease to take, so a restart after an unclean stop does not
    // wait for the previous run's Lease to expire.
    let no_election = "--leader-elect=false".to_string();
    let controllers = spawn_quiet(
        "fed-controllers",
        &[
            fed_arg.clone(),
            "--metrics-bind-address=off".into(),
            format!("--dns-zone={DNS_ZONE}"),
            no_election.clone(),
        ],
        &logs,
        "fed-controllers",
    )?;
    let scheduler = spawn_quiet(
        "fed-scheduler",
        &[fed_arg, "--metrics-bind-address=off".into(), no_election],
        &logs,
        "fed-scheduler",
    )?;
    let kc = crate::kubeutil::load_kubeconfig(Some(&kubeconfig))?;
    for i in 1..=o.clusters {
        let name = format!("sim-{i}");
        let opts = JoinOptions {
            name: name.clone(),
            cluster_context: name.clone(),
            federation_context: Some("meridian".into()),
            region: None,
            zone: None,
            labels: Default::default(),
            dry_run: false,
            wait: Duration::from_secs(60),
        };
        join::join(&kc, &opts)
            .await
            .with_context(|| format!("joining {name}"))?;
    }
    let mut agents = Vec::new();
    for n in 1..=o.clusters {
        let member = crate::kubeutil::target(&kc, Some(&format!("sim-{n}"))).await?;
        lbagents::ensure_service(&member.client, n).await?;
        agents.push(spawn_quiet(
            "lb-agent",
            &lbagents::args(n, &sim_kc),
            &logs,
            &format!("lb-agent-sim-{n}"),
        )?);
    }
    println!();
    println!(
        "Meridian is up: federation + {} simulated clusters (logs in {}).",
        o.clusters,
        logs.display()
    );
    println!("export KUBECONFIG={}", kubeconfig.display());
    println!(
        "Contexts: meridian (the federation, current), sim-1 ... sim-{}. Ctrl-C stops everything.",
        o.clusters
    );
    println!(
        "lb-agents: sim-n at {}..{} (HTTP :{}, HTTPS by SNI :{}, DNS :{}); a federated Service answers as <svc>.<ns>.{}",
        lbagents::address(1),
        lbagents::address(o.clusters),
        lbagents::HTTP_PORT,
        lbagents::HTTPS_PORT,
        lbagents::DNS_PORT,
        DNS_ZONE
    );
    wait_for_signal().await;
    println!("stopping");
    let mut children: Vec<Child> = agents;
    children.extend([scheduler, controllers, sim, apiserver]);
    // Ctrl-C on a terminal reaches the children too: give them a moment to exit on their own,
    // then stop the rest (the API server's store is crash-safe either way).
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        futures::future::join_all(children.iter_mut().map(Child::wait)),
    )
    .await;
    for c in &mut children {
        let _ = c.kill().await;
    }
    Ok(())
}

fn spawn_quiet(name: &str, args: &[String], logs: &Path, log_name: &str) -> anyhow::Result<Child> {
    let log = std::fs::File::create(logs.join(format!("{log_name}.log")))?;
    // Logs go to stdout (tracing's default) and panics to stderr: both into the log file.
    Command::new(sibling(name)?)
        .args(args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))
}

fn federation_write(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

async fn wait_for_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

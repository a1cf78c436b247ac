//! What the control-plane benches share: starting the federation (API server, a
//! cluster-sim fleet joined to it, fed-scheduler and fed-controllers, release builds) and
//! reading it (CPU and RSS per process, the API server's write counters, percentiles,
//! federated status lag).

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used, dead_code)]

pub mod members;
pub mod status_lag;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use meridian_e2e::process::{Proc, Spawn, sibling_binary};
use meridian_e2e::{KUBECONFIG_LINE, federation_apiserver};
use serde_json::json;

/// How long a server may take to print its ready line (a fleet of 1,000 clusters of 100
/// nodes takes a while to build).
pub const READY_WITHIN: Duration = Duration::from_secs(600);

/// The number after flag `name` on the command line, or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.parse().expect("number"))
        .unwrap_or(default)
}

/// The release binary `name`, or the program `PROPAGATION_BENCH_<NAME>` names (upper case,
/// `-` as `_`): another build, or a profiler wrapper, against the same everything else. It
/// runs with `RUST_LOG=error`, its output in `<dir>/<name>.log`; the API server with its
/// data in `<dir>/fed`.
pub fn spawn(name: &str, dir: &Path) -> anyhow::Result<Spawn> {
    let var = format!(
        "PROPAGATION_BENCH_{}",
        name.to_ascii_uppercase().replace('-', "_")
    );
    let program = match std::env::var_os(var) {
        Some(p) => PathBuf::from(p),
        None => sibling_binary(name)?,
    };
    let spawn = match name {
        "federation-apiserver" => federation_apiserver(program, &dir.join("fed")),
        _ => Spawn::new(program),
    };
    Ok(spawn
        .interruptible()
        .env("RUST_LOG", "error")
        .output(dir.join(format!("{name}.log"))))
}

/// A `/proc/<pid>/status` size field (`VmRSS:`, `RssFile:`) in MB.
pub fn status_mb(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

pub fn rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmRSS:")
}

/// CPU seconds (user + system) `pid` has used so far.
pub fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// CPU seconds of each control-plane process and of the simulated members.
#[derive(Clone, Copy)]
pub struct Cpu {
    pub apiserver: f64,
    pub scheduler: f64,
    pub controllers: f64,
    pub members: f64,
}

impl Cpu {
    pub fn sample(pids: [u32; 4]) -> Self {
        Self {
            apiserver: cpu_secs(pids[0]),
            scheduler: cpu_secs(pids[1]),
            controllers: cpu_secs(pids[2]),
            members: cpu_secs(pids[3]),
        }
    }

    /// Prints what each used since `before`, and the controllers' CPU per `per` unit.
    pub fn report(self, before: Cpu, label: &str, per: (f64, &str)) {
        let c = self.controllers - before.controllers;
        println!(
            "  CPU during {label}: apiserver {:.2}s, scheduler {:.2}s, controllers {c:.2}s, members {:.2}s; controllers {:.0} us per {}",
            self.apiserver - before.apiserver,
            self.scheduler - before.scheduler,
            self.members - before.members,
            c * 1e6 / per.0.max(1.0),
            per.1
        );
    }
}

pub fn summary(label: &str, mut ms: Vec<f64>) {
    if ms.is_empty() {
        println!("{label}: no samples");
        return;
    }
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{label}: n={} p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
}

/// Polls until `done` holds, printing progress; gives up after `limit`.
pub async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> (usize, usize)) -> bool {
    let start = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let (have, want) = done();
        if have >= want {
            return true;
        }
        if start.elapsed() > limit {
            println!("  {what}: gave up after {limit:?} at {have}/{want}");
            return false;
        }
        if last_print.elapsed() > Duration::from_secs(10) {
            println!("  {what}: {have}/{want}");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn fed_writes(fed: &kube::Client) -> HashMap<String, f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = fed.request_text(req).await.unwrap_or_default();
    let mut out = HashMap::new();
    for l in text
        .lines()
        .filter(|l| l.starts_with("meridian_apiserver_requests_total{"))
    {
        let label = |k: &str| {
            l.split_once(&format!("{k}=\""))
                .and_then(|(_, r)| r.split_once('"'))
                .map(|(v, _)| v.to_string())
                .unwrap_or_default()
        };
        let verb = label("verb");
        if !["create", "update", "patch", "delete"].contains(&verb.as_str()) {
            continue;
        }
        let n: f64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        // Refused writes (409 Conflict above all) are counted apart from the ones that took.
        let code = label("code");
        let refused = if code.starts_with('2') {
            String::new()
        } else {
            format!(" ({code})")
        };
        *out.entry(format!("{verb} {}{refused}", label("resource")))
            .or_default() += n;
    }
    out
}

/// Waits until the federation's workload writes stop (none for 3 s; Cluster status
/// patches and Lease renewals, the members' heartbeats, which never stop, do not count), so
/// a phase's status write-back is counted in that phase and does not run on into the next.
/// Prints how long that took after `start`.
pub async fn settle(fed: &kube::Client, start: Instant) {
    let quiet = |w: &HashMap<String, f64>| -> f64 {
        w.iter()
            .filter(|(k, _)| !k.contains(" clusters") && !k.contains(" leases"))
            .map(|(_, v)| v)
            .sum()
    };
    let mut last = quiet(&fed_writes(fed).await);
    let mut still = 0;
    let limit = Instant::now() + Duration::from_secs(300);
    // Longer than the controllers' own holds (a status pass waits up to 2 s for members
    // to observe their copies), so writes that follow them count in this phase too.
    while still < 12 && Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = quiet(&fed_writes(fed).await);
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
    println!(
        "  federation settled (no workload writes for 3s) {:.2}s after the first request",
        start.elapsed().as_secs_f64() - 3.0
    );
}

/// Prints the federation writes made since `before`, per `per` unit.
pub fn report_fed_writes(
    before: &HashMap<String, f64>,
    after: &HashMap<String, f64>,
    per: (f64, &str),
) {
    let mut rows: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = rows.iter().map(|r| r.1).sum();
    let list: Vec<String> = rows.iter().map(|(k, d)| format!("{k} {d:.0}")).collect();
    println!(
        "  federation writes: {total:.0} ({:.2} per {}): {}",
        total / per.0.max(1.0),
        per.1,
        list.join(", ")
    );
}

pub async fn scrape(port: u16, metric: &str) -> f64 {
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return f64::NAN;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = s
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await;
    let mut body = String::new();
    let _ = s.read_to_string(&mut body).await;
    body.lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A running federation: the API server and a cluster-sim fleet whose clusters are
/// registered in it (Secrets and Clusters written directly, as `fedctl join` would).
pub struct Fleet {
    /// Scratch directory (logs, data, kubeconfigs).
    pub dir: PathBuf,
    /// The federation API server.
    pub apiserver: Proc,
    /// The fleet.
    pub sim: Proc,
    /// A client of the federation.
    pub fed: kube::Client,
    /// The federation's kubeconfig.
    pub fed_kc: PathBuf,
    /// The fleet's kubeconfig (a context per cluster).
    pub sim_kc: PathBuf,
    /// Cluster names, `sim-1` .. `sim-N` in number order.
    pub names: Vec<String>,
}

impl Fleet {
    /// Starts the API server and `clusters` simulated clusters (`sim_args` added to
    /// cluster-sim's), creates `namespaces` and registers every cluster.
    pub async fn start(
        label: &str,
        clusters: usize,
        sim_args: Vec<String>,
        namespaces: &[&str],
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("{label}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let apiserver = spawn("federation-apiserver", &dir)?
            .ready_line(KUBECONFIG_LINE, READY_WITHIN)
            .spawn()?;
        let fed_kc = PathBuf::from(apiserver.ready_value().context("apiserver banner")?);
        let sim_kc = dir.join("sim.kubeconfig");
        let sim = spawn("cluster-sim", &dir)?
            .args([format!("--clusters={clusters}")])
            .args(sim_args)
            .args([format!("--kubeconfig-out={}", sim_kc.display())])
            .ready_line("admin API:", READY_WITHIN)
            .spawn()?;
        let fed = client(&fed_kc, None).await;
        let sim_config: serde_json::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&sim_kc)?)?;
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(fed.clone());
        for ns in std::iter::once(&"meridian-system").chain(namespaces) {
            nss.create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await?;
        }
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(fed.clone(), "meridian-system");
        let cl_api: Api<fed_api::Cluster> = Api::all(fed.clone());
        let mut names = Vec::new();
        for (i, c) in sim_config["clusters"]
            .as_array()
            .context("clusters")?
            .iter()
            .enumerate()
        {
            let name = c["name"].as_str().context("name")?.to_string();
            let token = sim_config["users"][i]["user"]["token"]
                .as_str()
                .context("token")?;
            use base64::Engine;
            let b64 = base64::engine::general_purpose::STANDARD.encode(token);
            secrets
                .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": format!("{name}-credentials")}, "data": {"token": b64}}))?)
                .await?;
            let cluster: fed_api::Cluster = serde_json::from_value(json!({
                "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
                "metadata": {"name": name},
                "spec": {"apiEndpoint": c["cluster"]["server"], "caBundle": c["cluster"]["certificate-authority-data"],
                         "secretRef": {"namespace": "meridian-system", "name": format!("{name}-credentials")}}
            }))?;
            cl_api.create(&PostParams::default(), &cluster).await?;
            names.push(name);
        }
        names.sort_by_key(|n| n.trim_start_matches("sim-").parse::<usize>().unwrap_or(0));
        Ok(Self {
            dir,
            apiserver,
            sim,
            fed,
            fed_kc,
            sim_kc,
            names,
        })
    }

    /// Starts fed-scheduler and fed-controllers (`/metrics` of the controllers on
    /// `metrics_port`), then waits until every cluster is Ready with its capacity and APIs
    /// reported.
    pub async fn start_control_plane(&self, metrics_port: u16) -> anyhow::Result<(Proc, Proc)> {
        let fed_arg = format!("--kubeconfig={}", self.fed_kc.display());
        let scheduler = spawn("fed-scheduler", &self.dir)?
            .args([fed_arg.clone(), "--metrics-bind-address=off".into()])
            .spawn()?;
        let controllers = spawn("fed-controllers", &self.dir)?
            .args([
                fed_arg,
                "--probe-period=5s".into(),
                format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            ])
            .spawn()?;
        let t0 = Instant::now();
        let cl_api: Api<fed_api::Cluster> = Api::all(self.fed.clone());
        let mut stream = Box::pin(cl_api.watch(&WatchParams::default(), "0").await?);
        // Each cluster's latest state: Ready, with its capacity and APIs reported. A cluster
        // the scheduler cannot use yet when the first workload comes is left out of it for
        // good (a divided workload's replicas stay where first placed), so the phases wait
        // until every one is usable at the same time.
        let mut usable = std::collections::HashMap::new();
        while usable.values().filter(|u| **u).count() < self.names.len() {
            let ev = stream
                .next()
                .await
                .context("the Cluster watch ended before every cluster was Ready")?;
            if let Ok(WatchEvent::Added(c) | WatchEvent::Modified(c)) = ev {
                let ok = c.status.as_ref().is_some_and(|s| {
                    s.resource_summary.is_some()
                        && !s.api_enablements.is_empty()
                        && s.conditions
                            .iter()
                            .any(|x| x.type_ == "Ready" && x.status == "True")
                });
                usable.insert(c.metadata.name.clone().unwrap_or_default(), ok);
            }
        }
        println!(
            "{} clusters Ready after {:.1}s",
            self.names.len(),
            t0.elapsed().as_secs_f64()
        );
        Ok((scheduler, controllers))
    }

    /// A client of member `name`.
    pub async fn member(&self, name: &str) -> kube::Client {
        client(&self.sim_kc, Some(name)).await
    }
}

pub async fn client(path: &Path, context: Option<&str>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let opts = kube::config::KubeConfigOptions {
        context: context.map(String::from),
        ..Default::default()
    };
    let cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

/// A client of each member in `names`, from the fleet's kubeconfig read once: a thousand
/// [`client`] calls would parse the thousand-context file a thousand times.
pub async fn member_clients(path: &Path, names: &[String]) -> Vec<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let ctx = kc.contexts.iter().find(|c| &c.name == name).unwrap();
        let inner = ctx.context.as_ref().unwrap();
        let user = inner.user.clone().unwrap_or_default();
        // The one context, its cluster and its user: all a client of that member reads.
        let one = kube::config::Kubeconfig {
            clusters: kc
                .clusters
                .iter()
                .filter(|c| c.name == inner.cluster)
                .cloned()
                .collect(),
            auth_infos: kc
                .auth_infos
                .iter()
                .filter(|u| u.name == user)
                .cloned()
                .collect(),
            contexts: vec![ctx.clone()],
            current_context: Some(name.clone()),
            ..Default::default()
        };
        let cfg = kube::Config::from_custom_kubeconfig(one, &Default::default())
            .await
            .unwrap();
        out.push(kube::Client::try_from(cfg).unwrap());
    }
    out
}

/// The controller's counter of successful member writes of `verb`.
pub fn member_writes_ok(verb: &str) -> String {
    format!("meridian_controllers_workload_member_writes_total{{verb=\"{verb}\",result=\"ok\"}}")
}

/// Polls [`member_writes_ok`] until it has grown by `want` over `base`: when the first and
/// the last of those writes were counted (to the fine polling interval), or `None` on
/// giving up. Polls finely only where a bound is read (before the first write and when the
/// last is due within a second at the rate so far): each scrape encodes the controller's
/// whole metrics page (per-cluster histograms among them), CPU taken from the process being
/// measured: a profile of a thousand-member phase polled every 100 ms (finely over its
/// last fifth) found a tenth of the controllers' CPU answering those scrapes.
pub async fn count_writes(
    metrics_port: u16,
    verb: &str,
    base: f64,
    want: usize,
    limit: Duration,
) -> Option<(Instant, Instant)> {
    let series = member_writes_ok(verb);
    let start = Instant::now();
    let mut first = None;
    let mut next = Instant::now();
    loop {
        tokio::time::sleep_until(next.into()).await;
        let done = scrape(metrics_port, &series).await - base;
        let now = Instant::now();
        if done > 0.0 {
            first.get_or_insert(now);
        }
        if done >= want as f64 {
            return Some((first.unwrap_or(now), now));
        }
        next += poll_interval(first.map(|f| now.duration_since(f)), done, want as f64);
        if start.elapsed() > limit {
            println!("  {verb} writes: gave up after {limit:?} at {done}/{want}");
            return None;
        }
    }
}

/// How long [`count_writes`] waits before its next scrape: finely (20 ms) before the first
/// write and once the last is due within a second at the rate so far; else half the time
/// still to go, at most a second.
fn poll_interval(since_first: Option<Duration>, done: f64, want: f64) -> Duration {
    const FINE: Duration = Duration::from_millis(20);
    const COARSE: Duration = Duration::from_secs(1);
    let Some(elapsed) = since_first.filter(|_| done > 0.0) else {
        return FINE;
    };
    let to_go = elapsed.mul_f64((want - done).max(0.0) / done);
    if to_go <= COARSE {
        FINE
    } else {
        (to_go / 2).min(COARSE)
    }
}

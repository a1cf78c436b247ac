//! Server-side apply against strategic merge patch of the same change, in one run, through
//! the engine's HTTP handler in process (no TLS or sockets: what is measured is the
//! request's own work) over a memory store. Requests are sent open-loop at a fixed rate
//! to a fleet of 3-container Deployments per mode (each change sets one container's image);
//! the two modes alternate in rounds so drift hits both. Prints p50/p99 latency and the
//! process CPU per request of each, and their ratio:
//!
//! ```text
//! cargo run --release -p meridian-apiserver --example apply_bench [-- --rate 1000]
//!     [--seconds 10] [--objects 1000] [--rounds 2]
//! ```

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use meridian_apiserver::api::ApiServer;
use meridian_apiserver::auth::{TokenAuthenticator, UserInfo};
use meridian_apiserver::metrics::Metrics;
use meridian_apiserver::registry::Registry;
use meridian_store::MemoryStore;
use serde_json::json;

const DEPLOYS: &str = "/apis/apps/v1/namespaces/bench/deployments";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Apply,
    Strategic,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Apply => "server-side apply",
            Mode::Strategic => "strategic merge patch",
        }
    }
}

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The apply configuration of Deployment `name` with container `c2` at `image`.
fn config(name: &str, image: &str) -> Bytes {
    let container = |c: &str, image: &str| {
        json!({"name": c, "image": image,
            "ports": [{"containerPort": 8080, "name": format!("{c}-http")}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "env": [{"name": "MODE", "value": "bench"}]})
    };
    let obj = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    container("c1", "nginx:1.27"),
                    container("c2", image),
                    container("c3", "busybox:1.36"),
                ]}}},
    });
    Bytes::from(serde_yaml_ng::to_string(&obj).expect("yaml"))
}

/// The strategic merge patch of the same change.
fn strategic(image: &str) -> Bytes {
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c2", "image": image}]}}}});
    Bytes::from(patch.to_string())
}

async fn send(api: &Arc<ApiServer>, method: &str, uri: &str, ct: &str, body: Bytes) -> u16 {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .header("user-agent", "apply-bench/v1")
        .body(Full::new(body))
        .expect("request");
    let user = UserInfo {
        name: "admin".into(),
        uid: String::new(),
        groups: vec!["system:masters".into()],
    };
    let resp = api.clone().handle(req, Some(user)).await;
    let code = resp.status().as_u16();
    // Read the body: rendering it is part of the request.
    let _ = resp.into_body().collect().await;
    code
}

/// The request of `mode` changing object `i` to image generation `generation`.
/// Each mode has its own fleet, so neither takes the other's fields.
fn request(mode: Mode, i: usize, generation: usize) -> (String, &'static str, Bytes) {
    let name = match mode {
        Mode::Apply => format!("ssa-{i}"),
        Mode::Strategic => format!("smp-{i}"),
    };
    let (uri, ct, body) = change(mode, &name, generation);
    (uri, ct, body)
}

/// The request of `mode` setting `name`'s image to generation `generation`.
fn change(mode: Mode, name: &str, generation: usize) -> (String, &'static str, Bytes) {
    let image = format!("registry.example/app:{generation}");
    match mode {
        Mode::Apply => (
            format!("{DEPLOYS}/{name}?fieldManager=bench"),
            "application/apply-patch+yaml",
            config(name, &image),
        ),
        Mode::Strategic => (
            format!("{DEPLOYS}/{name}"),
            "application/strategic-merge-patch+json",
            strategic(&image),
        ),
    }
}

/// This process's CPU time (user + system), from /proc.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // Linux reports in USER_HZ, 100 on every architecture Rust targets here.
    Duration::from_millis(ticks * 10)
}

struct Figures {
    p50: f64,
    p99: f64,
    cpu_us: f64,
    errors: usize,
}

/// Sends `rate` requests per second for `seconds`, open loop; latencies in ms.
async fn round(
    api: &Arc<ApiServer>,
    mode: Mode,
    objects: usize,
    rate: usize,
    seconds: u64,
    generation: usize,
) -> Figures {
    let total = rate * seconds as usize;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let cpu0 = cpu_time();
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(total);
    for n in 0..total {
        tokio::time::sleep_until(start + interval * n as u32).await;
        let api = api.clone();
        // Each object is changed once per pass; a pass sets a new image everywhere.
        let (uri, ct, body) = request(mode, n % objects, generation + n / objects);
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let code = send(&api, "PATCH", &uri, ct, body).await;
            (t.elapsed().as_secs_f64() * 1e3, code)
        }));
    }
    let mut lat = Vec::with_capacity(total);
    let mut errors = 0;
    for t in tasks {
        let (ms, code) = t.await.expect("task");
        if code != 200 {
            errors += 1;
        }
        lat.push(ms);
    }
    let cpu = cpu_time() - cpu0;
    lat.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Figures {
        p50: at(0.50),
        p99: at(0.99),
        cpu_us: cpu.as_secs_f64() * 1e6 / total as f64,
        errors,
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let rate: usize = arg("--rate", 1000);
    let seconds: u64 = arg("--seconds", 10);
    let objects: usize = arg("--objects", 1000);
    let rounds: usize = arg("--rounds", 2);

    let registry = Registry::new(meridian_apiserver::kinds::builtin());
    let store = Arc::new(MemoryStore::new());
    let engine = meridian_apiserver::server::build_engine(registry, store, 1000)
        .await
        .expect("engine");
    let api = meridian_apiserver::server::api_server(
        engine,
        TokenAuthenticator::default(),
        "127.0.0.1:6443".into(),
        Arc::new(Metrics::default()),
    );
    let ns = Bytes::from(r#"{"metadata":{"name":"bench"}}"#);
    assert_eq!(
        send(&api, "POST", "/api/v1/namespaces", "application/json", ns).await,
        201
    );
    // Both fleets, applied by the manager the apply rounds use: the objects carry
    // managedFields either way, as in a cluster where manifests are applied.
    for i in 0..objects {
        for prefix in ["ssa", "smp"] {
            let (uri, ct, body) = change(Mode::Apply, &format!("{prefix}-{i}"), 0);
            assert_eq!(send(&api, "PATCH", &uri, ct, body).await, 201);
        }
    }
    println!(
        "{objects} Deployments (3 containers), {rate} requests/s for {seconds} s per round, {rounds} rounds per mode"
    );
    let mut generation = 1;
    let mut results: Vec<(Mode, Figures)> = Vec::new();
    for _ in 0..rounds {
        for mode in [Mode::Strategic, Mode::Apply] {
            let f = round(&api, mode, objects, rate, seconds, generation).await;
            generation += rate * seconds as usize / objects + 1;
            println!(
                "{:<22} p50 {:>6.2} ms  p99 {:>6.2} ms  CPU {:>6.0} µs/request  errors {}",
                mode.name(),
                f.p50,
                f.p99,
                f.cpu_us,
                f.errors
            );
            results.push((mode, f));
        }
    }
    let mean = |m: Mode, f: fn(&Figures) -> f64| {
        let v: Vec<f64> = results
            .iter()
            .filter(|r| r.0 == m)
            .map(|r| f(&r.1))
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let (ssa, smp) = (
        mean(Mode::Apply, |f| f.cpu_us),
        mean(Mode::Strategic, |f| f.cpu_us),
    );
    println!(
        "mean over rounds: SSA {ssa:.0} µs/request, SMP {smp:.0} µs/request, SSA/SMP CPU {:.2}x; p99 SSA {:.2} ms, SMP {:.2} ms",
        ssa / smp,
        mean(Mode::Apply, |f| f.p99),
        mean(Mode::Strategic, |f| f.p99),
    );
}

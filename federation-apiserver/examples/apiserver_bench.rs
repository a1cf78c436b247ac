//! Load generator for the federation API server (release mode, real binary, HTTPS over HTTP/2),
//! run once per storage backend: the embedded store, then etcd (a 3-member cluster on
//! loopback, started here). Each run creates and LISTs Deployments, then the same number of
//! custom resources of the same size (unless `--no-custom`). Prints median and p99 figures
//! per backend, etcd's own figures beside them (the same creates sent to etcd directly, and
//! `etcdctl check perf`), and a side-by-side table:
//!
//! ```text
//! cargo build --release -p federation-apiserver
//! cargo run --release -p federation-apiserver --example apiserver_bench [-- --objects 100000]
//!     [--backends embedded,etcd] [--etcd-members 3] [--check-perf l|off] [--event-rate 1000]
//!     [--no-custom]
//! ```
//!
//! etcd is `$ETCD` or what `tools/install-etcd.sh` installs; `etcdctl` sits beside it.

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use meridian_store::etcd::local::{LocalEtcd, LocalEtcdOptions};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use meridian_e2e::{LISTENING_LINE, Proc, etcd_path, start_federation_apiserver};
use serde_json::{Value, json};

type Sender = http2::SendRequest<Full<Bytes>>;

struct Target {
    authority: String,
    token: String,
    tls: Arc<rustls::ClientConfig>,
}

impl Target {
    async fn connect(&self) -> Sender {
        let tcp = tokio::net::TcpStream::connect(&self.authority)
            .await
            .expect("connect");
        tcp.set_nodelay(true).ok();
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .expect("tls");
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(32 << 20)
            .handshake(TokioIo::new(tls))
            .await
            .expect("h2 handshake");
        tokio::spawn(conn);
        sender
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        ct: &str,
    ) -> http::Request<Full<Bytes>> {
        http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", ct)
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    }
}

async fn send(s: &mut Sender, req: http::Request<Full<Bytes>>) -> (u16, Bytes) {
    s.ready().await.expect("ready");
    let resp = s.send_request(req).await.expect("send");
    let code = resp.status().as_u16();
    (
        code,
        resp.into_body().collect().await.expect("body").to_bytes(),
    )
}

fn deployment(name: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "web"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "env": [{"name": "MODE", "value": "production"}, {"name": "REGION", "value": "eu-west"}]}]}}}
    }))
    .unwrap()
}

/// The `"t":"<nanos>"` value in a watch frame.
fn send_time(line: &[u8]) -> Option<f64> {
    let key = b"\"t\":\"";
    let start = line.windows(key.len()).position(|w| w == key)? + key.len();
    let end = start + line[start..].iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&line[start..end]).ok()?.parse().ok()
}

/// Every client's latencies, in one list.
async fn gather(tasks: Vec<tokio::task::JoinHandle<Vec<f64>>>) -> Vec<f64> {
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_mb(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The release federation-apiserver beside this example with the `storage` flags (output in
/// `<dir>/server.log`) and the `host:port` it listens on.
fn start_server(dir: &std::path::Path, storage: &[String]) -> (Proc, String) {
    let server =
        start_federation_apiserver(dir, storage, LISTENING_LINE).unwrap_or_else(|e| panic!("{e}"));
    let url = server.ready_value().unwrap_or_default().to_string();
    (server, url)
}

/// The figures of one backend, for the table at the end.
#[derive(Default)]
struct Figures {
    creates_per_sec: f64,
    create_p50: f64,
    create_p99: f64,
    paced_p50: f64,
    paced_p99: f64,
    list_median: f64,
    list_max: f64,
    watch_p50: f64,
    watch_p99: f64,
    rss_mb: f64,
    /// The custom-resource figures, when measured.
    custom: Option<KindFigures>,
}

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T
where
    T::Err: std::fmt::Debug,
{
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.parse().unwrap())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let objects: usize = arg("--objects", 100_000);
    let event_rate: usize = arg("--event-rate", 1000usize).max(16);
    let backends: String = arg("--backends", "embedded,etcd".to_owned());
    let members: usize = arg("--etcd-members", 3);
    let check_perf: String = arg("--check-perf", "l".to_owned());
    let custom = !std::env::args().any(|a| a == "--no-custom");
    let mut table = Vec::new();
    for backend in backends.split(',') {
        match backend {
            "embedded" => {
                println!("== embedded store");
                table.push((
                    "embedded".to_owned(),
                    run(&[], objects, event_rate, custom).await,
                ));
            }
            "etcd" => {
                let dir = tempfile::tempdir().unwrap();
                let etcd = LocalEtcd::start(LocalEtcdOptions {
                    binary: etcd_path(),
                    dir: dir.path().to_owned(),
                    members,
                    tls: None,
                    extra_args: Vec::new(),
                    hosts: Vec::new(),
                })
                .await
                .expect("starting etcd");
                println!(
                    "== etcd, {members} members on loopback ({})",
                    etcd.endpoints().join(",")
                );
                let storage = vec![
                    "--storage-backend=etcd".to_owned(),
                    format!("--etcd-servers={}", etcd.endpoints().join(",")),
                ];
                table.push((
                    format!("etcd x{members}"),
                    run(&storage, objects, event_rate, custom).await,
                ));
                etcd_alone(&etcd, objects).await;
                if check_perf != "off" {
                    etcdctl_check_perf(&etcd, &check_perf);
                }
            }
            other => panic!("unknown backend {other:?} (embedded, etcd)"),
        }
    }
    print_table(&table, objects, event_rate);
}

/// One line of the table: its label and how to show a backend's figure.
type Row = (&'static str, fn(&Figures) -> String);

fn print_table(table: &[(String, Figures)], objects: usize, event_rate: usize) {
    println!();
    print!("{:<44}", "");
    for (name, _) in table {
        print!("{name:>18}");
    }
    println!();
    let rows: [Row; 8] = [
        ("durable creates/s, 64 clients", |f| {
            format!("{:.0}", f.creates_per_sec)
        }),
        ("  create latency median / p99 (ms)", |f| {
            format!("{:.1} / {:.1}", f.create_p50, f.create_p99)
        }),
        ("create latency at 1,000/s median / p99 (ms)", |f| {
            format!("{:.1} / {:.1}", f.paced_p50, f.paced_p99)
        }),
        ("LIST of all Deployments median / max (ms)", |f| {
            format!("{:.0} / {:.0}", f.list_median, f.list_max)
        }),
        ("watch delivery median / p99 (ms)", |f| {
            format!("{:.1} / {:.1}", f.watch_p50, f.watch_p99)
        }),
        ("custom resource creates/s, 64 clients", |f| {
            f.custom
                .as_ref()
                .map_or("-".into(), |c| format!("{:.0}", c.creates_per_sec))
        }),
        ("LIST of all custom resources median / max (ms)", |f| {
            f.custom.as_ref().map_or("-".into(), |c| {
                format!("{:.0} / {:.0}", c.list_median, c.list_max)
            })
        }),
        ("server RSS at the end (MB)", |f| format!("{:.0}", f.rss_mb)),
    ];
    for (label, value) in rows {
        print!("{label:<44}");
        for (_, figures) in table {
            print!("{:>18}", value(figures));
        }
        println!();
    }
    println!("({objects} Deployments; watch: 1,000 watchers x 10,000 events at {event_rate}/s)");
}

/// Etcd's own figure: the API server's durable creates (one transaction on create_revision
/// == 0 each, the same value size) sent to etcd directly by 64 clients.
async fn etcd_alone(etcd: &LocalEtcd, objects: usize) {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let clients = 64;
    let value = deployment("etcd-alone-0000000");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let endpoints = etcd.endpoints();
        let value = value.clone();
        let per = objects / clients + usize::from(c < objects % clients);
        tasks.push(tokio::spawn(async move {
            // One connection per client, spread over the members, as etcd's own benchmark
            // tool spreads its clients.
            let mut client = etcd_client::Client::connect([&endpoints[c % endpoints.len()]], None)
                .await
                .unwrap();
            let mut lat = Vec::with_capacity(per);
            for i in 0..per {
                let key = format!("/etcd-alone/{c:02}/{i:06}");
                let txn = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key, value.clone(), None)]);
                let t0 = Instant::now();
                assert!(client.txn(txn).await.unwrap().succeeded());
                lat.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            lat
        }));
    }
    let mut lat = gather(tasks).await;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "etcd alone: {objects} create transactions of {} B, 64 clients: {:.0}/s; latency median {:.2} ms, p99 {:.2} ms",
        value.len(),
        objects as f64 / secs,
        percentile(&mut lat, 0.5),
        percentile(&mut lat, 0.99)
    );
}

/// `etcdctl check perf --load <load>`: etcd's own 60-second write check.
fn etcdctl_check_perf(etcd: &LocalEtcd, load: &str) {
    let etcdctl = etcd_path().with_file_name("etcdctl");
    let out = Command::new(&etcdctl)
        .env("ETCDCTL_API", "3")
        .args([
            &format!("--endpoints={}", etcd.endpoints().join(",")),
            "check",
            "perf",
            &format!("--load={load}"),
        ])
        .output()
        .expect("running etcdctl check perf");
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text
        .lines()
        .filter(|l| l.starts_with("PASS") || l.starts_with("FAIL"))
    {
        println!("etcdctl check perf --load={load}: {line}");
    }
    if !out.stderr.is_empty() {
        println!(
            "etcdctl check perf (stderr): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
}

/// Runs every phase against a fresh server with the `storage` flags.
/// A kind whose objects the bench creates and lists.
struct Subject {
    /// Plural, as printed.
    label: &'static str,
    /// The collection's path.
    path: &'static str,
    /// The body of object `name`.
    body: fn(&str) -> Vec<u8>,
}

const DEPLOYMENTS: Subject = Subject {
    label: "Deployments",
    path: "/apis/apps/v1/namespaces/bench/deployments",
    body: deployment,
};

const WIDGETS: Subject = Subject {
    label: "Widgets (custom resource)",
    path: "/apis/bench.meridian.dev/v1/namespaces/bench/widgets",
    body: widget,
};

/// A custom resource with the same fields as [`deployment`]'s.
fn widget(name: &str) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&deployment(name)).unwrap();
    v["apiVersion"] = json!("bench.meridian.dev/v1");
    v["kind"] = json!("Widget");
    serde_json::to_vec(&v).unwrap()
}

/// The Widget CRD: a structural schema of the Deployment fields the bench writes, so
/// validation, pruning and defaulting walk as much as for a Deployment.
fn widget_crd() -> Value {
    let string = json!({"type": "string"});
    let labels = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let container = json!({"type": "object", "required": ["name", "image"], "properties": {
        "name": string, "image": string,
        "ports": {"type": "array", "items": {"type": "object", "properties": {
            "containerPort": {"type": "integer", "minimum": 1, "maximum": 65535}}}},
        "resources": {"type": "object", "properties": {"requests": {"type": "object",
            "additionalProperties": {"x-kubernetes-int-or-string": true}}}},
        "env": {"type": "array", "items": {"type": "object", "required": ["name"],
            "properties": {"name": string, "value": string}}}}});
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.bench.meridian.dev"},
        "spec": {"group": "bench.meridian.dev", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "minimum": 0},
                        "selector": {"type": "object", "properties": {"matchLabels": labels}},
                        "template": {"type": "object", "properties": {
                            "metadata": {"type": "object", "properties": {"labels": labels}},
                            "spec": {"type": "object", "properties": {
                                "containers": {"type": "array", "items": container}}}}}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

/// Polls `path` until it is served (a new CRD's resource answers 200 once established).
async fn wait_served(t: &Target, s: &mut Sender, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _) = send(s, t.request("GET", path, vec![], "application/json")).await;
        if code == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} not served after 30 s: {code}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates and LIST figures of one kind.
#[derive(Default)]
struct KindFigures {
    creates_per_sec: f64,
    create_p50: f64,
    create_p99: f64,
    list_median: f64,
    list_max: f64,
}

/// Creates `objects` objects of `kind` with 64 concurrent clients (8 HTTP/2 connections),
/// then LISTs them five times; prints and returns the figures.
async fn creates_and_lists(
    t: &Arc<Target>,
    s: &mut Sender,
    pid: u32,
    kind: &'static Subject,
    objects: usize,
) -> KindFigures {
    let clients = 64;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let t = t.clone();
        let per = objects / clients + usize::from(c < objects % clients);
        tasks.push(tokio::spawn(async move {
            let mut s = t.connect().await;
            let mut lat = Vec::with_capacity(per);
            for i in 0..per {
                let t0 = Instant::now();
                let req = t.request(
                    "POST",
                    kind.path,
                    (kind.body)(&format!("d-{c}-{i}")),
                    "application/json",
                );
                let (code, body) = send(&mut s, req).await;
                assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
                lat.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            lat
        }));
    }
    let mut lat = gather(tasks).await;
    let secs = started.elapsed().as_secs_f64();
    let mut f = KindFigures {
        creates_per_sec: objects as f64 / secs,
        create_p50: percentile(&mut lat, 0.5),
        create_p99: percentile(&mut lat, 0.99),
        ..KindFigures::default()
    };
    println!(
        "creates: {objects} {}, 64 clients: {:.0}/s; latency median {:.2} ms, p99 {:.2} ms",
        kind.label, f.creates_per_sec, f.create_p50, f.create_p99
    );
    println!(
        "server RSS with {objects} {} stored: {:.0} MB",
        kind.label,
        rss_mb(pid)
    );
    let mut list_times = Vec::new();
    let mut size = 0;
    for _ in 0..5 {
        let t0 = Instant::now();
        let (code, body) = send(s, t.request("GET", kind.path, vec![], "application/json")).await;
        assert_eq!(code, 200);
        list_times.push(t0.elapsed().as_secs_f64() * 1e3);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["items"].as_array().unwrap().len(), objects);
        size = body.len();
    }
    f.list_median = percentile(&mut list_times.clone(), 0.5);
    f.list_max = percentile(&mut list_times, 1.0);
    println!(
        "LIST {objects} {} ({:.0} MB): median {:.0} ms, max {:.0} ms (received; client JSON parse excluded)",
        kind.label,
        size as f64 / 1e6,
        f.list_median,
        f.list_max
    );
    f
}

async fn run(storage: &[String], objects: usize, event_rate: usize, custom: bool) -> Figures {
    let mut figures = Figures::default();
    let dir = tempfile::tempdir().unwrap();
    let (mut server, authority) = start_server(dir.path(), storage);
    let pid = server.pid();
    let ca = std::fs::read_to_string(dir.path().join("pki/ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let t = Arc::new(Target {
        authority,
        token: std::fs::read_to_string(dir.path().join("pki/admin.token"))
            .unwrap()
            .trim()
            .to_string(),
        tls: Arc::new(tls),
    });
    let mut s = t.connect().await;
    for ns in ["bench", "lat", "watch"] {
        let body = serde_json::to_vec(&json!({"metadata": {"name": ns}})).unwrap();
        assert_eq!(
            send(
                &mut s,
                t.request("POST", "/api/v1/namespaces", body, "application/json")
            )
            .await
            .0,
            201
        );
    }

    // 1–2. Durable creates/s with 64 concurrent clients, then LISTs of them all.
    let deployments = creates_and_lists(&t, &mut s, pid, &DEPLOYMENTS, objects).await;
    figures.creates_per_sec = deployments.creates_per_sec;
    figures.create_p50 = deployments.create_p50;
    figures.create_p99 = deployments.create_p99;
    figures.list_median = deployments.list_median;
    figures.list_max = deployments.list_max;
    // The same for a custom resource of the same size, served from its CRD's schema.
    if custom {
        let (code, body) = send(
            &mut s,
            t.request(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                serde_json::to_vec(&widget_crd()).unwrap(),
                "application/json",
            ),
        )
        .await;
        assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
        wait_served(&t, &mut s, WIDGETS.path).await;
        figures.custom = Some(creates_and_lists(&t, &mut s, pid, &WIDGETS, objects).await);
    }
    println!("server RSS after LISTs: {:.0} MB", rss_mb(pid));

    // 3. Create latency at a fixed 1,000 writes/s (open loop, 5 s).
    let rate = 1000usize;
    let total = rate * 5;
    let conns: Vec<Sender> = futures::future::join_all((0..8).map(|_| t.connect())).await;
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..total {
        let due = start + Duration::from_micros((i * 1_000_000 / rate) as u64);
        tokio::time::sleep_until(due.into()).await;
        let mut s = conns[i % conns.len()].clone();
        let t = t.clone();
        handles.push(tokio::spawn(async move {
            let req = t.request(
                "POST",
                "/apis/apps/v1/namespaces/lat/deployments",
                deployment(&format!("l-{i}")),
                "application/json",
            );
            let (code, _) = send(&mut s, req).await;
            assert_eq!(code, 201);
            // Latency from the scheduled start, so queueing counts.
            due.elapsed().as_secs_f64() * 1e3
        }));
    }
    let mut lat: Vec<f64> = futures::future::join_all(handles)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    figures.paced_p50 = percentile(&mut lat, 0.5);
    figures.paced_p99 = percentile(&mut lat, 0.99);
    println!(
        "create latency at {rate}/s: median {:.2} ms, p99 {:.2} ms",
        figures.paced_p50, figures.paced_p99
    );

    // 4. Watch fan-out: 1,000 watchers, 10,000 events; delay from write to delivery.
    let watchers = 1000;
    let events = 10_000;
    let body = serde_json::to_vec(&json!({"metadata": {"name": "seed"}})).unwrap();
    let (_, b) = send(
        &mut s,
        t.request(
            "POST",
            "/api/v1/namespaces/watch/configmaps",
            body,
            "application/json",
        ),
    )
    .await;
    let rv = serde_json::from_slice::<Value>(&b).unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let wconns: Vec<Sender> = futures::future::join_all((0..10).map(|_| t.connect())).await;
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(watchers);
    let mut wtasks = Vec::new();
    for w in 0..watchers {
        let mut s = wconns[w % wconns.len()].clone();
        let t = t.clone();
        let rv = rv.clone();
        let ready = ready_tx.clone();
        wtasks.push(tokio::spawn(async move {
            let req = t.request(
                "GET",
                &format!("/api/v1/namespaces/watch/configmaps?watch=true&resourceVersion={rv}"),
                vec![],
                "application/json",
            );
            s.ready().await.unwrap();
            let resp = s.send_request(req).await.unwrap();
            ready.send(()).await.unwrap();
            let mut body = resp.into_body();
            let mut buf = Vec::new();
            let mut delays = Vec::with_capacity(events);
            while delays.len() < events {
                let Some(frame) = body.frame().await else {
                    break;
                };
                let Ok(data) = frame.unwrap().into_data() else {
                    continue;
                };
                buf.extend_from_slice(&data);
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as f64;
                while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=pos).collect();
                    // Find the send time without a full parse: the client must not be the bottleneck.
                    if let Some(sent) = send_time(&line) {
                        delays.push((now - sent) / 1e6);
                    }
                }
            }
            delays
        }));
    }
    for _ in 0..watchers {
        ready_rx.recv().await.unwrap();
    }
    let writer_conns: Vec<Sender> = futures::future::join_all((0..4).map(|_| t.connect())).await;
    let mut writes = Vec::new();
    let wstart = Instant::now();
    for wtr in 0..16 {
        let mut s = writer_conns[wtr % writer_conns.len()].clone();
        let t = t.clone();
        writes.push(tokio::spawn(async move {
            for i in 0..events / 16 {
                // Each writer paces itself so the total is `event_rate` events/s.
                let due = wstart + Duration::from_micros(((i * 16 + wtr) * 1_000_000 / event_rate) as u64);
                tokio::time::sleep_until(due.into()).await;
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
                let body = serde_json::to_vec(&json!({"metadata": {"name": format!("e-{wtr}-{i}")}, "data": {"t": now.to_string()}})).unwrap();
                let (code, _) = send(&mut s, t.request("POST", "/api/v1/namespaces/watch/configmaps", body, "application/json")).await;
                assert_eq!(code, 201);
            }
        }));
    }
    for w in writes {
        w.await.unwrap();
    }
    let mut delays = Vec::new();
    let mut complete = 0;
    for w in wtasks {
        let d = w.await.unwrap();
        if d.len() == events {
            complete += 1;
        }
        delays.extend(d);
    }
    figures.watch_p50 = percentile(&mut delays, 0.5);
    figures.watch_p99 = percentile(&mut delays, 0.99);
    println!(
        "watch fan-out: {watchers} watchers x {events} events at {event_rate}/s, {complete} watchers got all; delivery delay median {:.1} ms, p99 {:.1} ms",
        figures.watch_p50, figures.watch_p99
    );
    figures.rss_mb = rss_mb(pid);
    println!("server RSS at the end: {:.0} MB", figures.rss_mb);
    server.kill();
    figures
}

//! Memory benchmark of the federation API server holding a federation's worth of objects
//! (release mode, real binary, embedded store, HTTPS over HTTP/2): the population a
//! control plane with N federated Deployments over M clusters keeps, written the way the
//! scheduler and controllers write it, with their watches open. Prints the server's RSS
//! after each phase and the write rate of the population phase.
//!
//! Per Deployment: the Deployment (finalizer added by merge patch, status written), its
//! Placement (spec.destClusters with two destinations, status.clusters per destination)
//! and two Events. Around them: M Clusters whose status is rewritten every few seconds,
//! M Secrets, M/2 PropagationPolicies, and two watchers per kind (scheduler, controllers).
//!
//! ```text
//! cargo build --release -p federation-apiserver --bin federation-apiserver --example fleet_memory_bench
//! target/release/examples/fleet_memory_bench [--deployments 10000] [--clusters 100] [--settle-secs 20]
//! MALLOC_ARENA_MAX=2 target/release/examples/fleet_memory_bench   # the child inherits the environment
//! ```

// A bench aborts on the first failure: unwrapping is its error handling.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use meridian_e2e::{LISTENING_LINE, Proc, start_federation_apiserver};
use serde_json::{Value, json};

type Sender = http2::SendRequest<Full<Bytes>>;

const NS: &str = "bench";
const FED: &str = "/apis/federation.meridian.dev/v1alpha1";
/// Requests in flight while populating.
const CONCURRENCY: usize = 64;

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
        body: &Value,
        ct: &str,
    ) -> http::Request<Full<Bytes>> {
        let body = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(body).unwrap()
        };
        http::Request::builder()
            .method(method)
            .uri(format!("https://{}{path}", self.authority))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", ct)
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    }
}

/// Sends one request and insists on a 2xx answer.
async fn call(s: &mut Sender, t: &Target, method: &str, path: &str, body: Value) -> Value {
    let ct = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    s.ready().await.expect("ready");
    let resp = s
        .send_request(t.request(method, path, &body, ct))
        .await
        .expect("send");
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(
        (200..300).contains(&code),
        "{method} {path}: {code} {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).unwrap_or(Value::Null)
}

fn rss_mb(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The release federation-apiserver beside this example (output in `<dir>/server.log`)
/// and the `host:port` it listens on.
fn start_server(dir: &std::path::Path) -> (Proc, String) {
    let server =
        start_federation_apiserver(dir, &[], LISTENING_LINE).unwrap_or_else(|e| panic!("{e}"));
    let url = server.ready_value().unwrap_or_default().to_string();
    (server, url)
}

fn now_text() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn cluster(i: usize) -> Value {
    json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": format!("c-{i}"), "labels": {"region": format!("r-{}", i % 5), "zone": format!("z-{}", i % 10)}},
        "spec": {"apiEndpoint": format!("https://10.0.{}.{}:6443", i / 250, i % 250),
            "secretRef": {"namespace": "meridian-system", "name": format!("c-{i}-credentials")},
            "region": format!("r-{}", i % 5), "zone": format!("z-{}", i % 10)}
    })
}

fn cluster_status(tick: u64) -> Value {
    let t = now_text();
    json!({"status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "/healthz responded with ok", "lastProbeTime": t, "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Offline", "status": "False", "reason": "ClusterReachable", "message": "cluster is reachable", "lastProbeTime": t, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "kubernetesVersion": "v1.31.0",
        "apiEnablements": [
            {"groupVersion": "apps/v1", "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"]},
            {"groupVersion": "v1", "resources": ["configmaps", "endpoints", "events", "namespaces", "pods", "secrets", "services"]}],
        "nodes": {"total": 2, "ready": 2},
        "resourceSummary": {
            "allocatable": {"cpu": "1024", "memory": "4Ti", "pods": "2200"},
            "allocated": {"cpu": format!("{}m", 100 * (tick % 400)), "memory": format!("{}Mi", 128 * (tick % 400)), "pods": format!("{}", tick % 400)}}
    }})
}

fn secret(i: usize) -> Value {
    // About the size of a kubeconfig with embedded certificate data.
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": format!("c-{i}-credentials"), "namespace": "meridian-system"},
        "stringData": {"kubeconfig": "x".repeat(2400), "token": "y".repeat(64)}
    })
}

fn policy(i: usize, clusters: usize) -> Value {
    let a = (2 * i) % clusters;
    json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": format!("pair-{i}"), "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "labelSelector": {"matchLabels": {"pair": format!("p-{i}")}}}],
            "placement": {"clusterAffinity": {"clusterNames": [format!("c-{a}"), format!("c-{}", a + 1)]}}
        }
    })
}

fn deployment(name: &str, pair: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name, "pair": format!("p-{pair}")}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1.27",
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}
    })
}

fn deployment_status() -> Value {
    let t = now_text();
    json!({"status": {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability.", "lastUpdateTime": t, "lastTransitionTime": t},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": "federated copies are up to date", "lastUpdateTime": t, "lastTransitionTime": t}]}})
}

fn placement(name: &str, uid: &str, pair: usize, clusters: usize) -> Value {
    let a = (2 * pair) % clusters;
    json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": format!("{name}-deployment"), "namespace": NS,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid},
            "destClusters": [{"cluster": format!("c-{a}"), "replicas": 1}, {"cluster": format!("c-{}", a + 1), "replicas": 1}]}
    })
}

fn placement_status(pair: usize, clusters: usize) -> Value {
    let a = (2 * pair) % clusters;
    let t = now_text();
    let per = |c: usize| json!({"cluster": format!("c-{c}"), "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1, "lastSyncTime": t});
    json!({"status": {
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": format!("divided 2 replicas over c-{a}, c-{}", a + 1), "lastTransitionTime": t}],
        "clusters": [per(a), per(a + 1)]}})
}

fn event(name: &str, uid: &str, n: usize, cluster: usize) -> Value {
    let t = now_text();
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{name}.{n:x}"), "namespace": NS},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS, "name": name, "uid": uid},
        "reason": "Propagated", "message": format!("Deployment {NS}/{name} written to cluster c-{cluster}"),
        "source": {"component": "fed-controllers"}, "type": "Normal", "count": 1,
        "firstTimestamp": t, "lastTimestamp": t, "reportingComponent": "fed-controllers"
    })
}

/// Drains one watch stream until `stop`, counting bytes received.
async fn drain_watch(t: Arc<Target>, path: String, bytes: Arc<AtomicU64>) {
    let mut s = t.connect().await;
    s.ready().await.unwrap();
    let resp = s
        .send_request(t.request("GET", &path, &Value::Null, "application/json"))
        .await
        .unwrap();
    let mut body = resp.into_body();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(d) = frame.into_data() {
            bytes.fetch_add(d.len() as u64, Ordering::Relaxed);
        }
    }
}

#[tokio::main]
async fn main() {
    let arg = |name: &str, default: usize| -> usize {
        std::env::args()
            .skip_while(|a| a != name)
            .nth(1)
            .map(|v| v.parse().unwrap())
            .unwrap_or(default)
    };
    let deployments = arg("--deployments", 10_000);
    let clusters = arg("--clusters", 100).max(2) / 2 * 2;
    let settle = Duration::from_secs(arg("--settle-secs", 20) as u64);
    let policies = clusters / 2;
    let dir = tempfile::tempdir().unwrap();
    let (mut server, authority) = start_server(dir.path());
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
    println!(
        "population: {deployments} Deployments, {clusters} Clusters, {policies} PropagationPolicies (MALLOC_ARENA_MAX={})",
        std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| "unset".into())
    );
    println!("server RSS at start: {:.0} MB", rss_mb(pid));

    let mut s = t.connect().await;
    for ns in [NS, "meridian-system"] {
        call(
            &mut s,
            &t,
            "POST",
            "/api/v1/namespaces",
            json!({"metadata": {"name": ns}}),
        )
        .await;
    }
    for i in 0..clusters {
        call(
            &mut s,
            &t,
            "POST",
            "/api/v1/namespaces/meridian-system/secrets",
            secret(i),
        )
        .await;
        call(&mut s, &t, "POST", &format!("{FED}/clusters"), cluster(i)).await;
        call(
            &mut s,
            &t,
            "PATCH",
            &format!("{FED}/clusters/c-{i}/status"),
            cluster_status(0),
        )
        .await;
    }
    for i in 0..policies {
        call(
            &mut s,
            &t,
            "POST",
            &format!("{FED}/namespaces/{NS}/propagationpolicies"),
            policy(i, clusters),
        )
        .await;
    }

    // Two watchers per kind, as the scheduler and the controllers hold them.
    let received = Arc::new(AtomicU64::new(0));
    for path in [
        "/apis/apps/v1/deployments?watch=true&allowWatchBookmarks=true".to_string(),
        format!("{FED}/placements?watch=true&allowWatchBookmarks=true"),
        format!("{FED}/clusters?watch=true&allowWatchBookmarks=true"),
        format!("{FED}/propagationpolicies?watch=true&allowWatchBookmarks=true"),
        "/api/v1/events?watch=true&allowWatchBookmarks=true".to_string(),
    ] {
        for _ in 0..2 {
            tokio::spawn(drain_watch(t.clone(), path.clone(), received.clone()));
        }
    }

    // Cluster status every 5 s per cluster, spread evenly, for the rest of the run.
    let stop = Arc::new(AtomicBool::new(false));
    let heartbeats = {
        let (t, stop) = (t.clone(), stop.clone());
        tokio::spawn(async move {
            let mut s = t.connect().await;
            let period = Duration::from_secs(5) / clusters as u32;
            let mut tick = tokio::time::interval(period);
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let i = n as usize % clusters;
                call(
                    &mut s,
                    &t,
                    "PATCH",
                    &format!("{FED}/clusters/c-{i}/status"),
                    cluster_status(n / clusters as u64),
                )
                .await;
                n += 1;
            }
        })
    };

    let started = Instant::now();
    let writes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..CONCURRENCY {
        let (t, writes) = (t.clone(), writes.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = t.connect().await;
            for i in (c..deployments).step_by(CONCURRENCY) {
                let name = format!("web-{i}");
                let pair = i % policies;
                let created = call(
                    &mut s,
                    &t,
                    "POST",
                    &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
                    deployment(&name, pair),
                )
                .await;
                let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
                let dpath = format!("/apis/apps/v1/namespaces/{NS}/deployments/{name}");
                call(
                    &mut s,
                    &t,
                    "PATCH",
                    &dpath,
                    json!({"metadata": {"finalizers": ["federation.meridian.dev/cleanup"]}}),
                )
                .await;
                call(
                    &mut s,
                    &t,
                    "POST",
                    &format!("{FED}/namespaces/{NS}/placements"),
                    placement(&name, &uid, pair, clusters),
                )
                .await;
                let ppath = format!("{FED}/namespaces/{NS}/placements/{name}-deployment/status");
                call(
                    &mut s,
                    &t,
                    "PATCH",
                    &ppath,
                    placement_status(pair, clusters),
                )
                .await;
                for n in 0..2 {
                    let cl = (2 * pair) % clusters + n;
                    call(
                        &mut s,
                        &t,
                        "POST",
                        &format!("/api/v1/namespaces/{NS}/events"),
                        event(&name, &uid, n, cl),
                    )
                    .await;
                }
                call(
                    &mut s,
                    &t,
                    "PATCH",
                    &format!("{dpath}/status"),
                    deployment_status(),
                )
                .await;
                writes.fetch_add(7, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let total = writes.load(Ordering::Relaxed);
    println!(
        "populated in {secs:.1} s: {total} writes, {:.0} writes/s with {CONCURRENCY} clients",
        total as f64 / secs
    );
    println!("server RSS populated: {:.0} MB", rss_mb(pid));
    tokio::time::sleep(settle).await;
    println!(
        "server RSS after {} s of cluster heartbeats: {:.0} MB",
        settle.as_secs(),
        rss_mb(pid)
    );

    // A client re-listing everything, as a restarted controller does.
    let t0 = Instant::now();
    for path in [
        format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        format!("{FED}/namespaces/{NS}/placements"),
        format!("/api/v1/namespaces/{NS}/events"),
    ] {
        let v = call(&mut s, &t, "GET", &path, Value::Null).await;
        assert!(!v["items"].as_array().unwrap().is_empty(), "{path}");
    }
    println!(
        "LIST of every Deployment, Placement and Event: {:.0} ms; server RSS after: {:.0} MB",
        t0.elapsed().as_secs_f64() * 1e3,
        rss_mb(pid)
    );
    println!(
        "watch bytes received by the {} watchers: {:.0} MB",
        10,
        received.load(Ordering::Relaxed) as f64 / 1e6
    );
    stop.store(true, Ordering::Relaxed);
    let _ = heartbeats.await;
    server.kill();
}

//! Real traffic on a loopback pod network with `--serve-pods`, in process: pods answer HTTP
//! on their own `127.x` addresses, stop with their pods and with cluster faults, and the
//! endpoint slices list exactly the answering pods. Real sockets on loopback.
//!
//! Tests of this crate run in parallel processes (and other checkouts' tests beside them) that
//! may hand out the same pod addresses, so every test takes its container ports from the OS.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cluster_sim::cluster::SimCluster;
use cluster_sim::controllers::{FailMode, POD_HEADER, REQUEST_HEADER};
use cluster_sim::faults::Fault;
use cluster_sim::fleet::FleetFile;
use cluster_sim::runtime::Fleet;
use http_body_util::{BodyExt, Full};
use meridian_apiserver::engine::{PatchType, Target, WriteOptions};
use meridian_apiserver::registry::ResourceDef;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(60);

async fn loopback_fleet(names: &[&str]) -> Fleet {
    let mut yaml = String::from("podNetwork: loopback\nservePods: true\nclusters:\n");
    for (i, n) in names.iter().enumerate() {
        yaml.push_str(&format!(
            "- name: {n}\n  nodes: 2\n  readyDelay: 0s\n  lbPool: [127.0.1.{}]\n",
            i + 1
        ));
    }
    let f: FleetFile = serde_yaml_ng::from_str(&yaml).unwrap();
    Fleet::start(&f, "127.0.0.1".parse().unwrap())
        .await
        .unwrap()
}

fn list(c: &SimCluster, def: &ResourceDef) -> Vec<Value> {
    c.engine
        .cache
        .resource(def)
        .list(
            &def.namespace_prefix(Some("default")),
            None,
            None,
            0,
            |_| true,
        )
        .items
        .iter()
        .map(|o| o.value())
        .collect()
}

async fn create(c: &SimCluster, def: &ResourceDef, obj: Value) {
    c.engine
        .create(def, "default", obj, &WriteOptions::default())
        .await
        .unwrap();
}

/// Waits on the cluster's cache until `check` gives a value.
async fn until<T>(c: &SimCluster, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        let rev = c.engine.cache.revision();
        c.engine
            .cache
            .wait_for(rev + 1, Duration::from_millis(100))
            .await;
    }
}

/// Waits until an asynchronous socket condition holds (listeners follow the API).
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn deployment(name: &str, replicas: u32, port: u16) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "main", "image": "echo",
                    "ports": [{"name": "http", "containerPort": port}],
                }]},
            },
        },
    })
}

/// The number of the app's pods, and `(name, ip)` of those that are Ready.
fn app_pods(c: &SimCluster, app: &str) -> (usize, Vec<(String, Ipv4Addr)>) {
    let pods: Vec<Value> = list(c, &c.sim.kinds.pods)
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .collect();
    let ready = pods
        .iter()
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .filter_map(|p| {
            Some((
                p["metadata"]["name"].as_str()?.to_string(),
                p["status"]["podIP"].as_str()?.parse().ok()?,
            ))
        })
        .collect();
    (pods.len(), ready)
}

/// The app's pods once there are exactly `n`, all Ready.
fn ready_pods(c: &SimCluster, app: &str, n: usize) -> Option<Vec<(String, Ipv4Addr)>> {
    let (total, ready) = app_pods(c, app);
    (total == n && ready.len() == n).then_some(ready)
}

/// Ready addresses of the Service's EndpointSlices.
fn slice_addresses(c: &SimCluster, svc: &str) -> BTreeSet<Ipv4Addr> {
    list(c, &c.sim.kinds.endpoint_slices)
        .iter()
        .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == svc)
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] == true)
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str()?.parse().ok())
        .collect()
}

struct Answer {
    status: u16,
    pod: String,
    request: String,
    cluster: String,
    body: String,
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> std::io::Result<Sender> {
    let tcp = TcpStream::connect(addr).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn send(sender: &mut Sender, method: &str, path: &str) -> Result<Answer, hyper::Error> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "pod")
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap();
    // The previous exchange must finish before the connection takes the next request.
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let h = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (status, pod, request, cluster) = (
        resp.status().as_u16(),
        h(POD_HEADER),
        h(REQUEST_HEADER),
        h("x-sim-cluster"),
    );
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Answer {
        status,
        pod,
        request,
        cluster,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

async fn get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    let mut s = connect(addr).await?;
    send(&mut s, "GET", path)
        .await
        .map_err(std::io::Error::other)
}

async fn refused(addr: SocketAddr) -> bool {
    matches!(TcpStream::connect(addr).await, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_serve_follow_scaling_and_faults() {
    let [port] = support::free_ports();
    let fleet = loopback_fleet(&["east", "west"]).await;
    let (east, west) = (fleet.clusters[0].clone(), fleet.clusters[1].clone());
    for c in [&east, &west] {
        create(c, &c.sim.kinds.deployments, deployment("web", 3, port)).await;
        create(
            c,
            &c.sim.kinds.services,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                   "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
        )
        .await;
    }
    let pods = until(&east, "3 ready pods", || ready_pods(&east, "web", 3)).await;
    let west_pods = until(&west, "3 ready pods", || ready_pods(&west, "web", 3)).await;

    // Addresses: per cluster and node, unique across the fleet.
    for (_, ip) in &pods {
        assert_eq!(ip.octets()[..2], [127, 10], "{ip}");
    }
    for (_, ip) in &west_pods {
        assert_eq!(ip.octets()[..2], [127, 11], "{ip}");
    }

    // A Ready pod answers at once, with its own name, over one kept-alive connection.
    for (name, ip) in &pods {
        let mut s = connect(SocketAddr::new((*ip).into(), port)).await.unwrap();
        for (method, path) in [("GET", "/hello?x=1"), ("POST", "/retry/me")] {
            let a = send(&mut s, method, path).await.unwrap();
            assert_eq!(a.status, 200);
            assert_eq!(a.cluster, "east");
            assert_eq!(&a.pod, name);
            assert_eq!(a.request, format!("{method} {path}"));
            assert_eq!(a.body, format!("east default/{name}\n"));
        }
    }
    let a = get(SocketAddr::new(west_pods[0].1.into(), port), "/")
        .await
        .unwrap();
    assert_eq!(
        (a.cluster.as_str(), a.pod.as_str()),
        ("west", west_pods[0].0.as_str())
    );

    // The Service's slices list exactly the answering pods.
    let ips: BTreeSet<Ipv4Addr> = pods.iter().map(|(_, ip)| *ip).collect();
    until(&east, "slices with every pod", || {
        (slice_addresses(&east, "web") == ips).then_some(())
    })
    .await;

    // Scale down: the removed pods stop listening, the slice follows.
    let def = east.sim.kinds.deployments.clone();
    east.engine
        .patch(
            &def,
            "default",
            "web",
            PatchType::Merge,
            &json!({"spec": {"replicas": 1}}),
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let left = until(&east, "1 pod left", || ready_pods(&east, "web", 1)).await;
    let (kept_name, kept_ip) = left[0].clone();
    for (_, ip) in pods.iter().filter(|(n, _)| *n != kept_name) {
        let addr = SocketAddr::new((*ip).into(), port);
        eventually("a removed pod to stop listening", || refused(addr)).await;
    }
    until(&east, "slices with the kept pod only", || {
        (slice_addresses(&east, "web") == BTreeSet::from([kept_ip])).then_some(())
    })
    .await;
    let kept = SocketAddr::new(kept_ip.into(), port);
    assert_eq!(get(kept, "/").await.unwrap().pod, kept_name);

    // Down: refused, open connections dropped; up: answering again.
    let mut open = connect(kept).await.unwrap();
    send(&mut open, "GET", "/before").await.unwrap();
    east.faults.set(Fault::Down);
    eventually("refused while down", || refused(kept)).await;
    assert!(
        send(&mut open, "GET", "/after").await.is_err(),
        "a connection outlived the cluster going down"
    );
    // The other cluster never noticed.
    get(SocketAddr::new(west_pods[0].1.into(), port), "/")
        .await
        .unwrap();
    east.faults.set(Fault::None);
    eventually("answering after the fault clears", || async {
        get(kept, "/").await.is_ok_and(|a| a.status == 200)
    })
    .await;
    east.faults.set(Fault::Partitioned);
    eventually("refused while partitioned", || refused(kept)).await;
    east.faults.set(Fault::None);
    eventually("answering after the partition", || async {
        get(kept, "/").await.is_ok()
    })
    .await;

    // Per-pod failures.
    let rt = east.sim.containers.clone().expect("serving pods");
    let key = format!("default/{kept_name}");
    rt.set_failure(&key, Some(FailMode::Status(503)));
    eventually("503s", || async {
        get(kept, "/").await.is_ok_and(|a| a.status == 503)
    })
    .await;
    rt.set_failure(&key, Some(FailMode::Refuse));
    eventually("refusing", || refused(kept)).await;
    rt.set_failure(&key, None);
    eventually("healthy again", || async {
        get(kept, "/").await.is_ok_and(|a| a.status == 200)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_pod_is_already_listening() {
    let [port] = support::free_ports();
    let fleet = loopback_fleet(&["solo"]).await;
    let c: Arc<SimCluster> = fleet.clusters[0].clone();
    create(&c, &c.sim.kinds.deployments, deployment("api", 4, port)).await;
    // Checked in the same instant the cache first shows each pod Ready: no waiting allowed.
    let rt = c.sim.containers.clone().expect("serving pods");
    let mut seen = BTreeSet::new();
    until(&c, "every pod seen Ready", || {
        for (name, ip) in app_pods(&c, "api").1 {
            if seen.insert(name.clone()) {
                let listening = rt.listening(&format!("default/{name}"));
                assert_eq!(
                    listening,
                    vec![SocketAddr::new(ip.into(), port)],
                    "pod {name} is Ready but not listening"
                );
            }
        }
        (seen.len() == 4).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_answer_tls_websocket_h2c_streams_and_udp() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let [http, https, dns] = support::free_ports();
    let fleet = loopback_fleet(&["multi"]).await;
    let c: Arc<SimCluster> = fleet.clusters[0].clone();
    let mut d = deployment("multi", 1, http);
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([
        {"name": "http", "containerPort": http},
        {"name": "https", "containerPort": https},
        {"name": "dns", "containerPort": dns, "protocol": "UDP"},
    ]);
    create(&c, &c.sim.kinds.deployments, d).await;
    let pods = until(&c, "the pod Ready", || ready_pods(&c, "multi", 1)).await;
    let (pod, ip) = pods[0].clone();

    // TLS (ALPN h2) with the cluster's self-signed certificate.
    let tls = meridian_e2e::wire::any_cert_tls_config(&[b"h2"]);
    let tcp = TcpStream::connect(SocketAddr::new(ip.into(), https))
        .await
        .unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(
            rustls::pki_types::ServerName::try_from("web.default.svc.cluster.local").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let resp = h2
        .send_request(
            http::Request::get("https://web/secure")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-sim-tls"], "true");
    assert_eq!(resp.headers()[POD_HEADER], pod.as_str());

    // h2c with prior knowledge on the plain port, and a long streamed answer.
    let tcp = TcpStream::connect(SocketAddr::new(ip.into(), http))
        .await
        .unwrap();
    let (mut h2c, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let resp = h2c
        .send_request(
            http::Request::get("http://web/stream?n=3&ms=10")
                .body(Full::new(Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let lines: Vec<String> = String::from_utf8_lossy(&body)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        (0..3)
            .map(|i| format!("multi default/{pod} {i}"))
            .collect::<Vec<_>>()
    );

    // WebSocket: the handshake answer, a greeting naming the pod, then an echo.
    let mut ws = TcpStream::connect(SocketAddr::new(ip.into(), http))
        .await
        .unwrap();
    ws.write_all(b"GET /ws HTTP/1.1\r\nhost: web\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n").await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(ws.read_u8().await.unwrap());
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    let mut frame = [0u8; 2];
    ws.read_exact(&mut frame).await.unwrap();
    let mut greeting = vec![0u8; usize::from(frame[1])];
    ws.read_exact(&mut greeting).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&greeting),
        format!("multi default/{pod}")
    );
    let mask = [9u8, 8, 7, 6];
    let mut msg = vec![0x81, 0x80 | 4];
    msg.extend_from_slice(&mask);
    msg.extend(b"ping".iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    ws.write_all(&msg).await.unwrap();
    let mut echo = [0u8; 6];
    ws.read_exact(&mut echo).await.unwrap();
    assert_eq!(&echo, b"\x81\x04ping");

    // UDP: the datagram back behind a line naming the pod.
    let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    udp.send_to(b"hello", SocketAddr::new(ip.into(), dns))
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), udp.recv_from(&mut buf))
        .await
        .expect("a UDP answer")
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&buf[..n]),
        format!("multi default/{pod}\nhello")
    );
}

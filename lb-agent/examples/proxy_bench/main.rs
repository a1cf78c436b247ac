//! Reverse-proxy benchmark: the same backend and load generator measured directly, through
//! lb-agent and through nginx — HTTP/1.1, then TLS passed through by SNI (nginx `stream` with
//! `ssl_preread`) and WebSocket message relay ([`streams`]) — plus a failover figure with
//! two agents.
//!
//! ```text
//! cargo build --release -p lb-agent --bin lb-agent --example proxy_bench
//! target/release/examples/proxy_bench [--conns 64] [--secs 5] [--slices 5] [--streams-only]
//! ```
//! The proxy under test runs on core 1 (`taskset -c 1`; lb-agent with `--workers 1`,
//! nginx with `worker_processes 1`); this process (backend and load generator, one thread)
//! re-executes itself on core 0. nginx comes from `tools/install-nginx.sh`. The targets
//! take turns in interleaved slices so that other load on the machine falls on each alike;
//! `PROXY_BENCH_AGENT=<path>` measures another lb-agent build.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use meridian_e2e::process::{Proc, Spawn, sibling_binary};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

mod streams;

const HOST: &str = "web.shop.global.test";

/// Connections the backends accepted (a proxy that pools well opens few).
static ACCEPTED: AtomicU64 = AtomicU64::new(0);

fn arg(name: &str, default: u64) -> u64 {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .map(|v| v.parse().expect("number"))
        .unwrap_or(default)
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A minimal keep-alive HTTP/1.1 server answering `body`; stops (closing every connection)
/// when `stop` turns true.
async fn backend(ip: &str, body: &'static str, stop: watch::Receiver<bool>) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.expect("backend bind");
    let addr = listener.local_addr().expect("addr");
    let response: &'static [u8] = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    tokio::spawn(async move {
        let mut st = stop.clone();
        loop {
            let (mut s, _) = tokio::select! {
                r = listener.accept() => match r { Ok(x) => x, Err(_) => continue },
                _ = st.wait_for(|s| *s) => return,
            };
            ACCEPTED.fetch_add(1, Ordering::Relaxed);
            let mut st = stop.clone();
            tokio::spawn(async move {
                let _ = s.set_nodelay(true);
                let mut buf = vec![0u8; 8192];
                let mut len = 0;
                let serve = async {
                    loop {
                        let n = s.read(&mut buf[len..]).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        len += n;
                        // Answer every complete request head (bodies are not used here).
                        while let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
                            s.write_all(response).await?;
                            buf.copy_within(end + 4..len, 0);
                            len -= end + 4;
                        }
                        if len == buf.len() {
                            return Ok(());
                        }
                    }
                };
                tokio::select! {
                    _ = serve => {}
                    _ = st.wait_for(|s| *s) => {}
                }
            });
        }
    });
    addr
}

/// One keep-alive client connection speaking just enough HTTP/1.1.
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
    req: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr, host: &str) -> std::io::Result<Self> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(Self {
            s,
            buf: Vec::with_capacity(8192),
            req: format!("GET / HTTP/1.1\r\nhost: {host}\r\n\r\n").into_bytes(),
        })
    }

    /// Sends one GET and reads the response; returns status and body.
    async fn get(&mut self) -> std::io::Result<(u16, Vec<u8>)> {
        self.s.write_all(&self.req).await?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let status: u16 = head
                    .get(9..12)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| std::io::Error::other("bad status line"))?;
                let cl: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or_else(|| std::io::Error::other("response without content-length"))?;
                while self.buf.len() < end + 4 + cl {
                    let n = self.s.read(&mut chunk).await?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                return Ok((status, self.buf[end + 4..end + 4 + cl].to_vec()));
            }
            let n = self.s.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Closed loop: `conns` connections each sending the next request on the previous answer,
/// counted for `secs` after `warm_up`. Returns (requests, seconds).
async fn peak(addr: SocketAddr, conns: u64, warm_up: Duration, secs: f64) -> (u64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (done, measuring, stop) = (done.clone(), measuring.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(addr, HOST).await.expect("connect");
            while !stop.load(Ordering::Relaxed) {
                let (status, _) = c.get().await.expect("request");
                assert_eq!(status, 200, "closed-loop request failed");
                if measuring.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(warm_up).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let n = done.load(Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    (n, elapsed)
}

/// Open loop at `rate` req/s over `conns` connections (each sends on its own schedule, so a
/// slow answer does not slow the offered load elsewhere). Returns the latencies in µs.
async fn paced(addr: SocketAddr, conns: u64, rate: f64, secs: f64) -> Vec<f64> {
    let per_conn = Duration::from_secs_f64(conns as f64 / rate);
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let end = start + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for i in 0..conns {
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(addr, HOST).await.expect("connect");
            let mut lat = Vec::new();
            let mut next = start + per_conn.mul_f64(i as f64 / conns as f64);
            while next < end {
                tokio::time::sleep_until(next).await;
                // Timed from the actual send: tokio's timer wheel fires up to 1 ms late, which
                // would swamp sub-millisecond differences if timed from `next`.
                let sent = Instant::now();
                let (status, _) = c.get().await.expect("request");
                assert_eq!(status, 200);
                lat.push(sent.elapsed().as_secs_f64() * 1e6);
                next += per_conn;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    all
}

/// (median, p99) of latencies.
fn quantiles(mut all: Vec<f64>) -> (f64, f64) {
    all.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| all[((all.len() as f64 - 1.0) * p) as usize];
    (q(0.5), q(0.99))
}

async fn wait_http(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(mut c) = Client::connect(addr, HOST).await
            && matches!(c.get().await, Ok((200, _)))
        {
            return;
        }
        assert!(Instant::now() < deadline, "{addr} did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn agent_bin() -> std::path::PathBuf {
    // Another build of the agent (to compare two versions under the same load).
    if let Some(bin) = std::env::var_os("PROXY_BENCH_AGENT") {
        return bin.into();
    }
    sibling_binary("lb-agent").unwrap_or_else(|e| panic!("{e}"))
}

/// Static inputs for `me`, with clusters `(name, ip, http, peer)` and local endpoints.
fn inputs_file(
    dir: &std::path::Path,
    me: &str,
    clusters: &[(&str, &str, u16, u16, u32)],
    local: &[SocketAddr],
) -> std::path::PathBuf {
    let cfg = serde_json::json!({
        "config": {
            "dnsZone": "global.test", "cluster": me,
            "clusters": clusters.iter().map(|(n, ip, h, p, _)| serde_json::json!({
                "name": n, "address": ip, "httpPort": h, "peerPort": p, "dnsPort": 0, "ready": true})).collect::<Vec<_>>(),
            "services": [{"namespace": "shop", "name": "web",
                "ports": [{"name": "http", "port": 80, "protocol": "http", "listenPort": free_port("127.0.0.1")}],
                "backends": clusters.iter().map(|(n, _, _, _, b)| (n.to_string(), *b)).collect::<std::collections::BTreeMap<_, _>>()}]
        },
        "endpoints": {"shop/web/http": local}
    });
    let path = dir.join(format!("{me}.json"));
    std::fs::write(&path, cfg.to_string()).expect("write inputs");
    path
}

fn spawn_agent(
    bin: &std::path::Path,
    inputs: &std::path::Path,
    me: &str,
    ip: &str,
    http: u16,
    peer: u16,
    pin: Option<&str>,
) -> Proc {
    // No HTTPS listener of interest here: any free port.
    spawn_agent_with(bin, inputs, me, ip, http, peer, &["--https-port", "0"], pin)
}

#[allow(clippy::too_many_arguments)]
fn spawn_agent_with(
    bin: &std::path::Path,
    inputs: &std::path::Path,
    me: &str,
    ip: &str,
    http: u16,
    peer: u16,
    extra: &[&str],
    pin: Option<&str>,
) -> Proc {
    // Pinned through taskset, which execs the agent: the pid and group stay the agent's.
    let spawn = match pin {
        Some(cpu) => Spawn::new("taskset").args(["-c", cpu]).arg(bin),
        None => Spawn::new(bin),
    };
    spawn
        .args([
            "--cluster",
            me,
            "--bind",
            ip,
            "--metrics-addr",
            "",
            "--workers",
            "1",
        ])
        .args([
            "--http-port",
            &http.to_string(),
            "--peer-port",
            &peer.to_string(),
        ])
        .args(extra)
        .arg("--static-inputs")
        .arg(inputs)
        .env("RUST_LOG", "warn")
        .interruptible()
        .output(inputs.with_extension("log"))
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// nginx from tools/install-nginx.sh, on core 1, with `body` as its configuration after the
/// common top (one worker, in the foreground, files under `dir`); `modules` come first.
fn nginx(dir: &std::path::Path, modules: &str, body: &str) -> Proc {
    let out = Command::new("tools/install-nginx.sh")
        .stderr(Stdio::inherit())
        .output()
        .expect("running tools/install-nginx.sh (run from the repository root)");
    assert!(out.status.success(), "tools/install-nginx.sh failed");
    let nginx = String::from_utf8(out.stdout)
        .expect("path")
        .trim()
        .to_string();
    std::fs::create_dir_all(dir).expect("nginx dir");
    let d = dir.display();
    let conf = format!(
        "{modules}worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n{body}"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).expect("write nginx.conf");
    // SIGTERM when dropped: nginx's master then stops its worker.
    Spawn::new("taskset")
        .args(["-c", "1", &nginx, "-p"])
        .arg(dir)
        .arg("-c")
        .arg(&path)
        .interruptible()
        .output(dir.join("nginx.out"))
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The `http` block's common part: no logging, temp files under `dir`, one keep-alive
/// upstream `be`.
fn http_block(dir: &std::path::Path, backend: SocketAddr) -> String {
    let d = dir.display();
    format!(
        "  access_log off;\n  keepalive_requests 100000000;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
           upstream be {{ server {backend}; keepalive 128; keepalive_requests 100000000; }}\n"
    )
}

fn spawn_nginx(dir: &std::path::Path, port: u16, backend: SocketAddr) -> Proc {
    let common = http_block(dir, backend);
    nginx(
        dir,
        "",
        &format!(
            "http {{\n{common}\
               server {{\n    listen 127.0.0.1:{port} reuseport backlog=4096;\n    location / {{\n\
                   proxy_pass http://be;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n}}\n"
        ),
    )
}

/// nginx passing TLS through by SNI: `stream` with `ssl_preread` and a map of server names.
fn stream_nginx(dir: &std::path::Path, port: u16, backend: SocketAddr) -> Proc {
    // Debian builds the stream module as a dynamic one (libnginx-mod-stream).
    let module = "/usr/lib/nginx/modules/ngx_stream_module.so";
    let conf = format!(
        "stream {{\n  map $ssl_preread_server_name $up {{ {HOST} be; default be; }}\n\
           upstream be {{ server {backend}; }}\n\
           server {{\n    listen 127.0.0.1:{port} reuseport backlog=4096;\n    ssl_preread on;\n    proxy_pass $up;\n  }}\n}}\n"
    );
    nginx(dir, &format!("load_module {module};\n"), &conf)
}

/// nginx relaying WebSocket upgrades (`Upgrade` and `Connection: upgrade` passed on).
fn upgrade_nginx(dir: &std::path::Path, port: u16, backend: SocketAddr) -> Proc {
    let common = http_block(dir, backend);
    nginx(
        dir,
        "",
        &format!(
            "http {{\n{common}\
               server {{\n    listen 127.0.0.1:{port} reuseport backlog=4096;\n    location / {{\n\
                   proxy_pass http://be;\n      proxy_http_version 1.1;\n\
                   proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection \"upgrade\";\n\
                   proxy_read_timeout 3600s;\n    }}\n  }}\n}}\n"
        ),
    )
}

async fn failover(bin: &std::path::Path, dir: &std::path::Path) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (_keep, keep_rx) = watch::channel(false);
    let local_a = backend("127.0.0.1", "a", stop_rx.clone()).await;
    let local_a2 = backend("127.0.0.1", "a", stop_rx).await;
    let local_b = backend("127.0.0.1", "b", keep_rx).await;
    let (ip_a, ip_b) = ("127.0.0.41", "127.0.0.42");
    let (ha, pa, hb, pb) = (
        free_port(ip_a),
        free_port(ip_a),
        free_port(ip_b),
        free_port(ip_b),
    );
    let clusters = [("a", ip_a, ha, pa, 2), ("b", ip_b, hb, pb, 1)];
    let fa = inputs_file(dir, "a", &clusters, &[local_a, local_a2]);
    let fb = inputs_file(dir, "b", &clusters, &[local_b]);
    let _a = spawn_agent(bin, &fa, "a", ip_a, ha, pa, None);
    let _b = spawn_agent(bin, &fb, "b", ip_b, hb, pb, None);
    let addr_a: SocketAddr = format!("{ip_a}:{ha}").parse().expect("addr");
    wait_http(addr_a).await;
    wait_http(format!("{ip_b}:{hb}").parse().expect("addr")).await;
    let failures = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let last_non_remote = Arc::new(AtomicU64::new(0));
    let first_remote = Arc::new(AtomicU64::new(u64::MAX));
    let t0 = Instant::now();
    let killed_at = Arc::new(AtomicU64::new(u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (f, t, l, fr, k, s) = (
            failures.clone(),
            total.clone(),
            last_non_remote.clone(),
            first_remote.clone(),
            killed_at.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(addr_a, HOST).await.expect("connect");
            while !s.load(Ordering::Relaxed) {
                let r = c.get().await;
                let now = t0.elapsed().as_micros() as u64;
                let after_kill = now >= k.load(Ordering::Relaxed);
                if after_kill {
                    t.fetch_add(1, Ordering::Relaxed);
                }
                match r {
                    Ok((200, body)) if body == b"b" => {
                        fr.fetch_min(now, Ordering::Relaxed);
                    }
                    Ok((200, _)) => {
                        if after_kill {
                            l.fetch_max(now, Ordering::Relaxed);
                        }
                    }
                    other => {
                        if after_kill {
                            f.fetch_add(1, Ordering::Relaxed);
                            l.fetch_max(now, Ordering::Relaxed);
                        }
                        if other.is_err() {
                            c = Client::connect(addr_a, HOST).await.expect("reconnect");
                        }
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    killed_at.store(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
    stop_tx.send_replace(true);
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client");
    }
    let k = killed_at.load(Ordering::Relaxed);
    let settle = last_non_remote.load(Ordering::Relaxed).saturating_sub(k);
    let first = first_remote.load(Ordering::Relaxed).saturating_sub(k);
    println!(
        "failover (2 agents, both local backends of a killed, 8 closed-loop clients):\n  \
         first request served by b after {:.1} ms; every request served by b after {:.1} ms\n  \
         {} requests after the kill, {} failed",
        first as f64 / 1000.0,
        settle as f64 / 1000.0,
        total.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed)
    );
}

fn main() {
    if std::env::var_os("PROXY_BENCH_PINNED").is_none() {
        // Backend and load generator share core 0; proxies get core 1.
        let status = Command::new("taskset")
            .args(["-c", "0"])
            .arg(std::env::current_exe().expect("exe"))
            .args(std::env::args().skip(1))
            .env("PROXY_BENCH_PINNED", "1")
            .status()
            .expect("taskset (util-linux) is needed");
        std::process::exit(status.code().unwrap_or(1));
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run());
}

async fn run() {
    let conns = arg("--conns", 64);
    let secs = arg("--secs", 5);
    let slices = arg("--slices", 5).clamp(1, secs.max(1) * 5);
    let bin = agent_bin();
    let dir = std::env::temp_dir().join(format!("proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    if std::env::args().any(|a| a == "--streams-only") {
        streams::run(&bin, &dir, conns, secs, slices).await;
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let (_keep, keep_rx) = watch::channel(false);
    let be = backend("127.0.0.1", "ok", keep_rx).await;

    let agent_ip = "127.0.0.31";
    let (ah, ap) = (free_port(agent_ip), free_port(agent_ip));
    let f = inputs_file(&dir, "a", &[("a", agent_ip, ah, ap, 1)], &[be]);
    let agent = spawn_agent(&bin, &f, "a", agent_ip, ah, ap, Some("1"));
    let agent_addr: SocketAddr = format!("{agent_ip}:{ah}").parse().expect("addr");
    let nginx_port = free_port("127.0.0.1");
    let nginx = spawn_nginx(&dir, nginx_port, be);
    let nginx_addr: SocketAddr = format!("127.0.0.1:{nginx_port}").parse().expect("addr");
    wait_http(agent_addr).await;
    wait_http(nginx_addr).await;

    // Targets take turns in short slices, in a rotating order, so that load from other
    // processes on this machine (which comes and goes over seconds) falls on all of them
    // alike instead of on whichever ran during a busy spell.
    let slice = secs as f64 / slices as f64;
    println!(
        "closed loop, {conns} keep-alive connections, {secs} s per target \
         in {slices} interleaved slices (1 s warm-up, then 0.2 s per slice)"
    );
    let targets = [
        ("direct", be),
        ("lb-agent", agent_addr),
        ("nginx", nginx_addr),
    ];
    let n = targets.len();
    let mut done = [(0u64, 0f64); 3];
    let mut opened = [0u64; 3];
    for round in 0..slices {
        for k in 0..n {
            let i = (k + round as usize) % n;
            let warm_up = Duration::from_millis(if round == 0 { 1000 } else { 200 });
            let before = ACCEPTED.load(Ordering::Relaxed);
            let (count, elapsed) = peak(targets[i].1, conns, warm_up, slice).await;
            opened[i] += ACCEPTED.load(Ordering::Relaxed) - before;
            done[i].0 += count;
            done[i].1 += elapsed;
        }
    }
    let peaks: Vec<f64> = done.iter().map(|(c, s)| *c as f64 / s).collect();
    for (i, (name, _)) in targets.iter().enumerate() {
        println!(
            "  {name:<9} peak {:>9.0} req/s   (backend connections opened: {})",
            peaks[i], opened[i]
        );
    }
    println!("  lb-agent / nginx = {:.2}", peaks[1] / peaks[2]);
    let rate = peaks[1] / 2.0;
    println!(
        "open loop at {rate:.0} req/s (half the lb-agent peak), {secs} s per target in {slices} \
         interleaved slices"
    );
    let mut latencies: [Vec<f64>; 3] = Default::default();
    for round in 0..slices {
        for k in 0..n {
            let i = (k + round as usize) % n;
            latencies[i].extend(paced(targets[i].1, conns, rate, slice).await);
        }
    }
    let mut direct = (0.0, 0.0);
    for (i, (name, _)) in targets.iter().enumerate() {
        let (p50, p99) = quantiles(std::mem::take(&mut latencies[i]));
        if i == 0 {
            direct = (p50, p99);
            println!("  {name:<9} p50 {p50:>7.0} µs  p99 {p99:>7.0} µs");
        } else {
            println!(
                "  {name:<9} p50 {p50:>7.0} µs  p99 {p99:>7.0} µs  added: p50 {:>6.0} µs, p99 {:>6.0} µs",
                p50 - direct.0,
                p99 - direct.1
            );
        }
    }
    drop(agent);
    drop(nginx);
    failover(&bin, &dir).await;
    streams::run(&bin, &dir, conns, secs, slices).await;
    let _ = std::fs::remove_dir_all(&dir);
}

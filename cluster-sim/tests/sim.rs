//! End-to-end: the real `cluster-sim` binary driven by kube-rs and kubectl 1.37.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::kubectl_path;
use serde_json::json;

struct Fleet {
    child: Child,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Fleet {
    fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("sim.kubeconfig");
        let mut child = Command::new(env!("CARGO_BIN_EXE_cluster-sim"))
            .args(args)
            .arg(format!("--kubeconfig-out={}", kubeconfig.display()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting cluster-sim");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // Ready once it prints the admin API line.
        for line in lines.by_ref() {
            if line.unwrap().starts_with("admin API:") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            dir,
            kubeconfig,
        }
    }

    async fn client(&self, context: &str) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let opts = kube::config::KubeConfigOptions {
            context: Some(context.into()),
            ..Default::default()
        };
        let mut cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .unwrap();
        cfg.connect_timeout = Some(Duration::from_secs(2));
        cfg.read_timeout = Some(Duration::from_secs(2));
        kube::Client::try_from(cfg).unwrap()
    }

    fn kubectl(&self) -> Kubectl {
        Kubectl {
            bin: kubectl_path(),
            kubeconfig: self.kubeconfig.clone(),
            home: self.dir.path().to_path_buf(),
        }
    }

    fn ctl(&self, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_cluster-sim"))
            .arg("ctl")
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    fn ok(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn kubectl_flow_on_a_three_cluster_fleet() {
    let f = Fleet::start(&[
        "--clusters=3",
        "--nodes=4",
        "--node-cpu=8",
        "--node-memory=32Gi",
        "--ready-delay=200ms",
        "--regions=eu-west,us-east",
    ]);
    let k = f.kubectl();
    let contexts = k.ok(&["config", "get-contexts", "-o", "name"]);
    assert_eq!(
        contexts.split_whitespace().collect::<Vec<_>>(),
        vec!["sim-1", "sim-2", "sim-3"]
    );
    k.ok(&[
        "--context",
        "sim-1",
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=5",
    ]);
    k.ok(&[
        "--context",
        "sim-1",
        "wait",
        "--for=condition=Available",
        "deploy/web",
        "--timeout=60s",
    ]);
    k.ok(&[
        "--context",
        "sim-1",
        "rollout",
        "status",
        "deploy/web",
        "--timeout=60s",
    ]);
    let pods = k.ok(&[
        "--context",
        "sim-1",
        "get",
        "pods",
        "-o",
        "wide",
        "--no-headers",
    ]);
    let lines: Vec<&str> = pods.lines().collect();
    assert_eq!(lines.len(), 5, "{pods}");
    for l in &lines {
        assert!(
            l.contains("Running") && l.contains("1/1") && l.contains("sim-1-node-"),
            "{l}"
        );
    }
    let rs = k.ok(&["--context", "sim-1", "get", "rs", "--no-headers"]);
    assert!(rs.contains(" 5 "), "{rs}");
    k.ok(&[
        "--context",
        "sim-1",
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--type=LoadBalancer",
    ]);
    k.ok(&[
        "--context",
        "sim-1",
        "wait",
        "--for=jsonpath={.status.loadBalancer.ingress[0].ip}",
        "svc/web",
        "--timeout=60s",
    ]);
    let ip = k.ok(&[
        "--context",
        "sim-1",
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.status.loadBalancer.ingress[0].ip}",
    ]);
    assert!(ip.starts_with("127.200.0."), "{ip}");
    let eps = k.ok(&[
        "--context",
        "sim-1",
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=web",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&eps).unwrap();
    let ready = v["items"][0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["conditions"]["ready"] == true)
        .count();
    assert_eq!(ready, 5);
    // Other clusters are separate APIs.
    assert!(
        k.ok(&["--context", "sim-2", "get", "deploy", "-A", "--no-headers"])
            .trim()
            .is_empty()
    );
    let nodes = k.ok(&[
        "--context",
        "sim-2",
        "get",
        "nodes",
        "--no-headers",
        "-L",
        "topology.kubernetes.io/region",
    ]);
    assert_eq!(nodes.lines().count(), 4);
    assert!(nodes.contains("us-east"), "{nodes}");
}

#[tokio::test]
async fn capacity_rbac_and_faults() {
    let f = Fleet::start(&[
        "--clusters=2",
        "--nodes=2",
        "--node-cpu=2",
        "--node-memory=4Gi",
        "--ready-delay=0s",
    ]);
    let c1 = f.client("sim-1").await;
    // Capacity: 2 nodes x 2 CPU fit four 1-CPU pods; two stay Pending as Unschedulable.
    let deps: Api<Deployment> = Api::namespaced(c1.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "big"}},
            "template": {"metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}
    }))
    .unwrap();
    deps.create(&PostParams::default(), &d).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(c1.clone(), "default");
    let mut w = Box::pin(
        pods.watch(&WatchParams::default().labels("app=big"), "0")
            .await
            .unwrap(),
    );
    let mut state = std::collections::HashMap::new();
    loop {
        let ev = w.try_next().await.unwrap().expect("watch ended");
        let (WatchEvent::Added(p) | WatchEvent::Modified(p)) = ev else {
            continue;
        };
        let unsched = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            });
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        state.insert(p.metadata.name.clone().unwrap(), (running, unsched));
        let r = state.values().filter(|(r, _)| *r).count();
        let u = state.values().filter(|(_, u)| *u).count();
        if r == 4 && u == 2 {
            break;
        }
    }

    // RBAC: a service account bound to a role that may only read pods.
    let k = f.kubectl();
    k.ok(&["--context", "sim-1", "create", "namespace", "team"]);
    k.ok(&[
        "--context",
        "sim-1",
        "create",
        "serviceaccount",
        "reader",
        "-n",
        "team",
    ]);
    k.ok(&[
        "--context",
        "sim-1",
        "create",
        "clusterrole",
        "pod-reader",
        "--verb=get,list,watch",
        "--resource=pods",
    ]);
    k.ok(&[
        "--context",
        "sim-1",
        "create",
        "clusterrolebinding",
        "reader",
        "--clusterrole=pod-reader",
        "--serviceaccount=team:reader",
    ]);
    let secrets: Api<Secret> = Api::namespaced(c1.clone(), "team");
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "reader-manual-token", "annotations": {"kubernetes.io/service-account.name": "reader"}},
        "type": "kubernetes.io/service-account-token"
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let mut sw = Box::pin(
        secrets
            .watch(
                &WatchParams::default().fields("metadata.name=reader-manual-token"),
                "0",
            )
            .await
            .unwrap(),
    );
    let token = loop {
        if let Some(WatchEvent::Added(s) | WatchEvent::Modified(s)) = sw.try_next().await.unwrap()
            && let Some(t) = s.data.and_then(|d| d.get("token").cloned())
        {
            break String::from_utf8(t.0).unwrap();
        }
    };
    let kc = kube::config::Kubeconfig::read_from(&f.kubeconfig).unwrap();
    let opts = kube::config::KubeConfigOptions {
        context: Some("sim-1".into()),
        ..Default::default()
    };
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .unwrap();
    cfg.auth_info.token = Some(token.into());
    let reader = kube::Client::try_from(cfg).unwrap();
    let rpods: Api<Pod> = Api::all(reader.clone());
    assert_eq!(
        rpods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        6
    );
    let rdeps: Api<Deployment> = Api::namespaced(reader, "team");
    match rdeps.create(&PostParams::default(), &d).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.contains("cannot create resource \"deployments\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }

    // Faults, as a client sees them.
    let c2 = f.client("sim-2").await;
    let ns2: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c2.clone());
    ns2.list(&ListParams::default()).await.unwrap();
    f.ctl(&["down", "sim-2"]);
    let fresh = f.client("sim-2").await;
    let err = Api::<k8s_openapi::api::core::v1::Namespace>::all(fresh)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").to_lowercase().contains("refused"),
        "{err:?}"
    );
    f.ctl(&["partition", "sim-2"]);
    let fresh = f.client("sim-2").await;
    let err = Api::<k8s_openapi::api::core::v1::Namespace>::all(fresh)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    let text = format!("{err:?}").to_lowercase();
    assert!(
        text.contains("timedout") || text.contains("timed out") || text.contains("elapsed"),
        "{err:?}"
    );
    f.ctl(&["slow", "sim-2", "--latency=600ms"]);
    let fresh = f.client("sim-2").await;
    let t0 = std::time::Instant::now();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(fresh.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(600));
    f.ctl(&["up", "sim-2"]);
    Api::<k8s_openapi::api::core::v1::Namespace>::all(f.client("sim-2").await)
        .list(&ListParams::default())
        .await
        .unwrap();
    // sim-1 never noticed any of it.
    assert_eq!(
        pods.list(&ListParams::default()).await.unwrap().items.len(),
        6
    );
}

/// Pod names, nodes and IPs after the same requests on the same fleet.
async fn scenario() -> Vec<(String, String, String)> {
    let f = Fleet::start(&[
        "--clusters=1",
        "--nodes=3",
        "--node-cpu=4",
        "--ready-delay=0s",
    ]);
    let c = f.client("sim-1").await;
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    for (name, n) in [("a", 4), ("b", 3)] {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": n, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m"}}}]}}}
        }))
        .unwrap();
        deps.create(&PostParams::default(), &d).await.unwrap();
        let mut w = Box::pin(
            deps.watch(
                &WatchParams::default().fields(&format!("metadata.name={name}")),
                "0",
            )
            .await
            .unwrap(),
        );
        loop {
            if let Some(WatchEvent::Added(d) | WatchEvent::Modified(d)) =
                w.try_next().await.unwrap()
                && d.status.and_then(|s| s.available_replicas) == Some(n)
            {
                break;
            }
        }
    }
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let mut out: Vec<_> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                p.status.and_then(|s| s.pod_ip).unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn same_requests_same_state() {
    let first = scenario().await;
    let second = scenario().await;
    assert_eq!(first.len(), 7);
    assert_eq!(first, second);
}

/// One `GET` over a fresh connection: the status and the raw response head and body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut text = String::new();
    tcp.read_to_string(&mut text).await?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, text))
}

#[tokio::test]
async fn loopback_fleet_from_flags_serves_pods_and_places_lb_agents() {
    // A port from the OS: other tests' fleets hand out the same pod addresses.
    let [port] = support::free_ports();
    let f = Fleet::start(&[
        "--clusters=2",
        "--nodes=1",
        "--ready-delay=0s",
        "--pod-network=loopback",
        "--serve-pods",
        "--lb-pool=127.0.1.{n}",
    ]);
    let k = f.kubectl();
    k.ok(&[
        "--context",
        "sim-1",
        "create",
        "deployment",
        "echo",
        "--image=echo",
        &format!("--port={port}"),
    ]);
    let pods: Api<Pod> = Api::namespaced(f.client("sim-1").await, "default");
    let mut w = Box::pin(
        pods.watch(&WatchParams::default().labels("app=echo"), "0")
            .await
            .unwrap(),
    );
    let (name, ip) = loop {
        let Some(WatchEvent::Added(p) | WatchEvent::Modified(p)) = w.try_next().await.unwrap()
        else {
            continue;
        };
        let status = p.status.unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready && let Some(ip) = status.pod_ip {
            break (p.metadata.name.unwrap(), ip);
        }
    };
    assert!(ip.starts_with("127.10.0."), "{ip}");
    let addr = std::net::SocketAddr::new(ip.parse().unwrap(), port);
    let (code, text) = http_get(addr, "/x").await.unwrap();
    assert_eq!(code, 200, "{text}");
    assert!(text.contains(&format!("x-sim-pod: {name}")), "{text}");
    assert!(text.contains("x-sim-request: GET /x"), "{text}");
    assert!(text.ends_with(&format!("sim-1 default/{name}\n")), "{text}");

    // pod-fail through the admin API.
    f.ctl(&[
        "pod-fail",
        "sim-1",
        &format!("default/{name}"),
        "--status=503",
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while http_get(addr, "/").await.map(|(c, _)| c).unwrap_or(0) != 503 {
        assert!(std::time::Instant::now() < deadline, "the pod never failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f.ctl(&["pod-fail", "sim-1", &format!("default/{name}"), "--clear"]);

    // Each cluster's lb-agent Service gets the address it asks for from its own pool.
    let svcs: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(f.client("sim-2").await, "default");
    let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "meridian-lb-agent"},
        "spec": {"type": "LoadBalancer", "loadBalancerIP": "127.0.1.2",
                 "ports": [{"name": "http", "port": 8080}]}
    }))
    .unwrap();
    svcs.create(&PostParams::default(), &svc).await.unwrap();
    let mut w = Box::pin(
        svcs.watch(
            &WatchParams::default().fields("metadata.name=meridian-lb-agent"),
            "0",
        )
        .await
        .unwrap(),
    );
    loop {
        if let Some(WatchEvent::Added(s) | WatchEvent::Modified(s)) = w.try_next().await.unwrap()
            && let Some(ip) = s
                .status
                .and_then(|st| st.load_balancer)
                .and_then(|lb| lb.ingress)
                .and_then(|i| i.into_iter().next())
                .and_then(|i| i.ip)
        {
            assert_eq!(ip, "127.0.1.2");
            break;
        }
    }
}

#[tokio::test]
async fn api_only_fleet_stores_workloads_as_written() {
    let f = Fleet::start(&["--clusters=1", "--nodes=2", "--api-only"]);
    let c = f.client("sim-1").await;
    // Bootstrap still ran: the nodes exist for capacity probes.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(c.clone());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    }))
    .unwrap();
    deps.create(&PostParams::default(), &d).await.unwrap();
    deps.patch(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    let got = deps.get("web").await.unwrap();
    assert_eq!(got.spec.unwrap().replicas, Some(5));
    // No deployment controller: nothing wrote a status or a ReplicaSet.
    assert!(got.status.is_none(), "{:?}", got.status);
    let rs: Api<k8s_openapi::api::apps::v1::ReplicaSet> = Api::namespaced(c, "default");
    assert!(
        rs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[test]
fn fleets_past_the_loopback_limits_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (
            vec!["--clusters=191", "--pod-network=loopback"],
            "at most 190 clusters",
        ),
        (
            vec!["--clusters=1", "--serve-pods"],
            "servePods needs podNetwork: loopback",
        ),
        (
            vec![
                "--clusters=1",
                "--pod-network=loopback",
                "--lb-pool=127.10.0.7",
            ],
            "lies in the loopback pod range",
        ),
        (
            vec![
                "--clusters=1",
                "--pod-network=loopback",
                "--serve-pods",
                "--api-only",
            ],
            "servePods needs the simulated loops",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cluster-sim"))
            .args(&args)
            .arg(format!(
                "--kubeconfig-out={}",
                dir.path().join("k").display()
            ))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started a fleet");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// A member cluster starts with kube-apiserver's namespaces and takes an operator's
/// install manifest (ServiceAccount, ClusterRole, ClusterRoleBinding, Deployment,
/// Service) through `kubectl apply` with client-side validation on.
#[test]
fn an_operator_install_manifest_applies_to_a_member() {
    let f = Fleet::start(&["--clusters=1", "--api-only"]);
    let k = f.kubectl();
    let namespaces = k.ok(&["get", "namespaces", "--no-headers"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            namespaces
                .lines()
                .any(|l| l.split_whitespace().next() == Some(ns)),
            "{ns} missing:\n{namespaces}"
        );
    }
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/operator-rbac.yaml");
    let manifest = manifest.to_str().unwrap();
    let out = k.ok(&["apply", "--validate=strict", "-f", manifest]);
    assert!(
        out.contains("clusterrolebinding.rbac.authorization.k8s.io/example-operator created")
            && out.contains("serviceaccount/example-operator created"),
        "{out}"
    );
    let binding = k.ok(&["get", "clusterrolebinding", "example-operator"]);
    assert!(
        binding.contains("ClusterRole/example-operator"),
        "{binding}"
    );
    let refused = Command::new(&k.bin)
        .env("KUBECONFIG", &k.kubeconfig)
        .env("HOME", &k.home)
        .args(["delete", "namespace", "kube-system"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("this namespace may not be deleted"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    k.ok(&["delete", "-f", manifest]);
}

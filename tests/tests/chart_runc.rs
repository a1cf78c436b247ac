//! End-to-end: charts/meridian installed with Helm 4, and once with Helm 3, into a cluster-sim
//! host cluster whose pods really run (`runtime: runc`), from the images
//! `tools/build-images.sh` builds. The federation's API server, scheduler and controllers
//! turn Ready through their own probes; `helm test` runs its kubectl pod against the
//! in-cluster Service name; the admin kubeconfig from its Secret reaches the federation
//! through the LoadBalancer address; `fedctl join` adds the two members, the chart's member
//! mode installs into each and its lb-agent runs there in runc too, `examples/web.yaml`
//! applied to the federation lands in them, and the lb-agents route to it: HTTP for
//! `web.shop.<dnsZone>` through each member's lb-agent LoadBalancer address is answered by
//! that member's replicas, and, once the Service's traffic policy prefers sim-2, by sim-2's
//! through sim-1's agent (agent to agent); `helm upgrade` with a changed value rolls the
//! controllers; `helm uninstall` leaves the host without the release's pods, containers or
//! Secrets, and cluster-sim's exit leaves no container or pod bridge.
//!
//! Every cluster is `runtime: runc`, so every address is in the sandbox network
//! (`cluster-sim/src/podnet.rs`): the LoadBalancer addresses come from each cluster's default
//! pool (`100.(65+i).253.0/24`, host-owned, reachable from the host and from every pod). The
//! web pods (`nginx:1.27`, an image the image directory does not have) are simulated and
//! serve (`servePods`) at their pod IPs, which cluster-sim gives to the host while they serve.
//!
//! Needs root (runc), and installs runc, umoci, the musl toolchain, kubectl and Helm through
//! the project's scripts: it fails, never skips, when it cannot.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use base64::Engine as _;
use meridian_e2e::helm::Helm;
use meridian_e2e::process::{Proc, Spawn};
use meridian_e2e::{binary, http, kubectl_path, poll_until};
use serde_json::Value;

const HOST: &str = "host";
const MEMBERS: [&str; 2] = ["sim-1", "sim-2"];
const NS: &str = "meridian";
/// The LoadBalancer address the external Service asks for, in the host cluster's default
/// pool (fleet index 0: `100.65.253.0/24`).
const LB_IP: &str = "100.65.253.10";
/// The name the lb-agents route to `shop/web` by (the chart's default `controllers.dnsZone`).
const WEB_HOST: &str = "web.shop.global.meridian.test";
/// The lb-agents' `http` port (the chart's default `lbAgent.ports.http`).
const LB_AGENT_HTTP: u16 = 8080;

/// Ids of the runc containers that exist now.
fn runc_list() -> Vec<String> {
    let out = Command::new("runc")
        .args(["list", "--quiet"])
        .output()
        .unwrap();
    assert!(out.status.success(), "runc list failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// cluster-sim, stopped with SIGTERM when dropped (a failed step too) so that it removes
/// its containers, network namespaces and bridge: SIGKILL, a dropped [`Proc`]'s end, leaves
/// them to the next run.
struct Terminated(Proc);

impl Drop for Terminated {
    fn drop(&mut self) {
        // Not after the last step's own terminate: its pid may be another process's now.
        if matches!(self.0.wait_exit(Duration::ZERO), Ok(None)) {
            let _ = self.0.terminate();
        }
    }
}

impl std::ops::Deref for Terminated {
    type Target = Proc;
    fn deref(&self) -> &Proc {
        &self.0
    }
}

/// A command-line tool run with `KUBECONFIG`.
struct Tool {
    bin: PathBuf,
    kubeconfig: String,
}

impl Tool {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()))
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{} {args:?} failed:\n{}\n{}",
            self.bin.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `get -o json` of `what` in the host's release namespace, if it answers.
    fn host_json(&self, what: &[&str]) -> Option<Value> {
        let mut args = vec!["--context", HOST, "-n", NS, "get"];
        args.extend_from_slice(what);
        args.extend_from_slice(&["-o", "json"]);
        let out = self.run(&args);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }
}

/// The Ready, not deleting pods of `component` (the chart's component label): (name, IP).
fn ready_pods(kubectl: &Tool, component: &str) -> Vec<(String, String)> {
    let selector = format!("app.kubernetes.io/component={component}");
    let Some(list) = kubectl.host_json(&["pods", "-l", &selector]) else {
        return Vec::new();
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .filter(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                p["status"]["podIP"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Seconds since `start`, for the step log.
fn step(start: Instant, what: &str) {
    eprintln!("[{:>5.1}s] {what}", start.elapsed().as_secs_f64());
}

#[test]
fn helm4_chart_runs_on_a_runc_host_and_federates_two_members() {
    chart_on_runc_host(4);
}

#[test]
fn helm3_chart_runs_on_a_runc_host_and_federates_two_members() {
    chart_on_runc_host(3);
}

/// The whole flow with Helm `major`.
fn chart_on_runc_host(major: u8) {
    let start = Instant::now();
    let uid = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "this test runs containers with runc and needs root"
    );
    meridian_e2e::run_script("install-image-tools.sh", &[]);
    let kubectl_bin = kubectl_path();
    // The chart's images, and kubectl as the image of its `helm test` pod (no registry).
    let images = meridian_e2e::workspace_root().join("target/images-chart");
    meridian_e2e::run_script(
        "build-images.sh",
        &[
            "--out",
            images.to_str().unwrap(),
            "--extra",
            &format!("kubectl={}", kubectl_bin.display()),
            "federation-apiserver",
            "fed-scheduler",
            "fed-controllers",
            "lb-agent",
        ],
    );
    let reference = |name: &str| meridian_e2e::image_reference(&images, name);
    let apiserver_image = reference("federation-apiserver");
    // ghcr.io/meridian-dev/federation-apiserver:0.1.0 → registry and tag for the chart.
    let (registry, rest) = apiserver_image.rsplit_once('/').unwrap();
    let tag = rest.rsplit_once(':').unwrap().1;
    step(start, "images built");

    let scratch = tempfile::tempdir().unwrap();
    let fleet = scratch.path().join("fleet.yaml");
    let members: String = MEMBERS
        .iter()
        .map(|m| {
            format!(
                "- name: {m}\n  nodes: 2\n  nodeCpu: \"8\"\n  nodeMemory: 16Gi\n  runtime: runc\n"
            )
        })
        .collect();
    std::fs::write(
        &fleet,
        format!(
            "servePods: true\nimageDir: {}\nstateDir: {}\nclusters:\n\
             - name: {HOST}\n  nodes: 1\n  runtime: runc\n{members}",
            images.display(),
            scratch.path().join("state").display()
        ),
    )
    .unwrap();
    let sim_kubeconfig = scratch.path().join("sim.kubeconfig");
    let mut sim = Spawn::new(binary("cluster-sim"))
        .args([
            format!("--fleet={}", fleet.display()),
            "--ready-delay=0s".to_string(),
            format!("--kubeconfig-out={}", sim_kubeconfig.display()),
        ])
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .ready_line("admin API:", Duration::from_secs(60))
        .spawn()
        .map(Terminated)
        .unwrap_or_else(|e| panic!("{e}"));
    let kubectl = Tool {
        bin: kubectl_bin.clone(),
        kubeconfig: sim_kubeconfig.display().to_string(),
    };
    let helm = Helm::new(major, &sim_kubeconfig.display().to_string());
    let helm_in = |args: &[&str]| {
        let mut all = vec!["--kube-context", HOST, "--namespace", NS];
        all.extend_from_slice(args);
        helm.ok(&all)
    };
    let chart = meridian_e2e::workspace_root().join("charts/meridian");
    let chart = chart.to_str().unwrap();
    let values: Vec<String> = [
        format!("image.registry={registry}"),
        format!("image.tag={tag}"),
        format!("tests.image={}", reference("kubectl")),
        // Each server binds its pod IP, so its log names the address (checked below).
        "bindPodIP=true".into(),
        "apiserver.externalService.enabled=true".into(),
        format!("apiserver.externalService.loadBalancerIP={LB_IP}"),
        format!("apiserver.externalAddress={LB_IP}"),
    ]
    .iter()
    .flat_map(|v| ["--set".to_string(), v.clone()])
    .collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();

    // 1. Install and wait (Helm's readiness: the Deployments available, the data claim
    //    Bound, the LoadBalancer with its address); the pods are Ready by their own probes.
    let mut install = vec![
        "install",
        "meridian",
        chart,
        "--create-namespace",
        "--wait",
        "--timeout=180s",
    ];
    install.extend_from_slice(&values);
    helm_in(&install);
    step(start, "helm install --wait returned");
    let phase = kubectl.ok(&[
        "--context",
        HOST,
        "-n",
        NS,
        "get",
        "pvc",
        "meridian-apiserver-data",
        "-o",
        "jsonpath={.status.phase}",
    ]);
    assert_eq!(phase, "Bound");
    let mut addrs = Vec::new();
    for component in ["apiserver", "scheduler", "controllers"] {
        let pods = poll_until(
            Duration::from_secs(180),
            &format!("the {component} pod to turn Ready"),
            || Some(ready_pods(&kubectl, component)).filter(|p| p.len() == 1),
        );
        let (name, ip) = pods[0].clone();
        assert!(ip.starts_with("100.65."), "{component} pod IP {ip}");
        addrs.push((component, name, ip));
    }
    step(start, "apiserver, scheduler and controllers Ready");
    // Each process bound its pod IP (the chart's $(POD_IP)), and its log says so.
    let (_, api_pod, api_ip) = &addrs[0];
    let logs = kubectl.ok(&["--context", HOST, "-n", NS, "logs", api_pod]);
    assert!(
        logs.contains(&format!("https://{api_ip}:6443")),
        "apiserver logs: {logs}"
    );
    let table = kubectl.ok(&["--context", HOST, "-n", NS, "get", "pods"]);
    assert!(
        table
            .lines()
            .filter(|l| l.starts_with("meridian-"))
            .all(|l| l.contains(" Running ")),
        "{table}"
    );

    // 2. helm test: its kubectl pod reaches https://meridian-apiserver.meridian.svc:443
    //    (the name through the host cluster's DNS, the ClusterIP proxied to the API server's pod).
    helm_in(&["test", "meridian", "--timeout=120s"]);
    step(start, "helm test passed");

    // 3. The admin kubeconfig from its Secret, through the LoadBalancer address.
    let secret = kubectl.ok(&[
        "--context",
        HOST,
        "-n",
        NS,
        "get",
        "secret",
        "meridian-admin-kubeconfig",
        "-o",
        "jsonpath={.data.kubeconfig}",
    ]);
    let admin = base64::engine::general_purpose::STANDARD
        .decode(secret.trim())
        .unwrap();
    let admin = String::from_utf8(admin).unwrap();
    assert!(
        admin.contains(&format!("server: https://{LB_IP}:443")),
        "{admin}"
    );
    let admin_path = scratch.path().join("admin.kubeconfig");
    std::fs::write(&admin_path, &admin).unwrap();
    let merged = format!("{}:{}", admin_path.display(), sim_kubeconfig.display());
    let fed = Tool {
        bin: kubectl_bin.clone(),
        kubeconfig: merged.clone(),
    };
    let ns = fed.ok(&["get", "namespace", "default", "-o", "name"]);
    assert_eq!(ns.trim(), "namespace/default");
    step(
        start,
        "admin kubeconfig reaches the federation through the LoadBalancer",
    );

    // 4. Join both members with fedctl.
    let fedctl = Tool {
        bin: binary("fedctl"),
        kubeconfig: merged.clone(),
    };
    for m in MEMBERS {
        let out = fedctl.ok(&["--context", "meridian", "join", m, "--wait-seconds", "90"]);
        assert!(out.contains(&format!("cluster {m} is Ready")), "{out}");
    }
    step(start, "both members joined");

    // 4b. The member mode into each member: the lb-agent runs in runc and turns Ready.
    for m in MEMBERS {
        let cluster = format!("lbAgent.cluster={m}");
        let mut member = vec![
            "--kube-context",
            m,
            "--namespace",
            "meridian-system",
            "install",
            "meridian-member",
            chart,
            "--create-namespace",
            "--wait",
            "--timeout=120s",
            "--set",
            "installMode=member",
            "--set",
            &cluster,
            "--set",
            "lbAgent.replicas=1",
        ];
        member.extend_from_slice(&values[..4]);
        helm.ok(&member);
        let ready = kubectl.ok(&[
            "--context",
            m,
            "-n",
            "meridian-system",
            "get",
            "deploy",
            "meridian-member-lb-agent",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ]);
        assert_eq!(ready, "1", "{m}");
    }
    step(start, "member mode installed in both members");

    // 5. examples/web.yaml through the federation: the members get their share.
    let example = meridian_e2e::workspace_root().join("examples/web.yaml");
    fed.ok(&["apply", "-f", example.to_str().unwrap()]);
    for (m, replicas) in MEMBERS.iter().zip(["3", "7"]) {
        poll_until(
            Duration::from_secs(120),
            &format!("{m} to run its share of shop/web"),
            || {
                let out = kubectl.run(&[
                    "--context",
                    m,
                    "-n",
                    "shop",
                    "get",
                    "deploy",
                    "web",
                    "-o",
                    "jsonpath={.spec.replicas}/{.status.readyReplicas}",
                ]);
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                (text == format!("{replicas}/{replicas}")).then_some(())
            },
        );
    }
    step(start, "examples/web.yaml runs in both members");

    // 5b. The lb-agents route to it.
    lb_agents_route(&kubectl, &fed);
    step(start, "the lb-agents route web.shop to both members");

    // 6. helm upgrade with a changed value: the controllers' pod is replaced and the new
    //    one turns Ready with the new flag.
    let old_controllers = addrs[2].1.clone();
    let mut upgrade = vec![
        "upgrade",
        "meridian",
        chart,
        "--set",
        "controllers.dnsZone=upgraded.meridian.test",
        "--wait",
        "--timeout=180s",
    ];
    upgrade.extend_from_slice(&values);
    helm_in(&upgrade);
    let (new_controllers, _) = poll_until(
        Duration::from_secs(180),
        "a new controllers pod to turn Ready",
        || {
            ready_pods(&kubectl, "controllers")
                .into_iter()
                .find(|(n, _)| *n != old_controllers)
        },
    );
    let args = kubectl.ok(&[
        "--context",
        HOST,
        "-n",
        NS,
        "get",
        "pod",
        &new_controllers,
        "-o",
        "jsonpath={.spec.containers[0].args}",
    ]);
    assert!(args.contains("--dns-zone=upgraded.meridian.test"), "{args}");
    // The federation still answers through the LoadBalancer, with the same credentials.
    fed.ok(&["get", "clusters", "sim-1", "-o", "name"]);
    step(start, "helm upgrade rolled the controllers");

    // 7. Uninstall: no pod or container left; only what values keep (the data claim).
    helm_in(&["uninstall", "meridian", "--wait", "--timeout=120s"]);
    let prefix = format!("msim-{}-0-", sim.pid());
    // The service-account token Secrets go with their accounts, in the background.
    poll_until(
        Duration::from_secs(120),
        "the release's pods, containers and Secrets to go",
        || {
            let pods = kubectl.host_json(&["pods"])?;
            let secrets = kubectl.host_json(&["secrets"])?;
            let left_pods = pods["items"].as_array().map_or(0, Vec::len);
            let left_secrets = secrets["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["metadata"]["name"].as_str())
                .filter(|n| n.starts_with("meridian"))
                .count();
            let left_containers = runc_list()
                .into_iter()
                .filter(|c| c.starts_with(&prefix))
                .count();
            (left_pods + left_secrets + left_containers == 0).then_some(())
        },
    );
    let claims = kubectl.host_json(&["pvc"]).unwrap();
    let claims: Vec<&str> = claims["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        claims,
        vec!["meridian-apiserver-data"],
        "kept by keepOnUninstall"
    );
    step(start, "helm uninstall left the host clean");

    sim.0.terminate().unwrap();
    let left: Vec<String> = runc_list()
        .into_iter()
        .filter(|c| c.starts_with(&format!("msim-{}-", sim.pid())))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // The bridge, with the simulated pods' addresses on it, went too.
    let bridge = format!("/sys/class/net/ms{}br", sim.pid());
    assert!(
        !std::path::Path::new(&bridge).exists(),
        "{bridge} left behind"
    );
}

/// The member `m`'s lb-agent address: its LoadBalancer Service's ingress, in the member's
/// default pool (`100.(65 + fleet index).253.0/24`).
fn lb_agent_address(kubectl: &Tool, index: usize, m: &str) -> SocketAddr {
    let ip = poll_until(
        Duration::from_secs(60),
        &format!("{m}'s lb-agent LoadBalancer address"),
        || {
            let out = kubectl.run(&[
                "--context",
                m,
                "-n",
                "meridian-system",
                "get",
                "service",
                "meridian-lb-agent",
                "-o",
                "jsonpath={.status.loadBalancer.ingress[0].ip}",
            ]);
            let ip = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (!ip.is_empty()).then_some(ip)
        },
    );
    assert!(
        ip.starts_with(&format!("100.{}.253.", 65 + index)),
        "{m}'s lb-agent address {ip}"
    );
    SocketAddr::new(ip.parse().unwrap(), LB_AGENT_HTTP)
}

/// The clusters that answer `n` GETs for `WEB_HOST` through `agent` (`None` if any is not a
/// 200).
fn answering(agent: SocketAddr, n: usize) -> Option<BTreeSet<String>> {
    (0..n)
        .map(|_| {
            http::get(agent, WEB_HOST, "/")
                .ok()
                .filter(|r| r.status == 200)
                .map(|r| r.sim_cluster())
        })
        .collect()
}

/// HTTP from the host through each member's lb-agent: the local replicas answer (so both
/// clusters do); then, with the federated Service's traffic policy `failover` to sim-2
/// first, sim-1's agent hands its requests to sim-2's agent, whose replicas answer.
fn lb_agents_route(kubectl: &Tool, fed: &Tool) {
    // The members follow the federation's host (sim-1 and sim-2 are fleet indexes 1, 2).
    let agents: Vec<SocketAddr> = MEMBERS
        .iter()
        .enumerate()
        .map(|(i, m)| lb_agent_address(kubectl, i + 1, m))
        .collect();
    // Each member learns the other's agent through Meridian's EndpointSlice.
    for (i, m) in MEMBERS.iter().enumerate() {
        let other = agents[1 - i].ip().to_string();
        poll_until(
            Duration::from_secs(60),
            &format!("{m}'s EndpointSlice web-meridian to list {other}"),
            || {
                let out = kubectl.run(&[
                    "--context",
                    m,
                    "-n",
                    "shop",
                    "get",
                    "endpointslice",
                    "web-meridian",
                    "-o",
                    "jsonpath={.endpoints[*].addresses[0]}",
                ]);
                (String::from_utf8_lossy(&out.stdout).trim() == other).then_some(())
            },
        );
    }
    // Local endpoints first: each agent's answers come from its own cluster.
    let mut seen = BTreeSet::new();
    for (m, agent) in MEMBERS.iter().zip(&agents) {
        let want = BTreeSet::from([m.to_string()]);
        poll_until(
            Duration::from_secs(60),
            &format!("{WEB_HOST} through {m}'s lb-agent at {agent}"),
            || answering(*agent, 5).filter(|s| *s == want),
        );
        seen.extend(want);
    }
    assert_eq!(seen, MEMBERS.map(String::from).into(), "clusters answering");
    // Agent to agent: sim-2 first for everyone, sim-1's clients included.
    fed.ok(&[
        "annotate",
        "--overwrite",
        "service",
        "web",
        "-n",
        "shop",
        "federation.meridian.dev/traffic-policy=failover",
        "federation.meridian.dev/failover-order=sim-2,sim-1",
    ]);
    let want = BTreeSet::from([MEMBERS[1].to_string()]);
    poll_until(
        Duration::from_secs(60),
        &format!("{WEB_HOST} through sim-1's lb-agent answered by sim-2"),
        || answering(agents[0], 5).filter(|s| *s == want),
    );
}

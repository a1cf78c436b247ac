//! End-to-end: a cluster-sim cluster with `runtime: runc` really runs a Deployment's pod from
//! the federation-apiserver image (`tools/build-images.sh federation-apiserver`): its init
//! container runs to completion first, the pod, in its own network namespace, binds its pod
//! IP through `$(POD_IP)` and its port from `envFrom`, turns Ready through its HTTPS
//! readinessProbe, answers `/readyz` from here directly and through its Service's ClusterIP,
//! `kubectl logs` shows its output; the cluster DNS answers its Service's names over UDP and
//! TCP from the host, and a fed-scheduler pod (a musl binary: musl's resolver, through the
//! pod's `resolv.conf` search path) reaches the API server by the Service's short name
//! alone, its hosts file naming no Service; deleting the first pod stops its container and
//! the ReplicaSet's replacement comes up; stopping cluster-sim leaves no container, network
//! namespace or bridge behind.
//!
//! Needs root (runc), and installs runc, umoci and the musl toolchain through the project's
//! scripts: it fails, never skips, when it cannot.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use meridian_e2e::{Env, poll_until};
use serde_json::Value;

const CONTEXT: &str = "run-1";

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

fn manifest(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: api-settings, namespace: default}}
stringData: {{port: "8443", token: {TOKEN}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: api, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: api}}}}
  template:
    metadata: {{labels: {{app: api}}}}
    spec:
      terminationGracePeriodSeconds: 5
      initContainers:
      - name: check
        image: {image}
        args: ["--help"]
      containers:
      - name: server
        image: {image}
        envFrom:
        - {{prefix: API_, secretRef: {{name: api-settings}}}}
        env:
        - name: POD_IP
          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
        args: ["--bind-address=$(POD_IP)", "--secure-port=$(API_port)", "--data-dir=/data",
               "--admin-token-file=/etc/settings/token"]
        ports: [{{name: https, containerPort: 8443}}]
        securityContext: {{readOnlyRootFilesystem: true}}
        readinessProbe:
          httpGet: {{scheme: HTTPS, path: /readyz, port: https}}
          periodSeconds: 1
        volumeMounts:
        - {{name: data, mountPath: /data}}
        - {{name: settings, mountPath: /etc/settings}}
      volumes:
      - {{name: data, emptyDir: {{}}}}
      - {{name: settings, secret: {{secretName: api-settings}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: api, namespace: default}}
spec:
  selector: {{app: api}}
  ports: [{{name: https, port: 443, targetPort: https}}]
---
apiVersion: v1
kind: Service
metadata: {{name: api-pods, namespace: default}}
spec:
  clusterIP: None
  selector: {{app: api}}
  ports: [{{name: https, port: 8443}}]
"#
    )
}

/// The admin token the API server pod is given, and the scheduler pod uses.
const TOKEN: &str = "sim-runc-admin-token";

/// A fed-scheduler pod whose kubeconfig names the API server by the Service's short name
/// `api` only: it turns Ready once its caches are synced, so only if the name resolved.
fn scheduler_manifest(image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: scheduler-kubeconfig, namespace: default}}
stringData:
  kubeconfig: |
    apiVersion: v1
    kind: Config
    clusters: [{{name: fed, cluster: {{server: "https://api:443", insecure-skip-tls-verify: true}}}}]
    users: [{{name: admin, user: {{token: {TOKEN}}}}}]
    contexts: [{{name: fed, context: {{cluster: fed, user: admin}}}}]
    current-context: fed
---
apiVersion: v1
kind: Pod
metadata: {{name: scheduler, namespace: default}}
spec:
  containers:
  - name: scheduler
    image: {image}
    env:
    - name: POD_IP
      valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}
    args: ["--kubeconfig=/etc/kubeconfig/kubeconfig", "--metrics-bind-address=$(POD_IP):8081",
           "--leader-elect=false"]
    ports: [{{name: metrics, containerPort: 8081}}]
    readinessProbe:
      httpGet: {{path: /readyz, port: metrics}}
      periodSeconds: 1
    volumeMounts:
    - {{name: kubeconfig, mountPath: /etc/kubeconfig}}
  volumes:
  - {{name: kubeconfig, secret: {{secretName: scheduler-kubeconfig}}}}
"#
    )
}

/// Whether the pod `name` is Ready.
fn pod_ready(env: &Env, name: &str) -> bool {
    let out = env.run(
        "kubectl",
        &[
            "--context",
            CONTEXT,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    );
    String::from_utf8_lossy(&out.stdout).trim() == "True"
}

/// The addresses and SRV data of the answer section, as text.
fn answer_text(m: &hickory_proto::op::Message) -> Vec<String> {
    m.answers
        .iter()
        .map(|r| match &r.data {
            RData::A(a) => a.to_string(),
            other => other.to_string(),
        })
        .collect()
}

/// The Ready pod of the Deployment other than `not`: (name, pod IP, container id).
fn ready_pod(env: &Env, not: Option<&str>) -> Option<(String, String, String)> {
    let out = env.run(
        "kubectl",
        &[
            "--context",
            CONTEXT,
            "get",
            "pods",
            "-l",
            "app=api",
            "-o",
            "json",
        ],
    );
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    list["items"].as_array()?.iter().find_map(|p| {
        let name = p["metadata"]["name"].as_str()?;
        let ready = p["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let deleting = p["metadata"].get("deletionTimestamp").is_some();
        (ready && !deleting && Some(name) != not).then(|| {
            (
                name.to_string(),
                p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                p["status"]["containerStatuses"][0]["containerID"]
                    .as_str()
                    .unwrap_or("")
                    .trim_start_matches("runc://")
                    .to_string(),
            )
        })
    })
}

fn readyz(ip: &str) -> String {
    readyz_at(&format!("{ip}:8443"))
}

fn readyz_at(addr: &str) -> String {
    let out = Command::new("curl")
        .args(["-ksS", "--max-time", "5", &format!("https://{addr}/readyz")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn runc_cluster_runs_a_deployment_from_the_image() {
    let uid = Command::new("id").arg("-u").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "this test runs containers with runc and needs root"
    );
    meridian_e2e::run_script("install-image-tools.sh", &[]);
    // The images chart_runc builds too: one set, so one musl build serves both tests
    // (another set of binaries unifies features differently and recompiles).
    meridian_e2e::run_script(
        "build-images.sh",
        &["federation-apiserver", "fed-scheduler", "fed-controllers"],
    );
    let images = meridian_e2e::workspace_root().join("target/images");
    let reference = |name: &str| meridian_e2e::image_reference(&images, name);
    let image = reference("federation-apiserver");

    let scratch = tempfile::tempdir().unwrap();
    let fleet = scratch.path().join("fleet.yaml");
    std::fs::write(
        &fleet,
        format!(
            "podNetwork: loopback\nimageDir: {}\nstateDir: {}\nclusters:\n- name: {CONTEXT}\n  nodes: 1\n  runtime: runc\n",
            images.display(),
            scratch.path().join("state").display()
        ),
    )
    .unwrap();
    let mut env = Env::start(&[&format!("--fleet={}", fleet.display())]);
    let api_yaml = scratch.path().join("api.yaml");
    std::fs::write(&api_yaml, manifest(&image)).unwrap();
    env.ok(
        "kubectl",
        &[
            "--context",
            CONTEXT,
            "apply",
            "-f",
            api_yaml.to_str().unwrap(),
        ],
    );
    let (name, ip, id) = poll_until(Duration::from_secs(180), "the pod to turn Ready", || {
        ready_pod(&env, None)
    });
    // The first runc cluster's pods are in 100.65.0.0/16 (cluster-sim's podnet module).
    assert!(ip.starts_with("100.65."), "pod IP {ip}");
    assert!(runc_list().contains(&id), "no runc container {id}");
    // The container runs in a network namespace of its own, not the host's.
    let state: Value = serde_json::from_slice(
        &Command::new("runc")
            .args(["state", &id])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let pid = state["pid"].as_u64().expect("runc state has the pid");
    let netns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).unwrap();
    assert_ne!(
        netns(&pid.to_string()),
        netns("self"),
        "the pod shares the host's network namespace"
    );
    // Reachable from the host at its pod IP.
    assert_eq!(readyz(&ip), "ok");
    // The init container ran to completion first (its log is its help text).
    let init = env.ok(
        "kubectl",
        &[
            "--context",
            CONTEXT,
            "get",
            "pod",
            &name,
            "-o",
            "jsonpath={.status.initContainerStatuses[0].state.terminated.reason}",
        ],
    );
    assert_eq!(init, "Completed");
    let help = env.ok(
        "kubectl",
        &["--context", CONTEXT, "logs", &name, "-c", "check"],
    );
    assert!(
        help.contains("--bind-address"),
        "init container log: {help}"
    );
    // The Service's ClusterIP (a host address on cluster-sim's bridge) is proxied to the pod
    // from the host.
    let cluster_ip = env.ok(
        "kubectl",
        &[
            "--context",
            CONTEXT,
            "get",
            "service",
            "api",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    assert!(
        cluster_ip.starts_with("100.65.254."),
        "ClusterIP {cluster_ip}"
    );
    let via_service = poll_until(Duration::from_secs(30), "the ClusterIP to answer", || {
        Some(readyz_at(&format!("{cluster_ip}:443"))).filter(|r| r == "ok")
    });
    assert_eq!(via_service, "ok");

    // The cluster DNS (the first runc cluster's is 100.65.255.10), over UDP and TCP.
    let dns: std::net::SocketAddr = "100.65.255.10:53".parse().unwrap();
    for tcp in [false, true] {
        let ask = |name: &str, rtype| meridian_e2e::dns::query(dns, name, rtype, tcp).unwrap();
        let a = ask("API.default.svc.cluster.local.", RecordType::A);
        assert_eq!(a.metadata.response_code, ResponseCode::NoError);
        assert!(a.metadata.authoritative);
        assert_eq!(answer_text(&a), [cluster_ip.as_str()], "tcp: {tcp}");
        let srv = ask(
            "_https._tcp.api.default.svc.cluster.local.",
            RecordType::SRV,
        );
        assert_eq!(
            answer_text(&srv),
            ["0 100 443 api.default.svc.cluster.local."],
            "tcp: {tcp}"
        );
        // A headless Service: its ready pod.
        let headless = poll_until(Duration::from_secs(30), "the headless name", || {
            let m = ask("api-pods.default.svc.cluster.local.", RecordType::A);
            Some(answer_text(&m)).filter(|a| !a.is_empty())
        });
        assert_eq!(headless, [ip.as_str()], "tcp: {tcp}");
        let nodata = ask("api.default.svc.cluster.local.", RecordType::AAAA);
        assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
        assert!(nodata.answers.is_empty() && !nodata.authorities.is_empty());
        for missing in ["nope.default.svc.cluster.local.", "example.org."] {
            let m = ask(missing, RecordType::A);
            assert_eq!(
                m.metadata.response_code,
                ResponseCode::NXDomain,
                "{missing}"
            );
        }
    }
    // The pod's hosts file names no Service; its resolv.conf names the cluster DNS.
    let hosts = std::fs::read_to_string(format!("/proc/{pid}/root/etc/hosts")).unwrap();
    assert!(!hosts.contains(".svc"), "hosts file: {hosts}");
    assert!(
        hosts.contains(&format!("{ip}\t{name}")),
        "hosts file: {hosts}"
    );
    let resolv = std::fs::read_to_string(format!("/proc/{pid}/root/etc/resolv.conf")).unwrap();
    assert_eq!(
        resolv,
        "nameserver 100.65.255.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
    );
    // A musl binary in a pod finds the API server by the short name `api`: the scheduler
    // turns Ready once its caches are synced from it.
    let scheduler_yaml = scratch.path().join("scheduler.yaml");
    std::fs::write(
        &scheduler_yaml,
        scheduler_manifest(&reference("fed-scheduler")),
    )
    .unwrap();
    env.ok(
        "kubectl",
        &[
            "--context",
            CONTEXT,
            "apply",
            "-f",
            scheduler_yaml.to_str().unwrap(),
        ],
    );
    poll_until(
        Duration::from_secs(120),
        "the scheduler to reach the API server by name",
        || pod_ready(&env, "scheduler").then_some(()),
    );
    let logs = env.ok("kubectl", &["--context", CONTEXT, "logs", &name]);
    assert!(
        logs.contains(&format!("listening on https://{ip}:8443")),
        "kubectl logs: {logs}"
    );
    let tail = env.ok(
        "kubectl",
        &["--context", CONTEXT, "logs", &name, "--tail=1"],
    );
    assert_eq!(tail.lines().count(), 1, "kubectl logs --tail=1: {tail}");

    env.ok(
        "kubectl",
        &["--context", CONTEXT, "delete", "pod", &name, "--wait=false"],
    );
    poll_until(Duration::from_secs(30), "the container to go", || {
        (!runc_list().contains(&id)).then_some(())
    });
    let (_, new_ip, new_id) = poll_until(
        Duration::from_secs(120),
        "the replacement pod to turn Ready",
        || ready_pod(&env, Some(&name)),
    );
    assert_eq!(readyz(&new_ip), "ok");

    // A clean stop leaves no container of this cluster-sim behind.
    env.sim.terminate().unwrap();
    let prefix = format!("msim-{}-", env.sim.pid());
    let left: Vec<String> = runc_list()
        .into_iter()
        .filter(|c| c.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?} (last was {new_id})");
    // Nor any network namespace or device.
    let netns_left: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(netns_left.is_empty(), "namespaces left: {netns_left:?}");
    let bridge = format!("/sys/class/net/ms{}br", env.sim.pid());
    assert!(
        !std::path::Path::new(&bridge).exists(),
        "{bridge} left behind"
    );
}

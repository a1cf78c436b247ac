//! What charts/meridian renders starts the real binaries: the API server with the chart's
//! flags, certificates and token file, fed-scheduler with the chart's kubeconfig (CA and
//! token by path), and kubectl with the admin kubeconfig Secret. The paths the pods mount
//! are remapped into a scratch directory; everything else is as rendered.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use meridian_e2e::helm::Helm;
use meridian_e2e::{LISTENING_LINE, Spawn, binary, http, kubectl_path};
use serde_json::Value;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/meridian");

#[test]
fn the_rendered_flags_and_credentials_start_the_binaries() {
    let helm = Helm::new(4, "/nonexistent");
    let rendered = helm.ok(&[
        "template",
        "meridian",
        CHART,
        "--namespace",
        "meridian",
        "--set",
        "apiserver.externalAddress=127.0.0.1",
        // Two replicas: the rendered flags elect a leader.
        "--set",
        "scheduler.replicas=2",
    ]);
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
        .filter(|d: &Value| !d.is_null())
        .collect();
    let find = |kind: &str, name: &str| -> &Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} rendered"))
    };
    let secret = |name: &str, key: &str| -> Vec<u8> {
        use base64::Engine as _;
        let b64 = find("Secret", name)["data"][key]
            .as_str()
            .expect("a data key");
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64")
    };

    let scratch = tempfile::tempdir().expect("temporary directory");
    let root = scratch.path();
    let remap = |s: &str| {
        s.replace(
            "/etc/meridian/",
            &format!("{}/etc/meridian/", root.display()),
        )
        .replace("/var/lib/meridian", &format!("{}/data", root.display()))
    };
    let write = |path: &str, contents: &[u8]| {
        let p = remap(path);
        std::fs::create_dir_all(Path::new(&p).parent().unwrap()).unwrap();
        std::fs::write(&p, contents).unwrap();
    };
    // The volumes as the pods mount them.
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        write(
            &format!("/etc/meridian/pki/{key}"),
            &secret("meridian-pki", key),
        );
    }
    write(
        "/etc/meridian/tokens/tokens.csv",
        &secret("meridian-tokens", "tokens.csv"),
    );
    write(
        "/etc/meridian/token/token",
        &secret("meridian-tokens", "fed-scheduler"),
    );

    // The API server with the rendered flags, on loopback and a free port.
    let args = container_args(find("Deployment", "meridian-apiserver"));
    let args: Vec<String> = args
        .iter()
        .map(|a| match a.as_str() {
            "--bind-address=0.0.0.0" => "--bind-address=127.0.0.1".into(),
            "--secure-port=6443" => "--secure-port=0".into(),
            a => remap(a),
        })
        .collect();
    let apiserver = Spawn::new(binary("federation-apiserver"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .ready_line(LISTENING_LINE, Duration::from_secs(60))
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = apiserver.ready_value().expect("the address").to_string();
    // Its credentials are the Secrets' alone: it generated no CA or admin token of its own.
    for generated in ["data/pki", "data/admin.kubeconfig"] {
        assert!(
            !root.join(generated).exists(),
            "the API server wrote {generated}"
        );
    }

    // The admin kubeconfig: its CA verifies the serving certificate, its token is admin.
    let admin = find("Secret", "meridian-admin-kubeconfig")["stringData"]["kubeconfig"]
        .as_str()
        .expect("kubeconfig")
        .replace("https://127.0.0.1:443", &format!("https://{addr}"));
    let admin_path = root.join("admin.kubeconfig");
    std::fs::write(&admin_path, admin).unwrap();
    let out = Command::new(kubectl_path())
        .arg(format!("--kubeconfig={}", admin_path.display()))
        .args(["get", "namespace", "default", "-o", "name"])
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/default"
    );

    // fed-scheduler with the components' kubeconfig (server: the in-cluster Service name,
    // in the certificate, pointed at loopback here).
    let kubeconfig = find("ConfigMap", "meridian-kubeconfig")["data"]["kubeconfig"]
        .as_str()
        .expect("kubeconfig")
        .replace(
            "https://meridian-apiserver.meridian.svc:443",
            &format!("https://{addr}"),
        );
    write(
        "/etc/meridian/kubeconfig/kubeconfig",
        remap(&kubeconfig).as_bytes(),
    );
    let metrics = free_port();
    let args: Vec<String> = container_args(find("Deployment", "meridian-scheduler"))
        .iter()
        .map(|a| {
            if a.starts_with("--metrics-bind-address=") {
                format!("--metrics-bind-address={metrics}")
            } else {
                // What the kubelet expands from the pod's env.
                remap(a).replace("$(POD_NAME)", "meridian-scheduler-0")
            }
        })
        .collect();
    let _scheduler = Spawn::new(binary("fed-scheduler"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        args.contains(&"--leader-elect=true".to_string()),
        "{args:?}"
    );
    // Ready once it holds the Lease and its caches synced from the federation: the TLS
    // name, CA and token worked.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = http::get(metrics, "localhost", "/readyz")
            .is_ok_and(|r| r.status == 200 && r.body.contains("leading"));
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fed-scheduler never became ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(apiserver);
}

/// The first container's args of a rendered Deployment.
fn container_args(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg").to_string())
        .collect()
}

/// A loopback address with a port nothing listens on (the scheduler's metrics server
/// takes a fixed address).
fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("address")
}

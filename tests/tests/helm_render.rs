//! What charts/meridian renders starts the real binaries: the API server with the chart's
//! flags, certificates and token file, fed-scheduler with the chart's kubeconfig (CA and
//! token by path), and kubectl with the admin kubeconfig Secret; with the bundled etcd, its
//! members' wiring (every peer in the initial cluster, certificates for every name, the API
//! server at the client Service with TLS) and a rendered member serving the rendered API
//! server. The paths the pods mount are remapped into a scratch directory; everything else is
//! as rendered.

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

/// What one `helm template` rendered, by kind and name.
struct Rendered {
    docs: Vec<Value>,
}

impl Rendered {
    fn new(set: &[&str]) -> Self {
        let helm = Helm::new(4, "/nonexistent");
        let mut args = vec!["template", "meridian", CHART, "--namespace", "meridian"];
        for s in set {
            args.extend(["--set", s]);
        }
        let rendered = helm.ok(&args);
        let docs = serde_yaml_ng::Deserializer::from_str(&rendered)
            .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
            .filter(|d: &Value| !d.is_null())
            .collect();
        Self { docs }
    }

    fn find(&self, kind: &str, name: &str) -> &Value {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} rendered"))
    }

    fn secret(&self, name: &str, key: &str) -> Vec<u8> {
        use base64::Engine as _;
        let b64 = self.find("Secret", name)["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("Secret {name} has {key}"));
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64")
    }
}

/// The Secret key mounted at `path` in the first container of `pod_spec`: (Secret, key).
fn mounted_secret(pod_spec: &Value, path: &str) -> (String, String) {
    let path = Path::new(path);
    let mounts = pod_spec["containers"][0]["volumeMounts"]
        .as_array()
        .expect("volumeMounts");
    let mount = mounts
        .iter()
        .find(|m| path.starts_with(m["mountPath"].as_str().unwrap_or("-")))
        .unwrap_or_else(|| panic!("nothing is mounted at {}", path.display()));
    let key = path
        .strip_prefix(mount["mountPath"].as_str().unwrap())
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let volume = pod_spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    let secret = volume["secret"]["secretName"]
        .as_str()
        .unwrap_or_else(|| panic!("{} is not a Secret volume", path.display()));
    // Without `items` every key of the Secret is a file of its name.
    let key = volume["secret"]["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["path"] == key.as_str()))
        .map(|i| i["key"].as_str().unwrap().to_string())
        .unwrap_or(key);
    (secret.to_string(), key)
}

fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    let prefix = format!("{name}=");
    args.iter()
        .find_map(|a| a.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("{name} in {args:?}"))
}

/// `openssl <args>` in `dir`, after writing `files` there; whether it succeeded, and what
/// it printed.
fn openssl(dir: &Path, args: &[&str], files: &[(&str, &[u8])]) -> (bool, String) {
    for (name, contents) in files {
        std::fs::write(dir.join(name), contents).unwrap();
    }
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is required (Debian: openssl)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_bundled_etcd_is_a_tls_cluster_of_every_member_and_the_apiserver_uses_it() {
    let r = Rendered::new(&[
        "apiserver.replicas=3",
        "apiserver.storage.backend=bundledEtcd",
    ]);
    let (sts, peers, client_svc) = ("meridian-etcd", "meridian-etcd-peers", "meridian-etcd");
    let host = |m: &str| format!("{m}.{peers}.meridian.svc.cluster.local");

    // The StatefulSet: three members, each named in the initial cluster at its own peer URL
    // under the headless Service, which publishes members before they are ready.
    let set = r.find("StatefulSet", sts);
    assert_eq!(set["spec"]["replicas"], 3);
    assert_eq!(set["spec"]["serviceName"], peers);
    assert_eq!(set["spec"]["podManagementPolicy"], "Parallel");
    let headless = r.find("Service", peers);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    let pod = &set["spec"]["template"]["spec"];
    let args: Vec<String> = pod["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let members: Vec<String> = (0..3).map(|i| format!("{sts}-{i}")).collect();
    let want: Vec<String> = members
        .iter()
        .map(|m| format!("{m}=https://{}:2380", host(m)))
        .collect();
    assert_eq!(flag(&args, "--initial-cluster"), want.join(","));
    assert_eq!(
        flag(&args, "--initial-advertise-peer-urls"),
        format!("https://$(POD_NAME).{peers}.meridian.svc.cluster.local:2380")
    );
    assert_eq!(flag(&args, "--client-cert-auth"), "true");
    assert_eq!(flag(&args, "--peer-client-cert-auth"), "true");
    let selector = &set["spec"]["selector"]["matchLabels"];
    for svc in [headless, r.find("Service", client_svc)] {
        assert_eq!(
            &svc["spec"]["selector"], selector,
            "{}",
            svc["metadata"]["name"]
        );
    }
    let pdb = r.find("PodDisruptionBudget", sts);
    assert_eq!(pdb["spec"]["minAvailable"], 2, "a quorum of three");

    // The member certificate, from the Secret mounted where the flags say: issued by the CA
    // the members trust, valid for every member's name and the client Service's.
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let file = |path: &str| {
        let (secret, key) = mounted_secret(pod, path);
        r.secret(&secret, &key)
    };
    let ca = file(flag(&args, "--trusted-ca-file"));
    assert_eq!(file(flag(&args, "--peer-trusted-ca-file")), ca);
    let server = file(flag(&args, "--cert-file"));
    assert_eq!(file(flag(&args, "--peer-cert-file")), server);
    let (ok, out) = openssl(
        dir,
        &[
            "verify",
            "-CAfile",
            "ca.crt",
            "-purpose",
            "sslserver",
            "server.crt",
        ],
        &[("ca.crt", &ca), ("server.crt", &server)],
    );
    assert!(ok, "{out}");
    let (ok, out) = openssl(
        dir,
        &[
            "verify",
            "-CAfile",
            "ca.crt",
            "-purpose",
            "sslclient",
            "server.crt",
        ],
        &[],
    );
    assert!(ok, "peers present the same certificate as clients: {out}");
    let names: Vec<String> = members
        .iter()
        .map(|m| host(m))
        .chain([format!("{client_svc}.meridian.svc.cluster.local")])
        .collect();
    for name in &names {
        let (ok, out) = openssl(
            dir,
            &["x509", "-in", "server.crt", "-noout", "-checkhost", name],
            &[],
        );
        assert!(ok && out.contains("does match"), "{name}: {out}");
    }

    // The API servers: etcd at the client Service with TLS, their client certificate issued
    // by the same CA, and all of it from the Secret mounted where the flags say.
    let deployment = r.find("Deployment", "meridian-apiserver");
    let api_pod = &deployment["spec"]["template"]["spec"];
    let api_args = container_args(deployment);
    assert_eq!(flag(&api_args, "--storage-backend"), "etcd");
    assert_eq!(
        flag(&api_args, "--etcd-servers"),
        format!("https://{client_svc}.meridian.svc.cluster.local:2379")
    );
    let api_file = |f: &str| {
        let (secret, key) = mounted_secret(api_pod, flag(&api_args, f));
        r.secret(&secret, &key)
    };
    assert_eq!(api_file("--etcd-cafile"), ca);
    let (ok, out) = openssl(
        dir,
        &[
            "verify",
            "-CAfile",
            "ca.crt",
            "-purpose",
            "sslclient",
            "client.crt",
        ],
        &[("client.crt", &api_file("--etcd-certfile"))],
    );
    assert!(ok, "{out}");
    assert!(!api_file("--etcd-keyfile").is_empty());
}

#[test]
fn a_rendered_single_member_etcd_serves_the_rendered_apiserver() {
    let r = Rendered::new(&[
        "apiserver.storage.backend=bundledEtcd",
        "etcd.replicas=1",
        "apiserver.externalAddress=127.0.0.1",
    ]);
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    let member = "meridian-etcd-0";
    let member_host = format!("{member}.meridian-etcd-peers.meridian.svc.cluster.local");
    let client_host = "meridian-etcd.meridian.svc.cluster.local";
    let (client, peer, metrics) = (free_port(), free_port(), free_port());
    // The pod's names and ports, moved to loopback; its mounted files, into the scratch
    // directory. Everything else is as rendered.
    let remap = |s: &str| {
        s.replace("$(POD_NAME)", member)
            .replace(&format!("{member_host}:2379"), &client.to_string())
            .replace(&format!("{member_host}:2380"), &peer.to_string())
            .replace(&format!("{client_host}:2379"), &client.to_string())
            .replace("0.0.0.0:2379", &client.to_string())
            .replace("0.0.0.0:2380", &peer.to_string())
            .replace("0.0.0.0:2381", &metrics.to_string())
            .replace("/etc/", &format!("{}/etc/", root.display()))
            .replace("/var/lib/", &format!("{}/var/lib/", root.display()))
    };
    let set = r.find("StatefulSet", "meridian-etcd");
    let pod = &set["spec"]["template"]["spec"];
    let args: Vec<String> = pod["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| remap(a.as_str().unwrap()))
        .collect();
    let write_mounts = |pod: &Value, args: &[String]| {
        for a in args {
            let Some((_, path)) = a.split_once('=') else {
                continue;
            };
            let Some(original) = path.strip_prefix(&root.display().to_string()) else {
                continue;
            };
            if !original.starts_with("/etc/") {
                continue;
            }
            let (secret, key) = mounted_secret(pod, original);
            std::fs::create_dir_all(Path::new(path).parent().unwrap()).unwrap();
            std::fs::write(path, r.secret(&secret, &key)).unwrap();
        }
    };
    write_mounts(pod, &args);
    std::fs::create_dir_all(root.join("var/lib/etcd")).unwrap();
    let etcd_log = root.join("etcd.log");
    let _etcd = Spawn::new(meridian_e2e::etcd_path())
        .args(&args)
        .output(&etcd_log)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    // Up once it has elected itself (a single member needs no peer).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http::get(metrics, "localhost", "/health")
        .is_ok_and(|r| r.status == 200 && r.body.contains("\"health\":\"true\""))
    {
        assert!(
            Instant::now() < deadline,
            "etcd never became healthy with the rendered flags:\n{}",
            std::fs::read_to_string(&etcd_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The API server with its rendered flags and the Secrets' files.
    let deployment = r.find("Deployment", "meridian-apiserver");
    let api_pod = &deployment["spec"]["template"]["spec"];
    let api_args: Vec<String> = container_args(deployment)
        .iter()
        .map(|a| match a.as_str() {
            "--bind-address=0.0.0.0" => "--bind-address=127.0.0.1".into(),
            "--secure-port=6443" => "--secure-port=0".into(),
            a => remap(a),
        })
        .collect();
    write_mounts(api_pod, &api_args);
    let apiserver = Spawn::new(binary("federation-apiserver"))
        .args(&api_args)
        .env("RUST_LOG", "warn")
        .ready_line(LISTENING_LINE, Duration::from_secs(60))
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = apiserver.ready_value().expect("the address").to_string();

    // A write through the admin kubeconfig lands in the bundled etcd.
    let admin = r.find("Secret", "meridian-admin-kubeconfig")["stringData"]["kubeconfig"]
        .as_str()
        .expect("kubeconfig")
        .replace("https://127.0.0.1:443", &format!("https://{addr}"));
    let admin_path = root.join("admin.kubeconfig");
    std::fs::write(&admin_path, admin).unwrap();
    let kubectl = |args: &[&str]| {
        let out = Command::new(kubectl_path())
            .arg(format!("--kubeconfig={}", admin_path.display()))
            .args(args)
            .output()
            .expect("kubectl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    kubectl(&["create", "configmap", "in-etcd", "-n", "default"]);
    let etcdctl = meridian_e2e::etcd_path().with_file_name("etcdctl");
    let pki = root.join("etc/etcd/pki");
    let out = Command::new(etcdctl)
        .arg(format!("--endpoints=https://{client}"))
        .arg(format!("--cacert={}", pki.join("ca.crt").display()))
        .arg(format!("--cert={}", pki.join("tls.crt").display()))
        .arg(format!("--key={}", pki.join("tls.key").display()))
        .args(["get", "--keys-only", "--prefix", "/"])
        .output()
        .expect("etcdctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every key under the rendered prefix, the ConfigMap's among them.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let keys: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert!(keys.iter().all(|k| k.starts_with("/registry/")), "{keys:?}");
    assert!(
        keys.iter()
            .any(|k| k.ends_with("/configmaps/default/in-etcd")),
        "{keys:?}"
    );
    drop(apiserver);
}

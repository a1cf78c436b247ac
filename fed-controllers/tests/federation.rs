//! End-to-end against real `federation-apiserver` processes: one is the federation, a
//! second stands in as a member (it serves `/readyz`, `/version`, discovery, token auth
//! and TLS like a member; it has no nodes or pods, so capacity is not checked here —
//! that is the `cluster-sim` test below). Covers Ready, Unauthorized, TLSError, Offline
//! after the member dies, Events and the mass-failure ConfigMap; and, against a
//! `cluster-sim` member, node counts and capacity, then Offline after `ctl down`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use fed_api::common::NamespacedName;
use fed_api::{Cluster, ClusterSpec};
use fed_controllers::cluster::{self, ControllerConfig, conditions};
use fed_controllers::metrics::Metrics;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, ObjectReference, Secret};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::await_condition;
use meridian_runtime::events::{self, EventSpec, EventType, Recorder};
use meridian_runtime::metrics::Exposition as _;

/// A workspace binary beside this test's executable (target/<profile>/<name>), so the
/// test works whatever the target directory is.
fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(std::path::Path::parent)
        .map(|d| d.join(name))
        .expect("target directory")
}

fn apiserver_binary() -> PathBuf {
    let p = workspace_binary("federation-apiserver");
    assert!(
        p.exists(),
        "{} is missing: cargo build -p federation-apiserver",
        p.display()
    );
    p
}

/// A federation-apiserver process, killed on drop.
struct Server {
    child: Child,
    kubeconfig: PathBuf,
    dir: PathBuf,
}

impl Server {
    fn start(tag: &str) -> Server {
        let dir =
            std::env::temp_dir().join(format!("fed-controllers-e2e-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut child = Command::new(apiserver_binary())
            .args([
                "--secure-port=0".to_string(),
                format!("--data-dir={}", dir.display()),
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start federation-apiserver");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let kubeconfig = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("export KUBECONFIG=").map(PathBuf::from))
            .expect("federation-apiserver printed no KUBECONFIG line");
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            kubeconfig,
            dir,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn client(&self) -> kube::Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(cfg).expect("client")
    }

    /// (server URL, base64 CA bundle, admin token).
    fn credentials(&self) -> (String, String, String) {
        let kc = Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let cluster = kc.clusters[0].cluster.clone().expect("cluster");
        let user = serde_json::to_value(kc.auth_infos[0].auth_info.clone().expect("user"))
            .expect("user json");
        (
            cluster.server.expect("server"),
            cluster.certificate_authority_data.expect("ca data"),
            user["token"].as_str().expect("token").to_string(),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates a namespace; a server that printed its address may still be opening its store,
/// so connection-level errors are retried for a few seconds (API errors other than
/// AlreadyExists fail at once).
async fn ensure_namespace(fed: &kube::Client, ns: &str) {
    let api = Api::<Namespace>::all(fed.clone());
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut last = None;
    for _ in 0..50 {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(kube::Error::Api(s)) => panic!("creating namespace {ns}: {s:?}"),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("creating namespace {ns}: {last:?}");
}

/// The process's Event recorder, as `fed-controllers` makes it.
fn recorder(fed: &kube::Client, metrics: &Metrics) -> Recorder {
    Recorder::spawn(
        fed.clone(),
        cluster::events::COMPONENT,
        events::Settings::default(),
        metrics.events.clone(),
    )
}

/// The shared recorder against the real federation API: repeats of an Event raise the count
/// of the one written (a merge patch the server takes) instead of adding objects; another
/// message is another Event.
#[tokio::test]
async fn repeated_events_count_on_one_object() {
    let server = Server::start("events");
    let fed = server.client().await;
    ensure_namespace(&fed, "shop").await;
    let metrics = Metrics::new();
    let r = recorder(&fed, &metrics).for_component("meridian-workload-controller");
    let spec = |message: &str| EventSpec {
        regarding: ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            namespace: Some("shop".into()),
            name: Some("web".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        },
        type_: EventType::Warning,
        reason: "SyncFailed".into(),
        message: message.into(),
    };
    for _ in 0..3 {
        r.record(spec("creating in sim-1: refused"));
    }
    r.record(spec("creating in sim-2: refused"));
    let api: Api<Event> = Api::namespaced(fed, "shop");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while tokio::time::Instant::now() < deadline {
        let list = api.list(&ListParams::default()).await.expect("events");
        seen = list
            .items
            .iter()
            .map(|e| (e.message.clone().unwrap_or_default(), e.count.unwrap_or(0)))
            .collect();
        seen.sort();
        if seen
            == [
                ("creating in sim-1: refused".to_string(), 3),
                ("creating in sim-2: refused".to_string(), 1),
            ]
        {
            let e = &list.items[0];
            assert_eq!(
                e.reporting_component.as_deref(),
                Some("meridian-workload-controller")
            );
            assert_eq!(e.involved_object.name.as_deref(), Some("web"));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("events as last listed: {seen:?}");
}

fn condition(c: &Cluster, t: &str) -> Option<(String, String)> {
    let cond = conditions::find(c.status.as_ref()?.conditions.as_slice(), t)?;
    Some((cond.status.clone(), cond.reason.clone()))
}

async fn wait_cluster(api: &Api<Cluster>, name: &str, what: &str, f: impl Fn(&Cluster) -> bool) {
    let cond = move |c: Option<&Cluster>| c.is_some_and(&f);
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(api.clone(), name, cond),
    )
    .await
    .unwrap_or_else(|_| panic!("{name}: timed out waiting for {what}"))
    .expect("watch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_conditions_events_and_mass_failure() {
    let fed_server = Server::start("fed");
    let mut member = Server::start("member");
    let fed = fed_server.client().await;
    let (endpoint, ca, token) = member.credentials();
    let (_, wrong_ca, _) = fed_server.credentials();

    let ns = "meridian-system";
    ensure_namespace(&fed, ns).await;
    let secrets: Api<Secret> = Api::namespaced(fed.clone(), ns);
    for (name, tok) in [("good", token.as_str()), ("bad", "not-a-valid-token")] {
        let s = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            string_data: Some([("token".to_string(), tok.to_string())].into()),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &s)
            .await
            .expect("create secret");
    }
    let clusters: Api<Cluster> = Api::all(fed.clone());
    for (name, secret, ca) in [
        ("m1", "good", &ca),
        ("bad-token", "bad", &ca),
        ("bad-ca", "good", &wrong_ca),
    ] {
        let spec = ClusterSpec {
            api_endpoint: endpoint.clone(),
            ca_bundle: Some(ca.clone()),
            secret_ref: Some(NamespacedName {
                namespace: ns.into(),
                name: secret.into(),
            }),
            ..Default::default()
        };
        clusters
            .create(&PostParams::default(), &Cluster::new(name, spec))
            .await
            .expect("create cluster");
    }

    let mut config = ControllerConfig::default();
    config.settings.probe_period = Duration::from_millis(300);
    config.settings.probe_timeout = Duration::from_millis(300);
    config.settings.thresholds.failure = 2;
    let metrics = Arc::new(Metrics::new());
    let controller = tokio::spawn(cluster::run(
        fed.clone(),
        config,
        metrics.clone(),
        recorder(&fed, &metrics),
        Arc::new(AtomicBool::new(false)),
    ));

    wait_cluster(&clusters, "m1", "Ready=True with a version", |c| {
        condition(c, "Ready") == Some(("True".into(), "ProbeSucceeded".into()))
            && condition(c, "Offline").is_some_and(|o| o.0 == "False")
            && c.status
                .as_ref()
                .is_some_and(|s| s.kubernetes_version.is_some() && !s.api_enablements.is_empty())
    })
    .await;
    wait_cluster(&clusters, "bad-token", "Ready=False Unauthorized", |c| {
        condition(c, "Ready") == Some(("False".into(), "Unauthorized".into()))
    })
    .await;
    wait_cluster(&clusters, "bad-ca", "Ready=False TLSError", |c| {
        condition(c, "Ready") == Some(("False".into(), "TLSError".into()))
    })
    .await;

    // The member dies: m1 goes Offline (after the failure threshold), and with all three
    // members Offline the mass-failure guard engages.
    member.kill();
    wait_cluster(&clusters, "m1", "Offline=True", |c| {
        condition(c, "Offline").is_some_and(|o| o.0 == "True")
            && condition(c, "Ready").is_some_and(|r| r.0 == "False")
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(fed.clone(), ns);
    let massive = |cm: Option<&ConfigMap>| {
        cm.and_then(|c| c.data.as_ref()).is_some_and(|d| {
            d.get("massFailure").map(String::as_str) == Some("true")
                && d.get("offlineClusters").is_some_and(|o| o.contains("m1"))
        })
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(cms, "federation-status", massive),
    )
    .await
    .expect("mass failure ConfigMap in time")
    .expect("watch");

    // Events were written for the transitions (Events are best effort and asynchronous,
    // but by now the Ready one has long been sent).
    let events: Api<Event> = Api::namespaced(fed.clone(), "default");
    let list = events.list(&ListParams::default()).await.expect("events");
    assert!(
        list.items
            .iter()
            .any(|e| e.involved_object.name.as_deref() == Some("m1")
                && e.reason.as_deref() == Some("ClusterReady")),
        "no ClusterReady event for m1"
    );
    let text = metrics.encode();
    assert!(text.contains("result=\"Unauthorized\""), "{text}");
    controller.abort();
}

fn sim_binary() -> PathBuf {
    let p = workspace_binary("cluster-sim");
    assert!(
        p.exists(),
        "{} is missing: cargo build -p cluster-sim",
        p.display()
    );
    p
}

/// `(server, CA bundle, token)` of a context in a kubeconfig.
fn context_credentials(path: &std::path::Path, context: &str) -> (String, String, String) {
    let kc = Kubeconfig::read_from(path).expect("sim kubeconfig");
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.clone())
        .expect("context");
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.clone())
        .expect("cluster");
    let user_name = ctx.user.clone().expect("user");
    let user = kc
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .expect("user");
    let user = serde_json::to_value(user).expect("user json");
    (
        cluster.server.expect("server"),
        cluster.certificate_authority_data.expect("ca data"),
        user["token"].as_str().expect("token").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sim_member_capacity_and_offline() {
    let fed_server = Server::start("fed-sim");
    let dir = fed_server.dir.join("sim");
    std::fs::create_dir_all(&dir).expect("sim dir");
    let kubeconfig = dir.join("sim.kubeconfig");
    let mut sim = Command::new(sim_binary())
        .args(["--clusters", "1", "--nodes", "3", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start cluster-sim");
    let mut lines = BufReader::new(sim.stdout.take().expect("stdout")).lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("clusters ready")),
        "cluster-sim did not become ready"
    );
    std::thread::spawn(move || for _ in lines {});
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _sim = Kill(sim);

    let fed = fed_server.client().await;
    let (endpoint, ca, token) = context_credentials(&kubeconfig, "sim-1");
    let ns = "meridian-system";
    ensure_namespace(&fed, ns).await;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("sim-1".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        string_data: Some([("token".to_string(), token)].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(fed.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let clusters: Api<Cluster> = Api::all(fed.clone());
    let spec = ClusterSpec {
        api_endpoint: endpoint,
        ca_bundle: Some(ca),
        secret_ref: Some(NamespacedName {
            namespace: ns.into(),
            name: "sim-1".into(),
        }),
        ..Default::default()
    };
    clusters
        .create(&PostParams::default(), &Cluster::new("sim-1", spec))
        .await
        .expect("cluster");

    let mut config = ControllerConfig::default();
    config.settings.probe_period = Duration::from_millis(300);
    config.settings.probe_timeout = Duration::from_millis(300);
    config.settings.thresholds.failure = 2;
    let metrics = Arc::new(Metrics::new());
    let controller = tokio::spawn(cluster::run(
        fed.clone(),
        config,
        metrics.clone(),
        recorder(&fed, &metrics),
        Arc::new(AtomicBool::new(false)),
    ));

    // Three 8-CPU / 32Gi nodes (cluster-sim's defaults), all Ready.
    wait_cluster(
        &clusters,
        "sim-1",
        "Ready with 3/3 nodes and capacity",
        |c| {
            let Some(s) = c.status.as_ref() else {
                return false;
            };
            condition(c, "Ready").is_some_and(|r| r.0 == "True")
                && s.nodes
                    .as_ref()
                    .is_some_and(|n| n.total == 3 && n.ready == 3)
                && s.resource_summary.as_ref().is_some_and(|r| {
                    r.allocatable.cpu.as_deref() == Some("24")
                        && r.allocatable.memory.as_deref() == Some("96Gi")
                        && r.largest_free
                            .as_ref()
                            .is_some_and(|l| l.cpu.as_deref() == Some("8"))
                })
        },
    )
    .await;

    let out = Command::new(sim_binary())
        .args(["ctl", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["down", "sim-1"])
        .output()
        .expect("cluster-sim ctl down");
    assert!(
        out.status.success(),
        "ctl down: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_cluster(&clusters, "sim-1", "Offline=True after ctl down", |c| {
        condition(c, "Offline").is_some_and(|o| o.0 == "True")
            && condition(c, "Ready").is_some_and(|r| r.0 == "False")
    })
    .await;
    controller.abort();
}

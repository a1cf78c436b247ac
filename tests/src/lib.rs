//! Harness for end-to-end tests: starts the workspace's real binaries (federation-apiserver,
//! cluster-sim, fed-controllers, fed-scheduler, fedctl) as processes and hands out clients for them.
//! The binaries are the ones cargo built for this test run, found beside the test executable.

pub mod dns;
pub mod ha;
pub mod helm;
pub mod http;
pub mod process;
pub mod wire;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

pub use process::{Proc, ProcError, Spawn};

/// How long a started server may take to print its ready line (`fedctl up` starts several
/// processes and a fleet before it does).
const READY_WITHIN: Duration = Duration::from_secs(180);

/// The line federation-apiserver prints with its kubeconfig once it serves.
pub const KUBECONFIG_LINE: &str = "export KUBECONFIG=";
/// The line federation-apiserver prints with the address it serves on.
pub const LISTENING_LINE: &str = "federation-apiserver listening on https://";

/// federation-apiserver (`program`) on a free port with its data in `data_dir`, as the
/// harness and the benchmarks start it; environment, output and readiness are the caller's.
pub fn federation_apiserver(program: impl AsRef<std::ffi::OsStr>, data_dir: &Path) -> Spawn {
    Spawn::new(program)
        .arg("--secure-port=0")
        .arg(format!("--data-dir={}", data_dir.display()))
}

/// For the benchmarks: the federation-apiserver built beside the running executable,
/// [interruptible](Spawn::interruptible), serving from `data_dir` with the `extra` flags,
/// `RUST_LOG=warn` and its output in `<data_dir>/server.log`, once it printed `line`
/// ([`KUBECONFIG_LINE`] or [`LISTENING_LINE`]; [`Proc::ready_value`] has what follows).
pub fn start_federation_apiserver(
    data_dir: &Path,
    extra: &[String],
    line: &str,
) -> Result<Proc, ProcError> {
    std::fs::create_dir_all(data_dir).map_err(|source| ProcError::Output {
        path: data_dir.to_path_buf(),
        source,
    })?;
    federation_apiserver(process::sibling_binary("federation-apiserver")?, data_dir)
        .interruptible()
        .args(extra)
        .env("RUST_LOG", "warn")
        .output(data_dir.join("server.log"))
        .ready_line(line, READY_WITHIN)
        .spawn()
}

/// One federation-apiserver replica on etcd, on a port of its own that it keeps across
/// restarts (its kubeconfig names that port).
#[derive(Debug, Clone)]
pub struct EtcdApiServer {
    args: Vec<String>,
}

impl EtcdApiServer {
    /// A replica serving from `data_dir` on the etcd at `etcd_servers`; with
    /// `shared_credentials` (another replica's `pki` directory) it generates nothing and
    /// serves with that replica's CA and admin token, as a second replica does.
    pub fn new(data_dir: &Path, etcd_servers: &str, shared_credentials: Option<&Path>) -> Self {
        let port = crate::ha::free_addr().port();
        let mut args = vec![
            format!("--secure-port={port}"),
            format!("--data-dir={}", data_dir.display()),
            "--storage-backend=etcd".to_owned(),
            format!("--etcd-servers={etcd_servers}"),
        ];
        if let Some(dir) = shared_credentials {
            args.push(format!("--credentials-dir={}", dir.display()));
            args.push("--generate-credentials=false".to_owned());
        }
        Self { args }
    }

    /// Starts it (again) and waits until it serves; [`Proc::ready_value`] is the path of
    /// its admin kubeconfig.
    pub fn spawn(&self) -> Proc {
        spawn_until("federation-apiserver", &self.args, KUBECONFIG_LINE)
    }
}

/// The kubeconfig federation-apiserver wrote for `component` (`fed-scheduler` or
/// `fed-controllers`: its own least-privilege user) beside the admin kubeconfig
/// `admin_kubeconfig`; fails loudly when it is missing.
pub fn component_kubeconfig(admin_kubeconfig: &Path, component: &str) -> PathBuf {
    let path = admin_kubeconfig.with_file_name(format!("{component}.kubeconfig"));
    assert!(
        path.exists(),
        "federation-apiserver wrote no {}",
        path.display()
    );
    path
}

/// Path of a workspace binary built for this test run; fails loudly when it is missing.
pub fn binary(name: &str) -> PathBuf {
    process::sibling_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// `bin args` in its own process group with the test's `RUST_LOG` (default `warn`);
/// stderr goes to the test's.
fn spawn(bin: &str, args: &[String]) -> Spawn {
    Spawn::new(binary(bin))
        .args(args)
        .env("RUST_LOG", rust_log())
}

/// The test's `RUST_LOG`, default `warn`, for the processes it starts.
fn rust_log() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())
}

/// Starts `bin args` and waits for a stdout line starting with `ready_prefix`.
fn spawn_until(bin: &str, args: &[String], ready_prefix: &str) -> Proc {
    spawn(bin, args)
        .ready_line(ready_prefix, READY_WITHIN)
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A tool: the path in `$var` if set, else what the project's `tools/<script>` (run with
/// `args`) installs and prints. A test that needs it fails here, naming it, if it cannot be
/// installed.
pub fn tool_path(var: &str, script: &str, args: &[&str], what: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    let out = script_output(script, args).unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "{what} is required: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn script_output(name: &str, args: &[&str]) -> std::io::Result<std::process::Output> {
    Command::new("bash")
        .arg(workspace_root().join("tools").join(name))
        .args(args)
        .output()
}

/// Runs the project script `tools/<name>`, failing loudly with its output; returns stdout.
pub fn run_script(name: &str, args: &[&str]) -> String {
    let out = script_output(name, args).unwrap_or_else(|e| panic!("running {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The full reference (`registry/name:tag`) of the image `name` in the `images.json` that
/// `tools/build-images.sh` wrote into `dir`; panics, naming what is missing, otherwise.
pub fn image_reference(dir: &Path, name: &str) -> String {
    let path = dir.join("images.json");
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let list: serde_json::Value = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    list.as_array()
        .into_iter()
        .flatten()
        .find(|i| i["name"] == name)
        .and_then(|i| i["reference"].as_str())
        .unwrap_or_else(|| panic!("images.json names no {name} image"))
        .to_string()
}

/// kubectl: `$KUBECTL`, or installed by tools/install-kubectl.sh.
pub fn kubectl_path() -> PathBuf {
    tool_path("KUBECTL", "install-kubectl.sh", &[], "kubectl")
}

/// etcd: `$ETCD`, or installed by tools/install-etcd.sh (etcdctl sits beside it).
pub fn etcd_path() -> PathBuf {
    tool_path("ETCD", "install-etcd.sh", &[], "etcd")
}

/// The python of a venv holding the official Kubernetes Python client: `$PYTHON_CLIENT`, or
/// installed by tools/install-python-client.sh.
pub fn python_client_path() -> PathBuf {
    tool_path(
        "PYTHON_CLIENT",
        "install-python-client.sh",
        &[],
        "the Kubernetes Python client",
    )
}

/// Runs a workspace binary, or `kubectl`, with `KUBECONFIG` and `HOME` set.
fn run_with(bin: &str, kubeconfig: &str, home: &Path, args: &[&str]) -> Output {
    let path = if bin == "kubectl" {
        kubectl_path()
    } else {
        binary(bin)
    };
    Command::new(path)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"))
}

/// The stdout of `bin args`, which must have succeeded.
fn succeeded(bin: &str, args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "{bin} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cluster-sim ctl <args>` against the fleet whose kubeconfig is `sim_kubeconfig`.
fn sim_ctl(sim_kubeconfig: &Path, args: &[&str], ok: impl FnOnce(&[&str]) -> String) {
    let kc = format!("--kubeconfig={}", sim_kubeconfig.display());
    let mut all = vec!["ctl", kc.as_str()];
    all.extend_from_slice(args);
    ok(&all);
}

/// `fedctl up` with a simulated fleet in a temporary directory, and kubectl, fedctl and
/// `cluster-sim ctl` run against it the way the README shows.
pub struct Up {
    /// The running `fedctl up`.
    pub proc: Proc,
    /// Where `fedctl up` keeps its state (`--data-dir`).
    pub data: PathBuf,
    dir: tempfile::TempDir,
    kubeconfig: String,
    sim_kubeconfig: PathBuf,
}

impl Up {
    /// Runs `fedctl up --clusters <clusters>` until it prints its kubeconfig.
    pub fn start(clusters: usize) -> Self {
        Self::start_with(clusters, &[])
    }

    /// Runs `fedctl up --clusters <clusters> <extra>` until it prints its kubeconfig.
    pub fn start_with(clusters: usize, extra: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let data = dir.path().join("data");
        let mut args = vec![
            "up".into(),
            format!("--clusters={clusters}"),
            "--port=0".into(),
            format!("--data-dir={}", data.display()),
        ];
        args.extend_from_slice(extra);
        let proc = spawn_until("fedctl", &args, KUBECONFIG_LINE);
        let kubeconfig = proc
            .ready_value()
            .expect("fedctl up's kubeconfig line")
            .to_string();
        let sim_kubeconfig = data.join("sim.kubeconfig");
        Up {
            proc,
            data,
            dir,
            kubeconfig,
            sim_kubeconfig,
        }
    }

    /// Runs a workspace binary, or `kubectl`, with the federation's kubeconfig.
    pub fn run(&self, bin: &str, args: &[&str]) -> Output {
        run_with(bin, &self.kubeconfig, self.dir.path(), args)
    }

    /// A kube client for `context` of the kubeconfig `fedctl up` wrote.
    pub async fn client(&self, context: &str) -> kube::Client {
        client(Path::new(&self.kubeconfig), Some(context)).await
    }

    /// Like [`Up::run`], requiring success; returns stdout.
    pub fn ok(&self, bin: &str, args: &[&str]) -> String {
        succeeded(bin, args, self.run(bin, args))
    }

    /// kubectl, requiring success.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.ok("kubectl", args)
    }

    /// `kubectl apply -f examples/web.yaml` and waits for its rollout; returns the file's path.
    pub fn apply_example(&self) -> &'static str {
        let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/web.yaml");
        self.kubectl(&["apply", "-f", example]);
        self.kubectl(&[
            "rollout",
            "status",
            "deploy/web",
            "-n",
            "shop",
            "--timeout=120s",
        ]);
        example
    }

    /// `cluster-sim ctl` on the fleet.
    pub fn ctl(&self, args: &[&str]) {
        sim_ctl(&self.sim_kubeconfig, args, |a| self.ok("cluster-sim", a));
    }
}

/// A federation API server, a cluster-sim fleet and a merged kubeconfig for both.
pub struct Env {
    /// Scratch directory (data dirs, kubeconfigs).
    pub dir: tempfile::TempDir,
    /// The API server.
    pub apiserver: Proc,
    /// The fleet.
    pub sim: Proc,
    /// Federation kubeconfig.
    pub federation_kubeconfig: PathBuf,
    /// Fleet kubeconfig (contexts sim-1..).
    pub sim_kubeconfig: PathBuf,
    /// `KUBECONFIG` value merging both (federation first: its context is current).
    pub merged: String,
}

impl Env {
    /// Starts the API server and a fleet with `sim_args`.
    pub fn start(sim_args: &[&str]) -> Self {
        Self::start_serving(sim_args, &[])
    }

    /// [`Env::start`] for a test that runs no controllers: the API server's `MemberCleanup`
    /// admission is off, so a deleted workload goes at once rather than wait for the
    /// workload controller to clean its members up.
    pub fn start_without_controllers(sim_args: &[&str]) -> Self {
        Self::start_serving(sim_args, &["--disable-admission-plugins=MemberCleanup"])
    }

    fn start_serving(sim_args: &[&str], apiserver_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("federation");
        let apiserver = federation_apiserver(binary("federation-apiserver"), &data)
            .args(apiserver_args)
            .env("RUST_LOG", rust_log())
            .ready_line(KUBECONFIG_LINE, READY_WITHIN)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        Self::start_with(dir, apiserver, sim_args)
    }

    /// A fleet with `sim_args` beside `apiserver`, already serving (it printed its
    /// kubeconfig line) from a data directory in `dir`.
    pub fn start_with(dir: tempfile::TempDir, apiserver: Proc, sim_args: &[&str]) -> Self {
        let federation_kubeconfig =
            PathBuf::from(apiserver.ready_value().expect("kubeconfig line"));
        let sim_kubeconfig = dir.path().join("sim.kubeconfig");
        let mut args: Vec<String> = sim_args.iter().map(|s| s.to_string()).collect();
        args.push(format!("--kubeconfig-out={}", sim_kubeconfig.display()));
        let sim = spawn_until("cluster-sim", &args, "admin API:");
        let merged = format!(
            "{}:{}",
            federation_kubeconfig.display(),
            sim_kubeconfig.display()
        );
        Self {
            dir,
            apiserver,
            sim,
            federation_kubeconfig,
            sim_kubeconfig,
            merged,
        }
    }

    /// Runs a workspace binary with `KUBECONFIG` set to the merged kubeconfig.
    pub fn run(&self, bin: &str, args: &[&str]) -> Output {
        run_with(bin, &self.merged, self.dir.path(), args)
    }

    /// `kubectl rollout status` of `target` (like `deploy/web`) in `namespace`, which
    /// must complete within two minutes.
    pub fn rollout_status(&self, target: &str, namespace: &str) {
        self.ok(
            "kubectl",
            &[
                "rollout",
                "status",
                target,
                "-n",
                namespace,
                "--timeout=120s",
            ],
        );
    }

    /// Like [`Env::run`], requiring success; returns stdout.
    pub fn ok(&self, bin: &str, args: &[&str]) -> String {
        succeeded(bin, args, self.run(bin, args))
    }

    /// Writes `text` to `file` in the scratch directory and `kubectl apply`s it.
    pub fn apply(&self, file: &str, text: &str) {
        let path = self.dir.path().join(file);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {file}: {e}"));
        self.ok(
            "kubectl",
            &["apply", "-f", path.to_str().expect("utf-8 path")],
        );
    }

    /// `kubectl get <kind> <name> -n <namespace> -o jsonpath=<path>` in `context`, or
    /// kubectl's error (`NotFound` when absent).
    pub fn member_get(
        &self,
        context: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        path: &str,
    ) -> Result<String, String> {
        let out = self.run(
            "kubectl",
            &[
                "--context",
                context,
                "get",
                kind,
                name,
                "-n",
                namespace,
                "-o",
                &format!("jsonpath={path}"),
            ],
        );
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// `cluster-sim ctl ...` against this fleet.
    pub fn ctl(&self, args: &[&str]) {
        sim_ctl(&self.sim_kubeconfig, args, |a| self.ok("cluster-sim", a));
    }

    /// A kube client for the federation.
    pub async fn federation(&self) -> kube::Client {
        client(&self.federation_kubeconfig, None).await
    }

    /// A kube client for one simulated cluster.
    pub async fn member(&self, context: &str) -> kube::Client {
        client(&self.sim_kubeconfig, Some(context)).await
    }

    /// Joins `clusters` with `fedctl join` and waits until each one's status shows its
    /// capacity, APIs and `ready_nodes` Ready nodes: the scheduler divides by capacity, so
    /// a cluster whose status is still partial would be left out of the first placement.
    pub async fn join_with_capacity(&self, clusters: &[&str], ready_nodes: i64) {
        for c in clusters {
            let out = self.ok("fedctl", &["join", c, "--wait-seconds", "60"]);
            assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
        }
        self.wait_for_capacity(clusters, ready_nodes).await;
    }

    /// Waits until each of `clusters` (joined) shows its capacity, APIs and `ready_nodes`
    /// Ready nodes in its status.
    pub async fn wait_for_capacity(&self, clusters: &[&str], ready_nodes: i64) {
        let api: kube::Api<fed_api::Cluster> = kube::Api::all(self.federation().await);
        for c in clusters {
            wait_for(&api, c, "0", "capacity and APIs in status", |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.resource_summary.is_some()
                        && !s.api_enablements.is_empty()
                        && s.nodes.as_ref().is_some_and(|n| n.ready == ready_nodes)
                })
            })
            .await;
        }
    }

    /// Joins `clusters` with `fedctl join`, each reporting the custom resources of API
    /// `group` among its APIs, and waits until each is Ready.
    pub fn join_serving(&self, clusters: &[&str], group: &str) {
        for c in clusters {
            let out = self.ok(
                "fedctl",
                &[
                    "join",
                    c,
                    "--cluster-context",
                    c,
                    "--custom-resource-group",
                    group,
                    "--wait-seconds",
                    "60",
                ],
            );
            assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
        }
    }

    /// Applies `text` (which may define kinds in its own documents) with `kubectl apply`,
    /// again until it goes through: the server serves a new kind a moment after its
    /// definition is stored.
    pub async fn apply_once_served(&self, file: &str, text: &str) {
        let path = self.dir.path().join(file);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {file}: {e}"));
        let path = path.to_str().expect("utf-8 path").to_owned();
        eventually(
            &format!("{file} applied"),
            std::time::Duration::from_secs(30),
            || async { self.run("kubectl", &["apply", "-f", &path]) },
            |out| out.status.success(),
        )
        .await;
    }

    /// Starts fed-controllers against the federation, as its own user, with extra flags.
    pub fn controllers(&self, extra: &[&str]) -> Proc {
        let mut args = vec![format!(
            "--kubeconfig={}",
            component_kubeconfig(&self.federation_kubeconfig, "fed-controllers").display()
        )];
        args.extend(extra.iter().map(|s| s.to_string()));
        spawn("fed-controllers", &args)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts fed-scheduler against the federation, as its own user, with extra flags
    /// (metrics off unless `extra` says otherwise).
    pub fn scheduler(&self, extra: &[&str]) -> Proc {
        let mut args = vec![format!(
            "--kubeconfig={}",
            component_kubeconfig(&self.federation_kubeconfig, "fed-scheduler").display()
        )];
        if !extra
            .iter()
            .any(|a| a.starts_with("--metrics-bind-address"))
        {
            args.push("--metrics-bind-address=off".to_string());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        spawn("fed-scheduler", &args)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// lb-agent `n`'s address at `port`: `fedctl up` binds sim-n's agent to 127.0.1.n.
pub fn lb_agent(n: u8, port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 1, n], port))
}

/// `f`'s first `Some` within `limit`, polling every 100 ms (blocking); `None` when time ran
/// out.
pub fn poll_until_or<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// [`poll_until_or`], failing the test with `what` when time runs out.
pub fn poll_until<T>(limit: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_until_or(limit, f).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// A custom `Rollout` kind (`example.com/v1`, namespaced: replicas at `.spec.replicas`,
/// a pod template at `.spec.template`, ready replicas in its status), and the
/// ClusterPropagationPolicy that takes its definition to every member.
pub const ROLLOUT_KIND: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: rollouts.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: rollouts, singular: rollout, kind: Rollout}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              template: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              readyReplicas: {type: integer}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: rollout-kind}
spec:
  resourceSelectors:
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: rollouts.example.com}
"#;

/// Polls `get` until `pred` holds, failing with the last value after `within`.
pub async fn eventually<T: std::fmt::Debug, F, Fut>(
    what: &str,
    within: Duration,
    mut get: F,
    pred: impl Fn(&T) -> bool,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let v = get().await;
        if pred(&v) {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("{what}: not within {within:?}; last: {v:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits on a watch (from `rv`) until `pred` holds for the named object; fails with the
/// last version seen when the watch ends first.
pub async fn wait_for<K>(
    api: &kube::Api<K>,
    name: &str,
    rv: &str,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + 'static,
{
    use futures::TryStreamExt as _;
    let wp = kube::api::WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut last = None;
    let mut stream = Box::pin(api.watch(&wp, rv).await.expect("watch"));
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if let kube::api::WatchEvent::Added(o) | kube::api::WatchEvent::Modified(o) = ev {
            if pred(&o) {
                return o;
            }
            last = Some(o);
        }
    }
    panic!("watch on {name} ended waiting for {what}; last seen: {last:#?}");
}

/// A kube client for a kubeconfig context.
pub async fn client(path: &Path, context: Option<&str>) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let opts = kube::config::KubeConfigOptions {
        context: context.map(String::from),
        ..Default::default()
    };
    let cfg = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .expect("client config");
    kube::Client::try_from(cfg).expect("client")
}

//! Several replicas of the elected components (fed-scheduler, fed-controllers) against one
//! federation: starting them with names and metrics addresses, who holds each Lease and
//! since when, what each replica says on `/readyz` and `/metrics`, and a log of the writes
//! the members and the federation saw, to attribute them to a leader by time.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Resource;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::de::DeserializeOwned;

use crate::{Env, Proc};

/// The namespace of the components' Leases.
pub const LEASE_NAMESPACE: &str = "meridian-system";

/// A loopback address with a port free right now.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// One replica of an elected component.
pub struct Replica {
    /// Its name in the Lease.
    pub identity: String,
    /// The process.
    pub proc: Proc,
    /// Where it serves `/metrics` and `/readyz`.
    pub metrics: SocketAddr,
}

impl Replica {
    /// Starts `bin` (`fed-scheduler` or `fed-controllers`) against the federation API
    /// server `kubeconfig` points at, as `identity`, with `extra` flags.
    pub fn start(kubeconfig: &Path, bin: &str, identity: &str, extra: &[&str]) -> Self {
        let metrics = free_addr();
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--metrics-bind-address={metrics}"),
            format!("--leader-elect-identity={identity}"),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Self {
            identity: identity.to_string(),
            proc: crate::spawn(bin, &args)
                .spawn()
                .unwrap_or_else(|e| panic!("{e}")),
            metrics,
        }
    }

    /// `GET path` on its metrics address: status and body (`None`: not answering).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        crate::http::request(
            self.metrics,
            "GET",
            "localhost",
            path,
            Duration::from_secs(2),
        )
        .ok()
        .map(|r| (r.status, r.body))
    }

    /// Its `/readyz` body, once it answers (within 30 s).
    pub fn readyz(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((_, body)) = self.get("/readyz") {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{} does not answer on {}",
                self.identity,
                self.metrics
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The sum of the series of metric `name` whose labels include `labels` (0 when
    /// none is exported yet).
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, text) = self
            .get("/metrics")
            .unwrap_or_else(|| panic!("{} serves no /metrics", self.identity));
        metric(&text, name, labels)
    }
}

/// The sum of the series of `name` in an exposition whose labels include `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

/// What a Lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// Who holds it (empty: released).
    pub holder: String,
    /// How many times it changed hands.
    pub transitions: i32,
    /// When the holder took it, by the holder's clock (the start of its winning attempt).
    pub acquired: Option<SystemTime>,
}

/// Lease `meridian-system/<name>` (`None`: no Lease yet).
pub async fn lease(client: &kube::Client, name: &str) -> Option<LeaseState> {
    let api: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let l = api.get_opt(name).await.expect("reading the Lease")?;
    let spec = l.spec.unwrap_or_default();
    Some(LeaseState {
        holder: spec.holder_identity.unwrap_or_default(),
        transitions: spec.lease_transitions.unwrap_or(0),
        acquired: spec.acquire_time.map(|t| SystemTime::from(t.0)),
    })
}

/// Waits (polling every 50 ms, at most `within`) until Lease `name` is held by `holder`.
pub async fn wait_holder(
    client: &kube::Client,
    name: &str,
    holder: &str,
    within: Duration,
) -> LeaseState {
    let deadline = Instant::now() + within;
    loop {
        let now = lease(client, name).await;
        if let Some(l) = now.as_ref().filter(|l| l.holder == holder) {
            return l.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{name} not held by {holder} within {within:?}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `probe` every 50 ms until it returns `Some`, at most `within`.
pub async fn poll<T, F: Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A write somebody made, as a watcher saw it: an object created, deleted, or given a
/// new `metadata.generation` (its spec changed: status updates by the member's own
/// controllers do not count).
#[derive(Debug, Clone)]
pub struct Write {
    /// When the watch delivered it.
    pub seen: Instant,
    /// Where (`sim-1`, `federation`).
    pub place: String,
    /// `namespace/name`.
    pub object: String,
    /// `created`, `changed` or `deleted`.
    pub what: &'static str,
    /// The generation after the write.
    pub generation: i64,
}

/// Writes seen by the watchers started with [`WriteLog::watch`].
#[derive(Debug, Clone, Default)]
pub struct WriteLog {
    writes: Arc<Mutex<Vec<Write>>>,
}

impl WriteLog {
    /// Watches `api` (all of its objects) and logs the writes to them under `place`
    /// from now on, in a task that lives as long as the runtime.
    pub fn watch<K>(&self, api: Api<K>, place: &str)
    where
        K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
        K::DynamicType: Default,
    {
        let (log, place) = (self.writes.clone(), place.to_string());
        tokio::spawn(async move {
            let mut generations: HashMap<String, i64> = HashMap::new();
            let mut listed = false;
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = events.next().await {
                let Ok(ev) = ev else { continue };
                let (obj, deleted) = match ev {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
                    watcher::Event::Delete(o) => (o, true),
                    watcher::Event::InitDone => {
                        listed = true;
                        continue;
                    }
                    watcher::Event::Init => continue,
                };
                let meta = obj.meta();
                let key = format!(
                    "{}/{}",
                    meta.namespace.clone().unwrap_or_default(),
                    meta.name.clone().unwrap_or_default()
                );
                let generation = meta.generation.unwrap_or(0);
                let before = if deleted {
                    generations.remove(&key)
                } else {
                    generations.insert(key.clone(), generation)
                };
                let what = match (deleted, before) {
                    (true, _) => "deleted",
                    (false, None) => "created",
                    (false, Some(g)) if g != generation => "changed",
                    _ => continue,
                };
                // What the first list shows was written before the log began.
                if !listed {
                    continue;
                }
                crate::ha::push(
                    &log,
                    Write {
                        seen: Instant::now(),
                        place: place.clone(),
                        object: key,
                        what,
                        generation,
                    },
                );
            }
        });
    }

    /// The writes seen in `[from, to)`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<Write> {
        self.writes
            .lock()
            .expect("write log")
            .iter()
            .filter(|w| w.seen >= from && w.seen < to)
            .cloned()
            .collect()
    }

    /// Every write seen so far.
    pub fn all(&self) -> Vec<Write> {
        self.writes.lock().expect("write log").clone()
    }
}

fn push(log: &Mutex<Vec<Write>>, w: Write) {
    log.lock().expect("write log").push(w);
}

/// The `q`-quantile (0..=1) of `samples` by nearest rank.
pub fn quantile(samples: &[Duration], q: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    if s.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// cluster-sim's flags for [`Ha`]'s fleet: two clusters of two roomy nodes.
pub const SIM_ARGS: [&str; 5] = [
    "--clusters=2",
    "--nodes=2",
    "--node-cpu=8",
    "--node-memory=16Gi",
    "--ready-delay=0s",
];

/// The clusters of [`Ha`]'s fleet.
pub const CLUSTERS: [&str; 2] = ["sim-1", "sim-2"];

/// Controllers' flags that make a join quick.
const CONTROLLER_FLAGS: [&str; 4] = [
    "--probe-period=1s",
    "--probe-timeout=500ms",
    "--failure-threshold=2",
    "--workload-backoff-max=2s",
];

/// The app every [`Ha`] runs: `shop/web`, divided evenly over both clusters.
fn app(replicas: i32) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: shop}}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {{name: web, namespace: shop}}
spec:
  resourceSelectors:
  - {{apiVersion: apps/v1, kind: Deployment, name: web}}
  placement:
    clusterAffinity:
      clusterNames: [sim-1, sim-2]
    replicaScheduling: {{type: Divided, division: StaticWeight}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop, labels: {{app: web}}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}
"#
    )
}

/// Which elected component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// fed-scheduler.
    Scheduler,
    /// fed-controllers.
    Controllers,
}

impl Component {
    /// Its binary.
    pub fn binary(self) -> &'static str {
        match self {
            Component::Scheduler => "fed-scheduler",
            Component::Controllers => "fed-controllers",
        }
    }

    /// Its Lease (named after the binary).
    pub fn lease(self) -> &'static str {
        self.binary()
    }

    /// Its metrics prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Component::Scheduler => "meridian_scheduler",
            Component::Controllers => "meridian_controllers",
        }
    }

    fn extra(self) -> &'static [&'static str] {
        match self {
            Component::Scheduler => &[],
            Component::Controllers => &CONTROLLER_FLAGS,
        }
    }
}

/// A federation of two simulated clusters with two schedulers and two controllers, one
/// of each leading, running `shop/web`.
pub struct Ha {
    /// API server, fleet, kubeconfigs.
    pub env: Env,
    /// The federation.
    pub fed: kube::Client,
    /// The schedulers.
    pub schedulers: Vec<Replica>,
    /// The controllers.
    pub controllers: Vec<Replica>,
    /// The API servers' kubeconfigs: replicas take them in turn as they start.
    kubeconfigs: Vec<PathBuf>,
    started: usize,
}

/// One kill of a leader, timed.
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    /// When the leader was killed (and the change that needs a decision made).
    pub killed: Instant,
    /// When the survivor began the attempt that took the Lease (from its `acquireTime`;
    /// it wrote nothing before, and nothing on its behalf was sent before this).
    pub took_over: Instant,
    /// When the change's decision was seen written.
    pub decided: Instant,
    /// The Lease's transitions after the takeover.
    pub transitions: i32,
}

impl Failover {
    /// Kill to decision.
    pub fn latency(&self) -> Duration {
        self.decided - self.killed
    }
}

impl Ha {
    /// Starts everything, `a` of each component first (so it leads), and waits until the
    /// app runs with `replicas` replicas.
    pub async fn start(replicas: i32) -> Self {
        let env = Env::start(&SIM_ARGS);
        let kubeconfigs = vec![env.federation_kubeconfig.clone()];
        Self::start_in(env, kubeconfigs, replicas).await
    }

    /// Like [`Ha::start`], in `env` (started with [`SIM_ARGS`]), the replicas talking to
    /// the API servers of `kubeconfigs` in turn (the first of each component to the first).
    pub async fn start_in(env: Env, kubeconfigs: Vec<PathBuf>, replicas: i32) -> Self {
        let fed = env.federation().await;
        let mut ha = Ha {
            env,
            fed,
            schedulers: Vec::new(),
            controllers: Vec::new(),
            kubeconfigs,
            started: 0,
        };
        // The cluster controller must run for a join to finish.
        for c in [Component::Controllers, Component::Scheduler] {
            let first = ha.spawn(c);
            wait_holder(&ha.fed, c.lease(), &first, Duration::from_secs(60)).await;
            ha.spawn(c);
            if c == Component::Controllers {
                ha.env.join_with_capacity(&CLUSTERS, 2).await;
            }
        }
        ha.env.apply("app.yaml", &app(replicas));
        ha.env.rollout_status("deploy/web", "shop");
        ha
    }

    /// Starts another replica of `c` (named `<c>-<n>`); returns its identity.
    pub fn spawn(&mut self, c: Component) -> String {
        let kubeconfig = self.kubeconfigs[self.replicas(c).len() % self.kubeconfigs.len()].clone();
        self.spawn_on(c, &kubeconfig)
    }

    /// Starts another replica of `c` against the API server of `kubeconfig` (its admin
    /// kubeconfig: the replica runs with the component's own one beside it); returns its
    /// identity.
    pub fn spawn_on(&mut self, c: Component, kubeconfig: &Path) -> String {
        self.started += 1;
        let identity = format!("{}-{}", c.binary(), self.started);
        let kubeconfig = crate::component_kubeconfig(kubeconfig, c.binary());
        let r = Replica::start(&kubeconfig, c.binary(), &identity, c.extra());
        match c {
            Component::Scheduler => self.schedulers.push(r),
            Component::Controllers => self.controllers.push(r),
        }
        identity
    }

    /// The replicas of `c`.
    pub fn replicas(&self, c: Component) -> &[Replica] {
        match c {
            Component::Scheduler => &self.schedulers,
            Component::Controllers => &self.controllers,
        }
    }

    /// Takes the replica `identity` of `c` out of the list (to wait for it, or to drop and
    /// so stop it).
    pub fn remove(&mut self, c: Component, identity: &str) -> Replica {
        let replicas = self.replicas_mut(c);
        let i = replicas
            .iter()
            .position(|r| r.identity == identity)
            .unwrap_or_else(|| panic!("no replica {identity} of {c:?}"));
        replicas.remove(i)
    }

    fn replicas_mut(&mut self, c: Component) -> &mut Vec<Replica> {
        match c {
            Component::Scheduler => &mut self.schedulers,
            Component::Controllers => &mut self.controllers,
        }
    }

    /// The index of the replica of `c` holding its Lease, and the Lease's transitions.
    pub async fn leader(&self, c: Component) -> (usize, i32) {
        let l = lease(&self.fed, c.lease())
            .await
            .unwrap_or_else(|| panic!("no {} Lease", c.lease()));
        let i = self
            .replicas(c)
            .iter()
            .position(|r| r.identity == l.holder)
            .unwrap_or_else(|| panic!("{} holds {} but is not running", l.holder, c.lease()));
        (i, l.transitions)
    }

    /// Sets `shop/web`'s replicas.
    pub async fn scale(&self, replicas: i32) {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.fed.clone(), "shop");
        let patch = serde_json::json!({"spec": {"replicas": replicas}});
        api.patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("scaling shop/web");
    }

    /// Replicas the Placement of `shop/web` gives out.
    pub async fn placed(&self) -> i32 {
        let api: Api<fed_api::Placement> = Api::namespaced(self.fed.clone(), "shop");
        api.get_opt("deployment-web")
            .await
            .expect("reading the Placement")
            .map_or(0, |p| p.spec.dest_clusters.iter().map(|t| t.replicas).sum())
            .try_into()
            .expect("a workload's replicas fit in int32")
    }

    /// Replicas the members' copies of `shop/web` ask for.
    pub async fn in_members(&self) -> i32 {
        let mut sum = 0;
        for c in CLUSTERS {
            let api: Api<k8s_openapi::api::apps::v1::Deployment> =
                Api::namespaced(self.env.member(c).await, "shop");
            if let Some(d) = api.get_opt("web").await.expect("reading a member copy") {
                sum += d.spec.and_then(|s| s.replicas).unwrap_or(0);
            }
        }
        sum
    }

    /// Kills the leader of `c` with SIGKILL, scales `shop/web` to `replicas` at once, and
    /// waits (at most `within`) until that is decided: in the Placement for the
    /// scheduler, in the members' copies for the controllers. The killed replica is
    /// removed from the list; returns its identity too.
    pub async fn kill_leader(
        &mut self,
        c: Component,
        replicas: i32,
        within: Duration,
    ) -> (Failover, String) {
        let (i, _) = self.leader(c).await;
        let mut dead = self.replicas_mut(c).remove(i);
        dead.proc.kill();
        let (killed, killed_wall) = (Instant::now(), SystemTime::now());
        self.scale(replicas).await;
        let decided = poll("the next decision", within, || async {
            let now = match c {
                Component::Scheduler => self.placed().await,
                Component::Controllers => self.in_members().await,
            };
            (now == replicas).then(Instant::now)
        })
        .await;
        let survivor = self.replicas(c)[0].identity.clone();
        let l = wait_holder(&self.fed, c.lease(), &survivor, within).await;
        // Both clocks are this machine's: the wall-clock gap from the kill to the
        // acquire time is the same gap on the monotonic clock.
        let acquired = l.acquired.expect("an acquire time");
        let after_kill = acquired
            .duration_since(killed_wall)
            .unwrap_or(Duration::ZERO);
        (
            Failover {
                killed,
                took_over: killed + after_kill,
                decided,
                transitions: l.transitions,
            },
            dead.identity,
        )
    }
}

//! One pod's supervisor: prepares its volumes and bundles, runs each container with
//! `runc run` (output to a log file per container and attempt), probes it, restarts it by
//! the pod's `restartPolicy` with back-off, writes the pod's status from what the processes
//! do, and stops everything (SIGTERM, the grace period, SIGKILL, `runc delete`) when the
//! pod is deleted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::images::path_str;
use super::policy::{self, Probe, Tally};
use super::spec::{self, EnvSources, Launch};
use super::volumes::{self, DataMap, VolumeData};
use super::{Runc, RuncError, command, hosts, resolv};
use crate::controllers::Sim;
use crate::controllers::util::{self, condition, lock, merge_condition, str_at};

/// How often the supervisor looks at its processes and the pod.
const TICK: Duration = Duration::from_millis(250);
/// How long to wait before preparing a pod again (missing image, Secret, ...).
const PREPARE_RETRY: Duration = Duration::from_secs(2);
/// The API's default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE: u64 = 30;

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Startup,
    Readiness,
    Liveness,
}

struct ProbeRun {
    kind: Kind,
    probe: Probe,
    tally: Tally,
    next: Instant,
}

/// One container of the pod.
struct Ctr {
    name: String,
    image: String,
    image_id: String,
    id: String,
    bundle: PathBuf,
    log_dir: PathBuf,
    child: Option<tokio::process::Child>,
    restarts: u32,
    state: Value,
    last_state: Value,
    next_start: Option<Instant>,
    /// Terminated for good.
    done: Option<i32>,
    ready: bool,
    started: bool,
    probes: Vec<ProbeRun>,
}

/// Why a pod's containers cannot be created yet: a waiting reason and message.
struct Waiting(&'static str, String);

impl From<RuncError> for Waiting {
    fn from(e: RuncError) -> Self {
        Waiting("CreateContainerError", e.to_string())
    }
}

/// A supervised pod.
pub(crate) struct PodRun {
    sim: Arc<Sim>,
    rt: Arc<Runc>,
    key: String,
    uid: String,
    ip: String,
    host_ip: String,
    dir: PathBuf,
    /// The pod as last seen.
    pod: Value,
    last_written: Value,
    start_time: String,
    pull_failures: u32,
    /// The pod's network namespace, once created: its name and path.
    netns: Option<(String, String)>,
}

/// The status of a container that waits for the pod's init containers.
fn initializing(c: &Ctr) -> Value {
    json!({
        "name": c.name, "image": c.image, "imageID": "", "ready": false,
        "started": false, "restartCount": 0,
        "state": {"waiting": {"reason": "PodInitializing"}},
    })
}

/// Starts supervising `pod` (bound, with its address allocated) in a task.
pub(crate) fn spawn(
    sim: Arc<Sim>,
    rt: Arc<Runc>,
    key: &str,
    pod: Value,
    ip: String,
    host_ip: String,
) -> tokio::task::JoinHandle<()> {
    let uid = str_at(&pod, "/metadata/uid").unwrap_or("").to_string();
    let (ns, name) = crate::controllers::split_key(key);
    let dir = rt.pods_dir.join(format!("{ns}_{name}_{uid}"));
    let start_time = sim.now_rfc3339();
    let run = PodRun {
        sim,
        rt,
        key: key.to_string(),
        uid,
        ip,
        host_ip,
        dir,
        pod,
        last_written: Value::Null,
        start_time,
        pull_failures: 0,
        netns: None,
    };
    tokio::spawn(run.run())
}

fn i64_or(v: &Value, pointer: &str, default: u64) -> u64 {
    v.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or(default)
}

impl PodRun {
    /// The pod as cached now, if it is still ours and not being deleted.
    fn refresh(&mut self) -> bool {
        let def = &self.sim.kinds.pods;
        let (ns, name) = crate::controllers::split_key(&self.key);
        match self.sim.cache(def).get(&def.key(ns, name)) {
            Some(c) if *c.uid == *self.uid => {
                self.pod = c.value();
                super::api_access::add(&mut self.pod);
                !util::is_deleting(&self.pod)
            }
            _ => false,
        }
    }

    async fn run(mut self) {
        let (mut inits, mut ctrs) = loop {
            if !self.refresh() {
                self.cleanup(&mut []).await;
                return;
            }
            match self.prepare().await {
                Ok(c) => break c,
                Err(Waiting(reason, message)) => {
                    tracing::info!(pod = %self.key, reason, %message, "cannot start the pod's containers yet");
                    let status = self.waiting_status(reason, &message);
                    self.write(status).await;
                    tokio::time::sleep(PREPARE_RETRY).await;
                }
            }
        };
        // Init containers, one at a time in order, each to completion.
        let init_policy = policy::init_restart_policy(
            str_at(&self.pod, "/spec/restartPolicy").unwrap_or("Always"),
        )
        .to_string();
        for i in 0..inits.len() {
            self.start(&mut inits[i]).await;
            loop {
                if !self.refresh() {
                    self.cleanup(&mut inits).await;
                    return;
                }
                self.step(&mut inits[i], &init_policy).await;
                let status = self.init_status(&inits, &ctrs);
                self.write(status).await;
                match inits[i].done {
                    Some(0) => break,
                    // Failed for good (restartPolicy Never): the pod has failed; it stays
                    // so until it is deleted.
                    Some(_) => loop {
                        if !self.refresh() {
                            self.cleanup(&mut inits).await;
                            return;
                        }
                        tokio::time::sleep(TICK).await;
                    },
                    None => tokio::time::sleep(TICK).await,
                }
            }
        }
        for c in &mut ctrs {
            self.start(c).await;
        }
        let app_policy = str_at(&self.pod, "/spec/restartPolicy")
            .unwrap_or("Always")
            .to_string();
        loop {
            if !self.refresh() {
                self.cleanup(&mut ctrs).await;
                return;
            }
            for c in &mut ctrs {
                self.step(c, &app_policy).await;
            }
            let mut status = self.status(&ctrs);
            if !inits.is_empty() {
                status["initContainerStatuses"] = Value::Array(self.init_statuses(&inits));
            }
            self.write(status).await;
            tokio::time::sleep(TICK).await;
        }
    }

    /// The namespace's objects of `def`, by name.
    fn objects(&self, def: &meridian_apiserver::registry::ResourceDef) -> Vec<Value> {
        let ns = str_at(&self.pod, "/metadata/namespace").unwrap_or("");
        self.sim
            .cache(def)
            .list(&def.namespace_prefix(Some(ns)), None, None, 0, |_| true)
            .items
            .iter()
            .map(|c| c.value())
            .collect()
    }

    fn data_maps(
        &self,
        def: &meridian_apiserver::registry::ResourceDef,
        secret: bool,
    ) -> BTreeMap<String, DataMap> {
        self.objects(def)
            .iter()
            .map(|o| {
                let name = str_at(o, "/metadata/name").unwrap_or("").to_string();
                let mut m: DataMap = BTreeMap::new();
                for (k, v) in o
                    .get("data")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    let Some(s) = v.as_str() else { continue };
                    let bytes = if secret {
                        base64::engine::general_purpose::STANDARD
                            .decode(s)
                            .unwrap_or_default()
                    } else {
                        s.as_bytes().to_vec()
                    };
                    m.insert(k.clone(), bytes);
                }
                if !secret {
                    for (k, v) in o
                        .get("binaryData")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(b) = v
                            .as_str()
                            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
                        {
                            m.insert(k.clone(), b);
                        }
                    }
                }
                (name, m)
            })
            .collect()
    }

    /// The token of the pod's service account, from its token Secret.
    fn token(&self, secrets: &[Value]) -> Option<String> {
        let sa = str_at(&self.pod, "/spec/serviceAccountName").unwrap_or("default");
        secrets
            .iter()
            .filter(|s| {
                str_at(s, "/type") == Some(crate::controllers::serviceaccount::TOKEN_SECRET_TYPE)
            })
            .filter(|s| {
                str_at(
                    s,
                    "/metadata/annotations/kubernetes.io~1service-account.name",
                ) == Some(sa)
            })
            .find_map(|s| str_at(s, "/data/token"))
            .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Writes the pod's `/etc/hosts` and `/etc/resolv.conf` (once: like the kubelet's, they
    /// do not follow later changes of the pod); returns their paths.
    fn write_name_files(&self) -> Result<(PathBuf, PathBuf), RuncError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| RuncError::io(&self.dir, e))?;
        let hosts = self.dir.join("hosts");
        let text = hosts::hosts_file(&self.pod, &self.ip);
        std::fs::write(&hosts, text).map_err(|e| RuncError::io(&hosts, e))?;
        let resolv = self.dir.join("resolv.conf");
        let text = resolv::resolv_conf(&self.pod, self.rt.net.map(|n| n.dns()));
        std::fs::write(&resolv, text).map_err(|e| RuncError::io(&resolv, e))?;
        Ok((hosts, resolv))
    }

    /// Images, volumes and one bundle per container: (init containers, containers).
    async fn prepare(&mut self) -> Result<(Vec<Ctr>, Vec<Ctr>), Waiting> {
        let list = |field: &str| -> Vec<Value> {
            self.pod
                .pointer(&format!("/spec/{field}"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let init_count = list("initContainers").len();
        // Names are unique across both lists (the API validates it), so bundles, logs and
        // container ids by name do not collide.
        let containers: Vec<Value> = [list("initContainers"), list("containers")].concat();
        let mut images = Vec::new();
        for c in &containers {
            let image = str_at(c, "/image").unwrap_or("");
            match self.rt.images.get(image).await? {
                Some(u) => images.push(u),
                None => {
                    self.pull_failures += 1;
                    let reason = if self.pull_failures > 1 {
                        "ImagePullBackOff"
                    } else {
                        "ErrImagePull"
                    };
                    return Err(Waiting(
                        reason,
                        format!(
                            "image {image:?} is not in the image directory {}",
                            self.rt.config.image_dir.display()
                        ),
                    ));
                }
            }
        }
        let kinds = &self.sim.kinds;
        let secret_objs = self.objects(&kinds.secrets);
        let mut data = VolumeData {
            secrets: self.data_maps(&kinds.secrets, true),
            config_maps: self.data_maps(&kinds.config_maps, false),
            token: self.token(&secret_objs),
            claim_dirs: BTreeMap::new(),
        };
        // What kube-controller-manager's root CA publisher puts in every namespace.
        data.config_maps
            .entry("kube-root-ca.crt".into())
            .or_insert_with(|| {
                [(
                    "ca.crt".to_string(),
                    self.sim.config.ca_pem.clone().into_bytes(),
                )]
                .into()
            });
        let ns = str_at(&self.pod, "/metadata/namespace")
            .unwrap_or("")
            .to_string();
        for pvc in self.objects(&kinds.pvcs) {
            let name = str_at(&pvc, "/metadata/name").unwrap_or("").to_string();
            let dir = self
                .rt
                .config
                .state_dir
                .join("volumes")
                .join(&self.sim.config.name)
                .join(&ns)
                .join(format!(
                    "{name}_{}",
                    str_at(&pvc, "/metadata/uid").unwrap_or("")
                ));
            data.claim_dirs.insert(name, dir);
        }
        let planned = volumes::plan(&self.pod, &data)
            .map_err(|e| Waiting("ContainerCreating", e.to_string()))?;
        let paths = volumes::write(
            &self.dir.join("volumes"),
            &planned,
            spec::fs_group(&self.pod),
        )?;
        let str_maps =
            |m: &BTreeMap<String, DataMap>| -> BTreeMap<String, BTreeMap<String, String>> {
                m.iter()
                    .map(|(n, d)| {
                        (
                            n.clone(),
                            d.iter()
                                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                                .collect(),
                        )
                    })
                    .collect()
            };
        let api = *lock(&self.rt.api);
        let mut src = EnvSources {
            pod_ip: self.ip.clone(),
            host_ip: self.host_ip.clone(),
            api_host: api.map(|a| a.ip().to_string()).unwrap_or_default(),
            api_port: api.map_or(0, |a| a.port()),
            services: BTreeMap::new(),
            secrets: str_maps(&data.secrets),
            config_maps: str_maps(&data.config_maps),
        };
        for s in self.objects(&kinds.services) {
            let Some(ip) =
                str_at(&s, "/spec/clusterIP").filter(|ip| *ip != "None" && !ip.is_empty())
            else {
                continue;
            };
            let ports = s
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    (
                        str_at(p, "/name").unwrap_or("").to_string(),
                        p.get("port").and_then(Value::as_i64).unwrap_or(0),
                    )
                })
                .collect();
            src.services.insert(
                str_at(&s, "/metadata/name").unwrap_or("").to_string(),
                spec::ServiceInfo {
                    ip: ip.to_string(),
                    ports,
                },
            );
        }
        let (hosts_path, resolv_path) = self.write_name_files()?;
        let id_base = format!(
            "{}{:08x}",
            self.rt.prefix,
            util::fnv32a(self.uid.as_bytes())
        );
        let netns = self.network(&id_base).await?;
        let mut out = Vec::new();
        for (c, image) in containers.iter().zip(images) {
            let name = str_at(c, "/name").unwrap_or("").to_string();
            let env = spec::container_env(&self.pod, c, &src)
                .map_err(|e| Waiting("CreateContainerConfigError", e.to_string()))?;
            let process = spec::image_process(&image.config, image.entrypoint_len);
            let bundle = self.dir.join("containers").join(&name);
            std::fs::create_dir_all(&bundle).map_err(|e| RuncError::io(&bundle, e))?;
            let read_only = c
                .pointer("/securityContext/readOnlyRootFilesystem")
                .and_then(Value::as_bool)
                == Some(true);
            // A writable root is the container's own copy; a read-only one is shared.
            let root = if read_only {
                image.rootfs.clone()
            } else {
                let own = bundle.join("rootfs");
                if !own.exists() {
                    command::run("cp", &["-a", &path_str(&image.rootfs), &path_str(&own)]).await?;
                }
                own
            };
            let launch = Launch {
                args: spec::command_line(&process, c, &env),
                env,
                cwd: str_at(c, "/workingDir").map_or(process.cwd.clone(), str::to_string),
                user: spec::user(&self.pod, c, &process),
                additional_gids: spec::additional_gids(&self.pod),
                root: path_str(&root),
                read_only,
                mounts: {
                    let mut m = volumes::mounts(c, &planned, &paths);
                    m.push(spec::Mount {
                        source: path_str(&hosts_path),
                        destination: "/etc/hosts".into(),
                        read_only: true,
                    });
                    m.push(spec::Mount {
                        source: path_str(&resolv_path),
                        destination: "/etc/resolv.conf".into(),
                        read_only: true,
                    });
                    m
                },
                hostname: hosts::pod_hostname(&self.pod),
                netns: netns.clone(),
            };
            let cfg = spec::bundle_config(&image.config, &launch);
            let cfg_path = bundle.join("config.json");
            std::fs::write(&cfg_path, cfg.to_string()).map_err(|e| RuncError::io(&cfg_path, e))?;
            let log_dir = self.dir.join("logs").join(&name);
            std::fs::create_dir_all(&log_dir).map_err(|e| RuncError::io(&log_dir, e))?;
            let probes = [
                (Kind::Startup, "startupProbe"),
                (Kind::Readiness, "readinessProbe"),
                (Kind::Liveness, "livenessProbe"),
            ]
            .into_iter()
            .filter_map(|(kind, field)| {
                Probe::of(c, field).map(|probe| ProbeRun {
                    kind,
                    probe,
                    tally: Tally::default(),
                    next: Instant::now(),
                })
            })
            .collect();
            out.push(Ctr {
                id: format!("{id_base}-{name}"),
                image: str_at(c, "/image").unwrap_or("").to_string(),
                image_id: format!("{}@{}", str_at(c, "/image").unwrap_or(""), image.digest),
                name,
                bundle,
                log_dir,
                child: None,
                restarts: 0,
                state: json!({"waiting": {"reason": "ContainerCreating"}}),
                last_state: json!({}),
                next_start: None,
                done: None,
                ready: false,
                started: false,
                probes,
            });
        }
        lock(&self.rt.log_dirs).insert(self.key.clone(), self.dir.join("logs"));
        let app = out.split_off(init_count);
        Ok((out, app))
    }

    /// The pod's network namespace (named `name`, like its containers), created on first
    /// use: its path.
    async fn network(&mut self, name: &str) -> Result<String, Waiting> {
        if let Some((_, path)) = &self.netns {
            return Ok(path.clone());
        }
        let net = self.rt.net.ok_or_else(|| {
            Waiting(
                "CreatePodSandboxError",
                "this cluster's fleet index has no sandbox network".to_string(),
            )
        })?;
        let ip = self.ip.parse().map_err(|_| {
            Waiting(
                "CreatePodSandboxError",
                format!("pod IP {:?} is not an IPv4 address", self.ip),
            )
        })?;
        let path = super::net::create_pod_netns(name, ip, net)
            .await
            .map_err(|e| Waiting("CreatePodSandboxError", e.to_string()))?;
        let path = path_str(&path);
        self.netns = Some((name.to_string(), path.clone()));
        Ok(path)
    }

    /// Starts (or restarts) one container.
    async fn start(&self, c: &mut Ctr) {
        let _ = command::run("runc", &["delete", "--force", &c.id]).await;
        let log = c.log_dir.join(format!("{}.log", c.restarts));
        let spawned = std::fs::File::create(&log)
            .and_then(|f| Ok((f.try_clone()?, f)))
            .and_then(|(out, err)| {
                tokio::process::Command::new("runc")
                    .args(["run", "--bundle", &path_str(&c.bundle), &c.id])
                    .stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .spawn()
            });
        c.next_start = None;
        c.ready = false;
        let now = Instant::now();
        c.started = !c.probes.iter().any(|p| p.kind == Kind::Startup);
        for p in &mut c.probes {
            p.tally = Tally::default();
            p.next = now + p.probe.initial_delay;
        }
        match spawned {
            Ok(child) => {
                lock(&self.rt.live).insert(c.id.clone());
                c.child = Some(child);
                c.state = json!({"running": {"startedAt": self.sim.now_rfc3339()}});
            }
            Err(e) => {
                tracing::warn!(pod = %self.key, container = %c.name, error = %e, "cannot start runc");
                c.state =
                    json!({"waiting": {"reason": "RunContainerError", "message": e.to_string()}});
                c.next_start = Some(now + policy::backoff(c.restarts + 1));
            }
        }
    }

    /// Signals a running container and waits up to `grace` for it to exit, then kills it.
    async fn stop(&self, c: &mut Ctr, grace: Duration) {
        let Some(child) = &mut c.child else { return };
        let _ = command::run("runc", &["kill", &c.id, "TERM"]).await;
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            let _ = command::run("runc", &["kill", &c.id, "KILL"]).await;
            let _ = child.wait().await;
        }
    }

    /// One look at a container: its exit, a due restart, due probes.
    async fn step(&self, c: &mut Ctr, policy: &str) {
        if let Some(child) = &mut c.child {
            if let Ok(Some(status)) = child.try_wait() {
                use std::os::unix::process::ExitStatusExt;
                let code = status
                    .code()
                    .or_else(|| status.signal().map(|s| 128 + s))
                    .unwrap_or(-1);
                c.child = None;
                c.ready = false;
                let _ = command::run("runc", &["delete", "--force", &c.id]).await;
                lock(&self.rt.live).remove(&c.id);
                let started = c
                    .state
                    .pointer("/running/startedAt")
                    .cloned()
                    .unwrap_or(Value::Null);
                let terminated = json!({"terminated": {
                    "exitCode": code, "reason": policy::exit_reason(code),
                    "startedAt": started, "finishedAt": self.sim.now_rfc3339(),
                    "containerID": format!("runc://{}", c.id),
                }});
                if policy::restarts(policy, code) {
                    let wait = policy::backoff(c.restarts + 1);
                    c.last_state = terminated;
                    c.state = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!(
                        "back-off {}s restarting failed container={} pod={}", wait.as_secs(), c.name,
                        crate::controllers::split_key(&self.key).1)}});
                    c.next_start = Some(Instant::now() + wait);
                } else {
                    c.state = terminated;
                    c.done = Some(code);
                }
                return;
            }
        } else if c.next_start.is_some_and(|t| Instant::now() >= t) {
            c.restarts += 1;
            self.start(c).await;
            return;
        }
        if c.child.is_none() {
            return;
        }
        let now = Instant::now();
        let mut kill = false;
        for i in 0..c.probes.len() {
            let p = &c.probes[i];
            if now < p.next
                || (p.kind != Kind::Startup && !c.started)
                || (p.kind == Kind::Startup && c.started)
            {
                continue;
            }
            let ok = super::probe::check(&p.probe.check, &self.ip, &c.id, p.probe.timeout).await;
            let p = &mut c.probes[i];
            p.next = Instant::now() + p.probe.period;
            match (p.kind, p.tally.record(ok, &p.probe)) {
                (Kind::Startup, Some(true)) => c.started = true,
                (Kind::Readiness, Some(r)) => c.ready = r,
                (Kind::Startup | Kind::Liveness, Some(false)) => kill = true,
                _ => {}
            }
        }
        if c.started && !c.probes.iter().any(|p| p.kind == Kind::Readiness) {
            c.ready = true;
        }
        if kill {
            tracing::info!(pod = %self.key, container = %c.name, "probe failed; restarting the container");
            let grace = i64_or(
                &self.pod,
                "/spec/terminationGracePeriodSeconds",
                DEFAULT_GRACE,
            );
            self.stop(c, Duration::from_secs(grace)).await;
        }
    }

    fn container_statuses(&self, ctrs: &[Ctr]) -> Vec<Value> {
        ctrs.iter()
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image, "imageID": c.image_id,
                    "containerID": format!("runc://{}", c.id),
                    "ready": c.ready, "started": c.child.is_some() && c.started,
                    "restartCount": c.restarts, "state": c.state, "lastState": c.last_state,
                })
            })
            .collect()
    }

    fn base_status(
        &self,
        phase: &str,
        ready: bool,
        statuses: Vec<Value>,
        reason: Option<&str>,
    ) -> Value {
        self.status_with(phase, true, ready, statuses, reason)
    }

    /// The pod's status; `reason` is that of the false conditions.
    fn status_with(
        &self,
        phase: &str,
        initialized: bool,
        ready: bool,
        statuses: Vec<Value>,
        reason: Option<&str>,
    ) -> Value {
        let now = self.sim.now_rfc3339();
        let cond = |t: &str, s: bool, why: Option<&str>| {
            merge_condition(
                condition(&self.pod, t),
                t,
                if s { "True" } else { "False" },
                why.filter(|_| !s),
                None,
                &now,
                false,
            )
        };
        let init_reason = if initialized {
            None
        } else {
            Some("ContainersNotInitialized")
        };
        json!({
            "phase": phase,
            "podIP": self.ip, "podIPs": [{"ip": self.ip}],
            "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
            "startTime": self.start_time,
            "conditions": [
                cond("PodReadyToStartContainers", true, None),
                cond("Initialized", initialized, init_reason),
                cond("Ready", ready, init_reason.or(reason)),
                cond("ContainersReady", ready, init_reason.or(reason)),
                cond("PodScheduled", true, None),
            ],
            "containerStatuses": statuses,
        })
    }

    /// The status while the containers cannot be created.
    fn waiting_status(&self, reason: &str, message: &str) -> Value {
        let statuses = self
            .pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                json!({
                    "name": str_at(c, "/name").unwrap_or(""), "image": str_at(c, "/image").unwrap_or(""),
                    "imageID": "", "ready": false, "started": false, "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": message}},
                })
            })
            .collect();
        self.base_status("Pending", false, statuses, Some("ContainersNotReady"))
    }

    /// The status while init containers run: `Pending` (`Failed` once one failed for
    /// good), the containers waiting `PodInitializing`.
    fn init_status(&self, inits: &[Ctr], ctrs: &[Ctr]) -> Value {
        let failed = inits.iter().any(|c| c.done.is_some_and(|code| code != 0));
        let mut status = self.status_with(
            if failed { "Failed" } else { "Pending" },
            false,
            false,
            ctrs.iter().map(initializing).collect(),
            Some("ContainersNotReady"),
        );
        status["initContainerStatuses"] = Value::Array(self.init_statuses(inits));
        status
    }

    /// `initContainerStatuses`: those not started yet wait `PodInitializing`, and one that
    /// completed counts as ready, as the kubelet reports them.
    fn init_statuses(&self, inits: &[Ctr]) -> Vec<Value> {
        self.container_statuses(inits)
            .into_iter()
            .zip(inits)
            .map(|(mut s, c)| {
                let not_started = c.child.is_none()
                    && c.done.is_none()
                    && c.state.pointer("/waiting/reason") == Some(&json!("ContainerCreating"));
                if not_started {
                    return initializing(c);
                }
                s["ready"] = json!(c.done == Some(0));
                s
            })
            .collect()
    }

    /// The status from the containers' states.
    fn status(&self, ctrs: &[Ctr]) -> Value {
        let all_done = ctrs.iter().all(|c| c.done.is_some());
        let phase = if !all_done {
            "Running"
        } else if ctrs.iter().all(|c| c.done == Some(0)) {
            "Succeeded"
        } else {
            "Failed"
        };
        let ready = !all_done && ctrs.iter().all(|c| c.ready);
        let reason = match phase {
            "Succeeded" => "PodCompleted",
            "Failed" => "PodFailed",
            _ => "ContainersNotReady",
        };
        self.base_status(phase, ready, self.container_statuses(ctrs), Some(reason))
    }

    /// Writes the pod's status when it changed.
    async fn write(&mut self, status: Value) {
        if status == self.last_written {
            return;
        }
        let written = self.sim.write_pod_status(&self.key, &status).await;
        match written {
            Ok(_) => self.last_written = status,
            Err(e) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(pod = %self.key, error = %e, "writing the pod's status failed")
            }
        }
    }

    /// Stops every container (SIGTERM, grace period, SIGKILL), deletes them and the pod's
    /// directory.
    async fn cleanup(&self, ctrs: &mut [Ctr]) {
        let grace = self
            .pod
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| {
                i64_or(
                    &self.pod,
                    "/spec/terminationGracePeriodSeconds",
                    DEFAULT_GRACE,
                )
            });
        let grace = Duration::from_secs(grace);
        futures::future::join_all(ctrs.iter_mut().map(|c| {
            let this = &*self;
            async move { this.stop(c, grace).await }
        }))
        .await;
        for c in ctrs.iter() {
            let _ = command::run("runc", &["delete", "--force", &c.id]).await;
            lock(&self.rt.live).remove(&c.id);
        }
        lock(&self.rt.log_dirs).remove(&self.key);
        if let Some((name, _)) = &self.netns {
            super::net::remove_pod_netns(name).await;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pod = %self.key, error = %e, "cannot remove the pod's directory");
        }
    }
}

//! What a container runs, as pure functions of the pod: its environment (with the downward
//! API and Service variables), `$(VAR)` expansion, its command line, its user, and the runc
//! bundle `config.json` built from the image's.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::controllers::util::str_at;

/// What the kubelet reads from outside the pod spec to fill in a container's environment.
#[derive(Clone, Debug, Default)]
pub(crate) struct EnvSources {
    /// The pod's IP.
    pub(crate) pod_ip: String,
    /// The node's IP.
    pub(crate) host_ip: String,
    /// `host:port` of the cluster's API server (`KUBERNETES_SERVICE_*`).
    pub(crate) api_host: String,
    /// The API server's port.
    pub(crate) api_port: u16,
    /// Services of the pod's namespace at pod start, by name.
    pub(crate) services: BTreeMap<String, ServiceInfo>,
    /// Secrets of the namespace: name → key → decoded value.
    pub(crate) secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// ConfigMaps of the namespace: name → key → value.
    pub(crate) config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

/// What a Service contributes to a pod's environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServiceInfo {
    /// Its cluster IP.
    pub(crate) ip: String,
    /// Its ports as `(name, port)`, in order.
    pub(crate) ports: Vec<(String, i64)>,
}

/// Why a container cannot be started yet (the kubelet's `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfigError {
    /// An env var names a missing Secret or key.
    #[error("secret {0:?} not found")]
    SecretMissing(String),
    /// An env var names a missing ConfigMap or key.
    #[error("configmap {0:?} not found")]
    ConfigMapMissing(String),
    /// A volume names a PersistentVolumeClaim that does not exist.
    #[error("persistentvolumeclaim {0:?} not found")]
    ClaimMissing(String),
    /// A `fieldRef` this runtime does not resolve.
    #[error("unsupported fieldRef {0:?}")]
    UnsupportedField(String),
}

/// `NAME` as a Service env var prefix: upper case, `-` → `_` (as the kubelet writes it).
fn service_env_name(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// Expands `$(VAR)` references from `env` as Kubernetes does: `$$` is an escaped `$`, a
/// reference to an undefined variable is left as written.
pub(crate) fn expand(input: &str, env: &[(String, String)]) -> String {
    let lookup = |name: &str| env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(')
            && let Some(end) = tail.find(')')
        {
            let name = &tail[..end];
            match lookup(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment, in the kubelet's order: the Service variables, then
/// `envFrom`, then the container's `env` (each expanded against the variables before it;
/// later entries win).
pub(crate) fn container_env(
    pod: &Value,
    container: &Value,
    src: &EnvSources,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut env: Vec<(String, String)> = Vec::new();
    if !src.api_host.is_empty() {
        let port = src.api_port.to_string();
        env.push(("KUBERNETES_SERVICE_HOST".into(), src.api_host.clone()));
        env.push(("KUBERNETES_SERVICE_PORT".into(), port.clone()));
        env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), port));
    }
    let links = pod
        .pointer("/spec/enableServiceLinks")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    for (name, ServiceInfo { ip, ports }) in &src.services {
        if name == "kubernetes" || !links {
            continue;
        }
        let n = service_env_name(name);
        env.push((format!("{n}_SERVICE_HOST"), ip.clone()));
        if let Some((_, port)) = ports.first() {
            env.push((format!("{n}_SERVICE_PORT"), port.to_string()));
        }
        for (pname, port) in ports.iter().filter(|p| !p.0.is_empty()) {
            env.push((
                format!("{n}_SERVICE_PORT_{}", service_env_name(pname)),
                port.to_string(),
            ));
        }
    }
    env.extend(env_from(container, src)?);
    for e in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = e.get("name").and_then(Value::as_str) else {
            continue;
        };
        let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
            expand(v, &env)
        } else if let Some(from) = e.get("valueFrom") {
            match value_from(pod, from, src)? {
                Some(v) => v,
                None => continue,
            }
        } else {
            String::new()
        };
        env.push((name.to_string(), value));
    }
    Ok(env)
}

/// The variables of the container's `envFrom`, in order: every key of each ConfigMap or
/// Secret with the entry's `prefix`. A missing source is an error unless `optional`; a key
/// that cannot be a variable name (empty, or with `=`) is skipped, as the kubelet skips
/// invalid keys.
fn env_from(container: &Value, src: &EnvSources) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for e in container
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let prefix = e.get("prefix").and_then(Value::as_str).unwrap_or("");
        let (r, maps, missing): (_, _, fn(String) -> ConfigError) =
            if let Some(r) = e.get("configMapRef") {
                (r, &src.config_maps, ConfigError::ConfigMapMissing)
            } else if let Some(r) = e.get("secretRef") {
                (r, &src.secrets, ConfigError::SecretMissing)
            } else {
                continue;
            };
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        let optional = r.get("optional").and_then(Value::as_bool).unwrap_or(false);
        match maps.get(name) {
            Some(m) => out.extend(
                m.iter()
                    .map(|(k, v)| (format!("{prefix}{k}"), v.clone()))
                    .filter(|(k, _)| !k.is_empty() && !k.contains('=')),
            ),
            None if optional => {}
            None => return Err(missing(name.to_string())),
        }
    }
    Ok(out)
}

/// One `valueFrom`: `None` for an optional reference that is missing.
fn value_from(pod: &Value, from: &Value, src: &EnvSources) -> Result<Option<String>, ConfigError> {
    if let Some(f) = from.get("fieldRef") {
        let path = f.get("fieldPath").and_then(Value::as_str).unwrap_or("");
        let v = match path {
            "metadata.name" => str_at(pod, "/metadata/name").unwrap_or(""),
            "metadata.namespace" => str_at(pod, "/metadata/namespace").unwrap_or(""),
            "metadata.uid" => str_at(pod, "/metadata/uid").unwrap_or(""),
            "spec.nodeName" => str_at(pod, "/spec/nodeName").unwrap_or(""),
            "spec.serviceAccountName" => {
                str_at(pod, "/spec/serviceAccountName").unwrap_or("default")
            }
            "status.podIP" => src.pod_ip.as_str(),
            "status.hostIP" => src.host_ip.as_str(),
            other => return Err(ConfigError::UnsupportedField(other.to_string())),
        };
        return Ok(Some(v.to_string()));
    }
    let key_ref = |r: &Value,
                   maps: &BTreeMap<String, BTreeMap<String, String>>,
                   missing: fn(String) -> ConfigError| {
        let name = r.get("name").and_then(Value::as_str).unwrap_or("");
        let key = r.get("key").and_then(Value::as_str).unwrap_or("");
        let optional = r.get("optional").and_then(Value::as_bool).unwrap_or(false);
        match maps.get(name).and_then(|m| m.get(key)) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(missing(name.to_string())),
        }
    };
    if let Some(r) = from.get("secretKeyRef") {
        return key_ref(r, &src.secrets, ConfigError::SecretMissing);
    }
    if let Some(r) = from.get("configMapKeyRef") {
        return key_ref(r, &src.config_maps, ConfigError::ConfigMapMissing);
    }
    Ok(None)
}

/// The image's side of a container: what `umoci unpack` put in the bundle's `process`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ImageProcess {
    /// Entrypoint followed by cmd.
    pub(crate) args: Vec<String>,
    /// How many of `args` are the entrypoint.
    pub(crate) entrypoint_len: usize,
    /// `KEY=VALUE`.
    pub(crate) env: Vec<String>,
    /// Working directory.
    pub(crate) cwd: String,
    /// User and group ids.
    pub(crate) uid: u32,
    /// Group id.
    pub(crate) gid: u32,
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v.and_then(Value::as_array).map(|a| {
        a.iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    })
}

/// The command line: the image's entrypoint and cmd, replaced by the container's `command`
/// (which also drops the image's cmd) and `args`, each expanded as Kubernetes does.
pub(crate) fn command_line(
    image: &ImageProcess,
    container: &Value,
    env: &[(String, String)],
) -> Vec<String> {
    let command = strings(container.get("command"));
    let args = strings(container.get("args"));
    let (entry, cmd) = image
        .args
        .split_at(image.entrypoint_len.min(image.args.len()));
    let ex = |v: Vec<String>| v.into_iter().map(|s| expand(&s, env)).collect::<Vec<_>>();
    match (command, args) {
        (Some(c), Some(a)) => [ex(c), ex(a)].concat(),
        (Some(c), None) => ex(c),
        (None, Some(a)) => [entry.to_vec(), ex(a)].concat(),
        (None, None) => [entry, cmd].concat(),
    }
}

/// The user a container runs as: container `securityContext` over the pod's, over the
/// image's.
pub(crate) fn user(pod: &Value, container: &Value, image: &ImageProcess) -> (u32, u32) {
    let id = |field: &str| {
        container
            .pointer(&format!("/securityContext/{field}"))
            .or_else(|| pod.pointer(&format!("/spec/securityContext/{field}")))
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    (
        id("runAsUser").unwrap_or(image.uid),
        id("runAsGroup").unwrap_or(image.gid),
    )
}

/// The groups a container's process has besides its own: the pod's `fsGroup` (which owns
/// the pod's volumes) and `supplementalGroups`, as the kubelet adds them.
pub(crate) fn additional_gids(pod: &Value) -> Vec<u32> {
    let ctx = pod.pointer("/spec/securityContext");
    let mut gids: Vec<u32> = ctx
        .and_then(|c| c.get("fsGroup"))
        .into_iter()
        .chain(
            ctx.and_then(|c| c.get("supplementalGroups"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .filter_map(Value::as_u64)
        .filter_map(|g| u32::try_from(g).ok())
        .collect();
    gids.sort_unstable();
    gids.dedup();
    gids
}

/// The pod's `fsGroup`: the group its volumes are given to.
pub(crate) fn fs_group(pod: &Value) -> Option<u32> {
    pod.pointer("/spec/securityContext/fsGroup")
        .and_then(Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
}

/// A bind mount into the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Host path.
    pub(crate) source: String,
    /// Path in the container.
    pub(crate) destination: String,
    /// Read-only.
    pub(crate) read_only: bool,
}

/// Everything the bundle's `config.json` needs besides the image's base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    /// Command line.
    pub(crate) args: Vec<String>,
    /// Environment, in order (later entries win).
    pub(crate) env: Vec<(String, String)>,
    /// Working directory.
    pub(crate) cwd: String,
    /// uid, gid.
    pub(crate) user: (u32, u32),
    /// Supplementary groups ([`additional_gids`]).
    pub(crate) additional_gids: Vec<u32>,
    /// Root filesystem path (absolute) and whether it is read-only.
    pub(crate) root: String,
    /// Whether the root is read-only.
    pub(crate) read_only: bool,
    /// Volume mounts.
    pub(crate) mounts: Vec<Mount>,
    /// The pod's name, as the container's hostname.
    pub(crate) hostname: String,
    /// The pod's network namespace (a path under `/run/netns`).
    pub(crate) netns: String,
}

/// Rewrites umoci's `config.json` for one container: its process, root, mounts, and the
/// pod's network namespace (shared by the pod's containers); no terminal.
pub(crate) fn bundle_config(base: &Value, launch: &Launch) -> Value {
    let mut cfg = base.clone();
    // Image env first, then the container's (a later duplicate wins in execve's view only
    // for some programs, so duplicates are dropped).
    let mut env: Vec<(String, String)> = cfg
        .pointer("/process/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in &launch.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    cfg["process"]["terminal"] = json!(false);
    cfg["process"]["args"] = json!(launch.args);
    cfg["process"]["env"] = json!(
        env.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    );
    cfg["process"]["cwd"] = json!(if launch.cwd.is_empty() {
        "/"
    } else {
        &launch.cwd
    });
    cfg["process"]["user"] = json!({"uid": launch.user.0, "gid": launch.user.1});
    if !launch.additional_gids.is_empty() {
        cfg["process"]["user"]["additionalGids"] = json!(launch.additional_gids);
    }
    cfg["root"] = json!({"path": launch.root, "readonly": launch.read_only});
    cfg["hostname"] = json!(launch.hostname);
    if let Some(ns) = cfg
        .pointer_mut("/linux/namespaces")
        .and_then(Value::as_array_mut)
    {
        ns.retain(|n| !matches!(n.get("type").and_then(Value::as_str), Some("network")));
        ns.push(json!({"type": "network", "path": launch.netns}));
    }
    let mut mounts = cfg
        .get("mounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for m in &launch.mounts {
        mounts.push(json!({
            "destination": m.destination, "type": "bind", "source": m.source,
            "options": ["rbind", if m.read_only { "ro" } else { "rw" }],
        }));
    }
    cfg["mounts"] = Value::Array(mounts);
    cfg
}

/// Reads the image side of umoci's `config.json` (its `process`); umoci writes entrypoint
/// and cmd together in `args`, so the entrypoint's length comes from the image config.
pub(crate) fn image_process(config: &Value, entrypoint_len: usize) -> ImageProcess {
    ImageProcess {
        args: strings(config.pointer("/process/args")).unwrap_or_default(),
        entrypoint_len,
        env: strings(config.pointer("/process/env")).unwrap_or_default(),
        cwd: str_at(config, "/process/cwd").unwrap_or("/").to_string(),
        uid: config
            .pointer("/process/user/uid")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0),
        gid: config
            .pointer("/process/user/gid")
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expansion_follows_kubernetes() {
        let e = env(&[("A", "1"), ("POD_IP", "127.10.0.2")]);
        for (input, want) in [
            ("$(A)", "1"),
            ("--bind=$(POD_IP):8443", "--bind=127.10.0.2:8443"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("a$b", "a$b"),
            ("$(A", "$(A"),
            ("$(A)$(A)", "11"),
            ("", ""),
        ] {
            assert_eq!(expand(input, &e), want, "{input}");
        }
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "n1", "securityContext": {"runAsUser": 1000}},
        })
    }

    #[test]
    fn env_has_downward_api_refs_and_services() {
        let mut src = EnvSources {
            pod_ip: "127.10.0.2".into(),
            api_host: "127.0.0.1".into(),
            api_port: 6443,
            ..Default::default()
        };
        src.services.insert(
            "my-db".into(),
            ServiceInfo {
                ip: "10.96.0.9".into(),
                ports: vec![("sql".into(), 5432)],
            },
        );
        src.secrets
            .entry("s".into())
            .or_default()
            .insert("k".into(), "secret!".into());
        let c = json!({"env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "ADDR", "value": "$(POD_IP):1"},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "O", "valueFrom": {"configMapKeyRef": {"name": "none", "key": "k", "optional": true}}},
        ]});
        let got = container_env(&pod(), &c, &src).unwrap();
        let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("127.0.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("6443"));
        assert_eq!(get("MY_DB_SERVICE_HOST"), Some("10.96.0.9"));
        assert_eq!(get("MY_DB_SERVICE_PORT"), Some("5432"));
        assert_eq!(get("MY_DB_SERVICE_PORT_SQL"), Some("5432"));
        assert_eq!(get("POD_IP"), Some("127.10.0.2"));
        assert_eq!(get("NS"), Some("ns"));
        assert_eq!(get("NODE"), Some("n1"));
        assert_eq!(get("ADDR"), Some("127.10.0.2:1"));
        assert_eq!(get("S"), Some("secret!"));
        assert_eq!(get("O"), None);

        let missing = json!({"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]});
        assert_eq!(
            container_env(&pod(), &missing, &src),
            Err(ConfigError::SecretMissing("gone".into()))
        );
        let mut no_links = pod();
        no_links["spec"]["enableServiceLinks"] = json!(false);
        let got = container_env(&no_links, &json!({}), &src).unwrap();
        assert!(got.iter().all(|(k, _)| !k.starts_with("MY_DB")));
    }

    #[test]
    fn env_from_config_maps_and_secrets() {
        let mut src = EnvSources::default();
        src.config_maps.insert(
            "cm".into(),
            [("GREETING", "hello"), ("bad=key", "x"), ("MODE", "cm")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        src.secrets.insert(
            "sec".into(),
            [("MODE".to_string(), "secret".to_string())].into(),
        );
        let c = json!({
            "envFrom": [
                {"configMapRef": {"name": "cm"}},
                {"secretRef": {"name": "sec"}},
                {"prefix": "DB_", "secretRef": {"name": "sec"}},
                {"configMapRef": {"name": "absent", "optional": true}},
            ],
            "env": [{"name": "SAY", "value": "$(GREETING) world"}, {"name": "GREETING", "value": "hi"}],
        });
        let got = container_env(&pod(), &c, &src).unwrap();
        // Later entries win, as in the container's environment.
        let get = |k: &str| {
            got.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("GREETING"), Some("hi"));
        assert_eq!(get("SAY"), Some("hello world"));
        assert_eq!(get("MODE"), Some("secret"));
        assert_eq!(get("DB_MODE"), Some("secret"));
        assert_eq!(get("bad=key"), None);
        for (from, err) in [
            (
                json!({"configMapRef": {"name": "absent"}}),
                ConfigError::ConfigMapMissing("absent".into()),
            ),
            (
                json!({"secretRef": {"name": "absent"}}),
                ConfigError::SecretMissing("absent".into()),
            ),
        ] {
            let c = json!({"envFrom": [from]});
            assert_eq!(container_env(&pod(), &c, &src), Err(err));
        }
    }

    #[test]
    fn command_line_overrides() {
        let image = ImageProcess {
            args: vec!["/bin/app".into(), "--default".into()],
            entrypoint_len: 1,
            ..Default::default()
        };
        let e = env(&[("X", "x")]);
        for (c, want) in [
            (json!({}), vec!["/bin/app", "--default"]),
            (json!({"args": ["--a=$(X)"]}), vec!["/bin/app", "--a=x"]),
            (json!({"command": ["/bin/other"]}), vec!["/bin/other"]),
            (
                json!({"command": ["/bin/other"], "args": ["$(X)"]}),
                vec!["/bin/other", "x"],
            ),
        ] {
            assert_eq!(command_line(&image, &c, &e), want, "{c}");
        }
    }

    #[test]
    fn user_precedence() {
        let image = ImageProcess {
            uid: 65532,
            gid: 65532,
            ..Default::default()
        };
        assert_eq!(user(&pod(), &json!({}), &image), (1000, 65532));
        let c = json!({"securityContext": {"runAsUser": 7, "runAsGroup": 8}});
        assert_eq!(user(&pod(), &c, &image), (7, 8));
        let bare = json!({"spec": {}});
        assert_eq!(user(&bare, &json!({}), &image), (65532, 65532));
    }

    #[test]
    fn fs_group_and_supplemental_groups() {
        let pod = json!({"spec": {"securityContext": {"fsGroup": 2000, "supplementalGroups": [3000, 2000]}}});
        assert_eq!(additional_gids(&pod), vec![2000, 3000]);
        assert_eq!(fs_group(&pod), Some(2000));
        let bare = json!({"spec": {}});
        assert!(additional_gids(&bare).is_empty());
        assert_eq!(fs_group(&bare), None);
    }

    #[test]
    fn bundle_joins_the_pod_network_and_mounts() {
        let base = json!({
            "process": {"terminal": true, "args": ["/bin/app"], "env": ["PATH=/bin", "A=image"], "cwd": "/", "user": {"uid": 1, "gid": 1}},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}]},
        });
        let launch = Launch {
            args: vec!["/bin/app".into(), "-v".into()],
            env: env(&[("A", "pod")]),
            cwd: "/work".into(),
            user: (7, 8),
            additional_gids: vec![],
            root: "/cache/rootfs".into(),
            read_only: true,
            mounts: vec![Mount {
                source: "/state/v".into(),
                destination: "/data".into(),
                read_only: false,
            }],
            hostname: "p".into(),
            netns: "/run/netns/msim-1-0-ab".into(),
        };
        let cfg = bundle_config(&base, &launch);
        assert_eq!(cfg["process"]["terminal"], json!(false));
        assert_eq!(cfg["process"]["args"], json!(["/bin/app", "-v"]));
        assert_eq!(cfg["process"]["env"], json!(["PATH=/bin", "A=pod"]));
        assert_eq!(cfg["process"]["cwd"], json!("/work"));
        assert_eq!(cfg["process"]["user"], json!({"uid": 7, "gid": 8}));
        let with_groups = bundle_config(
            &base,
            &Launch {
                additional_gids: vec![2000],
                ..launch.clone()
            },
        );
        assert_eq!(
            with_groups["process"]["user"],
            json!({"uid": 7, "gid": 8, "additionalGids": [2000]})
        );
        assert_eq!(
            cfg["root"],
            json!({"path": "/cache/rootfs", "readonly": true})
        );
        assert_eq!(
            cfg["linux"]["namespaces"],
            json!([{"type": "pid"}, {"type": "mount"}, {"type": "network", "path": "/run/netns/msim-1-0-ab"}])
        );
        let mounts = cfg["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1]["destination"], json!("/data"));
        assert_eq!(mounts[1]["options"], json!(["rbind", "rw"]));
    }
}

//! A pod's volumes on the host: what each holds (a pure plan from the pod spec and the
//! namespace's Secrets and ConfigMaps), written into the pod's directory before its
//! containers start, and the bind mounts each container gets.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::RuncError;
use super::spec::{ConfigError, Mount};
use crate::controllers::util::str_at;

/// Key → bytes, for one Secret or ConfigMap.
pub(crate) type DataMap = BTreeMap<String, Vec<u8>>;

/// What volumes read from outside the pod spec.
#[derive(Clone, Debug, Default)]
pub(crate) struct VolumeData {
    /// Secrets of the namespace by name.
    pub(crate) secrets: BTreeMap<String, DataMap>,
    /// ConfigMaps of the namespace by name.
    pub(crate) config_maps: BTreeMap<String, DataMap>,
    /// The pod's service-account token.
    pub(crate) token: Option<String>,
    /// Directory for a PersistentVolumeClaim's data, by claim name.
    pub(crate) claim_dirs: BTreeMap<String, PathBuf>,
}

/// One file of a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct File {
    /// Relative path.
    pub(crate) path: String,
    /// Contents.
    pub(crate) data: Vec<u8>,
    /// Permission bits.
    pub(crate) mode: u32,
}

/// What a volume is on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Content {
    /// Files written once (secret, configMap, projected, downwardAPI): mounted read-only.
    Files(Vec<File>),
    /// An empty directory, writable by anyone (as the kubelet makes it).
    Empty,
    /// A directory that outlives the pod (a claim's).
    Host(PathBuf),
}

/// The kubelet's default file mode for secret, configMap and projected volumes.
const DEFAULT_MODE: u32 = 0o644;

fn mode_of(v: &Value, field: &str, default: u32) -> u32 {
    v.get(field)
        .and_then(Value::as_u64)
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(default)
}

/// The files of a secret or configMap source (`items` selects and renames keys).
fn key_files(
    src: &Value,
    data: Option<&DataMap>,
    default_mode: u32,
    missing: ConfigError,
) -> Result<Vec<File>, ConfigError> {
    let optional = src
        .get("optional")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Some(data) = data else {
        return if optional {
            Ok(Vec::new())
        } else {
            Err(missing)
        };
    };
    let mode = mode_of(src, "defaultMode", default_mode);
    match src.get("items").and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .filter_map(|i| {
                let key = i.get("key").and_then(Value::as_str)?;
                let path = i.get("path").and_then(Value::as_str).unwrap_or(key);
                Some(match data.get(key) {
                    Some(d) => Ok(Some(File {
                        path: path.to_string(),
                        data: d.clone(),
                        mode: mode_of(i, "mode", mode),
                    })),
                    None if optional => Ok(None),
                    None => Err(missing.clone()),
                })
            })
            .filter_map(Result::transpose)
            .collect(),
        None => Ok(data
            .iter()
            .map(|(k, d)| File {
                path: k.clone(),
                data: d.clone(),
                mode,
            })
            .collect()),
    }
}

/// The downward API's files (`metadata.name`, `metadata.namespace`, `metadata.uid`,
/// `metadata.labels`, `metadata.annotations`).
fn downward_files(pod: &Value, src: &Value, default_mode: u32) -> Result<Vec<File>, ConfigError> {
    let mut out = Vec::new();
    for i in src
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(path) = i.get("path").and_then(Value::as_str) else {
            continue;
        };
        let field = str_at(i, "/fieldRef/fieldPath").unwrap_or("");
        let text = match field {
            "metadata.name" | "metadata.namespace" | "metadata.uid" => {
                str_at(pod, &format!("/metadata/{}", &field[9..]))
                    .unwrap_or("")
                    .to_string()
            }
            "metadata.labels" | "metadata.annotations" => pod
                .pointer(&format!("/metadata/{}", &field[9..]))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}\n", v))
                .collect(),
            other => return Err(ConfigError::UnsupportedField(other.to_string())),
        };
        out.push(File {
            path: path.to_string(),
            data: text.into_bytes(),
            mode: mode_of(i, "mode", default_mode),
        });
    }
    Ok(out)
}

/// What each of the pod's volumes holds, by volume name. A missing Secret or ConfigMap
/// (not optional) is an error: the kubelet keeps such a pod in `ContainerCreating`.
pub(crate) fn plan(pod: &Value, data: &VolumeData) -> Result<Vec<(String, Content)>, ConfigError> {
    let mut out = Vec::new();
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = v.get("name").and_then(Value::as_str) else {
            continue;
        };
        let content = if let Some(s) = v.get("secret") {
            let sname = s.get("secretName").and_then(Value::as_str).unwrap_or("");
            Content::Files(key_files(
                s,
                data.secrets.get(sname),
                DEFAULT_MODE,
                ConfigError::SecretMissing(sname.to_string()),
            )?)
        } else if let Some(c) = v.get("configMap") {
            let cname = c.get("name").and_then(Value::as_str).unwrap_or("");
            Content::Files(key_files(
                c,
                data.config_maps.get(cname),
                DEFAULT_MODE,
                ConfigError::ConfigMapMissing(cname.to_string()),
            )?)
        } else if let Some(p) = v.get("projected") {
            let mode = mode_of(p, "defaultMode", DEFAULT_MODE);
            let mut files = Vec::new();
            for s in p
                .get("sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(t) = s.get("serviceAccountToken") {
                    let path = t.get("path").and_then(Value::as_str).unwrap_or("token");
                    let token = data.token.clone().ok_or_else(|| {
                        ConfigError::SecretMissing("service account token".into())
                    })?;
                    files.push(File {
                        path: path.to_string(),
                        data: token.into_bytes(),
                        mode,
                    });
                } else if let Some(c) = s.get("configMap") {
                    let cname = c.get("name").and_then(Value::as_str).unwrap_or("");
                    files.extend(key_files(
                        c,
                        data.config_maps.get(cname),
                        mode,
                        ConfigError::ConfigMapMissing(cname.to_string()),
                    )?);
                } else if let Some(c) = s.get("secret") {
                    let sname = c.get("name").and_then(Value::as_str).unwrap_or("");
                    files.extend(key_files(
                        c,
                        data.secrets.get(sname),
                        mode,
                        ConfigError::SecretMissing(sname.to_string()),
                    )?);
                } else if let Some(d) = s.get("downwardAPI") {
                    files.extend(downward_files(pod, d, mode)?);
                }
            }
            Content::Files(files)
        } else if let Some(d) = v.get("downwardAPI") {
            Content::Files(downward_files(
                pod,
                d,
                mode_of(d, "defaultMode", DEFAULT_MODE),
            )?)
        } else if let Some(c) = v.get("persistentVolumeClaim") {
            let claim = c.get("claimName").and_then(Value::as_str).unwrap_or("");
            match data.claim_dirs.get(claim) {
                Some(dir) => Content::Host(dir.clone()),
                None => return Err(ConfigError::ClaimMissing(claim.to_string())),
            }
        } else {
            // emptyDir, and any other source: an empty directory.
            Content::Empty
        };
        out.push((name.to_string(), content));
    }
    Ok(out)
}

/// Gives `path` to group `gid` (the pod's `fsGroup`), as the kubelet's volume ownership
/// management does, so that a non-root container reads files of mode `0440` and writes
/// its directories.
fn give_group(path: &Path, gid: Option<u32>) -> Result<(), RuncError> {
    match gid {
        Some(g) => {
            std::os::unix::fs::chown(path, None, Some(g)).map_err(|e| RuncError::io(path, e))
        }
        None => Ok(()),
    }
}

/// Writes the volumes under `dir` (`dir/<name>`, or the claim's own directory), owned by
/// group `fs_group` when the pod sets one; returns each volume's host path.
pub(crate) fn write(
    dir: &Path,
    planned: &[(String, Content)],
    fs_group: Option<u32>,
) -> Result<BTreeMap<String, PathBuf>, RuncError> {
    let mut paths = BTreeMap::new();
    let mkdir = |p: &Path, mode: u32| -> Result<(), RuncError> {
        std::fs::create_dir_all(p).map_err(|e| RuncError::io(p, e))?;
        give_group(p, fs_group)?;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| RuncError::io(p, e))
    };
    // Writable volumes: setgid with an fsGroup, so what the pod creates stays the group's.
    let writable = if fs_group.is_some() { 0o2777 } else { 0o777 };
    for (name, content) in planned {
        let path = match content {
            Content::Host(d) => {
                mkdir(d, writable)?;
                d.clone()
            }
            Content::Empty => {
                let p = dir.join(name);
                mkdir(&p, writable)?;
                p
            }
            Content::Files(files) => {
                let p = dir.join(name);
                mkdir(&p, 0o755)?;
                for f in files {
                    // Paths are relative and may not climb out (the API validates the same).
                    if f.path.starts_with('/') || f.path.split('/').any(|s| s == "..") {
                        continue;
                    }
                    let target = p.join(&f.path);
                    if let Some(parent) = target.parent() {
                        mkdir(parent, 0o755)?;
                    }
                    std::fs::write(&target, &f.data).map_err(|e| RuncError::io(&target, e))?;
                    give_group(&target, fs_group)?;
                    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(f.mode))
                        .map_err(|e| RuncError::io(&target, e))?;
                }
                p
            }
        };
        paths.insert(name.clone(), path);
    }
    Ok(paths)
}

/// A container's mounts of the pod's volumes (`subPath` supported); volumes of files are
/// always read-only, as the kubelet mounts them.
pub(crate) fn mounts(
    container: &Value,
    planned: &[(String, Content)],
    paths: &BTreeMap<String, PathBuf>,
) -> Vec<Mount> {
    container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            let name = m.get("name").and_then(Value::as_str)?;
            let dest = m.get("mountPath").and_then(Value::as_str)?;
            let base = paths.get(name)?;
            let files = planned
                .iter()
                .any(|(n, c)| n == name && matches!(c, Content::Files(_)));
            let sub = m.get("subPath").and_then(Value::as_str).unwrap_or("");
            let source = if sub.is_empty() {
                base.clone()
            } else {
                base.join(sub)
            };
            Some(Mount {
                source: source.display().to_string(),
                destination: dest.to_string(),
                read_only: files || m.get("readOnly").and_then(Value::as_bool) == Some(true),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data() -> VolumeData {
        let mut d = VolumeData::default();
        d.secrets.insert(
            "tls".into(),
            [
                ("tls.crt".into(), b"C".to_vec()),
                ("tls.key".into(), b"K".to_vec()),
            ]
            .into(),
        );
        d.config_maps.insert(
            "kube-root-ca.crt".into(),
            [("ca.crt".into(), b"CA".to_vec())].into(),
        );
        d.token = Some("tok".into());
        d.claim_dirs
            .insert("data".into(), PathBuf::from("/pv/ns/data"));
        d
    }

    #[test]
    fn plans_every_supported_source() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"volumes": [
            {"name": "s", "secret": {"secretName": "tls", "defaultMode": 0o600, "items": [{"key": "tls.key", "path": "k/key"}]}},
            {"name": "all", "secret": {"secretName": "tls"}},
            {"name": "opt", "configMap": {"name": "none", "optional": true}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "pv", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "sa", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]}},
        ]}});
        let got = plan(&pod, &data()).unwrap();
        let f = |path: &str, d: &[u8], mode: u32| File {
            path: path.into(),
            data: d.to_vec(),
            mode,
        };
        assert_eq!(
            got,
            vec![
                ("s".into(), Content::Files(vec![f("k/key", b"K", 0o600)])),
                (
                    "all".into(),
                    Content::Files(vec![f("tls.crt", b"C", 0o644), f("tls.key", b"K", 0o644)])
                ),
                ("opt".into(), Content::Files(vec![])),
                ("tmp".into(), Content::Empty),
                ("pv".into(), Content::Host(PathBuf::from("/pv/ns/data"))),
                (
                    "sa".into(),
                    Content::Files(vec![
                        f("token", b"tok", 0o644),
                        f("ca.crt", b"CA", 0o644),
                        f("namespace", b"ns", 0o644),
                    ])
                ),
            ]
        );
        let missing =
            json!({"spec": {"volumes": [{"name": "s", "secret": {"secretName": "gone"}}]}});
        assert_eq!(
            plan(&missing, &data()),
            Err(ConfigError::SecretMissing("gone".into()))
        );
    }

    #[test]
    fn writes_files_and_mounts_them() {
        let dir = tempfile::tempdir().unwrap();
        let planned = vec![
            (
                "s".to_string(),
                Content::Files(vec![File {
                    path: "a/b".into(),
                    data: b"x".to_vec(),
                    mode: 0o600,
                }]),
            ),
            ("e".to_string(), Content::Empty),
        ];
        let paths = write(dir.path(), &planned, None).unwrap();
        let file = dir.path().join("s/a/b");
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let empty = std::fs::metadata(dir.path().join("e")).unwrap();
        assert_eq!(empty.permissions().mode() & 0o7777, 0o777);
        let c = json!({"volumeMounts": [
            {"name": "s", "mountPath": "/etc/s"},
            {"name": "e", "mountPath": "/tmp", "subPath": "x"},
            {"name": "e", "mountPath": "/ro", "readOnly": true},
            {"name": "unknown", "mountPath": "/u"},
        ]});
        let m = mounts(&c, &planned, &paths);
        assert_eq!(m.len(), 3);
        assert!(m[0].read_only && m[0].destination == "/etc/s");
        assert!(!m[1].read_only && m[1].source.ends_with("/e/x"));
        assert!(m[2].read_only);
    }

    #[test]
    fn fs_group_owns_the_volumes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        // The test's own primary group: chown to it needs no privilege.
        let gid = std::fs::metadata(dir.path()).unwrap().gid();
        let planned = vec![
            (
                "s".to_string(),
                Content::Files(vec![File {
                    path: "k".into(),
                    data: b"x".to_vec(),
                    mode: 0o440,
                }]),
            ),
            ("e".to_string(), Content::Empty),
        ];
        write(dir.path(), &planned, Some(gid)).unwrap();
        let file = std::fs::metadata(dir.path().join("s/k")).unwrap();
        assert_eq!((file.gid(), file.mode() & 0o777), (gid, 0o440));
        let empty = std::fs::metadata(dir.path().join("e")).unwrap();
        assert_eq!((empty.gid(), empty.mode() & 0o7777), (gid, 0o2777));
    }
}

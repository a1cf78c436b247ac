//! Kubernetes client plumbing for fedctl: kubeconfig contexts, and create-or-update of the
//! handful of kinds it writes.

use std::time::Duration;

use base64::Engine;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

/// Errors talking to a cluster, worded for a person at a terminal.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig or its context could not be loaded.
    #[error("kubeconfig: {0}")]
    Config(String),
    /// The cluster could not be reached.
    #[error("{context}: cannot reach {url}: {detail}")]
    Unreachable {
        /// Context name.
        context: String,
        /// Server URL.
        url: String,
        /// Cause.
        detail: String,
    },
    /// The credentials lack a permission.
    #[error("{context}: permission denied: {message}")]
    Forbidden {
        /// Context name.
        context: String,
        /// The server's message (names the verb and resource).
        message: String,
    },
    /// Any other API error.
    #[error("{context}: {message}")]
    Api {
        /// Context name.
        context: String,
        /// The server's message.
        message: String,
    },
}

/// A client for one kubeconfig context, with what fedctl needs to know about it.
pub struct Target {
    /// The client.
    pub client: kube::Client,
    /// Context name (or "current").
    pub context: String,
    /// Server URL.
    pub url: String,
    /// CA bundle PEM, if the kubeconfig has one.
    pub ca_pem: Option<String>,
}

/// Loads the kubeconfig from `path` or `$KUBECONFIG` (several files merged) or ~/.kube/config.
pub fn load_kubeconfig(path: Option<&std::path::Path>) -> Result<Kubeconfig, KubeError> {
    match path {
        Some(p) => {
            Kubeconfig::read_from(p).map_err(|e| KubeError::Config(format!("{}: {e}", p.display())))
        }
        None => Kubeconfig::from_env()
            .map_err(|e| KubeError::Config(e.to_string()))?
            .map_or_else(
                || {
                    Kubeconfig::read().map_err(|e| {
                        KubeError::Config(format!("no $KUBECONFIG and ~/.kube/config: {e}"))
                    })
                },
                Ok,
            ),
    }
}

fn pem_of(ders: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for der in ders {
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        let b = base64::engine::general_purpose::STANDARD.encode(der);
        for chunk in b.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(chunk).unwrap_or(""));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out
}

/// A client for `context` (or the current context).
pub async fn target(kc: &Kubeconfig, context: Option<&str>) -> Result<Target, KubeError> {
    let opts = KubeConfigOptions {
        context: context.map(String::from),
        ..Default::default()
    };
    let mut cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts)
        .await
        .map_err(|e| {
            KubeError::Config(format!("context {}: {e}", context.unwrap_or("(current)")))
        })?;
    cfg.connect_timeout = Some(Duration::from_secs(5));
    let url = cfg
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let ca_pem = cfg.root_cert.as_deref().map(pem_of);
    let client = kube::Client::try_from(cfg).map_err(|e| KubeError::Config(e.to_string()))?;
    Ok(Target {
        client,
        context: context.unwrap_or("(current)").to_string(),
        url,
        ca_pem,
    })
}

/// Checks a cluster answers, naming TLS and credential problems clearly.
pub async fn check_reachable(t: &Target) -> Result<String, KubeError> {
    match t.client.apiserver_version().await {
        Ok(v) => Ok(v.git_version),
        Err(e) => Err(classify(t, e)),
    }
}

/// Turns a client error into a [`KubeError`] with a useful message.
pub fn classify(t: &Target, e: kube::Error) -> KubeError {
    match e {
        kube::Error::Api(s) if s.code == 403 => KubeError::Forbidden {
            context: t.context.clone(),
            message: s.message,
        },
        kube::Error::Api(s) if s.code == 401 => KubeError::Api {
            context: t.context.clone(),
            message: format!(
                "the credentials were rejected (401 Unauthorized): {}",
                s.message
            ),
        },
        kube::Error::Api(s) => KubeError::Api {
            context: t.context.clone(),
            message: s.message,
        },
        other => {
            let detail = format!("{other}: {:?}", std::error::Error::source(&other));
            let lower = detail.to_lowercase();
            let detail = if lower.contains("certificate")
                || lower.contains("tls")
                || lower.contains("unknownissuer")
            {
                format!("TLS verification failed against the kubeconfig's CA ({other})")
            } else if lower.contains("refused") {
                "connection refused".to_string()
            } else if lower.contains("timed out") || lower.contains("elapsed") {
                "timed out".to_string()
            } else {
                other.to_string()
            };
            KubeError::Unreachable {
                context: t.context.clone(),
                url: t.url.clone(),
                detail,
            }
        }
    }
}

/// The API resource of the kinds fedctl writes.
pub fn resource_of(obj: &Value) -> Option<(ApiResource, bool)> {
    let api_version = obj.get("apiVersion")?.as_str()?;
    let kind = obj.get("kind")?.as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let (plural, namespaced) = match kind {
        "Namespace" => ("namespaces", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "Secret" => ("secrets", true),
        "ConfigMap" => ("configmaps", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "Cluster" => ("clusters", false),
        _ => return None,
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Some((ApiResource::from_gvk_with_plural(&gvk, plural), namespaced))
}

/// The dynamic API for an object.
pub fn api_for(client: &kube::Client, obj: &Value) -> Option<(Api<DynamicObject>, String)> {
    let (ar, namespaced) = resource_of(obj)?;
    let name = obj.pointer("/metadata/name")?.as_str()?.to_string();
    let api = if namespaced {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        Api::namespaced_with(client.clone(), ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    Some((api, name))
}

/// What `ensure` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Ensured {
    /// It did not exist and was created.
    Created,
    /// It existed and was brought up to date.
    Updated,
    /// It existed as wanted.
    Unchanged,
}

/// Creates `obj`, or updates the existing one to match it (idempotent).
pub async fn ensure(t: &Target, obj: &Value) -> Result<(Ensured, DynamicObject), KubeError> {
    let (api, name) = api_for(&t.client, obj)
        .ok_or_else(|| KubeError::Config(format!("unsupported object {obj}")))?;
    let desired: DynamicObject =
        serde_json::from_value(obj.clone()).map_err(|e| KubeError::Config(e.to_string()))?;
    match api.create(&PostParams::default(), &desired).await {
        Ok(o) => return Ok((Ensured::Created, o)),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(classify(t, e)),
    }
    let live = api.get(&name).await.map_err(|e| classify(t, e))?;
    let mut merged = serde_json::to_value(&live).map_err(|e| KubeError::Config(e.to_string()))?;
    // Desired top-level fields win; labels and annotations are merged; status is left alone.
    for (k, v) in obj.as_object().into_iter().flatten() {
        match k.as_str() {
            "metadata" | "status" => {}
            _ => merged[k] = v.clone(),
        }
    }
    for f in ["labels", "annotations"] {
        if let Some(m) = obj
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_object)
        {
            for (k, v) in m {
                merged["metadata"][f][k] = v.clone();
            }
        }
    }
    let before = serde_json::to_value(&live).unwrap_or(Value::Null);
    if merged == before {
        return Ok((Ensured::Unchanged, live));
    }
    let updated: DynamicObject =
        serde_json::from_value(merged).map_err(|e| KubeError::Config(e.to_string()))?;
    let o = api
        .replace(&name, &PostParams::default(), &updated)
        .await
        .map_err(|e| classify(t, e))?;
    Ok((Ensured::Updated, o))
}

/// Deletes an object; absent is fine. Returns whether it existed.
pub async fn remove(t: &Target, obj: &Value) -> Result<bool, KubeError> {
    let (api, name) = api_for(&t.client, obj)
        .ok_or_else(|| KubeError::Config(format!("unsupported object {obj}")))?;
    match api.delete(&name, &Default::default()).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(classify(t, e)),
    }
}

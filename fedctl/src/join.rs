//! `fedctl join` and `fedctl unjoin`: least-privilege credentials in the member, a Secret and
//! a Cluster in the federation, then a wait for the cluster to turn Ready.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use serde_json::Value;

use crate::kubeutil::{self, Ensured, KubeError, Target};
use crate::plan::{self, JoinRequest};

/// Options of a join.
#[derive(Debug, Clone)]
pub struct JoinOptions {
    /// Cluster name.
    pub name: String,
    /// Member context in the kubeconfig.
    pub cluster_context: String,
    /// Federation context (current context when `None`).
    pub federation_context: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Zone.
    pub zone: Option<String>,
    /// Labels for the Cluster.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Custom resource groups Meridian may write in the member (every resource of each).
    pub custom_groups: Vec<String>,
    /// Print, do not create.
    pub dry_run: bool,
    /// How long to wait for Ready (zero: do not wait).
    pub wait: Duration,
}

fn describe(o: &Value) -> String {
    let kind = o["kind"].as_str().unwrap_or("");
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    match o["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

fn report(side: &str, o: &Value, e: Ensured) {
    let verb = match e {
        Ensured::Created => "created",
        Ensured::Updated => "updated",
        Ensured::Unchanged => "unchanged",
    };
    println!("{side}: {} {verb}", describe(o));
}

/// Joins a member cluster.
pub async fn join(kc: &kube::config::Kubeconfig, o: &JoinOptions) -> anyhow::Result<()> {
    plan::check_custom_groups(&o.custom_groups)?;
    let member = kubeutil::target(kc, Some(&o.cluster_context)).await?;
    let (region, zone) = match (&o.region, &o.zone) {
        (Some(r), Some(z)) => (Some(r.clone()), Some(z.clone())),
        _ if o.dry_run => (o.region.clone(), o.zone.clone()),
        _ => {
            // Unset flags default to the members' own topology labels.
            let (r, z) = node_topology(&member).await;
            (o.region.clone().or(r), o.zone.clone().or(z))
        }
    };
    let req = JoinRequest {
        name: o.name.clone(),
        endpoint: member.url.clone(),
        ca_pem: member.ca_pem.clone().unwrap_or_default(),
        region,
        zone,
        labels: o.labels.clone(),
    };
    if o.dry_run {
        println!("# in member cluster (context {}):", o.cluster_context);
        for obj in plan::member_objects(&o.custom_groups) {
            println!("---\n{}", serde_yaml_ng::to_string(&obj)?);
        }
        println!("# in the federation:");
        for obj in plan::federation_objects(&req, "<token read from the member>") {
            println!("---\n{}", serde_yaml_ng::to_string(&obj)?);
        }
        return Ok(());
    }
    if req.ca_pem.is_empty() {
        anyhow::bail!(
            "context {} has no certificate authority: Meridian always verifies member TLS, so the kubeconfig must carry the member's CA",
            o.cluster_context
        );
    }
    let version = kubeutil::check_reachable(&member).await?;
    println!(
        "member: {} at {} ({version})",
        o.cluster_context, member.url
    );
    let federation = kubeutil::target(kc, o.federation_context.as_deref()).await?;
    kubeutil::check_reachable(&federation).await?;

    for obj in plan::member_objects(&o.custom_groups) {
        let (e, _) = kubeutil::ensure(&member, &obj)
            .await
            .map_err(|err| explain_member(&obj, err))?;
        report("member", &obj, e);
    }
    let token = wait_for_token(&member).await?;
    for obj in plan::federation_objects(&req, &token) {
        let (e, _) = kubeutil::ensure(&federation, &obj).await?;
        report("federation", &obj, e);
    }
    if o.wait.is_zero() {
        return Ok(());
    }
    wait_ready(&federation, &o.name, o.wait).await
}

/// Region and zone from the `topology.kubernetes.io` labels of one of the member's nodes.
async fn node_topology(member: &Target) -> (Option<String>, Option<String>) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(member.client.clone());
    let Ok(list) = nodes.list(&kube::api::ListParams::default().limit(1)).await else {
        return (None, None);
    };
    let labels = list
        .items
        .first()
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    (
        labels.get("topology.kubernetes.io/region").cloned(),
        labels.get("topology.kubernetes.io/zone").cloned(),
    )
}

/// Says which permission join lacks in the member.
fn explain_member(obj: &Value, e: KubeError) -> anyhow::Error {
    match e {
        KubeError::Forbidden { context, message } => anyhow::anyhow!(
            "join cannot create {} in {context}: the member credentials lack that permission ({message})",
            describe(obj)
        ),
        other => other.into(),
    }
}

/// Waits for the member to fill in the service-account token.
async fn wait_for_token(member: &Target) -> anyhow::Result<String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(member.client.clone(), plan::NAMESPACE);
    let token_of = |s: &k8s_openapi::api::core::v1::Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("token"))
            .map(|t| String::from_utf8_lossy(&t.0).to_string())
            .filter(|t| !t.is_empty())
    };
    if let Ok(s) = secrets.get(plan::TOKEN_SECRET).await
        && let Some(t) = token_of(&s)
    {
        return Ok(t);
    }
    let wp = WatchParams::default()
        .fields(&format!("metadata.name={}", plan::TOKEN_SECRET))
        .timeout(60);
    let stream = secrets
        .watch(&wp, "0")
        .await
        .map_err(|e| kubeutil::classify(member, e))?;
    let mut stream = Box::pin(stream);
    while let Some(ev) = stream
        .try_next()
        .await
        .map_err(|e| kubeutil::classify(member, e))?
    {
        if let WatchEvent::Added(s) | WatchEvent::Modified(s) = ev
            && let Some(t) = token_of(&s)
        {
            return Ok(t);
        }
    }
    anyhow::bail!(
        "the member did not issue a token for {}/{} within 60s (is its token controller running?)",
        plan::NAMESPACE,
        plan::TOKEN_SECRET
    )
}

/// The Ready condition of a Cluster, as (status, reason, message). A Ready cluster whose
/// capacity is not reported yet shows as not ready: the scheduler gives such a cluster no
/// replicas, so a workload applied right after the join would leave it out.
fn ready_of(c: &fed_api::Cluster) -> Option<(String, String, String)> {
    let status = c.status.as_ref()?;
    let cond = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    if cond.status == "True" && status.resource_summary.is_none() {
        return Some((
            "Unknown".to_owned(),
            cond.reason.clone(),
            "reachable; waiting for its first capacity report".to_owned(),
        ));
    }
    Some((
        cond.status.clone(),
        cond.reason.clone(),
        cond.message.clone(),
    ))
}

/// Waits until the Cluster is Ready with its capacity reported (schedulable), showing
/// progress on a terminal.
async fn wait_ready(federation: &Target, name: &str, limit: Duration) -> anyhow::Result<()> {
    let clusters: Api<fed_api::Cluster> = Api::all(federation.client.clone());
    let tty = std::io::stderr().is_terminal();
    let start = Instant::now();
    let mut last = None;
    let show = |state: &Option<(String, String, String)>| {
        let text = match state {
            None => "waiting for the cluster controller's first probe".to_string(),
            Some((s, r, m)) if m.is_empty() => format!("Ready={s} {r}"),
            Some((s, r, m)) => format!("Ready={s} {r}: {m}"),
        };
        if tty {
            eprint!(
                "\r\x1b[2K{:>4.0}s  {name}: {text}",
                start.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("{name}: {text}");
        }
    };
    let fut = async {
        let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
        let mut stream = Box::pin(
            clusters
                .watch(&wp, "0")
                .await
                .map_err(|e| kubeutil::classify(federation, e))?,
        );
        while let Some(ev) = stream
            .try_next()
            .await
            .map_err(|e| kubeutil::classify(federation, e))?
        {
            if let WatchEvent::Added(c) | WatchEvent::Modified(c) = ev {
                let state = ready_of(&c);
                if state != last {
                    show(&state);
                    last = state.clone();
                }
                if state.as_ref().is_some_and(|(s, _, _)| s == "True") {
                    return Ok::<_, anyhow::Error>(true);
                }
            }
        }
        Ok(false)
    };
    let done = tokio::time::timeout(limit, fut).await;
    if tty {
        eprintln!();
    }
    match done {
        Ok(Ok(true)) => {
            println!("cluster {name} is Ready");
            Ok(())
        }
        Ok(Ok(false)) => anyhow::bail!("the watch on cluster {name} ended before it became Ready"),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            let why = match &last {
                None => "no probe result yet: is fed-controllers running against this federation?"
                    .to_string(),
                Some((s, r, m)) => format!("Ready={s} {r} {m}"),
            };
            anyhow::bail!(
                "cluster {name} did not become Ready within {}s: {why}",
                limit.as_secs()
            )
        }
    }
}

/// Options of an unjoin.
#[derive(Debug, Clone)]
pub struct UnjoinOptions {
    /// Cluster name.
    pub name: String,
    /// Member context (defaults to the cluster name).
    pub cluster_context: String,
    /// Federation context.
    pub federation_context: Option<String>,
}

/// Removes what join created, in both places; works when the member is gone.
pub async fn unjoin(kc: &kube::config::Kubeconfig, o: &UnjoinOptions) -> anyhow::Result<()> {
    let federation = kubeutil::target(kc, o.federation_context.as_deref()).await?;
    match kubeutil::target(kc, Some(&o.cluster_context)).await {
        Ok(member) => match kubeutil::check_reachable(&member).await {
            Ok(_) => {
                // Reverse creation order: the token and binding go before the namespace.
                for obj in plan::member_objects(&[]).iter().rev() {
                    if kubeutil::remove(&member, obj).await? {
                        println!("member: {} deleted", describe(obj));
                    }
                }
            }
            Err(e) => eprintln!(
                "warning: member {} is unreachable ({e}); removing the federation side only",
                o.cluster_context
            ),
        },
        Err(e) => eprintln!(
            "warning: no usable context {} ({e}); removing the federation side only",
            o.cluster_context
        ),
    }
    let req = JoinRequest {
        name: o.name.clone(),
        ..Default::default()
    };
    // The Cluster first, so controllers stop using the credentials before they vanish.
    let objs = plan::federation_objects(&req, "");
    for obj in [&objs[2], &objs[1]] {
        if kubeutil::remove(&federation, obj).await? {
            println!("federation: {} deleted", describe(obj));
        }
    }
    Ok(())
}

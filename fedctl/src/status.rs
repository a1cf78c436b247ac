//! `fedctl status <kind>/<name>`: where a federated workload or Service runs and how each
//! member cluster is doing, read from its Placement (`deployment-<name>`, `replicaset-<name>`,
//! `service-<name>`). Rendering is pure so it is tested without a server.

use std::fmt::Write as _;

use anyhow::Context as _;
use fed_api::Placement;
use fed_api::placement::ClusterWorkloadStatus;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Serialize;

/// Output format of `fedctl status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A per-cluster table.
    Table,
    /// The report as JSON.
    Json,
    /// The report as YAML.
    Yaml,
}

/// The federated kinds `fedctl status` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `apps/v1` Deployment.
    Deployment,
    /// `apps/v1` ReplicaSet.
    ReplicaSet,
    /// `apps/v1` StatefulSet.
    StatefulSet,
    /// `batch/v1` Job.
    Job,
    /// `v1` Service.
    Service,
}

impl Kind {
    /// The kind from what a user types (kubectl's names, short names and plurals).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "deploy" | "deployment" | "deployments" => Some(Kind::Deployment),
            "rs" | "replicaset" | "replicasets" => Some(Kind::ReplicaSet),
            "sts" | "statefulset" | "statefulsets" => Some(Kind::StatefulSet),
            "job" | "jobs" => Some(Kind::Job),
            "svc" | "service" | "services" => Some(Kind::Service),
            _ => None,
        }
    }

    /// Lower-case singular, the Placement name prefix.
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Deployment => "deployment",
            Kind::ReplicaSet => "replicaset",
            Kind::StatefulSet => "statefulset",
            Kind::Job => "job",
            Kind::Service => "service",
        }
    }

    /// Plural, as in Kubernetes' not-found messages.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Deployment => "deployments",
            Kind::ReplicaSet => "replicasets",
            Kind::StatefulSet => "statefulsets",
            Kind::Job => "jobs",
            Kind::Service => "services",
        }
    }

    fn api_resource(self) -> ApiResource {
        let (group, kind) = match self {
            Kind::Deployment => ("apps", "Deployment"),
            Kind::ReplicaSet => ("apps", "ReplicaSet"),
            Kind::StatefulSet => ("apps", "StatefulSet"),
            Kind::Job => ("batch", "Job"),
            Kind::Service => ("", "Service"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), self.plural())
    }
}

/// Splits `kind/name` (or `kind` and a separate `name`).
pub fn parse_target(target: &str, name: Option<&str>) -> anyhow::Result<(Kind, String)> {
    let (kind, name) = match (target.split_once('/'), name) {
        (Some((k, n)), None) => (k, n),
        (None, Some(n)) => (target, n),
        (Some(_), Some(_)) => {
            anyhow::bail!("give either <kind>/<name> or <kind> <name>, not both")
        }
        (None, None) => anyhow::bail!("give <kind>/<name>, e.g. deploy/web"),
    };
    let kind = Kind::parse(kind).with_context(|| {
        format!(
            "unknown kind {kind:?}: use deploy|deployment, rs|replicaset, sts|statefulset, job or svc|service"
        )
    })?;
    if name.is_empty() {
        anyhow::bail!("the name is empty");
    }
    Ok((kind, name.to_string()))
}

/// One member cluster's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Cluster name.
    pub cluster: String,
    /// Replicas (workloads) or ready endpoints (Services) the scheduler gave it.
    pub desired: u32,
    /// The member's status, when the controller has reported one.
    #[serde(flatten)]
    pub status: Option<ClusterWorkloadStatus>,
}

/// Everything `fedctl status` shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `deployment`, `replicaset` or `service`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name of the federated object.
    pub name: String,
    /// The Placement read.
    pub placement: String,
    /// The Placement's conditions.
    pub conditions: Vec<fed_api::common::Condition>,
    /// One row per destination or reporting cluster.
    pub clusters: Vec<Row>,
}

/// Builds the report from a Placement: destination clusters in the scheduler's order, then
/// clusters still reporting a copy (being drained).
pub fn report(kind: Kind, namespace: &str, name: &str, p: &Placement) -> Report {
    let status = p.status.clone().unwrap_or_default();
    let mut rows: Vec<Row> = p
        .spec
        .dest_clusters
        .iter()
        .map(|t| Row {
            cluster: t.cluster.clone(),
            desired: t.replicas,
            status: status
                .clusters
                .iter()
                .find(|c| c.cluster == t.cluster)
                .cloned(),
        })
        .collect();
    for c in &status.clusters {
        if !rows.iter().any(|r| r.cluster == c.cluster) {
            rows.push(Row {
                cluster: c.cluster.clone(),
                desired: 0,
                status: Some(c.clone()),
            });
        }
    }
    Report {
        kind: kind.singular().to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        placement: p.metadata.name.clone().unwrap_or_default(),
        conditions: status.conditions,
        clusters: rows,
    }
}

/// `5s`, `3m`, `2h`, `4d` like kubectl's AGE; `-` when unknown or unparsable.
pub fn age(rfc3339: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(t) = rfc3339.and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
        return "-".to_string();
    };
    let secs = (now.as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn aligned(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}   ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The human-readable form: a summary line, then one row per cluster.
pub fn table(r: &Report, now: jiff::Timestamp) -> String {
    let mut out = format!("{} {}/{}", r.kind, r.namespace, r.name);
    for c in &r.conditions {
        let _ = write!(out, "  {}={}", c.type_, c.status);
        if !c.reason.is_empty() {
            let _ = write!(out, " ({})", c.reason);
        }
    }
    out.push('\n');
    for c in r.conditions.iter().filter(|c| !c.message.is_empty()) {
        let _ = writeln!(out, "  {}: {}", c.type_, c.message);
    }
    if r.clusters.is_empty() {
        out.push_str("no member clusters (not scheduled yet)\n");
        return out;
    }
    let service = r.kind == Kind::Service.singular();
    let mut rows = vec![if service {
        [
            "CLUSTER",
            "PUSHED",
            "ENDPOINTS",
            "LB-AGENT",
            "HEALTHY",
            "LAST-SYNC",
            "ERROR",
        ]
        .map(String::from)
        .to_vec()
    } else {
        [
            "CLUSTER",
            "DESIRED",
            "READY",
            "AVAILABLE",
            "UPDATED",
            "LAST-SYNC",
            "ERROR",
        ]
        .map(String::from)
        .to_vec()
    }];
    let dash = || "-".to_string();
    for row in &r.clusters {
        let s = row.status.as_ref();
        let last = age(s.and_then(|s| s.last_sync_time.as_deref()), now);
        let error = s.map(|s| s.error.clone()).unwrap_or_default();
        rows.push(if service {
            vec![
                row.cluster.clone(),
                // Pushed once the controller has synced it there without an error.
                s.map_or("no", |s| {
                    if s.last_sync_time.is_some() && s.error.is_empty() {
                        "yes"
                    } else {
                        "no"
                    }
                })
                .to_string(),
                s.and_then(|s| s.endpoints)
                    .map_or_else(dash, |e| e.to_string()),
                s.and_then(|s| s.lb_agent.clone()).unwrap_or_else(dash),
                s.and_then(|s| s.healthy)
                    .map_or_else(dash, |h| if h { "yes" } else { "no" }.to_string()),
                last,
                error,
            ]
        } else {
            let n =
                |f: fn(&ClusterWorkloadStatus) -> i32| s.map_or_else(dash, |s| f(s).to_string());
            vec![
                row.cluster.clone(),
                row.desired.to_string(),
                n(|s| s.ready_replicas),
                n(|s| s.available_replicas),
                n(|s| s.updated_replicas),
                last,
                error,
            ]
        });
    }
    out.push_str(&aligned(&rows));
    out
}

/// Reads the Placement of `kind/name` in `namespace` and renders it.
pub async fn run(
    client: &kube::Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    format: Format,
) -> anyhow::Result<String> {
    // The object first: a Placement left behind by an orphaning delete is not the object.
    let objects: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
    if objects
        .get_opt(name)
        .await
        .with_context(|| format!("reading {} {namespace}/{name}", kind.plural()))?
        .is_none()
    {
        anyhow::bail!(
            "{} {name:?} not found in namespace {namespace}",
            kind.plural()
        );
    }
    let placement_name = format!("{}-{name}", kind.singular());
    let placements: Api<Placement> = Api::namespaced(client.clone(), namespace);
    let Some(placement) = placements
        .get_opt(&placement_name)
        .await
        .with_context(|| format!("reading Placement {namespace}/{placement_name}"))?
    else {
        anyhow::bail!(
            "{} {namespace}/{name} has no Placement {placement_name} yet: it is not scheduled (is {} running?)",
            kind.singular(),
            if kind == Kind::Service {
                "the service controller"
            } else {
                "fed-scheduler"
            }
        );
    };
    let r = report(kind, namespace, name, &placement);
    match format {
        Format::Table => Ok(table(&r, jiff::Timestamp::now())),
        Format::Json => Ok(serde_json::to_string_pretty(&r)? + "\n"),
        Format::Yaml => serde_yaml_ng::to_string(&r).context("rendering YAML"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fed_api::placement::{PlacementSpec, PlacementStatus, TargetCluster, WorkloadReference};

    fn placement(status: PlacementStatus) -> Placement {
        let mut p = Placement::new(
            "deployment-web",
            PlacementSpec {
                resource: WorkloadReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "web".into(),
                    uid: None,
                },
                dest_clusters: vec![
                    TargetCluster {
                        cluster: "sim-1".into(),
                        replicas: 3,
                    },
                    TargetCluster {
                        cluster: "sim-2".into(),
                        replicas: 7,
                    },
                ],
            },
        );
        p.status = Some(status);
        p
    }

    #[test]
    fn targets_and_kinds() {
        assert_eq!(
            parse_target("deploy/web", None).unwrap(),
            (Kind::Deployment, "web".into())
        );
        assert_eq!(
            parse_target("replicaset", Some("x")).unwrap(),
            (Kind::ReplicaSet, "x".into())
        );
        assert_eq!(parse_target("svc/web", None).unwrap().0, Kind::Service);
        assert_eq!(parse_target("sts/db", None).unwrap().0, Kind::StatefulSet);
        assert_eq!(parse_target("job", Some("crunch")).unwrap().0, Kind::Job);
        assert_eq!(
            parse_target("Deployments/a", None).unwrap().0,
            Kind::Deployment
        );
        let e = parse_target("ds/web", None).unwrap_err().to_string();
        assert!(e.contains("unknown kind \"ds\""), "{e}");
        assert!(parse_target("deploy/", None).is_err());
        assert!(parse_target("deploy", None).is_err());
        assert!(parse_target("deploy/a", Some("b")).is_err());
    }

    #[test]
    fn ages() {
        let now: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        assert_eq!(age(Some("2026-01-01T11:59:55Z"), now), "5s");
        assert_eq!(age(Some("2026-01-01T11:50:00Z"), now), "10m");
        assert_eq!(age(Some("2026-01-01T09:00:00Z"), now), "3h");
        assert_eq!(age(Some("2025-12-28T12:00:00Z"), now), "4d");
        assert_eq!(age(None, now), "-");
        assert_eq!(age(Some("yesterday"), now), "-");
    }

    #[test]
    fn workload_table_has_a_row_per_cluster_and_draining_ones_last() {
        let now: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let p = placement(PlacementStatus {
            conditions: vec![fed_api::common::Condition {
                type_: "Propagated".into(),
                status: "False".into(),
                reason: "SyncFailed".into(),
                message: "sim-2: timed out".into(),
                last_probe_time: None,
                last_transition_time: None,
            }],
            clusters: vec![
                ClusterWorkloadStatus {
                    cluster: "sim-1".into(),
                    replicas: 3,
                    ready_replicas: 3,
                    available_replicas: 3,
                    updated_replicas: 3,
                    last_sync_time: Some("2026-01-01T11:59:48Z".into()),
                    ..Default::default()
                },
                ClusterWorkloadStatus {
                    cluster: "sim-3".into(),
                    replicas: 1,
                    ready_replicas: 1,
                    ..Default::default()
                },
            ],
            unschedulable: None,
            policy: None,
        });
        let r = report(Kind::Deployment, "shop", "web", &p);
        assert_eq!(
            r.clusters
                .iter()
                .map(|c| c.cluster.as_str())
                .collect::<Vec<_>>(),
            ["sim-1", "sim-2", "sim-3"]
        );
        // The whole text: the summary, the failing condition's message, and the columns
        // aligned to their widest cell.
        let expected = "\
deployment shop/web  Propagated=False (SyncFailed)
  Propagated: sim-2: timed out
CLUSTER   DESIRED   READY   AVAILABLE   UPDATED   LAST-SYNC   ERROR
sim-1     3         3       3           3         12s
sim-2     7         -       -           -         -
sim-3     0         1       0           0         -
";
        assert_eq!(table(&r, now), expected);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["clusters"][0]["readyReplicas"], 3);
        assert_eq!(json["clusters"][0]["desired"], 3);
        assert_eq!(json["placement"], "deployment-web");
    }

    #[test]
    fn service_table_shows_endpoints_and_lb_agents() {
        let now: jiff::Timestamp = "2026-01-01T12:00:00Z".parse().unwrap();
        let mut p = placement(PlacementStatus {
            clusters: vec![
                ClusterWorkloadStatus {
                    cluster: "sim-1".into(),
                    endpoints: Some(3),
                    lb_agent: Some("127.0.1.1".into()),
                    healthy: Some(true),
                    last_sync_time: Some("2026-01-01T11:58:00Z".into()),
                    ..Default::default()
                },
                ClusterWorkloadStatus {
                    cluster: "sim-2".into(),
                    endpoints: Some(0),
                    healthy: Some(false),
                    last_sync_time: Some("2026-01-01T11:58:00Z".into()),
                    error: "creating Service shop/web in sim-2: timed out".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        p.metadata.name = Some("service-web".into());
        let r = report(Kind::Service, "shop", "web", &p);
        let expected = "\
service shop/web
CLUSTER   PUSHED   ENDPOINTS   LB-AGENT    HEALTHY   LAST-SYNC   ERROR
sim-1     yes      3           127.0.1.1   yes       2m
sim-2     no       0           -           no        2m          creating Service shop/web in sim-2: timed out
";
        assert_eq!(table(&r, now), expected);
    }

    #[test]
    fn unscheduled_says_so() {
        let mut p = placement(PlacementStatus::default());
        p.spec.dest_clusters.clear();
        let text = table(
            &report(Kind::Deployment, "shop", "web", &p),
            jiff::Timestamp::now(),
        );
        assert!(text.contains("not scheduled yet"), "{text}");
    }
}

//! `fedctl plan`: what the scheduler would decide for the objects in YAML files, with no
//! server — the same `fed_scheduler::plan_offline` call, printed as a table or YAML; the
//! YAML also shows, per destination, the object as that member will get it (share and
//! override policies applied, [`crate::members`]).

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;
use fed_scheduler::{PlanInput, PlanOptions, PlanReport, TargetCluster};

/// Output format of `fedctl plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per workload, then why for those not fully placed.
    Table,
    /// The whole report (see docs/plan.md).
    Yaml,
}

/// Reads `files` (`-` is stdin), plans, and renders the report.
pub fn run(files: &[PathBuf], without: &[String], format: Format) -> anyhow::Result<String> {
    let mut input = PlanInput::default();
    let mut sources = crate::members::Sources::default();
    for f in files {
        let (name, text) = if f.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading stdin")?;
            ("<stdin>".to_owned(), s)
        } else {
            let s =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            (f.display().to_string(), s)
        };
        input.add_yaml(&name, &text)?;
        sources.add_yaml(&name, &text)?;
    }
    let now = jiff::Timestamp::now().as_second();
    let report = fed_scheduler::plan_offline(
        &input,
        &PlanOptions {
            without: without.to_vec(),
            now_unix: now,
        },
    )?;
    match format {
        Format::Yaml => {
            let mut v = serde_json::to_value(&report).context("rendering the report")?;
            for (e, out) in report
                .workloads
                .iter()
                .zip(v["workloads"].as_array_mut().into_iter().flatten())
            {
                out["members"] = serde_json::Value::Array(sources.members(
                    (
                        e.api_version.as_str(),
                        e.namespace.as_str(),
                        e.kind.as_str(),
                        e.name.as_str(),
                    ),
                    &e.dest_clusters,
                    &input.clusters,
                ));
            }
            serde_yaml_ng::to_string(&v).context("rendering YAML")
        }
        Format::Table => Ok(table(&report)),
    }
}

fn dest_text(dest: &[TargetCluster]) -> String {
    if dest.is_empty() {
        return "<none>".to_owned();
    }
    dest.iter()
        .map(|t| format!("{}:{}", t.cluster, t.replicas))
        .collect::<Vec<_>>()
        .join(",")
}

/// The report as an aligned table plus a "why" line per workload not fully placed.
pub fn table(report: &PlanReport) -> String {
    let header = [
        "NAMESPACE",
        "WORKLOAD",
        "POLICY",
        "REPLICAS",
        "DEST CLUSTERS",
        "CHANGE",
        "SCHEDULED",
    ];
    let rows: Vec<[String; 7]> = report
        .workloads
        .iter()
        .map(|e| {
            [
                if e.namespace.is_empty() {
                    "-".to_owned()
                } else {
                    e.namespace.clone()
                },
                format!("{}/{}", e.kind.to_ascii_lowercase(), e.name),
                e.policy.clone().unwrap_or_else(|| "<none>".into()),
                e.replicas.to_string(),
                dest_text(&e.dest_clusters),
                if e.changed {
                    format!("was {}", dest_text(&e.previous))
                } else {
                    "-".into()
                },
                format!(
                    "{} {}",
                    if e.scheduled.scheduled {
                        "True"
                    } else {
                        "False"
                    },
                    e.scheduled.reason
                ),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    if !report.without.is_empty() {
        let _ = writeln!(out, "# without: {}", report.without.join(", "));
    }
    if report.mass_failure {
        let _ = writeln!(out, "# mass-failure guard engaged: evictions paused");
    }
    let line = |out: &mut String, cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}   ");
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(&mut out, &header);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&mut out, &cells);
    }
    for e in report.workloads.iter().filter(|e| !e.scheduled.scheduled) {
        let _ = writeln!(
            out,
            "\n{}/{}: {}",
            e.namespace, e.placement, e.scheduled.message
        );
        for c in &e.unschedulable.reasons {
            let _ = writeln!(out, "  {} {}: {}", c.cluster, c.reason, c.message);
        }
    }
    out
}

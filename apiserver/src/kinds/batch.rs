//! `batch/v1` Job and CronJob: run-to-completion pod templates, a Job's generated
//! selector, and the defaults kubectl and Helm rely on.

use apimachinery::JsonPointer;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use serde_json::{Value, json};

use super::apps::{default_pod_spec_but_restart, template_images, validate_pod_template};
use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, age_column, column, default_at, typed};
use crate::object;
use crate::registry::{Column, ResourceDef};
use crate::status::Cause;

/// The label a Job's generated selector matches on, with the Job's uid.
const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label carrying the Job's name on its pods.
const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// A Job's pods restart only on failure or never: `Always` would never complete.
const JOB_RESTART: &[&str] = &["OnFailure", "Never"];

/// Job spec defaults at `spec` (a Job's `spec` or a CronJob's `jobTemplate.spec`).
fn default_job_spec(spec: &mut Value) {
    // Neither given: one pod; only completions given: one at a time.
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        default_at(spec, &["completions"], json!(1));
    }
    default_at(spec, &["parallelism"], json!(1));
    default_at(spec, &["backoffLimit"], json!(6));
    default_at(spec, &["completionMode"], json!("NonIndexed"));
    default_at(spec, &["suspend"], json!(false));
    default_at(
        spec,
        &["podReplacementPolicy"],
        json!("TerminatingOrFailed"),
    );
    if let Some(pod) = spec.at_mut("/template/spec") {
        default_pod_spec_but_restart(pod);
    }
}

/// A new Job without `manualSelector: true` selects its pods by its own uid, and its
/// template carries that uid and its name, as the Job controller expects them.
fn generate_selector(o: &mut Value) {
    let manual = o.at("/spec/manualSelector").and_then(Value::as_bool) == Some(true);
    if manual {
        return;
    }
    let uid = object::meta_str(o, "uid").unwrap_or("").to_string();
    let name = object::name(o).to_string();
    if uid.is_empty() || o.at("/spec/selector").is_some_and(|s| !s.is_null()) {
        return;
    }
    default_at(
        o,
        &["spec", "selector", "matchLabels", CONTROLLER_UID],
        json!(uid),
    );
    for (k, v) in [
        (CONTROLLER_UID, &uid),
        ("controller-uid", &uid),
        (JOB_NAME, &name),
        ("job-name", &name),
    ] {
        default_at(o, &["spec", "template", "metadata", "labels", k], json!(v));
    }
}

/// The rules of a Job spec at `spec` (fields reported under `field`).
fn validate_job_spec(spec: Option<&Value>, field: &str, errs: &mut Vec<Cause>) {
    let Some(spec) = spec else {
        errs.push(required(field));
        return;
    };
    for f in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ] {
        let min = i64::from(f == "activeDeadlineSeconds");
        errs.extend(validate::min_int(
            spec,
            &format!("/{f}"),
            &format!("{field}.{f}"),
            min,
        ));
    }
    if let Some(m) = spec.get("completionMode")
        && !matches!(m.as_str(), Some("NonIndexed" | "Indexed"))
    {
        errs.push(not_supported(
            &format!("{field}.completionMode"),
            m,
            &["NonIndexed", "Indexed"],
        ));
    }
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed")
        && spec.get("completions").is_none_or(Value::is_null)
    {
        errs.push(Cause {
            message: "Required value: when completion mode is Indexed".into(),
            ..required(&format!("{field}.completions"))
        });
    }
    let template_field = format!("{field}.template");
    validate_pod_template(spec.get("template"), &template_field, JOB_RESTART, errs);
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) {
        let sel_field = format!("{field}.selector");
        match apimachinery::selector::LabelSelector::from_json(sel) {
            Err(e) => errs.push(invalid(&sel_field, sel, &e.to_string())),
            Ok(parsed) => {
                let empty = serde_json::Map::new();
                let labels = spec
                    .at("/template/metadata/labels")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                if !parsed.matches(labels) {
                    errs.push(invalid(
                        &format!("{template_field}.metadata.labels"),
                        &Value::Object(labels.clone()),
                        "`selector` does not match template `labels`",
                    ));
                }
            }
        }
    }
}

fn default_job(o: &mut Value) {
    if let Some(spec) = o.get_mut("spec") {
        default_job_spec(spec);
    }
}

fn validate_job(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    validate_job_spec(o.get("spec"), "spec", &mut errs);
    if let Some(old) = old {
        for (pointer, field) in [
            ("/spec/selector", "spec.selector"),
            ("/spec/completionMode", "spec.completionMode"),
            ("/spec/template", "spec.template"),
        ] {
            errs.extend(validate::immutable(o, old, pointer, field));
        }
        // Only an Indexed Job's completions change, and then with its parallelism.
        if o.at("/spec/completionMode").and_then(Value::as_str) != Some("Indexed") {
            errs.extend(validate::immutable(
                o,
                old,
                "/spec/completions",
                "spec.completions",
            ));
        }
    }
    errs
}

fn condition_true(o: &Value, ty: &str) -> bool {
    o.at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(ty)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// The STATUS cell kubectl shows for a Job.
fn job_status(o: &Value) -> Value {
    let status = if condition_true(o, "Complete") {
        "Complete"
    } else if condition_true(o, "Failed") {
        "Failed"
    } else if object::is_deleting(o) {
        "Terminating"
    } else if condition_true(o, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if condition_true(o, "FailureTarget") {
        "FailureTarget"
    } else if condition_true(o, "Suspended") {
        "Suspended"
    } else {
        "Running"
    };
    Value::from(status)
}

fn job_completions(o: &Value) -> Value {
    let done = o
        .at("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    Value::from(match o.at("/spec/completions").and_then(Value::as_i64) {
        Some(n) => format!("{done}/{n}"),
        None => {
            let p = o
                .at("/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if p > 1 {
                format!("{done}/1 of {p}")
            } else {
                format!("{done}/1")
            }
        }
    })
}

fn job_duration(o: &Value) -> Value {
    let secs = |p: &str| {
        o.at(p)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
    };
    let Some(start) = secs("/status/startTime") else {
        return Value::from("");
    };
    let end = secs("/status/completionTime").unwrap_or_else(|| jiff::Timestamp::now().as_second());
    Value::from(object::human_duration((end - start).max(0)))
}

fn selector_of(o: &Value, pointer: &str) -> Value {
    let sel = o.at(pointer).cloned().unwrap_or(Value::Null);
    match apimachinery::selector::LabelSelector::from_json(&sel) {
        Ok(s) => Value::from(s.to_string()),
        Err(_) => Value::from(""),
    }
}

/// `batch/v1` Job: `status` subresource, category `all`.
pub fn jobs() -> ResourceDef {
    let mut d = ResourceDef::new(
        "batch",
        "v1",
        "Job",
        "jobs",
        "job",
        true,
        FnHooks {
            default: default_job,
            validate: validate_job,
            check_types: typed::<Job>,
            prepare_create: generate_selector,
        },
    );
    d.categories = &["all"];
    d.definition = "io.k8s.api.batch.v1.Job";
    d.status_subresource = true;
    d.tracks_generation = true;
    d.columns = vec![
        column("Status", "string", "Status of the job.", false, job_status),
        column(
            "Completions",
            "string",
            "The number of pods which reached phase Succeeded over the desired completions.",
            false,
            job_completions,
        ),
        column(
            "Duration",
            "string",
            "Time required to complete the job.",
            false,
            job_duration,
        ),
        age_column(),
    ];
    d.columns.extend(wide_columns(
        |o| template_images(o, "/spec/template", "name"),
        |o| template_images(o, "/spec/template", "image"),
        |o| selector_of(o, "/spec/selector"),
    ));
    d
}

/// The `-o wide` columns Jobs and CronJobs share (their pod template and selector stand at
/// different paths, so each kind passes its own cells).
fn wide_columns(
    containers: fn(&Value) -> Value,
    images: fn(&Value) -> Value,
    selector: fn(&Value) -> Value,
) -> [Column; 3] {
    [
        column(
            "Containers",
            "string",
            "Names of each container in the template.",
            true,
            containers,
        ),
        column(
            "Images",
            "string",
            "Images referenced by each container in the template.",
            true,
            images,
        ),
        column(
            "Selector",
            "string",
            "A label query over pods that should match the pod count.",
            true,
            selector,
        ),
    ]
}

fn default_cronjob(o: &mut Value) {
    default_at(o, &["spec", "concurrencyPolicy"], json!("Allow"));
    default_at(o, &["spec", "suspend"], json!(false));
    default_at(o, &["spec", "successfulJobsHistoryLimit"], json!(3));
    default_at(o, &["spec", "failedJobsHistoryLimit"], json!(1));
    if let Some(spec) = o.at_mut("/spec/jobTemplate/spec") {
        default_job_spec(spec);
    }
}

/// Whether `schedule` is a standard cron line: five fields, or one of the `@` macros.
fn valid_schedule(schedule: &str) -> bool {
    let s = schedule.trim();
    // A `TZ=` or `CRON_TZ=` prefix belongs in `spec.timeZone` (upstream refuses it here).
    if s.starts_with("TZ=") || s.starts_with("CRON_TZ=") {
        return false;
    }
    if let Some(m) = s.strip_prefix('@') {
        return matches!(
            m,
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly"
        ) || m.starts_with("every ");
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || "*/,-?".contains(c))
        })
}

fn validate_cronjob(o: &Value, _old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    // Its Jobs are named `<name>-<11 digits>` and must stay valid label values.
    let name = object::name(o);
    if name.len() > 52 {
        errs.push(invalid(
            "metadata.name",
            &Value::from(name),
            "must be no more than 52 characters",
        ));
    }
    match o.at("/spec/schedule") {
        None => errs.push(required("spec.schedule")),
        Some(s) if !s.as_str().is_some_and(valid_schedule) => errs.push(invalid(
            "spec.schedule",
            s,
            "unparseable cron schedule: expected exactly 5 fields or a descriptor such as @daily",
        )),
        Some(_) => {}
    }
    if let Some(p) = o.at("/spec/concurrencyPolicy")
        && !matches!(p.as_str(), Some("Allow" | "Forbid" | "Replace"))
    {
        errs.push(not_supported(
            "spec.concurrencyPolicy",
            p,
            &["Allow", "Forbid", "Replace"],
        ));
    }
    for f in [
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
        "startingDeadlineSeconds",
    ] {
        errs.extend(validate::min_int(
            o,
            &format!("/spec/{f}"),
            &format!("spec.{f}"),
            0,
        ));
    }
    validate_job_spec(
        o.at("/spec/jobTemplate/spec"),
        "spec.jobTemplate.spec",
        &mut errs,
    );
    errs
}

/// `batch/v1` CronJob: `status` subresource, category `all`.
pub fn cronjobs() -> ResourceDef {
    let mut d = ResourceDef::new(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        "cronjob",
        true,
        FnHooks::typed::<CronJob>(default_cronjob, validate_cronjob),
    );
    d.short_names = &["cj"];
    d.categories = &["all"];
    d.definition = "io.k8s.api.batch.v1.CronJob";
    d.status_subresource = true;
    d.tracks_generation = true;
    const TEMPLATE: &str = "/spec/jobTemplate/spec/template";
    d.columns = vec![
        column(
            "Schedule",
            "string",
            "The schedule in Cron format.",
            false,
            |o| super::str_at(o, "/spec/schedule"),
        ),
        column(
            "Timezone",
            "string",
            "The time zone name for the given schedule.",
            false,
            |o| {
                Value::from(
                    o.at("/spec/timeZone")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>"),
                )
            },
        ),
        column(
            "Suspend",
            "boolean",
            "Whether subsequent executions are suspended.",
            false,
            // Printed `True`/`False` (or `<unset>`) as upstream does, not as a JSON bool.
            |o| {
                Value::from(match o.at("/spec/suspend").and_then(Value::as_bool) {
                    Some(true) => "True",
                    Some(false) => "False",
                    None => "<unset>",
                })
            },
        ),
        column(
            "Active",
            "integer",
            "A list of pointers to currently running jobs.",
            false,
            |o| {
                Value::from(
                    o.at("/status/active")
                        .and_then(Value::as_array)
                        .map_or(0, Vec::len),
                )
            },
        ),
        column(
            "Last Schedule",
            "string",
            "Information when was the last time the job was successfully scheduled.",
            false,
            |o| {
                Value::from(
                    o.at("/status/lastScheduleTime")
                        .and_then(Value::as_str)
                        .map(object::age)
                        .unwrap_or_else(|| "<none>".into()),
                )
            },
        ),
        age_column(),
    ];
    d.columns.extend(wide_columns(
        |o| template_images(o, TEMPLATE, "name"),
        |o| template_images(o, TEMPLATE, "image"),
        |o| selector_of(o, "/spec/jobTemplate/spec/selector"),
    ));
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "migrate", "namespace": "shop", "uid": "1234"},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "m", "image": "busybox:1.36"}]}}},
        })
    }

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_job_without_selector_gets_one_from_its_uid() {
        let mut o = job();
        generate_selector(&mut o);
        default_job(&mut o);
        assert_eq!(
            o["spec"]["selector"],
            json!({"matchLabels": {CONTROLLER_UID: "1234"}})
        );
        let labels = &o["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels[CONTROLLER_UID], "1234");
        assert_eq!(labels["job-name"], "migrate");
        assert_eq!(o["spec"]["completions"], 1);
        assert_eq!(o["spec"]["parallelism"], 1);
        assert_eq!(o["spec"]["backoffLimit"], 6);
        assert_eq!(o["spec"]["completionMode"], "NonIndexed");
        assert!(o["spec"].get("manualSelector").is_none());
        assert!(
            validate_job(&o, None).is_empty(),
            "{:?}",
            validate_job(&o, None)
        );
    }

    #[test]
    fn a_job_must_state_a_restart_policy_that_ends() {
        let mut o = job();
        o["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        assert_eq!(
            fields(&validate_job(&o, None)),
            ["spec.template.spec.restartPolicy"]
        );
        o["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("restartPolicy");
        let errs = validate_job(&o, None);
        assert_eq!(fields(&errs), ["spec.template.spec.restartPolicy"]);
        assert!(
            errs[0].message.contains("\"OnFailure\", \"Never\""),
            "{errs:?}"
        );
    }

    #[test]
    fn a_job_keeps_its_selector_and_template() {
        let mut old = job();
        generate_selector(&mut old);
        default_job(&mut old);
        let mut changed = old.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:1.37");
        assert_eq!(
            fields(&validate_job(&changed, Some(&old))),
            ["spec.template"]
        );
        let mut suspended = old.clone();
        suspended["spec"]["suspend"] = json!(true);
        assert!(validate_job(&suspended, Some(&old)).is_empty());
    }

    #[test]
    fn a_cronjob_gets_its_defaults_and_needs_a_schedule() {
        let mut o = json!({
            "metadata": {"name": "nightly", "namespace": "shop"},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure",
                "containers": [{"name": "b", "image": "busybox"}]}}}}},
        });
        default_cronjob(&mut o);
        assert_eq!(o["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(o["spec"]["suspend"], false);
        assert_eq!(o["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(o["spec"]["failedJobsHistoryLimit"], 1);
        assert_eq!(o["spec"]["jobTemplate"]["spec"]["backoffLimit"], 6);
        assert!(validate_cronjob(&o, None).is_empty());
        assert!(valid_schedule("@hourly"));
        assert!(valid_schedule("*/5 1-3 * * MON-FRI"));
        o["spec"]["schedule"] = json!("every day");
        o["spec"]["concurrencyPolicy"] = json!("Sometimes");
        assert_eq!(
            fields(&validate_cronjob(&o, None)),
            ["spec.schedule", "spec.concurrencyPolicy"]
        );
    }

    #[test]
    fn job_cells_read_as_kubectl_prints_them() {
        let mut o = job();
        o["spec"]["completions"] = json!(3);
        o["status"] = json!({"succeeded": 1, "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:01:05Z"});
        assert_eq!(job_completions(&o), "1/3");
        assert_eq!(job_duration(&o), "65s");
        assert_eq!(job_status(&o), "Running");
        o["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
        assert_eq!(job_status(&o), "Complete");
    }
}

//! In-process scenarios for the Job, StatefulSet and DaemonSet loops, on a paused tokio clock
//! (timers advance by themselves while everything is idle; nothing sleeps).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use meridian_apiserver::registry::ResourceDef;

use meridian_apiserver::engine::{PatchType, Target, WriteOptions};
use serde_json::{Value, json};

use super::tests::{cluster_with, create, deployment, get, list, two_nodes, until};
use super::util::{condition, condition_true, controller_of, str_at};
use super::*;

async fn sim(ready_delay: Duration, job_pod_duration: Duration) -> Arc<Sim> {
    cluster_with(ClusterConfig {
        ready_delay,
        job_pod_duration,
        ..ClusterConfig::default()
    })
    .await
}

async fn merge(sim: &Sim, def: &ResourceDef, name: &str, patch: Value) {
    sim.engine
        .patch(
            def,
            "default",
            name,
            PatchType::Merge,
            &patch,
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("patch");
    // Checks read the watch cache: it must show the change first.
    sim.engine.sync().await.expect("sync");
}

fn job(name: &str, completions: i64, parallelism: i64, backoff_limit: i64) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions, "parallelism": parallelism, "backoffLimit": backoff_limit,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]}},
        },
    })
}

/// The Job's pods by phase: (active, succeeded, failed).
fn job_pods(sim: &Sim, job: &str) -> (usize, usize, usize) {
    let pods: Vec<Value> = list(sim, &sim.kinds.pods, "default")
        .into_iter()
        .filter(|p| controller_of(p, "Job").is_some_and(|(j, _)| j == job))
        .collect();
    let phase = |want: &str| {
        pods.iter()
            .filter(|p| str_at(p, "/status/phase") == Some(want))
            .count()
    };
    let done = phase("Succeeded") + phase("Failed");
    (pods.len() - done, phase("Succeeded"), phase("Failed"))
}

fn job_condition(sim: &Sim, name: &str, ty: &str) -> Option<Value> {
    get(sim, &sim.kinds.jobs, "default", name).and_then(|j| condition(&j, ty).cloned())
}

#[tokio::test(start_paused = true)]
async fn job_runs_its_pods_to_completion() {
    let sim = sim(Duration::from_millis(200), Duration::from_secs(2)).await;
    two_nodes(&sim).await;
    let created = create(&sim, &sim.kinds.jobs, "default", job("pi", 5, 2, 6)).await;
    let uid = str_at(&created, "/metadata/uid").expect("uid").to_string();
    let mut most_active = 0;
    until(&sim, "the Job complete", || {
        most_active = most_active.max(job_pods(&sim, "pi").0);
        job_condition(&sim, "pi", "Complete").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(most_active, 2, "parallelism bounds the running pods");
    assert_eq!(job_pods(&sim, "pi"), (0, 5, 0));
    let j = get(&sim, &sim.kinds.jobs, "default", "pi").expect("job");
    assert_eq!(j["status"]["succeeded"], 5);
    assert_eq!(j["status"]["failed"], 0);
    assert_eq!(j["status"]["active"], 0);
    assert_eq!(j["status"]["ready"], 0);
    assert!(j["status"]["startTime"].is_string());
    assert!(j["status"]["completionTime"].is_string());
    assert!(j["status"].get("observedGeneration").is_none());
    let types: Vec<&str> = j["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
    assert_eq!(
        condition(&j, "Complete").expect("Complete")["reason"],
        "CompletionsReached"
    );
    // Three rounds of two, two and one pods of two seconds each: about six seconds.
    let start = util::parse_time(str_at(&j, "/status/startTime").expect("start")).expect("t");
    let end = util::parse_time(str_at(&j, "/status/completionTime").expect("end")).expect("t");
    let took = end.as_second() - start.as_second();
    assert!((6..=8).contains(&took), "took {took}s");
    for p in list(&sim, &sim.kinds.pods, "default") {
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid.as_str());
        assert_eq!(labels["controller-uid"], uid.as_str());
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(p["status"]["phase"], "Succeeded");
        assert!(str_at(&p, "/metadata/name").is_some_and(|n| n.starts_with("pi-")));
    }
}

#[tokio::test(start_paused = true)]
async fn failing_job_reaches_its_backoff_limit() {
    let sim = sim(Duration::ZERO, Duration::from_secs(1)).await;
    two_nodes(&sim).await;
    sim.job_failures.set("default", "flaky", true);
    create(&sim, &sim.kinds.jobs, "default", job("flaky", 1, 1, 2)).await;
    until(&sim, "the Job failed", || {
        job_condition(&sim, "flaky", "Failed").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let j = get(&sim, &sim.kinds.jobs, "default", "flaky").expect("job");
    // backoffLimit 2: the third failure fails the Job.
    assert_eq!(j["status"]["failed"], 3);
    assert_eq!(j["status"]["succeeded"], 0);
    assert_eq!(j["status"]["active"], 0);
    for ty in ["FailureTarget", "Failed"] {
        let c = condition(&j, ty).expect(ty);
        assert_eq!(c["reason"], "BackoffLimitExceeded", "{ty}");
    }
    assert!(!condition_true(&j, "Complete"));
    assert_eq!(job_pods(&sim, "flaky"), (0, 0, 3));
    let failed = list(&sim, &sim.kinds.pods, "default");
    assert_eq!(
        failed[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        1
    );

    // Cleared, another Job of the same name succeeds.
    sim.job_failures.set("default", "flaky", false);
    create(&sim, &sim.kinds.jobs, "default", job("steady", 1, 1, 0)).await;
    until(&sim, "the other Job complete", || {
        job_condition(&sim, "steady", "Complete").is_some_and(|c| c["status"] == "True")
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn suspended_job_runs_nothing_until_resumed() {
    let sim = sim(Duration::ZERO, Duration::from_secs(5)).await;
    two_nodes(&sim).await;
    let mut j = job("later", 1, 1, 6);
    j["spec"]["suspend"] = json!(true);
    create(&sim, &sim.kinds.jobs, "default", j).await;
    until(&sim, "Suspended", || {
        job_condition(&sim, "later", "Suspended").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(job_pods(&sim, "later"), (0, 0, 0));
    let j = get(&sim, &sim.kinds.jobs, "default", "later").expect("job");
    assert!(j["status"].get("startTime").is_none());
    merge(
        &sim,
        &sim.kinds.jobs,
        "later",
        json!({"spec": {"suspend": false}}),
    )
    .await;
    until(&sim, "a pod running", || job_pods(&sim, "later").0 == 1).await;
    // Suspended again: the running pod goes.
    merge(
        &sim,
        &sim.kinds.jobs,
        "later",
        json!({"spec": {"suspend": true}}),
    )
    .await;
    until(&sim, "no pod", || job_pods(&sim, "later").0 == 0).await;
    merge(
        &sim,
        &sim.kinds.jobs,
        "later",
        json!({"spec": {"suspend": false}}),
    )
    .await;
    until(&sim, "complete", || {
        job_condition(&sim, "later", "Complete").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(
        job_condition(&sim, "later", "Suspended").expect("Suspended")["reason"],
        "JobResumed"
    );
}

fn statefulset(name: &str, replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
}

/// The set's pods: name → (ready, revision label).
fn set_pods(sim: &Sim, set: &str) -> Vec<(String, bool, String)> {
    list(sim, &sim.kinds.pods, "default")
        .into_iter()
        .filter(|p| controller_of(p, "StatefulSet").is_some_and(|(s, _)| s == set))
        .map(|p| {
            (
                str_at(&p, "/metadata/name").unwrap_or("").to_string(),
                condition_true(&p, "Ready"),
                str_at(&p, "/metadata/labels/controller-revision-hash")
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// `kubectl rollout status statefulset` for a RollingUpdate set with partition 0.
fn set_rolled_out(sim: &Sim, name: &str) -> bool {
    let Some(s) = get(sim, &sim.kinds.stateful_sets, "default", name) else {
        return false;
    };
    let n = |f: &str| s["status"][f].as_i64().unwrap_or(-1);
    let replicas = s["spec"]["replicas"].as_i64().unwrap_or(0);
    n("observedGeneration") >= s["metadata"]["generation"].as_i64().unwrap_or(0)
        && n("readyReplicas") >= replicas
        && n("updatedReplicas") >= replicas
        && s["status"]["currentRevision"] == s["status"]["updateRevision"]
}

#[tokio::test(start_paused = true)]
async fn statefulset_creates_in_order_scales_down_and_rolls() {
    let sim = sim(Duration::from_secs(1), Duration::ZERO).await;
    two_nodes(&sim).await;
    create(
        &sim,
        &sim.kinds.stateful_sets,
        "default",
        statefulset("db", 3, "pg:1"),
    )
    .await;
    let mut seen_unready_at_once = 0;
    until(&sim, "three ready pods", || {
        let pods = set_pods(&sim, "db");
        // OrderedReady: the pods present are always 0..k, and at most the last unready.
        let names: Vec<String> = pods.iter().map(|p| p.0.clone()).collect();
        let want: Vec<String> = (0..names.len()).map(|i| format!("db-{i}")).collect();
        assert_eq!(names, want);
        seen_unready_at_once = seen_unready_at_once.max(pods.iter().filter(|p| !p.1).count());
        set_rolled_out(&sim, "db") && pods.len() == 3
    })
    .await;
    assert_eq!(seen_unready_at_once, 1);
    let s = get(&sim, &sim.kinds.stateful_sets, "default", "db").expect("set");
    for f in [
        "replicas",
        "readyReplicas",
        "currentReplicas",
        "updatedReplicas",
        "availableReplicas",
    ] {
        assert_eq!(s["status"][f], 3, "{f}");
    }
    assert_eq!(s["status"]["collisionCount"], 0);
    let rev1 = str_at(&s, "/status/updateRevision")
        .expect("revision")
        .to_string();
    assert!(rev1.starts_with("db-"));
    let p = get(&sim, &sim.kinds.pods, "default", "db-1").expect("pod");
    assert_eq!(p["spec"]["hostname"], "db-1");
    assert_eq!(p["spec"]["subdomain"], "db");
    assert_eq!(
        p["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
        "db-1"
    );
    assert_eq!(p["metadata"]["labels"]["apps.kubernetes.io/pod-index"], "1");
    assert_eq!(
        p["metadata"]["labels"]["controller-revision-hash"],
        rev1.as_str()
    );
    assert_eq!(
        p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "data-db-1"
    );
    let claims = || -> BTreeSet<(String, String)> {
        list(&sim, &sim.kinds.pvcs, "default")
            .iter()
            .map(|c| {
                (
                    str_at(c, "/metadata/name").unwrap_or("").to_string(),
                    str_at(c, "/status/phase").unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let bound: BTreeSet<(String, String)> = (0..3)
        .map(|i| (format!("data-db-{i}"), "Bound".to_string()))
        .collect();
    assert_eq!(claims(), bound);

    // Scale down: from the top, one at a time; the claims stay.
    merge(
        &sim,
        &sim.kinds.stateful_sets,
        "db",
        json!({"spec": {"replicas": 1}}),
    )
    .await;
    until(&sim, "one pod", || {
        let pods = set_pods(&sim, "db");
        assert!(pods.iter().any(|p| p.0 == "db-0"));
        pods.len() == 1
            && get(&sim, &sim.kinds.stateful_sets, "default", "db")
                .is_some_and(|s| s["status"]["replicas"] == 1)
    })
    .await;
    assert_eq!(claims(), bound);

    // A template change rolls the pods to the new revision.
    merge(
        &sim,
        &sim.kinds.stateful_sets,
        "db",
        json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "main", "image": "pg:2"}]}}}}),
    )
    .await;
    until(&sim, "rolled to the new revision", || {
        set_rolled_out(&sim, "db") && set_pods(&sim, "db").len() == 2
    })
    .await;
    let s = get(&sim, &sim.kinds.stateful_sets, "default", "db").expect("set");
    let rev2 = str_at(&s, "/status/updateRevision")
        .expect("revision")
        .to_string();
    assert_ne!(rev1, rev2);
    for (_, ready, rev) in set_pods(&sim, "db") {
        assert!(ready);
        assert_eq!(rev, rev2);
    }
}

#[tokio::test(start_paused = true)]
async fn parallel_statefulset_from_a_start_ordinal() {
    let sim = sim(Duration::from_secs(1), Duration::ZERO).await;
    two_nodes(&sim).await;
    let mut s = statefulset("web", 3, "nginx");
    s["spec"]["podManagementPolicy"] = json!("Parallel");
    s["spec"]["ordinals"] = json!({"start": 5});
    create(&sim, &sim.kinds.stateful_sets, "default", s).await;
    let mut most_unready = 0;
    until(&sim, "three ready pods", || {
        let pods = set_pods(&sim, "web");
        most_unready = most_unready.max(pods.iter().filter(|p| !p.1).count());
        pods.len() == 3 && set_rolled_out(&sim, "web")
    })
    .await;
    assert_eq!(most_unready, 3, "Parallel creates every pod at once");
    let names: BTreeSet<String> = set_pods(&sim, "web").into_iter().map(|p| p.0).collect();
    assert_eq!(
        names,
        BTreeSet::from(["web-5", "web-6", "web-7"].map(String::from))
    );
}

fn daemonset(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    })
}

/// `kubectl rollout status daemonset`, with the expected node count.
fn ds_rolled_out(sim: &Sim, name: &str, nodes: i64) -> bool {
    let Some(d) = get(sim, &sim.kinds.daemon_sets, "default", name) else {
        return false;
    };
    let n = |f: &str| d["status"][f].as_i64().unwrap_or(-1);
    n("observedGeneration") >= d["metadata"]["generation"].as_i64().unwrap_or(0)
        && n("desiredNumberScheduled") == nodes
        && n("updatedNumberScheduled") == nodes
        && n("numberAvailable") == nodes
}

/// Node name → the DaemonSet pods bound to it.
fn ds_pods(sim: &Sim, name: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = list(sim, &sim.kinds.pods, "default")
        .into_iter()
        .filter(|p| controller_of(p, "DaemonSet").is_some_and(|(d, _)| d == name))
        .map(|p| {
            (
                str_at(&p, "/spec/nodeName").unwrap_or("").to_string(),
                str_at(&p, "/metadata/name").unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(start_paused = true)]
async fn daemonset_follows_nodes_and_rolls() {
    let sim = sim(Duration::from_millis(500), Duration::ZERO).await;
    two_nodes(&sim).await;
    // A tainted node the pods do not tolerate gets none.
    create_nodes(
        &sim,
        &[NodeSpec::new("gpu", "4", "8Gi").with_taint("gpu", "", "NoSchedule")],
    )
    .await
    .expect("node");
    create(
        &sim,
        &sim.kinds.daemon_sets,
        "default",
        daemonset("agent", "agent:1"),
    )
    .await;
    until(&sim, "a pod per eligible node", || {
        ds_rolled_out(&sim, "agent", 2)
    })
    .await;
    let nodes: Vec<String> = ds_pods(&sim, "agent").into_iter().map(|p| p.0).collect();
    assert_eq!(nodes, ["node-a", "node-b"]);
    let d = get(&sim, &sim.kinds.daemon_sets, "default", "agent").expect("ds");
    for (f, want) in [
        ("currentNumberScheduled", 2),
        ("numberReady", 2),
        ("numberUnavailable", 0),
        ("numberMisscheduled", 0),
    ] {
        assert_eq!(d["status"][f], want, "{f}");
    }
    let p = list(&sim, &sim.kinds.pods, "default")
        .into_iter()
        .next()
        .expect("pod");
    let tolerations = p["spec"]["tolerations"].as_array().expect("tolerations");
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "node.kubernetes.io/unschedulable")
    );

    // A new node gets a pod.
    create_nodes(&sim, &[NodeSpec::new("node-c", "4", "8Gi")])
        .await
        .expect("node");
    until(&sim, "a pod on the new node", || {
        ds_rolled_out(&sim, "agent", 3)
    })
    .await;
    let nodes: Vec<String> = ds_pods(&sim, "agent").into_iter().map(|p| p.0).collect();
    assert_eq!(nodes, ["node-a", "node-b", "node-c"]);

    // A template change replaces every pod.
    let before: BTreeSet<String> = ds_pods(&sim, "agent").into_iter().map(|p| p.1).collect();
    merge(
        &sim,
        &sim.kinds.daemon_sets,
        "agent",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "agent:2"}]}}}}),
    )
    .await;
    let mut most_unavailable = 0;
    until(&sim, "rolled out", || {
        if let Some(d) = get(&sim, &sim.kinds.daemon_sets, "default", "agent") {
            most_unavailable =
                most_unavailable.max(d["status"]["numberUnavailable"].as_i64().unwrap_or(0));
        }
        ds_rolled_out(&sim, "agent", 3) && ds_pods(&sim, "agent").len() == 3
    })
    .await;
    assert_eq!(most_unavailable, 1, "maxUnavailable 1");
    let after: BTreeSet<String> = ds_pods(&sim, "agent").into_iter().map(|p| p.1).collect();
    assert!(before.is_disjoint(&after));
}

#[tokio::test(start_paused = true)]
async fn cronjob_starts_jobs_on_schedule_and_keeps_history() {
    let sim = sim(Duration::ZERO, Duration::from_secs(5)).await;
    two_nodes(&sim).await;
    create(
        &sim,
        &sim.kinds.cron_jobs,
        "default",
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "tick"},
            "spec": {
                "schedule": "* * * * *",
                "successfulJobsHistoryLimit": 1,
                "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}]}}}},
            },
        }),
    )
    .await;
    let jobs = || -> Vec<String> {
        list(&sim, &sim.kinds.jobs, "default")
            .iter()
            .filter_map(|j| str_at(j, "/metadata/name").map(String::from))
            .collect()
    };
    until(&sim, "the first run", || !jobs().is_empty()).await;
    let first = jobs()[0].clone();
    // Named by the scheduled minute.
    let minute: i64 = first
        .strip_prefix("tick-")
        .expect("name")
        .parse()
        .expect("minute");
    let cj = get(&sim, &sim.kinds.cron_jobs, "default", "tick").expect("cronjob");
    let scheduled = util::parse_time(str_at(&cj, "/status/lastScheduleTime").expect("time"))
        .expect("timestamp");
    assert_eq!(scheduled.as_second(), minute * 60);
    assert_eq!(cj["status"]["active"][0]["name"], first.as_str());
    let job = get(&sim, &sim.kinds.jobs, "default", &first).expect("job");
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");

    // A minute later the next run; the first finished long before, so only one successful
    // Job is kept.
    let second = format!("tick-{}", minute + 1);
    until(&sim, "the second run finished", || {
        get(&sim, &sim.kinds.jobs, "default", &second)
            .is_some_and(|j| condition_true(&j, "Complete"))
    })
    .await;
    until(&sim, "the first Job removed", || jobs() == [second.clone()]).await;
    until(&sim, "lastSuccessfulTime", || {
        get(&sim, &sim.kinds.cron_jobs, "default", "tick").is_some_and(|c| {
            c["status"]["lastSuccessfulTime"].is_string() && c["status"].get("active").is_none()
        })
    })
    .await;

    // Suspended: no more runs.
    merge(
        &sim,
        &sim.kinds.cron_jobs,
        "tick",
        json!({"spec": {"suspend": true}}),
    )
    .await;
    let stop = tokio::time::Instant::now() + Duration::from_secs(100);
    until(&sim, "quiet minutes", || {
        tokio::time::Instant::now() >= stop
    })
    .await;
    assert_eq!(jobs(), [second]);
}

#[tokio::test(start_paused = true)]
async fn disruption_budget_follows_pod_health() {
    let sim = sim(Duration::from_millis(200), Duration::ZERO).await;
    two_nodes(&sim).await;
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("web", 4, "nginx", "100m"),
    )
    .await;
    let pdb = |spec: Value| {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": spec})
    };
    create(
        &sim,
        &sim.kinds.pdbs,
        "default",
        pdb(json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}})),
    )
    .await;
    let status = |want: [i64; 4]| {
        get(&sim, &sim.kinds.pdbs, "default", "web").is_some_and(|p| {
            let n = |f: &str| p["status"][f].as_i64().unwrap_or(-1);
            [
                n("expectedPods"),
                n("desiredHealthy"),
                n("currentHealthy"),
                n("disruptionsAllowed"),
            ] == want
                && n("observedGeneration") == 1
        })
    };
    until(&sim, "one disruption allowed", || status([4, 3, 4, 1])).await;
    let p = get(&sim, &sim.kinds.pdbs, "default", "web").expect("pdb");
    assert_eq!(
        condition(&p, "DisruptionAllowed").expect("condition")["reason"],
        "SufficientPods"
    );
    // Two pods on a failed node are not healthy: nothing may go.
    set_node_ready(&sim, "node-a", false).await.expect("node");
    until(&sim, "no disruption allowed", || status([4, 3, 2, 0])).await;
    set_node_ready(&sim, "node-a", true).await.expect("node");
    until(&sim, "allowed again", || status([4, 3, 4, 1])).await;
}

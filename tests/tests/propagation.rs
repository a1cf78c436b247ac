//! Workload propagation end to end: a federated Deployment applied with kubectl lands in the
//! members with its ConfigMap and each member's share, its status sums up on the federation
//! (`kubectl rollout status`, READY 10/10), scaling and new images flow through, edits in a
//! member are reverted, an unmanaged same-name object is never overwritten, and deleting the
//! federated object cleans the members; all of it with one member sync at a time for the
//! whole controllers' process.

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::{Env, wait_for};
use serde::de::DeserializeOwned;

/// Waits on a watch until the named object is gone.
async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + 'static,
{
    let list = api
        .list(&kube::api::ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .expect("list");
    if list.items.is_empty() {
        return;
    }
    let rv = list.metadata.resource_version.unwrap_or_else(|| "0".into());
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut stream = Box::pin(api.watch(&wp, &rv).await.expect("watch"));
    while let Some(ev) = stream.try_next().await.expect("watch event") {
        if let WatchEvent::Deleted(_) = ev {
            return;
        }
    }
    panic!("watch on {name} ended before it was deleted");
}

/// Waits on a watch of the namespace's Events until those seen about Deployment `name`
/// satisfy `pred`.
async fn wait_events(api: &Api<Event>, name: &str, what: &str, pred: impl Fn(&[Event]) -> bool) {
    let mut seen = Vec::new();
    let mut stream = Box::pin(
        api.watch(&WatchParams::default(), "0")
            .await
            .expect("watch events"),
    );
    while let Some(ev) = stream.try_next().await.expect("event watch") {
        if let WatchEvent::Added(e) | WatchEvent::Modified(e) = ev
            && e.involved_object.name.as_deref() == Some(name)
            && e.involved_object.kind.as_deref() == Some("Deployment")
        {
            seen.push(e);
            if pred(&seen) {
                return;
            }
        }
    }
    let msgs: Vec<_> = seen
        .iter()
        .map(|e| format!("{:?}: {:?}", e.reason, e.message))
        .collect();
    panic!("event watch ended waiting for {what}; seen about {name}: {msgs:#?}");
}

/// Whether some Event with `reason` says every one of `parts`.
fn told(events: &[Event], reason: &str, parts: &[&str]) -> bool {
    let text: String = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message.clone())
        .collect::<Vec<_>>()
        .join("\n");
    parts.iter().all(|p| text.contains(p))
}

fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1)
}

fn image(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn label<'a>(m: &'a kube::api::ObjectMeta, k: &str) -> Option<&'a str> {
    m.labels.as_ref()?.get(k).map(String::as_str)
}

const OTHER: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: other, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: other}
  placement:
    clusterAffinity:
      clusterNames: [sim-1]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: other, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: other}}
  template:
    metadata: {labels: {app: other}}
    spec:
      containers: [{name: other, image: "federated:1"}]
"#;

#[tokio::test]
async fn propagates_aggregates_reverts_drift_respects_others_and_cleans_up() {
    let env = Env::start(&[
        "--clusters=2",
        "--nodes=3",
        "--node-cpu=8",
        "--node-memory=16Gi",
        "--ready-delay=0s",
    ]);
    // One member sync at a time for the whole process: the workload, dependency, copy and
    // service paths each finish a sync without waiting on another's, or this would hang.
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
        "--member-concurrent-syncs=1",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1", "sim-2"], 3).await;
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/web.yaml");
    env.ok("kubectl", &["apply", "-f", example]);
    env.rollout_status("deploy/web", "shop");
    let table = env.ok("kubectl", &["get", "deploy", "web", "-n", "shop"]);
    assert!(table.contains("10/10"), "{table}");
    env.ok(
        "kubectl",
        &[
            "wait",
            "--for=condition=Available",
            "deploy/web",
            "-n",
            "shop",
            "--timeout=60s",
        ],
    );

    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "shop");
    let dest_of = |p: &fed_api::Placement| -> Vec<(String, u32)> {
        p.spec
            .dest_clusters
            .iter()
            .map(|t| (t.cluster.clone(), t.replicas))
            .collect()
    };
    let policy_split = vec![("sim-1".to_string(), 3), ("sim-2".to_string(), 7)];
    // The Placement's status follows the members' reports: wait until it shows them all.
    let p = wait_for(
        &placements,
        "deployment-web",
        "0",
        "destClusters sim-1:3 sim-2:7 with every replica ready",
        |p| {
            dest_of(p) == policy_split
                && p.status.as_ref().is_some_and(|s| {
                    s.clusters.iter().map(|c| c.ready_replicas).sum::<i32>() == 10
                        && s.conditions
                            .iter()
                            .any(|c| c.type_ == "Propagated" && c.status == "True")
                })
        },
    )
    .await;
    assert_eq!(dest_of(&p), policy_split);
    let st = p.status.expect("placement status");
    assert_eq!(
        st.clusters.iter().map(|c| c.ready_replicas).sum::<i32>(),
        10,
        "{st:#?}"
    );
    assert!(
        st.conditions
            .iter()
            .any(|c| c.type_ == "Propagated" && c.status == "True"),
        "{st:#?}"
    );

    let fed_web: Api<Deployment> = Api::namespaced(fed.clone(), "shop");
    let web = fed_web.get("web").await.expect("federated web");
    let uid = web.metadata.uid.clone().expect("uid");
    assert!(
        web.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == fed_api::names::WORKLOAD_FINALIZER)),
        "{:?}",
        web.metadata.finalizers
    );
    // The decision is told on the federated object, naming each member's share: the one
    // Event of a new workload (the pushes that carry it out show on the Placement).
    let events: Api<Event> = Api::namespaced(fed.clone(), "shop");
    wait_events(&events, "web", "the Scheduled event", |evs| {
        told(evs, "Scheduled", &["destClusters sim-1:3 sim-2:7"])
    })
    .await;
    let m1: Api<Deployment> = Api::namespaced(env.member("sim-1").await, "shop");
    let m2: Api<Deployment> = Api::namespaced(env.member("sim-2").await, "shop");
    for (api, want) in [(&m1, 3), (&m2, 7)] {
        let d = api.get("web").await.expect("member web");
        assert_eq!(replicas(&d), want);
        assert_eq!(
            label(&d.metadata, "app.kubernetes.io/managed-by"),
            Some("meridian")
        );
        assert_eq!(
            label(&d.metadata, "federation.meridian.dev/owner-uid"),
            Some(uid.as_str())
        );
        let cms: Api<ConfigMap> = Api::namespaced(api.clone().into_client(), "shop");
        let cm = cms.get("web-config").await.expect("ConfigMap pushed");
        assert_eq!(
            cm.data
                .as_ref()
                .and_then(|d| d.get("GREETING"))
                .map(String::as_str),
            Some("hello from the federation")
        );
        assert_eq!(
            label(&cm.metadata, "app.kubernetes.io/managed-by"),
            Some("meridian")
        );
    }

    // Scaling flows through: 20 = 7 + 13.
    env.ok(
        "kubectl",
        &["scale", "deploy/web", "-n", "shop", "--replicas=20"],
    );
    wait_for(&m1, "web", "0", "7 replicas in sim-1", |d| replicas(d) == 7).await;
    wait_for(&m2, "web", "0", "13 replicas in sim-2", |d| {
        replicas(d) == 13
    })
    .await;
    env.rollout_status("deploy/web", "shop");

    // The scale passed through Progressing ("waiting for members to observe the current
    // spec"); back in sync, the condition keeps nothing of that message, and the
    // scheduler's condition sits beside it.
    let p = wait_for(
        &placements,
        "deployment-web",
        "0",
        "20 ready, in sync",
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.clusters.iter().map(|c| c.ready_replicas).sum::<i32>() == 20
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Propagated" && c.reason == "InSync")
            })
        },
    )
    .await;
    let st = p.status.expect("placement status");
    // Neither the pushes nor a scale within the same clusters wrote an Event: the
    // workload's Events are still its one decision.
    let about_web: Vec<(String, i32)> = events
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some("web")
                && e.involved_object.kind.as_deref() == Some("Deployment")
                && e.reason.as_deref() != Some("FailedScheduling")
        })
        .map(|e| (e.reason.unwrap_or_default(), e.count.unwrap_or(1)))
        .collect();
    assert_eq!(about_web, [("Scheduled".to_owned(), 1)], "{st:#?}");
    let condition = |t: &str| st.conditions.iter().find(|c| c.type_ == t);
    let propagated = condition("Propagated").expect("Propagated condition");
    assert_eq!(
        (propagated.status.as_str(), propagated.message.as_str()),
        ("True", ""),
        "{st:#?}"
    );
    assert_eq!(
        condition("Scheduled").map(|c| c.status.as_str()),
        Some("True"),
        "{st:#?}"
    );

    // A new image reaches every member.
    env.ok(
        "kubectl",
        &["set", "image", "deploy/web", "-n", "shop", "web=nginx:1.28"],
    );
    for api in [&m1, &m2] {
        wait_for(api, "web", "0", "new image", |d| image(d) == "nginx:1.28").await;
    }
    env.rollout_status("deploy/web", "shop");
    let table = env.ok("kubectl", &["get", "deploy", "web", "-n", "shop"]);
    assert!(table.contains("20/20"), "{table}");

    // Pointing the pods at another ConfigMap pushes it and removes the one no longer used.
    env.ok(
        "kubectl",
        &[
            "create",
            "configmap",
            "web-config-2",
            "-n",
            "shop",
            "--from-literal=GREETING=hello again",
        ],
    );
    env.ok(
        "kubectl",
        &[
            "patch",
            "deploy/web",
            "-n",
            "shop",
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": "web-config-2"}]"#,
        ],
    );
    for api in [&m1, &m2] {
        let cms: Api<ConfigMap> = Api::namespaced(api.clone().into_client(), "shop");
        wait_for(
            &cms,
            "web-config-2",
            "0",
            "the new ConfigMap pushed",
            |cm| {
                cm.data
                    .as_ref()
                    .and_then(|d| d.get("GREETING"))
                    .is_some_and(|g| g == "hello again")
            },
        )
        .await;
        wait_gone(&cms, "web-config").await;
    }
    env.rollout_status("deploy/web", "shop");

    // Drift: an edit made directly in a member is reverted.
    let edited = m1
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect("edit in member");
    assert_eq!(replicas(&edited), 1);
    let rv = edited.metadata.resource_version.clone().expect("rv");
    wait_for(&m1, "web", &rv, "drift reverted", |d| replicas(d) == 7).await;
    wait_events(&events, "web", "a DriftReverted event", |evs| {
        told(
            evs,
            "DriftReverted",
            &["restored Deployment shop/web", "sim-1"],
        )
    })
    .await;

    // An unmanaged same-name object in a member is not overwritten; the Placement says why.
    let unmanaged: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "other", "namespace": "shop"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "mine"}},
                 "template": {"metadata": {"labels": {"app": "mine"}},
                              "spec": {"containers": [{"name": "mine", "image": "mine:1"}]}}}
    }))
    .expect("deployment");
    m1.create(&PostParams::default(), &unmanaged)
        .await
        .expect("unmanaged object");
    env.apply("other.yaml", OTHER);
    let p = wait_for(
        &placements,
        "deployment-other",
        "0",
        "conflict reported",
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.clusters
                    .iter()
                    .any(|c| c.cluster == "sim-1" && c.error.contains("conflict"))
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Propagated" && c.reason == "Conflict")
            })
        },
    )
    .await;
    assert!(p.status.is_some());
    wait_events(&events, "other", "a Conflict warning", |evs| {
        evs.iter().any(|e| e.type_.as_deref() == Some("Warning"))
            && told(evs, "Conflict", &["sim-1", "not managed by Meridian"])
    })
    .await;
    let mine = m1.get("other").await.expect("unmanaged object");
    assert_eq!(image(&mine), "mine:1");
    assert_eq!(replicas(&mine), 1);
    assert_eq!(label(&mine.metadata, "app.kubernetes.io/managed-by"), None);

    // Deleting the federated object removes the copies and, unreferenced, the ConfigMap.
    env.ok(
        "kubectl",
        &["delete", "deploy", "web", "-n", "shop", "--timeout=120s"],
    );
    for api in [&m1, &m2] {
        wait_gone(api, "web").await;
        let cms: Api<ConfigMap> = Api::namespaced(api.clone().into_client(), "shop");
        wait_gone(&cms, "web-config-2").await;
    }
    assert!(
        m1.get_opt("other").await.expect("get").is_some(),
        "the unmanaged object stays"
    );
}

/// A new workload's Placement gets its per-cluster entries from the members' first reports:
/// while every destination is still on its first sync (slowed here), nothing is written
/// that the first report would replace at once. Nor does the workload get a status of its
/// own before its Placement exists (the status delay, 2 s here, is how long the controllers
/// wait for it).
#[tokio::test]
async fn a_new_workloads_status_is_first_written_from_its_members_reports() {
    let env = Env::start(&["--clusters=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=2s",
        "--probe-timeout=2s",
        "--workload-status-delay=2s",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1"], 3).await;
    env.ok("kubectl", &["create", "namespace", "slow"]);
    let policy = "apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: all, namespace: slow}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]
  placement: {clusterAffinity: {clusterNames: [sim-1]}}
";
    env.apply("policy.yaml", policy);
    // Every request to sim-1 now waits: the first sync of a new workload takes seconds.
    env.ctl(&["slow", "sim-1", "--latency", "500ms"]);

    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "slow");
    let rv = placements
        .list_metadata(&Default::default())
        .await
        .expect("list placements")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    let deployments: Api<Deployment> = Api::namespaced(fed.clone(), "slow");
    let d = deployment_w("slow");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create w");

    // Until sim-1 has reported, edits that change nothing a member holds have the
    // controller look at the workload again and again while sim-1 is on its first sync.
    for i in 0.. {
        assert!(i < 100_000, "sim-1 never reported");
        deployments
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": i.to_string()
                }}})),
            )
            .await
            .expect("annotate w");
        let reported = placements
            .get_opt("deployment-w")
            .await
            .expect("get placement")
            .and_then(|p| p.status)
            .is_some_and(|s| s.clusters.iter().any(|e| e.last_sync_time.is_some()));
        if reported {
            break;
        }
    }

    // Every version of the Placement, from its creation until the member reports 2 ready.
    let seen = std::sync::Mutex::new(Vec::new());
    wait_for(
        &placements,
        "deployment-w",
        &rv,
        "sim-1 reporting 2 ready",
        |p| {
            let entries = p
                .status
                .as_ref()
                .map(|s| s.clusters.clone())
                .unwrap_or_default();
            let done = entries.iter().any(|e| e.ready_replicas == 2);
            seen.lock().unwrap().push(entries);
            done
        },
    )
    .await;
    // The workload's versions from its creation until its status shows 2 ready: the first
    // with a status comes after the Placement was created.
    let placement_rv = first_version(&placements, "deployment-w", &rv).await;
    let statuses = std::sync::Mutex::new(Vec::new());
    wait_for(&deployments, "w", &rv, "w showing 2 ready", |d| {
        let rv: u64 = d
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        let done = d
            .status
            .as_ref()
            .is_some_and(|s| s.ready_replicas == Some(2));
        statuses.lock().unwrap().push((rv, d.status.clone()));
        done
    })
    .await;
    let statuses = statuses.into_inner().unwrap();
    let first_status = statuses
        .iter()
        .find(|(_, st)| st.is_some())
        .map(|(rv, _)| *rv)
        .expect("a status");
    assert!(
        first_status > placement_rv,
        "a status at version {first_status}, before the Placement (version {placement_rv}): \
         {statuses:#?}"
    );

    let seen = seen.into_inner().unwrap();
    for entries in &seen {
        for e in entries {
            assert!(
                e.last_sync_time.is_some() || !e.error.is_empty(),
                "an entry written before the member's first report: {e:?}\nall versions: {seen:#?}"
            );
        }
    }
    assert!(seen.iter().any(|e| !e.is_empty()), "{seen:#?}");
}

/// Deployment `w` in `namespace`: 2 replicas of image `w:1`.
fn deployment_w(namespace: &str) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "w"}},
            "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "w", "image": "w:1"}]}
            }
        }
    }))
    .expect("deployment")
}

/// An object's resourceVersion as a number (the federation's are its store revisions).
fn version_of(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion")
}

/// The resourceVersion at which `name` was first seen after `rv` (its creation).
async fn first_version<K>(api: &Api<K>, name: &str, rv: &str) -> u64
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + 'static,
{
    version_of(
        wait_for(api, name, rv, "its creation", |_| true)
            .await
            .meta(),
    )
}

/// After a scale the federated status does not claim the new generation until the
/// scheduler has placed it: until then the member still holds its old share, and a status
/// written from it would say the scale is done with the old counts (and cost a second
/// status write once the share moves). The scheduler is stopped across the scale, so the
/// member acts on the new template at its old share before the new share exists.
#[tokio::test]
async fn a_scale_is_reported_observed_only_once_the_scheduler_placed_it() {
    let env = Env::start(&["--clusters=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--metrics-bind-address=off",
        // Longer than the scheduler's restart below, whatever the machine's load.
        "--workload-status-hold=120s",
    ]);
    let mut scheduler = env.scheduler(&[]);
    env.join_with_capacity(&["sim-1"], 3).await;
    env.ok("kubectl", &["create", "namespace", "scale"]);
    env.apply(
        "policy.yaml",
        "apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: all, namespace: scale}
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]
  placement: {clusterAffinity: {clusterNames: [sim-1]}}
",
    );
    let fed = env.federation().await;
    let deployments: Api<Deployment> = Api::namespaced(fed.clone(), "scale");
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "scale");
    let in_member: Api<Deployment> = Api::namespaced(env.member("sim-1").await, "scale");
    let d = deployment_w("scale");
    let created = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create w");
    let ready = |d: &Deployment, n: i32| {
        d.status.as_ref().is_some_and(|s| {
            s.ready_replicas == Some(n) && s.observed_generation == d.metadata.generation
        })
    };
    let created_rv = created.metadata.resource_version.expect("resourceVersion");
    let before = wait_for(&deployments, "w", &created_rv, "w ready 2/2", |d| {
        ready(d, 2)
    })
    .await;
    let before_rv = before.metadata.resource_version.expect("resourceVersion");

    scheduler.kill();
    let scaled = deployments
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"replicas": 3, "template": {"spec": {
                "containers": [{"name": "w", "image": "w:2"}]}}}}),
            ),
        )
        .await
        .expect("scale w and change its image");
    let generation = scaled.metadata.generation.expect("generation");
    let scaled_rv = scaled.metadata.resource_version.expect("resourceVersion");
    // The member holds the new image at its old share, and has acted on it.
    wait_for(
        &in_member,
        "w",
        "0",
        "the new image at the old share, observed",
        |d| {
            let spec = d.spec.as_ref().expect("spec");
            let image = spec.template.spec.as_ref().expect("pod spec").containers[0]
                .image
                .as_deref();
            image == Some("w:2")
                && spec.replicas == Some(2)
                && d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
        },
    )
    .await;
    let _scheduler = env.scheduler(&[]);
    // The first version of the Placement that holds the new share.
    let placed = wait_for(
        &placements,
        "deployment-w",
        &before_rv,
        "the new share",
        |p| p.spec.dest_clusters.iter().map(|t| t.replicas).sum::<u32>() == 3,
    )
    .await;
    let placed_rv = version_of(&placed.metadata);
    // Every version of the workload from the scale until its status shows it done.
    let versions = std::sync::Mutex::new(Vec::new());
    wait_for(&deployments, "w", &scaled_rv, "w ready 3/3", |d| {
        let rv = version_of(&d.metadata);
        versions.lock().unwrap().push((rv, d.status.clone()));
        ready(d, 3)
    })
    .await;
    let versions = versions.into_inner().unwrap();
    for (rv, status) in &versions {
        let observed = status.as_ref().and_then(|s| s.observed_generation);
        assert!(
            observed < Some(generation) || *rv > placed_rv,
            "generation {generation} reported observed at version {rv}, before the scheduler \
             placed it (version {placed_rv}): {versions:#?}"
        );
    }
}

//! In-process scenarios for the control loops: fresh engines, real watches, no sockets.
//! Tests wait on cache revisions (never sleep to synchronise); scenarios with a ready delay
//! run on a paused tokio clock that advances by itself while everything is idle.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use meridian_apiserver::cache::EventType;
use meridian_apiserver::engine::{DeleteOptions, PatchType, Target, WriteOptions};
use meridian_apiserver::registry::ResourceDef;
use meridian_store::{MemoryStore, Storage};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::util::{condition, condition_true, str_at};
use super::*;

const CA: &str = "-----BEGIN CERTIFICATE-----\nTUVSSURJQU4=\n-----END CERTIFICATE-----\n";

async fn cluster(ready_delay: Duration, lb_pool: &[&str]) -> Arc<Sim> {
    cluster_with(ClusterConfig {
        ready_delay,
        lb_pool: parse_address_pool(lb_pool).expect("pool"),
        ..ClusterConfig::default()
    })
    .await
}

/// A started cluster named `test` with this configuration (and the test CA).
pub(super) async fn cluster_with(config: ClusterConfig) -> Arc<Sim> {
    let store: Arc<dyn Storage> = Arc::new(MemoryStore::new());
    let engine =
        meridian_apiserver::server::build_engine(crate::kinds::member_registry(), store, 10_000)
            .await
            .expect("engine");
    let sim = Sim::new(
        engine,
        ClusterConfig {
            name: "test".into(),
            ca_pem: CA.into(),
            index: 0,
            ..config
        },
    )
    .expect("sim");
    create(
        &sim,
        &sim.kinds.namespaces,
        "",
        json!({"metadata": {"name": "default"}}),
    )
    .await;
    sim.engine.sync().await.expect("sync");
    start(sim.clone());
    sim
}

pub(super) async fn create(sim: &Sim, def: &ResourceDef, ns: &str, obj: Value) -> Value {
    sim.engine
        .create(def, ns, obj, &WriteOptions::default())
        .await
        .expect("create")
        .obj
}

pub(super) fn get(sim: &Sim, def: &ResourceDef, ns: &str, name: &str) -> Option<Value> {
    sim.cached(def, ns, name)
}

pub(super) fn list(sim: &Sim, def: &ResourceDef, ns: &str) -> Vec<Value> {
    sim.cache(def)
        .list(&def.namespace_prefix(Some(ns)), None, None, 0, |_| true)
        .items
        .iter()
        .map(|c| c.value())
        .collect()
}

/// Waits (on cache revisions, and the paused clock where used) until `check` holds.
pub(super) async fn until(sim: &Sim, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if check() {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        let rev = sim.engine.cache.revision();
        sim.engine
            .cache
            .wait_for(rev + 1, Duration::from_millis(200))
            .await;
    }
}

pub(super) fn deployment(name: &str, replicas: i64, image: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "main", "image": image,
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
                }]},
            },
        },
    })
}

fn rollout_done(sim: &Sim, name: &str, replicas: i64) -> bool {
    let Some(d) = get(sim, &sim.kinds.deployments, "default", name) else {
        return false;
    };
    let n = |f: &str| {
        d.pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(-1)
    };
    // kubectl rollout status: observed, all updated, no old replicas, all available.
    n("observedGeneration") >= d["metadata"]["generation"].as_i64().unwrap_or(0)
        && n("updatedReplicas") == replicas
        && n("replicas") == replicas
        && n("availableReplicas") == replicas
}

fn pods_of(sim: &Sim, app: &str) -> Vec<Value> {
    list(sim, &sim.kinds.pods, "default")
        .into_iter()
        .filter(|p| str_at(p, "/metadata/labels/app") == Some(app))
        .collect()
}

pub(super) async fn two_nodes(sim: &Sim) {
    create_nodes(
        sim,
        &[
            NodeSpec::new("node-a", "4", "8Gi").in_zone("eu", "eu-1a"),
            NodeSpec::new("node-b", "4", "8Gi").in_zone("eu", "eu-1b"),
        ],
    )
    .await
    .expect("nodes");
}

#[tokio::test]
async fn deployment_reaches_ready_replicas() {
    let sim = cluster(Duration::ZERO, &[]).await;
    two_nodes(&sim).await;
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("web", 5, "nginx:1.27", "100m"),
    )
    .await;
    until(&sim, "rollout", || rollout_done(&sim, "web", 5)).await;

    let d = get(&sim, &sim.kinds.deployments, "default", "web").expect("deployment");
    assert_eq!(d["status"]["readyReplicas"], 5);
    assert_eq!(d["status"]["unavailableReplicas"], 0);
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let avail = condition(&d, "Available").expect("Available");
    assert_eq!(avail["status"], "True");
    assert_eq!(avail["reason"], "MinimumReplicasAvailable");
    until(&sim, "Progressing complete", || {
        get(&sim, &sim.kinds.deployments, "default", "web")
            .and_then(|d| condition(&d, "Progressing").cloned())
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable")
    })
    .await;

    let rss = list(&sim, &sim.kinds.replica_sets, "default");
    assert_eq!(rss.len(), 1);
    let rs = &rss[0];
    let hash = str_at(rs, "/metadata/labels/pod-template-hash").expect("hash label");
    let rs_name = str_at(rs, "/metadata/name").expect("name");
    assert_eq!(rs_name, format!("web-{hash}"));
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    for f in [
        "replicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(rs["status"][f], 5, "{f}");
    }
    assert_eq!(rs["status"]["observedGeneration"], 1);

    let pods = pods_of(&sim, "web");
    assert_eq!(pods.len(), 5);
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    let mut ips = std::collections::BTreeSet::new();
    for p in &pods {
        let name = str_at(p, "/metadata/name").expect("name");
        assert!(
            name.starts_with(&format!("{rs_name}-")) && name.len() == rs_name.len() + 6,
            "{name}"
        );
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(p["status"]["phase"], "Running");
        assert!(condition_true(p, "Ready") && condition_true(p, "ContainersReady"));
        assert!(condition_true(p, "PodScheduled") && condition_true(p, "Initialized"));
        assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
        assert!(p["status"]["containerStatuses"][0]["state"]["running"].is_object());
        let node = str_at(p, "/spec/nodeName").expect("bound").to_string();
        let ip = str_at(p, "/status/podIP").expect("ip").to_string();
        let host = str_at(p, "/status/hostIP").expect("host ip");
        let idx = if node == "node-a" { 0 } else { 1 };
        assert!(ip.starts_with(&format!("10.244.{idx}.")), "{ip} on {node}");
        assert_eq!(host, format!("172.18.0.{}", 2 + idx));
        assert!(ips.insert(ip));
        *per_node.entry(node).or_default() += 1;
    }
    // Least-allocated spreads the pods 3/2.
    let mut counts: Vec<usize> = per_node.values().copied().collect();
    counts.sort();
    assert_eq!(counts, [2, 3]);
}

#[tokio::test]
async fn pods_wait_unschedulable_until_a_node_is_added() {
    let sim = cluster(Duration::ZERO, &[]).await;
    create_nodes(&sim, &[NodeSpec::new("small", "1", "8Gi")])
        .await
        .expect("node");
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("big", 3, "app:1", "400m"),
    )
    .await;
    until(&sim, "one unschedulable pod", || {
        let pods = pods_of(&sim, "big");
        pods.len() == 3
            && pods.iter().filter(|p| condition_true(p, "Ready")).count() == 2
            && pods.iter().any(|p| {
                condition(p, "PodScheduled").is_some_and(|c| {
                    c["status"] == "False"
                        && c["reason"] == "Unschedulable"
                        && c["message"] == "0/1 nodes are available: 1 Insufficient cpu."
                })
            })
    })
    .await;
    let pending: Vec<Value> = pods_of(&sim, "big")
        .into_iter()
        .filter(|p| p.pointer("/spec/nodeName").is_none())
        .collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["status"]["phase"], "Pending");

    create_nodes(&sim, &[NodeSpec::new("extra", "2", "8Gi")])
        .await
        .expect("node");
    until(&sim, "all scheduled and ready", || {
        rollout_done(&sim, "big", 3)
    })
    .await;
    let on_extra = pods_of(&sim, "big")
        .iter()
        .filter(|p| str_at(p, "/spec/nodeName") == Some("extra"))
        .count();
    assert_eq!(on_extra, 1);

    // Shrinking the new node's capacity does not evict, but new pods no longer fit there.
    set_node_capacity(&sim, "extra", Some("400m"), None)
        .await
        .expect("capacity");
    sim.engine.sync().await.expect("sync");
    let n = get(&sim, &sim.kinds.nodes, "", "extra").expect("node");
    assert_eq!(n["status"]["allocatable"]["cpu"], "400m");
    assert_eq!(n["status"]["allocatable"]["memory"], "8Gi");
}

#[tokio::test(start_paused = true)]
async fn rolling_update_honours_surge_and_unavailability() {
    let sim = cluster(Duration::from_secs(3), &[]).await;
    two_nodes(&sim).await;
    let mut d = deployment("roll", 4, "app:1", "100m");
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}});
    create(&sim, &sim.kinds.deployments, "default", d).await;
    until(&sim, "first rollout", || rollout_done(&sim, "roll", 4)).await;
    let old_rs: Vec<String> = list(&sim, &sim.kinds.replica_sets, "default")
        .iter()
        .filter_map(|r| str_at(r, "/metadata/name").map(String::from))
        .collect();

    // Watch every pod change from here and track totals after each event.
    let (snapshot, mut sub) = sim.cache(&sim.kinds.pods).snapshot_and_subscribe();
    let observer = tokio::spawn(async move {
        let mut ready: HashMap<String, bool> = snapshot
            .iter()
            .map(|c| (c.name().to_string(), condition_true(&c.value(), "Ready")))
            .collect();
        let (mut max_pods, mut min_ready) = (ready.len(), ready.len());
        while let Ok(ev) = sub.live.recv().await {
            if ev.obj.name() == "stop" {
                break;
            }
            match ev.kind {
                EventType::Deleted => {
                    ready.remove(ev.obj.name());
                }
                _ => {
                    ready.insert(
                        ev.obj.name().to_string(),
                        condition_true(&ev.obj.value(), "Ready"),
                    );
                }
            }
            max_pods = max_pods.max(ready.len());
            min_ready = min_ready.min(ready.values().filter(|r| **r).count());
        }
        (max_pods, min_ready)
    });

    sim.engine
        .patch(
            &sim.kinds.deployments,
            "default",
            "roll",
            PatchType::Merge,
            &json!({"spec": {"template": {"spec": {"containers": [{
                "name": "main", "image": "app:2",
                "ports": [{"name": "http", "containerPort": 8080}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }]}}}}),
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("patch");
    until(&sim, "second rollout", || {
        rollout_done(&sim, "roll", 4)
            && pods_of(&sim, "roll")
                .iter()
                .all(|p| p["spec"]["containers"][0]["image"] == "app:2")
    })
    .await;
    // A marker pod (no owner, no matching Service) ends the observation.
    create(
        &sim,
        &sim.kinds.pods,
        "default",
        json!({"metadata": {"name": "stop"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    let (max_pods, min_ready) = observer.await.expect("observer");
    assert!(
        max_pods <= 4 + 1 + 1,
        "at most replicas+surge pods (+ marker): {max_pods}"
    );
    assert!(
        min_ready >= 4 - 1,
        "at least replicas-unavailable ready: {min_ready}"
    );

    let rss = list(&sim, &sim.kinds.replica_sets, "default");
    assert_eq!(rss.len(), 2);
    for rs in &rss {
        let name = str_at(rs, "/metadata/name").unwrap_or("");
        let rev = &rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"];
        if old_rs.iter().any(|o| o == name) {
            assert_eq!(rs["spec"]["replicas"], 0);
            assert_eq!(rev, "1");
        } else {
            assert_eq!(rs["spec"]["replicas"], 4);
            assert_eq!(rev, "2");
        }
    }
    let d = get(&sim, &sim.kinds.deployments, "default", "roll").expect("deployment");
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "2"
    );
}

#[tokio::test]
async fn recreate_and_history_limit() {
    let sim = cluster(Duration::ZERO, &[]).await;
    two_nodes(&sim).await;
    let mut d = deployment("re", 2, "app:1", "100m");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    d["spec"]["revisionHistoryLimit"] = json!(1);
    create(&sim, &sim.kinds.deployments, "default", d).await;
    until(&sim, "rollout 1", || rollout_done(&sim, "re", 2)).await;
    for image in ["app:2", "app:3"] {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{
            "name": "main", "image": image,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        }]}}}});
        sim.engine
            .patch(
                &sim.kinds.deployments,
                "default",
                "re",
                PatchType::Merge,
                &patch,
                Target::Main,
                &WriteOptions::default(),
            )
            .await
            .expect("patch");
        until(&sim, image, || {
            rollout_done(&sim, "re", 2)
                && pods_of(&sim, "re")
                    .iter()
                    .all(|p| p["spec"]["containers"][0]["image"] == image)
        })
        .await;
    }
    // Revision 3 is current; one old (revision 2) is kept, revision 1 is pruned.
    until(&sim, "history pruned", || {
        list(&sim, &sim.kinds.replica_sets, "default").len() == 2
    })
    .await;
    let mut revs: Vec<String> = list(&sim, &sim.kinds.replica_sets, "default")
        .iter()
        .map(|r| {
            r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    revs.sort();
    assert_eq!(revs, ["2", "3"]);
}

#[tokio::test]
async fn endpoints_follow_readiness() {
    let sim = cluster(Duration::ZERO, &[]).await;
    two_nodes(&sim).await;
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("api", 2, "api:1", "100m"),
    )
    .await;
    create(
        &sim,
        &sim.kinds.services,
        "default",
        json!({"metadata": {"name": "api", "labels": {"team": "x"}}, "spec": {
            "selector": {"app": "api"},
            "ports": [{"name": "web", "port": 80, "targetPort": "http"}],
        }}),
    )
    .await;
    until(&sim, "rollout", || rollout_done(&sim, "api", 2)).await;
    let ready_addrs = |sim: &Sim| -> (usize, usize) {
        let Some(ep) = get(sim, &sim.kinds.endpoints, "default", "api") else {
            return (0, 0);
        };
        let n = |f: &str| {
            ep.pointer(&format!("/subsets/0/{f}"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        };
        (n("addresses"), n("notReadyAddresses"))
    };
    until(&sim, "two ready endpoints", || ready_addrs(&sim) == (2, 0)).await;
    let svc = get(&sim, &sim.kinds.services, "default", "api").expect("svc");
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(svc["spec"]["clusterIPs"], json!(["10.96.0.1"]));
    let ep = get(&sim, &sim.kinds.endpoints, "default", "api").expect("endpoints");
    assert_eq!(
        ep["subsets"][0]["ports"],
        json!([{"name": "web", "port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(ep["subsets"][0]["addresses"][0]["targetRef"]["kind"], "Pod");
    assert_eq!(ep["metadata"]["labels"]["team"], "x");

    let slices = list(&sim, &sim.kinds.endpoint_slices, "default");
    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    let slice_name = str_at(slice, "/metadata/name").expect("name");
    assert!(
        slice_name.starts_with("api-") && slice_name.len() == 9,
        "{slice_name}"
    );
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "api"
    );
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["ports"],
        json!([{"name": "web", "port": 8080, "protocol": "TCP"}])
    );
    let eps = slice["endpoints"].as_array().expect("endpoints");
    assert_eq!(eps.len(), 2);
    for e in eps {
        assert_eq!(
            e["conditions"],
            json!({"ready": true, "serving": true, "terminating": false})
        );
        assert!(
            e["nodeName"].is_string()
                && e["zone"].is_string()
                && e["targetRef"]["name"].is_string()
        );
    }

    // node-a fails: its pods turn not ready, and so do their endpoints.
    let on_a = pods_of(&sim, "api")
        .iter()
        .filter(|p| str_at(p, "/spec/nodeName") == Some("node-a"))
        .count();
    assert_eq!(on_a, 1);
    set_node_ready(&sim, "node-a", false)
        .await
        .expect("not ready");
    until(&sim, "one endpoint not ready", || {
        ready_addrs(&sim) == (1, 1)
    })
    .await;
    until(&sim, "slice shows it", || {
        list(&sim, &sim.kinds.endpoint_slices, "default")[0]["endpoints"]
            .as_array()
            .is_some_and(|a| {
                a.iter()
                    .filter(|e| e["conditions"]["ready"] == false)
                    .count()
                    == 1
            })
    })
    .await;
    until(&sim, "deployment sees one ready", || {
        get(&sim, &sim.kinds.deployments, "default", "api")
            .is_some_and(|d| d["status"]["readyReplicas"] == 1)
    })
    .await;
    set_node_ready(&sim, "node-a", true).await.expect("ready");
    until(&sim, "both ready again", || ready_addrs(&sim) == (2, 0)).await;

    // Deleting the Service removes the Endpoints too.
    sim.engine
        .delete(
            &sim.kinds.services,
            "default",
            "api",
            &DeleteOptions::default(),
        )
        .await
        .expect("delete");
    until(&sim, "endpoints gone", || {
        get(&sim, &sim.kinds.endpoints, "default", "api").is_none()
    })
    .await;
}

#[tokio::test]
async fn load_balancer_addresses_are_assigned_and_released() {
    let sim = cluster(Duration::ZERO, &["192.0.2.10", "192.0.2.11"]).await;
    let lb = |name: &str| json!({"metadata": {"name": name}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
    let ingress = |sim: &Sim, name: &str| -> Option<String> {
        get(sim, &sim.kinds.services, "default", name)
            .and_then(|s| str_at(&s, "/status/loadBalancer/ingress/0/ip").map(String::from))
    };
    create(&sim, &sim.kinds.services, "default", lb("a")).await;
    until(&sim, "a gets an address", || ingress(&sim, "a").is_some()).await;
    create(&sim, &sim.kinds.services, "default", lb("b")).await;
    until(&sim, "b gets an address", || ingress(&sim, "b").is_some()).await;
    create(&sim, &sim.kinds.services, "default", lb("c")).await;
    assert_eq!(ingress(&sim, "a").as_deref(), Some("192.0.2.10"));
    assert_eq!(ingress(&sim, "b").as_deref(), Some("192.0.2.11"));
    // Pool exhausted: c stays pending (it still gets a ClusterIP).
    until(&sim, "c has a cluster IP", || {
        get(&sim, &sim.kinds.services, "default", "c")
            .is_some_and(|s| s["spec"]["clusterIP"].is_string())
    })
    .await;
    assert_eq!(ingress(&sim, "c"), None);

    sim.engine
        .delete(
            &sim.kinds.services,
            "default",
            "a",
            &DeleteOptions::default(),
        )
        .await
        .expect("delete");
    until(&sim, "c gets the released address", || {
        ingress(&sim, "c").as_deref() == Some("192.0.2.10")
    })
    .await;

    // Turning b into a ClusterIP Service releases its address and clears its status.
    sim.engine
        .patch(
            &sim.kinds.services,
            "default",
            "b",
            PatchType::Merge,
            &json!({"spec": {"type": "ClusterIP"}}),
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("patch");
    until(&sim, "b's status cleared", || ingress(&sim, "b").is_none()).await;
    create(&sim, &sim.kinds.services, "default", lb("d")).await;
    until(&sim, "d reuses b's address", || {
        ingress(&sim, "d").as_deref() == Some("192.0.2.11")
    })
    .await;
}

#[tokio::test]
async fn load_balancer_honours_requested_addresses() {
    let sim = cluster(Duration::ZERO, &["127.0.1.1", "127.0.1.2", "127.0.1.3"]).await;
    let lb = |name: &str, ip: Option<&str>| {
        let mut s = json!({"metadata": {"name": name}, "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        if let Some(ip) = ip {
            s["spec"]["loadBalancerIP"] = json!(ip);
        }
        s
    };
    let ingress = |sim: &Sim, name: &str| -> Option<String> {
        get(sim, &sim.kinds.services, "default", name)
            .and_then(|s| str_at(&s, "/status/loadBalancer/ingress/0/ip").map(String::from))
    };
    let warnings = |sim: &Sim, name: &str| -> Vec<(String, String)> {
        list(sim, &sim.kinds.events, "default")
            .iter()
            .filter(|e| e["involvedObject"]["name"] == name && e["type"] == "Warning")
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    e["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    // The second pool address, though the first is free.
    create(
        &sim,
        &sim.kinds.services,
        "default",
        lb("agent", Some("127.0.1.2")),
    )
    .await;
    until(&sim, "agent gets its address", || {
        ingress(&sim, "agent").as_deref() == Some("127.0.1.2")
    })
    .await;
    // No request: the first free address.
    create(&sim, &sim.kinds.services, "default", lb("plain", None)).await;
    until(&sim, "plain gets the first free address", || {
        ingress(&sim, "plain").as_deref() == Some("127.0.1.1")
    })
    .await;
    // Asking for a held address: pending, with a Warning event naming the holder.
    create(
        &sim,
        &sim.kinds.services,
        "default",
        lb("rival", Some("127.0.1.2")),
    )
    .await;
    until(&sim, "rival's warning", || {
        !warnings(&sim, "rival").is_empty()
    })
    .await;
    assert_eq!(
        warnings(&sim, "rival"),
        [(
            "LoadBalancerIPInUse".to_string(),
            "requested loadBalancerIP 127.0.1.2 is in use by Service default/agent".to_string()
        )]
    );
    assert_eq!(ingress(&sim, "rival"), None);
    // An address outside the pool: the first free one, with a warning.
    create(
        &sim,
        &sim.kinds.services,
        "default",
        lb("outside", Some("10.9.9.9")),
    )
    .await;
    until(&sim, "outside falls back", || {
        ingress(&sim, "outside").as_deref() == Some("127.0.1.3")
    })
    .await;
    until(&sim, "outside's warning", || {
        warnings(&sim, "outside")
            .iter()
            .any(|(r, _)| r == "LoadBalancerIPNotInPool")
    })
    .await;
    assert_eq!(ingress(&sim, "rival"), None);

    // The holder goes: the waiting Service gets the address it asked for.
    sim.engine
        .delete(
            &sim.kinds.services,
            "default",
            "agent",
            &DeleteOptions::default(),
        )
        .await
        .expect("delete");
    until(&sim, "rival gets its address", || {
        ingress(&sim, "rival").as_deref() == Some("127.0.1.2")
    })
    .await;
}

#[tokio::test]
async fn service_account_tokens_are_issued_and_filled_in() {
    use base64::Engine as _;
    let b64 = |v: &Value| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or(""))
                .expect("base64"),
        )
        .expect("utf8")
    };
    let sim = cluster(Duration::ZERO, &[]).await;
    create(
        &sim,
        &sim.kinds.namespaces,
        "",
        json!({"metadata": {"name": "team"}}),
    )
    .await;
    sim.engine.sync().await.expect("sync");
    let default_token = || {
        list(&sim, &sim.kinds.secrets, "team")
            .into_iter()
            .find(|s| str_at(s, "/metadata/name").is_some_and(|n| n.starts_with("default-token-")))
    };
    until(&sim, "default token", || {
        default_token().is_some_and(|s| s["data"]["token"].is_string())
    })
    .await;
    let sa = get(&sim, &sim.kinds.service_accounts, "team", "default").expect("sa");
    let secret = default_token().expect("secret");
    assert_eq!(
        str_at(&secret, "/metadata/name").map(str::len),
        Some("default-token-".len() + 5)
    );
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        "default"
    );
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"],
        sa["metadata"]["uid"]
    );
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"],
        sa["metadata"]["uid"]
    );
    let token = b64(&secret["data"]["token"]);
    assert!(token.len() >= 40);
    assert_eq!(b64(&secret["data"]["ca.crt"]), CA);
    assert_eq!(b64(&secret["data"]["namespace"]), "team");

    // A join tool's own Secret, named as the tool likes, created before its ServiceAccount.
    create(
        &sim,
        &sim.kinds.secrets,
        "team",
        json!({"metadata": {"name": "joiner-token", "annotations": {"kubernetes.io/service-account.name": "joiner"}},
               "type": "kubernetes.io/service-account-token"}),
    )
    .await;
    create(
        &sim,
        &sim.kinds.service_accounts,
        "team",
        json!({"metadata": {"name": "joiner"}}),
    )
    .await;
    until(&sim, "join secret filled", || {
        get(&sim, &sim.kinds.secrets, "team", "joiner-token")
            .is_some_and(|s| s["data"]["token"].is_string())
    })
    .await;
    let manual = get(&sim, &sim.kinds.secrets, "team", "joiner-token").expect("secret");
    // The tool's Secret serves the account: no second one is issued.
    let for_joiner = list(&sim, &sim.kinds.secrets, "team")
        .iter()
        .filter(|s| s["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "joiner")
        .count();
    assert_eq!(for_joiner, 1);
    let joiner_token = b64(&manual["data"]["token"]);
    assert_ne!(joiner_token, token);
    until(&sim, "token indexed", || {
        authenticate_token(&sim, &joiner_token).is_some()
    })
    .await;
    let id = authenticate_token(&sim, &joiner_token).expect("identity");
    assert_eq!(id.username, "system:serviceaccount:team:joiner");
    assert_eq!(
        id.groups,
        [
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ]
    );
    assert!(authenticate_token(&sim, "not-a-token").is_none());

    // Deleting the account revokes its tokens.
    sim.engine
        .delete(
            &sim.kinds.service_accounts,
            "team",
            "joiner",
            &DeleteOptions::default(),
        )
        .await
        .expect("delete");
    until(&sim, "token revoked", || {
        authenticate_token(&sim, &joiner_token).is_none()
    })
    .await;
}

/// (pod name, node, pod IP) of every pod, and each Service's ClusterIP.
async fn scenario() -> (Vec<(String, String, String)>, Vec<String>) {
    let sim = cluster(Duration::from_millis(500), &[]).await;
    create_nodes(
        &sim,
        &[
            NodeSpec::new("n1", "2", "4Gi"),
            NodeSpec::new("n2", "2", "4Gi"),
            NodeSpec::new("n3", "2", "4Gi"),
        ],
    )
    .await
    .expect("nodes");
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("web", 5, "nginx", "300m"),
    )
    .await;
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("db", 2, "postgres", "500m"),
    )
    .await;
    for s in ["web", "db"] {
        create(
            &sim,
            &sim.kinds.services,
            "default",
            json!({"metadata": {"name": s}, "spec": {"selector": {"app": s}, "ports": [{"port": 80}]}}),
        )
        .await;
    }
    until(&sim, "web", || rollout_done(&sim, "web", 5)).await;
    until(&sim, "db", || rollout_done(&sim, "db", 2)).await;
    let mut pods: Vec<(String, String, String)> = list(&sim, &sim.kinds.pods, "default")
        .iter()
        .map(|p| {
            let s = |f: &str| str_at(p, f).unwrap_or("").to_string();
            (s("/metadata/name"), s("/spec/nodeName"), s("/status/podIP"))
        })
        .collect();
    pods.sort();
    let ips = ["db", "web"]
        .iter()
        .map(|s| {
            get(&sim, &sim.kinds.services, "default", s)
                .and_then(|v| str_at(&v, "/spec/clusterIP").map(String::from))
                .unwrap_or_default()
        })
        .collect();
    (pods, ips)
}

#[tokio::test(start_paused = true)]
async fn same_scenario_same_names_nodes_and_addresses() {
    let first = scenario().await;
    let second = scenario().await;
    assert_eq!(first.0.len(), 7);
    assert!(
        first
            .0
            .iter()
            .all(|(_, node, ip)| !node.is_empty() && !ip.is_empty())
    );
    assert_eq!(first, second);
}

#[tokio::test]
async fn run_to_completion_pods_succeed_and_others_keep_running() {
    let sim = cluster(Duration::ZERO, &[]).await;
    two_nodes(&sim).await;
    let pod = |name: &str, restart: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "containers": [{"name": "main", "image": "busybox"}]}})
    };
    create(&sim, &sim.kinds.pods, "default", pod("test-hook", "Never")).await;
    create(&sim, &sim.kinds.pods, "default", pod("server", "Always")).await;
    let phase = |name: &str| {
        get(&sim, &sim.kinds.pods, "default", name)
            .and_then(|p| str_at(&p, "/status/phase").map(str::to_string))
    };
    until(&sim, "the hook pod succeeded", || {
        phase("test-hook").as_deref() == Some("Succeeded")
    })
    .await;
    until(&sim, "the server pod running", || {
        phase("server").as_deref() == Some("Running")
    })
    .await;
    let done = get(&sim, &sim.kinds.pods, "default", "test-hook").expect("hook pod");
    assert!(!condition_true(&done, "Ready"));
    assert_eq!(
        done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    // A pod that restarts its containers stays Running.
    let server = get(&sim, &sim.kinds.pods, "default", "server").expect("server pod");
    assert!(server["status"]["containerStatuses"][0]["state"]["running"].is_object());
    assert!(condition_true(&server, "Ready"));
}

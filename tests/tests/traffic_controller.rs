//! The service controller end to end, with real processes (federation API server,
//! cluster-sim fleet of clusters a, b and c, fed-controllers, fed-scheduler) and kubectl:
//! a federated Service whose pods run in a and b is pushed there, each of them gets a
//! `web-meridian` EndpointSlice naming the other's lb-agent on the allocated listen port,
//! every member gets its lb-agent configuration, Clusters show their lb-agents, the
//! Placement and the Service's ingress tell where it is served; a member going down drops
//! out and comes back; member edits are reverted; an unmanaged same-name Service is a
//! conflict and left alone; deleting the federated Service cleans members and frees ports.

use std::collections::BTreeMap;
use std::time::Duration;

use fed_api::lbconfig::LbConfig;
use fed_api::names::{LB_AGENT_CONFIG_KEY, LB_AGENT_CONFIGMAP, LB_PORTS_CONFIGMAP};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use meridian_e2e::Env;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Longest wait for any one condition.
const DEADLINE: Duration = Duration::from_secs(120);

/// Waits (list, then watch; re-watching if the server ends a watch) until `pred` holds
/// for the named object (`None`: absent). Panics with the last state after [`DEADLINE`].
async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&K>) -> bool,
) -> Option<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + 'static,
{
    let fields = format!("metadata.name={name}");
    let mut last: Option<K> = None;
    let waited = tokio::time::timeout(DEADLINE, async {
        loop {
            let list = api
                .list(&ListParams::default().fields(&fields))
                .await
                .expect("list");
            last = list.items.into_iter().next();
            if pred(last.as_ref()) {
                return last.clone();
            }
            let rv = list.metadata.resource_version.unwrap_or_else(|| "0".into());
            let wp = WatchParams::default().fields(&fields);
            let mut stream = Box::pin(api.watch(&wp, &rv).await.expect("watch"));
            while let Ok(Some(ev)) = stream.try_next().await {
                match ev {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => last = Some(o),
                    WatchEvent::Deleted(_) => last = None,
                    _ => continue,
                }
                if pred(last.as_ref()) {
                    return last.clone();
                }
            }
        }
    })
    .await;
    match waited {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what} ({name}); last seen: {last:#?}"),
    }
}

/// A merge patch, retried while the server reports a concurrent write (409), as kubectl does.
async fn patch<K>(api: &Api<K>, name: &str, body: serde_json::Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + 'static,
{
    let retried = tokio::time::timeout(DEADLINE, async {
        loop {
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                r => return r.expect("patch"),
            }
        }
    })
    .await;
    retried.unwrap_or_else(|_| panic!("patching {name} kept conflicting"))
}

fn label<'a>(m: &'a kube::api::ObjectMeta, k: &str) -> Option<&'a str> {
    m.labels.as_ref()?.get(k).map(String::as_str)
}

/// Addresses of a slice's endpoints, sorted.
fn slice_addresses(s: &EndpointSlice) -> Vec<String> {
    let mut out: Vec<String> = s
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.clone())
        .collect();
    out.sort();
    out
}

fn slice_ports(s: &EndpointSlice) -> Vec<(String, i32)> {
    s.ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.port.unwrap_or(0)))
        .collect()
}

fn lb_config(cm: &ConfigMap) -> Option<LbConfig> {
    serde_json::from_str(cm.data.as_ref()?.get(LB_AGENT_CONFIG_KEY)?).ok()
}

/// Whether `cluster`'s configuration says `of` is Ready and a backend of shop/web.
fn serves(c: &LbConfig, of: &str) -> bool {
    c.clusters.iter().any(|x| x.name == of && x.ready)
        && c.services.iter().any(|s| {
            s.namespace == "shop" && s.name == "web" && s.backends.get(of).is_some_and(|n| *n > 0)
        })
}

const FLEET: &str = "
clusters:
- {name: a, region: eu, zone: eu-1, nodes: 2, readyDelay: 0s, lbPool: [127.0.1.1]}
- {name: b, region: eu, zone: eu-2, nodes: 2, readyDelay: 0s, lbPool: [127.0.1.2]}
- {name: c, region: us, zone: us-1, nodes: 2, readyDelay: 0s, lbPool: [127.0.1.3]}
";

const APP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{containerPort: 8080}]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: apps/v1, kind: Deployment, name: web}
  placement:
    clusterAffinity:
      clusterNames: [a, b]
    failover: {tolerationSeconds: 3600}
"#;

/// Makes `c` a backend of the Service too (it has no pods there).
const SERVICE_POLICY: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web-svc, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: Service, name: web}
  placement:
    clusterAffinity:
      clusterNames: [c]
"#;

fn lb_agent_service() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "meridian-lb-agent", "namespace": "meridian-system"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "meridian-lb-agent"}, "ports": [
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "dns", "port": 5353, "protocol": "UDP"},
            {"name": "peer", "port": 15001, "protocol": "TCP"}]}
    }))
    .expect("lb-agent Service")
}

#[tokio::test]
async fn services_reach_across_members_through_lb_agents() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let fleet = scratch.path().join("fleet.yaml");
    std::fs::write(&fleet, FLEET).expect("fleet file");
    let fleet_arg = format!("--fleet={}", fleet.display());
    let env = Env::start(&[fleet_arg.as_str()]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--failure-threshold=2",
        "--metrics-bind-address=off",
        "--lb-port-range=31000-31009",
    ]);
    let _scheduler = env.scheduler(&[]);
    for c in ["a", "b", "c"] {
        let out = env.ok("fedctl", &["join", c, "--wait-seconds", "60"]);
        assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
    }

    // Each member's lb-agent Service gets its address from the sim's load balancer.
    let mut agents = BTreeMap::new();
    for c in ["a", "b", "c"] {
        let svcs: Api<Service> = Api::namespaced(env.member(c).await, "meridian-system");
        svcs.create(&PostParams::default(), &lb_agent_service())
            .await
            .expect("lb-agent Service");
        let s = wait_for(&svcs, "meridian-lb-agent", "lb-agent address", |s| {
            s.and_then(|s| s.status.as_ref()?.load_balancer.as_ref()?.ingress.as_ref())
                .is_some_and(|i| !i.is_empty())
        })
        .await
        .expect("lb-agent");
        let ip = s.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0]
            .ip
            .clone()
            .expect("ingress ip");
        agents.insert(c, ip);
    }
    assert_eq!(agents["a"], "127.0.1.1");
    let (ip_a, ip_b, ip_c) = (
        agents["a"].clone(),
        agents["b"].clone(),
        agents["c"].clone(),
    );

    env.apply("app.yaml", APP);

    let fed = env.federation().await;
    let placements: Api<fed_api::Placement> = Api::namespaced(fed.clone(), "shop");
    let p = wait_for(
        &placements,
        "service-web",
        "Placement service-web in sync",
        |p| {
            p.and_then(|p| p.status.as_ref()).is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Propagated" && c.status == "True")
                    && s.clusters.len() == 2
                    && s.clusters.iter().all(|c| {
                        c.healthy == Some(true) && c.last_sync_time.is_some() && c.error.is_empty()
                    })
            })
        },
    )
    .await
    .expect("placement");
    assert_eq!(p.spec.resource.kind, "Service");
    let dest: Vec<&str> = p
        .spec
        .dest_clusters
        .iter()
        .map(|t| t.cluster.as_str())
        .collect();
    assert_eq!(dest, ["a", "b"]);
    let st = p.status.as_ref().expect("status");
    for (entry, ip) in st.clusters.iter().zip([&ip_a, &ip_b]) {
        assert!(entry.endpoints.is_some_and(|n| n > 0), "{st:#?}");
        assert_eq!(entry.lb_agent.as_deref(), Some(ip.as_str()), "{st:#?}");
        assert!(entry.last_sync_time.is_some(), "{st:#?}");
        assert!(entry.error.is_empty(), "{st:#?}");
    }
    let fed_svcs: Api<Service> = Api::namespaced(fed.clone(), "shop");
    let web = fed_svcs.get("web").await.expect("federated web");
    let uid = web.metadata.uid.clone().expect("uid");
    assert_eq!(
        p.metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].uid.clone()),
        Some(uid.clone())
    );
    assert!(
        web.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == fed_api::names::WORKLOAD_FINALIZER)),
        "{:?}",
        web.metadata.finalizers
    );

    // The listen port, from the durable allocation.
    let fed_cms: Api<ConfigMap> = Api::namespaced(fed.clone(), "meridian-system");
    let ports_cm = fed_cms
        .get(LB_PORTS_CONFIGMAP)
        .await
        .expect("port allocations");
    let listen: i32 = ports_cm
        .data
        .as_ref()
        .and_then(|d| d.get("shop.web.http"))
        .and_then(|v| v.parse().ok())
        .expect("shop.web.http allocated");
    assert!((31000..=31009).contains(&listen), "{listen}");

    // Service copies in a and b only.
    let svc_api = |c: &str| {
        let env = &env;
        let c = c.to_string();
        async move { Api::<Service>::namespaced(env.member(&c).await, "shop") }
    };
    let slice_api = |c: &str| {
        let env = &env;
        let c = c.to_string();
        async move { Api::<EndpointSlice>::namespaced(env.member(&c).await, "shop") }
    };
    for c in ["a", "b"] {
        let s = svc_api(c).await.get("web").await.expect("member copy");
        assert_eq!(
            label(&s.metadata, "app.kubernetes.io/managed-by"),
            Some("meridian")
        );
        assert_eq!(
            label(&s.metadata, "federation.meridian.dev/owner-uid"),
            Some(uid.as_str())
        );
    }
    assert!(
        svc_api("c")
            .await
            .get_opt("web")
            .await
            .expect("get")
            .is_none(),
        "no copy in c"
    );

    // Each slice names exactly the other cluster's lb-agent on the listen port.
    for (c, other) in [("a", &ip_b), ("b", &ip_a)] {
        let s = wait_for(
            &slice_api(c).await,
            "web-meridian",
            "remote lb-agent slice",
            |s| s.is_some_and(|s| slice_addresses(s) == [other.clone()]),
        )
        .await
        .expect("slice");
        assert_eq!(slice_ports(&s), [("http".to_string(), listen)]);
        assert_eq!(
            label(&s.metadata, "endpointslice.kubernetes.io/managed-by"),
            Some("service-controller.meridian.dev")
        );
        assert_eq!(
            label(&s.metadata, "kubernetes.io/service-name"),
            Some("web")
        );
    }

    // Every member's lb-agent configuration.
    for c in ["a", "b", "c"] {
        let cms: Api<ConfigMap> = Api::namespaced(env.member(c).await, "meridian-system");
        let cm = wait_for(&cms, LB_AGENT_CONFIGMAP, "lb-agent configuration", |cm| {
            cm.and_then(lb_config)
                .is_some_and(|cfg| serves(&cfg, "a") && serves(&cfg, "b"))
        })
        .await
        .expect("configmap");
        let cfg = lb_config(&cm).expect("config");
        assert_eq!(cfg.cluster, c);
        assert_eq!(cfg.dns_zone, "global.meridian.test");
        let names: Vec<(&str, &str)> = cfg
            .clusters
            .iter()
            .map(|x| (x.name.as_str(), x.address.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("a", ip_a.as_str()),
                ("b", ip_b.as_str()),
                ("c", ip_c.as_str())
            ]
        );
        assert!(
            cfg.clusters
                .iter()
                .all(|x| x.http_port == 8080 && x.dns_port == 5353 && x.peer_port == 15001)
        );
        let web = cfg.services.iter().find(|s| s.name == "web").expect("web");
        assert_eq!(web.ports.len(), 1);
        assert_eq!(i32::from(web.ports[0].listen_port), listen);
        assert_eq!(web.ports[0].protocol, "http");
        assert!(!web.backends.contains_key("c"), "{web:?}");
    }

    // Clusters show their lb-agents.
    let clusters: Api<fed_api::Cluster> = Api::all(fed.clone());
    for (c, ip) in [("a", &ip_a), ("b", &ip_b), ("c", &ip_c)] {
        let cl = wait_for(&clusters, c, "Cluster lbAgent", |cl| {
            cl.and_then(|cl| cl.status.as_ref()?.lb_agent.as_ref())
                .is_some_and(|a| a.address == *ip)
        })
        .await
        .expect("cluster");
        let agent = cl.status.unwrap().lb_agent.unwrap();
        assert_eq!(
            (agent.http_port, agent.dns_port, agent.peer_port),
            (Some(8080), Some(5353), Some(15001))
        );
    }

    // The federated Service is reachable at the lb-agents of a and b.
    let ingress_ips = |s: &Service| -> Vec<String> {
        s.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .map(|i| i.iter().filter_map(|x| x.ip.clone()).collect())
            .unwrap_or_default()
    };
    wait_for(&fed_svcs, "web", "ingress of a and b", |s| {
        s.is_some_and(|s| ingress_ips(s) == [ip_a.clone(), ip_b.clone()])
    })
    .await;

    // a goes down: once Offline it drops out of b's slice and of every configuration.
    env.ctl(&["down", "a"]);
    wait_for(&clusters, "a", "a not Ready", |c| {
        c.and_then(|c| c.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|x| x.type_ == "Ready" && x.status != "True")
        })
    })
    .await;
    let b_slices = slice_api("b").await;
    wait_for(&b_slices, "web-meridian", "a dropped from b's slice", |s| {
        s.is_some_and(|s| slice_addresses(s).is_empty())
    })
    .await;
    for c in ["b", "c"] {
        let cms: Api<ConfigMap> = Api::namespaced(env.member(c).await, "meridian-system");
        wait_for(&cms, LB_AGENT_CONFIGMAP, "a no longer serving", |cm| {
            cm.and_then(lb_config)
                .is_some_and(|cfg| !serves(&cfg, "a") && serves(&cfg, "b"))
        })
        .await;
    }
    wait_for(&fed_svcs, "web", "ingress without a", |s| {
        s.is_some_and(|s| ingress_ips(s) == [ip_b.clone()])
    })
    .await;

    // Recovery: back everywhere.
    env.ctl(&["up", "a"]);
    wait_for(&b_slices, "web-meridian", "a back in b's slice", |s| {
        s.is_some_and(|s| slice_addresses(s) == [ip_a.clone()])
    })
    .await;
    let c_cms: Api<ConfigMap> = Api::namespaced(env.member("c").await, "meridian-system");
    wait_for(&c_cms, LB_AGENT_CONFIGMAP, "a serving again", |cm| {
        cm.and_then(lb_config)
            .is_some_and(|cfg| serves(&cfg, "a") && serves(&cfg, "b"))
    })
    .await;

    // The cluster controller rewrote a's status through the outage: lbAgent is still there.
    let a = clusters.get("a").await.expect("cluster a");
    assert_eq!(
        a.status
            .and_then(|s| s.lb_agent)
            .map(|l| l.address)
            .as_deref(),
        Some(ip_a.as_str())
    );

    // Drift in a member is reverted: the copy's selector, and the slice's endpoints.
    let a_svcs = svc_api("a").await;
    let edited = patch(
        &a_svcs,
        "web",
        json!({"spec": {"selector": {"app": "evil"}}}),
    )
    .await;
    assert_eq!(
        edited
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .and_then(|s| s.get("app").cloned())
            .as_deref(),
        Some("evil")
    );
    wait_for(&a_svcs, "web", "selector restored", |s| {
        s.and_then(|s| s.spec.as_ref()?.selector.as_ref()?.get("app").cloned())
            .as_deref()
            == Some("web")
    })
    .await;
    patch(
        &b_slices,
        "web-meridian",
        json!({"endpoints": [{"addresses": ["10.9.9.9"]}]}),
    )
    .await;
    wait_for(&b_slices, "web-meridian", "slice restored", |s| {
        s.is_some_and(|s| slice_addresses(s) == [ip_a.clone()])
    })
    .await;

    // An unmanaged Service of the same name in c: a conflict, never overwritten.
    env.ok(
        "kubectl",
        &["--context", "c", "create", "namespace", "shop"],
    );
    let c_svcs = svc_api("c").await;
    let mine: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"app": "mine"}, "ports": [{"name": "http", "port": 80}]}
    }))
    .expect("service");
    c_svcs
        .create(&PostParams::default(), &mine)
        .await
        .expect("unmanaged Service");
    env.apply("svc-policy.yaml", SERVICE_POLICY);
    wait_for(&placements, "service-web", "conflict in c reported", |p| {
        p.and_then(|p| p.status.as_ref()).is_some_and(|s| {
            s.clusters
                .iter()
                .any(|c| c.cluster == "c" && c.error.contains("conflict"))
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Propagated" && c.reason == "Conflict")
        })
    })
    .await;
    let untouched = c_svcs.get("web").await.expect("unmanaged Service");
    assert_eq!(
        label(&untouched.metadata, "app.kubernetes.io/managed-by"),
        None
    );
    assert_eq!(
        untouched
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .and_then(|s| s.get("app").cloned())
            .as_deref(),
        Some("mine")
    );
    assert!(
        slice_api("c")
            .await
            .get_opt("web-meridian")
            .await
            .expect("get")
            .is_none(),
        "no slice next to someone else's Service"
    );

    // Deleting the federated Service cleans the members and frees its port.
    env.ok(
        "kubectl",
        &["delete", "svc", "web", "-n", "shop", "--timeout=120s"],
    );
    for c in ["a", "b"] {
        wait_for(&svc_api(c).await, "web", "copy removed", |s| s.is_none()).await;
        wait_for(&slice_api(c).await, "web-meridian", "slice removed", |s| {
            s.is_none()
        })
        .await;
    }
    let ports_cm = fed_cms
        .get(LB_PORTS_CONFIGMAP)
        .await
        .expect("port allocations");
    assert!(
        !ports_cm
            .data
            .unwrap_or_default()
            .keys()
            .any(|k| k.starts_with("shop.web.")),
        "ports freed"
    );
    assert!(
        c_svcs.get_opt("web").await.expect("get").is_some(),
        "the unmanaged Service stays"
    );
    wait_for(&placements, "service-web", "Placement collected", |p| {
        p.is_none()
    })
    .await;
}

//! The agent fed by a real API server (a simulated member cluster): it picks up its
//! ConfigMap and the local EndpointSlices, ignores Meridian's own slices, and keeps the last
//! good configuration when the ConfigMap turns invalid.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use cluster_sim::fleet::{ClusterSpec, FleetFile};
use cluster_sim::runtime::Fleet;
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use lb_agent::metrics::Metrics;
use lb_agent::{Agent, Inputs, Settings};
use serde_json::json;
use tokio::sync::watch;

const HOST: &str = "web.shop.global.test";

async fn sim() -> (Fleet, kube::Client) {
    let spec = ClusterSpec {
        name: "a".into(),
        region: String::new(),
        zone: String::new(),
        nodes: 1,
        node_cpu: "8".into(),
        node_memory: "32Gi".into(),
        node_pods: 110,
        labels: Default::default(),
        taints: vec![],
        kubernetes_version: "v1.34.2".into(),
        lb_pool: vec![],
        ready_delay: None,
        runtime: Default::default(),
    };
    let fleet = Fleet::start(
        &FleetFile {
            clusters: vec![spec],
            ..Default::default()
        },
        "127.0.0.1".parse().unwrap(),
    )
    .await
    .expect("simulated cluster");
    let kc = kube::config::Kubeconfig::from_yaml(&fleet.kubeconfig()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    (fleet, client)
}

fn config_errors(metrics: &Metrics) -> u64 {
    let text = metrics.encode_text();
    text.lines()
        .find_map(|l| l.strip_prefix("meridian_lb_config_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no config error counter in {text}"))
}

fn slice(
    name: &str,
    managed_by: Option<&str>,
    addr: std::net::SocketAddr,
    ready: bool,
) -> EndpointSlice {
    let mut labels = json!({"kubernetes.io/service-name": "web"});
    if let Some(m) = managed_by {
        labels["endpointslice.kubernetes.io/managed-by"] = json!(m);
    }
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "shop", "labels": labels},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": addr.port(), "protocol": "TCP"}],
        "endpoints": [{"addresses": [addr.ip().to_string()], "conditions": {"ready": ready}}]
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_configmap_and_endpointslices_and_keeps_last_good_config() {
    let (fleet, client) = sim().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["meridian-system", "shop"] {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    let backend = HttpBackend::start("127.0.0.1", "pod-1").await;
    let decoy = HttpBackend::start("127.0.0.1", "remote-agent").await;

    let (tx, rx) = watch::channel(Inputs::default());
    let source = tokio::spawn(lb_agent::source::run(client.clone(), "a".into(), tx));
    let metrics = Arc::new(Metrics::default());
    let agent = Agent::start(
        Settings::new("a", "127.0.21.1".parse().unwrap()),
        rx,
        metrics.clone(),
    )
    .await
    .unwrap();
    let addr = agent.http_addr;
    assert!(!agent.status.borrow().ready);

    let config = config(
        "a",
        vec![fed_api::lbconfig::LbCluster {
            name: "a".into(),
            address: addr.ip().to_string(),
            http_port: addr.port(),
            peer_port: agent.peer_addr.port(),
            ready: true,
            ..Default::default()
        }],
        vec![service(
            "shop",
            "web",
            vec![port("http", "http", 80, 31800)],
            &[("a", 1)],
        )],
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "meridian-system");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "meridian-lb-agent-config"},
        "data": {"config.json": serde_json::to_string(&config).unwrap()}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "shop");
    slices
        .create(
            &PostParams::default(),
            &slice("web-abc", None, backend.addr, true),
        )
        .await
        .unwrap();
    // Meridian's remote-agent slice is not a local endpoint.
    slices
        .create(
            &PostParams::default(),
            &slice(
                "web-meridian",
                Some("service-controller.meridian.dev"),
                decoy.addr,
                true,
            ),
        )
        .await
        .unwrap();

    wait_for("routing from the API", 20, || async move {
        get(addr, HOST).await.is_ok_and(|r| r.status == 200)
    })
    .await;
    let status = agent.status.clone();
    wait_for("ready", 20, || {
        let s = status.clone();
        async move { s.borrow().ready }
    })
    .await;
    for _ in 0..5 {
        assert_eq!(get(addr, HOST).await.unwrap().body, "pod-1");
    }
    assert_eq!(decoy.hits(), 0);

    // An invalid configuration is reported; the last good one stays in force.
    let errors_before = config_errors(&metrics);
    cms.patch(
        "meridian-lb-agent-config",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"config.json": "{broken"}})),
    )
    .await
    .unwrap();
    wait_for("config error reported", 20, || {
        let s = status.clone();
        async move {
            s.borrow()
                .message
                .as_deref()
                .is_some_and(|m| m.contains("latest rejected"))
        }
    })
    .await;
    assert!(status.borrow().ready);
    assert_eq!(config_errors(&metrics), errors_before + 1);
    assert_eq!(get(addr, HOST).await.unwrap().body, "pod-1");

    // The API going away changes nothing: the agent keeps serving what it has.
    let sim_a = fleet.get("a").unwrap().clone();
    sim_a.faults.set(cluster_sim::faults::Fault::Down);
    wait_for("API unreachable", 20, || {
        let s = slices.clone();
        async move { s.get("web-abc").await.is_err() }
    })
    .await;
    for _ in 0..5 {
        assert_eq!(get(addr, HOST).await.unwrap().body, "pod-1");
    }
    assert!(status.borrow().ready);
    sim_a.faults.set(cluster_sim::faults::Fault::None);
    wait_for("API back", 20, || {
        let s = slices.clone();
        async move { s.get("web-abc").await.is_ok() }
    })
    .await;

    // Endpoint changes are still followed: a not-ready endpoint takes no traffic.
    slices
        .replace("web-abc", &PostParams::default(), &{
            let mut s = slice("web-abc", None, backend.addr, false);
            s.metadata.resource_version = slices
                .get("web-abc")
                .await
                .unwrap()
                .metadata
                .resource_version;
            s
        })
        .await
        .unwrap();
    wait_for("endpoint gone", 20, || async move {
        get(addr, HOST).await.is_ok_and(|r| r.status == 503)
    })
    .await;
    source.abort();
}

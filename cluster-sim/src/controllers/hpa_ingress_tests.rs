//! In-process scenarios for the HPA and ingress loops: fresh engines, real watches, waits on
//! cache revisions (nothing sleeps).

use std::sync::Arc;

use meridian_apiserver::engine::{DeleteOptions, PatchType, Target, WriteOptions};
use serde_json::{Value, json};

use super::tests::{cluster_with, create, deployment, get, until};
use super::util::{condition, i64_at, str_at};
use super::*;

fn hpa(name: &str, target: &str, min: i64, max: i64) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": min, "maxReplicas": max,
        },
    })
}

fn replicas(sim: &Sim, name: &str) -> Option<i64> {
    get(sim, &sim.kinds.deployments, "default", name).and_then(|d| i64_at(&d, "/spec/replicas"))
}

/// `(currentReplicas, desiredReplicas)` of an HPA.
fn hpa_counts(sim: &Sim, name: &str) -> (Option<i64>, Option<i64>) {
    let h = get(sim, &sim.kinds.hpas, "default", name).unwrap_or_default();
    (
        i64_at(&h, "/status/currentReplicas"),
        i64_at(&h, "/status/desiredReplicas"),
    )
}

fn hpa_reason(sim: &Sim, name: &str, ty: &str) -> Option<(String, String)> {
    let h = get(sim, &sim.kinds.hpas, "default", name)?;
    let c = condition(&h, ty)?;
    Some((
        str_at(c, "/status")?.to_string(),
        str_at(c, "/reason")?.to_string(),
    ))
}

fn reason(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_string(), reason.to_string()))
}

#[tokio::test(start_paused = true)]
async fn hpa_clamps_scales_and_reports() {
    let sim = cluster_with(ClusterConfig::default()).await;
    // A missing target cannot be scaled.
    create(&sim, &sim.kinds.hpas, "default", hpa("web", "web", 2, 10)).await;
    until(&sim, "FailedGetScale", || {
        hpa_reason(&sim, "web", "AbleToScale") == reason("False", "FailedGetScale")
    })
    .await;
    assert_eq!(hpa_counts(&sim, "web"), (None, None));

    // A target below minReplicas is raised to it.
    create(
        &sim,
        &sim.kinds.deployments,
        "default",
        deployment("web", 1, "web:1", "10m"),
    )
    .await;
    until(&sim, "the target raised to the minimum", || {
        replicas(&sim, "web") == Some(2)
    })
    .await;
    until(&sim, "the HPA steady at 2", || {
        hpa_counts(&sim, "web") == (Some(2), Some(2))
            && hpa_reason(&sim, "web", "AbleToScale") == reason("True", "ReadyForNewScale")
            && hpa_reason(&sim, "web", "ScalingLimited") == reason("False", "DesiredWithinRange")
            && hpa_reason(&sim, "web", "ScalingActive") == reason("True", "ValidMetricFound")
    })
    .await;
    let h = get(&sim, &sim.kinds.hpas, "default", "web").expect("hpa");
    assert!(str_at(&h, "/status/lastScaleTime").is_some(), "{h}");
    assert_eq!(
        i64_at(&h, "/status/observedGeneration"),
        i64_at(&h, "/metadata/generation")
    );

    // A simulated load: 7, then more than the maximum.
    sim.hpa_recommendations.set("default", "web", Some(7));
    until(&sim, "the target scaled to 7", || {
        replicas(&sim, "web") == Some(7) && hpa_counts(&sim, "web") == (Some(7), Some(7))
    })
    .await;
    sim.hpa_recommendations.set("default", "web", Some(40));
    until(&sim, "the target held at the maximum", || {
        replicas(&sim, "web") == Some(10)
            && hpa_reason(&sim, "web", "ScalingLimited") == reason("True", "TooManyReplicas")
    })
    .await;

    // Without the load the HPA keeps what the target has; a manual scale within range stays.
    sim.hpa_recommendations.set("default", "web", None);
    sim.engine
        .patch(
            &sim.kinds.deployments,
            "default",
            "web",
            PatchType::Merge,
            &json!({"spec": {"replicas": 4}}),
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("scale");
    until(&sim, "the HPA following the manual scale", || {
        hpa_counts(&sim, "web") == (Some(4), Some(4))
            && hpa_reason(&sim, "web", "ScalingLimited") == reason("False", "DesiredWithinRange")
    })
    .await;
    assert_eq!(replicas(&sim, "web"), Some(4));
}

fn ingress(name: &str, class: Option<&str>) -> Value {
    let mut spec = json!({"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}});
    if let Some(c) = class {
        spec["ingressClassName"] = json!(c);
    }
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn ingress_ips(sim: &Sim, name: &str) -> Vec<String> {
    get(sim, &sim.kinds.ingresses, "default", name)
        .map(|i| {
            meridian_apiserver::kinds::load_balancer_addresses(&i)
                .into_iter()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

async fn sim_with_pool(pool: &[&str]) -> Arc<Sim> {
    let sim = cluster_with(ClusterConfig {
        lb_pool: parse_address_pool(pool).expect("pool"),
        ..ClusterConfig::default()
    })
    .await;
    create(
        &sim,
        &sim.kinds.namespaces,
        "",
        json!({"metadata": {"name": ingress::PUBLISH_NAMESPACE}}),
    )
    .await;
    ensure_ingress_class(&sim).await.expect("class");
    sim.engine.sync().await.expect("sync");
    sim
}

#[tokio::test(start_paused = true)]
async fn ingresses_of_the_class_share_the_cluster_address() {
    let sim = sim_with_pool(&["192.0.2.10", "192.0.2.11"]).await;
    let class = get(&sim, &sim.kinds.ingress_classes, "", ingress::INGRESS_CLASS).expect("class");
    assert_eq!(
        str_at(
            &class,
            "/metadata/annotations/ingressclass.kubernetes.io~1is-default-class"
        ),
        Some("true")
    );
    // Nothing spent on ingress before an Ingress exists.
    let publish = |sim: &Sim| {
        get(
            sim,
            &sim.kinds.services,
            ingress::PUBLISH_NAMESPACE,
            ingress::PUBLISH_SERVICE,
        )
    };
    assert!(publish(&sim).is_none());

    create(&sim, &sim.kinds.ingresses, "default", ingress("a", None)).await;
    create(
        &sim,
        &sim.kinds.ingresses,
        "default",
        ingress("b", Some(ingress::INGRESS_CLASS)),
    )
    .await;
    create(
        &sim,
        &sim.kinds.ingresses,
        "default",
        ingress("other", Some("nginx")),
    )
    .await;
    until(&sim, "both Ingresses of the class addressed", || {
        ingress_ips(&sim, "a") == ["192.0.2.10"] && ingress_ips(&sim, "b") == ["192.0.2.10"]
    })
    .await;
    assert!(ingress_ips(&sim, "other").is_empty());
    let svc = publish(&sim).expect("publishing Service");
    assert_eq!(str_at(&svc, "/spec/type"), Some("LoadBalancer"));

    // The class changes away: the sim's address goes.
    sim.engine
        .patch(
            &sim.kinds.ingresses,
            "default",
            "b",
            PatchType::Merge,
            &json!({"spec": {"ingressClassName": "nginx"}}),
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("patch");
    until(
        &sim,
        "the other class's Ingress without the address",
        || ingress_ips(&sim, "b").is_empty(),
    )
    .await;

    // The publishing Service is recreated and its new address follows.
    sim.engine
        .delete(
            &sim.kinds.services,
            ingress::PUBLISH_NAMESPACE,
            ingress::PUBLISH_SERVICE,
            &DeleteOptions::default(),
        )
        .await
        .expect("delete");
    sim.engine.sync().await.expect("sync");
    until(
        &sim,
        "the Ingress showing the new Service's address",
        || {
            publish(&sim).is_some_and(|svc| {
                let ips = meridian_apiserver::kinds::load_balancer_addresses(&svc);
                !ips.is_empty() && ingress_ips(&sim, "a") == ips
            })
        },
    )
    .await;
}

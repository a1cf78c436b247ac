//! fed-scheduler and fed-controllers are users of their own in the federation: the server
//! mints their tokens and kubeconfigs, and its bootstrap policy lets each make the requests
//! its binary makes and refuses the rest with a 403 that names the user.

mod common;

use common::{RawResponse, Server};
use serde_json::{Value, json};

const SCHEDULER: &str = "system:meridian:fed-scheduler";
const CONTROLLERS: &str = "system:meridian:fed-controllers";

fn token(s: &Server, component: &str) -> String {
    std::fs::read_to_string(s.dir.join(format!("pki/{component}.token")))
        .expect("component token")
        .trim()
        .to_string()
}

async fn send(
    s: &Server,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> RawResponse {
    let (content_type, body) = match (method, body) {
        ("PATCH", Some(b)) => ("application/merge-patch+json", b.to_string().into_bytes()),
        (_, Some(b)) => ("application/json", b.to_string().into_bytes()),
        (_, None) => ("application/json", Vec::new()),
    };
    s.http()
        .send(method, path, Some(token), content_type, body)
        .await
}

/// Asserts `r` is the 403 Status a refused request gets, naming `user`.
fn assert_forbidden(r: &RawResponse, user: &str, what: &str) {
    assert_eq!(
        r.status,
        403,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    let status = r.json();
    assert_eq!(status["kind"], "Status", "{what}");
    assert_eq!(status["reason"], "Forbidden", "{what}");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(message.contains(user), "{what}: {message}");
}

fn assert_ok(r: &RawResponse, what: &str) {
    assert!(
        (200..300).contains(&r.status),
        "{what}: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
}

/// Waits until `token` may list Placements: the authorizer reads the bootstrap policy from
/// the watch cache, which may apply the start-up writes just after the server listens.
async fn wait_for_policy(s: &Server, token: &str) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let path = "/apis/federation.meridian.dev/v1alpha1/placements";
    loop {
        let r = send(s, token, "GET", path, None).await;
        if r.status != 403 {
            assert_ok(&r, "listing placements");
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bootstrap policy never let the component list placements"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    })
}

fn placement(name: &str) -> Value {
    json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "destClusters": [],
        },
    })
}

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const PLACEMENTS: &str = "/apis/federation.meridian.dev/v1alpha1/namespaces/default/placements";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn each_component_may_make_its_own_requests_and_no_others() {
    let (s, _dir) = Server::start(&[]);
    let admin = s.token();
    let (scheduler, controllers) = (token(&s, "fed-scheduler"), token(&s, "fed-controllers"));
    assert_ne!(scheduler, controllers);
    // The kubeconfigs the components run with hold their own tokens, not the admin's.
    for (component, t) in [
        ("fed-scheduler", &scheduler),
        ("fed-controllers", &controllers),
    ] {
        let kc = std::fs::read_to_string(s.dir.join(format!("{component}.kubeconfig")))
            .expect("component kubeconfig");
        assert!(kc.contains(&format!("token: {t}")), "{component}: {kc}");
        assert!(!kc.contains(&admin), "{component} holds the admin token");
    }
    wait_for_policy(&s, &scheduler).await;
    wait_for_policy(&s, &controllers).await;
    let r = send(&s, &admin, "POST", DEPLOYMENTS, Some(deployment("web"))).await;
    assert_ok(&r, "admin creates a Deployment");

    // The scheduler: watches workloads and writes Placements, and nothing else.
    let r = send(&s, &scheduler, "GET", DEPLOYMENTS, None).await;
    assert_ok(&r, "the scheduler lists Deployments");
    let r = send(&s, &scheduler, "POST", PLACEMENTS, Some(placement("web"))).await;
    assert_ok(&r, "the scheduler creates a Placement");
    let r = send(
        &s,
        &scheduler,
        "PATCH",
        &format!("{PLACEMENTS}/web/status"),
        Some(json!({"status": {"conditions": []}})),
    )
    .await;
    assert_ok(&r, "the scheduler patches a Placement's status");
    let r = send(
        &s,
        &scheduler,
        "DELETE",
        &format!("{DEPLOYMENTS}/web"),
        None,
    )
    .await;
    assert_forbidden(&r, SCHEDULER, "the scheduler deletes a Deployment");
    let r = send(
        &s,
        &scheduler,
        "PATCH",
        &format!("{DEPLOYMENTS}/web"),
        Some(json!({"spec": {"replicas": 5}})),
    )
    .await;
    assert_forbidden(&r, SCHEDULER, "the scheduler scales a Deployment");
    let r = send(
        &s,
        &scheduler,
        "DELETE",
        "/apis/federation.meridian.dev/v1alpha1/clusters/a",
        None,
    )
    .await;
    assert_forbidden(&r, SCHEDULER, "the scheduler deletes a Cluster");
    // It lists and watches every kind a policy may name (Secrets too), but reads no
    // object by name.
    let r = send(
        &s,
        &scheduler,
        "GET",
        "/api/v1/namespaces/default/secrets/creds",
        None,
    )
    .await;
    assert_forbidden(&r, SCHEDULER, "the scheduler reads a Secret");
    // The copy loop watches the CustomResourceDefinitions to find kinds defined late.
    let r = send(
        &s,
        &scheduler,
        "GET",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        None,
    )
    .await;
    assert_ok(&r, "the scheduler lists CustomResourceDefinitions");

    // The controllers: status and finalizers of workloads, their own ConfigMaps, no RBAC.
    let r = send(
        &s,
        &controllers,
        "PATCH",
        &format!("{DEPLOYMENTS}/web/status"),
        Some(json!({"status": {"observedGeneration": 1}})),
    )
    .await;
    assert_ok(&r, "the controllers patch a Deployment's status");
    let r = send(
        &s,
        &controllers,
        "PATCH",
        &format!("{DEPLOYMENTS}/web"),
        Some(json!({"metadata": {"finalizers": ["federation.meridian.dev/member-cleanup"]}})),
    )
    .await;
    assert_ok(&r, "the controllers set a Deployment's finalizers");
    let r = send(&s, &controllers, "GET", "/api/v1/secrets", None).await;
    assert_ok(&r, "the controllers list Secrets (members' credentials)");
    let r = send(
        &s,
        &controllers,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        Some(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "escalate"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CONTROLLERS}],
        })),
    )
    .await;
    assert_forbidden(
        &r,
        CONTROLLERS,
        "the controllers create a ClusterRoleBinding",
    );
    let r = send(
        &s,
        &controllers,
        "DELETE",
        &format!("{DEPLOYMENTS}/web"),
        None,
    )
    .await;
    assert_forbidden(&r, CONTROLLERS, "the controllers delete a Deployment");
    let r = send(
        &s,
        &admin,
        "POST",
        CONFIGMAPS,
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}})),
    )
    .await;
    assert_ok(&r, "admin creates a ConfigMap");
    // They patch any object's finalizers (a copied object's cleanup), but replace or
    // delete none of the user's.
    let r = send(
        &s,
        &controllers,
        "PUT",
        &format!("{CONFIGMAPS}/app"),
        Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": {"k": "v"}})),
    )
    .await;
    assert_forbidden(
        &r,
        CONTROLLERS,
        "the controllers replace a user's ConfigMap",
    );
    let r = send(
        &s,
        &controllers,
        "DELETE",
        &format!("{CONFIGMAPS}/app"),
        None,
    )
    .await;
    assert_forbidden(&r, CONTROLLERS, "the controllers delete a user's ConfigMap");
    let r = send(
        &s,
        &controllers,
        "POST",
        "/apis/federation.meridian.dev/v1alpha1/clusters",
        Some(json!({
            "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
            "metadata": {"name": "rogue"}, "spec": {},
        })),
    )
    .await;
    assert_forbidden(&r, CONTROLLERS, "the controllers create a Cluster");
}

#[tokio::test]
async fn a_restart_restores_the_components_rules() {
    let (mut s, _dir) = Server::start(&[]);
    let admin = s.token();
    let path = format!("/apis/rbac.authorization.k8s.io/v1/clusterroles/{SCHEDULER}");
    let r = send(&s, &admin, "GET", &path, None).await;
    assert_ok(&r, "reading the scheduler's role");
    let want = r.json()["rules"].clone();
    assert!(want.as_array().is_some_and(|r| !r.is_empty()), "{want}");
    // An older version's role: rules missing. Still marked for auto-update.
    let r = send(&s, &admin, "PATCH", &path, Some(json!({"rules": []}))).await;
    assert_ok(&r, "emptying the scheduler's role");
    s.restart();
    let r = send(&s, &admin, "GET", &path, None).await;
    assert_ok(&r, "reading the scheduler's role after the restart");
    assert_eq!(r.json()["rules"], want);
}

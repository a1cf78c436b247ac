//! RBAC on the federation: a user other than the admin may do only what their bindings to
//! the default roles (`view`, `edit`, `admin`) allow, and is told why when refused.

mod common;

use common::{RawResponse, Server};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789";

async fn as_alice(s: &Server, method: &str, path: &str, body: Option<Value>) -> RawResponse {
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    s.http()
        .send(method, path, Some(ALICE), "application/json", body)
        .await
}

async fn as_admin(s: &Server, method: &str, path: &str, body: Value) -> RawResponse {
    s.http()
        .send(
            method,
            path,
            Some(&s.token()),
            "application/json",
            body.to_string().into_bytes(),
        )
        .await
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}})
}

/// Binds alice to `role` in `default`, then waits until the binding is in force: the
/// authorizer reads bindings from the watch cache, which applies a write shortly after it is
/// acknowledged (as kube-apiserver's RBAC informers do), so a request right after the create
/// may still be refused. `probe` is a request the binding newly allows, without side effects;
/// it is retried until it is no longer 403, within a deadline.
async fn bind(s: &Server, name: &str, role: &str, probe: (&str, &str, Option<Value>)) {
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    });
    let r = as_admin(
        s,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        binding,
    )
    .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let (method, path, body) = probe;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = as_alice(s, method, path, body.clone()).await;
        if r.status != 403 {
            assert!(r.status < 300, "{method} {path}: {}", r.status);
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "binding {name} to {role} not in force after 10s: {method} {path} still 403"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn users_get_what_their_bindings_allow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{ALICE},alice,alice-uid\n")).expect("token file");
    let data = dir.path().join("data");
    let s = Server::start_in(&data, &[&format!("--token-auth-file={}", tokens.display())]);
    let configmaps = "/api/v1/namespaces/default/configmaps";

    // Authenticated but unbound: discovery only.
    assert_eq!(as_alice(&s, "GET", "/api/v1", None).await.status, 200);
    let r = as_alice(&s, "GET", configmaps, None).await;
    assert_eq!(r.status, 403);
    let status = r.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["details"]["kind"], "configmaps");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("User \"alice\" cannot list resource \"configmaps\"")),
        "{status}"
    );

    // `view` in default: read, not write, not Secrets, not other namespaces.
    bind(&s, "alice-view", "view", ("GET", configmaps, None)).await;
    assert_eq!(as_alice(&s, "GET", configmaps, None).await.status, 200);
    assert_eq!(
        as_alice(
            &s,
            "GET",
            "/apis/apps/v1/namespaces/default/deployments",
            None
        )
        .await
        .status,
        200
    );
    let create = as_alice(&s, "POST", configmaps, Some(configmap("c1"))).await;
    assert_eq!(create.status, 403, "{}", create.json());
    assert_eq!(
        as_alice(&s, "GET", "/api/v1/namespaces/default/secrets", None)
            .await
            .status,
        403
    );
    assert_eq!(
        as_alice(&s, "GET", "/api/v1/namespaces/kube-system/configmaps", None)
            .await
            .status,
        403
    );

    // `edit`: writes, but no RBAC of its own.
    let dry_run = format!("{configmaps}?dryRun=All");
    bind(
        &s,
        "alice-edit",
        "edit",
        ("POST", &dry_run, Some(configmap("probe"))),
    )
    .await;
    let create = as_alice(&s, "POST", configmaps, Some(configmap("c1"))).await;
    assert_eq!(create.status, 201, "{}", create.json());
    let escalate = as_alice(
        &s,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
        Some(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "self", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "alice"}],
        })),
    )
    .await;
    assert_eq!(escalate.status, 403);
    // Cluster-scoped writes stay the admin's.
    let ns = as_alice(
        &s,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mine"}})),
    )
    .await;
    assert_eq!(ns.status, 403);
}

#[tokio::test]
async fn default_roles_exist_and_cover_meridian_kinds() {
    let (s, _dir) = Server::start(&[]);
    let r = s
        .http()
        .send(
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/edit",
            Some(&s.token()),
            "application/json",
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 200);
    let role = r.json();
    let groups: Vec<&str> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["apiGroups"][0].as_str())
        .collect();
    assert!(groups.contains(&"apps"), "{groups:?}");
    assert!(
        groups.iter().any(|g| g.contains("meridian")),
        "the federation's own kinds are covered: {groups:?}"
    );
    let binding = s
        .http()
        .send(
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin",
            Some(&s.token()),
            "application/json",
            Vec::new(),
        )
        .await;
    assert_eq!(binding.json()["subjects"][0]["name"], "system:masters");
}

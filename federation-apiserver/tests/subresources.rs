//! The `scale` and `finalize` subresources over HTTPS with kube-rs: resourceVersion
//! preconditions answered 409 as kube-apiserver answers them, and only the fields each
//! subresource owns changed.

mod common;

use common::{Server, api_error, deployment, namespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn scale_reads_and_writes_replicas_under_its_precondition() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "shop").await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deps.create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();

    let scale = deps.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.as_ref().unwrap().selector.as_deref(),
        Some("app=web")
    );
    let read_at = scale.metadata.resource_version.clone();

    // The Deployment changes after the Scale was read: replacing it now is a conflict.
    let label = Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}}));
    deps.patch("web", &PatchParams::default(), &label)
        .await
        .unwrap();
    let mut stale = scale.clone();
    stale.spec.as_mut().unwrap().replicas = Some(5);
    let err = api_error(
        deps.replace_scale("web", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(2)
    );

    // Without a resourceVersion the write applies to the current version.
    let mut unpinned = stale.clone();
    unpinned.metadata.resource_version = None;
    let written = deps
        .replace_scale("web", &PostParams::default(), &unpinned)
        .await
        .unwrap();
    assert_eq!(written.spec.unwrap().replicas, Some(5));
    assert_ne!(written.metadata.resource_version, read_at);

    // Patches of the Scale: a pinned stale version conflicts, an unpinned one lands.
    let pinned =
        Patch::Merge(json!({"metadata": {"resourceVersion": read_at}, "spec": {"replicas": 9}}));
    let err = api_error(
        deps.patch_scale("web", &PatchParams::default(), &pinned)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    let json = Patch::<Scale>::Json(
        serde_json::from_value(json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]))
            .unwrap(),
    );
    let scale = deps
        .patch_scale("web", &PatchParams::default(), &json)
        .await
        .unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    let web = deps.get("web").await.unwrap();
    assert_eq!(web.spec.as_ref().unwrap().replicas, Some(3));
    let labels = web.metadata.labels.unwrap();
    assert_eq!(labels.get("tier").map(String::as_str), Some("front"));

    // Negative replicas are invalid on the Scale itself.
    let negative = Patch::Merge(json!({"spec": {"replicas": -1}}));
    let err = api_error(
        deps.patch_scale("web", &PatchParams::default(), &negative)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn finalize_changes_only_spec_finalizers_under_its_precondition() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "shop").await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let read = nss.get("shop").await.unwrap();
    let finalizers = |ns: &Namespace| ns.spec.as_ref().and_then(|s| s.finalizers.clone());
    assert_eq!(finalizers(&read), Some(vec!["kubernetes".to_string()]));

    let label = Patch::Merge(json!({"metadata": {"labels": {"team": "shop"}}}));
    nss.patch("shop", &PatchParams::default(), &label)
        .await
        .unwrap();
    let mut body = read.clone();
    body.spec.as_mut().unwrap().finalizers = Some(vec![]);
    let err = api_error(
        nss.replace_subresource("finalize", "shop", &PostParams::default(), &body)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // No precondition: applied; the body's other changes (labels dropped here) are not.
    body.metadata.resource_version = None;
    body.metadata.labels = None;
    let ns = nss
        .replace_subresource("finalize", "shop", &PostParams::default(), &body)
        .await
        .unwrap();
    assert_eq!(finalizers(&ns), Some(vec![]));
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels.get("team").map(String::as_str), Some("shop"));

    // Only namespaces have it, and only for PUT.
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    deps.create(&PostParams::default(), &deployment("web", 1))
        .await
        .unwrap();
    let err = api_error(
        deps.replace_subresource("finalize", "web", &PostParams::default(), &json!({}))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 404);
}

//! Integration tests: the real server binary over HTTPS, driven with kube-rs and raw requests.

mod common;

use common::{Server, api_error, deployment, namespace};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

#[tokio::test]
async fn crud_conflicts_and_errors() {
    // No workload controller runs here to release a deleted Deployment.
    let (server, _dir) = Server::start(&["--disable-admission-plugins=MemberCleanup"]);
    let client = server.client().await;
    namespace(&client, "shop").await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let created = deps
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, Some(1));
    // Defaults a kubectl user relies on.
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(
        spec.strategy.as_ref().unwrap().type_.as_deref(),
        Some("RollingUpdate")
    );

    let again = deps
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap_err();
    let s = api_error(again);
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));

    let missing = api_error(deps.get("nope").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));

    // Update with the current resourceVersion bumps generation; a stale one conflicts.
    let mut d = deps.get("web").await.unwrap();
    let stale = d.clone();
    d.spec.as_mut().unwrap().replicas = Some(5);
    let updated = deps
        .replace("web", &PostParams::default(), &d)
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    let rv1: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);
    let conflict = api_error(
        deps.replace("web", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));

    // Label-only change leaves generation alone.
    let p = deps
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "front"}}})),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(2));

    // Validation: selector must match template labels; replicas >= 0.
    let mut bad = deployment("bad", -1);
    bad.spec
        .as_mut()
        .unwrap()
        .template
        .metadata
        .as_mut()
        .unwrap()
        .labels = Some([("app".to_string(), "other".to_string())].into());
    let invalid = api_error(deps.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));
    let fields: Vec<String> = invalid
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(fields.contains(&"spec.replicas".to_string()), "{fields:?}");
    assert!(
        fields.contains(&"spec.template.metadata.labels".to_string()),
        "{fields:?}"
    );

    // Creating into a namespace that does not exist.
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "ghost");
    let e = api_error(
        elsewhere
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);

    deps.delete("web", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(deps.get("web").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn a_new_workload_gets_the_member_cleanup_finalizer_owned_by_no_manager() {
    const FINALIZER: &str = "federation.meridian.dev/member-cleanup";
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "shop").await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let created = deps
        .create(&PostParams::default(), &deployment("web", 2))
        .await
        .unwrap();
    assert_eq!(
        created.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_string()][..])
    );
    let fields = serde_json::to_string(&created.metadata.managed_fields).unwrap();
    assert!(!fields.contains("f:finalizers"), "{fields}");
    // An apply that never named it leaves it: no manager owns it.
    let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}});
    let applied = deps
        .patch(
            "web",
            &PatchParams::apply("ci").force(),
            &Patch::Apply(&cfg),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.metadata.finalizers.as_deref(),
        Some(&[FINALIZER.to_string()][..])
    );
    // Other kinds are left alone.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let cm = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "cfg"}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(cm.metadata.finalizers, None);
    // Deleting waits for the workload controller; what it does at the end lets it go.
    deps.delete("web", &DeleteParams::default()).await.unwrap();
    let held = deps.get("web").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_error(deps.get("web").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn list_pagination_and_selectors() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "a").await;
    namespace(&client, "b").await;
    for i in 0..25 {
        let ns = if i % 5 == 0 { "b" } else { "a" };
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        let cm = json!({"metadata": {"name": format!("cm-{i:02}"), "labels": {"tier": tier, "n": i.to_string()}}});
        cms.create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
            .await
            .unwrap();
    }
    let all: Api<ConfigMap> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    loop {
        let page = all.list(&lp).await.unwrap();
        pages += 1;
        names.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!((pages, names.len()), (3, 25));

    let a: Api<ConfigMap> = Api::namespaced(client.clone(), "a");
    assert_eq!(
        a.list(&ListParams::default()).await.unwrap().items.len(),
        20
    );
    let count = |sel: &str| {
        let all = all.clone();
        let sel = sel.to_string();
        async move {
            all.list(&ListParams::default().labels(&sel))
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(count("tier=even").await, 13);
    assert_eq!(count("tier!=even").await, 12);
    assert_eq!(count("n in (1,2,3)").await, 3);
    assert_eq!(count("n notin (1,2,3),tier=odd").await, 10);
    assert_eq!(count("tier").await, 25);
    assert_eq!(count("!tier").await, 0);
    let by_name = all
        .list(&ListParams::default().fields("metadata.name=cm-07"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let by_ns = all
        .list(&ListParams::default().fields("metadata.namespace!=a"))
        .await
        .unwrap();
    assert_eq!(by_ns.items.len(), 5);
    let bad = api_error(
        all.list(&ListParams::default().fields("spec.foo=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);
}

#[tokio::test]
async fn watch_resumes_and_expires() {
    let (server, _dir) = Server::start(&["--watch-history=20"]);
    let client = server.client().await;
    namespace(&client, "w").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "w");
    let c = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "one"}, "data": {"v": "0"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let rv0 = c.metadata.resource_version.clone().unwrap();
    for i in 1..=3 {
        cms.patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    // Resuming from rv0 replays the three modifications in order.
    let mut stream = cms
        .watch(&WatchParams::default(), &rv0)
        .await
        .unwrap()
        .boxed();
    for i in 1..=3 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(cm) => assert_eq!(cm.data.unwrap()["v"], i.to_string()),
            other => panic!("unexpected {other:?}"),
        }
    }
    // A live event arrives too.
    cms.delete("one", &DeleteParams::default()).await.unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("one")),
        other => panic!("unexpected {other:?}"),
    }
    // Push rv0 out of the 20-event history: resuming from it is 410 Gone.
    for i in 0..30 {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": format!("x{i}")}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let gone = cms.watch(&WatchParams::default(), &rv0).await;
    let err = match gone {
        Err(e) => api_error(e),
        Ok(s) => match Box::pin(s).try_next().await {
            Ok(Some(WatchEvent::Error(e))) => {
                kube::core::Status::failure(&e.message, &e.reason).with_code(e.code)
            }
            Err(e) => api_error(e),
            other => panic!("expected 410, got {other:?}"),
        },
    };
    assert_eq!(err.code, 410);
}

#[tokio::test]
async fn finalizers_namespace_deletion_and_gc() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "gc");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "gc");

    // A finalizer holds the object with deletionTimestamp set until it is removed.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let mut w = cms
        .watch(&WatchParams::default().fields("metadata.name=held"), "0")
        .await
        .unwrap()
        .boxed();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = cms.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let mut deleted = false;
    while let Some(ev) = w.try_next().await.unwrap() {
        if matches!(ev, WatchEvent::Deleted(_)) {
            deleted = true;
            break;
        }
    }
    assert!(deleted);

    // Garbage collection: a dependent goes when its owner goes (background propagation).
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap(),
        )
        .await
        .unwrap();
    let uid = owner.metadata.uid.unwrap();
    let dep = json!({"metadata": {"name": "dep", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}, "stringData": {"k": "v"}});
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(dep).unwrap(),
        )
        .await
        .unwrap();
    let mut sw = secrets
        .watch(&WatchParams::default().fields("metadata.name=dep"), "0")
        .await
        .unwrap()
        .boxed();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    loop {
        match sw.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(_)) => break,
            Some(_) => continue,
            None => panic!("watch ended before the dependent was collected"),
        }
    }
    // Orphan propagation keeps the dependent and drops its owner reference.
    let owner2 = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "owner2"}})).unwrap(),
        )
        .await
        .unwrap();
    let dep2 = json!({"metadata": {"name": "dep2", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner2.metadata.uid.unwrap()}]}});
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(dep2).unwrap(),
        )
        .await
        .unwrap();
    let mut ow = cms
        .watch(&WatchParams::default().fields("metadata.name=owner2"), "0")
        .await
        .unwrap()
        .boxed();
    cms.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    loop {
        match ow.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(_)) => break,
            Some(_) => continue,
            None => panic!("owner2 was not deleted"),
        }
    }
    let kept = secrets.get("dep2").await.unwrap();
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    // Namespace deletion removes its contents, then the namespace.
    let nss: Api<Namespace> = Api::all(client.clone());
    let mut nw = nss
        .watch(&WatchParams::default().fields("metadata.name=gc"), "0")
        .await
        .unwrap()
        .boxed();
    nss.delete("gc", &DeleteParams::default()).await.unwrap();
    let terminating = nss.get("gc").await;
    if let Ok(ns) = terminating {
        assert!(ns.metadata.deletion_timestamp.is_some());
    }
    loop {
        match nw.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(_)) => break,
            Some(_) => continue,
            None => panic!("namespace was not deleted"),
        }
    }
    assert!(
        secrets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// The resourceVersion of a watch event's object.
fn event_rv<K: kube::Resource>(ev: &WatchEvent<K>) -> u64 {
    let meta = match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o.meta(),
        other => panic!("unexpected watch event {other:?}"),
    };
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("numeric resourceVersion")
}

#[tokio::test]
async fn namespace_deletion_takes_down_workloads_before_the_rest() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "ordered").await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "ordered");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "ordered");
    let mut web = deployment("web", 1);
    web.metadata.finalizers = Some(vec!["example.com/members".into()]);
    deps.create(&PostParams::default(), &web).await.unwrap();
    let cm = json!({"metadata": {"name": "config", "finalizers": ["example.com/hold"]}});
    cms.create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
        .await
        .unwrap();
    let mut dw = deps
        .watch(&WatchParams::default().fields("metadata.name=web"), "0")
        .await
        .unwrap()
        .boxed();
    let mut cw = cms
        .watch(&WatchParams::default().fields("metadata.name=config"), "0")
        .await
        .unwrap()
        .boxed();
    let nss: Api<Namespace> = Api::all(client.clone());
    let mut nw = nss
        .watch(&WatchParams::default().fields("metadata.name=ordered"), "0")
        .await
        .unwrap()
        .boxed();
    nss.delete("ordered", &DeleteParams::default())
        .await
        .unwrap();

    // The Deployment is deleted first; its finalizer holds it (members being cleaned).
    loop {
        match dw.try_next().await.unwrap() {
            Some(WatchEvent::Modified(d)) if d.metadata.deletion_timestamp.is_some() => break,
            Some(_) => continue,
            None => panic!("watch ended before the Deployment was deleted"),
        }
    }
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let gone_at = loop {
        match dw.try_next().await.unwrap() {
            Some(ev @ WatchEvent::Deleted(_)) => break event_rv(&ev),
            Some(_) => continue,
            None => panic!("watch ended before the Deployment was gone"),
        }
    };
    // Only then is the ConfigMap deleted (its own finalizer keeps it visible).
    let marked_at = loop {
        match cw.try_next().await.unwrap() {
            Some(WatchEvent::Modified(c)) if c.metadata.deletion_timestamp.is_some() => {
                break event_rv(&WatchEvent::Modified(c));
            }
            Some(_) => continue,
            None => panic!("watch ended before the ConfigMap was deleted"),
        }
    };
    assert!(
        marked_at > gone_at,
        "the ConfigMap was deleted at {marked_at}, before the Deployment was gone at {gone_at}"
    );
    cms.patch(
        "config",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    loop {
        match nw.try_next().await.unwrap() {
            Some(WatchEvent::Deleted(_)) => break,
            Some(_) => continue,
            None => panic!("namespace was not deleted"),
        }
    }
}

#[tokio::test]
async fn three_patch_types() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "p").await;
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "p");
    deps.create(&PostParams::default(), &deployment("web", 1))
        .await
        .unwrap();
    // Strategic: containers merge by name, ports by containerPort; env kept.
    let smp = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "nginx:1.28", "ports": [{"containerPort": 8080}]}
    ]}}}});
    let d = deps
        .patch("web", &PatchParams::default(), &Patch::Strategic(smp))
        .await
        .unwrap();
    let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(c.image.as_deref(), Some("nginx:1.28"));
    let ports: Vec<i32> = c
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, vec![80, 8080]);
    assert_eq!(c.env.as_ref().unwrap()[0].name, "A");
    // JSON patch.
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicas", "value": 4},
        {"op": "test", "path": "/metadata/name", "value": "web"}
    ]))
    .unwrap();
    let d = deps
        .patch("web", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(4));
    // Merge patch replaces lists wholesale.
    let mp = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.29"}]}}}});
    let d = deps
        .patch("web", &PatchParams::default(), &Patch::Merge(mp))
        .await
        .unwrap();
    let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
    assert!(c.ports.is_none() && c.env.is_none());
    // A failing JSON patch test changes nothing.
    let bad: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicas", "value": 9},
        {"op": "test", "path": "/metadata/name", "value": "other"}
    ]))
    .unwrap();
    assert_eq!(
        api_error(
            deps.patch("web", &PatchParams::default(), &Patch::Json::<()>(bad))
                .await
                .unwrap_err()
        )
        .code,
        400
    );
    assert_eq!(
        deps.get("web").await.unwrap().spec.unwrap().replicas,
        Some(4)
    );
}

#[tokio::test]
async fn authentication_and_bad_input() {
    let (server, _dir) = Server::start(&[]);
    let http = server.http();
    let token = server.token();
    // Health needs no credentials; the API does.
    assert_eq!(
        http.send("GET", "/readyz", None, "", vec![]).await.status,
        200
    );
    let r = http
        .send("GET", "/api/v1/namespaces", None, "", vec![])
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["kind"], "Status");
    assert_eq!(
        http.send("GET", "/api/v1/namespaces", Some("wrong"), "", vec![])
            .await
            .status,
        401
    );
    assert_eq!(
        http.send("GET", "/api/v1/namespaces", Some(&token), "", vec![])
            .await
            .status,
        200
    );

    let t = Some(token.as_str());
    let post = |body: &str| {
        http.send(
            "POST",
            "/api/v1/namespaces",
            t,
            "application/json",
            body.as_bytes().to_vec(),
        )
    };
    let r = post("{not json").await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (400, Some("BadRequest"))
    );
    let r = post(r#"{"apiVersion":"apps/v1","kind":"Namespace","metadata":{"name":"x"}}"#).await;
    assert_eq!(r.status, 400);
    let long = "a".repeat(64);
    let r = post(&format!(r#"{{"metadata":{{"name":"{long}"}}}}"#)).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["details"]["causes"][0]["field"], "metadata.name");
    let r = post(r#"{"metadata":{"name":"ok-ns"},"spek":{}}"#).await;
    assert_eq!(r.status, 201);
    assert!(
        r.headers.get("warning").is_some(),
        "unknown field warns by default"
    );
    let r = http
        .send(
            "POST",
            "/api/v1/namespaces?fieldValidation=Strict",
            t,
            "application/json",
            br#"{"metadata":{"name":"strict-ns"},"spek":{}}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("unknown field \\\"spek\\\""));
    let huge = format!(
        r#"{{"metadata":{{"name":"big","namespace":"ok-ns"}},"data":{{"x":"{}"}}}}"#,
        "x".repeat(4 << 20)
    );
    let r = http
        .send(
            "POST",
            "/api/v1/namespaces/ok-ns/configmaps",
            t,
            "application/json",
            huge.into_bytes(),
        )
        .await;
    assert_eq!(r.status, 413);
    let r = http
        .send(
            "POST",
            "/api/v1/namespaces/ok-ns/configmaps",
            t,
            "application/yaml",
            b"metadata:\n  name: from-yaml\ndata:\n  a: b\n".to_vec(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = http.send("GET", "/api/v1/nonsense", t, "", vec![]).await;
    assert_eq!(r.status, 404);
    // The server is still healthy after all of that.
    assert_eq!(
        http.send("GET", "/api/v1/namespaces/ok-ns", t, "", vec![])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn client_certificates_authenticate() {
    let (server, _dir) = Server::start(&[]);
    let pki = server.dir.join("pki");
    let ca = meridian_apiserver::pki::Authority::from_pem(
        &std::fs::read_to_string(pki.join("ca.crt")).unwrap(),
        &std::fs::read_to_string(pki.join("ca.key")).unwrap(),
    )
    .unwrap();
    let cert = ca.client_cert("alice", &["team-a"]).unwrap();
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: m\n  cluster:\n    server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: m\n  context: {{cluster: m, user: alice}}\ncurrent-context: m\nusers:\n- name: alice\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        server.url,
        b64(&ca.cert_pem),
        b64(&cert.cert_pem),
        b64(&cert.key_pem)
    );
    let kc: kube::config::Kubeconfig = serde_yaml_ng::from_str(&kc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let nss: Api<Namespace> = Api::all(client);
    // Authenticated (a 403, not a 401) but bound to nothing yet.
    let refused = nss.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(api_error(refused).code, 403);
    // The certificate's organisation is the user's group: binding it grants the request.
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "team-a-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}],
    }))
    .unwrap();
    Api::all(server.client().await)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // The authorizer reads bindings from its watch cache, as upstream's informers do: the
    // binding takes effect a moment after its create returns.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match nss.list(&ListParams::default()).await {
            Ok(_) => break,
            Err(e) => {
                let status = api_error(e);
                assert!(
                    status.code == 403 && tokio::time::Instant::now() < deadline,
                    "client certificate not accepted: {status:?}"
                );
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn meridian_kinds_round_trip() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    let clusters: Api<fed_api::Cluster> = Api::all(client.clone());
    let c: fed_api::Cluster = serde_json::from_value(json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "eu-west-1", "labels": {"env": "prod"}},
        "spec": {"apiEndpoint": "https://10.0.0.10:6443", "region": "eu-west", "zone": "eu-west-1a",
                 "taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]}
    }))
    .unwrap();
    clusters.create(&PostParams::default(), &c).await.unwrap();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ProbeSucceeded"}],
                                    "kubernetesVersion": "v1.34.2"}});
    let got = clusters
        .patch_status("eu-west-1", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
    assert_eq!(
        got.status.unwrap().kubernetes_version.as_deref(),
        Some("v1.34.2")
    );
    let bad: Value = json!({"apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "bad"}, "spec": {"apiEndpoint": "http://plain", "taints": [{"key": "k", "effect": "Sometimes"}]}});
    let dyn_api: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::erase::<fed_api::Cluster>(&()),
    );
    let e = api_error(
        dyn_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("spec.apiEndpoint") && e.message.contains("spec.taints[0].effect"),
        "{}",
        e.message
    );
}

/// Unpinned patches that race each other all land: the server re-applies a patch whose
/// commit lost the race to the newer object (as Kubernetes does), so no writer sees a 409
/// it never asked for, and nothing one of them wrote is lost.
#[tokio::test]
async fn racing_unpinned_patches_all_land() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "shop").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "shared"}})).unwrap();
    maps.create(&PostParams::default(), &cm).await.unwrap();
    const WRITERS: usize = 8;
    const EACH: usize = 25;
    let writers = (0..WRITERS).map(|w| {
        let maps = maps.clone();
        async move {
            for i in 0..EACH {
                let patch = json!({"data": {format!("w{w}-{i}"): "x"}});
                maps.patch("shared", &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .unwrap_or_else(|e| panic!("writer {w}, patch {i}: {e}"));
            }
        }
    });
    futures::future::join_all(writers).await;
    let data = maps.get("shared").await.unwrap().data.unwrap_or_default();
    assert_eq!(data.len(), WRITERS * EACH);
    // A pinned patch still conflicts once the object has moved on.
    let e = api_error(
        maps.patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"late": "x"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"), "{e:?}");
}

/// The scheduler and the workload controller share a Placement's status: each sends a
/// strategic merge patch of its own fields, unpinned. Conditions merge by `type`, so
/// neither drops the other's condition, whatever order the writes land in; the workload
/// controller's per-cluster entries (a list without a merge key) are replaced whole.
#[tokio::test]
async fn strategic_status_patches_keep_the_other_writers_condition() {
    let (server, _dir) = Server::start(&[]);
    let client = server.client().await;
    namespace(&client, "shop").await;
    let placements: Api<fed_api::Placement> = Api::namespaced(client.clone(), "shop");
    let p: fed_api::Placement = serde_json::from_value(json!({
        "apiVersion": "federation.meridian.dev/v1alpha1", "kind": "Placement",
        "metadata": {"name": "deployment-web"},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u1"},
                 "destClusters": [{"cluster": "a", "replicas": 3}, {"cluster": "b", "replicas": 2}]}
    }))
    .unwrap();
    placements.create(&PostParams::default(), &p).await.unwrap();
    let patch = |body: serde_json::Value| {
        let placements = placements.clone();
        async move {
            placements
                .patch_status(
                    "deployment-web",
                    &PatchParams::default(),
                    &Patch::Strategic(body),
                )
                .await
                .unwrap()
        }
    };
    let types = |p: &fed_api::Placement| -> Vec<(String, String)> {
        let st = p.status.clone().unwrap_or_default();
        st.conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    };
    // The controller first: its entries and condition.
    patch(json!({"status": {
        "clusters": [{"cluster": "a", "replicas": 3}, {"cluster": "b", "replicas": 2}],
        "conditions": [{"type": "Propagated", "status": "False", "reason": "Progressing",
                        "message": "waiting for members"}]}}))
    .await;
    // The scheduler, from a view that has not seen that write: its condition joins.
    let both = patch(json!({"status": {
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"}],
        "unschedulable": null}}))
    .await;
    assert_eq!(
        types(&both),
        [
            ("Propagated".into(), "False".into()),
            ("Scheduled".into(), "True".into())
        ]
    );
    // The controller again: its condition changes in place (the message it names as null
    // goes), its entries are replaced whole (b left), the scheduler's condition stays.
    let after = patch(json!({"status": {
        "clusters": [{"cluster": "a", "replicas": 5, "readyReplicas": 5}],
        "conditions": [{"type": "Propagated", "status": "True", "reason": "InSync",
                        "message": null}]}}))
    .await;
    assert_eq!(
        types(&after),
        [
            ("Propagated".into(), "True".into()),
            ("Scheduled".into(), "True".into())
        ]
    );
    let st = after.status.unwrap();
    assert_eq!(st.conditions[0].message, "", "{st:?}");
    assert_eq!(st.clusters.len(), 1, "{st:?}");
    assert_eq!(
        (
            st.clusters[0].cluster.as_str(),
            st.clusters[0].ready_replicas
        ),
        ("a", 5)
    );
}

/// kubectl and client-go ask `/openapi/v2` for gnostic's protobuf form and parse the body
/// as protobuf whatever its content type: a JSON answer fails their validation with
/// "proto: cannot parse invalid wire-format data".
#[tokio::test]
async fn openapi_v2_is_served_as_protobuf_when_asked() {
    let (server, _dir) = Server::start(&[]);
    let http = server.http();
    let token = server.token();
    let (http, t) = (&http, Some(token.as_str()));
    let get = |accept: &'static str| async move {
        http.send_with("GET", "/openapi/v2", t, &[("accept", accept)], vec![])
            .await
    };

    let r = get("application/com.github.proto-openapi.spec.v2@v1.0+protobuf").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    // Field 1 (`swagger`, length-delimited) comes first: 0x0a, length 3, "2.0".
    assert_eq!(&r.body[..5], b"\x0a\x032.0");
    assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_err());
    let contains = |needle: &[u8]| r.body.windows(needle.len()).any(|w| w == needle);
    for def in [
        "io.k8s.api.core.v1.ServiceAccount",
        "io.k8s.api.rbac.v1.ClusterRole",
        "io.k8s.api.rbac.v1.ClusterRoleBinding",
        "x-kubernetes-group-version-kind",
    ] {
        assert!(
            contains(def.as_bytes()),
            "{def} missing from the protobuf form"
        );
    }

    // JSON stays the default and what `Accept: application/json` gets.
    for accept in ["application/json", "*/*"] {
        let r = get(accept).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["swagger"], "2.0");
    }
    // A form not served is refused, as kube-apiserver does.
    assert_eq!(get("application/yaml").await.status, 406);
}

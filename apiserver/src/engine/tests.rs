//! The engine's subresource writes against a store that loses races on demand: the
//! preconditions and retries `scale` and `finalize` must have, as kube-apiserver's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use meridian_store::{
    DeleteResult, KeyValue, ListResult, MemoryStore, ProgressWatchStream, Revision, Storage,
};
use serde_json::{Value, json};

use super::{
    Engine, List, ListOptions, PatchType, ReadAt, ScaleChange, Selectors, Target, WriteOptions,
};
use crate::object;
use crate::registry::{Registry, ResourceDef};

/// A memory store whose next update, when armed, first loses a race: another write of
/// the same key lands just before it, so the update fails with a conflict.
struct RacingStore {
    inner: MemoryStore,
    race_next_update: AtomicBool,
}

#[async_trait]
impl Storage for RacingStore {
    async fn get(&self, key: &str) -> meridian_store::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        options: &meridian_store::ListOptions,
    ) -> meridian_store::Result<ListResult> {
        self.inner.list_page(prefix, options).await
    }
    async fn create(&self, key: &str, value: Bytes) -> meridian_store::Result<KeyValue> {
        self.inner.create(key, value).await
    }
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> meridian_store::Result<KeyValue> {
        if self.race_next_update.swap(false, Ordering::SeqCst)
            && let Some(kv) = self.inner.get(key).await?
        {
            // The other writer stores the same object again: a new revision, no change.
            self.inner.update(key, kv.value, kv.mod_revision).await?;
        }
        self.inner.update(key, value, expected).await
    }
    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> meridian_store::Result<DeleteResult> {
        self.inner.delete(key, expected).await
    }
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
        progress: Option<std::time::Duration>,
    ) -> meridian_store::Result<ProgressWatchStream> {
        self.inner
            .watch_with_progress(prefix, after, progress)
            .await
    }
    fn current_revision(&self) -> Revision {
        self.inner.current_revision()
    }
    async fn latest_revision(&self) -> meridian_store::Result<Revision> {
        self.inner.latest_revision().await
    }
    async fn compact(&self, revision: Revision) -> meridian_store::Result<()> {
        self.inner.compact(revision).await
    }
}

struct Fixture {
    engine: Arc<Engine>,
    store: Arc<RacingStore>,
    deployments: Arc<ResourceDef>,
    namespaces: Arc<ResourceDef>,
}

impl Fixture {
    /// An engine with the built-in kinds, namespace `shop` and Deployment `shop/web`.
    async fn new() -> Self {
        let store = Arc::new(RacingStore {
            inner: MemoryStore::new(),
            race_next_update: AtomicBool::new(false),
        });
        let registry = Registry::new(crate::kinds::builtin());
        let engine = crate::server::build_engine(registry, store.clone(), 100)
            .await
            .expect("engine");
        let deployments = engine
            .registry()
            .lookup("apps", "v1", "deployments")
            .cloned();
        let namespaces = engine.registry().lookup("", "v1", "namespaces").cloned();
        let f = Self {
            engine,
            store,
            deployments: deployments.expect("deployments served"),
            namespaces: namespaces.expect("namespaces served"),
        };
        let opts = WriteOptions::default();
        f.engine
            .create(
                &f.namespaces,
                "",
                json!({"metadata": {"name": "shop"}}),
                &opts,
            )
            .await
            .expect("namespace");
        let web = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        });
        f.engine
            .create(&f.deployments, "shop", web, &opts)
            .await
            .expect("deployment");
        f
    }

    async fn web(&self) -> Value {
        let c = self.engine.current(&self.deployments, "shop", "web").await;
        c.expect("web exists").value()
    }

    fn race_next_update(&self) {
        self.store.race_next_update.store(true, Ordering::SeqCst);
    }

    async fn scale(&self, change: ScaleChange<'_>) -> Result<Value, crate::status::ApiError> {
        let opts = WriteOptions::default();
        let w = self
            .engine
            .update_scale(&self.deployments, "shop", "web", change, &opts);
        w.await.map(|w| w.obj)
    }
}

fn rv(obj: &Value) -> String {
    object::meta_str(obj, "resourceVersion")
        .expect("a resourceVersion")
        .to_string()
}

#[tokio::test]
async fn a_scale_update_without_a_resource_version_retries_a_lost_race() {
    let f = Fixture::new().await;
    let before = rv(&f.web().await);
    f.race_next_update();
    let body = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 5}});
    let scale = f.scale(ScaleChange::Replace(&body)).await.expect("retried");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    let web = f.web().await;
    assert_eq!(web["spec"]["replicas"], 5);
    // The lost race's write and then this one.
    let after: u64 = rv(&web).parse().unwrap();
    assert_eq!(after, before.parse::<u64>().unwrap() + 2);
    assert_eq!(scale["metadata"]["resourceVersion"], after.to_string());
}

#[tokio::test]
async fn a_scale_update_with_a_resource_version_is_a_precondition() {
    let f = Fixture::new().await;
    let current = f.engine.scale(&f.deployments, "shop", "web").await.unwrap();
    assert_eq!(current["spec"]["replicas"], 2);
    assert_eq!(current["status"]["selector"], "app=web");

    // Stale from the start: 409, nothing written.
    let mut stale = current.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["spec"]["replicas"] = json!(7);
    let err = f.scale(ScaleChange::Replace(&stale)).await.unwrap_err();
    assert_eq!((err.code, err.reason), (409, "Conflict"));

    // Current when read, overtaken before it lands: still 409, not applied on top.
    let mut pinned = current.clone();
    pinned["spec"]["replicas"] = json!(7);
    f.race_next_update();
    let err = f.scale(ScaleChange::Replace(&pinned)).await.unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(f.web().await["spec"]["replicas"], 2);

    // A patch that names a resourceVersion pins it too.
    let patch = json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 7}});
    let err = f
        .scale(ScaleChange::Patch(PatchType::Merge, &patch))
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);

    // The current version, unraced: applied.
    let mut fresh = f.engine.scale(&f.deployments, "shop", "web").await.unwrap();
    fresh["spec"]["replicas"] = json!(7);
    let scale = f.scale(ScaleChange::Replace(&fresh)).await.unwrap();
    assert_eq!(scale["spec"]["replicas"], 7);
}

#[tokio::test]
async fn scale_patches_of_every_type_change_only_replicas() {
    let f = Fixture::new().await;
    let json_patch = json!([{"op": "replace", "path": "/spec/replicas", "value": 4}]);
    f.race_next_update();
    let scale = f
        .scale(ScaleChange::Patch(PatchType::Json, &json_patch))
        .await
        .expect("a patch without a pin retries");
    assert_eq!(scale["spec"]["replicas"], 4);
    let merge = json!({"spec": {"replicas": 3}});
    for pt in [PatchType::Merge, PatchType::Strategic] {
        let scale = f.scale(ScaleChange::Patch(pt, &merge)).await.unwrap();
        assert_eq!(scale["spec"]["replicas"], 3);
    }
    let web = f.web().await;
    assert_eq!(web["spec"]["replicas"], 3);
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx"
    );

    // Bad changes: a failing JSON patch (400), negative replicas (422 on the Scale).
    let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 9}]);
    let err = f
        .scale(ScaleChange::Patch(PatchType::Json, &failing))
        .await
        .unwrap_err();
    assert_eq!(err.code, 400);
    assert!(err.message.contains("operation 0"), "{}", err.message);
    let negative = json!({"spec": {"replicas": -1}});
    let err = f
        .scale(ScaleChange::Patch(PatchType::Merge, &negative))
        .await
        .unwrap_err();
    assert_eq!((err.code, err.kind.as_deref()), (422, Some("Scale")));
    assert_eq!(err.causes[0].field, "spec.replicas");
}

#[tokio::test]
async fn scale_is_only_served_where_the_kind_has_it() {
    let f = Fixture::new().await;
    let err = f.engine.scale(&f.namespaces, "", "shop").await.unwrap_err();
    assert_eq!(err.code, 404);
    let err = f
        .engine
        .finalize(&f.deployments, "web", &json!({}), &WriteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code, 404);
}

#[tokio::test]
async fn finalize_replaces_only_spec_finalizers_under_its_precondition() {
    let f = Fixture::new().await;
    let opts = WriteOptions::default();
    let ns = f.engine.current(&f.namespaces, "", "shop").await.unwrap();
    let ns = ns.value();
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));

    // A stale resourceVersion (the namespace changed since it was read): 409.
    let label = json!({"metadata": {"labels": {"team": "shop"}}});
    f.engine
        .patch(
            &f.namespaces,
            "",
            "shop",
            PatchType::Merge,
            &label,
            Target::Main,
            &opts,
        )
        .await
        .expect("labelled");
    let mut body = ns.clone();
    body["spec"]["finalizers"] = json!([]);
    let err = f
        .engine
        .finalize(&f.namespaces, "shop", &body, &opts)
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);

    // No resourceVersion: a lost race is retried; nothing but spec.finalizers changes.
    object::meta_mut(&mut body).remove("resourceVersion");
    body["metadata"]["labels"] = json!({"ignored": "yes"});
    body["spec"]["finalizers"] = json!(["example.dev/hold"]);
    f.race_next_update();
    let w = f
        .engine
        .finalize(&f.namespaces, "shop", &body, &opts)
        .await
        .expect("retried");
    assert_eq!(w.obj["spec"]["finalizers"], json!(["example.dev/hold"]));
    assert!(w.obj["metadata"]["labels"].get("ignored").is_none());
    let ns = f.engine.current(&f.namespaces, "", "shop").await.unwrap();
    assert_eq!(ns.value()["spec"], w.obj["spec"]);
}

#[tokio::test]
async fn a_pinned_patch_is_not_retried_onto_a_newer_version() {
    let f = Fixture::new().await;
    let web = f.web().await;
    let patch = json!({"metadata": {"resourceVersion": rv(&web)}, "spec": {"replicas": 9}});
    f.race_next_update();
    let err = f
        .engine
        .patch(
            &f.deployments,
            "shop",
            "web",
            PatchType::Merge,
            &patch,
            Target::Main,
            &WriteOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(f.web().await["spec"]["replicas"], 2);
}

#[tokio::test]
async fn lists_page_at_one_revision_and_honour_resource_version_rules() {
    let f = Fixture::new().await;
    let cms = f.engine.registry().lookup("", "v1", "configmaps").cloned();
    let cms = cms.expect("configmaps served");
    let opts = WriteOptions::default();
    for (name, tier) in [("a", "front"), ("b", "back"), ("c", "front")] {
        let cm = json!({"metadata": {"name": name, "labels": {"tier": tier}}});
        f.engine.create(&cms, "shop", cm, &opts).await.unwrap();
    }
    let list = |selectors, limit, continue_token, read_at| {
        let opts = ListOptions {
            selectors,
            limit,
            continue_token,
            read_at,
        };
        let engine = f.engine.clone();
        let cms = cms.clone();
        async move { engine.list(&cms, Some("shop"), &opts).await }
    };
    let names = |l: &List| {
        l.items
            .iter()
            .map(|c| c.name().to_string())
            .collect::<Vec<_>>()
    };

    let first = list(Selectors::default(), Some(2), None, ReadAt::Latest)
        .await
        .unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first.remaining, 1);
    let token = first.continue_token.clone().expect("a next page");
    // A write in between does not move the pages' revision.
    f.engine
        .create(&cms, "shop", json!({"metadata": {"name": "d"}}), &opts)
        .await
        .unwrap();
    let second = list(Selectors::default(), Some(2), Some(&token), ReadAt::Latest)
        .await
        .unwrap();
    assert_eq!(names(&second), ["c"]);
    assert_eq!(second.revision, first.revision);
    assert!(second.continue_token.is_none());
    let err = list(
        Selectors::default(),
        None,
        Some(&token),
        ReadAt::NotOlderThan(first.revision),
    )
    .await
    .err()
    .expect("continue with a resourceVersion");
    assert_eq!(err.code, 400);

    // Exact: only the current revision is kept (the cache's, once it has seen `d`).
    f.engine.sync().await.unwrap();
    let err = list(
        Selectors::default(),
        None,
        None,
        ReadAt::Exact(first.revision),
    )
    .await
    .err()
    .expect("an old revision");
    assert_eq!((err.code, err.reason), (410, "Expired"));
    let now = f.engine.cache.revision();
    let all = list(Selectors::default(), None, None, ReadAt::Exact(now))
        .await
        .unwrap();
    assert_eq!(names(&all), ["a", "b", "c", "d"]);

    // Selectors.
    let front = Selectors::parse(&cms, Some("tier=front"), None).unwrap();
    let l = list(front, None, None, ReadAt::Any).await.unwrap();
    assert_eq!(names(&l), ["a", "c"]);
    let by_name = Selectors::parse(&cms, None, Some("metadata.name=b")).unwrap();
    let l = list(by_name, None, None, ReadAt::Latest).await.unwrap();
    assert_eq!(names(&l), ["b"]);
    let err = Selectors::parse(&cms, None, Some("data.x=1"))
        .err()
        .unwrap();
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("field label not supported"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn an_update_without_a_resource_version_replaces_the_current_object() {
    let f = Fixture::new().await;
    let opts = WriteOptions::default();
    let mut body = f.web().await;
    body["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    body["spec"]["replicas"] = json!(4);
    // Unconditional, as kube-apiserver's for built-in kinds: a write that lands first is
    // overwritten, not a conflict.
    f.race_next_update();
    let w = f
        .engine
        .update(&f.deployments, "shop", "web", body, Target::Main, &opts)
        .await
        .expect("an unconditional update");
    assert_eq!(w.obj["spec"]["replicas"], 4);
    assert_eq!(f.web().await["spec"]["replicas"], 4);
}

#[tokio::test]
async fn a_lease_update_needs_a_resource_version() {
    let f = Fixture::new().await;
    let opts = WriteOptions::default();
    let leases = f
        .engine
        .registry()
        .lookup("coordination.k8s.io", "v1", "leases")
        .cloned();
    let leases = leases.expect("leases served");
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "lock"}, "spec": {"holderIdentity": "a"}});
    f.engine
        .create(&leases, "shop", lease.clone(), &opts)
        .await
        .expect("lease");
    let mut takeover = lease;
    takeover["spec"]["holderIdentity"] = json!("b");
    let err = f
        .engine
        .update(&leases, "shop", "lock", takeover, Target::Main, &opts)
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        format!("{err:?}").contains("metadata.resourceVersion"),
        "{err:?}"
    );
}

#[test]
fn generation_tracks_every_member_but_metadata_and_status() {
    use super::spec_differs;
    let base = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"a": "1"}},
        "spec": {"replicas": 1}, "status": {"replicas": 0}});
    let mut meta = base.clone();
    meta["metadata"]["labels"]["a"] = json!("2");
    meta["status"]["replicas"] = json!(1);
    meta["apiVersion"] = json!("apps/v1beta2");
    assert!(!spec_differs(&base, &meta));
    let mut spec = base.clone();
    spec["spec"]["replicas"] = json!(2);
    assert!(spec_differs(&base, &spec));
    // A member added or removed beside spec counts too (ConfigMap `data`, RBAC `rules`).
    let mut added = base.clone();
    added["data"] = json!({"k": "v"});
    assert!(spec_differs(&base, &added));
    assert!(spec_differs(&added, &base));
}

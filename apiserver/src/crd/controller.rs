//! The in-server controller of custom resource definitions: serves what [`plan`] decides
//! (registry, discovery and OpenAPI switch at once), writes each definition's status,
//! and deletes a deleted definition's objects before releasing its finalizer.

use std::sync::Arc;
use std::time::Duration;

use meridian_store::Storage;
use serde_json::{Value, json};

use super::plan::{Plan, plan};
use crate::engine::{DeleteOptions, Engine, PatchType, ReadAt, Target, WriteOptions};
use crate::kinds::apiextensions::{CLEANUP_FINALIZER, GROUP};
use crate::object;
use crate::registry::{Registry, ResourceDef};
use crate::status::ApiError;

/// The field manager of this controller's writes (upstream's apiextensions server).
const MANAGER: &str = "kube-apiserver";
/// How soon a definition whose objects are still going is looked at again: their
/// finalizers are other controllers' business, so no event of ours says when they end.
const CLEANUP_REQUEUE: Duration = Duration::from_millis(200);

/// The definitions resource of `registry`, if it serves custom resources at all.
fn crd_resource(registry: &Registry) -> Option<Arc<ResourceDef>> {
    registry
        .lookup(GROUP, "v1", "customresourcedefinitions")
        .cloned()
}

/// `registry` with the kinds of the definitions already in `store`: a restarted server
/// serves them before it loads their objects, so none is skipped as unknown.
pub async fn with_stored(
    registry: Registry,
    store: &dyn Storage,
) -> Result<Registry, meridian_store::StoreError> {
    let Some(def) = crd_resource(&registry) else {
        return Ok(registry);
    };
    let list = store.list(&def.prefix()).await?;
    let crds: Vec<Value> = list
        .items
        .iter()
        .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
        .collect();
    if crds.is_empty() {
        return Ok(registry);
    }
    let p = plan(&crds, &registry, &object::now());
    Ok(registry.with_custom(p.defs))
}

/// Runs for the life of the server (as the garbage collector does): reconciles every
/// definition after each change.
pub async fn run(engine: Arc<Engine>) {
    let Some(crd_def) = crd_resource(&engine.registry()) else {
        return;
    };
    let mut served: Option<u64> = None;
    loop {
        let (objects, mut sub) = engine.cache.resource(&crd_def).snapshot_and_subscribe();
        let crds: Vec<Value> = objects.iter().map(|c| c.value()).collect();
        let p = plan(&crds, &engine.registry(), &object::now());
        let pending = reconcile(&engine, &crd_def, p, &mut served).await;
        drop(objects);
        let wait = async {
            // Any change of a definition (or a lagged receiver) means: look again.
            let _ = sub.live.recv().await;
        };
        if pending {
            let _ = tokio::time::timeout(CLEANUP_REQUEUE, wait).await;
        } else {
            wait.await;
        }
    }
}

/// Applies one plan; whether some definition still waits for its objects to go.
async fn reconcile(
    engine: &Engine,
    crd_def: &ResourceDef,
    p: Plan,
    served: &mut Option<u64>,
) -> bool {
    if *served != Some(p.fingerprint) {
        // The first pass after a restart may find the same kinds served already.
        let current: Vec<Arc<ResourceDef>> = engine
            .registry()
            .all()
            .iter()
            .filter(|d| d.custom.is_some())
            .cloned()
            .collect();
        if served.is_some() || !same_kinds(&current, &p.defs) {
            engine.serve_custom(p.defs.clone());
        }
        *served = Some(p.fingerprint);
    }
    for (name, status) in p.statuses {
        if let Err(e) = write_status(engine, crd_def, &name, status).await {
            tracing::warn!(crd = %name, error = %e, "writing the definition's status failed");
        }
    }
    let mut pending = false;
    for (name, defs) in p.terminating {
        match clean_up(engine, crd_def, &name, &defs).await {
            Ok(done) => pending |= !done,
            Err(e) => {
                tracing::warn!(crd = %name, error = %e, "deleting the definition's objects failed");
                pending = true;
            }
        }
    }
    pending
}

/// Whether two sets of custom kinds serve the same URLs with the same schemas.
fn same_kinds(a: &[Arc<ResourceDef>], b: &[Arc<ResourceDef>]) -> bool {
    let key = |d: &Arc<ResourceDef>| {
        (
            d.group,
            d.version,
            d.plural,
            d.custom.as_ref().map(|c| c.schema.clone()),
        )
    };
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| key(x) == key(y))
}

async fn write_status(
    engine: &Engine,
    crd_def: &ResourceDef,
    name: &str,
    status: Value,
) -> Result<(), ApiError> {
    merge_patch(
        engine,
        crd_def,
        name,
        &json!({ "status": status }),
        Target::Status,
    )
    .await
}

/// Merge-patches the definition `name` (or its status) as this controller's manager.
async fn merge_patch(
    engine: &Engine,
    crd_def: &ResourceDef,
    name: &str,
    patch: &Value,
    target: Target,
) -> Result<(), ApiError> {
    engine
        .patch(
            crd_def,
            "",
            name,
            PatchType::Merge,
            patch,
            target,
            &WriteOptions::by(MANAGER),
        )
        .await
        .map(|_| ())
}

/// Deletes the objects of a definition being deleted; once none is left, releases the
/// definition's finalizer. Whether it is done.
async fn clean_up(
    engine: &Engine,
    crd_def: &ResourceDef,
    name: &str,
    defs: &[Arc<ResourceDef>],
) -> Result<bool, ApiError> {
    let mut left = 0;
    // Every version stores under one prefix: the first (storage) version reaches them all.
    if let Some(def) = defs.first() {
        let rc = engine.cache.resource(def);
        let page = rc.list(&def.prefix(), None, None, engine.cache.revision(), |_| true);
        for c in page.items {
            left += 1;
            if c.deleting {
                continue;
            }
            match engine
                .delete(def, c.namespace(), c.name(), &DeleteOptions::default())
                .await
            {
                Ok(_) => {}
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    if left > 0 {
        // Deleted objects leave the cache shortly; the requeue looks again.
        return Ok(false);
    }
    let current = engine.get(crd_def, "", name, ReadAt::Latest).await?.value();
    let finalizers: Vec<Value> = current
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter(|f| *f != CLEANUP_FINALIZER)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object::meta_str(&current, "resourceVersion"),
    }});
    merge_patch(engine, crd_def, name, &patch, Target::Main).await?;
    Ok(true)
}

//! In-server controllers: the garbage collector (ownerReferences with background, foreground
//! and orphan propagation) and the namespace deleter (in the order the registry gives, see
//! [`Registry::with_deleted_first`](crate::registry::Registry::with_deleted_first)). Both
//! are level-triggered from the cache's signals and retry failed work with backoff.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::JsonPointer;
use serde_json::{Value, json};

use crate::cache::Cached;
use crate::engine::{DeleteOptions, Engine, PatchType, Target, WriteOptions};
use crate::object;
use crate::registry::ResourceDef;
use crate::status::ApiError;

const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
const FINALIZER_NAMESPACE: &str = "kubernetes";
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Runs both controllers until the process ends.
pub async fn run(engine: Arc<Engine>) {
    let signals = &engine.cache.signals;
    loop {
        let owners: Vec<String> = signals.owners.lock().expect("signals").drain().collect();
        let namespaces: Vec<String> = signals
            .namespaces
            .lock()
            .expect("signals")
            .drain()
            .collect();
        if owners.is_empty() && namespaces.is_empty() {
            signals.notify.notified().await;
            continue;
        }
        if let Err(e) = engine.sync().await {
            tracing::warn!(error = %e, "garbage collector waiting for the cache");
        }
        for uid in owners {
            if let Err(e) = collect_owner(&engine, &uid).await {
                tracing::warn!(owner_uid = %uid, error = %e, "garbage collection failed; retrying");
                retry_later(&engine, move |c| c.signal_owners(vec![uid]));
            }
        }
        for ns in namespaces {
            if let Err(e) = sync_namespace(&engine, &ns).await {
                tracing::warn!(namespace = %ns, error = %e, "namespace deletion failed; retrying");
                retry_later(&engine, move |c| c.signal_namespace(&ns));
            }
        }
    }
}

fn retry_later(engine: &Arc<Engine>, f: impl FnOnce(&crate::cache::Cache) + Send + 'static) {
    let cache = engine.cache.clone();
    tokio::spawn(async move {
        tokio::time::sleep(RETRY_AFTER).await;
        f(&cache);
    });
}

fn lookup(engine: &Engine, key: &str) -> Option<(Arc<ResourceDef>, Arc<Cached>)> {
    let def = engine.registry().for_key(key)?.clone();
    let c = engine.cache.resource(&def).get(key)?;
    Some((def, c))
}

fn dependents_of(engine: &Engine, uid: &str) -> Vec<Arc<str>> {
    engine
        .cache
        .owners
        .lock()
        .expect("owner index")
        .dependents
        .get(uid)
        .map(|s| s.iter().cloned().collect())
        .unwrap_or_default()
}

fn owner_alive(engine: &Engine, uid: &str) -> bool {
    engine
        .cache
        .owners
        .lock()
        .expect("owner index")
        .uids
        .contains_key(uid)
}

fn ignore_missing(r: Result<(), ApiError>) -> Result<(), ApiError> {
    match r {
        Err(e) if e.code == 404 => Ok(()),
        other => other,
    }
}

/// Rewrites a dependent's ownerReferences without `uid`.
async fn drop_owner_ref(
    engine: &Engine,
    def: &ResourceDef,
    dep: &Cached,
    uid: &str,
) -> Result<(), ApiError> {
    let v = dep.value();
    let refs: Vec<Value> = object::meta(&v)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
        .cloned()
        .collect();
    let refs = if refs.is_empty() {
        Value::Null
    } else {
        Value::Array(refs)
    };
    patch_metadata(engine, def, dep, json!({"ownerReferences": refs})).await
}

async fn remove_finalizer(
    engine: &Engine,
    def: &ResourceDef,
    obj: &Cached,
    finalizer: &str,
) -> Result<(), ApiError> {
    let rest: Vec<String> = object::finalizers(&obj.value())
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    let finalizers = if rest.is_empty() {
        Value::Null
    } else {
        json!(rest)
    };
    patch_metadata(engine, def, obj, json!({"finalizers": finalizers})).await
}

/// Merge-patches an object's metadata (no precondition: re-applied if another write
/// wins); an object gone meanwhile is no error.
async fn patch_metadata(
    engine: &Engine,
    def: &ResourceDef,
    obj: &Cached,
    metadata: Value,
) -> Result<(), ApiError> {
    let patch = json!({ "metadata": metadata });
    let written = engine
        .patch(
            def,
            obj.namespace(),
            obj.name(),
            PatchType::Merge,
            &patch,
            Target::Main,
            &WriteOptions::default(),
        )
        .await;
    ignore_missing(written.map(drop))
}

async fn collect_owner(engine: &Engine, uid: &str) -> Result<(), ApiError> {
    let owner_key = engine
        .cache
        .owners
        .lock()
        .expect("owner index")
        .uids
        .get(uid)
        .cloned();
    let owner = owner_key.as_deref().and_then(|k| lookup(engine, k));
    if let Some((odef, owner)) = owner {
        let ov = owner.value();
        if !object::is_deleting(&ov) {
            return Ok(());
        }
        let fins = object::finalizers(&ov);
        if fins.iter().any(|f| f == FINALIZER_ORPHAN) {
            for key in dependents_of(engine, uid) {
                if let Some((ddef, dep)) = lookup(engine, &key) {
                    drop_owner_ref(engine, &ddef, &dep, uid).await?;
                }
            }
            remove_finalizer(engine, &odef, &owner, FINALIZER_ORPHAN).await?;
        } else if fins.iter().any(|f| f == FINALIZER_FOREGROUND) {
            let deps = dependents_of(engine, uid);
            if deps.is_empty() {
                remove_finalizer(engine, &odef, &owner, FINALIZER_FOREGROUND).await?;
            }
            for key in deps {
                if let Some((ddef, dep)) = lookup(engine, &key)
                    && !object::is_deleting(&dep.value())
                {
                    let opts = DeleteOptions {
                        propagation: Some("Foreground".into()),
                        ..Default::default()
                    };
                    ignore_missing(
                        engine
                            .delete(&ddef, dep.namespace(), dep.name(), &opts)
                            .await
                            .map(|_| ()),
                    )?;
                }
            }
        }
        return Ok(());
    }
    // The owner is gone: delete dependents no live owner holds, unlink the others.
    for key in dependents_of(engine, uid) {
        let Some((ddef, dep)) = lookup(engine, &key) else {
            continue;
        };
        if dep
            .owners
            .iter()
            .any(|o| **o != *uid && owner_alive(engine, o))
        {
            drop_owner_ref(engine, &ddef, &dep, uid).await?;
        } else {
            tracing::debug!(key = %dep.key, "deleting object whose owners are gone");
            ignore_missing(
                engine
                    .delete(
                        &ddef,
                        dep.namespace(),
                        dep.name(),
                        &DeleteOptions::default(),
                    )
                    .await
                    .map(|_| ()),
            )?;
        }
    }
    Ok(())
}

/// Deletes the namespace's objects of `defs` (those not already being deleted); returns
/// how many were there.
async fn delete_contents(
    engine: &Engine,
    ns: &str,
    defs: &[&Arc<ResourceDef>],
) -> Result<usize, ApiError> {
    let mut remaining = 0;
    for def in defs {
        let rc = engine.cache.resource(def);
        let page = rc.list(&def.namespace_prefix(Some(ns)), None, None, 0, |_| true);
        remaining += page.items.len();
        for c in page.items {
            if object::is_deleting(&c.value()) {
                continue;
            }
            ignore_missing(
                engine
                    .delete(def, ns, c.name(), &DeleteOptions::default())
                    .await
                    .map(|_| ()),
            )?;
        }
    }
    Ok(remaining)
}

async fn sync_namespace(engine: &Engine, ns: &str) -> Result<(), ApiError> {
    let Some(ns_def) = engine.registry().lookup("", "v1", "namespaces").cloned() else {
        return Ok(());
    };
    let Some(nsobj) = engine.cache.resource(&ns_def).get(&ns_def.key("", ns)) else {
        return Ok(());
    };
    let v = nsobj.value();
    if !object::is_deleting(&v) {
        return Ok(());
    }
    let registry = engine.registry();
    let (first, rest): (Vec<&Arc<ResourceDef>>, Vec<_>) = registry
        .all()
        .iter()
        .filter(|d| d.namespaced)
        .partition(|d| registry.deleted_first(d));
    for stage in [first, rest] {
        if delete_contents(engine, ns, &stage).await? > 0 {
            // Deletions signal this namespace again as its contents go.
            return Ok(());
        }
    }
    let spec_fins: Vec<Value> = v
        .at("/spec/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.as_str() != Some(FINALIZER_NAMESPACE))
        .collect();
    let mut body = v.clone();
    body["spec"]["finalizers"] = Value::Array(spec_fins);
    ignore_missing(
        engine
            .update(
                &ns_def,
                "",
                ns,
                body,
                Target::Main,
                &WriteOptions::default(),
            )
            .await
            .map(|_| ()),
    )
}

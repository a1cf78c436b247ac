//! Server-side apply (`PATCH` with `application/apply-patch+yaml`): the field manager
//! merges the configuration into the live object, or creates the object when there is
//! none, and the result is stored through the same rules as any other write.

use serde_json::Value;

use super::managed::apply_error;
use super::{Engine, Target, WriteOptions, Written, endpoint_of};
use crate::object;
use crate::registry::ResourceDef;
use crate::status::ApiError;

/// An apply request: the configuration and the options only an apply has.
#[derive(Clone, Copy, Debug)]
pub struct Apply<'a> {
    /// The apply configuration (a partial object of the endpoint's kind).
    pub config: &'a Value,
    /// `force=true`: take conflicting fields from their managers.
    pub force: bool,
}

impl Engine {
    /// Applies `apply` for `opts.manager` to the object at `namespace`/`name`, through
    /// `target`. A missing object is created from the configuration when `target` is the
    /// main resource; its name and namespace must be the URL's, as upstream requires.
    /// Returns the write and whether it created the object.
    pub async fn apply(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        apply: Apply<'_>,
        target: Target,
        opts: &WriteOptions,
    ) -> Result<(Written, bool), ApiError> {
        let fm = self
            .managers
            .get(def, &self.definitions(), endpoint_of(target));
        // A create lost to a concurrent one, or an update to a concurrent delete, is
        // tried again on what is there then; the bound keeps a storm from looping.
        for _ in 0..super::CONFLICT_RETRIES {
            match self.current(def, namespace, name).await {
                Ok(_) => {}
                Err(e) if e.code == 404 && target == Target::Main => {
                    check_identity(def, namespace, name, apply.config)?;
                    let now = jiff::Timestamp::now();
                    let applied = fm
                        .apply(None, apply.config, &opts.manager, apply.force, now)
                        .map_err(|e| apply_error(def, name, e))?;
                    let mut obj = applied.object;
                    let meta = object::meta_mut(&mut obj);
                    meta.insert("name".into(), Value::from(name));
                    // No generateName: the name is the URL's.
                    meta.remove("generateName");
                    match self.create_recorded(def, namespace, obj, opts, true).await {
                        Err(e) if e.reason == "AlreadyExists" => continue,
                        r => return r.map(|w| (w, true)),
                    }
                }
                Err(e) => return Err(e),
            }
            let result = self
                .update_with(def, namespace, name, target, None, opts, |live| {
                    let now = jiff::Timestamp::now();
                    let applied = fm
                        .apply(Some(live), apply.config, &opts.manager, apply.force, now)
                        .map_err(|e| apply_error(def, name, e))?;
                    Ok(applied.object)
                })
                .await;
            match result {
                Err(e) if e.code == 404 && target == Target::Main => continue,
                r => return r.map(|w| (w, false)),
            }
        }
        Err(ApiError::stale(def.plural, def.group, name))
    }
}

/// The configuration's name and namespace, where it sets them, must be the URL's.
fn check_identity(
    def: &ResourceDef,
    namespace: &str,
    name: &str,
    config: &Value,
) -> Result<(), ApiError> {
    let given = |k: &str| {
        config
            .get("metadata")
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if given("name") != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            given("name")
        )));
    }
    let ns = given("namespace");
    if def.namespaced && !ns.is_empty() && ns != namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

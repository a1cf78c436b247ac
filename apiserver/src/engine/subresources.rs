//! The `scale` and `finalize` subresources: views of part of an object, written through
//! the same guaranteed update as the object itself, with kube-apiserver's preconditions.

use apimachinery::JsonPointer;
use serde_json::{Value, json};

use super::{Endpoint, Engine, PatchType, Target, WriteOptions, Written};
use crate::kinds::validate;
use crate::object;
use crate::registry::ResourceDef;
use crate::status::ApiError;

/// A change to a `/scale` subresource.
#[derive(Clone, Copy, Debug)]
pub enum ScaleChange<'a> {
    /// `PUT`: the whole Scale; its `metadata.resourceVersion`, when set, is a precondition.
    Replace(&'a Value),
    /// `PATCH` of the Scale view (strategic merge patch is a merge patch here: a Scale
    /// has no lists).
    Patch(PatchType, &'a Value),
}

/// Where a kind's replicas are: (spec replicas, status replicas) as JSON pointers.
fn replica_paths(def: &ResourceDef) -> (&str, &str) {
    match def.custom.as_ref().and_then(|c| c.scale.as_ref()) {
        Some(p) => (&p.spec_replicas, &p.status_replicas),
        None => ("/spec/replicas", "/status/replicas"),
    }
}

/// The serialized label selector of an object's pods: a built-in kind's `spec.selector`,
/// or the string at a custom kind's `labelSelectorPath` (empty when it has none).
fn selector_of(def: &ResourceDef, obj: &Value) -> String {
    match def.custom.as_ref().and_then(|c| c.scale.as_ref()) {
        Some(p) => p
            .label_selector
            .as_deref()
            .and_then(|path| obj.pointer(path))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        None => {
            let sel = obj.at("/spec/selector").cloned().unwrap_or(Value::Null);
            apimachinery::selector::LabelSelector::from_json(&sel)
                .map(|s| s.to_string())
                .unwrap_or_default()
        }
    }
}

/// The dotted path of the field a `/scale` write owns (`spec.replicas`).
pub(crate) fn scale_field(def: &ResourceDef) -> String {
    replica_paths(def).0[1..].replace('/', ".")
}

/// The `autoscaling/v1` Scale view of an object of `def` (replicas where the kind keeps
/// them: `spec.replicas` for built-in kinds, the CRD's paths for custom ones).
pub fn scale_of(def: &ResourceDef, obj: &Value) -> Value {
    let selector = selector_of(def, obj);
    let (spec, status) = replica_paths(def);
    let meta = object::meta(obj);
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"), "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": obj.pointer(spec).cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer(status).cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

/// The Scale a change makes of `current` (the Scale of the stored object).
fn changed_scale(current: Value, change: ScaleChange<'_>) -> Result<Value, ApiError> {
    match change {
        ScaleChange::Replace(body) => Ok(body.clone()),
        ScaleChange::Patch(PatchType::Json, patch) => {
            apimachinery::patch::json_patch(&current, patch).map_err(|e| {
                ApiError::bad_request(format!("the JSON patch could not be applied: {e}"))
            })
        }
        ScaleChange::Patch(PatchType::Merge | PatchType::Strategic, patch) => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            let mut scale = current;
            apimachinery::patch::merge_patch(&mut scale, patch);
            Ok(scale)
        }
    }
}

/// The object with the replicas `scale` asks for, pinned to the Scale's resourceVersion
/// (unpinned when it has none).
fn scaled(def: &ResourceDef, obj: &Value, scale: &Value) -> Result<Value, ApiError> {
    let replicas = scale
        .at("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("spec.replicas must be an integer"))?;
    if replicas < 0 {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            object::name(obj),
            vec![validate::invalid(
                "spec.replicas",
                &Value::from(replicas),
                "must be greater than or equal to 0",
            )],
        ));
    }
    let name = object::name(scale);
    if !name.is_empty() && name != object::name(obj) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            object::name(obj)
        )));
    }
    let mut out = obj.clone();
    set_at(&mut out, replica_paths(def).0, Value::from(replicas));
    pin(&mut out, object::meta_str(scale, "resourceVersion"));
    Ok(out)
}

/// Sets the field at JSON pointer `path` (object keys only), creating the objects above it.
fn set_at(obj: &mut Value, path: &str, value: Value) {
    let mut at = obj;
    let mut keys = path.split('/').skip(1).peekable();
    while let Some(k) = keys.next() {
        if !at.is_object() {
            *at = json!({});
        }
        let Value::Object(m) = at else { return };
        if keys.peek().is_none() {
            m.insert(k.to_string(), value);
            return;
        }
        at = m.entry(k.to_string()).or_insert_with(|| json!({}));
    }
}

/// Sets `obj`'s resourceVersion to the precondition a request gave, or removes it (no
/// precondition: the write retries on conflicts).
fn pin(obj: &mut Value, rv: Option<&str>) {
    let meta = object::meta_mut(obj);
    match rv.filter(|rv| !rv.is_empty()) {
        Some(rv) => meta.insert("resourceVersion".into(), Value::from(rv)),
        None => meta.remove("resourceVersion"),
    };
}

/// The error for a kind without a `scale` subresource.
fn has_scale(def: &ResourceDef) -> Result<(), ApiError> {
    if def.scale_subresource {
        Ok(())
    } else {
        Err(ApiError::no_route(&format!("{}/scale", def.plural)))
    }
}

impl Engine {
    /// The Scale of an object (`GET .../scale`).
    pub async fn scale(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        has_scale(def)?;
        let current = self.current(def, namespace, name).await?;
        Ok(scale_of(def, &current.value()))
    }

    /// Changes an object's replicas through its Scale; returns the Scale written. A
    /// resourceVersion the Scale (or a patch of it) sets is a precondition, as in
    /// kube-apiserver; without one, a concurrent write makes the change apply again to
    /// the newer object.
    pub async fn update_scale(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        change: ScaleChange<'_>,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        has_scale(def)?;
        let scale = Some(Endpoint::Scale);
        let w = self
            .update_with(def, namespace, name, Target::Main, scale, opts, |obj| {
                let scale = changed_scale(scale_of(def, obj), change)?;
                scaled(def, obj, &scale)
            })
            .await?;
        Ok(Written::new(scale_of(def, &w.obj), w.warnings))
    }

    /// `PUT namespaces/{name}/finalize`: replaces only `spec.finalizers` with the body's.
    /// The body's resourceVersion, when set, is a precondition; without one the change
    /// applies to whatever version is current.
    pub async fn finalize(
        &self,
        def: &ResourceDef,
        name: &str,
        body: &Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if !def.is_namespace() {
            return Err(ApiError::no_route(&format!("{}/finalize", def.plural)));
        }
        let finalizers = body.at("/spec/finalizers").cloned().unwrap_or(json!([]));
        let rv = object::meta_str(body, "resourceVersion");
        let endpoint = Some(Endpoint::Finalize);
        self.update_with(def, "", name, Target::Main, endpoint, opts, |current| {
            let mut obj = current.clone();
            obj["spec"]["finalizers"] = finalizers.clone();
            pin(&mut obj, rv);
            Ok(obj)
        })
        .await
    }
}

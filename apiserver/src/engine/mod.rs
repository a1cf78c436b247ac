//! The generic REST engine: create, read, update, patch and delete for any registered kind,
//! with Kubernetes' metadata rules, optimistic concurrency, finalizers and dry runs.
//! HTTP handlers and the in-server controllers both call it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use apimachinery::JsonPointer;
use apimachinery::schema::Definitions;
use bytes::Bytes;
use meridian_store::{Revision, Storage, StoreError};
use serde_json::{Map, Value, json};

use crate::cache::{Cache, Cached};
use crate::object;
use crate::openapi::OpenApi;
use crate::registry::{Registry, ResourceDef};
use crate::server::Schemas;
use crate::status::{ApiError, Cause};

mod apply;
mod list;
mod managed;
mod patch;
mod stored;
mod subresources;
#[cfg(test)]
mod tests;

pub use apply::Apply;
pub use list::{List, ListOptions, ReadAt, Selectors};
use managed::Endpoint;
pub use managed::FieldManagers;
pub(crate) use managed::options_error;
pub use patch::PatchType;
use stored::{encode, served_text};
pub use subresources::{ScaleChange, scale_of};

/// How long a read waits for the cache to catch up with the store.
const CONSISTENT_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an update without a resourceVersion precondition (a patch, a finalize or a
/// scale update) is retried on a concurrent write. Each lost race means another write
/// landed, so with N writers on one object the last one needs up to N attempts;
/// Kubernetes retries such updates without limit, this bound only stops a pathological
/// storm from holding a request forever.
const CONFLICT_RETRIES: usize = 64;

/// kubectl's `fieldValidation` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields are an error.
    Strict,
    /// Unknown fields are reported as warnings.
    #[default]
    Warn,
    /// Unknown fields are dropped silently.
    Ignore,
}

/// Options common to writes.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: do everything but store.
    pub dry_run: bool,
    /// Unknown-field handling.
    pub field_validation: FieldValidation,
    /// The field manager the write is recorded under in `metadata.managedFields`: the
    /// request's `fieldManager`, else from its User-Agent; empty records `unknown`.
    pub manager: String,
}

impl WriteOptions {
    /// Options of a write recorded under field manager `manager` (an in-server
    /// controller's name, as `kube-controller-manager`).
    pub fn by(manager: &str) -> Self {
        WriteOptions {
            manager: manager.to_string(),
            ..Default::default()
        }
    }
}

/// The subresource a write targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The object itself (status changes ignored where a status subresource exists).
    Main,
    /// `/status`: only status changes.
    Status,
}

/// `DeleteOptions` that matter here.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// The result of a write.
#[derive(Debug)]
pub struct Written {
    /// The object as stored (or as it would be, for dry runs).
    pub obj: Value,
    /// Warnings for the `Warning` header.
    pub warnings: Vec<String>,
    /// `obj` as JSON when the write already has it (the stored bytes with the new
    /// resourceVersion set): answering then does not serialize the object again.
    text: Option<Bytes>,
}

impl Written {
    fn new(obj: Value, warnings: Vec<String>) -> Self {
        Written {
            obj,
            warnings,
            text: None,
        }
    }

    /// The object as JSON, as the write left it: the text kept from the write when there
    /// is one (so a change made to `obj` since is not in it), else `obj` serialized.
    pub fn json(&self) -> Bytes {
        match &self.text {
            Some(text) => text.clone(),
            None => Bytes::from(serde_json::to_vec(&self.obj).unwrap_or_else(|_| b"{}".to_vec())),
        }
    }
}

/// The result of a delete.
#[derive(Debug)]
pub struct Deleted {
    /// The object: deleted, or still present with `deletionTimestamp` set.
    pub obj: Value,
    /// Whether the object is gone now (else finalizers hold it).
    pub gone: bool,
}

/// The engine behind one API server (or one simulated cluster).
pub struct Engine {
    /// Durable storage.
    pub store: Arc<dyn Storage>,
    /// The watch cache, which also holds the registry of the kinds served now.
    pub cache: Arc<Cache>,
    /// Field ownership of each written endpoint.
    pub managers: FieldManagers,
    /// The OpenAPI documents and definitions of the kinds served now: shared with other
    /// engines serving the same kinds until a custom resource makes them differ.
    schemas: RwLock<Schemas>,
}

impl Engine {
    /// An engine over `store` and its loaded `cache`, whose registry `schemas` describe.
    pub fn new(store: Arc<dyn Storage>, cache: Arc<Cache>, schemas: Schemas) -> Self {
        Engine {
            store,
            cache,
            managers: FieldManagers::default(),
            schemas: RwLock::new(schemas),
        }
    }

    /// The kinds served now.
    pub fn registry(&self) -> Arc<Registry> {
        self.cache.registry()
    }

    /// OpenAPI definitions of the kinds served now, for strategic merge patch, field
    /// managers and unknown-field checks.
    pub fn definitions(&self) -> Arc<Definitions> {
        self.schemas.read().expect("schemas").definitions.clone()
    }

    /// The OpenAPI documents of the kinds served now.
    pub fn openapi(&self) -> Arc<OpenApi> {
        self.schemas.read().expect("schemas").openapi.clone()
    }

    /// Serves the compiled-in kinds plus `custom` from now on: the documents are rebuilt
    /// before the cache switches, so a client that discovers a new kind finds its schema.
    pub fn serve_custom(&self, custom: Vec<Arc<ResourceDef>>) {
        let registry = Arc::new(self.registry().with_custom(custom));
        let schemas = Schemas::build(&registry);
        *self.schemas.write().expect("schemas") = schemas;
        // A custom kind's schema may have changed: its field managers are rebuilt.
        self.managers.forget_custom();
        self.cache.set_registry(registry);
    }
}

fn store_error(def: &ResourceDef, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::AlreadyExists { .. } => ApiError::already_exists(def.plural, def.group, name),
        StoreError::NotFound { .. } => ApiError::not_found(def.plural, def.group, name),
        StoreError::Conflict { .. } => ApiError::stale(def.plural, def.group, name),
        other => {
            tracing::error!(error = %other, "storage failure");
            ApiError::internal(format!("storage failure: {other}"))
        }
    }
}

/// Five random characters from Kubernetes' `generateName` alphabet.
/// A cached object as `def` serves it (its stored apiVersion may be another version's).
fn served(def: &ResourceDef, c: &Cached) -> Value {
    let mut v = c.value();
    crate::convert::to_served(def, &mut v);
    v
}

fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Whether the two objects differ outside metadata and status (and apiVersion/kind): what
/// `generation` tracks. Compared in place: objects are large and written often.
fn spec_differs(a: &Value, b: &Value) -> bool {
    const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a != b;
    };
    let spec = |m: &'_ serde_json::Map<String, Value>| {
        m.iter()
            .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
            .count()
    };
    spec(a) != spec(b)
        || a.iter()
            .filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
            .any(|(k, v)| b.get(k) != Some(v))
}

/// Sets the annotations that hold status in `def`'s served form
/// ([`crate::registry::Conversion::status_annotations`]) on `to` as `from` has them
/// (removed where it has none): a write keeps them with the status it keeps.
fn carry_status_annotations(def: &ResourceDef, from: &Value, to: &mut Value) {
    let keys = def
        .conversion
        .as_ref()
        .map_or(&[][..], |c| c.status_annotations);
    if keys.is_empty() {
        return;
    }
    let source = object::meta(from)
        .get("annotations")
        .and_then(Value::as_object);
    let meta = object::meta_mut(to);
    let mut annotations = match meta.remove("annotations") {
        Some(Value::Object(a)) => a,
        _ => Map::new(),
    };
    for k in keys {
        match source.and_then(|s| s.get(*k)) {
            Some(v) => annotations.insert((*k).to_string(), v.clone()),
            None => annotations.remove(*k),
        };
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
}

/// The endpoint a write of `target` is recorded under.
fn endpoint_of(target: Target) -> Endpoint {
    match target {
        Target::Main => Endpoint::Main,
        Target::Status => Endpoint::Status,
    }
}

fn parse_rv(s: &str) -> Result<Revision, ApiError> {
    s.parse::<Revision>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resourceVersion \"{s}\": must be an integer"
        ))
    })
}

impl Engine {
    /// Waits until the cache reflects every write acknowledged so far.
    pub async fn sync(&self) -> Result<(), ApiError> {
        let rev = self.store.current_revision();
        if self.cache.wait_for(rev, CONSISTENT_READ_TIMEOUT).await {
            Ok(())
        } else {
            Err(ApiError::timeout(
                "the watch cache did not catch up with storage in time",
            ))
        }
    }

    /// The current object at `key`, consistent with every acknowledged write.
    pub async fn current(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<Cached>, ApiError> {
        self.sync().await?;
        self.cache
            .resource(def)
            .get(&def.key(namespace, name))
            .ok_or_else(|| ApiError::not_found(def.plural, def.group, name))
    }

    /// One object, read as `read_at` asks: from the cache as it is for [`ReadAt::Any`],
    /// else consistent with every acknowledged write.
    pub async fn get(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        read_at: ReadAt,
    ) -> Result<Arc<Cached>, ApiError> {
        match read_at {
            ReadAt::Any => self
                .cache
                .resource(def)
                .get(&def.key(namespace, name))
                .ok_or_else(|| ApiError::not_found(def.plural, def.group, name)),
            _ => self.current(def, namespace, name).await,
        }
    }

    fn check_kind(&self, def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let want = def.api_version();
        match obj.get("apiVersion").and_then(Value::as_str) {
            None | Some("") => obj["apiVersion"] = Value::from(want.clone()),
            Some(v) if v == want => {}
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({v}) does not match the expected API version ({want})"
                )));
            }
        }
        match obj.get("kind").and_then(Value::as_str) {
            None | Some("") => obj["kind"] = Value::from(def.kind),
            Some(k) if k == def.kind => {}
            Some(k) => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    def.kind
                )));
            }
        }
        Ok(())
    }

    /// Unknown-field and type checks; returns warnings (Warn) or fails (Strict).
    fn check_fields(
        &self,
        def: &ResourceDef,
        obj: &Value,
        mode: FieldValidation,
    ) -> Result<Vec<String>, ApiError> {
        let mut warnings = Vec::new();
        if mode != FieldValidation::Ignore && !def.definition.is_empty() {
            let unknown = apimachinery::schema_check::unknown_fields(
                obj,
                &self.definitions(),
                def.definition,
            );
            if !unknown.is_empty() {
                let msgs: Vec<String> = unknown
                    .iter()
                    .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
                    .collect();
                if mode == FieldValidation::Strict {
                    let causes = unknown
                        .iter()
                        .map(|p| Cause {
                            reason: "FieldValueInvalid".into(),
                            message: format!("unknown field \"{}\"", p.trim_start_matches('.')),
                            field: p.trim_start_matches('.').to_string(),
                        })
                        .collect();
                    return Err(ApiError::bad_request_fields(
                        format!("strict decoding error: {}", msgs.join(", ")),
                        causes,
                    ));
                }
                warnings = msgs;
            }
        }
        def.hooks
            .check_types(obj)
            .map_err(|e| ApiError::bad_request(format!("{} in body is invalid: {e}", def.kind)))?;
        Ok(warnings)
    }

    fn validate(
        &self,
        def: &ResourceDef,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let causes = def.hooks.validate(obj, old);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                def.kind,
                def.group,
                object::name(obj),
                causes,
            ))
        }
    }

    async fn check_namespace(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if !def.namespaced {
            return Ok(());
        }
        let Some(ns_def) = self.registry().lookup("", "v1", "namespaces").cloned() else {
            return Ok(());
        };
        let key = ns_def.key("", ns);
        let nsobj = match self.cache.resource(&ns_def).get(&key) {
            Some(n) => n,
            None => {
                // Not seen yet: the namespace may have been created a moment ago.
                self.sync().await?;
                self.cache
                    .resource(&ns_def)
                    .get(&key)
                    .ok_or_else(|| ApiError::not_found("namespaces", "", ns))?
            }
        };
        if nsobj.deleting {
            return Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                def.qualified()
            )));
        }
        Ok(())
    }

    /// Creates an object in `namespace` (empty for cluster-scoped kinds).
    pub async fn create(
        &self,
        def: &ResourceDef,
        namespace: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        self.create_recorded(def, namespace, obj, opts, false).await
    }

    /// Creates an object; `recorded`: its `managedFields` are already the write's (an
    /// apply that creates), else the create is recorded for `opts.manager`.
    async fn create_recorded(
        &self,
        def: &ResourceDef,
        namespace: &str,
        mut obj: Value,
        opts: &WriteOptions,
        recorded: bool,
    ) -> Result<Written, ApiError> {
        self.check_kind(def, &mut obj)?;
        let warnings = self.check_fields(def, &obj, opts.field_validation)?;
        {
            let meta = object::meta_mut(&mut obj);
            if def.namespaced {
                match meta.get("namespace").and_then(Value::as_str) {
                    None | Some("") => {
                        meta.insert("namespace".into(), Value::from(namespace));
                    }
                    Some(ns) if ns == namespace => {}
                    Some(_) => {
                        return Err(ApiError::bad_request(
                            "the namespace of the provided object does not match the namespace sent on the request",
                        ));
                    }
                }
            } else {
                meta.remove("namespace");
            }
            let name = meta.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty()
                && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
                && !prefix.is_empty()
            {
                let generated = format!("{prefix}{}", random_suffix());
                meta.insert("name".into(), Value::from(generated));
            }
            meta.insert("uid".into(), Value::from(uuid::Uuid::new_v4().to_string()));
            meta.insert("creationTimestamp".into(), Value::from(object::now()));
            for f in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                meta.remove(f);
            }
            if def.tracks_generation {
                meta.insert("generation".into(), Value::from(1));
            } else {
                meta.remove("generation");
            }
        }
        if def.status_subresource
            && !def.status_on_create
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        def.hooks.prepare_create(&mut obj);
        def.hooks.default(&mut obj);
        if !recorded {
            // The client's `managedFields` are still in `obj`: the manager reads them.
            let fm = self.managers.get(def, &self.definitions(), Endpoint::Main);
            fm.update(None, &mut obj, &opts.manager, jiff::Timestamp::now());
        }
        def.hooks.admit_create(&mut obj);
        self.validate(def, &obj, None)?;
        let name = object::name(&obj).to_string();
        self.check_namespace(def, namespace, &name).await?;
        if opts.dry_run {
            if self
                .cache
                .resource(def)
                .get(&def.key(namespace, &name))
                .is_some()
            {
                return Err(ApiError::already_exists(def.plural, def.group, &name));
            }
            return Ok(Written::new(obj, warnings));
        }
        let stored = encode(def, &obj)?;
        let kv = self
            .store
            .create(&def.key(namespace, &name), stored.clone())
            .await
            .map_err(|e| store_error(def, &name, e))?;
        object::set_resource_version(&mut obj, kv.mod_revision);
        Ok(Written {
            obj,
            warnings,
            text: served_text(def, &stored, kv.mod_revision),
        })
    }

    /// Builds the object an update would store from the current one and the request body.
    fn merge_update(
        &self,
        def: &ResourceDef,
        target: Target,
        old: &Value,
        mut new: Value,
    ) -> Result<Value, ApiError> {
        self.check_kind(def, &mut new)?;
        if object::name(&new) != object::name(old) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({})",
                object::name(&new),
                object::name(old)
            )));
        }
        if def.namespaced {
            let ns = object::namespace(&new);
            if !ns.is_empty() && ns != object::namespace(old) {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let mut out = match target {
            Target::Status => {
                // Only status changes through /status: everything else is the stored
                // object's (its old status, often the bulk of it, is not copied).
                let mut out: Map<String, Value> = old
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| *k != "status")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if let Some(status) = new.as_object_mut().and_then(|m| m.remove("status"))
                    && !status.is_null()
                {
                    out.insert("status".into(), status);
                }
                // The written entries: an apply's, already computed; an update's are
                // ignored by the status field manager, which reads the stored ones.
                let mut out = Value::Object(out);
                if let Some(mf) = object::meta_mut(&mut new).remove("managedFields") {
                    object::meta_mut(&mut out).insert("managedFields".into(), mf);
                }
                carry_status_annotations(def, &new, &mut out);
                return Ok(out);
            }
            Target::Main => {
                if def.status_subresource {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                    carry_status_annotations(def, old, &mut new);
                }
                new
            }
        };
        let old_meta = object::meta(old).clone();
        let meta = object::meta_mut(&mut out);
        // System fields come from the stored object, never from the client.
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ] {
            match old_meta.get(f) {
                Some(v) => meta.insert(f.into(), v.clone()),
                None => meta.remove(f),
            };
        }
        // `managedFields` stay as the client sent them: the field manager reads them when
        // the write is recorded (`commit_update`), and replaces them.
        meta.remove("selfLink");
        // A deleting object may lose finalizers but not gain them.
        if old_meta.contains_key("deletionTimestamp") {
            let old_f: Vec<Value> = old_meta
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if let Some(nf) = meta.get("finalizers").and_then(Value::as_array)
                && nf.iter().any(|f| !old_f.contains(f))
            {
                return Err(ApiError::invalid(
                    def.kind,
                    def.group,
                    object::name(old),
                    vec![crate::kinds::validate::forbidden(
                        "metadata.finalizers",
                        "no new finalizers can be added if the object is being deleted",
                    )],
                ));
            }
        }
        Ok(out)
    }

    /// Stores `new` over `old` (rules applied), or deletes it when its last finalizer went.
    /// The write is recorded in `managedFields` for `opts.manager` through `endpoint`,
    /// unless `endpoint` is `None` (an apply, which recorded itself).
    #[allow(clippy::too_many_arguments)]
    async fn commit_update(
        &self,
        def: &ResourceDef,
        old: &Cached,
        old_value: &Value,
        mut new: Value,
        target: Target,
        endpoint: Option<Endpoint>,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if target == Target::Main {
            def.hooks.default(&mut new);
        }
        if let Some(endpoint) = endpoint {
            let fm = self.managers.get(def, &self.definitions(), endpoint);
            fm.update(
                Some(old_value),
                &mut new,
                &opts.manager,
                jiff::Timestamp::now(),
            );
        }
        self.validate(def, &new, Some(old_value))?;
        if def.tracks_generation && spec_differs(&new, old_value) {
            let g = object::meta(old_value)
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            object::meta_mut(&mut new).insert("generation".into(), Value::from(g + 1));
        }
        object::set_resource_version(&mut new, old.rv);
        // `old_value` is the cached version, which carries its resourceVersion (`to_cached`).
        if new == *old_value {
            // A no-op write leaves the resourceVersion alone, as Kubernetes does.
            return Ok(Written::new(new, Vec::new()));
        }
        if opts.dry_run {
            return Ok(Written::new(new, Vec::new()));
        }
        if object::is_deleting(&new)
            && object::finalizers(&new).is_empty()
            && !self.held_by_spec(&new)
        {
            let res = self
                .store
                .delete(&old.key, Some(old.rv))
                .await
                .map_err(|e| store_error(def, old.name(), e))?;
            object::set_resource_version(&mut new, res.revision);
            return Ok(Written::new(new, Vec::new()));
        }
        let stored = encode(def, &new)?;
        let kv = self
            .store
            .update(&old.key, stored.clone(), old.rv)
            .await
            .map_err(|e| store_error(def, old.name(), e))?;
        object::set_resource_version(&mut new, kv.mod_revision);
        Ok(Written {
            text: served_text(def, &stored, kv.mod_revision),
            obj: new,
            warnings: Vec::new(),
        })
    }

    /// Namespaces are held by `spec.finalizers` as well as metadata finalizers.
    fn held_by_spec(&self, obj: &Value) -> bool {
        obj.get("kind").and_then(Value::as_str) == Some("Namespace")
            && obj
                .at("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
    }

    /// Replaces an object (PUT). Without a resourceVersion it replaces the current object
    /// where Kubernetes allows that ([`allows_unconditional_update`]), else 422.
    pub async fn update(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        body: Value,
        target: Target,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if object::meta_str(&body, "resourceVersion").is_none_or(str::is_empty)
            && allows_unconditional_update(def)
        {
            // kube-apiserver replaces whatever is current (Helm records its releases so),
            // retried against concurrent writers as a patch is.
            let endpoint = Some(endpoint_of(target));
            return self
                .update_with(def, namespace, name, target, endpoint, opts, |_| {
                    Ok(body.clone())
                })
                .await;
        }
        let warnings = self.check_fields(def, &body, opts.field_validation)?;
        let old = self.current(def, namespace, name).await?;
        let rv = match object::meta_str(&body, "resourceVersion") {
            None | Some("") => {
                return Err(ApiError::invalid(
                    def.kind,
                    def.group,
                    name,
                    vec![crate::kinds::validate::invalid(
                        "metadata.resourceVersion",
                        &Value::from(0),
                        "must be specified for an update",
                    )],
                ));
            }
            Some(s) => parse_rv(s)?,
        };
        if rv != old.rv {
            return Err(ApiError::stale(def.plural, def.group, name));
        }
        let old_value = served(def, &old);
        let new = self.merge_update(def, target, &old_value, body)?;
        let endpoint = Some(endpoint_of(target));
        let mut written = self
            .commit_update(def, &old, &old_value, new, target, endpoint, opts)
            .await?;
        written.warnings = warnings;
        Ok(written)
    }

    /// Applies a patch, re-applying it to the newer object when a concurrent write wins.
    #[allow(clippy::too_many_arguments)]
    pub async fn patch(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        target: Target,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let endpoint = Some(endpoint_of(target));
        self.update_with(def, namespace, name, target, endpoint, opts, |old| {
            self.apply_patch(def, old, patch_type, patch)
        })
        .await
    }

    /// Stores what `build` makes of the current object, as kube-apiserver's guaranteed
    /// updates do. What `build` returns may pin a resourceVersion (a client's precondition):
    /// another than the current object's is a conflict (409). Without one, a concurrent
    /// write that wins makes the engine read the newer object and build again, without a
    /// limit in Kubernetes and [`CONFLICT_RETRIES`] times here. The write is recorded
    /// as [`Engine::commit_update`] says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn update_with(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        target: Target,
        endpoint: Option<Endpoint>,
        opts: &WriteOptions,
        mut build: impl FnMut(&Value) -> Result<Value, ApiError>,
    ) -> Result<Written, ApiError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let old = self.current(def, namespace, name).await?;
            let old_value = served(def, &old);
            let built = build(&old_value)?;
            let warnings = self.check_fields(def, &built, opts.field_validation)?;
            let pinned = object::meta_str(&built, "resourceVersion")
                .filter(|s| !s.is_empty())
                .map(parse_rv)
                .transpose()?;
            if let Some(rv) = pinned
                && rv != old.rv
            {
                return Err(ApiError::stale(def.plural, def.group, name));
            }
            let new = self.merge_update(def, target, &old_value, built)?;
            match self
                .commit_update(def, &old, &old_value, new, target, endpoint, opts)
                .await
            {
                // Lost a race with another write: build again from the newer object. A
                // pin is checked again there, so a pinned write then fails as stale
                // instead of landing on a version it did not name.
                Err(e) if e.code == 409 && attempt < CONFLICT_RETRIES => continue,
                Err(e) => return Err(e),
                Ok(mut written) => {
                    written.warnings = warnings;
                    return Ok(written);
                }
            }
        }
    }

    /// Deletes an object, honouring finalizers, preconditions and propagation.
    pub async fn delete(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        // Admission, as kube-apiserver's NamespaceLifecycle: before the object is read.
        if def.is_namespace()
            && let Some(refusal) = crate::system_namespaces::refuse_delete(name)
        {
            return Err(refusal);
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let old = self.current(def, namespace, name).await?;
            let mut obj = served(def, &old);
            if let Some(uid) = &opts.uid
                && **uid != *old.uid
            {
                return Err(ApiError::conflict(
                    def.plural,
                    def.group,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        old.uid
                    ),
                ));
            }
            if let Some(rv) = &opts.resource_version
                && parse_rv(rv)? != old.rv
            {
                return Err(ApiError::conflict(
                    def.plural,
                    def.group,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        old.rv
                    ),
                ));
            }
            let mut finalizers = object::finalizers(&obj);
            let extra = match opts.propagation.as_deref() {
                Some("Orphan") => Some("orphan"),
                Some("Foreground") => Some("foregroundDeletion"),
                Some("Background") | None => None,
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "unsupported propagationPolicy \"{other}\": must be Orphan, Background or Foreground"
                    )));
                }
            };
            let has_dependents = self
                .cache
                .owners
                .lock()
                .expect("owner index")
                .dependents
                .contains_key(&*old.uid);
            if let Some(f) = extra
                && has_dependents
                && !finalizers.iter().any(|x| x == f)
            {
                finalizers.push(f.to_string());
            }
            let is_namespace = def.is_namespace();
            let held = !finalizers.is_empty() || is_namespace;
            if held {
                if object::is_deleting(&obj) && finalizers == object::finalizers(&obj) {
                    // Already being deleted: nothing more to do.
                    return Ok(Deleted { obj, gone: false });
                }
                let meta = object::meta_mut(&mut obj);
                if !meta.contains_key("deletionTimestamp") {
                    meta.insert("deletionTimestamp".into(), Value::from(object::now()));
                    meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
                }
                if !finalizers.is_empty() {
                    meta.insert("finalizers".into(), json!(finalizers));
                }
                if is_namespace {
                    obj["status"] = json!({"phase": "Terminating"});
                }
                if opts.dry_run {
                    return Ok(Deleted { obj, gone: false });
                }
                match self
                    .store
                    .update(&old.key, encode(def, &obj)?, old.rv)
                    .await
                {
                    Ok(kv) => {
                        object::set_resource_version(&mut obj, kv.mod_revision);
                        if is_namespace {
                            self.cache.signal_namespace(name);
                        }
                        return Ok(Deleted { obj, gone: false });
                    }
                    Err(StoreError::Conflict { .. }) if attempt < CONFLICT_RETRIES => continue,
                    Err(e) => return Err(store_error(def, name, e)),
                }
            }
            if opts.dry_run {
                return Ok(Deleted { obj, gone: true });
            }
            match self.store.delete(&old.key, Some(old.rv)).await {
                Ok(res) => {
                    object::set_resource_version(&mut obj, res.revision);
                    return Ok(Deleted { obj, gone: true });
                }
                Err(StoreError::Conflict { .. }) if attempt < CONFLICT_RETRIES => continue,
                Err(e) => return Err(store_error(def, name, e)),
            }
        }
    }
}

/// Whether a PUT without `metadata.resourceVersion` replaces the current object, as
/// kube-apiserver's `AllowUnconditionalUpdate` says: yes for built-in kinds, no for Leases
/// (a lock must name the version it took over) and for kinds with their own schema (custom
/// resources, as apiextensions-apiserver's strategy says).
fn allows_unconditional_update(def: &ResourceDef) -> bool {
    !(def.group == "coordination.k8s.io" && def.kind == "Lease")
        && def.schema.is_none()
        && def.custom.is_none()
}

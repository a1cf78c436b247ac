//! The entry point an API server calls on every write of one endpoint: [`FieldManager`].

use serde_json::{Map, Value};

use super::conflict::Conflicts;
use super::entries::{self, ManagedEntry, ManagedFieldsError};
use super::last_applied::{self, KUBECTL_MANAGER};
use super::model::ObjectType;
use super::raw::Trie;
use super::typed::{self, TypeError};
use super::updater::{self, Applying, ResetFields, Scope};

/// The manager the fields an object had before its first apply are recorded under.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";
/// The manager recorded for a write whose manager name is empty.
const UNKNOWN_MANAGER: &str = "unknown";

/// Field ownership for one endpoint: a kind at one version, its main resource or one
/// subresource. Build it once per endpoint; it holds the kind's compiled type.
#[derive(Debug, Clone)]
pub struct FieldManager {
    ty: ObjectType,
    api_version: String,
    kind: String,
    subresource: String,
    reset: ResetFields,
}

/// The outcome of an apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The object to store, `metadata.managedFields` included.
    pub object: Value,
    /// Whether anything besides `metadata.managedFields` differs from the live object.
    pub changed: bool,
}

/// Why an apply was refused. Nothing is written when one is returned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApplyError {
    /// The configuration is not a JSON object (400).
    #[error("apply configuration must be a JSON object")]
    NotAnObject,
    /// The configuration's `apiVersion` and `kind` are not the endpoint's (400). Holds
    /// them as upstream prints them: `apps/v1, Kind=Deployment`, `/v1, Kind=Pod`.
    #[error("invalid object type: {0}")]
    WrongKind(String),
    /// The configuration sets `metadata.managedFields` (400).
    #[error("metadata.managedFields must be nil")]
    ManagedFieldsInConfig,
    /// The configuration does not fit the kind's schema: a value of the wrong kind, a
    /// list item without its keys, a key used twice (422, with the path as the field).
    #[error("{}: {}", .0.path, .0.message)]
    Invalid(TypeError),
    /// The live object's `metadata.managedFields` cannot be read (500).
    #[error("failed to decode managed fields: {0}")]
    ManagedFields(#[from] ManagedFieldsError),
    /// Fields owned by other managers would change (409, reason `Conflict`, a
    /// `FieldManagerConflict` cause per field; [`Conflicts`] renders the message).
    #[error("{0}")]
    Conflicts(Conflicts),
}

impl FieldManager {
    /// The manager of a kind's main resource, written at `api_version` (`apps/v1`), with
    /// nothing reset. Set reset fields with [`FieldManager::with_reset_fields`].
    pub fn new(ty: ObjectType, api_version: &str, kind: &str) -> Self {
        FieldManager {
            ty,
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            subresource: String::new(),
            reset: ResetFields::None,
        }
    }

    /// The same kind written through subresource `name` (`status`, `scale`): entries are
    /// recorded per subresource, and written `managedFields` are ignored there.
    pub fn for_subresource(&self, name: &str, reset: ResetFields) -> Self {
        FieldManager {
            subresource: name.to_string(),
            reset,
            ..self.clone()
        }
    }

    /// The fields this endpoint's strategy resets, which its writers never own.
    pub fn with_reset_fields(mut self, reset: ResetFields) -> Self {
        self.reset = reset;
        self
    }

    /// The kind's compiled type.
    pub fn object_type(&self) -> &ObjectType {
        &self.ty
    }

    fn scope(&self) -> Scope<'_> {
        Scope {
            ty: &self.ty,
            api_version: &self.api_version,
            subresource: &self.subresource,
            reset: &self.reset,
        }
    }

    /// Records a create (`live` is `None`), update or non-apply patch by `manager` in
    /// `new.metadata.managedFields`.
    ///
    /// `new` is the object about to be stored, its `metadata.managedFields` still as the
    /// client sent it: absent (or a list that cannot be read) keeps the live entries, `[]`
    /// or `[{}]` clears them, a readable non-empty list replaces them (on the main
    /// resource only). An object without entries stays untracked by updates until its
    /// first apply; a created one is always tracked. This never fails: a write is never
    /// refused over its bookkeeping.
    pub fn update(
        &self,
        live: Option<&Value>,
        new: &mut Value,
        manager: &str,
        now: jiff::Timestamp,
    ) {
        let Some(meta) = metadata_mut(new) else {
            return;
        };
        let requested = meta.remove("managedFields");
        let stored = live.and_then(managed_fields);
        // Clients that read, change and write back send the stored entries unchanged:
        // those are taken over rather than copied.
        let sent_back = requested.is_some() && requested.as_ref() == stored;
        let from_live = |sent: Option<Value>| {
            let stored = if sent_back { sent } else { stored.cloned() };
            entries::read(stored, true).unwrap_or_default()
        };
        let mut entries = if !self.subresource.is_empty() || sent_back {
            from_live(requested)
        } else if entries::is_reset(requested.as_ref()) {
            Vec::new()
        } else {
            match entries::read(requested, false) {
                Ok(e) if !e.is_empty() => e,
                _ => from_live(None),
            }
        };
        if entries.is_empty() && live.is_some() {
            return;
        }
        let manager = if manager.is_empty() {
            UNKNOWN_MANAGER
        } else {
            manager
        };
        updater::update(&self.scope(), live, new, &mut entries, manager, now);
        set_managed_fields(new, entries);
    }

    /// Applies `config` for `manager` to `live` (`None`: the object does not exist yet and
    /// the apply creates it). `force` takes conflicting fields from their owners.
    ///
    /// Fields the manager applied before and leaves out now are removed unless another
    /// manager owns them. An object without entries first records its fields under
    /// `before-first-apply`. For the `kubectl` manager, conflicts over fields its
    /// `last-applied-configuration` annotation describes are taken without `force`, and
    /// an existing annotation is rewritten from `config`.
    pub fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        manager: &str,
        force: bool,
        now: jiff::Timestamp,
    ) -> Result<Applied, ApplyError> {
        let fields = self.check_config(config)?;
        let empty = Value::Object(Map::new());
        let live = live.unwrap_or(&empty);
        let scope = self.scope();
        let merge = || {
            let mut merged = typed::merge(&self.ty.model, self.ty.root, Some(live), Some(config))
                .unwrap_or_else(|| Value::Object(Map::new()));
            // The merge copied the live entries: take them over rather than copy again.
            let stored = metadata_mut(&mut merged).and_then(|m| m.remove("managedFields"));
            (merged, stored)
        };
        let (merged, stored) = merge();
        let mut entries = entries::read(stored, true)?;
        if entries.is_empty() {
            updater::update(&scope, None, live, &mut entries, BEFORE_FIRST_APPLY, now);
        }
        let applying = |fields, merged| Applying {
            config,
            fields,
            merged,
        };
        let mut result = updater::apply(
            &scope,
            live,
            applying(fields, merged),
            &mut entries,
            manager,
            force,
            now,
        );
        if manager == KUBECTL_MANAGER
            && let Err(conflicts) = &result
            && let Some(allowed) =
                last_applied::allowed_conflicts(&self.ty, &self.api_version, live)
        {
            let remaining = conflicts.without(&allowed);
            result = if remaining.0.is_empty() {
                let (merged, _) = merge();
                let applying = applying(self.check_config(config)?, merged);
                updater::apply(&scope, live, applying, &mut entries, manager, true, now)
            } else {
                Err(remaining)
            };
        }
        let merged = result.map_err(ApplyError::Conflicts)?;
        let mut changed = merged.changed;
        let mut object = merged.object;
        if manager == KUBECTL_MANAGER {
            let before = annotation(&object);
            last_applied::sync(&mut object, config);
            changed |= annotation(&object) != before;
        }
        set_managed_fields(&mut object, entries);
        Ok(Applied { object, changed })
    }

    /// The checks upstream makes before merging: the endpoint's kind and version, no
    /// `managedFields`, and a configuration that fits the schema. Returns the fields the
    /// configuration sets.
    fn check_config(&self, config: &Value) -> Result<Trie, ApplyError> {
        let Value::Object(m) = config else {
            return Err(ApplyError::NotAnObject);
        };
        let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        if api_version != self.api_version || kind != self.kind {
            let gv = if api_version.contains('/') {
                api_version.to_string()
            } else {
                format!("/{api_version}")
            };
            return Err(ApplyError::WrongKind(format!("{gv}, Kind={kind}")));
        }
        if matches!(managed_fields(config), Some(Value::Array(_))) {
            return Err(ApplyError::ManagedFieldsInConfig);
        }
        typed::applied_fields(&self.ty.model, self.ty.root, config).map_err(ApplyError::Invalid)
    }
}

/// Reads an object's `metadata.managedFields` entries.
pub fn managed_entries(obj: &Value) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    entries::decode(managed_fields(obj))
}

fn managed_fields(obj: &Value) -> Option<&Value> {
    obj.get("metadata")?.get("managedFields")
}

fn metadata_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let m = obj.as_object_mut()?;
    m.entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

fn annotation(obj: &Value) -> Option<Value> {
    obj.get("metadata")?
        .get("annotations")?
        .get(last_applied::LAST_APPLIED_ANNOTATION)
        .cloned()
}

fn set_managed_fields(obj: &mut Value, entries: Vec<entries::Entry>) {
    let encoded = entries::write(entries);
    let Some(meta) = metadata_mut(obj) else {
        return;
    };
    match encoded {
        Some(v) => {
            meta.insert("managedFields".into(), v);
        }
        None => {
            meta.remove("managedFields");
        }
    }
}

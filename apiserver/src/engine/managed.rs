//! Field ownership on every write: one [`FieldManager`] per served endpoint, compiled on
//! first use from the kind's schema and kept, and the mapping of apply errors to `Status`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use apimachinery::managed::{ApplyError, FieldManager, ObjectType, ResetFields};
use apimachinery::schema::Definitions;
use apimachinery::validation::FieldError;

use crate::registry::ResourceDef;
use crate::status::{ApiError, Cause};

/// The endpoint a write goes through, as ownership records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Endpoint {
    /// The object itself.
    Main,
    /// `/status`.
    Status,
    /// `/scale`: the parent object's `spec.replicas`.
    Scale,
    /// `/finalize` of a Namespace: its `spec.finalizers`.
    Finalize,
}

/// The field managers of one engine, built lazily: compiling a kind's type walks its
/// whole schema, which only kinds that are written need.
#[derive(Default)]
pub struct FieldManagers {
    built: Mutex<HashMap<(String, Endpoint), Arc<FieldManager>>>,
}

impl std::fmt::Debug for FieldManagers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FieldManagers")
    }
}

impl FieldManagers {
    /// Drops every built manager: the next write of each kind compiles its (possibly
    /// changed) schema again. Called when custom resources' schemas change, which is rare.
    pub(crate) fn forget_custom(&self) {
        self.built.lock().expect("field managers").clear();
    }

    /// The manager of `def` written through `endpoint`.
    pub(crate) fn get(
        &self,
        def: &ResourceDef,
        defs: &Definitions,
        endpoint: Endpoint,
    ) -> Arc<FieldManager> {
        // By version too: a custom kind's versions share a storage prefix, but each records
        // and checks its own apiVersion.
        let key = (format!("{}{}", def.prefix(), def.version), endpoint);
        let mut built = self.built.lock().expect("field managers");
        if let Some(m) = built.get(&key) {
            return m.clone();
        }
        let main = built
            .entry((key.0.clone(), Endpoint::Main))
            .or_insert_with(|| Arc::new(main_manager(def, defs)))
            .clone();
        let m = match endpoint {
            Endpoint::Main => main,
            // The engine keeps only `status` from a /status write.
            Endpoint::Status => {
                Arc::new(main.for_subresource("status", ResetFields::all_but(&["status"])))
            }
            Endpoint::Scale => {
                let field = super::subresources::scale_field(def);
                Arc::new(main.for_subresource("scale", ResetFields::all_but(&[field.as_str()])))
            }
            Endpoint::Finalize => Arc::new(
                main.for_subresource("finalize", ResetFields::all_but(&["spec.finalizers"])),
            ),
        };
        built.insert(key, m.clone());
        m
    }
}

/// The main resource's manager: typed from the kind's OpenAPI definition where it has
/// one, deduced from the objects otherwise; `status` reset where a status subresource
/// owns it.
fn main_manager(def: &ResourceDef, defs: &Definitions) -> FieldManager {
    let ty = if def.definition.is_empty() {
        ObjectType::deduced()
    } else {
        ObjectType::from_definitions(defs, def.definition).unwrap_or_else(|e| {
            // A schema that does not compile still lets the kind be written: its fields
            // are then tracked without list or map semantics.
            tracing::warn!(kind = def.kind, error = %e, "field manager: schema does not compile; deducing types");
            ObjectType::deduced()
        })
    };
    let fm = FieldManager::new(ty, &def.api_version(), def.kind);
    if def.status_subresource {
        fm.with_reset_fields(ResetFields::paths(&["status"]))
    } else {
        fm
    }
}

/// The `Status` of an apply refused by the field manager.
pub(crate) fn apply_error(def: &ResourceDef, name: &str, e: ApplyError) -> ApiError {
    match e {
        ApplyError::NotAnObject | ApplyError::WrongKind(_) | ApplyError::ManagedFieldsInConfig => {
            ApiError::bad_request(e.to_string())
        }
        ApplyError::Invalid(t) => ApiError::invalid(
            def.kind,
            def.group,
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: t.message.clone(),
                field: t.path.to_string(),
            }],
        ),
        ApplyError::ManagedFields(m) => {
            ApiError::internal(format!("failed to decode managed fields: {m}"))
        }
        ApplyError::Conflicts(c) => {
            // Upstream's apply conflict: no kind or name in the details, a cause per field.
            let causes = c
                .causes()
                .into_iter()
                .map(|c| Cause {
                    reason: "FieldManagerConflict".into(),
                    message: c.message,
                    field: c.field,
                })
                .collect();
            ApiError::conflict_causes(c.to_string(), causes)
        }
    }
}

/// The 422 of bad patch or write options (`PatchOptions`/`CreateOptions` of `meta.k8s.io`).
pub(crate) fn options_error(kind: &str, errs: Vec<FieldError>) -> Option<ApiError> {
    if errs.is_empty() {
        return None;
    }
    let causes = errs
        .into_iter()
        .map(|e| {
            let full = e.to_string();
            let message = full
                .strip_prefix(&format!("{}: ", e.path))
                .unwrap_or(&full)
                .to_string();
            Cause {
                reason: cause_reason(&e),
                message,
                field: e.path,
            }
        })
        .collect();
    Some(ApiError::invalid(kind, "meta.k8s.io", "", causes))
}

fn cause_reason(e: &FieldError) -> String {
    use apimachinery::validation::FieldErrorKind as K;
    match e.kind {
        K::Required => "FieldValueRequired",
        K::Invalid => "FieldValueInvalid",
        K::NotSupported => "FieldValueNotSupported",
        K::TooLong => "FieldValueTooLong",
        K::Duplicate => "FieldValueDuplicate",
        K::Forbidden => "FieldValueForbidden",
    }
    .into()
}

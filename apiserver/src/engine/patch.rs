//! The patch types the engine applies to an object: JSON merge (RFC 7396), JSON patch
//! (RFC 6902) and strategic merge patch.

use serde_json::Value;

use super::Engine;
use crate::registry::ResourceDef;
use crate::status::ApiError;

/// A patch body and its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
}

impl Engine {
    /// The object `patch` makes of `old`.
    pub(super) fn apply_patch(
        &self,
        def: &ResourceDef,
        old: &Value,
        patch_type: PatchType,
        patch: &Value,
    ) -> Result<Value, ApiError> {
        // The stored copy carries its resourceVersion; a patch may pin a different one.
        // Each kind of patch copies `old` once.
        match patch_type {
            PatchType::Merge => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                let mut base = old.clone();
                apimachinery::patch::merge_patch(&mut base, patch);
                Ok(base)
            }
            PatchType::Json => apimachinery::patch::json_patch(old, patch).map_err(|e| {
                ApiError::bad_request(format!("the JSON patch could not be applied: {e}"))
            }),
            PatchType::Strategic => {
                if def.definition.is_empty() {
                    return Err(ApiError::unsupported_media_type(format!(
                        "strategic merge patch is not supported for {}; use a merge patch (--type merge) or a JSON patch",
                        def.qualified()
                    )));
                }
                if !patch.is_object() {
                    return Err(ApiError::bad_request(
                        "a strategic merge patch must be a JSON object",
                    ));
                }
                apimachinery::patch::strategic_merge_patch(
                    old,
                    patch,
                    &self.definitions(),
                    def.definition,
                )
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "the strategic merge patch could not be applied: {e}"
                    ))
                })
            }
        }
    }
}

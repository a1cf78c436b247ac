//! The three Kubernetes patch types: JSON merge, JSON patch and strategic merge.

mod json;
mod merge;
mod strategic;
#[cfg(test)]
mod strategic_tests;

pub use json::json_patch;
pub use merge::{merge_patch, merge_patch_diff};
pub use strategic::strategic_merge_patch;

/// Errors from applying a patch. Nothing is modified when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A JSON patch document was not an array of operations.
    #[error("json patch must be an array of operations")]
    JsonPatchNotArray,
    /// One JSON patch operation failed (or is malformed); `index` is zero-based.
    #[error("json patch operation {index} ({op}) at {path:?} failed: {reason}")]
    JsonPatchOp {
        /// Position of the failing operation.
        index: usize,
        /// The operation name (`add`, `remove`, ...), or `?` if missing.
        op: String,
        /// The operation's `path` (a JSON pointer, as written).
        path: String,
        /// Why it failed.
        reason: String,
    },
    /// A strategic merge patch was not a JSON object.
    #[error("strategic merge patch must be a JSON object")]
    NotAnObject,
    /// A `$patch` directive had an unsupported value.
    #[error("unknown patch directive {directive:?} at {path:?}")]
    UnknownDirective {
        /// Field path of the directive.
        path: String,
        /// The directive value as written.
        directive: String,
    },
    /// A directive (`$retainKeys`, `$setElementOrder/..`, ...) was malformed.
    #[error("invalid {directive} at {path:?}: {reason}")]
    InvalidDirective {
        /// Field path of the directive.
        path: String,
        /// The directive key.
        directive: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A list of objects has strategy `merge` but no merge key in the schema.
    #[error("cannot merge lists without merge key for {path:?}")]
    MissingMergeKey {
        /// Field path of the list.
        path: String,
    },
    /// A patch list element lacks the field the list is merged by.
    #[error("list element {path:?} does not contain declared merge key {key:?}")]
    ElementMissingMergeKey {
        /// Path of the element.
        path: String,
        /// The merge key.
        key: String,
    },
    /// A merged list mixes objects with other values.
    #[error("list {path:?} mixes objects and non-objects and cannot be merged")]
    MixedList {
        /// Field path of the list.
        path: String,
    },
}

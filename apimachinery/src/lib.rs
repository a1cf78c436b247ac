//! Kubernetes API machinery as pure functions over `serde_json::Value`.

mod field_path;
pub mod json_pointer;
pub mod managed;
pub mod packed;
pub mod patch;
pub mod protobuf;
pub mod quantity;
pub mod schema;
pub mod schema_check;
mod schema_tree;
pub mod selector;
pub mod validation;

#[cfg(test)]
pub(crate) mod testdata;

pub use json_pointer::JsonPointer;
pub use packed::{PackedJson, Packer};
pub use patch::{PatchError, json_patch, merge_patch, merge_patch_diff, strategic_merge_patch};
pub use quantity::{Quantity, QuantityError, format_bytes, format_cpu_milli, parse_quantity};
pub use schema::Definitions;
pub use schema_check::{type_errors, unknown_fields};
pub use selector::{FieldSelector, LabelSelector, SelectorError};
pub use validation::{FieldError, FieldErrorKind};

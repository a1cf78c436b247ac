//! Label and field selectors with Kubernetes query-string and object syntax.

mod field;
mod label;

pub use field::{FieldRequirement, FieldSelector};
pub use label::{LabelSelector, Operator, Requirement};

/// Errors from parsing or converting selectors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The selector string does not follow the grammar.
    #[error("unable to parse requirement: {0}")]
    Syntax(String),
    /// A label key failed validation.
    #[error("invalid label key {key:?}: {}", .errors.join("; "))]
    InvalidKey {
        /// The offending key.
        key: String,
        /// Validation messages.
        errors: Vec<String>,
    },
    /// A label value failed validation.
    #[error("invalid label value: {value:?}: at key: {key:?}: {}", .errors.join("; "))]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The offending value.
        value: String,
        /// Validation messages.
        errors: Vec<String>,
    },
    /// The number of values does not fit the operator.
    #[error("{0}")]
    InvalidValues(String),
    /// The metav1.LabelSelector object is malformed.
    #[error("invalid label selector object: {0}")]
    InvalidObject(String),
    /// A field selector term could not be understood.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldTerm {
        /// The whole selector.
        selector: String,
        /// The term that failed.
        term: String,
    },
    /// A field selector value has an invalid backslash escape.
    #[error("invalid field selector value {0:?}: invalid escape sequence")]
    InvalidEscape(String),
}

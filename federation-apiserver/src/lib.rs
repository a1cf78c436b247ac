//! Meridian's federation API server: Meridian's own kinds, the built-in kinds it serves,
//! its credentials and CLI, on the [`meridian_apiserver`] engine.

pub mod cli;
pub mod component_policy;
pub mod credentials;
pub mod interpreter_kind;
pub mod kinds;
pub mod member_cleanup;
pub mod override_kinds;
pub mod storage;

//! Meridian's federation API server: a Kubernetes-compatible REST, storage and watch engine
//! (reused by `cluster-sim`), the kinds it serves, and the HTTPS server around it.

// `ApiError` carries a whole `metav1.Status`; errors are the slow path and are rendered
// once, so boxing it would add indirection without a measurable gain.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod auth;
pub mod cache;
pub mod cli;
pub mod discovery;
pub mod engine;
pub mod event_ttl;
pub mod gc;
pub mod kinds;
pub mod metrics;
pub mod object;
pub mod openapi;
pub mod pki;
pub mod rbac;
pub mod registry;
pub mod server;
pub mod status;
pub mod storage;
pub mod stored_text;
pub mod table;
pub mod watch;

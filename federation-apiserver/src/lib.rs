//! Meridian's federation API server: a Kubernetes-compatible REST, storage and watch engine
//! (reused by `cluster-sim`), the kinds it serves, and the HTTPS server around it.

pub mod api;
pub mod auth;
pub mod cache;
pub mod cli;
pub mod discovery;
pub mod engine;
pub mod gc;
pub mod kinds;
pub mod metrics;
pub mod object;
pub mod openapi;
pub mod pki;
pub mod registry;
pub mod server;
pub mod status;
pub mod table;
pub mod watch;

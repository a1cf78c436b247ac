//! A Kubernetes-compatible API server engine: the REST and watch engine over a
//! [`Storage`](meridian_store::Storage), the watch cache, HTTP routing, discovery and
//! OpenAPI, authentication and RBAC, the in-server garbage collector and namespace
//! deleter, the HTTPS server, and the plain Kubernetes kinds (core, apps, RBAC, ...).
//!
//! A server picks the kinds it serves by building a [`Registry`](registry::Registry) of
//! [`ResourceDef`](registry::ResourceDef)s: `federation-apiserver` adds Meridian's own
//! kinds to built-in ones, `cluster-sim` adds the kinds only member clusters serve.

// `ApiError` carries a whole `metav1.Status`; errors are the slow path and are rendered
// once, so boxing it would add indirection without a measurable gain.
#![allow(clippy::result_large_err)]

pub mod api;
pub mod auth;
pub mod bootstrap_policy;
pub mod cache;
pub mod convert;
pub mod crd;
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
pub mod stored_text;
pub mod system_namespaces;
pub mod table;
pub mod watch;

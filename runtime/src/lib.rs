//! What every long-running Meridian process shares, so each binary's `main` only wires its
//! own loops: [`process`] (the start: flags, tracing, runtime, signals), [`args`] (the
//! flags of elected federation components), [`telemetry`] (tracing), [`client`] (the API client from a kubeconfig or the
//! pod's service account), [`endpoints`] (`/metrics`, `/healthz`, `/livez`, `/readyz` on
//! hyper), [`metrics`] (one prometheus-client registry per process, a prefix per
//! component), [`flags`] (every bad flag reported at once), [`shutdown`] (SIGINT/SIGTERM
//! as a token the loops select on), and for controller loops [`queue`] (the one work
//! queue), [`events`] (the one Event recorder), [`lean`] (watched objects without their
//! managedFields), [`answer`] (writes whose answers are read for their resourceVersion
//! only) for any kind ([`dynamic`]: `kube::Resource` for run-time kinds), [`kind_retry`] (looking up kinds not served yet again when definitions change),
//! [`namespace`] (a namespace made sure of before something goes in it),
//! [`rate`] and [`sync`]; [`batched_writes`] (a connection's writes of one scheduler turn
//! sent as one, under the TLS of the API servers' and the controllers' connections); and for components
//! that run as several replicas, [`leader`] (Lease-based leader election and the write
//! gate their clients go through). Unit tests talk to [`testing`]'s API server stand-in.
//!
//! A process runs its loops under a [`shutdown::Shutdown`] token; an elected one runs them
//! beside its election ([`leader::Election::run`]), writing only while it leads, while the
//! endpoints keep serving throughout.

pub mod answer;
pub mod args;
pub mod batched_writes;
pub mod client;
pub mod dynamic;
pub mod endpoints;
pub mod error;
pub mod events;
pub mod flags;
pub mod kind_retry;
pub mod leader;
pub mod lean;
pub mod metrics;
pub mod namespace;
pub mod process;
pub mod queue;
pub mod rate;
pub mod shutdown;
pub mod sync;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

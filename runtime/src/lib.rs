//! What every long-running Meridian process shares, so each binary's `main` only wires its
//! own loops: [`telemetry`] (tracing), [`client`] (the API client from a kubeconfig or the
//! pod's service account), [`endpoints`] (`/metrics`, `/healthz`, `/livez`, `/readyz` on
//! hyper), [`metrics`] (one prometheus-client registry per process, a prefix per
//! component), [`flags`] (every bad flag reported at once), [`shutdown`] (SIGINT/SIGTERM
//! as a token the loops select on), and for controller loops [`queue`] (the one work
//! queue), [`events`] (the one Event recorder), [`rate`] and [`sync`].
//!
//! A process runs its loops under a [`shutdown::Shutdown`] token. Leader election, when it
//! comes, sits between the two: it holds a child token per term of leadership
//! ([`shutdown::Shutdown::child`]), starts the loops when the term begins and cancels the
//! child when the Lease is lost, while the endpoints keep serving throughout.

pub mod client;
pub mod endpoints;
pub mod error;
pub mod events;
pub mod flags;
pub mod metrics;
pub mod queue;
pub mod rate;
pub mod shutdown;
pub mod sync;
pub mod telemetry;

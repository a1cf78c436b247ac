//! The member-fleet runtime the workload and service controllers share: one member task
//! per Cluster started, restarted and stopped as Clusters and their credentials change,
//! each with a connection retried with backoff ([`members`]) under shared tunables
//! ([`settings`]); the federation-side reflectors ([`watch`]); the intents central hands
//! each member and the sync records members keep ([`intent`]); the Events about federated
//! objects ([`events`]); the members' errors read back from a Placement ([`status`]); the
//! override policies every copy path reads, watched once per process ([`overrides`]); and
//! the error a federation-side reconcile fails with ([`error`]); reading one's own
//! writes before the watch brings them back ([`own_writes`]); and whether a member answers
//! ([`answering`]), which decides whether its syncs take from the process's budget. Each controller keeps
//! only its decisions and what its members converge.

pub mod answering;
pub mod error;
pub mod events;
pub mod intent;
pub mod members;
pub mod overrides;
pub mod own_writes;
pub mod settings;
pub mod status;
pub mod watch;

pub use answering::Answering;
pub use error::{FedError, timed};
pub use intent::{Intent, Record};
pub use members::{Connection, Fleet, Handle, KnownNamespaces};
pub use overrides::Overrides;
pub use settings::Settings;
pub use watch::{Changes, Object, reflect};

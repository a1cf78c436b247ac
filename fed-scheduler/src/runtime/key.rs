//! Identity of a federated workload in the work queue, and its Placement's name: the one
//! [`fed_api::workload`] key the workload controller queues too.

pub use fed_api::workload::{WorkloadKey, WorkloadKind};

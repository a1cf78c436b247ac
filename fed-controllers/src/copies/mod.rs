//! Copies of any kind the federation serves (ServiceAccounts, RBAC, Ingresses,
//! NetworkPolicies, PDBs, CRDs and custom resources, ...) pushed as they are into every
//! cluster their Placement names: `Duplicated`, no replica division.
//!
//! The decisions are pure and table-tested: [`member_copy`] says what a member gets of a
//! federated object (what the member owns or its server sets left out), [`drift`] whether a
//! member's copy still says what Meridian wants and what to write over it, [`plan`] which
//! step each member takes for each object (create, update, delete, leave, refuse), [`record`]
//! what Meridian set on a copy override rules changed (so what they stop setting goes), and
//! [`report`] what the Placement's status says of the results, and [`status`] what the
//! members' copies report, combined into the federated object's status (DaemonSets,
//! CronJobs, Ingresses, HPAs, PDBs) and shown per member on the Placement, [`template_deps`]
//! which dependency objects an interpreted object's pod template asks for, and where, and
//! [`dep_failures`] how their override failures show on its Placement. [`controller`]
//! applies them from caches of the federation and of each member, looking at the members
//! `visits` names (an object's destinations and where copies may still be, not the whole
//! fleet), its federation writes in `fedwrite` (a status its cache has not seen yet is not
//! written twice: [`status_writes`]) and its member requests in `member_io`; its caches keep
//! objects `packed`.

pub mod controller;
pub mod dep_failures;
pub mod drift;
mod fedwrite;
pub mod member_copy;
mod member_io;
mod packed;
pub mod plan;
pub mod record;
pub mod report;
pub mod status;
pub mod status_writes;
pub mod template_deps;
mod visits;

//! Server-side apply as pure functions: who owns which field of an object
//! (`metadata.managedFields`), how an apply configuration merges into an object, and
//! when it conflicts with another manager. No I/O: the API server engine calls
//! [`FieldManager`] on every write and stores what it returns.
//!
//! # Contract for the engine
//!
//! Build one [`FieldManager`] per endpoint, once, from the kind's compiled
//! [`ObjectType`] ([`ObjectType::from_definitions`] for built-in kinds,
//! [`ObjectType::from_structural`] for a CRD version, [`ObjectType::deduced`] for a kind
//! without schema), its `apiVersion` and `kind`, and its strategy's [`ResetFields`]
//! (`status` for a main resource that has a status subresource; for `/status`,
//! [`FieldManager::for_subresource`] with the fields that endpoint resets).
//!
//! * **create, update, JSON / merge / strategic patch** — after computing the object to
//!   store (patch applied, defaults and the strategy's resets done) and before
//!   validation, call [`FieldManager::update`]`(live, &mut new, manager, now)` with
//!   `live = None` on create. `new.metadata.managedFields` must still be what the client
//!   sent; the call replaces it. It never fails.
//! * **apply** (`application/apply-patch+yaml`) — check the options first
//!   ([`validate_patch_options`]: `fieldManager` required, at most 128 printable
//!   characters). Then [`FieldManager::apply`]`(live, &config, manager, force, now)`,
//!   `live = None` when the object does not exist (the apply creates it). Store
//!   [`Applied::object`] after defaults, strategy and validation as for any write; if
//!   [`Applied::changed`] is false, nothing but `managedFields` moved. Errors map to
//!   HTTP as [`ApplyError`]'s variants say; [`Conflicts`] gives the 409 message and its
//!   `FieldManagerConflict` causes.
//! * **`/scale`** — write the parent object with its new replica count through
//!   `for_subresource("scale", ResetFields::all_but(&["spec.replicas"]))`: the writer's
//!   entry then owns `.spec.replicas` with subresource `scale`, as upstream's scale
//!   handler records it on the parent.
//! * **manager name** — the `fieldManager` option, else
//!   [`manager_from_user_agent`] (`kubectl/v1.34 ...` → `kubectl`).
//!
//! Unknown fields are not refused here (they are typed as deduced): the engine's
//! `fieldValidation` handling decides about them before or after, as for other writes.
//! Nulls in a configuration stay in the merged object, as upstream's merge leaves them
//! for the typed decoding to read as unset.
//!
//! Both calls are deterministic given `now` (entries carry whole seconds), so dry runs
//! and retries compute the same result.
//!
//! # What follows upstream, and what does not
//!
//! Ownership, merge, prune and conflict rules are those of kube-apiserver's field manager
//! (structured-merge-diff v6); each module says which part it follows. Managers
//! that wrote at another version of the kind are compared at this version's field paths
//! (there is no conversion between versions here), and a schema that changes a list or
//! map between atomic and granular does not rewrite existing entries. Built-in kinds are
//! compared as upstream compares Go structs (struct fields and required fields present
//! even when unset); custom resources as written. A written `managedFields: []` clears
//! the entries, as upstream's field manager reads it (its documentation says otherwise).

mod conflict;
mod entries;
mod fields_v1;
mod last_applied;
mod manager;
mod model;
mod model_build;
mod options;
mod path;
mod raw;
mod set;
mod typed;
mod updater;

pub use conflict::{Conflict, ConflictCause, ConflictManager, Conflicts};
pub use entries::{
    ANCIENT_CHANGES, MAX_UPDATE_ENTRIES, ManagedEntry, ManagedFieldsError, Operation,
};
pub use fields_v1::{FieldsV1Error, decode as decode_fields_v1, encode as encode_fields_v1};
pub use last_applied::LAST_APPLIED_ANNOTATION;
pub use manager::{Applied, ApplyError, BEFORE_FIRST_APPLY, FieldManager, managed_entries};
pub use model::{ModelError, ObjectType};
pub use options::{
    FIELD_MANAGER_MAX_LENGTH, manager_from_user_agent, manager_or_user_agent,
    validate_field_manager, validate_patch_options,
};
pub use path::{Path, PathElement};
pub use set::FieldSet;
pub use typed::TypeError;
pub use updater::ResetFields;

#[cfg(test)]
mod tests;

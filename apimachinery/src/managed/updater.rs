//! Ownership after a write, as structured-merge-diff's `Updater` computes it: an update
//! moves the fields it changed to its writer; an apply merges a configuration, prunes
//! what its applier stopped applying, and refuses to change others' fields unless forced.

use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::conflict::{ConflictManager, Conflicts};
use super::entries::{MAX_UPDATE_ENTRIES, ManagedEntry, Operation, Owner, cap_update_entries};
use super::model::ObjectType;
use super::path::{Path, values_equal};
use super::set::FieldSet;
use super::typed::{self, Diff};

/// Fields a write through one endpoint never owns because the strategy resets them
/// (upstream's `GetResetFields`): `status` on a main resource; everything but `status`
/// (and sometimes `metadata.labels`) on `/status`.
#[derive(Debug, Clone, Default)]
pub enum ResetFields {
    /// Every field may be owned.
    #[default]
    None,
    /// These fields, and everything below them, are never owned.
    Paths(FieldSet),
    /// Only these fields, and what is below them, may be owned.
    AllBut(FieldSet),
}

impl ResetFields {
    /// Resets the dotted field paths given (e.g. `["status"]` for a main resource,
    /// `["spec", "metadata.labels"]` for a Deployment's `/status`).
    pub fn paths(paths: &[&str]) -> Self {
        ResetFields::Paths(dotted(paths))
    }

    /// Resets everything but the dotted field paths given (e.g. `["status"]` for a
    /// custom resource's `/status`).
    pub fn all_but(paths: &[&str]) -> Self {
        ResetFields::AllBut(dotted(paths))
    }

    pub(crate) fn filter(&self, set: FieldSet) -> FieldSet {
        match self {
            ResetFields::None => set,
            ResetFields::Paths(reset) => set.recursive_difference(reset),
            ResetFields::AllBut(kept) => set.only_under(kept),
        }
    }
}

fn dotted(paths: &[&str]) -> FieldSet {
    paths
        .iter()
        .map(|p| Path::fields(&p.split('.').collect::<Vec<_>>()))
        .collect()
}

/// Fields no manager owns: they identify the object or are the server's to set.
pub(crate) static NEVER_OWNED: LazyLock<FieldSet> = LazyLock::new(|| {
    [
        "apiVersion",
        "kind",
        "metadata",
        "metadata.name",
        "metadata.namespace",
        "metadata.creationTimestamp",
        "metadata.selfLink",
        "metadata.uid",
        "metadata.clusterName",
        "metadata.generation",
        "metadata.managedFields",
        "metadata.resourceVersion",
    ]
    .iter()
    .map(|p| Path::fields(&p.split('.').collect::<Vec<_>>()))
    .collect()
});

/// What a write knows besides the objects: the type, the version written, the
/// subresource and its reset fields.
pub(crate) struct Scope<'a> {
    pub ty: &'a ObjectType,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub reset: &'a ResetFields,
}

impl Scope<'_> {
    fn diff(&self, old: Option<&Value>, new: &Value) -> Diff {
        let create = old.is_none();
        typed::compare(&self.ty.model, self.ty.root, old, Some(new), create)
            .map_sets(|s| self.reset.filter(s))
    }
}

/// Records a create, update or non-apply patch by `manager`: every other entry loses the
/// fields that changed or went, and the writer's entry gains the fields that changed or
/// came (its time moves only then). `old` is `None` for a create.
pub(crate) fn update(
    scope: &Scope<'_>,
    old: Option<&Value>,
    new: &Value,
    entries: &mut Vec<ManagedEntry>,
    manager: &str,
    now: jiff::Timestamp,
) {
    let diff = scope.diff(old, new);
    if diff.is_empty() {
        return;
    }
    let changed = diff.modified.union(&diff.added);
    for e in entries.iter_mut() {
        e.fields = e.fields.difference(&changed).difference(&diff.removed);
    }
    entries.retain(|e| !e.fields.is_empty());
    let gained = changed.difference(&NEVER_OWNED);
    if !gained.is_empty() {
        let owner = Owner {
            manager,
            operation: Operation::Update,
            api_version: scope.api_version,
            subresource: scope.subresource,
        };
        match entries.iter_mut().find(|e| e.is(&owner)) {
            Some(e) => {
                e.fields.union_with(&gained);
                e.time = Some(now);
            }
            None => entries.push(ManagedEntry {
                manager: manager.to_string(),
                operation: Operation::Update,
                api_version: scope.api_version.to_string(),
                subresource: scope.subresource.to_string(),
                time: Some(now),
                fields: gained,
            }),
        }
    }
    cap_update_entries(entries, MAX_UPDATE_ENTRIES);
}

/// The result of an apply before its object is finished.
pub(crate) struct Merged {
    /// The object to store, `None` when the apply changes nothing.
    pub object: Option<Value>,
}

/// Applies `config` to `live` for `manager`. `entries` is updated in place only on
/// success; conflicts leave it untouched.
pub(crate) fn apply(
    scope: &Scope<'_>,
    live: &Value,
    config: &Value,
    entries: &mut Vec<ManagedEntry>,
    manager: &str,
    force: bool,
    now: jiff::Timestamp,
) -> Result<Merged, Conflicts> {
    let model = &scope.ty.model;
    let root = scope.ty.root;
    let owner = Owner {
        manager,
        operation: Operation::Apply,
        api_version: scope.api_version,
        subresource: scope.subresource,
    };
    let mut next = entries.clone();
    let merged = typed::merge(model, root, Some(live), Some(config))
        .unwrap_or_else(|| Value::Object(Map::new()));
    let applied = scope.reset.filter(typed::to_set(model, root, config));
    let last = match next.iter().position(|e| e.is(&owner)) {
        Some(i) => {
            let last = std::mem::replace(&mut next[i].fields, applied.clone());
            next[i].api_version = scope.api_version.to_string();
            last
        }
        None => {
            next.push(ManagedEntry {
                manager: manager.to_string(),
                operation: Operation::Apply,
                api_version: scope.api_version.to_string(),
                subresource: scope.subresource.to_string(),
                time: None,
                fields: applied.clone(),
            });
            FieldSet::new()
        }
    };
    let merged = prune(scope, merged, &next, &last, &applied);

    // Others lose what the apply removed, and conflict over what it changes.
    let diff = scope.diff(Some(live), &merged);
    let changed = diff.modified.union(&diff.added);
    let mut conflicts = Vec::new();
    for e in next.iter_mut().filter(|e| !e.is(&owner)) {
        let taken = e.fields.intersection(&changed);
        e.fields = e.fields.difference(&taken).difference(&diff.removed);
        if !taken.is_empty() {
            conflicts.push((ConflictManager::from_owner(&e.owner()), taken));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(Conflicts::from_sets(conflicts));
    }
    next.retain(|e| !e.fields.is_empty() || e.is(&owner));
    let unchanged = values_equal(live, &merged);
    if let Some(i) = next.iter().position(|e| e.is(&owner)) {
        next[i].fields = next[i].fields.difference(&NEVER_OWNED);
        if !unchanged {
            next[i].time = Some(now);
        }
        if next[i].fields.is_empty() {
            next.remove(i);
        }
    }
    *entries = next;
    Ok(Merged {
        object: (!unchanged).then_some(merged),
    })
}

/// Removes what the applier applied last time and no longer does, unless another manager
/// (or the new configuration) owns it; fields it never owned stay (upstream's `prune`,
/// `addBackOwnedItems` and `addBackDanglingItems`).
fn prune(
    scope: &Scope<'_>,
    merged: Value,
    entries: &[ManagedEntry],
    last: &FieldSet,
    applied: &FieldSet,
) -> Value {
    // Everything applied before is applied again: nothing to prune. (Every parent of an
    // applied field is in the new set too, so the general case below would keep all.)
    if last.difference(applied).is_empty() {
        return merged;
    }
    let model = &scope.ty.model;
    let root = scope.ty.root;
    let named = |s: &FieldSet| typed::with_named_fields(model, Some(root), s);
    let set_of = |v: &Value| named(&typed::to_set(model, root, v));
    let remove = |s: &FieldSet| {
        typed::remove_items(model, root, &merged, s).unwrap_or_else(|| Value::Object(Map::new()))
    };
    let last = named(last);
    let without_last = remove(&last);
    let mut managed = FieldSet::new();
    for e in entries {
        managed.union_with(&e.fields);
    }
    let managed = named(&managed);
    let merged_set = set_of(&merged);
    let unowned = merged_set.difference(&set_of(&without_last).union(&managed));
    let pruned = remove(&unowned);
    let gone = merged_set.difference(&set_of(&pruned)).intersection(&last);
    remove(&gone)
}

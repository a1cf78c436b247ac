//! Ownership after a write, as structured-merge-diff's `Updater` computes it: an update
//! moves the fields it changed to its writer; an apply merges a configuration, prunes
//! what its applier stopped applying, and refuses to change others' fields unless forced.

use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::conflict::{ConflictManager, Conflicts};
use super::entries::{Entry, MAX_UPDATE_ENTRIES, Operation, Owner, cap_update_entries, trie};
use super::model::ObjectType;
use super::path::{Path, values_equal};
use super::raw::{self, Trie};
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
            // Most changes are nowhere near the reset fields: keep the set as it is.
            ResetFields::Paths(reset) if !set.reaches(reset) => set,
            ResetFields::Paths(reset) => set.recursive_difference(reset),
            ResetFields::AllBut(kept) => set.only_under(kept),
        }
    }

    fn filter_trie(&self, fields: &mut Trie) {
        match self {
            ResetFields::None => {}
            ResetFields::Paths(reset) => raw::subtract_recursive(fields, &trie(reset)),
            ResetFields::AllBut(kept) => raw::keep_under(fields, &trie(kept)),
        }
    }
}

fn dotted(paths: &[&str]) -> FieldSet {
    paths
        .iter()
        .map(|p| Path::fields(&p.split('.').collect::<Vec<_>>()))
        .collect()
}

/// [`NEVER_OWNED`] as a trie.
static NEVER_OWNED_TRIE: LazyLock<Trie> = LazyLock::new(|| trie(&NEVER_OWNED));

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
    /// How `new` differs from the `old` object, in the fields its writers may own.
    fn diff(&self, old: &Value, new: &Value) -> Diff {
        typed::compare(&self.ty.model, self.ty.root, Some(old), Some(new), false)
            .map_sets(|s| self.reset.filter(s))
    }

    /// The fields a write changed or added, and those it removed, as tries; `None` when
    /// it changed nothing this endpoint's writers may own.
    fn changes(&self, old: Option<&Value>, new: &Value) -> Option<(Trie, Trie)> {
        let Some(old) = old else {
            // A create (the most frequent write) sets every field it has and removes
            // none: its fields are read off the object in one walk, with no difference
            // to compute.
            let mut created = typed::created_fields(&self.ty.model, self.ty.root, new);
            self.reset.filter_trie(&mut created);
            return (!created.is_empty()).then(|| (created, Trie::new()));
        };
        // An update's changes are read off both objects in one walk that skips what is
        // equal on both sides, straight into tries.
        let typed::Changes {
            mut changed,
            mut removed,
        } = typed::changed_fields(&self.ty.model, self.ty.root, old, new);
        self.reset.filter_trie(&mut changed);
        self.reset.filter_trie(&mut removed);
        (!changed.is_empty() || !removed.is_empty()).then_some((changed, removed))
    }
}

/// Records a create, update or non-apply patch by `manager`: every other entry loses the
/// fields that changed or went, and the writer's entry gains the fields that changed or
/// came (its time moves only then). `old` is `None` for a create.
pub(crate) fn update(
    scope: &Scope<'_>,
    old: Option<&Value>,
    new: &Value,
    entries: &mut Vec<Entry>,
    manager: &str,
    now: jiff::Timestamp,
) {
    let Some((mut gained, removed)) = scope.changes(old, new) else {
        return;
    };
    if !entries.is_empty() {
        for e in entries.iter_mut() {
            lose(e, &gained, &removed);
        }
        entries.retain(|e| !e.is_empty());
    }
    raw::subtract(&mut gained, &NEVER_OWNED_TRIE);
    if !gained.is_empty() {
        let owner = Owner {
            manager,
            operation: Operation::Update,
            api_version: scope.api_version,
            subresource: scope.subresource,
        };
        match entries.iter_mut().find(|e| e.is(&owner)) {
            Some(e) => {
                if !raw::contains(e.fields(), &gained) {
                    raw::union(e.fields_mut(), &gained);
                }
                e.time = Some(now);
                e.touch();
            }
            None => entries.push(Entry::new(&owner, Some(now), gained)),
        }
    }
    cap_update_entries(entries, MAX_UPDATE_ENTRIES);
}

/// Takes fields that changed or went from a manager (a set most writes leave alone).
fn lose(e: &mut Entry, changed: &Trie, removed: &Trie) {
    if raw::intersects(e.fields(), changed) || raw::intersects(e.fields(), removed) {
        let fields = e.fields_mut();
        raw::subtract(fields, changed);
        raw::subtract(fields, removed);
    }
}

/// The result of an apply before its object is finished.
pub(crate) struct Merged {
    /// The object to store (without `metadata.managedFields`).
    pub object: Value,
    /// Whether it differs from the live object.
    pub changed: bool,
}

/// What an apply brings: the configuration, the fields it sets (from
/// [`typed::applied_fields`]) and the configuration merged into the live object (without
/// `metadata.managedFields`).
pub(crate) struct Applying<'a> {
    pub config: &'a Value,
    pub fields: Trie,
    pub merged: Value,
}

/// Applies for `manager`. `entries` is updated in place only on success; conflicts leave
/// it untouched.
pub(crate) fn apply(
    scope: &Scope<'_>,
    live: &Value,
    applying: Applying<'_>,
    entries: &mut Vec<Entry>,
    manager: &str,
    force: bool,
    now: jiff::Timestamp,
) -> Result<Merged, Conflicts> {
    let Applying {
        config,
        fields: mut owned,
        merged,
    } = applying;
    let owner = Owner {
        manager,
        operation: Operation::Apply,
        api_version: scope.api_version,
        subresource: scope.subresource,
    };
    let own = entries.iter().position(|e| e.is(&owner));
    scope.reset.filter_trie(&mut owned);
    raw::subtract(&mut owned, &NEVER_OWNED_TRIE);
    // Fields applied before and left out now are pruned; when the last apply's fields are
    // all applied again (the usual re-apply) there is nothing to prune.
    let merged = match own {
        Some(i) if !raw::contains(&owned, entries[i].fields()) => {
            prune(scope, merged, entries, i, config)
        }
        _ => merged,
    };

    // Others lose what the apply removed, and conflict over what it changes.
    let diff = scope.diff(live, &merged);
    let changed = diff.modified.union(&diff.added);
    let (changed_trie, removed_trie) = (trie(&changed), trie(&diff.removed));
    let is_other = |i: usize| Some(i) != own;
    let conflicts: Vec<_> = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| is_other(*i) && raw::intersects(e.fields(), &changed_trie))
        .map(|(_, e)| {
            (
                ConflictManager::from_owner(&e.owner()),
                e.set().intersection(&changed),
            )
        })
        .collect();
    if !force && !conflicts.is_empty() {
        return Err(Conflicts::from_sets(conflicts));
    }
    for (i, e) in entries.iter_mut().enumerate() {
        if is_other(i) {
            lose(e, &changed_trie, &removed_trie);
        }
    }
    let changed = !same_object(live, &merged);
    match own {
        Some(i) => {
            let e = &mut entries[i];
            if e.fields() != &owned {
                e.set_fields(owned);
            }
            if e.api_version != scope.api_version {
                e.api_version = scope.api_version.to_string();
                e.touch();
            }
            if changed {
                e.time = Some(now);
                e.touch();
            }
        }
        None => entries.push(Entry::new(&owner, changed.then_some(now), owned)),
    }
    entries.retain(|e| !e.is_empty());
    Ok(Merged {
        object: merged,
        changed,
    })
}

/// Whether `merged` holds what `live` holds, `metadata.managedFields` aside (they are
/// written anew either way), numbers compared by value.
fn same_object(live: &Value, merged: &Value) -> bool {
    let (Value::Object(l), Value::Object(m)) = (live, merged) else {
        return values_equal(live, merged);
    };
    equal_except(l, m, "", |k, a, b| match (k, a, b) {
        ("metadata", Value::Object(a), Value::Object(b)) => {
            equal_except(a, b, "managedFields", |_, x, y| values_equal(x, y))
        }
        _ => values_equal(a, b),
    })
}

/// Whether the maps have the same keys, `skip` aside, with values equal by `eq`.
fn equal_except(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    skip: &str,
    eq: impl Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let keys = |m: &Map<String, Value>| m.keys().filter(|k| *k != skip).count();
    keys(a) == keys(b)
        && a.iter()
            .filter(|(k, _)| *k != skip)
            .all(|(k, v)| b.get(k).is_some_and(|w| eq(k, v, w)))
}

/// Removes what the applier applied last time and no longer does, unless another manager
/// (or the new configuration) owns it; fields it never owned stay (upstream's `prune`,
/// `addBackOwnedItems` and `addBackDanglingItems`).
fn prune(scope: &Scope<'_>, merged: Value, entries: &[Entry], own: usize, config: &Value) -> Value {
    let model = &scope.ty.model;
    let root = scope.ty.root;
    let applied = scope.reset.filter(typed::to_set(model, root, config));
    let named = |s: &FieldSet| typed::with_named_fields(model, Some(root), s);
    let set_of = |v: &Value| named(&typed::to_set(model, root, v));
    let remove = |s: &FieldSet| {
        typed::remove_items(model, root, &merged, s).unwrap_or_else(|| Value::Object(Map::new()))
    };
    let last = named(&entries[own].set());
    let without_last = remove(&last);
    // What every manager owns, the applier as of this apply.
    let mut managed = applied.clone();
    for (i, e) in entries.iter().enumerate() {
        if i != own {
            managed.union_with(&e.set());
        }
    }
    let managed = named(&managed);
    let merged_set = set_of(&merged);
    let unowned = merged_set.difference(&set_of(&without_last).union(&managed));
    let pruned = remove(&unowned);
    let gone = merged_set.difference(&set_of(&pruned)).intersection(&last);
    remove(&gone)
}

//! The served kinds: names, scope, subresources, table columns and per-kind hooks
//! (defaulting, validation), looked up by URL segments or by key prefix.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::status::Cause;

/// Per-kind behaviour the generic REST engine calls.
pub trait KindHooks: Send + Sync {
    /// Fills defaults, as Kubernetes' defaulters do, before validation.
    fn default(&self, _obj: &mut Value) {}
    /// Field-level validation; `old` is set on update.
    fn validate(&self, _obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        Vec::new()
    }
    /// Checks the body against the kind's typed shape (wrong types are 400s).
    fn check_types(&self, _obj: &Value) -> Result<(), String> {
        Ok(())
    }
    /// Adjusts a new object before it is stored (e.g. a Namespace's finalizer and phase).
    fn prepare_create(&self, _obj: &mut Value) {}
    /// Mutating admission of a create, after the field manager has recorded the request's
    /// fields: what it adds belongs to no manager, as with kube-apiserver's admission
    /// plugins (a finalizer that a controller removes, say), so no client's later apply
    /// takes it away.
    fn admit_create(&self, _obj: &mut Value) {}
}

/// Hooks that do nothing: kinds without special rules.
pub struct NoHooks;
impl KindHooks for NoHooks {}

/// One column of `kubectl get` output.
pub struct Column {
    /// Column title (kubectl upper-cases it).
    pub name: &'static str,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: &'static str,
    /// `name` for the name column, else empty.
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0 always shown, 1 with `-o wide`.
    pub priority: u8,
    /// Reads the cell from the object.
    pub cell: Cell,
}

impl Column {
    /// The same column shown only with `-o wide` (priority 1).
    pub fn wide(self) -> Self {
        Self {
            priority: 1,
            ..self
        }
    }
}

/// How a [`Column`]'s cell is read from an object. Most columns show one field as it is,
/// so they name its JSON pointer; the rest compute their text.
#[derive(Clone, Copy, Debug)]
pub enum Cell {
    /// The string at a JSON pointer (empty when absent).
    Str(&'static str),
    /// The integer at a JSON pointer (0 when absent).
    Int(&'static str),
    /// Computed from the whole object.
    Fn(fn(&Value) -> Value),
}

impl Cell {
    /// The cell of `obj`.
    pub fn read(&self, obj: &Value) -> Value {
        match self {
            Self::Str(pointer) => crate::kinds::str_at(obj, pointer),
            Self::Int(pointer) => crate::kinds::int_at(obj, pointer),
            Self::Fn(f) => f(obj),
        }
    }
}

/// A served resource.
pub struct ResourceDef {
    /// API group, empty for core.
    pub group: &'static str,
    /// Version, e.g. `v1`.
    pub version: &'static str,
    /// Kind, e.g. `Deployment`.
    pub kind: &'static str,
    /// URL plural, e.g. `deployments`.
    pub plural: &'static str,
    /// Lower-case singular.
    pub singular: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: &'static [&'static str],
    /// Categories such as `all`.
    pub categories: &'static [&'static str],
    /// OpenAPI definition name of the kind: one of the vendored Kubernetes definitions, or
    /// the name under which [`ResourceDef::schema`] is published.
    pub definition: &'static str,
    /// Builds the kind's OpenAPI v2 schema, for kinds the vendored Kubernetes definitions
    /// do not describe (a custom resource's structural schema); `None` takes the vendored
    /// one. Called when the documents are built: the server keeps only those (a schema
    /// held as a value here as well cost a megabyte of resident memory).
    pub schema: Option<fn() -> Value>,
    /// Whether a `status` subresource exists (main writes then ignore status).
    pub status_subresource: bool,
    /// Whether a create keeps the `status` it is given although a `status` subresource
    /// exists. Only for a kind one component creates as the record of its own decision,
    /// with the condition that explains it (Meridian's Placement): its first status then
    /// costs no second write. Updates and patches of the main resource still ignore status.
    pub status_on_create: bool,
    /// Whether a `scale` subresource exists.
    pub scale_subresource: bool,
    /// Whether `metadata.generation` tracks spec changes.
    pub tracks_generation: bool,
    /// Field selectors served beyond `metadata.name`/`metadata.namespace`: (field, JSON pointer).
    pub field_selectors: &'static [(&'static str, &'static str)],
    /// Table columns after NAME (and before AGE, which is added for every kind).
    pub columns: Vec<Column>,
    /// Per-kind hooks.
    pub hooks: Arc<dyn KindHooks>,
    /// What a custom resource's CustomResourceDefinition brings beyond the fields above
    /// (its schema, printer columns, the CRD's name); `None` for compiled-in kinds.
    pub custom: Option<Arc<crate::crd::CustomKind>>,
    /// How objects are converted when this resource serves them in another form than the
    /// one they are stored in (another version, or another group's kind); `None` when it
    /// serves the stored form. The stored form's own resource must be registered first.
    pub conversion: Option<Arc<Conversion>>,
}

/// The conversion of a resource served over objects stored as another one's: stored under
/// `stored_group`'s storage prefix at `stored_api_version`. `apiVersion` is set by the
/// engine; the functions move the fields that differ (none for a CRD's versions, which
/// convert as kube-apiserver's `conversion: None` does).
pub struct Conversion {
    /// The group whose storage prefix holds the objects (`""` for the core group).
    pub stored_group: &'static str,
    /// The apiVersion objects are stored at.
    pub stored_api_version: String,
    /// Stored form to served form (apiVersion aside).
    pub to_served: fn(&mut Value),
    /// Served form to stored form (apiVersion aside).
    pub to_stored: fn(&mut Value),
    /// Annotations of the served form that hold status (v1 HorizontalPodAutoscalers keep
    /// their current metrics and conditions there): a write of the main resource keeps
    /// the stored ones and a `/status` write takes the client's, as the status itself.
    pub status_annotations: &'static [&'static str],
}

impl Conversion {
    /// Objects of the same kind and group stored at `stored_api_version`: only their
    /// apiVersion changes.
    pub fn version_only(stored_group: &'static str, stored_api_version: String) -> Self {
        Self {
            stored_group,
            stored_api_version,
            to_served: |_| {},
            to_stored: |_| {},
            status_annotations: &[],
        }
    }
}

impl ResourceDef {
    /// A resource of `group`/`version` without subresources, short names, categories,
    /// extra field selectors, table columns or schema: set the public fields that differ.
    pub fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
        singular: &'static str,
        namespaced: bool,
        hooks: impl KindHooks + 'static,
    ) -> Self {
        Self {
            group,
            version,
            kind,
            plural,
            singular,
            namespaced,
            short_names: &[],
            categories: &[],
            definition: "",
            schema: None,
            status_subresource: false,
            status_on_create: false,
            scale_subresource: false,
            tracks_generation: false,
            field_selectors: &[],
            columns: Vec::new(),
            hooks: Arc::new(hooks),
            custom: None,
            conversion: None,
        }
    }

    /// Whether this is the core `Namespace` kind, which the engine finalizes and deletes
    /// by its own rules.
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.kind == "Namespace"
    }

    /// `apiVersion` of objects of this kind.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key prefix of every object of this resource.
    pub fn prefix(&self) -> String {
        let group = self
            .conversion
            .as_ref()
            .map_or(self.group, |c| c.stored_group);
        let g = if group.is_empty() { "core" } else { group };
        format!("/{g}/{}/", self.plural)
    }

    /// The storage key prefix of a namespace's objects (or all, for `None`).
    pub fn namespace_prefix(&self, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/", self.prefix()),
            _ => self.prefix(),
        }
    }

    /// The storage key of one object.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        if self.namespaced {
            format!("{}{namespace}/{name}", self.prefix())
        } else {
            format!("{}{name}", self.prefix())
        }
    }

    /// `deployments.apps`-style name used in messages.
    pub fn qualified(&self) -> String {
        crate::status::qualified(self.plural, self.group)
    }

    /// The `List` kind.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }
}

/// All served resources.
#[derive(Clone, Default)]
pub struct Registry {
    defs: Vec<Arc<ResourceDef>>,
    by_url: HashMap<(String, String, String), Arc<ResourceDef>>,
    by_prefix: HashMap<String, Arc<ResourceDef>>,
    /// (group, plural) of the resources a namespace being deleted takes down first.
    deleted_first: Vec<(&'static str, &'static str)>,
}

impl Registry {
    /// A registry of the given resources.
    pub fn new(defs: Vec<ResourceDef>) -> Self {
        let mut r = Self::default();
        for d in defs {
            let d = Arc::new(d);
            r.by_url.insert(
                (d.group.into(), d.version.into(), d.plural.into()),
                d.clone(),
            );
            // The stored form's resource (registered first) answers for the prefix.
            r.by_prefix.entry(d.prefix()).or_insert_with(|| d.clone());
            r.defs.push(d);
        }
        r
    }

    /// The same registry, with a namespace being deleted taking down the objects of these
    /// resources (group, plural) first and everything else in it only once they are gone,
    /// as Kubernetes' ordered namespace deletion does with pods. Which kinds go first is
    /// the server's policy: the ones whose objects run somewhere, so that what they read
    /// (ConfigMaps, Secrets, policies) outlives them.
    pub fn with_deleted_first(mut self, resources: &[(&'static str, &'static str)]) -> Self {
        self.deleted_first = resources.to_vec();
        self
    }

    /// This registry's compiled-in kinds (custom ones left out) followed by `custom`: the
    /// kinds served while those custom resources' definitions exist.
    pub fn with_custom(&self, custom: Vec<Arc<ResourceDef>>) -> Registry {
        let mut r = Registry {
            deleted_first: self.deleted_first.clone(),
            ..Default::default()
        };
        let builtin = self.defs.iter().filter(|d| d.custom.is_none()).cloned();
        for d in builtin.chain(custom) {
            let url = (d.group.into(), d.version.into(), d.plural.into());
            // A compiled-in kind keeps its URL: a definition may not shadow it.
            if r.by_url.contains_key(&url) {
                continue;
            }
            r.by_url.insert(url, d.clone());
            r.by_prefix.entry(d.prefix()).or_insert_with(|| d.clone());
            r.defs.push(d);
        }
        r
    }

    /// Whether a namespace being deleted takes `def`'s objects down before the rest.
    pub fn deleted_first(&self, def: &ResourceDef) -> bool {
        self.deleted_first.contains(&(def.group, def.plural))
    }

    /// Every resource, in registration order.
    pub fn all(&self) -> &[Arc<ResourceDef>] {
        &self.defs
    }

    /// The resource at `/apis/{group}/{version}/{plural}`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<ResourceDef>> {
        self.by_url
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// The resource owning a storage key.
    pub fn for_key(&self, key: &str) -> Option<&Arc<ResourceDef>> {
        // "/group/plural/..." -> "/group/plural/"
        let mut slashes = key.match_indices('/').map(|(i, _)| i);
        let third = slashes.nth(2)?;
        self.by_prefix.get(&key[..=third])
    }

    /// The resource for a kind (for owner references and GC).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&Arc<ResourceDef>> {
        self.defs
            .iter()
            .find(|d| d.kind == kind && d.api_version() == api_version)
    }

    /// Groups in first-seen order with their versions.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for d in &self.defs {
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    if !vs.contains(&d.version) {
                        vs.push(d.version)
                    }
                }
                None => out.push((d.group, vec![d.version])),
            }
        }
        out
    }
}

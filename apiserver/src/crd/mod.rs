//! Custom resources: the kinds CustomResourceDefinitions bring while the server runs,
//! their objects' schema handling, and the controller that serves, names and cleans up
//! definitions.
//!
//! The definition kind itself is a plain table entry
//! ([`kinds::apiextensions`](crate::kinds::apiextensions)); everything here starts from
//! the stored definitions: [`plan`] decides purely, [`controller`] applies.

mod columns;
pub mod controller;
pub mod names;
pub mod plan;
mod rules;
pub mod schema;

use std::sync::Arc;

use serde_json::Value;

pub use columns::{ColumnPath, PathError};
pub use controller::run;

use crate::kinds::validate::{self, NameRule};
use crate::registry::KindHooks;
use crate::status::Cause;

/// What a custom kind carries beyond its [`ResourceDef`](crate::registry::ResourceDef).
pub struct CustomKind {
    /// The name of the definition that brings it (`widgets.example.com`).
    pub crd: String,
    /// The version's `openAPIV3Schema`: validation, pruning, defaults and the published
    /// OpenAPI definition.
    pub schema: Arc<Value>,
    /// `additionalPrinterColumns`; empty shows NAME and AGE.
    pub columns: Vec<PrinterColumn>,
    /// Whether this is the version objects are stored in.
    pub storage: bool,
    /// Where the version's `scale` subresource reads and writes, when it has one.
    pub scale: Option<ScalePaths>,
}

/// A custom kind's `subresources.scale`, as JSON pointers into its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath` (`/spec/replicas`).
    pub spec_replicas: String,
    /// `statusReplicasPath` (`/status/replicas`).
    pub status_replicas: String,
    /// `labelSelectorPath`: a string field holding the serialized selector, if given.
    pub label_selector: Option<String>,
}

impl ScalePaths {
    /// The paths of a CRD version's `subresources.scale`; `None` when a required path is
    /// missing or not a plain `.field.field` path (kube-apiserver refuses such CRDs).
    pub fn of(scale: &Value) -> Option<Self> {
        let pointer = |k: &str, prefix: &str| -> Option<String> {
            let path = scale.get(k)?.as_str()?;
            let ok = path.starts_with(prefix)
                && path[1..]
                    .split('.')
                    .all(|f| !f.is_empty() && !f.contains(['[', ']', '/', '~']));
            ok.then(|| path.replace('.', "/"))
        };
        Some(Self {
            spec_replicas: pointer("specReplicasPath", ".spec.")?,
            status_replicas: pointer("statusReplicasPath", ".status.")?,
            label_selector: match scale.get("labelSelectorPath") {
                None | Some(Value::Null) => None,
                Some(_) => Some(pointer("labelSelectorPath", ".")?),
            },
        })
    }
}

/// One `additionalPrinterColumns` entry.
pub struct PrinterColumn {
    /// Column title.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format hint (`name` marks the name column).
    pub format: String,
    /// What the column shows.
    pub description: String,
    /// 0 always shown, more with `-o wide`.
    pub priority: u8,
    /// The compiled `jsonPath`.
    pub path: ColumnPath,
}

/// Hooks of a custom kind: pruning and defaults from its schema, then validation.
pub struct CustomHooks {
    /// The version's structural schema.
    pub schema: Arc<Value>,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl KindHooks for CustomHooks {
    fn default(&self, obj: &mut Value) {
        schema::prune(&self.schema, obj);
        schema::default(&self.schema, obj);
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut errs = validate::metadata(obj, NameRule::Subdomain, self.namespaced);
        errs.extend(schema::validate(&self.schema, obj));
        if errs.is_empty() {
            // Rules assume a well-typed object, as upstream runs them after the schema.
            errs.extend(rules::check(&self.schema, obj, old));
        }
        errs
    }
}

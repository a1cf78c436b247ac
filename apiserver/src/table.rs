//! Server-side printing: `meta.k8s.io/v1` Tables, as `kubectl get` asks for them.

use serde_json::{Value, json};

use crate::cache::Cached;
use crate::object;
use crate::registry::ResourceDef;
use crate::status::ApiError;

/// What each row of a Table carries besides its cells (`?includeObject=`): nothing, the
/// object's metadata (the default), or the whole object, which `kubectl get --sort-by`
/// asks for to sort by any field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// Cells only.
    None,
    /// The object's metadata, as a PartialObjectMetadata.
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// The `includeObject` query parameter; an unknown value is refused as Kubernetes does.
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: \"{other}\": supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// The printer columns of a custom kind that declares some.
fn custom_columns(def: &ResourceDef) -> Option<&[crate::crd::PrinterColumn]> {
    def.custom
        .as_ref()
        .map(|c| c.columns.as_slice())
        .filter(|c| !c.is_empty())
}

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let p = part.replace(' ', "");
        p.contains("as=Table") && p.contains("g=meta.k8s.io")
    })
}

fn column_definitions(def: &ResourceDef) -> Vec<Value> {
    if let Some(custom) = custom_columns(def) {
        let mut cols = vec![json!({
            "name": "Name", "type": "string", "format": "name", "priority": 0,
            "description": "Name must be unique within a namespace.",
        })];
        cols.extend(custom.iter().map(|c| {
            json!({
                "name": c.name, "type": c.type_, "format": c.format,
                "priority": c.priority, "description": c.description,
            })
        }));
        return cols;
    }
    let mut cols = vec![json!({
        "name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace.",
    })];
    for c in &def.columns {
        cols.push(json!({
            "name": c.name, "type": c.type_, "format": c.format,
            "priority": c.priority, "description": c.description,
        }));
    }
    if !places_age(def) {
        cols.push(json!({
            "name": "Age", "type": "string", "format": "", "priority": 0,
            "description": "Time since the object was created.",
        }));
    }
    cols
}

/// Whether the kind's own columns place AGE (upstream prints it before the wide columns,
/// or, for a ResourceQuota, right after the name) or show the creation time instead (as
/// upstream's default table, which CustomResourceDefinitions use, does); otherwise AGE
/// comes last.
fn places_age(def: &ResourceDef) -> bool {
    def.columns
        .iter()
        .any(|c| c.name == AGE || c.name == CREATED_AT)
}

/// The title of the creation-time column that stands in for AGE.
const CREATED_AT: &str = "Created At";

/// The title of the age column.
pub const AGE: &str = "Age";

/// The AGE cell of an object.
pub fn age_cell(obj: &Value) -> Value {
    Value::from(
        object::meta_str(obj, "creationTimestamp")
            .map(object::age)
            .unwrap_or_else(|| "<unknown>".into()),
    )
}

/// One row for one object.
pub fn row(def: &ResourceDef, obj: &Value, include: IncludeObject) -> Value {
    let mut cells = vec![Value::from(object::name(obj))];
    if let Some(custom) = custom_columns(def) {
        // A definition's columns replace the defaults, AGE included, as upstream.
        cells.extend(custom.iter().map(|c| c.path.cell(obj, &c.type_)));
    } else {
        for c in &def.columns {
            cells.push(c.cell.read(obj));
        }
        if !places_age(def) {
            cells.push(age_cell(obj));
        }
    }
    let object = match include {
        IncludeObject::None => return json!({ "cells": cells }),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
        }),
        IncludeObject::Object => {
            // Cells read the stored form; the object is shown as this resource serves it.
            let mut served = obj.clone();
            crate::convert::to_served(def, &mut served);
            served
        }
    };
    json!({ "cells": cells, "object": object })
}

/// A Table of `items`.
pub fn table(
    def: &ResourceDef,
    items: &[std::sync::Arc<Cached>],
    list_meta: Value,
    include: IncludeObject,
) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|c| row(def, &c.value(), include))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": column_definitions(def),
        "rows": rows,
    })
}

/// A Table of one object (GET of an item, or one watch event).
pub fn single(def: &ResourceDef, obj: &Value, with_columns: bool, include: IncludeObject) -> Value {
    let rv = object::meta_str(obj, "resourceVersion").unwrap_or("");
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "rows": [row(def, obj, include)],
    });
    if with_columns {
        t["columnDefinitions"] = Value::Array(column_definitions(def));
    } else {
        t["columnDefinitions"] = json!([]);
    }
    t
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{IncludeObject, column_definitions, row};

    fn names(def: &crate::registry::ResourceDef) -> Vec<String> {
        column_definitions(def)
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn age_comes_last_unless_the_kind_places_it() {
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"replicas": 2}});
        let deploy = crate::kinds::apps::deployments();
        assert_eq!(names(&deploy).last().unwrap(), "Age");
        let sts = crate::kinds::workloads::statefulsets();
        assert_eq!(
            names(&sts),
            ["Name", "Ready", "Age", "Containers", "Images"]
        );
        let cells = row(&sts, &obj, IncludeObject::None)["cells"].clone();
        assert_eq!(cells.as_array().unwrap().len(), 5);
        assert_eq!(cells[1], "0/2");
        let age = cells[2].as_str().unwrap();
        assert!(age.ends_with(['d', 'y']) && age != "<unknown>", "{cells}");
        let quota = crate::kinds::quota::resource_quotas();
        assert_eq!(names(&quota), ["Name", "Age", "Request", "Limit"]);
        // `kubectl get crd`: NAME and CREATED AT, no AGE beside them.
        let crds = crate::kinds::apiextensions::custom_resource_definitions();
        assert_eq!(names(&crds), ["Name", "Created At"]);
        let cells = row(&crds, &obj, IncludeObject::None)["cells"].clone();
        assert_eq!(cells, json!(["x", "2020-01-01T00:00:00Z"]));
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::parse(None).unwrap(), IncludeObject::Metadata);
        assert_eq!(
            IncludeObject::parse(Some("Object")).unwrap(),
            IncludeObject::Object
        );
        assert_eq!(
            IncludeObject::parse(Some("None")).unwrap(),
            IncludeObject::None
        );
        let err = IncludeObject::parse(Some("All")).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(err.to_string().contains("includeObject"), "{err}");
    }
}

//! Compiles OpenAPI schemas into a [`TypeModel`]: the OpenAPI v2 definitions of built-in
//! kinds, and a CRD's structural `openAPIV3Schema`. Both follow upstream's conversion
//! (kube-openapi's `schemaconv`): lists are atomic unless `x-kubernetes-list-type` (or,
//! for older schemas, a `merge` patch strategy) says otherwise, maps are granular unless
//! `x-kubernetes-map-type: atomic`, and keys a schema does not declare are deduced.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::model::{
    Atom, DEDUCED, FieldType, ListKind, ListType, MapType, ModelError, ObjectType, SCALAR, TypeId,
    TypeModel, UNTYPED_ATOMIC,
};
use crate::schema::Definitions;

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Defaults of list-map key fields that Kubernetes declares with `+default` tags but that
/// OpenAPI documents stripped of defaults lack. A port given without a protocol is then
/// keyed `{"containerPort":80,"protocol":"TCP"}`, as kube-apiserver keys it.
const KEY_DEFAULTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", "TCP"),
    ("io.k8s.api.core.v1.ServicePort", "protocol", "TCP"),
];

impl ObjectType {
    /// Compiles the type of definition `root` (e.g. `io.k8s.api.apps.v1.Deployment`) and
    /// everything it refers to.
    pub fn from_definitions(defs: &Definitions, root: &str) -> Result<Self, ModelError> {
        let mut b = Builder::new(Some(defs));
        b.model.go_structs = true;
        let id = b
            .definition(root)?
            .ok_or_else(|| ModelError::UnknownDefinition(root.to_string()))?;
        Ok(b.finish(id))
    }

    /// Compiles a CRD version's structural `openAPIV3Schema`. `metadata` is typed as
    /// `ObjectMeta` from `defs` (as the API server publishes it), `apiVersion` and `kind`
    /// as strings, and so are those of every `x-kubernetes-embedded-resource` object.
    /// `preserve_unknown_fields` is the CRD's `spec.preserveUnknownFields`.
    pub fn from_structural(
        schema: &Value,
        defs: &Definitions,
        preserve_unknown_fields: bool,
    ) -> Result<Self, ModelError> {
        let mut b = Builder::new(Some(defs));
        let id = b.schema(schema, preserve_unknown_fields, "openAPIV3Schema")?;
        b.add_type_meta(id)?;
        Ok(b.finish(id))
    }
}

struct Builder<'a> {
    defs: Option<&'a Definitions>,
    model: TypeModel,
    by_name: HashMap<String, TypeId>,
    // Schemas are immutable while compiling, so an address (with the inherited
    // preserve-unknown-fields flag) names an inline schema: each compiles once.
    by_addr: HashMap<(*const Value, bool), TypeId>,
    with_map_kind: HashMap<(TypeId, bool), TypeId>,
}

fn ext<'v>(s: &'v Value, name: &str) -> Option<&'v Value> {
    s.get(name)
}

fn is_true(s: &Value, name: &str) -> bool {
    ext(s, name) == Some(&Value::Bool(true))
}

/// Whether a schema only ever holds scalars (all of which the model treats alike).
fn is_scalar(s: &Value) -> bool {
    is_true(s, "x-kubernetes-int-or-string")
        || matches!(
            ext(s, "type").and_then(Value::as_str),
            Some("string" | "integer" | "number" | "boolean")
        )
}

impl<'a> Builder<'a> {
    fn new(defs: Option<&'a Definitions>) -> Self {
        Builder {
            defs,
            model: TypeModel::base(),
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            with_map_kind: HashMap::new(),
        }
    }

    fn finish(self, root: TypeId) -> ObjectType {
        ObjectType {
            model: Arc::new(self.model),
            root,
        }
    }

    /// The type of a named definition; `None` when there is no such definition.
    fn definition(&mut self, name: &str) -> Result<Option<TypeId>, ModelError> {
        match name {
            QUANTITY => return Ok(Some(SCALAR)),
            RAW_EXTENSION => return Ok(Some(UNTYPED_ATOMIC)),
            _ => {}
        }
        let Some(defs) = self.defs else {
            return Ok(None);
        };
        let Some(def) = defs.get(name) else {
            return Ok(None);
        };
        if let Some(&id) = self.by_name.get(name) {
            return Ok(Some(id));
        }
        // A definition that only aliases another is that other type.
        if let Some(target) = Definitions::ref_name(def) {
            self.by_name.insert(name.to_string(), DEDUCED);
            let id = self.definition(target)?.unwrap_or(DEDUCED);
            self.by_name.insert(name.to_string(), id);
            return Ok(Some(id));
        }
        let id = self.model.reserve();
        self.by_name.insert(name.to_string(), id);
        let atom = self.atom(def, false, name, Some(name))?;
        self.model.atoms[id as usize] = atom;
        Ok(Some(id))
    }

    /// The type of a schema as a property or item declares it: a `$ref` (perhaps with a
    /// map-type beside it) or an inline schema.
    fn schema(&mut self, s: &'a Value, preserve: bool, path: &str) -> Result<TypeId, ModelError> {
        if let Some(name) = Definitions::ref_name(s) {
            let id = self.definition(name)?.unwrap_or(DEDUCED);
            return match map_kind(s, path)? {
                Some(atomic) => Ok(self.with_map_kind(id, atomic)),
                None => Ok(id),
            };
        }
        if is_scalar(s) {
            return Ok(SCALAR);
        }
        let key = (s as *const Value, preserve);
        if let Some(&id) = self.by_addr.get(&key) {
            return Ok(id);
        }
        let id = self.model.reserve();
        self.by_addr.insert(key, id);
        let atom = self.atom(s, preserve, path, None)?;
        self.model.atoms[id as usize] = atom;
        Ok(id)
    }

    /// A copy of `id` whose map is atomic or granular as a referring property says.
    fn with_map_kind(&mut self, id: TypeId, atomic: bool) -> TypeId {
        match &self.model.atom(id).map {
            Some(m) if m.atomic != atomic => {}
            _ => return id,
        }
        if let Some(&copy) = self.with_map_kind.get(&(id, atomic)) {
            return copy;
        }
        let mut atom = self.model.atom(id).clone();
        if let Some(m) = &mut atom.map {
            m.atomic = atomic;
        }
        self.model.atoms.push(atom);
        let copy = (self.model.atoms.len() - 1) as TypeId;
        self.with_map_kind.insert((id, atomic), copy);
        copy
    }

    fn atom(
        &mut self,
        s: &'a Value,
        preserve: bool,
        path: &str,
        definition: Option<&str>,
    ) -> Result<Atom, ModelError> {
        // The flag reaches every schema below this one.
        let preserve = preserve || is_true(s, "x-kubernetes-preserve-unknown-fields");
        if is_scalar(s) {
            return Ok(self.model.atom(SCALAR).clone());
        }
        let typ = match ext(s, "type") {
            Some(Value::String(t)) => t.as_str(),
            Some(Value::Array(ts)) => ts.first().and_then(Value::as_str).unwrap_or(""),
            _ => "",
        };
        Ok(match typ {
            "" => Atom {
                scalar: true,
                list: Some(self.list(s, preserve, path)?),
                map: Some(self.map(s, preserve, path, definition)?),
            },
            "object" => Atom {
                map: Some(self.map(s, preserve, path, definition)?),
                ..Atom::default()
            },
            "array" => Atom {
                list: Some(self.list(s, preserve, path)?),
                ..Atom::default()
            },
            "string" | "integer" | "number" | "boolean" => self.model.atom(SCALAR).clone(),
            other => {
                return Err(ModelError::Invalid {
                    path: path.to_string(),
                    reason: format!("unrecognized type {other:?}"),
                });
            }
        })
    }

    fn map(
        &mut self,
        s: &'a Value,
        preserve: bool,
        path: &str,
        definition: Option<&str>,
    ) -> Result<MapType, ModelError> {
        let mut fields = Vec::new();
        let props = ext(s, "properties").and_then(Value::as_object);
        let required: Vec<&str> = ext(s, "required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = props {
            for (name, prop) in props {
                let ty = self.schema(prop, preserve, &format!("{path}.{name}"))?;
                let default = prop.get("default").cloned().or_else(|| {
                    KEY_DEFAULTS
                        .iter()
                        .find(|(d, f, _)| Some(*d) == definition && f == name)
                        .map(|(_, _, v)| Value::from(*v))
                });
                fields.push(FieldType {
                    name: name.as_str().into(),
                    ty,
                    default,
                    required: required.contains(&name.as_str()),
                });
            }
        }
        if is_true(s, "x-kubernetes-embedded-resource") {
            self.embed_type_meta(&mut fields)?;
        }
        fields.sort_by(|a, b| a.name.cmp(&b.name));
        // Keys the schema does not declare are deduced rather than refused: the engine
        // validates unknown fields, and ownership must still be tracked for what it kept.
        let elem = match ext(s, "additionalProperties") {
            Some(ap @ Value::Object(_)) => self.schema(ap, preserve, &format!("{path}.*"))?,
            _ => DEDUCED,
        };
        Ok(MapType {
            fields: fields.into(),
            elem,
            atomic: map_kind(s, path)?.unwrap_or(false),
        })
    }

    fn list(&mut self, s: &'a Value, preserve: bool, path: &str) -> Result<ListType, ModelError> {
        let kind = list_kind(s, path)?;
        let elem = match ext(s, "items") {
            Some(items @ Value::Object(_)) => self.schema(items, preserve, &format!("{path}[]"))?,
            // Tuple-typed items are not structural; any value goes.
            Some(_) => DEDUCED,
            None => UNTYPED_ATOMIC,
        };
        Ok(ListType { elem, kind })
    }

    /// Declares `apiVersion`, `kind` and `metadata` on an embedded object.
    fn embed_type_meta(&mut self, fields: &mut Vec<FieldType>) -> Result<(), ModelError> {
        let meta = self.definition(OBJECT_META)?.unwrap_or(DEDUCED);
        for (name, ty) in [("apiVersion", SCALAR), ("kind", SCALAR), ("metadata", meta)] {
            fields.retain(|f| f.name.as_ref() != name);
            fields.push(FieldType {
                name: name.into(),
                ty,
                default: None,
                required: false,
            });
        }
        Ok(())
    }

    /// Types a CRD root's `apiVersion`, `kind` and `metadata` as the server publishes them.
    fn add_type_meta(&mut self, root: TypeId) -> Result<(), ModelError> {
        let Some(mut map) = self.model.atom(root).map.clone() else {
            return Err(ModelError::Invalid {
                path: "openAPIV3Schema".into(),
                reason: "the root of a structural schema must be an object".into(),
            });
        };
        let mut fields = map.fields.into_vec();
        self.embed_type_meta(&mut fields)?;
        fields.sort_by(|a, b| a.name.cmp(&b.name));
        map.fields = fields.into();
        self.model.atoms[root as usize].map = Some(map);
        Ok(())
    }
}

/// `x-kubernetes-map-type`: `Some(true)` atomic, `Some(false)` granular, `None` unset.
fn map_kind(s: &Value, path: &str) -> Result<Option<bool>, ModelError> {
    match ext(s, "x-kubernetes-map-type") {
        None => Ok(None),
        Some(v) => match v.as_str() {
            Some("atomic") => Ok(Some(true)),
            Some("granular") => Ok(Some(false)),
            _ => Err(ModelError::Invalid {
                path: path.to_string(),
                reason: format!("unknown map type {v}"),
            }),
        },
    }
}

fn list_kind(s: &Value, path: &str) -> Result<ListKind, ModelError> {
    let invalid = |reason: String| ModelError::Invalid {
        path: path.to_string(),
        reason,
    };
    if let Some(t) = ext(s, "x-kubernetes-list-type") {
        return match t.as_str() {
            Some("atomic") => Ok(ListKind::Atomic),
            Some("set") => Ok(ListKind::Set),
            Some("map") => {
                let keys = ext(s, "x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .ok_or_else(|| invalid("missing map keys".into()))?;
                let keys: Option<Vec<Box<str>>> =
                    keys.iter().map(|k| k.as_str().map(Into::into)).collect();
                let keys = keys.ok_or_else(|| invalid("map keys must be strings".into()))?;
                Ok(ListKind::Map { keys: keys.into() })
            }
            _ => Err(invalid(format!("unknown list type {t}"))),
        };
    }
    // Schemas from before list types: a merge patch strategy with a merge key made a
    // list-map, without one a set.
    if let Some(strategy) = ext(s, "x-kubernetes-patch-strategy") {
        return match strategy.as_str() {
            Some("merge" | "merge,retainKeys") => {
                match ext(s, "x-kubernetes-patch-merge-key").map(Value::as_str) {
                    Some(Some(key)) => Ok(ListKind::Map {
                        keys: Box::new([key.into()]),
                    }),
                    Some(None) => Err(invalid("merge key must be a string".into())),
                    None => Ok(ListKind::Set),
                }
            }
            Some("retainKeys") => Ok(ListKind::Atomic),
            _ => Err(invalid(format!("unknown patch strategy {strategy}"))),
        };
    }
    Ok(ListKind::Atomic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field<'m>(ty: &'m ObjectType, id: TypeId, name: &str) -> (TypeId, &'m MapType) {
        let m = ty.model.atom(id).map.as_ref().expect("a map");
        (m.type_of(name), m)
    }

    fn follow(ty: &ObjectType, path: &[&str]) -> TypeId {
        let mut id = ty.root;
        for step in path {
            id = if *step == "[]" {
                ty.model.atom(id).list.as_ref().expect("a list").elem
            } else {
                field(ty, id, step).0
            };
        }
        id
    }

    #[test]
    fn deployment_from_vendored_definitions() {
        let defs = crate::testdata::k8s_definitions();
        let ty = ObjectType::from_definitions(defs, "io.k8s.api.apps.v1.Deployment").unwrap();
        let containers = follow(&ty, &["spec", "template", "spec", "containers"]);
        let list = ty.model.atom(containers).list.as_ref().unwrap();
        assert_eq!(
            list.kind,
            ListKind::Map {
                keys: Box::new(["name".into()])
            }
        );
        let ports = follow(
            &ty,
            &["spec", "template", "spec", "containers", "[]", "ports"],
        );
        let ports = ty.model.atom(ports).list.as_ref().unwrap();
        let port = ty.model.atom(ports.elem).map.as_ref().unwrap();
        assert_eq!(port.field("protocol").unwrap().default, Some(json!("TCP")));
        // LabelSelector is atomic by its definition; nodeSelector by its property.
        let selector = follow(&ty, &["spec", "selector"]);
        assert!(ty.model.atom(selector).map.as_ref().unwrap().atomic);
        let node_selector = follow(&ty, &["spec", "template", "spec", "nodeSelector"]);
        assert!(ty.model.atom(node_selector).map.as_ref().unwrap().atomic);
        // Lists default to atomic; labels are a granular map of strings.
        let args = follow(
            &ty,
            &["spec", "template", "spec", "containers", "[]", "args"],
        );
        assert_eq!(
            ty.model.atom(args).list.as_ref().unwrap().kind,
            ListKind::Atomic
        );
        let labels = follow(&ty, &["metadata", "labels"]);
        let labels = ty.model.atom(labels).map.as_ref().unwrap();
        assert!(!labels.atomic && labels.fields.is_empty() && labels.elem == SCALAR);
        // Quantities and int-or-strings are scalars; unknown fields are deduced.
        let limits = follow(
            &ty,
            &[
                "spec",
                "template",
                "spec",
                "containers",
                "[]",
                "resources",
                "limits",
                "cpu",
            ],
        );
        assert_eq!(limits, SCALAR);
        assert_eq!(follow(&ty, &["spec", "nope"]), DEDUCED);
        assert!(ObjectType::from_definitions(defs, "io.k8s.api.apps.v1.Nope").is_err());
    }

    #[test]
    fn structural_schema_with_extensions() {
        let defs = crate::testdata::k8s_definitions();
        let schema = json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "routes": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["host", "port"],
                            "items": {"type": "object", "properties": {
                                "host": {"type": "string"}, "port": {"type": "integer", "default": 80}}}},
                        "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "size": {"x-kubernetes-int-or-string": true},
                        "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                            "additionalProperties": {"type": "string"}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                            "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        });
        let ty = ObjectType::from_structural(&schema, defs, false).unwrap();
        let tags = follow(&ty, &["spec", "tags"]);
        assert_eq!(
            ty.model.atom(tags).list.as_ref().unwrap().kind,
            ListKind::Set
        );
        let routes = follow(&ty, &["spec", "routes", "[]"]);
        let routes = ty.model.atom(routes).map.as_ref().unwrap();
        assert_eq!(routes.field("port").unwrap().default, Some(json!(80)));
        assert_eq!(follow(&ty, &["spec", "size"]), SCALAR);
        let config = follow(&ty, &["spec", "config"]);
        assert_eq!(ty.model.atom(config).map.as_ref().unwrap().elem, DEDUCED);
        assert!(
            ty.model
                .atom(follow(&ty, &["spec", "selector"]))
                .map
                .as_ref()
                .unwrap()
                .atomic
        );
        // metadata is ObjectMeta, here and in the embedded object.
        for path in [
            &["metadata", "labels"][..],
            &["spec", "template", "metadata", "labels"],
        ] {
            let labels = ty.model.atom(follow(&ty, path)).map.as_ref().unwrap();
            assert_eq!(labels.elem, SCALAR, "{path:?}");
        }
        assert_eq!(follow(&ty, &["spec", "template", "kind"]), SCALAR);
        let bad = json!({"type": "object", "properties": {"a": {"type": "array", "x-kubernetes-list-type": "bag"}}});
        assert!(ObjectType::from_structural(&bad, defs, false).is_err());
    }
}

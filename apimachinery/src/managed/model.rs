//! The type model server-side apply walks objects with: for every schema, whether a value
//! there is a scalar, a list (atomic, a set, or a map keyed by some fields) or a map
//! (a struct with declared fields, or a map of one element type; granular or atomic).
//!
//! One model, two builders: [`ObjectType::from_definitions`] for built-in kinds from the
//! OpenAPI v2 definitions, [`ObjectType::from_structural`] for a CRD's `openAPIV3Schema`.
//! A kind's model is compiled once and shared; walks then cost a binary search per field.

use std::sync::Arc;

use serde_json::Value;

/// Index of an [`Atom`] in its [`TypeModel`].
pub(crate) type TypeId = u32;

/// A value of any kind, all of it one leaf: what `RawExtension` and item-less lists hold.
pub(crate) const UNTYPED_ATOMIC: TypeId = 0;
/// A value of any kind whose maps are granular (each key owned separately) and whose
/// lists are atomic: what fields without a schema, and `x-kubernetes-preserve-unknown-fields`
/// subtrees, hold.
pub(crate) const DEDUCED: TypeId = 1;
/// A bare scalar.
pub(crate) const SCALAR: TypeId = 2;

/// What a schema allows. A schema without a `type` allows all three; the value then picks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Atom {
    pub scalar: bool,
    pub list: Option<ListType>,
    pub map: Option<MapType>,
}

/// A list's items and how they are told apart.
#[derive(Debug, Clone)]
pub(crate) struct ListType {
    pub elem: TypeId,
    pub kind: ListKind,
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// The list is one value: owned, merged and compared as a whole.
    Atomic,
    /// Items are scalars, each owned on its own (`v:` elements).
    Set,
    /// Items are objects named by these key fields (`k:` elements).
    Map { keys: Box<[Box<str>]> },
}

/// A struct or a map.
#[derive(Debug, Clone)]
pub(crate) struct MapType {
    /// Declared fields, sorted by name.
    pub fields: Box<[FieldType]>,
    /// The type of keys not declared; [`DEDUCED`] when the schema says nothing.
    pub elem: TypeId,
    /// `x-kubernetes-map-type: atomic`.
    pub atomic: bool,
}

/// A declared field.
#[derive(Debug, Clone)]
pub(crate) struct FieldType {
    pub name: Box<str>,
    pub ty: TypeId,
    /// The schema's `default`, used for a list-map key an item leaves out.
    pub default: Option<Value>,
    /// Listed in the schema's `required`.
    pub required: bool,
}

impl MapType {
    /// The declared field `name`.
    pub fn field(&self, name: &str) -> Option<&FieldType> {
        self.fields
            .binary_search_by(|f| f.name.as_ref().cmp(name))
            .ok()
            .map(|i| &self.fields[i])
    }

    /// The type of the value at key `name`: its declared type, else the element type.
    pub fn type_of(&self, name: &str) -> TypeId {
        self.field(name).map_or(self.elem, |f| f.ty)
    }

    /// Field lookups for keys asked in increasing order, as a JSON map yields them: each
    /// costs a step or two instead of a search.
    pub fn cursor(&self) -> FieldCursor<'_> {
        FieldCursor { map: self, pos: 0 }
    }
}

/// See [`MapType::cursor`].
pub(crate) struct FieldCursor<'m> {
    map: &'m MapType,
    pos: usize,
}

impl<'m> FieldCursor<'m> {
    /// The declared field `name`. Names out of order are still found, by a search.
    pub fn field(&mut self, name: &str) -> Option<&'m FieldType> {
        let fields = &self.map.fields;
        if self.pos > 0 && fields[self.pos - 1].name.as_ref() >= name {
            return self.map.field(name);
        }
        while self.pos < fields.len() && fields[self.pos].name.as_ref() < name {
            self.pos += 1;
        }
        let f = fields.get(self.pos).filter(|f| f.name.as_ref() == name)?;
        self.pos += 1;
        Some(f)
    }

    /// The type of the value at key `name`.
    pub fn type_of(&mut self, name: &str) -> TypeId {
        self.field(name).map_or(self.map.elem, |f| f.ty)
    }
}

/// Every type one kind's objects are made of.
#[derive(Debug)]
pub(crate) struct TypeModel {
    pub atoms: Vec<Atom>,
    /// Objects of this kind are Go structs on a Kubernetes API server, which always hold
    /// their struct fields and fields without `omitempty` (built-in kinds); custom
    /// resources are unstructured and hold only what was written.
    pub go_structs: bool,
}

impl TypeModel {
    /// A model holding only the three built-in atoms.
    pub fn base() -> Self {
        // Both untyped atoms take any value and hold atomic lists; they differ only in
        // what a map holds and whether it is replaced whole.
        let any = |map_elem: TypeId, atomic: bool| Atom {
            scalar: true,
            list: Some(ListType {
                elem: UNTYPED_ATOMIC,
                kind: ListKind::Atomic,
            }),
            map: Some(MapType {
                fields: Box::new([]),
                elem: map_elem,
                atomic,
            }),
        };
        let untyped = any(UNTYPED_ATOMIC, true);
        let deduced = any(DEDUCED, false);
        let scalar = Atom {
            scalar: true,
            ..Atom::default()
        };
        TypeModel {
            atoms: vec![untyped, deduced, scalar],
            go_structs: false,
        }
    }

    pub fn atom(&self, id: TypeId) -> &Atom {
        &self.atoms[id as usize]
    }

    /// Reserves a slot, filled in later (so recursive schemas can refer to themselves).
    pub fn reserve(&mut self) -> TypeId {
        self.atoms.push(Atom::default());
        (self.atoms.len() - 1) as TypeId
    }

    /// How `v` is seen through type `id`. Null is an empty map or list where the type
    /// has one (maps first, as upstream picks), so "absent" and "null" walk alike.
    pub fn shape<'m, 'v>(&'m self, id: TypeId, v: &'v Value) -> Shape<'m, 'v> {
        let atom = self.atom(id);
        match (v, &atom.map, &atom.list) {
            (Value::Object(m), Some(t), _) => Shape::Map(t, Some(m)),
            (Value::Array(items), _, Some(t)) => Shape::List(t, Some(items)),
            (Value::Null, Some(t), _) => Shape::Map(t, None),
            (Value::Null, None, Some(t)) => Shape::List(t, None),
            _ => Shape::Leaf,
        }
    }
}

/// A value as its type sees it. A value of the wrong kind for its schema (an object
/// where a string belongs) is seen as one leaf: validation reports it, not the walks.
pub(crate) enum Shape<'m, 'v> {
    Leaf,
    List(&'m ListType, Option<&'v Vec<Value>>),
    Map(&'m MapType, Option<&'v serde_json::Map<String, Value>>),
}

/// The compiled type of one kind's objects, cheap to clone and share.
#[derive(Debug, Clone)]
pub struct ObjectType {
    pub(crate) model: Arc<TypeModel>,
    pub(crate) root: TypeId,
}

impl ObjectType {
    /// A type that knows nothing: every map granular, every list atomic. For kinds that
    /// have no schema.
    pub fn deduced() -> Self {
        ObjectType {
            model: Arc::new(TypeModel::base()),
            root: DEDUCED,
        }
    }
}

/// Errors from compiling a schema into a type model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The root definition is not in the definitions.
    #[error("no definition named {0:?}")]
    UnknownDefinition(String),
    /// A schema extension has a value the model cannot use.
    #[error("{path}: {reason}")]
    Invalid {
        /// Where in the schema (definition name and property path).
        path: String,
        /// What is wrong.
        reason: String,
    },
}

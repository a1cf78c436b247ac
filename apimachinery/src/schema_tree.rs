//! OpenAPI definitions compiled for walking objects: every `$ref` resolved and every
//! property found once, so a check costs one hash lookup per field instead of several
//! searches of string-keyed maps (whose definition names share prefixes like `io.k8s.api.`).

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

use crate::schema::Definitions;

const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// Index of a [`Node`] in its tree.
pub(crate) type NodeId = u32;
/// Index of a [`Shape`] in its tree.
type ShapeId = u32;

/// One schema as a field declares it (perhaps a `$ref` with extensions beside it).
#[derive(Clone, Copy)]
pub(crate) struct Node {
    /// What the resolved schema declares; `None` accepts anything below (RawExtension,
    /// `x-kubernetes-preserve-unknown-fields`, or a dangling `$ref`).
    shape: Option<ShapeId>,
    /// A Quantity: declared as a string, sent as a string or a number.
    quantity: bool,
}

/// What keys an object schema allows besides its declared properties.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Others {
    /// No `additionalProperties`.
    Absent,
    /// Any value of this schema (a map).
    Schema(NodeId),
    /// `additionalProperties: true`.
    Allowed,
    /// Anything else (`false`): other keys are unknown.
    Denied,
}

/// A resolved schema.
pub(crate) struct Shape {
    /// Its `type`.
    pub type_name: Option<Box<str>>,
    /// `format: int-or-string`.
    pub int_or_string: bool,
    /// Declared properties.
    pub properties: Option<HashMap<Box<str>, NodeId>>,
    /// `additionalProperties`.
    pub others: Others,
    /// The schema of array items.
    pub items: Option<NodeId>,
}

/// Every definition compiled; built once per [`Definitions`].
#[derive(Default)]
pub struct SchemaTree {
    nodes: Vec<Node>,
    shapes: Vec<Shape>,
    roots: HashMap<Box<str>, NodeId>,
}

impl fmt::Debug for SchemaTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaTree")
            .field("nodes", &self.nodes.len())
            .field("shapes", &self.shapes.len())
            .finish()
    }
}

impl SchemaTree {
    /// Compiles every definition of `defs`.
    pub(crate) fn build(defs: &Definitions) -> Self {
        let mut b = Builder {
            defs,
            tree: SchemaTree::default(),
            nodes_by_addr: HashMap::new(),
            shapes_by_addr: HashMap::new(),
        };
        for (name, def) in defs.iter() {
            let id = b.node(def);
            b.tree.roots.insert(name.as_str().into(), id);
        }
        b.tree
    }

    /// The node of the definition `name`.
    pub(crate) fn root(&self, name: &str) -> Option<NodeId> {
        self.roots.get(name).copied()
    }

    /// The shape a node declares, and whether it is a Quantity; `None` accepts anything.
    pub(crate) fn shape(&self, id: NodeId) -> Option<(&Shape, bool)> {
        let node = self.nodes[id as usize];
        node.shape
            .map(|s| (&self.shapes[s as usize], node.quantity))
    }
}

struct Builder<'a> {
    defs: &'a Definitions,
    tree: SchemaTree,
    // The definitions are immutable while building, so a schema's address names it: a
    // schema reached twice (or through a cycle) is compiled once.
    nodes_by_addr: HashMap<*const Value, NodeId>,
    shapes_by_addr: HashMap<*const Value, ShapeId>,
}

fn preserves_unknown(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

impl<'a> Builder<'a> {
    fn node(&mut self, raw: &'a Value) -> NodeId {
        if let Some(&id) = self.nodes_by_addr.get(&(raw as *const Value)) {
            return id;
        }
        let id = self.tree.nodes.len() as NodeId;
        let ref_name = Definitions::ref_name(raw);
        self.tree.nodes.push(Node {
            shape: None,
            quantity: ref_name == Some(QUANTITY),
        });
        self.nodes_by_addr.insert(raw, id);
        let shape = match self.defs.resolve(raw) {
            _ if ref_name == Some(RAW_EXTENSION) => None,
            Some(s) if !preserves_unknown(raw) && !preserves_unknown(s) => Some(self.shape(s)),
            _ => None,
        };
        self.tree.nodes[id as usize].shape = shape;
        id
    }

    fn shape(&mut self, schema: &'a Value) -> ShapeId {
        if let Some(&id) = self.shapes_by_addr.get(&(schema as *const Value)) {
            return id;
        }
        let id = self.tree.shapes.len() as ShapeId;
        self.tree.shapes.push(Shape {
            type_name: schema.get("type").and_then(Value::as_str).map(Into::into),
            int_or_string: schema.get("format").and_then(Value::as_str) == Some("int-or-string"),
            properties: None,
            others: Others::Absent,
            items: None,
        });
        self.shapes_by_addr.insert(schema, id);
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(k, v)| (k.as_str().into(), self.node(v)))
                    .collect()
            });
        let others = match schema.get("additionalProperties") {
            None => Others::Absent,
            Some(s @ Value::Object(_)) => Others::Schema(self.node(s)),
            Some(Value::Bool(true)) => Others::Allowed,
            Some(_) => Others::Denied,
        };
        let items = schema.get("items").map(|i| self.node(i));
        let shape = &mut self.tree.shapes[id as usize];
        shape.properties = properties;
        shape.others = others;
        shape.items = items;
        id
    }
}

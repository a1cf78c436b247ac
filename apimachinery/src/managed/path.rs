//! Field paths as server-side apply names them: struct fields, list items by key, set
//! items by value and list items by index, with upstream's total order and rendering.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Number, Value};

/// One step of a field path.
///
/// The derived order is not used: [`Ord`] is written out below so that sets sort (and
/// so serialize and iterate) in upstream's order: fields, then keys, then values, then
/// indexes.
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A struct field or a map key: `f:<name>`, rendered `.name`.
    Field(Box<str>),
    /// A list-map item by its key fields, sorted by name: `k:{...}`, rendered
    /// `[name="nginx"]`.
    Key(Box<[(Box<str>, Value)]>),
    /// A set item by its value: `v:<json>`, rendered `[=value]`.
    Value(Value),
    /// A list item by position: `i:<n>`, rendered `[n]`.
    Index(u64),
}

impl PathElement {
    /// A field element.
    pub fn field(name: &str) -> Self {
        PathElement::Field(name.into())
    }

    /// A key element from `(name, value)` pairs in any order.
    pub fn key<I, S>(fields: I) -> Self
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<Box<str>>,
    {
        let mut fields: Vec<(Box<str>, Value)> =
            fields.into_iter().map(|(k, v)| (k.into(), v)).collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields.into())
    }

    /// The field name, if this is a field element.
    pub fn as_field(&self) -> Option<&str> {
        match self {
            PathElement::Field(name) => Some(name),
            _ => None,
        }
    }

    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.as_bytes().cmp(b.as_bytes()),
            (PathElement::Key(a), PathElement::Key(b)) => cmp_key_fields(a, b),
            (PathElement::Value(a), PathElement::Value(b)) => cmp_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// Key lists compare pairwise by name then value; a shorter prefix sorts first.
fn cmp_key_fields(a: &[(Box<str>, Value)], b: &[(Box<str>, Value)]) -> Ordering {
    for ((an, av), (bn, bv)) in a.iter().zip(b) {
        let c = an
            .as_bytes()
            .cmp(bn.as_bytes())
            .then_with(|| cmp_values(av, bv));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// The total order upstream gives JSON values: numbers (compared numerically, so `80`
/// and `80.0` are the same key), strings, booleans, lists, maps, then null.
pub(crate) fn cmp_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = cmp_values(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => cmp_maps(x, y),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn cmp_numbers(a: &Number, b: &Number) -> Ordering {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x.cmp(&y);
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x.cmp(&y);
    }
    let x = a.as_f64().unwrap_or(f64::NAN);
    let y = b.as_f64().unwrap_or(f64::NAN);
    x.total_cmp(&y)
}

/// Maps compare by their entries in key order; a map whose entries run out first sorts
/// first.
fn cmp_maps(a: &Map<String, Value>, b: &Map<String, Value>) -> Ordering {
    let mut ak: Vec<(&String, &Value)> = a.iter().collect();
    let mut bk: Vec<(&String, &Value)> = b.iter().collect();
    ak.sort_by(|x, y| x.0.cmp(y.0));
    bk.sort_by(|x, y| x.0.cmp(y.0));
    for ((an, av), (bn, bv)) in ak.iter().zip(&bk) {
        let c = an.cmp(bn).then_with(|| cmp_values(av, bv));
        if c != Ordering::Equal {
            return c;
        }
    }
    ak.len().cmp(&bk.len())
}

/// Whether two JSON values are equal, numbers compared by value (`1` equals `1.0`).
pub(crate) fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => cmp_numbers(x, y) == Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(l, r)| values_equal(l, r))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

impl fmt::Display for PathElement {
    /// Renders as upstream's conflict messages do: `.name`, `[name="nginx"]`, `[=value]`,
    /// `[3]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}=")?;
                    write_display_value(f, value)?;
                }
                f.write_str("]")
            }
            PathElement::Value(value) => {
                f.write_str("[=")?;
                write_display_value(f, value)?;
                f.write_str("]")
            }
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// Upstream prints strings quoted, numbers and booleans bare, lists as `[a,b]` and maps
/// as `{k=v}`.
fn write_display_value(f: &mut fmt::Formatter<'_>, v: &Value) -> fmt::Result {
    match v {
        Value::String(s) => write!(f, "{s:?}"),
        Value::Array(items) => {
            f.write_str("[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write_display_value(f, item)?;
            }
            f.write_str("]")
        }
        Value::Object(m) => {
            let mut entries: Vec<_> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            f.write_str("{")?;
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{k}=")?;
                write_display_value(f, item)?;
            }
            f.write_str("}")
        }
        other => write!(f, "{other}"),
    }
}

/// A whole path from the object's root; renders as `.spec.template.spec.containers[name="nginx"].image`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// A path of field names, such as `["spec", "replicas"]`.
    pub fn fields(names: &[&str]) -> Self {
        Path(names.iter().map(|n| PathElement::field(n)).collect())
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in &self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_is_fields_keys_values_indexes() {
        let mut pes = [
            PathElement::Index(0),
            PathElement::Value(json!("a")),
            PathElement::key([("name", json!("x"))]),
            PathElement::field("b"),
            PathElement::field("a"),
        ];
        pes.sort();
        let rendered: Vec<String> = pes.iter().map(ToString::to_string).collect();
        assert_eq!(
            rendered,
            [".a", ".b", "[name=\"x\"]", "[=\"a\"]", "[0]"].map(String::from)
        );
    }

    #[test]
    fn keys_compare_numerically_and_by_name() {
        let k80 = PathElement::key([("containerPort", json!(80)), ("protocol", json!("TCP"))]);
        let k8080 = PathElement::key([("protocol", json!("TCP")), ("containerPort", json!(8080))]);
        let k9 = PathElement::key([("containerPort", json!(9)), ("protocol", json!("TCP"))]);
        assert!(k9 < k80 && k80 < k8080);
        assert_eq!(
            PathElement::key([("containerPort", json!(80.0))]),
            PathElement::key([("containerPort", json!(80))])
        );
        assert_eq!(k8080.to_string(), "[containerPort=8080,protocol=\"TCP\"]");
    }

    #[test]
    fn value_order_matches_upstream() {
        let ordered = [
            json!(1),
            json!(2.5),
            json!("a"),
            json!(false),
            json!(true),
            json!([1]),
            json!({"a": 1}),
            Value::Null,
        ];
        for w in ordered.windows(2) {
            assert_eq!(
                cmp_values(&w[0], &w[1]),
                Ordering::Less,
                "{} < {}",
                w[0],
                w[1]
            );
        }
    }

    #[test]
    fn paths_render_like_conflict_messages() {
        let p = Path(vec![
            PathElement::field("spec"),
            PathElement::field("containers"),
            PathElement::key([("name", json!("nginx"))]),
            PathElement::field("image"),
        ]);
        assert_eq!(p.to_string(), ".spec.containers[name=\"nginx\"].image");
        let set_item = Path(vec![
            PathElement::field("finalizers"),
            PathElement::Value(json!("a/b")),
        ]);
        assert_eq!(set_item.to_string(), ".finalizers[=\"a/b\"]");
        assert_eq!(Path(vec![PathElement::Index(2)]).to_string(), "[2]");
    }
}

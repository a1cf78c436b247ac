//! A field path (`spec.containers[0].image`) built up while walking an object and rendered
//! only when an error quotes it, so walks allocate nothing for the fields that are fine.

use std::fmt;

/// Where a walk is in an object: the root, a field of a parent, or an item of a list.
#[derive(Clone, Copy)]
pub(crate) enum FieldPath<'a> {
    Root,
    Field(&'a FieldPath<'a>, &'a str),
    Index(&'a FieldPath<'a>, usize),
}

impl FieldPath<'_> {
    /// The field `key` below this path.
    pub(crate) fn field<'b>(&'b self, key: &'b str) -> FieldPath<'b> {
        FieldPath::Field(self, key)
    }

    /// Item `i` of the list at this path.
    pub(crate) fn index(&self, i: usize) -> FieldPath<'_> {
        FieldPath::Index(self, i)
    }
}

impl fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldPath::Root => Ok(()),
            FieldPath::Field(FieldPath::Root, key) => f.write_str(key),
            FieldPath::Field(parent, key) => write!(f, "{parent}.{key}"),
            FieldPath::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FieldPath;

    #[test]
    fn renders_like_kubernetes_field_paths() {
        let root = FieldPath::Root;
        assert_eq!(root.to_string(), "");
        let spec = root.field("spec");
        let containers = spec.field("containers");
        let first = containers.index(0);
        assert_eq!(first.field("image").to_string(), "spec.containers[0].image");
        assert_eq!(root.index(2).to_string(), "[2]");
    }
}

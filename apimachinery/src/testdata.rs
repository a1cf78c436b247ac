//! Shared test fixtures: the real Kubernetes OpenAPI definitions.

use std::sync::OnceLock;

use crate::schema::Definitions;

/// Parsed once per test binary because the document is large.
pub(crate) fn k8s_definitions() -> &'static Definitions {
    static DEFS: OnceLock<Definitions> = OnceLock::new();
    DEFS.get_or_init(|| {
        let text = include_str!("../../apiserver/openapi/k8s-definitions.json");
        Definitions::new(serde_json::from_str(text).expect("k8s definitions are valid JSON"))
    })
}

/// Small arbitrary JSON documents with few distinct keys, so patches and
/// targets overlap often enough to exercise merging.
pub(crate) fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(Value::from),
        "[a-c]{0,2}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("[a-c]", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Arbitrary JSON objects (the shape every patch target and SMP patch has).
pub(crate) fn arbitrary_object() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    proptest::collection::btree_map("[a-c]", arbitrary_json(), 0..4)
        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()))
}

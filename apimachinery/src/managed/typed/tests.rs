//! Walks of typed values on a small structural schema: merge order, owned fields,
//! duplicates, removal and validation.

use serde_json::{Value, json};

use super::*;
use crate::managed::model::ObjectType;
use crate::schema::Definitions;

fn ty() -> ObjectType {
    let schema = json!({
        "type": "object",
        "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "v": {"type": "integer"}}}},
            "args": {"type": "array", "items": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    });
    ObjectType::from_structural(&schema, &Definitions::default(), false).unwrap()
}

fn paths(set: &FieldSet) -> Vec<String> {
    set.paths().iter().map(ToString::to_string).collect()
}

fn names(v: &Value) -> Vec<&str> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect()
}

#[test]
fn list_merge_order() {
    let t = ty();
    let obj = |names: &[&str]| json!({"items": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()});
    // (live, config, merged): items only live keep their place, shared ones follow the
    // configuration, new ones come where the configuration puts them.
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        (&["a", "b"], &["c"], &["a", "b", "c"]),
        (&["a", "b", "c"], &["c", "a"], &["b", "c", "a"]),
        (&["a", "x", "b"], &["b", "n", "a"], &["x", "b", "n", "a"]),
        (
            &["a", "b", "c", "d"],
            &["a", "aprime", "c", "cprime"],
            &["a", "b", "aprime", "c", "d", "cprime"],
        ),
        (&[], &["a"], &["a"]),
    ];
    for (live, config, want) in cases {
        let merged = merge(&t.model, t.root, Some(&obj(live)), Some(&obj(config))).unwrap();
        assert_eq!(names(&merged), *want, "{live:?} + {config:?}");
    }
}

#[test]
fn merge_atomic_deduced_and_mismatched() {
    let t = ty();
    let live = json!({"args": ["a", "b"], "free": {"x": {"y": 1}, "l": [1, 2]}, "items": [{"name": "a", "v": 1}]});
    let config =
        json!({"args": ["c"], "free": {"x": {"z": 2}, "l": [3]}, "items": [{"name": "a", "v": 2}]});
    let merged = merge(&t.model, t.root, Some(&live), Some(&config)).unwrap();
    assert_eq!(
        merged,
        json!({"args": ["c"], "free": {"x": {"y": 1, "z": 2}, "l": [3]}, "items": [{"name": "a", "v": 2}]})
    );
    // A value of another kind replaces the old one whole.
    let merged = merge(
        &t.model,
        t.root,
        Some(&json!({"free": {"x": [1]}})),
        Some(&json!({"free": {"x": {"a": 1}}})),
    );
    assert_eq!(merged.unwrap(), json!({"free": {"x": {"a": 1}}}));
}

#[test]
fn fields_of_a_value() {
    let t = ty();
    let v = json!({
        "args": ["a"],
        "items": [{"name": "a", "v": 1}],
        "free": {"x": {"y": 1}, "e": {}},
        "unknown": {"k": "v"}
    });
    assert_eq!(
        paths(&to_set(&t.model, t.root, &v)),
        [
            ".args",
            ".unknown",
            ".free.e",
            ".free.x",
            ".free.x.y",
            ".items[name=\"a\"]",
            ".items[name=\"a\"].name",
            ".items[name=\"a\"].v",
            ".unknown.k",
        ]
    );
}

#[test]
fn duplicated_items_in_a_stored_object() {
    let t = ty();
    let dup = json!({"items": [{"name": "a", "v": 1}, {"name": "a", "v": 2}, {"name": "b"}]});
    // Owned by name only, never field by field.
    assert_eq!(
        paths(&to_set(&t.model, t.root, &dup)),
        [
            ".items[name=\"a\"]",
            ".items[name=\"b\"]",
            ".items[name=\"b\"].name"
        ]
    );
    // Becoming unique: the name is removed and the single item added.
    let unique = json!({"items": [{"name": "a", "v": 1}, {"name": "b"}]});
    let d = compare(&t.model, t.root, Some(&dup), Some(&unique), false);
    assert_eq!(paths(&d.removed), [".items[name=\"a\"]"]);
    assert_eq!(
        paths(&d.added),
        [
            ".items[name=\"a\"]",
            ".items[name=\"a\"].name",
            ".items[name=\"a\"].v"
        ]
    );
    // An apply replaces the duplicates by its one item.
    let merged = merge(
        &t.model,
        t.root,
        Some(&dup),
        Some(&json!({"items": [{"name": "a", "v": 9}]})),
    )
    .unwrap();
    assert_eq!(
        merged,
        json!({"items": [{"name": "a", "v": 9}, {"name": "b"}]})
    );
}

#[test]
fn removing_items() {
    let t = ty();
    let v = json!({"items": [{"name": "a", "v": 1}, {"name": "b", "v": 2}], "args": ["x"], "free": {"k": 1}});
    let mut set = FieldSet::new();
    set.insert(&[
        PathElement::field("items"),
        PathElement::key([("name", json!("a"))]),
    ]);
    set.insert(&[
        PathElement::field("items"),
        PathElement::key([("name", json!("b"))]),
        PathElement::field("v"),
    ]);
    set.insert(&[PathElement::field("free"), PathElement::field("k")]);
    let out = remove_items(&t.model, t.root, &v, &set).unwrap();
    // The emptied map goes; the list keeps what is left.
    assert_eq!(out, json!({"items": [{"name": "b"}], "args": ["x"]}));
}

#[test]
fn validation_names_the_field() {
    let t = ty();
    let cases = [
        (
            json!({"items": [{"name": "a"}, {"name": "a"}]}),
            ".items",
            "duplicate entries for key [name=\"a\"]",
        ),
        (
            json!({"items": [1]}),
            ".items[0]",
            "associative list with keys may not have non-map elements",
        ),
        (
            json!({"items": [null]}),
            ".items[0]",
            "associative list with keys may not have a null element",
        ),
        (
            json!({"args": {"a": 1}}),
            ".args",
            "expected list, got {\"a\":1}",
        ),
        (
            json!({"items": [{"name": "a", "v": [1]}]}),
            ".items[0].v",
            "expected scalar, got [1]",
        ),
    ];
    for (v, path, message) in cases {
        let err = validate(&t.model, t.root, &v).unwrap_err();
        assert_eq!(
            (err.path.as_str(), err.message.as_str()),
            (path, message),
            "{v}"
        );
    }
    assert!(
        validate(
            &t.model,
            t.root,
            &json!({"free": {"any": [{"thing": null}]}, "args": null})
        )
        .is_ok()
    );
}

/// What the generic walk records for a create: everything added or modified against no
/// previous object, as a trie.
fn created_by_compare(t: &ObjectType, v: &Value) -> crate::managed::raw::Trie {
    let diff = compare(&t.model, t.root, None, Some(v), true);
    assert!(diff.removed.is_empty(), "a create removes nothing: {v}");
    crate::managed::entries::trie(&diff.modified.union(&diff.added))
}

#[test]
fn created_fields_match_the_generic_compare() {
    let deployment = ObjectType::from_definitions(
        crate::testdata::k8s_definitions(),
        "io.k8s.api.apps.v1.Deployment",
    )
    .unwrap();
    let container = |extra: Value| {
        let mut c = json!({"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let deployments = [
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
        json!({"metadata": {"name": "d", "labels": {"a": "b"}, "annotations": {}},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}},
                        "template": {"metadata": {"labels": {"a": "b"}},
                                     "spec": {"containers": [container(json!({}))]}}}}),
        // Empty and null structs, maps and lists, at every depth.
        json!({"spec": {}}),
        json!({"spec": null, "status": {}}),
        json!({"metadata": {"labels": null, "finalizers": []}, "spec": {"template": {}}}),
        json!({"spec": {"template": {"spec": {}}}}),
        json!({"spec": {"template": {"spec": {"containers": []}}}}),
        json!({"spec": {"template": {"spec": {"containers": null, "volumes": []}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{}]}}}}),
        // Items named twice, items without their key, ports keyed by port and protocol,
        // a number spelled as a float.
        json!({"spec": {"template": {"spec": {"containers": [
            container(json!({})), container(json!({"image": "other"})),
            {"name": "x", "ports": [{"containerPort": 80}, {"containerPort": 80.0, "protocol": "TCP"}]},
        ]}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}}),
        json!({"spec": {"template": {"spec": {"containers": [container(json!({
            "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
            "resources": {"limits": {"cpu": "1"}, "requests": {}},
            "command": ["a", "b"],
        }))]}}}}),
        // Atomic and int-or-string values, unknown fields, values of the wrong kind.
        json!({"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]},
                        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}}}}),
        json!({"spec": {"unknown": {"a": {"b": 1}}, "replicas": {"x": 1}, "selector": "s",
                        "template": {"spec": {"containers": {"name": "c"}}}}}),
    ];
    let crd = ty();
    let custom = [
        json!({"items": [{"name": "a", "v": 1}, {"name": "b"}], "args": ["x"], "free": {"a": {"b": [1]}}}),
        json!({"items": [{"name": "a"}, {"name": "a", "v": 2}], "free": {}}),
        json!({"items": [{"v": 1}], "args": [], "free": null, "other": {"x": 1}}),
        json!({"items": [], "args": null}),
    ];
    let deduced = ObjectType::deduced();
    let untyped = [json!({"a": {"b": {"c": 1}, "d": []}, "e": [{"x": 1}], "f": null, "g": {}})];
    let cases = deployments
        .iter()
        .map(|v| (&deployment, v))
        .chain(custom.iter().map(|v| (&crd, v)))
        .chain(untyped.iter().map(|v| (&deduced, v)));
    for (t, v) in cases {
        assert_eq!(
            created_fields(&t.model, t.root, v),
            created_by_compare(t, v),
            "{v}"
        );
    }
}

/// What the generic walk records for an update, as tries.
fn changes_by_compare(t: &ObjectType, old: &Value, new: &Value) -> Changes {
    let diff = compare(&t.model, t.root, Some(old), Some(new), false);
    let trie = crate::managed::entries::trie;
    Changes {
        changed: trie(&diff.modified.union(&diff.added)),
        removed: trie(&diff.removed),
    }
}

#[test]
fn changed_fields_match_the_generic_compare() {
    let deployment = ObjectType::from_definitions(
        crate::testdata::k8s_definitions(),
        "io.k8s.api.apps.v1.Deployment",
    )
    .unwrap();
    let c = |name: &str, extra: Value| {
        let mut c = json!({"name": name, "image": "nginx", "ports": [{"containerPort": 80}]});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let with = |containers: Vec<Value>| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "labels": {"a": "b"}},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                        "template": {"metadata": {"labels": {"a": "b"}},
                                     "spec": {"containers": containers}}}})
    };
    let base = with(vec![
        c("a", json!({})),
        c("b", json!({"env": [{"name": "E", "value": "1"}]})),
    ]);
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        v
    };
    let deployments = [
        // Unchanged, a scale, an image, a label added and one removed.
        base.clone(),
        edit(&|v| v["spec"]["replicas"] = json!(3)),
        edit(&|v| v["spec"]["replicas"] = json!(2.0)),
        edit(&|v| v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x")),
        edit(&|v| v["metadata"]["labels"] = json!({"c": "d"})),
        // Maps and structs that appear or go, empty or null, at every depth.
        edit(&|v| v["metadata"]["annotations"] = json!({"k": "v"})),
        edit(&|v| v["metadata"]["annotations"] = json!({})),
        edit(&|v| v["metadata"]["labels"] = json!(null)),
        edit(&|v| v["spec"]["strategy"] = json!({"type": "Recreate"})),
        edit(&|v| v["spec"]["template"]["spec"]["securityContext"] = json!({})),
        edit(&|v| v["spec"] = json!(null)),
        edit(&|v| {
            v.as_object_mut().unwrap().remove("spec");
        }),
        edit(&|v| v["status"] = json!({"replicas": 1, "conditions": [{"type": "Available"}]})),
        // Items added, removed, reordered, changed inside, named twice or no longer.
        with(vec![c("a", json!({}))]),
        with(vec![
            c("b", json!({"env": [{"name": "E", "value": "1"}]})),
            c("a", json!({})),
        ]),
        with(vec![
            c("a", json!({})),
            c("b", json!({"env": [{"name": "E", "value": "2"}]})),
        ]),
        with(vec![
            c("a", json!({})),
            c("b", json!({})),
            c("c", json!({})),
        ]),
        with(vec![c("a", json!({})), c("a", json!({"image": "other"}))]),
        with(vec![
            c("a", json!({})),
            c("a", json!({})),
            c("b", json!({})),
        ]),
        with(vec![c(
            "x",
            json!({"ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]}),
        )]),
        with(vec![json!({"image": "no-name"})]),
        with(vec![]),
        with(vec![c(
            "a",
            json!({"command": ["a", "b"], "resources": {"limits": {"cpu": "1"}}}),
        )]),
        // Atomic values, unknown fields, values of the wrong kind.
        edit(&|v| {
            v["spec"]["selector"] =
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]})
        }),
        edit(&|v| v["spec"]["unknown"] = json!({"a": {"b": 1}})),
        edit(&|v| v["spec"]["replicas"] = json!({"x": 1})),
        edit(&|v| v["spec"]["template"]["spec"]["containers"] = json!({"name": "c"})),
        edit(&|v| v["metadata"]["finalizers"] = json!(["f/1", "f/2"])),
    ];
    let crd = ty();
    let custom = [
        json!({"items": [{"name": "a", "v": 1}, {"name": "b"}], "args": ["x"], "free": {"a": {"b": [1]}}}),
        json!({"items": [{"name": "a", "v": 2}, {"name": "c"}], "args": ["y"], "free": {"a": {"c": 1}}}),
        json!({"items": [{"name": "a"}, {"name": "a", "v": 2}], "free": {}}),
        json!({"items": [{"v": 1}], "args": [], "free": null, "other": {"x": 1}}),
        json!({"items": [], "args": null}),
        json!({}),
    ];
    let deduced = ObjectType::deduced();
    let untyped = [
        json!({"a": {"b": {"c": 1}, "d": []}, "e": [{"x": 1}], "f": null, "g": {}}),
        json!({"a": {"b": {"c": 2}}, "e": [{"x": 2}], "f": {}, "h": 1}),
        json!({}),
    ];
    let mut cases = Vec::new();
    for (t, objects) in [
        (&deployment, &deployments[..]),
        (&crd, &custom[..]),
        (&deduced, &untyped[..]),
    ] {
        // Every ordered pair: each change made and undone.
        for old in objects {
            for new in objects {
                cases.push((t, old, new));
            }
        }
    }
    for (t, old, new) in cases {
        assert_eq!(
            changed_fields(&t.model, t.root, old, new),
            changes_by_compare(t, old, new),
            "{old} -> {new}"
        );
    }
}

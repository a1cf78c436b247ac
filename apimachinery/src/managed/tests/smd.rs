//! Scenarios from structured-merge-diff's own tests (`merge/*_test.go`), replayed on an
//! equivalent structural schema: each is a sequence of applies and updates with the
//! object and the managers' fields expected at the end.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::managed::entries::Entry;
use crate::managed::model::ObjectType;
use crate::managed::typed;
use crate::managed::updater::{self, Applying, ResetFields, Scope};
use crate::schema::Definitions;

fn schema() -> ObjectType {
    let set =
        json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}});
    let schema = json!({
        "type": "object",
        "properties": {
            "numeric": {"type": "number"},
            "string": {"type": "string"},
            "bool": {"type": "boolean"},
            "list": set,
            "struct": {"type": "object", "properties": {
                "name": {"type": "string"}, "value": {"type": "number"}}},
            "listOfLists": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "value": set}}},
            "atomic": {"type": "object", "x-kubernetes-map-type": "atomic",
                "additionalProperties": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {"type": "object", "properties": {
                    "port": {"type": "integer"},
                    "protocol": {"type": "string", "default": "TCP"},
                    "name": {"type": "string"}}}}
        }
    });
    ObjectType::from_structural(&schema, &Definitions::default(), false).unwrap()
}

enum Op {
    Apply(&'static str, Value),
    Force(&'static str, Value),
    Update(&'static str, Value),
    /// An apply that must conflict over these `(manager, path)` pairs.
    Conflicts(&'static str, Value, Vec<(&'static str, &'static str)>),
}

struct Case {
    name: &'static str,
    ops: Vec<Op>,
    object: Value,
    managed: Vec<(&'static str, Vec<&'static str>)>,
}

fn applying<'a>(ty: &ObjectType, live: &Value, config: &'a Value) -> Applying<'a> {
    Applying {
        config,
        fields: typed::applied_fields(&ty.model, ty.root, config).unwrap(),
        merged: typed::merge(&ty.model, ty.root, Some(live), Some(config)).unwrap(),
    }
}

fn run(case: Case) {
    let ty = schema();
    let reset = ResetFields::None;
    let scope = Scope {
        ty: &ty,
        api_version: "v1",
        subresource: "",
        reset: &reset,
    };
    let mut obj = json!({});
    let mut entries: Vec<Entry> = Vec::new();
    let now = jiff::Timestamp::from_second(1).unwrap();
    let name = case.name;
    for (i, op) in case.ops.into_iter().enumerate() {
        let (manager, config, force) = match op {
            Op::Update(manager, new) => {
                updater::update(&scope, Some(&obj), &new, &mut entries, manager, now);
                obj = new;
                continue;
            }
            Op::Conflicts(manager, config, want) => {
                let err = updater::apply(
                    &scope,
                    &obj,
                    applying(&ty, &obj, &config),
                    &mut entries,
                    manager,
                    false,
                    now,
                )
                .err()
                .unwrap_or_else(|| panic!("{name}: op {i} should conflict"));
                let got: Vec<(String, String)> = err
                    .0
                    .iter()
                    .map(|c| (c.manager.manager.clone(), c.path.to_string()))
                    .collect();
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|(m, p)| (m.to_string(), p.to_string()))
                    .collect();
                assert_eq!(got, want, "{name}: op {i}");
                continue;
            }
            Op::Apply(manager, config) => (manager, config, false),
            Op::Force(manager, config) => (manager, config, true),
        };
        obj = updater::apply(
            &scope,
            &obj,
            applying(&ty, &obj, &config),
            &mut entries,
            manager,
            force,
            now,
        )
        .unwrap_or_else(|e| panic!("{name}: op {i}: {e}"))
        .object;
    }
    assert_eq!(obj, case.object, "{name}: object");
    let got: BTreeMap<String, Vec<String>> = entries
        .iter()
        .map(|e| {
            let paths = e.set().paths().iter().map(ToString::to_string).collect();
            (e.manager.clone(), paths)
        })
        .collect();
    let want: BTreeMap<String, Vec<String>> = case
        .managed
        .into_iter()
        .map(|(m, ps)| (m.to_string(), ps.into_iter().map(String::from).collect()))
        .collect();
    assert_eq!(got, want, "{name}: managed fields");
}

#[test]
fn sets() {
    let cases = vec![
        Case {
            name: "apply_twice",
            ops: vec![
                Op::Apply("default", json!({"list": ["a", "c"]})),
                Op::Apply("default", json!({"list": ["a", "b", "c", "d"]})),
            ],
            object: json!({"list": ["a", "b", "c", "d"]}),
            managed: vec![(
                "default",
                vec![
                    r#".list[="a"]"#,
                    r#".list[="b"]"#,
                    r#".list[="c"]"#,
                    r#".list[="d"]"#,
                ],
            )],
        },
        Case {
            name: "apply_update_apply_no_overlap",
            ops: vec![
                Op::Apply("default", json!({"list": ["a", "c"]})),
                Op::Update("controller", json!({"list": ["a", "b", "c", "d"]})),
                Op::Apply("default", json!({"list": ["a", "aprime", "c", "cprime"]})),
            ],
            object: json!({"list": ["a", "b", "aprime", "c", "d", "cprime"]}),
            managed: vec![
                (
                    "default",
                    vec![
                        r#".list[="a"]"#,
                        r#".list[="aprime"]"#,
                        r#".list[="c"]"#,
                        r#".list[="cprime"]"#,
                    ],
                ),
                ("controller", vec![r#".list[="b"]"#, r#".list[="d"]"#]),
            ],
        },
        Case {
            name: "apply_twice_reorder",
            ops: vec![
                Op::Apply("default", json!({"list": ["a", "b", "c", "d"]})),
                Op::Apply("default", json!({"list": ["a", "d", "c", "b"]})),
            ],
            object: json!({"list": ["a", "d", "c", "b"]}),
            managed: vec![(
                "default",
                vec![
                    r#".list[="a"]"#,
                    r#".list[="b"]"#,
                    r#".list[="c"]"#,
                    r#".list[="d"]"#,
                ],
            )],
        },
        Case {
            name: "apply_update_apply_reorder",
            ops: vec![
                Op::Apply("default", json!({"list": ["a", "b", "c", "d"]})),
                Op::Update("controller", json!({"list": ["a", "d", "c", "b"]})),
                Op::Apply("default", json!({"list": ["a", "b", "c", "d"]})),
            ],
            object: json!({"list": ["a", "b", "c", "d"]}),
            managed: vec![(
                "default",
                vec![
                    r#".list[="a"]"#,
                    r#".list[="b"]"#,
                    r#".list[="c"]"#,
                    r#".list[="d"]"#,
                ],
            )],
        },
        Case {
            name: "apply_twice_remove",
            ops: vec![
                Op::Apply("default", json!({"list": ["a", "b", "c", "d"]})),
                Op::Apply("default", json!({"list": ["a", "c"]})),
            ],
            object: json!({"list": ["a", "c"]}),
            managed: vec![("default", vec![r#".list[="a"]"#, r#".list[="c"]"#])],
        },
        Case {
            name: "remove_one_keep_one (multiple appliers)",
            ops: vec![
                Op::Apply("apply-one", json!({"list": ["a", "b", "c"]})),
                Op::Apply("apply-two", json!({"list": ["c", "d"]})),
                Op::Apply("apply-one", json!({"list": ["a"]})),
            ],
            object: json!({"list": ["a", "c", "d"]}),
            managed: vec![
                ("apply-one", vec![r#".list[="a"]"#]),
                ("apply-two", vec![r#".list[="c"]"#, r#".list[="d"]"#]),
            ],
        },
    ];
    cases.into_iter().for_each(run);
}

#[test]
fn leaves() {
    let cases = vec![
        Case {
            name: "apply_update_apply_with_conflict",
            ops: vec![
                Op::Apply("default", json!({"numeric": 1, "string": "string"})),
                Op::Update(
                    "controller",
                    json!({"numeric": 1, "string": "controller string", "bool": true}),
                ),
                Op::Conflicts(
                    "default",
                    json!({"numeric": 2, "string": "user string"}),
                    vec![("controller", ".string")],
                ),
                Op::Force("default", json!({"numeric": 2, "string": "user string"})),
            ],
            object: json!({"numeric": 2, "string": "user string", "bool": true}),
            managed: vec![
                ("default", vec![".numeric", ".string"]),
                ("controller", vec![".bool"]),
            ],
        },
        Case {
            name: "apply_twice_remove",
            ops: vec![
                Op::Apply(
                    "default",
                    json!({"numeric": 1, "string": "string", "bool": false}),
                ),
                Op::Apply("default", json!({"string": "new string"})),
            ],
            object: json!({"string": "new string"}),
            managed: vec![("default", vec![".string"])],
        },
        Case {
            name: "update_apply_omits",
            ops: vec![
                Op::Apply("default", json!({"numeric": 2})),
                Op::Update("controller", json!({"numeric": 1})),
                Op::Apply("default", json!({})),
            ],
            object: json!({"numeric": 1}),
            managed: vec![("controller", vec![".numeric"])],
        },
        Case {
            name: "apply_remove_empty_set",
            ops: vec![
                Op::Apply("default", json!({"string": "string"})),
                Op::Apply("default", json!({})),
            ],
            object: json!({}),
            managed: vec![],
        },
        Case {
            name: "atomic map changes as a whole",
            ops: vec![
                Op::Apply("a", json!({"atomic": {"x": "1"}})),
                Op::Conflicts(
                    "b",
                    json!({"atomic": {"x": "1", "y": "2"}}),
                    vec![("a", ".atomic")],
                ),
                Op::Apply("b", json!({"atomic": {"x": "1"}})),
                Op::Apply("a", json!({})),
            ],
            object: json!({"atomic": {"x": "1"}}),
            managed: vec![("b", vec![".atomic"])],
        },
    ];
    cases.into_iter().for_each(run);
}

#[test]
fn structs_and_list_maps() {
    let cases = vec![
        Case {
            name: "unset_scalar_shared_with_updater",
            ops: vec![
                Op::Update("updater", json!({"struct": {"name": "a", "value": 1}})),
                Op::Apply("applier", json!({"struct": {"name": "a", "value": 1}})),
                Op::Apply("applier", json!({"struct": {"name": "a"}})),
            ],
            object: json!({"struct": {"name": "a", "value": 1}}),
            managed: vec![
                ("updater", vec![".struct", ".struct.name", ".struct.value"]),
                ("applier", vec![".struct.name"]),
            ],
        },
        Case {
            name: "updater_claims_field",
            ops: vec![
                Op::Apply("applier", json!({"struct": {"name": "a", "value": 1}})),
                Op::Update("updater", json!({"struct": {"name": "a", "value": 2}})),
            ],
            object: json!({"struct": {"name": "a", "value": 2}}),
            managed: vec![
                ("updater", vec![".struct.value"]),
                ("applier", vec![".struct.name"]),
            ],
        },
        Case {
            name: "struct_apply_update_remove_all",
            ops: vec![
                Op::Apply("default", json!({"struct": {"name": "a"}})),
                Op::Update("controller", json!({"struct": {"name": "a", "value": 1}})),
                Op::Apply("default", json!({})),
            ],
            object: json!({"struct": {"value": 1}}),
            managed: vec![("controller", vec![".struct.value"])],
        },
        Case {
            name: "struct_apply_update_took_over",
            ops: vec![
                Op::Apply("default", json!({"struct": {"name": "a"}})),
                Op::Update("controller", json!({"struct": {"name": "b", "value": 1}})),
                Op::Apply("default", json!({"struct": null})),
            ],
            object: json!({"struct": {"name": "b", "value": 1}}),
            managed: vec![
                ("controller", vec![".struct.name", ".struct.value"]),
                ("default", vec![".struct"]),
            ],
        },
        Case {
            name: "removing_obsolete_applied_structs",
            ops: vec![
                Op::Apply(
                    "default",
                    json!({"listOfLists": [{"name": "a", "value": ["x"]}]}),
                ),
                Op::Apply("default", json!({"listOfLists": [{"name": "b"}]})),
            ],
            object: json!({"listOfLists": [{"name": "b"}]}),
            managed: vec![(
                "default",
                vec![
                    r#".listOfLists[name="b"]"#,
                    r#".listOfLists[name="b"].name"#,
                ],
            )],
        },
        Case {
            name: "remove_one_keep_one_with_dangling_subitem",
            ops: vec![
                Op::Apply(
                    "apply-one",
                    json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c"]}]}),
                ),
                Op::Apply(
                    "apply-two",
                    json!({"listOfLists": [{"name": "b", "value": ["d"]}]}),
                ),
                Op::Update(
                    "controller",
                    json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["c", "d", "e"]}]}),
                ),
                Op::Apply("apply-one", json!({"listOfLists": [{"name": "a"}]})),
            ],
            object: json!({"listOfLists": [{"name": "a"}, {"name": "b", "value": ["d", "e"]}]}),
            managed: vec![
                (
                    "apply-one",
                    vec![
                        r#".listOfLists[name="a"]"#,
                        r#".listOfLists[name="a"].name"#,
                    ],
                ),
                (
                    "apply-two",
                    vec![
                        r#".listOfLists[name="b"]"#,
                        r#".listOfLists[name="b"].name"#,
                        r#".listOfLists[name="b"].value[="d"]"#,
                    ],
                ),
                ("controller", vec![r#".listOfLists[name="b"].value[="e"]"#]),
            ],
        },
        Case {
            name: "a key left out is its default",
            ops: vec![
                Op::Apply("a", json!({"ports": [{"port": 80, "name": "http"}]})),
                Op::Conflicts(
                    "b",
                    json!({"ports": [{"port": 80, "protocol": "TCP", "name": "web"}]}),
                    vec![("a", r#".ports[port=80,protocol="TCP"].name"#)],
                ),
                Op::Apply(
                    "b",
                    json!({"ports": [{"port": 80, "protocol": "UDP", "name": "dns"}]}),
                ),
            ],
            object: json!({"ports": [{"port": 80, "name": "http"}, {"port": 80, "protocol": "UDP", "name": "dns"}]}),
            managed: vec![
                (
                    "a",
                    vec![
                        r#".ports[port=80,protocol="TCP"]"#,
                        r#".ports[port=80,protocol="TCP"].name"#,
                        r#".ports[port=80,protocol="TCP"].port"#,
                    ],
                ),
                (
                    "b",
                    vec![
                        r#".ports[port=80,protocol="UDP"]"#,
                        r#".ports[port=80,protocol="UDP"].name"#,
                        r#".ports[port=80,protocol="UDP"].port"#,
                        r#".ports[port=80,protocol="UDP"].protocol"#,
                    ],
                ),
            ],
        },
    ];
    cases.into_iter().for_each(run);
}

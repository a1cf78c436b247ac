use serde_json::{Value, json};

use super::{default, prune, validate};

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "minLength": 3, "maxLength": 20, "pattern": "^[a-z/:.0-9]+$"},
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
                    "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "exclusiveMaximum": true, "maximum": 1},
                    "color": {"type": "string", "enum": ["red", "blue"]},
                    "port": {"x-kubernetes-int-or-string": true},
                    "note": {"type": "string", "nullable": true},
                    "tags": {"type": "array", "maxItems": 2, "minItems": 1, "items": {"type": "string"}},
                    "labels": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
                    "ports": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"},
                        "protocol": {"type": "string", "default": "TCP"}
                    }}}
                }
            },
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }
    })
}

fn messages(obj: Value) -> Vec<String> {
    validate(&schema(), &obj)
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn object(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec})
}

#[test]
fn a_valid_object_has_no_causes() {
    let got = messages(object(json!({
        "image": "nginx:1.27", "replicas": 3, "ratio": 0.5, "color": "red", "port": "http",
        "note": null, "tags": ["a"], "labels": {"a": "b"}, "extra": {"anything": [1, 2]},
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
        "ports": [{"name": "http"}]
    })));
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn each_violation_names_its_field_as_upstream() {
    let cases = [
        (
            json!({"image": "nginx", "replicas": "three"}),
            "spec.replicas: Invalid value: \"three\": spec.replicas in body must be of type integer: \"string\"",
        ),
        (
            json!({"image": "nginx", "replicas": 1.5}),
            "spec.replicas: Invalid value: 1.5: spec.replicas in body must be of type integer: \"number\"",
        ),
        (json!({"replicas": 2}), "spec.image: Required value"),
        (
            json!({"image": "nginx", "replicas": 11}),
            "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10",
        ),
        (
            json!({"image": "nginx", "replicas": 0}),
            "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
        ),
        (
            json!({"image": "nginx", "ratio": 1}),
            "spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1",
        ),
        (
            json!({"image": "nginx", "ratio": 0}),
            "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
        ),
        (
            json!({"image": "nginx", "color": "pink"}),
            "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
        ),
        (
            json!({"image": "ng"}),
            "spec.image: Invalid value: \"ng\": spec.image in body should be at least 3 chars long",
        ),
        (
            json!({"image": "nginx-is-a-very-long-name"}),
            "spec.image: Too long: may not be more than 20 bytes",
        ),
        (
            json!({"image": "NGINX"}),
            "spec.image: Invalid value: \"NGINX\": spec.image in body should match '^[a-z/:.0-9]+$'",
        ),
        (
            json!({"image": "nginx", "port": true}),
            "spec.port: Invalid value: true: spec.port in body must be of type integer,string: \"boolean\"",
        ),
        (
            json!({"image": "nginx", "tags": ["a", "b", "c"]}),
            "spec.tags: Too many: 3: must have at most 2 items",
        ),
        (
            json!({"image": "nginx", "tags": []}),
            "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
        ),
        (
            json!({"image": "nginx", "tags": [1]}),
            "spec.tags[0]: Invalid value: 1: spec.tags[0] in body must be of type string: \"integer\"",
        ),
        (
            json!({"image": "nginx", "labels": {"a": "1", "b": "2"}}),
            "spec.labels: Too many: 2: must have at most 1 items",
        ),
        (
            json!({"image": "nginx", "labels": {"a": 1}}),
            "spec.labels.a: Invalid value: 1: spec.labels.a in body must be of type string: \"integer\"",
        ),
        (
            json!({"image": "nginx", "template": {"kind": "Pod"}}),
            "spec.template.apiVersion: Required value",
        ),
        (
            json!({"image": "nginx", "ports": [{"name": 7}]}),
            "spec.ports[0].name: Invalid value: 7: spec.ports[0].name in body must be of type string: \"integer\"",
        ),
        (
            json!({"image": null}),
            "spec.image: Invalid value: \"null\": spec.image in body must be of type string: \"null\"",
        ),
    ];
    for (spec, want) in cases {
        let got = messages(object(spec.clone()));
        assert!(
            got.iter().any(|g| g == want),
            "{spec}: want {want}, got {got:?}"
        );
    }
}

#[test]
fn pruning_drops_undeclared_fields_and_keeps_preserved_ones() {
    let mut obj = object(json!({
        "image": "nginx", "bogus": 1,
        "extra": {"kept": {"deep": true}},
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}},
        "labels": {"a": "b"},
        "ports": [{"name": "http", "junk": 1}]
    }));
    obj["status"] = json!({"ready": true, "unknown": 1});
    obj["topLevel"] = json!("gone");
    prune(&schema(), &mut obj);
    assert_eq!(obj["metadata"]["name"], "w");
    assert_eq!(obj["apiVersion"], "example.com/v1");
    assert!(obj.get("topLevel").is_none());
    assert!(obj["spec"].get("bogus").is_none());
    assert_eq!(obj["spec"]["extra"]["kept"]["deep"], true);
    assert_eq!(obj["spec"]["template"]["spec"]["x"], 1);
    assert_eq!(obj["spec"]["labels"]["a"], "b");
    assert_eq!(obj["spec"]["ports"][0], json!({"name": "http"}));
    assert_eq!(obj["status"], json!({"ready": true}));
}

#[test]
fn defaults_fill_absent_fields_inside_lists_too() {
    let mut obj = object(
        json!({"image": "nginx", "ports": [{"name": "a"}, {"name": "b", "protocol": "UDP"}]}),
    );
    default(&schema(), &mut obj);
    assert_eq!(obj["spec"]["replicas"], 1);
    assert_eq!(obj["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(obj["spec"]["ports"][1]["protocol"], "UDP");
    // A set value is kept.
    let mut obj = object(json!({"image": "nginx", "replicas": 4}));
    default(&schema(), &mut obj);
    assert_eq!(obj["spec"]["replicas"], 4);
}

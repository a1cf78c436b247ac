//! Strategic merge patch tests against the real Kubernetes OpenAPI definitions.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::{PatchError, merge_patch, strategic_merge_patch};
use crate::testdata::{arbitrary_json, arbitrary_object, k8s_definitions};

const DEPLOYMENT: &str = "io.k8s.api.apps.v1.Deployment";

fn live_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "frontend"},
            "finalizers": ["a", "b"]
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}
            },
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "nginx:1.25",
                            "args": ["--a", "--b"],
                            "ports": [{"containerPort": 80, "protocol": "TCP"}],
                            "env": [{"name": "LIVE_ONLY", "value": "kept"}]
                        },
                        {"name": "sidecar", "image": "envoy:1.0"}
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}]
                }
            }
        },
        "status": {"replicas": 3}
    })
}

fn apply(patch: Value) -> Value {
    strategic_merge_patch(&live_deployment(), &patch, k8s_definitions(), DEPLOYMENT)
        .unwrap_or_else(|e| panic!("{patch}: {e}"))
}

fn containers(v: &Value) -> &Vec<Value> {
    v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
}

fn names(list: &[Value]) -> Vec<&str> {
    list.iter().map(|c| c["name"].as_str().unwrap()).collect()
}

/// Asserts no directive key survived anywhere in the result.
fn assert_no_directives(v: &Value) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                assert!(!k.starts_with('$'), "directive {k} leaked");
                assert_no_directives(v);
            }
        }
        Value::Array(a) => a.iter().for_each(assert_no_directives),
        _ => {}
    }
}

#[test]
fn apply_image_change_and_new_port_merges_by_key() {
    // What `kubectl apply` sends after editing the image and adding a port.
    let out = apply(json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
        "containers": [{
            "$setElementOrder/ports": [{"containerPort": 80}, {"containerPort": 443}],
            "image": "nginx:1.26",
            "name": "app",
            "ports": [{"containerPort": 443, "protocol": "TCP"}]
        }]
    }}}}));
    let cs = containers(&out);
    assert_eq!(names(cs), ["app", "sidecar"]);
    assert_eq!(cs[0]["image"], "nginx:1.26");
    assert_eq!(
        cs[0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}])
    );
    assert_eq!(
        cs[0]["env"],
        json!([{"name": "LIVE_ONLY", "value": "kept"}])
    );
    assert_eq!(cs[1], json!({"name": "sidecar", "image": "envoy:1.0"}));
    assert_eq!(out["status"], json!({"replicas": 3}));
    assert_no_directives(&out);
}

#[test]
fn set_element_order_reorders_and_unlisted_follow() {
    let out = apply(json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}]
    }}}}));
    assert_eq!(names(containers(&out)), ["sidecar", "app"]);

    let out = apply(json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "new"}, {"name": "app"}],
        "containers": [{"name": "new", "image": "busybox"}]
    }}}}));
    assert_eq!(names(containers(&out)), ["new", "app", "sidecar"]);
    assert_no_directives(&out);
}

#[test]
fn new_element_without_order_is_appended() {
    let out = apply(json!({"spec": {"template": {"spec": {
        "containers": [{"name": "logger", "image": "fluentbit"}]
    }}}}));
    assert_eq!(names(containers(&out)), ["app", "sidecar", "logger"]);
}

#[test]
fn delete_container_by_merge_key() {
    let out = apply(json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}],
        "containers": [{"$patch": "delete", "name": "sidecar"}]
    }}}}));
    assert_eq!(names(containers(&out)), ["app"]);
    assert_no_directives(&out);
}

#[test]
fn null_removes_label() {
    let out = apply(json!({"metadata": {"labels": {"tier": null}}}));
    assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
}

#[test]
fn retain_keys_switches_strategy() {
    // kubectl apply sends the null as well; both forms must drop rollingUpdate.
    for patch in [
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}}),
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    ] {
        let out = apply(patch);
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(out["spec"]["replicas"], 3);
    }
}

#[test]
fn retain_keys_in_merged_list_elements() {
    // Pod volumes are `merge,retainKeys`: switching the volume source drops the old one.
    let out = apply(json!({"spec": {"template": {"spec": {
        "volumes": [{"$retainKeys": ["configMap", "name"], "name": "data", "configMap": {"name": "cm"}}]
    }}}}));
    assert_eq!(
        out["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "data", "configMap": {"name": "cm"}}])
    );
}

#[test]
fn replace_directives() {
    let out = apply(json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}}));
    assert_eq!(out["metadata"]["labels"], json!({"only": "this"}));

    let out = apply(json!({"spec": {"template": {"spec": {
        "containers": [{"$patch": "replace"}, {"name": "solo", "image": "x"}]
    }}}}));
    assert_eq!(
        containers(&out),
        &vec![json!({"name": "solo", "image": "x"})]
    );
    assert_no_directives(&out);
}

#[test]
fn delete_map_directive_removes_field() {
    let out = apply(json!({"spec": {"strategy": {"$patch": "delete"}}}));
    assert!(out["spec"].get("strategy").is_none());
    let out = apply(json!({"metadata": {"labels": {"$patch": "merge", "x": "y"}}}));
    assert_eq!(out["metadata"]["labels"]["x"], "y");
    assert_eq!(out["metadata"]["labels"]["app"], "web");
}

#[test]
fn primitive_lists() {
    // finalizers is a merging list of strings; container args is not.
    let out = apply(json!({
        "metadata": {"finalizers": ["b", "c"]},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "args": ["--c"]}]}}}
    }));
    assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
    assert_eq!(containers(&out)[0]["args"], json!(["--c"]));

    let out = apply(json!({"metadata": {
        "$deleteFromPrimitiveList/finalizers": ["a"],
        "$setElementOrder/finalizers": ["z", "b"],
        "finalizers": ["z"]
    }}));
    assert_eq!(out["metadata"]["finalizers"], json!(["z", "b"]));
    assert_no_directives(&out);
}

#[test]
fn unknown_fields_and_roots_use_json_merge() {
    let out = apply(json!({"spec": {"custom": {"list": [1, 2], "x": {"y": 1}}}}));
    assert_eq!(
        out["spec"]["custom"],
        json!({"list": [1, 2], "x": {"y": 1}})
    );

    let orig = json!({"spec": {"containers": [{"name": "a", "image": "x"}], "keep": 1}});
    let patch = json!({"spec": {"containers": [{"name": "b"}], "keep": null}});
    let out =
        strategic_merge_patch(&orig, &patch, k8s_definitions(), "example.com.v1.Widget").unwrap();
    assert_eq!(out, json!({"spec": {"containers": [{"name": "b"}]}}));
}

#[test]
fn unknown_lists_are_opaque_data() {
    let out = strategic_merge_patch(
        &json!({}),
        &json!({"a": [{"a": null, "$patch": "delete"}]}),
        k8s_definitions(),
        "unknown",
    )
    .unwrap();
    assert_eq!(out, json!({"a": [{"a": null, "$patch": "delete"}]}));
}

#[test]
fn new_values_are_cleaned() {
    // Nulls and directives inside values absent from the live object never leak.
    let orig = json!({"metadata": {"name": "p"}});
    let patch = json!({"spec": {
        "$setElementOrder/containers": [{"name": "a"}],
        "containers": [{"name": "a", "image": "x", "command": null}],
        "securityContext": {"$patch": "replace", "runAsUser": 1}
    }});
    let out =
        strategic_merge_patch(&orig, &patch, k8s_definitions(), "io.k8s.api.core.v1.Pod").unwrap();
    assert_eq!(
        out["spec"],
        json!({"containers": [{"name": "a", "image": "x"}], "securityContext": {"runAsUser": 1}})
    );
}

#[test]
fn errors_table() {
    let defs = k8s_definitions();
    let cases = [
        (json!([1]), "must be a JSON object"),
        (
            json!({"spec": {"$patch": "frob"}}),
            "unknown patch directive",
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
            "does not contain declared merge key",
        ),
        (
            json!({"spec": {"template": {"spec": {"containers": ["x"]}}}}),
            "mixes objects",
        ),
        (
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
            "must be a list",
        ),
    ];
    for (patch, want) in cases {
        let err = strategic_merge_patch(&live_deployment(), &patch, defs, DEPLOYMENT)
            .expect_err(&patch.to_string());
        assert!(err.to_string().contains(want), "{patch}: {err}");
    }
    assert!(matches!(
        strategic_merge_patch(&json!({}), &json!(null), defs, DEPLOYMENT),
        Err(PatchError::NotAnObject)
    ));
}

proptest! {
    #[test]
    fn unknown_root_equals_json_merge(orig in arbitrary_json(), patch in arbitrary_object()) {
        // Generated keys are a-c, so the patch never carries directives.
        let smp = strategic_merge_patch(&orig, &patch, k8s_definitions(), "unknown").unwrap();
        let mut want = if orig.is_object() { orig } else { json!({}) };
        merge_patch(&mut want, &patch);
        // Merge patch keeps nulls nested inside arrays; so must the fallback.
        prop_assert_eq!(smp, want);
    }

    #[test]
    fn image_patch_is_idempotent(image in "[a-z]{1,8}:[0-9]{1,2}") {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}});
        let once = apply(patch.clone());
        let twice = strategic_merge_patch(&once, &patch, k8s_definitions(), DEPLOYMENT).unwrap();
        prop_assert_eq!(&once, &twice);
        prop_assert_eq!(names(containers(&once)), vec!["app", "sidecar"]);
    }
}

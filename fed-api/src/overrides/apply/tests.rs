use proptest::prelude::*;
use serde_json::json;

use super::*;

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "template": {"spec": {
                "initContainers": [{"name": "init", "image": "busybox:1.36"}],
                "containers": [
                    {"name": "web", "image": "ghcr.io/shop/web:1.2", "args": ["--port=80"]},
                    {"name": "sidecar", "image": "envoyproxy/envoy:v1.31"}
                ]
            }}
        }
    })
}

fn policy(namespace: Option<&str>, name: &str, spec: Value) -> Policy {
    Policy {
        namespace: namespace.map(str::to_owned),
        name: name.into(),
        spec: serde_json::from_value(spec).expect("spec"),
    }
}

fn selects_web(rules: Value) -> Value {
    json!({
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        "overrideRules": rules,
    })
}

struct C {
    name: &'static str,
    labels: BTreeMap<String, String>,
    region: Option<&'static str>,
}

impl C {
    fn new(name: &'static str, region: &'static str) -> Self {
        C {
            name,
            labels: [("env".to_owned(), "prod".to_owned())].into(),
            region: Some(region),
        }
    }
    fn member(&self) -> MemberCluster<'_> {
        MemberCluster {
            name: self.name,
            labels: &self.labels,
            region: self.region,
            zone: None,
        }
    }
}

#[test]
fn overriders_table() {
    let cn = C::new("cn-1", "cn-north");
    let eu = C::new("eu-1", "eu-west");
    // (what, rules, cluster, pointer, expected value there)
    let cases: Vec<(&str, Value, &C, &str, Value)> = vec![
        (
            "registry replaced in the targeted region",
            json!([{"targetCluster": {"regions": ["cn-north"]},
                    "overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "registry.cn.example"}]}}]),
            &cn,
            "/spec/template/spec/containers",
            json!([
                {"name": "web", "image": "registry.cn.example/shop/web:1.2", "args": ["--port=80"]},
                {"name": "sidecar", "image": "registry.cn.example/envoyproxy/envoy:v1.31"}
            ]),
        ),
        (
            "init containers too",
            json!([{"targetCluster": {"regions": ["cn-north"]},
                    "overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "registry.cn.example"}]}}]),
            &cn,
            "/spec/template/spec/initContainers/0/image",
            json!("registry.cn.example/busybox:1.36"),
        ),
        (
            "a rule for another region does nothing",
            json!([{"targetCluster": {"regions": ["cn-north"]},
                    "overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "registry.cn.example"}]}}]),
            &eu,
            "/spec/template/spec/containers/0/image",
            json!("ghcr.io/shop/web:1.2"),
        ),
        (
            "one container's tag",
            json!([{"overriders": {"imageOverrider": [{"containerName": "sidecar", "component": "Tag", "operator": "replace", "value": "v1.32"}]}}]),
            &eu,
            "/spec/template/spec/containers",
            json!([
                {"name": "web", "image": "ghcr.io/shop/web:1.2", "args": ["--port=80"]},
                {"name": "sidecar", "image": "envoyproxy/envoy:v1.32"}
            ]),
        ),
        (
            "args: add appends",
            json!([{"targetCluster": {"clusterNames": ["eu-1"]},
                    "overriders": {"argsOverrider": [{"containerName": "web", "operator": "add", "value": ["--region=eu"]}]}}]),
            &eu,
            "/spec/template/spec/containers/0/args",
            json!(["--port=80", "--region=eu"]),
        ),
        (
            "args: remove drops the given entries and an emptied list",
            json!([{"overriders": {"argsOverrider": [{"containerName": "web", "operator": "remove", "value": ["--port=80"]}]}}]),
            &eu,
            "/spec/template/spec/containers/0",
            json!({"name": "web", "image": "ghcr.io/shop/web:1.2"}),
        ),
        (
            "command: replace sets the list",
            json!([{"overriders": {"commandOverrider": [{"containerName": "sidecar", "operator": "replace", "value": ["envoy", "-c", "/etc/envoy.yaml"]}]}}]),
            &eu,
            "/spec/template/spec/containers/1/command",
            json!(["envoy", "-c", "/etc/envoy.yaml"]),
        ),
        (
            "a container that is not there is left alone",
            json!([{"overriders": {"argsOverrider": [{"containerName": "absent", "operator": "add", "value": ["-v"]}]}}]),
            &eu,
            "/spec/template/spec",
            deployment()["spec"]["template"]["spec"].clone(),
        ),
        (
            "labels: add, then replace only existing keys, then remove",
            json!([{"overriders": {"labelsOverrider": [
                {"operator": "add", "value": {"tier": "edge"}},
                {"operator": "replace", "value": {"app": "web-eu", "absent": "x"}},
                {"operator": "remove", "value": {"tier": ""}}
            ]}}]),
            &eu,
            "/metadata/labels",
            json!({"app": "web-eu"}),
        ),
        (
            "annotations created when there were none",
            json!([{"overriders": {"annotationsOverrider": [{"operator": "add", "value": {"team": "blue"}}]}}]),
            &eu,
            "/metadata/annotations",
            json!({"team": "blue"}),
        ),
        (
            "plaintext add, replace, remove",
            json!([{"overriders": {"plaintext": [
                {"path": "/spec/template/spec/nodeSelector", "operator": "add", "value": {"disk": "ssd"}},
                {"path": "/spec/template/spec/nodeSelector/disk", "operator": "replace", "value": "nvme"},
                {"path": "/spec/template/spec/initContainers", "operator": "remove"}
            ]}}]),
            &eu,
            "/spec/template/spec",
            json!({
                "nodeSelector": {"disk": "nvme"},
                "containers": deployment()["spec"]["template"]["spec"]["containers"].clone(),
            }),
        ),
        (
            "later rules see earlier ones",
            json!([
                {"overriders": {"imageOverrider": [{"containerName": "web", "component": "Registry", "operator": "remove"}]}},
                {"overriders": {"imageOverrider": [{"containerName": "web", "component": "Registry", "operator": "add", "value": "mirror.example"}]}}
            ]),
            &eu,
            "/spec/template/spec/containers/0/image",
            json!("mirror.example/shop/web:1.2"),
        ),
    ];
    for (what, rules, c, pointer, want) in cases {
        let policies = [policy(Some("shop"), "p", selects_web(rules))];
        let got =
            apply(&deployment(), &c.member(), &policies).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got.pointer(pointer), Some(&want), "{what}");
        assert_eq!(got["spec"]["replicas"], 3, "{what}");
    }
}

#[test]
fn failures_name_the_policy_the_rule_and_why() {
    let eu = C::new("eu-1", "eu-west");
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"plaintext": [{"path": "/spec/nothing/here", "operator": "remove"}]}),
            "OverridePolicy shop/p rule 1: plaintext[0]: remove /spec/nothing/here: the path does not exist in the object",
        ),
        (
            json!({"plaintext": [{"path": "/spec/a/b", "operator": "add", "value": 1}]}),
            "OverridePolicy shop/p rule 1: plaintext[0]: add /spec/a/b: ",
        ),
        (
            json!({"plaintext": [{"path": "spec", "operator": "add", "value": 1}]}),
            "OverridePolicy shop/p rule 1: plaintext[0]: add spec: the path is not a JSON pointer",
        ),
        (
            json!({"plaintext": [{"path": "/spec/replicas", "operator": "replace"}]}),
            "OverridePolicy shop/p rule 1: plaintext[0]: replace /spec/replicas: the operation needs a value",
        ),
        (
            json!({"imageOverrider": [{"component": "Tag", "operator": "replace", "value": "-x"}]}),
            "OverridePolicy shop/p rule 1: imageOverrider[0]: container \"init\": \"-x\" is not a valid Tag",
        ),
        (
            json!({"labelsOverrider": [{"operator": "add"}]}),
            "OverridePolicy shop/p rule 1: labelsOverrider[0]: add needs a value",
        ),
    ];
    for (overriders, want) in cases {
        let rules = json!([{"overriders": {}}, {"overriders": overriders}]);
        let policies = [policy(Some("shop"), "p", selects_web(rules))];
        let err = apply(&deployment(), &eu.member(), &policies).expect_err(want);
        assert_eq!(err.rule, 1);
        assert_eq!(err.policy, "OverridePolicy shop/p");
        assert!(err.to_string().starts_with(want), "{err}\nwant {want}");
    }
}

#[test]
fn selection_and_order() {
    let eu = C::new("eu-1", "eu-west");
    let label = |v: &str| json!([{"overriders": {"labelsOverrider": [{"operator": "add", "value": {"order": v}}]}}]);
    let kind_only = |rules: Value| json!({"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}], "overrideRules": rules});
    let policies = vec![
        policy(Some("shop"), "b", kind_only(label("ns-b"))),
        policy(Some("shop"), "a", kind_only(label("ns-a"))),
        policy(None, "z", kind_only(label("cluster-z"))),
        policy(None, "c", kind_only(label("cluster-c"))),
        // Another namespace's policy, and one for another kind, select nothing here.
        policy(Some("other"), "zz", kind_only(label("other-ns"))),
        policy(
            None,
            "zzz",
            json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}], "overrideRules": label("configmap")}),
        ),
    ];
    let d = deployment();
    let labels = labels_of(&d);
    let s = Subject {
        api_version: "apps/v1",
        kind: "Deployment",
        namespace: Some("shop"),
        name: "web",
        labels: &labels,
    };
    let order: Vec<String> = selecting(&s, &policies)
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        order,
        [
            "ClusterOverridePolicy c",
            "ClusterOverridePolicy z",
            "OverridePolicy shop/a",
            "OverridePolicy shop/b"
        ]
    );
    // The namespaced policy last by name has the last word.
    let got = apply(&d, &eu.member(), &policies).unwrap();
    assert_eq!(got["metadata"]["labels"]["order"], "ns-b");
    // A cluster-scoped object: only cluster-wide policies.
    let role = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}});
    let got = apply(&role, &eu.member(), &policies).unwrap();
    assert_eq!(got["metadata"]["labels"]["order"], "cluster-z");
}

#[test]
fn pod_specs_of_other_kinds() {
    let eu = C::new("eu-1", "eu-west");
    let rules = json!([{"overriders": {"imageOverrider": [{"component": "Registry", "operator": "replace", "value": "m.example"}]}}]);
    let cases = [
        (
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
                   "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "job:1"}]}}}}}}),
            "/spec/jobTemplate/spec/template/spec/containers/0/image",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c"},
                   "spec": {"containers": [{"name": "c", "image": "job:1"}]}}),
            "/spec/containers/0/image",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "c"},
                   "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "job:1"}]}}}}),
            "/spec/template/spec/containers/0/image",
        ),
    ];
    for (obj, pointer) in cases {
        let kind = obj["kind"].as_str().unwrap().to_owned();
        let api_version = obj["apiVersion"].as_str().unwrap().to_owned();
        let p = policy(
            None,
            "mirror",
            json!({"resourceSelectors": [{"apiVersion": api_version, "kind": kind}], "overrideRules": rules}),
        );
        let got = apply(&obj, &eu.member(), &[p]).unwrap();
        assert_eq!(
            got.pointer(pointer),
            Some(&json!("m.example/job:1")),
            "{kind}"
        );
    }
    // A kind with no pod template: an image overrider changes nothing.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let p = policy(
        None,
        "mirror",
        json!({"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}], "overrideRules": rules}),
    );
    assert_eq!(apply(&cm, &eu.member(), &[p]).unwrap(), cm);
}

#[test]
fn targets_and_changes_in() {
    let cn = C::new("cn-1", "cn-north");
    let eu = C::new("eu-1", "eu-west");
    let p = policy(
        Some("shop"),
        "p",
        selects_web(
            json!([{"targetCluster": {"regions": ["cn-north"], "exclude": ["cn-2"]}, "overriders": {}}]),
        ),
    );
    let selected = [&p];
    assert!(changes_in(&selected, &cn.member()));
    assert!(!changes_in(&selected, &eu.member()));
    let cn2 = C::new("cn-2", "cn-north");
    assert!(!changes_in(&selected, &cn2.member()));
    assert!(is_json_pointer("/a~1b/0") && !is_json_pointer("a") && !is_json_pointer("/a~2"));
    assert!(!is_json_pointer(""));
}

fn arb_rule() -> impl Strategy<Value = Value> {
    let overrider = prop_oneof![
        Just(json!({"labelsOverrider": [{"operator": "add", "value": {"k": "a"}}]})),
        Just(json!({"labelsOverrider": [{"operator": "add", "value": {"k": "b"}}]})),
        Just(
            json!({"argsOverrider": [{"containerName": "web", "operator": "add", "value": ["-x"]}]})
        ),
        Just(
            json!({"imageOverrider": [{"component": "Tag", "operator": "replace", "value": "2"}]})
        ),
        Just(json!({"plaintext": [{"path": "/spec/paused", "operator": "add", "value": true}]})),
    ];
    let target = prop_oneof![
        Just(Value::Null),
        Just(json!({"clusterNames": ["eu-1"]})),
        Just(json!({"regions": ["cn-north"]})),
    ];
    (target, overrider).prop_map(|(t, o)| {
        let mut r = json!({"overriders": o});
        if !t.is_null() {
            r["targetCluster"] = t;
        }
        r
    })
}

fn arb_policies() -> impl Strategy<Value = Vec<Policy>> {
    prop::collection::vec(
        (
            any::<bool>(),
            0u8..4,
            prop::collection::vec(arb_rule(), 0..3),
        ),
        0..5,
    )
    .prop_map(|ps| {
        ps.into_iter()
            .enumerate()
            .map(|(i, (cluster_wide, name, rules))| {
                policy(
                    (!cluster_wide).then_some("shop"),
                    // Unique names: the order is by kind, then name.
                    &format!("p{name}-{i}"),
                    selects_web(Value::Array(rules)),
                )
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn no_rule_for_the_cluster_is_the_identity(policies in arb_policies()) {
        // No rule targets this cluster: a policy with only targeted rules changes nothing.
        let far = C::new("far-1", "far-away");
        let only_targeted: Vec<Policy> = policies
            .into_iter()
            .map(|mut p| {
                p.spec.override_rules.retain(|r| r.target_cluster.is_some());
                p
            })
            .collect();
        let got = apply(&deployment(), &far.member(), &only_targeted).unwrap();
        prop_assert_eq!(got, deployment());
    }

    #[test]
    fn the_order_of_the_list_does_not_matter(policies in arb_policies(), seed in any::<u64>()) {
        let eu = C::new("eu-1", "eu-west");
        let mut shuffled = policies.clone();
        // A deterministic shuffle by the seed.
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        let a = apply(&deployment(), &eu.member(), &policies).map_err(|e| e.to_string());
        let b = apply(&deployment(), &eu.member(), &shuffled).map_err(|e| e.to_string());
        prop_assert_eq!(a, b);
    }
}

//! Server-side apply end to end on real Deployment and ConfigMap schemas, following the
//! worked examples of the Kubernetes "Server-Side Apply" documentation.

use std::sync::OnceLock;

use serde_json::{Value, json};

use super::*;

mod props;
mod smd;

pub(super) fn deployment_type() -> &'static ObjectType {
    static TY: OnceLock<ObjectType> = OnceLock::new();
    TY.get_or_init(|| {
        ObjectType::from_definitions(
            crate::testdata::k8s_definitions(),
            "io.k8s.api.apps.v1.Deployment",
        )
        .unwrap()
    })
}

/// One object on a simulated API server, written through a Deployment or ConfigMap
/// endpoint with a clock that moves a second per write.
pub(super) struct Server {
    pub fm: FieldManager,
    pub obj: Option<Value>,
    clock: i64,
}

impl Server {
    pub fn deployments() -> Self {
        let fm = FieldManager::new(deployment_type().clone(), "apps/v1", "Deployment")
            .with_reset_fields(ResetFields::paths(&["status"]));
        Server {
            fm,
            obj: None,
            clock: 1_700_000_000,
        }
    }

    fn config_maps() -> Self {
        let ty = ObjectType::from_definitions(
            crate::testdata::k8s_definitions(),
            "io.k8s.api.core.v1.ConfigMap",
        )
        .unwrap();
        Server {
            fm: FieldManager::new(ty, "v1", "ConfigMap"),
            obj: None,
            clock: 1_700_000_000,
        }
    }

    fn tick(&mut self) -> jiff::Timestamp {
        self.clock += 1;
        jiff::Timestamp::from_second(self.clock).unwrap()
    }

    pub fn try_apply(
        &mut self,
        manager: &str,
        config: &Value,
        force: bool,
    ) -> Result<Applied, ApplyError> {
        let now = self.tick();
        let applied = self
            .fm
            .apply(self.obj.as_ref(), config, manager, force, now)?;
        self.obj = Some(applied.object.clone());
        Ok(applied)
    }

    pub fn apply(&mut self, manager: &str, config: &Value) -> Applied {
        self.try_apply(manager, config, false)
            .unwrap_or_else(|e| panic!("apply by {manager} failed: {e}"))
    }

    fn conflicts(&mut self, manager: &str, config: &Value) -> Conflicts {
        let before = self.obj.clone();
        match self.try_apply(manager, config, false) {
            Err(ApplyError::Conflicts(c)) => {
                assert_eq!(self.obj, before, "a refused apply changed the object");
                c
            }
            other => panic!("expected conflicts, got {other:?}"),
        }
    }

    /// A GET-modify-PUT: the client sends back the `managedFields` it read.
    pub fn update(&mut self, manager: &str, change: impl FnOnce(&mut Value)) {
        let mut new = self.obj.clone().expect("an object to update");
        change(&mut new);
        let now = self.tick();
        self.fm.update(self.obj.as_ref(), &mut new, manager, now);
        self.obj = Some(new);
    }

    pub fn create(&mut self, manager: &str, mut new: Value) {
        let now = self.tick();
        self.fm.update(None, &mut new, manager, now);
        self.obj = Some(new);
    }

    pub fn obj(&self) -> &Value {
        self.obj.as_ref().unwrap()
    }

    pub fn entries(&self) -> Vec<ManagedEntry> {
        managed_entries(self.obj()).unwrap()
    }

    fn entry(&self, manager: &str) -> Option<ManagedEntry> {
        self.entries().into_iter().find(|e| e.manager == manager)
    }

    /// The paths `manager` owns, rendered as conflict messages render them.
    pub fn owned(&self, manager: &str) -> Vec<String> {
        self.entry(manager)
            .map(|e| e.fields.paths().iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    fn managers(&self) -> Vec<(String, Operation)> {
        self.entries()
            .into_iter()
            .map(|e| (e.manager, e.operation))
            .collect()
    }
}

/// The documentation's `nginx-deployment.yaml`, with `spec` changed by `edit`.
pub(super) fn nginx(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [
                    {"name": "nginx", "image": "nginx:1.14.2", "ports": [{"containerPort": 80}]}
                ]}
            }
        }
    });
    edit(&mut v);
    v
}

/// A configuration holding only `spec`, as a second manager would apply.
fn partial(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "nginx-deployment"}, "spec": spec})
}

#[test]
fn apply_creates_and_records_fields_as_upstream() {
    let mut s = Server::deployments();
    let applied = s.apply("kubectl", &nginx(|_| {}));
    assert!(applied.changed);
    let mf = &s.obj()["metadata"]["managedFields"];
    assert_eq!(mf.as_array().unwrap().len(), 1);
    assert_eq!(mf[0]["manager"], "kubectl");
    assert_eq!(mf[0]["operation"], "Apply");
    assert_eq!(mf[0]["apiVersion"], "apps/v1");
    assert_eq!(mf[0]["time"], "2023-11-14T22:13:21Z");
    assert_eq!(mf[0]["fieldsType"], "FieldsV1");
    // Byte for byte what kube-apiserver records for this configuration.
    assert_eq!(
        mf[0]["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}}}
                    }}}
                }
            }
        })
    );
    assert_eq!(s.obj()["spec"]["replicas"], 3);
    assert_eq!(s.obj()["metadata"]["name"], "nginx-deployment");
}

#[test]
fn create_records_an_update_entry_as_upstream() {
    let mut s = Server::deployments();
    s.create("kubectl-create", nginx(|_| {}));
    let mf = &s.obj()["metadata"]["managedFields"][0];
    assert_eq!(mf["operation"], "Update");
    // Maps and list items that appear are members themselves; structs and required
    // fields, present in the empty object upstream compares with, are not.
    assert_eq!(
        mf["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}}}
                    }}}
                }
            }
        })
    );
}

#[test]
fn reapplying_the_same_configuration_changes_nothing() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    let before = s.obj().clone();
    let again = s.apply("kubectl", &nginx(|_| {}));
    assert!(!again.changed);
    // Not even the entry's time moves.
    assert_eq!(s.obj(), &before);
}

#[test]
fn conflicts_between_two_appliers_and_force() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    let c = s.conflicts("other", &partial(json!({"replicas": 5})));
    assert_eq!(
        c.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
    );
    assert_eq!(c.causes()[0].field, ".spec.replicas");
    assert_eq!(c.causes()[0].message, "conflict with \"kubectl\"");

    // Forcing moves the field to the new owner.
    s.try_apply("other", &partial(json!({"replicas": 5})), true)
        .unwrap();
    assert_eq!(s.obj()["spec"]["replicas"], 5);
    assert_eq!(s.owned("other"), [".spec.replicas"]);
    assert!(!s.owned("kubectl").contains(&".spec.replicas".to_string()));
    // kubectl now conflicts with "other" when it applies its old value.
    let c = s.conflicts("kubectl", &nginx(|_| {}));
    assert_eq!(
        c.to_string(),
        "Apply failed with 1 conflict: conflict with \"other\": .spec.replicas"
    );
}

#[test]
fn same_value_is_shared_and_removal_needs_every_owner_to_let_go() {
    let mut s = Server::deployments();
    s.apply("a", &nginx(|_| {}));
    // Applying the same value is no conflict: both own the field.
    s.apply("b", &partial(json!({"replicas": 3})));
    assert_eq!(s.owned("b"), [".spec.replicas"]);
    assert!(s.owned("a").contains(&".spec.replicas".to_string()));
    // Any change of a shared field conflicts with the other owner.
    let c = s.conflicts("b", &partial(json!({"replicas": 4})));
    assert_eq!(c.0.len(), 1);
    assert_eq!(c.0[0].manager.manager, "a");
    // One owner letting go keeps the field...
    s.apply(
        "a",
        &nginx(|v| {
            v["spec"].as_object_mut().unwrap().remove("replicas");
        }),
    );
    assert_eq!(s.obj()["spec"]["replicas"], 3);
    // ...the last one letting go removes it.
    s.apply(
        "b",
        &partial(json!({"template": {"metadata": {"labels": {"app": "nginx"}}}})),
    );
    assert!(s.obj()["spec"].get("replicas").is_none());
}

#[test]
fn field_removal_spares_fields_of_other_managers() {
    let mut s = Server::deployments();
    s.apply(
        "kubectl",
        &nginx(|v| {
            v["metadata"]["labels"] = json!({"app": "nginx", "tier": "web"});
        }),
    );
    s.update("labeller", |v| {
        v["metadata"]["labels"]["owner"] = json!("team-a")
    });
    assert_eq!(s.owned("labeller"), [".metadata.labels.owner"]);
    s.apply("kubectl", &nginx(|_| {}));
    assert_eq!(
        s.obj()["metadata"]["labels"],
        json!({"app": "nginx", "owner": "team-a"})
    );
}

#[test]
fn an_update_takes_fields_and_appliers_then_conflict_with_it() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    // The HPA controller scales the Deployment.
    s.update("kube-controller-manager", |v| {
        v["spec"]["replicas"] = json!(7)
    });
    assert_eq!(s.owned("kube-controller-manager"), [".spec.replicas"]);
    assert!(!s.owned("kubectl").contains(&".spec.replicas".to_string()));
    let c = s.conflicts("kubectl", &nginx(|_| {}));
    assert_eq!(
        c.to_string(),
        "Apply failed with 1 conflict: conflict with \"kube-controller-manager\" using apps/v1: .spec.replicas"
    );
    // Leaving replicas out no longer removes it: kubectl does not own it.
    s.apply(
        "kubectl",
        &nginx(|v| {
            v["spec"].as_object_mut().unwrap().remove("replicas");
        }),
    );
    assert_eq!(s.obj()["spec"]["replicas"], 7);
}

#[test]
fn handing_replicas_over_to_the_hpa() {
    // The documentation's "Transferring ownership" steps.
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    // A private manager applies only replicas, with the same value: it shares the field.
    let replicas_only = partial(json!({"replicas": 3}));
    s.apply("handover-to-hpa", &replicas_only);
    // The user can now drop replicas from their own configuration safely.
    s.apply(
        "kubectl",
        &nginx(|v| {
            v["spec"].as_object_mut().unwrap().remove("replicas");
        }),
    );
    assert_eq!(s.obj()["spec"]["replicas"], 3);
    assert_eq!(s.owned("handover-to-hpa"), [".spec.replicas"]);
    // When the HPA writes replicas, the temporary manager owns nothing and goes away.
    s.update("hpa-controller", |v| v["spec"]["replicas"] = json!(6));
    assert!(s.entry("handover-to-hpa").is_none());
    assert_eq!(s.owned("hpa-controller"), [".spec.replicas"]);
}

#[test]
fn containers_merge_by_name() {
    let mut s = Server::deployments();
    s.apply("app", &nginx(|_| {}));
    let sidecar = partial(json!({"template": {"spec": {"containers": [
        {"name": "sidecar", "image": "envoy:1.30"}
    ]}}}));
    s.apply("mesh", &sidecar);
    let names = |s: &Server| -> Vec<String> {
        s.obj()["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&s), ["nginx", "sidecar"]);
    assert_eq!(
        s.owned("mesh"),
        [
            ".spec.template.spec.containers[name=\"sidecar\"]",
            ".spec.template.spec.containers[name=\"sidecar\"].image",
            ".spec.template.spec.containers[name=\"sidecar\"].name",
        ]
    );
    // The app changes its own container without touching the sidecar.
    s.apply(
        "app",
        &nginx(|v| {
            v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.16.1");
        }),
    );
    assert_eq!(names(&s), ["nginx", "sidecar"]);
    let c = &s.obj()["spec"]["template"]["spec"]["containers"];
    assert_eq!(c[0]["image"], "nginx:1.16.1");
    assert_eq!(c[1]["image"], "envoy:1.30");
    // The mesh stops applying its container: it goes, the app's stays.
    s.apply("mesh", &partial(json!({"replicas": 3})));
    assert_eq!(names(&s), ["nginx"]);
}

#[test]
fn atomic_selector_and_granular_set() {
    let mut s = Server::deployments();
    s.apply(
        "a",
        &nginx(|v| v["metadata"]["finalizers"] = json!(["example.com/a"])),
    );
    // The selector is one value: adding a key to it is a change of the whole.
    let c = s.conflicts(
        "b",
        &partial(json!({"selector": {"matchLabels": {"app": "nginx", "x": "y"}}})),
    );
    assert_eq!(c.causes()[0].field, ".spec.selector");
    // Finalizers are a set: each manager owns its own items.
    s.apply(
        "b",
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx-deployment", "finalizers": ["example.com/b"]}}),
    );
    assert_eq!(
        s.obj()["metadata"]["finalizers"],
        json!(["example.com/a", "example.com/b"])
    );
    assert_eq!(s.owned("b"), [".metadata.finalizers[=\"example.com/b\"]"]);
    s.apply("a", &nginx(|_| {}));
    assert_eq!(s.obj()["metadata"]["finalizers"], json!(["example.com/b"]));
}

#[test]
fn first_apply_on_an_untracked_object() {
    let mut s = Server::deployments();
    // Created before field tracking (or with managedFields cleared).
    s.obj = Some(nginx(|_| {}));
    // Updates of an untracked object do not start tracking...
    s.update("scaler", |v| v["spec"]["replicas"] = json!(4));
    assert!(s.obj()["metadata"].get("managedFields").is_none());
    // ...an apply does: what was there belongs to `before-first-apply`.
    let c = s.conflicts("kubectl", &nginx(|_| {}));
    assert_eq!(
        c.to_string(),
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
    );
    s.apply(
        "kubectl",
        &nginx(|v| {
            v["spec"].as_object_mut().unwrap().remove("replicas");
        }),
    );
    assert_eq!(
        s.managers(),
        [
            ("kubectl".to_string(), Operation::Apply),
            (BEFORE_FIRST_APPLY.to_string(), Operation::Update),
        ]
    );
    assert!(
        s.owned(BEFORE_FIRST_APPLY)
            .contains(&".spec.replicas".to_string())
    );
}

#[test]
fn written_managed_fields_keep_clear_or_replace() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    let live_entries = s.obj()["metadata"]["managedFields"].clone();
    // Absent: the live entries stay (and the writer's is added).
    s.update("editor", |v| {
        v["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        v["spec"]["paused"] = json!(true);
    });
    assert_eq!(s.managers().len(), 2);
    // A readable list replaces them, as kubectl's client-side to server-side upgrade does.
    s.update("editor", |v| {
        v["metadata"]["managedFields"] = live_entries.clone()
    });
    assert_eq!(s.managers(), [("kubectl".to_string(), Operation::Apply)]);
    // An unreadable one is ignored.
    s.update("editor", |v| {
        v["metadata"]["managedFields"] = json!([{"operation": "Bogus"}])
    });
    assert_eq!(s.managers(), [("kubectl".to_string(), Operation::Apply)]);
    // `[{}]` (and `[]`, as upstream's field manager reads it) clears them.
    for clear in [json!([{}]), json!([])] {
        s.apply("kubectl", &nginx(|_| {}));
        s.update("editor", |v| v["metadata"]["managedFields"] = clear.clone());
        assert!(
            s.obj()["metadata"].get("managedFields").is_none(),
            "{clear}"
        );
    }
}

#[test]
fn status_subresource_writes_are_recorded_apart() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    let main = s.fm.clone();
    s.fm = main.for_subresource("status", ResetFields::paths(&["spec", "metadata.labels"]));
    s.update("kube-controller-manager", |v| {
        v["status"] = json!({"replicas": 3, "readyReplicas": 3});
        // Written managedFields are ignored on a subresource.
        v["metadata"]["managedFields"] = json!([{}]);
    });
    let e = s.entry("kube-controller-manager").unwrap();
    assert_eq!(e.subresource, "status");
    assert_eq!(
        s.owned("kube-controller-manager"),
        [".status.readyReplicas", ".status.replicas"]
    );
    assert_eq!(
        s.obj()["metadata"]["managedFields"][1]["subresource"],
        "status"
    );
    // The main resource's reset fields: status is never owned there.
    s.fm = main;
    s.update("editor", |v| v["status"]["replicas"] = json!(4));
    assert!(s.entry("editor").is_none());
}

#[test]
fn client_side_apply_upgrades_to_server_side_without_conflicts() {
    let mut s = Server::deployments();
    // `kubectl apply` (client-side) created the object and recorded its configuration.
    let config = nginx(|_| {});
    let mut created = config.clone();
    created["metadata"]["annotations"] =
        json!({LAST_APPLIED_ANNOTATION: serde_json::to_string(&config).unwrap()});
    s.create("kubectl-client-side-apply", created);
    // Someone else scales it afterwards.
    s.update("scaler", |v| v["spec"]["replicas"] = json!(5));

    // `kubectl apply --server-side` of a new image: kubectl-client-side-apply's fields
    // that still match the annotation change hands without a conflict...
    let new_image = nginx(|v| {
        v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.16.1");
        v["spec"].as_object_mut().unwrap().remove("replicas");
    });
    s.apply("kubectl", &new_image);
    assert_eq!(
        s.obj()["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.16.1"
    );
    // ...and the annotation follows what was applied.
    let recorded = s.obj()["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
        .as_str()
        .unwrap();
    let recorded: Value = serde_json::from_str(recorded).unwrap();
    assert_eq!(recorded, new_image);
    // replicas was not kubectl's any more (the scaler changed it): still a conflict.
    let c = s.conflicts("kubectl", &nginx(|_| {}));
    assert_eq!(c.0.len(), 1);
    assert_eq!(c.0[0].manager.manager, "scaler");
    // Another manager gets no such allowance.
    let c = s.conflicts(
        "helm",
        &nginx(|v| {
            v["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.17");
            v["spec"].as_object_mut().unwrap().remove("replicas");
        }),
    );
    assert!(c.0.iter().any(|c| c.manager.manager == "kubectl"));
}

#[test]
fn configmap_example_from_the_documentation() {
    let mut s = Server::config_maps();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
        "data": {"key": "some value"}});
    s.apply("kubectl", &cm);
    assert_eq!(
        s.obj()["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {"f:key": {}}, "f:metadata": {"f:labels": {"f:test-label": {}}}})
    );
    // A different value for a field kubectl owns, written by update, changes hands.
    s.update("kube-controller-manager", |v| {
        v["data"]["key"] = json!("new value")
    });
    assert_eq!(s.owned("kube-controller-manager"), [".data.key"]);
    assert_eq!(s.owned("kubectl"), [".metadata.labels.test-label"]);
}

#[test]
fn refused_configurations() {
    let mut s = Server::deployments();
    let cases: Vec<(Value, &str)> = vec![
        (json!([1]), "apply configuration must be a JSON object"),
        (
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "x"}}),
            "invalid object type: apps/v1, Kind=ReplicaSet",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Deployment", "metadata": {"name": "x"}}),
            "invalid object type: /v1, Kind=Deployment",
        ),
        (
            nginx(|v| v["metadata"]["managedFields"] = json!([])),
            "metadata.managedFields must be nil",
        ),
        (
            nginx(|v| {
                let c = v["spec"]["template"]["spec"]["containers"][0].clone();
                v["spec"]["template"]["spec"]["containers"] = json!([c.clone(), c]);
            }),
            ".spec.template.spec.containers: duplicate entries for key [name=\"nginx\"]",
        ),
        (
            nginx(|v| v["spec"]["template"]["spec"]["containers"] = json!([{"image": "x"}])),
            ".spec.template.spec.containers[0]: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)",
        ),
        (
            nginx(|v| v["spec"]["template"] = json!("x")),
            ".spec.template: expected map, got \"x\"",
        ),
    ];
    for (config, message) in cases {
        let err = s.try_apply("kubectl", &config, false).unwrap_err();
        assert_eq!(err.to_string(), message);
        assert!(s.obj.is_none());
    }
    // `managedFields: null` is the same as leaving it out.
    s.apply(
        "kubectl",
        &nginx(|v| v["metadata"]["managedFields"] = Value::Null),
    );
}

#[test]
fn update_entries_are_capped_into_ancient_changes() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    for i in 0..12 {
        s.update(&format!("writer-{i:02}"), |v| {
            v["metadata"]["labels"][format!("l{i}")] = json!("x");
        });
    }
    let entries = s.entries();
    let updates = entries
        .iter()
        .filter(|e| e.operation == Operation::Update)
        .count();
    assert_eq!(updates, MAX_UPDATE_ENTRIES);
    let bucket = s.entry(ANCIENT_CHANGES).unwrap();
    assert_eq!(bucket.fields.len(), 3);
    assert!(s.entry("kubectl").is_some());
}

#[test]
fn entry_time_moves_only_when_the_writer_changes_something() {
    let mut s = Server::deployments();
    s.apply("kubectl", &nginx(|_| {}));
    s.update("editor", |v| v["spec"]["paused"] = json!(true));
    let first = s.entry("editor").unwrap().time;
    // A write by the editor that changes nothing of its own keeps the time.
    s.update("editor", |_| {});
    assert_eq!(s.entry("editor").unwrap().time, first);
    s.update("editor", |v| v["spec"]["paused"] = json!(false));
    assert!(s.entry("editor").unwrap().time > first);
}

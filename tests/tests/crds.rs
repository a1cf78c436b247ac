//! CustomResourceDefinitions driven with kubectl 1.37 against the federation and against
//! a cluster-sim cluster: a definition applied, its objects applied (client-side and
//! server-side), listed with their printer columns, explained, validated (a bad object
//! gets 422 naming the field) and deleted with their definition; and a kube-rs
//! `DynamicObject` client and the official Python client on the same kind.

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use meridian_e2e::Env;
use serde_json::json;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Image
      type: string
      jsonPath: .spec.image
    - name: Size
      type: integer
      jsonPath: .spec.size
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            description: What a widget should be.
            required: [image]
            properties:
              image:
                type: string
                description: The image a widget runs.
              size:
                type: integer
                minimum: 1
                maximum: 10
                default: 1
          status:
            type: object
            properties:
              ready:
                type: boolean
"#;

const WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: small
  namespace: default
spec:
  image: nginx:1.27
  size: 3
"#;

const BAD_WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: huge
  namespace: default
spec:
  image: nginx:1.27
  size: 20
"#;

/// Runs kubectl with `args` in `context`, returning (success, stdout, stderr).
fn kubectl(env: &Env, context: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["--context", context];
    all.extend_from_slice(args);
    let out = env.run("kubectl", &all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(env: &Env, context: &str, args: &[&str]) -> String {
    let (success, out, err) = kubectl(env, context, args);
    assert!(
        success,
        "kubectl {args:?} in {context} failed:\n{out}\n{err}"
    );
    out
}

fn write(env: &Env, name: &str, text: &str) -> String {
    let path = env.dir.path().join(name);
    std::fs::write(&path, text).expect("writing a manifest");
    path.to_str().expect("utf-8 path").to_string()
}

/// Polls kubectl until `pred` holds on its stdout, for at most 30 seconds.
fn eventually(env: &Env, context: &str, args: &[&str], pred: impl Fn(bool, &str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (success, out, err) = kubectl(env, context, args);
        if pred(success, &out) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl {args:?} in {context}: condition not met:\n{out}\n{err}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn walk_through(env: &Env, context: &str) {
    let crd = write(env, "crd.yaml", CRD);
    ok(env, context, &["apply", "-f", &crd]);
    ok(
        env,
        context,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=30s",
        ],
    );
    let names = ok(
        env,
        context,
        &[
            "get",
            "crd",
            "widgets.example.com",
            "-o",
            "jsonpath={.status.acceptedNames.kind}",
        ],
    );
    assert_eq!(names, "Widget");
    // As upstream's default table: the name and the creation time, no AGE beside it.
    let crds = ok(env, context, &["get", "crd", "widgets.example.com"]);
    let header: Vec<&str> = crds
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "CREATED", "AT"], "{crds}");

    // Client-side apply (kubectl validates against the downloaded OpenAPI first).
    let widget = write(env, "widget.yaml", WIDGET);
    ok(env, context, &["apply", "-f", &widget]);
    let table = ok(env, context, &["get", "widgets", "-n", "default"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "IMAGE", "SIZE"], "{table}");
    assert!(
        table.contains("small") && table.contains("nginx:1.27"),
        "{table}"
    );
    // Short name and category.
    let short = ok(
        env,
        context,
        &["get", "wd", "small", "-n", "default", "-o", "name"],
    );
    assert_eq!(short.trim(), "widget.example.com/small");
    let all = ok(env, context, &["get", "all", "-n", "default", "-o", "name"]);
    assert!(all.contains("widget.example.com/small"), "{all}");

    // Server-side apply of the same object by another manager.
    ok(
        env,
        context,
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            &widget,
        ],
    );
    let managers = ok(
        env,
        context,
        &[
            "get",
            "widget",
            "small",
            "-n",
            "default",
            "--show-managed-fields",
            "-o",
            "jsonpath={.metadata.managedFields[*].manager}",
        ],
    );
    assert!(managers.contains("other"), "{managers}");

    // kubectl explain reads the published schema.
    let explained = ok(env, context, &["explain", "widgets.spec.image"]);
    assert!(
        explained.contains("The image a widget runs."),
        "{explained}"
    );

    // A bad object: 422 naming the field (kubectl's client-side validation is off so the
    // server answers).
    let bad = write(env, "bad.yaml", BAD_WIDGET);
    let (success, _, err) = kubectl(env, context, &["create", "--validate=false", "-f", &bad]);
    assert!(!success);
    assert!(
        err.contains(
            "spec.size: Invalid value: 20: spec.size in body should be less than or equal to 10"
        ),
        "{err}"
    );

    // Deleting the definition deletes its objects.
    ok(
        env,
        context,
        &["delete", "crd", "widgets.example.com", "--timeout=60s"],
    );
    eventually(
        env,
        context,
        &["api-resources", "--api-group=example.com", "-o", "name"],
        |s, out| s && out.trim().is_empty(),
    );
    // Recreated, the kind starts empty.
    ok(env, context, &["apply", "-f", &crd]);
    ok(
        env,
        context,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=30s",
        ],
    );
    eventually(
        env,
        context,
        &["get", "widgets", "-A", "-o", "name"],
        |s, out| s && out.trim().is_empty(),
    );
    ok(
        env,
        context,
        &["delete", "crd", "widgets.example.com", "--timeout=60s"],
    );
}

#[test]
fn kubectl_serves_custom_resources_in_the_federation_and_a_member() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let federation = ok(&env, "", &["config", "current-context"]);
    walk_through(&env, federation.trim());
    walk_through(&env, "sim-1");
}

#[tokio::test]
async fn kube_rs_dynamic_objects_round_trip() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let federation = ok(&env, "", &["config", "current-context"]);
    let crd = write(&env, "crd.yaml", CRD);
    ok(&env, federation.trim(), &["apply", "-f", &crd]);
    ok(
        &env,
        federation.trim(),
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=30s",
        ],
    );

    let client = env.federation().await;
    // Aggregated discovery (two requests) describes what per-group discovery does.
    let aggregated = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    let plain = kube::Discovery::new(client.clone())
        .run()
        .await
        .expect("per-group discovery");
    let describe = |d: &kube::Discovery| {
        let mut all: Vec<String> = d
            .groups()
            .flat_map(|g| {
                g.versions()
                    .flat_map(|v| g.versioned_resources(v))
                    .map(|(ar, caps)| {
                        // A subresource by name, kind and verbs: kube-rs reads the group of
                        // an aggregated subresource's body from its parent, not the answer.
                        let subs: Vec<String> = caps
                            .subresources
                            .iter()
                            .map(|(s, c)| format!("{}:{}:{:?}", s.plural, s.kind, c.operations))
                            .collect();
                        format!("{ar:?} {:?} {:?} {subs:?}", caps.scope, caps.operations)
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        all
    };
    let described = describe(&aggregated);
    assert!(
        described.iter().any(|r| r.contains("\"Widget\"")),
        "the custom kind is in aggregated discovery: {described:?}"
    );
    assert_eq!(described, describe(&plain));

    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "dyn"},
        "spec": {"image": "redis:7"}
    }))
    .expect("object");
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    assert_eq!(created.data["spec"]["size"], 1, "defaulted");
    let listed = api.list(&Default::default()).await.expect("list");
    assert_eq!(listed.items.len(), 1);
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "bad"}, "spec": {"image": "redis:7", "size": "big"}
    }))
    .expect("object");
    match api.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422);
            assert!(status.message.contains("spec.size"), "{}", status.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
}

/// The official Python client (installed by tools/install-python-client.sh) drives the
/// kind through CustomObjectsApi in the federation and in a member; the script's asserts
/// are the checks (tests/testdata/python-client/custom_objects.py).
#[test]
fn python_client_drives_custom_objects_in_the_federation_and_a_member() {
    let python = meridian_e2e::python_client_path();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/python-client/custom_objects.py"
    );
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let federation = ok(&env, "", &["config", "current-context"]);
    let crd = write(&env, "crd.yaml", CRD);
    for context in [federation.trim(), "sim-1"] {
        ok(&env, context, &["apply", "-f", &crd]);
        ok(
            &env,
            context,
            &[
                "wait",
                "--for=condition=Established",
                "crd/widgets.example.com",
                "--timeout=30s",
            ],
        );
        let out = std::process::Command::new(&python)
            .arg(script)
            .arg(context)
            .env("KUBECONFIG", &env.merged)
            .env("HOME", env.dir.path())
            .output()
            .expect("running python");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
            "the Python client in {context}:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The vendored prometheus-operator data (see its README.md and LICENSE).
const PROMETHEUS_OPERATOR: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/prometheus-operator");

#[test]
fn prometheus_operator_definitions_and_objects_apply() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let federation = ok(&env, "", &["config", "current-context"]);
    let ctx = federation.trim();
    let crds = format!("{PROMETHEUS_OPERATOR}/crds");
    let examples = format!("{PROMETHEUS_OPERATOR}/examples");

    // kubectl create, then server-side apply over them (hundreds of KiB of schema each).
    ok(&env, ctx, &["create", "-f", &crds]);
    ok(&env, ctx, &["apply", "--server-side", "-f", &crds]);
    ok(
        &env,
        ctx,
        &[
            "wait",
            "--for=condition=Established",
            "crd/prometheuses.monitoring.coreos.com",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/podmonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
            "--timeout=60s",
        ],
    );
    // Client-side apply of the biggest fails as upstream: its last-applied annotation
    // would be larger than annotations may be.
    let big = format!("{crds}/monitoring.coreos.com_prometheuses.yaml");
    let (success, _, err) = kubectl(&env, ctx, &["apply", "-f", &big]);
    assert!(!success);
    assert!(
        err.contains("metadata.annotations: Too long: must have at most 262144 bytes"),
        "{err}"
    );

    // The getting-started objects apply (validated client-side against the published
    // schemas, then by the server, CEL rules included), and list with their columns.
    ok(&env, ctx, &["apply", "-n", "default", "-f", &examples]);
    let table = ok(&env, ctx, &["get", "prometheus", "-n", "default"]);
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "VERSION",
            "DESIRED",
            "READY",
            "RECONCILED",
            "AVAILABLE",
            "AGE"
        ],
        "{table}"
    );
    let monitors = ok(
        &env,
        ctx,
        &[
            "get",
            "servicemonitors,podmonitors",
            "-n",
            "default",
            "-o",
            "name",
        ],
    );
    assert!(
        monitors.contains("servicemonitor.monitoring.coreos.com/example-app"),
        "{monitors}"
    );
    assert!(
        monitors.contains("podmonitor.monitoring.coreos.com/example-app"),
        "{monitors}"
    );
    let explained = ok(
        &env,
        ctx,
        &["explain", "prometheus.spec.serviceAccountName"],
    );
    assert!(explained.contains("serviceAccountName"), "{explained}");

    // Deleting the definitions deletes the objects.
    ok(&env, ctx, &["delete", "-f", &crds, "--timeout=60s"]);
    eventually(
        &env,
        ctx,
        &[
            "api-resources",
            "--api-group=monitoring.coreos.com",
            "-o",
            "name",
        ],
        |s, out| s && out.trim().is_empty(),
    );
}

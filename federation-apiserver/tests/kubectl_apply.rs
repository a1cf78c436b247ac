//! End-to-end: `kubectl apply --server-side` (kubectl 1.37, installed by
//! tools/install-kubectl.sh) against the real server: two field managers, conflicts,
//! `--force-conflicts`, field removal, the client-side to server-side migration,
//! `--show-managed-fields` and `kubectl diff --server-side`.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::Server;
use serde_json::Value;

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.kubeconfig.parent().unwrap())
            .args(args)
            .output()
            .expect("running kubectl")
    }

    /// Runs and requires success, returning stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn get(&self, what: &str) -> Value {
        let out = self.ok(&[
            "get",
            what,
            "-n",
            "shop",
            "-o",
            "json",
            "--show-managed-fields",
        ]);
        serde_json::from_str(&out).expect("kubectl -o json")
    }

    /// Writes `text` to a manifest file named `name` and returns its path.
    fn manifest(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
}

/// A Deployment manifest with `replicas`, `image` and extra labels.
fn deployment(name: &str, replicas: u32, image: &str, labels: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: shop\n  labels:\n    app: {name}\n{labels}spec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n        ports:\n        - containerPort: 80\n"
    )
}

/// The managers of an object's managedFields, with their operations.
fn managers(obj: &Value) -> Vec<(String, String)> {
    let entries = obj["metadata"]["managedFields"].as_array().cloned();
    let mut out: Vec<(String, String)> = entries
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("manager"), s("operation"))
        })
        .collect();
    out.sort();
    out
}

fn start() -> (Server, tempfile::TempDir, Kubectl) {
    let (server, dir) = Server::start(&[]);
    let k = Kubectl {
        bin: meridian_e2e::kubectl_path(),
        kubeconfig: server.kubeconfig().to_owned(),
        dir: dir.path().to_path_buf(),
    };
    k.ok(&["create", "namespace", "shop"]);
    (server, dir, k)
}

#[test]
fn server_side_apply_between_two_managers() {
    let (_server, _dir, k) = start();
    let alice = k.manifest(
        "alice.yaml",
        &deployment("web", 2, "nginx:1.27", "    tier: front\n"),
    );
    let out = k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=alice",
        "-f",
        &alice,
    ]);
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );

    // Without --show-managed-fields kubectl hides them; with it they are there.
    let plain = k.ok(&["get", "deploy", "web", "-n", "shop", "-o", "yaml"]);
    assert!(!plain.contains("managedFields"), "{plain}");
    let shown = k.ok(&[
        "get",
        "deploy",
        "web",
        "-n",
        "shop",
        "-o",
        "yaml",
        "--show-managed-fields",
    ]);
    assert!(shown.contains("managedFields:"), "{shown}");
    assert!(shown.contains("manager: alice"), "{shown}");
    assert!(shown.contains("operation: Apply"), "{shown}");

    // bob wants other replicas: a conflict naming alice and the field.
    let bob = k.manifest("bob.yaml", &deployment("web", 3, "nginx:1.27", ""));
    let clash = k.run(&["apply", "--server-side", "--field-manager=bob", "-f", &bob]);
    assert!(!clash.status.success());
    let err = String::from_utf8_lossy(&clash.stderr);
    assert!(
        err.contains("Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"),
        "{err}"
    );
    assert_eq!(k.get("deploy/web")["spec"]["replicas"], 2);

    // `kubectl diff --server-side` shows what bob's forced apply would change, stores nothing.
    let diff = k.run(&[
        "diff",
        "--server-side",
        "--field-manager=bob",
        "--force-conflicts",
        "-f",
        &bob,
    ]);
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    let shown = String::from_utf8_lossy(&diff.stdout);
    assert!(
        shown.contains("-  replicas: 2") && shown.contains("+  replicas: 3"),
        "{shown}"
    );
    assert_eq!(k.get("deploy/web")["spec"]["replicas"], 2);

    let forced = k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=bob",
        "--force-conflicts",
        "-f",
        &bob,
    ]);
    assert!(forced.contains("serverside-applied"), "{forced}");
    let web = k.get("deploy/web");
    assert_eq!(web["spec"]["replicas"], 3);
    assert_eq!(
        managers(&web),
        [
            ("alice".into(), "Apply".into()),
            ("bob".into(), "Apply".into())
        ]
    );

    // alice stops applying `tier` and `replicas`: her label goes (only she applied it);
    // the image both apply stays, and bob keeps the replicas.
    let alice_less = k.manifest("alice2.yaml", &deployment("web", 3, "nginx:1.27", ""));
    let text = std::fs::read_to_string(&alice_less)
        .unwrap()
        .replace("  replicas: 3\n", "");
    std::fs::write(&alice_less, text).unwrap();
    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager=alice",
        "-f",
        &alice_less,
    ]);
    let web = k.get("deploy/web");
    assert!(web["metadata"]["labels"].get("tier").is_none(), "{web}");
    assert_eq!(web["spec"]["replicas"], 3);
    let image = &web["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(image, "nginx:1.27");
}

#[test]
fn client_side_apply_migrates_to_server_side_and_back() {
    let (_server, _dir, k) = start();
    let v1 = k.manifest("v1.yaml", &deployment("csa", 2, "nginx:1.27", ""));
    let out = k.ok(&["apply", "-f", &v1]);
    assert!(out.contains("deployment.apps/csa created"), "{out}");
    let csa = k.get("deploy/csa");
    assert_eq!(
        managers(&csa),
        [("kubectl-client-side-apply".into(), "Update".into())]
    );

    // The same fields, changed, applied server-side with kubectl's default manager: no
    // conflict, and kubectl's upgrade hands the client-side manager's fields over.
    let v2 = k.manifest("v2.yaml", &deployment("csa", 4, "nginx:1.28", ""));
    let out = k.ok(&["apply", "--server-side", "-f", &v2]);
    assert!(out.contains("serverside-applied"), "{out}");
    let ssa = k.get("deploy/csa");
    assert_eq!(ssa["spec"]["replicas"], 4);
    let image = &ssa["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(image, "nginx:1.28");
    // kubectl keeps the annotation in sync itself, as its own `kubectl-last-applied`.
    assert_eq!(
        managers(&ssa),
        [
            ("kubectl".into(), "Apply".into()),
            ("kubectl-last-applied".into(), "Apply".into())
        ]
    );
    let last = ssa["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .expect("the annotation is kept up to date");
    assert!(last.contains("nginx:1.28"), "{last}");

    // Back to client-side apply: it still works from the annotation.
    let v3 = k.manifest("v3.yaml", &deployment("csa", 5, "nginx:1.28", ""));
    let out = k.ok(&["apply", "-f", &v3]);
    assert!(out.contains("deployment.apps/csa configured"), "{out}");
    assert_eq!(k.get("deploy/csa")["spec"]["replicas"], 5);
}

#[test]
fn imperative_commands_record_their_managers() {
    let (_server, _dir, k) = start();
    k.ok(&["create", "deployment", "web", "-n", "shop", "--image=nginx"]);
    k.ok(&["label", "deploy/web", "-n", "shop", "tier=front"]);
    k.ok(&["scale", "deploy/web", "-n", "shop", "--replicas=3"]);
    let web = k.get("deploy/web");
    let found = managers(&web);
    for m in ["kubectl-create", "kubectl-label"] {
        assert!(
            found.iter().any(|(name, op)| name == m && op == "Update"),
            "{m} missing: {found:?}"
        );
    }
    // kubectl scale names no manager: the User-Agent's `kubectl` is recorded, under the
    // scale subresource, owning the replicas it set.
    let entries = web["metadata"]["managedFields"].as_array().unwrap();
    let scale = entries.iter().find(|e| e["subresource"] == "scale");
    let scale = scale.unwrap_or_else(|| panic!("no scale entry: {found:?}"));
    assert_eq!(scale["manager"], "kubectl");
    assert_eq!(scale["operation"], "Update");
    assert_eq!(
        scale["fieldsV1"],
        serde_json::json!({"f:spec": {"f:replicas": {}}})
    );
    let create = entries.iter().find(|e| e["manager"] == "kubectl-create");
    let create = &create.unwrap()["fieldsV1"];
    assert!(create["f:spec"].get("f:replicas").is_none(), "{create}");
}

#[test]
fn the_example_applies_server_side_with_the_federation_kinds() {
    let (server, dir) = Server::start(&[]);
    let k = Kubectl {
        bin: meridian_e2e::kubectl_path(),
        kubeconfig: server.kubeconfig().to_owned(),
        dir: dir.path().to_path_buf(),
    };
    let web = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/web.yaml");
    let web = web.to_str().unwrap();
    let out = k.ok(&["apply", "--server-side", "-f", web]);
    for what in [
        "namespace/shop serverside-applied",
        "deployment.apps/web serverside-applied",
        "service/web serverside-applied",
        "propagationpolicy.federation.meridian.dev/web serverside-applied",
    ] {
        assert!(out.contains(what), "{what} missing:\n{out}");
    }
    // Applying it again changes nothing.
    let before = k.get("deploy/web")["metadata"]["resourceVersion"].clone();
    k.ok(&["apply", "--server-side", "-f", web]);
    assert_eq!(k.get("deploy/web")["metadata"]["resourceVersion"], before);
    let policy = k.get("propagationpolicy/web");
    assert_eq!(managers(&policy), [("kubectl".into(), "Apply".into())]);
}

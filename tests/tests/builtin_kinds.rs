//! End-to-end: kubectl 1.37 against the federation and a cluster-sim cluster with
//! `examples/kinds.yaml`, one object of each built-in kind beyond Deployments and
//! Services: apply, the `kubectl get` tables, `get all`, `explain`, `scale statefulset`,
//! `api-resources` (from aggregated discovery alone), a 422 naming the field for a bad object of each kind, and
//! `delete -f`. On the member the simulated loops run the StatefulSet, DaemonSet and Job, so
//! their rows show them done, and the StatefulSet's claims outlive it.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::process::Output;
use std::time::Duration;

use meridian_e2e::Env;

const NAMESPACE: &str = "catalog";

/// (resource as kubectl names it, object, namespaced, header kubectl prints).
const TABLES: &[(&str, &str, bool, &str)] = &[
    (
        "pvc",
        "uploads",
        true,
        "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE",
    ),
    ("quota", "compute", true, "NAME AGE REQUEST LIMIT"),
    ("limits", "defaults", true, "NAME CREATED AT"),
    ("sts", "db", true, "NAME READY AGE"),
    (
        "ds",
        "log-agent",
        true,
        "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE",
    ),
    (
        "controllerrevisions",
        "db-7d9c6b5f4",
        true,
        "NAME CONTROLLER REVISION AGE",
    ),
    (
        "jobs",
        "migrate",
        true,
        "NAME STATUS COMPLETIONS DURATION AGE",
    ),
    (
        "cj",
        "nightly-report",
        true,
        "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE",
    ),
    ("ing", "web", true, "NAME CLASS HOSTS ADDRESS PORTS AGE"),
    (
        "ingressclass",
        "catalog-nginx",
        false,
        "NAME CONTROLLER PARAMETERS AGE",
    ),
    ("netpol", "db-from-web", true, "NAME POD-SELECTOR AGE"),
    (
        "pdb",
        "db",
        true,
        "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
    ),
    (
        "hpa",
        "web",
        true,
        "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE",
    ),
    (
        "pc",
        "catalog-high",
        false,
        "NAME VALUE GLOBAL-DEFAULT PREEMPTIONPOLICY AGE",
    ),
    (
        "sc",
        "catalog-fast",
        false,
        "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE",
    ),
];

/// A row's cells kubectl prints for the example's objects (a prefix of the row).
const ROWS: &[(&str, &str, &str)] = &[
    ("pvc", "uploads", "uploads Pending catalog-fast"),
    ("sts", "db", "db 0/1"),
    (
        "ds",
        "log-agent",
        "log-agent 0 0 0 0 0 kubernetes.io/os=linux",
    ),
    (
        "controllerrevisions",
        "db-7d9c6b5f4",
        "db-7d9c6b5f4 <none> 1",
    ),
    ("jobs", "migrate", "migrate Running 0/1"),
    (
        "cj",
        "nightly-report",
        "nightly-report 0 3 * * * Etc/UTC False 0 <none>",
    ),
    (
        "ing",
        "web",
        "web catalog-nginx catalog.example.com 80, 443",
    ),
    ("netpol", "db-from-web", "db-from-web app=db"),
    ("pdb", "db", "db 1 N/A 0"),
    ("hpa", "web", "web Deployment/web cpu: <unknown>/70% 2 10 0"),
    (
        "pc",
        "catalog-high",
        "catalog-high 100000 false PreemptLowerPriority",
    ),
    (
        "sc",
        "catalog-fast",
        "catalog-fast csi.example.com Delete Immediate true",
    ),
];

/// Rows that differ on a member, where cluster-sim runs the workloads: the StatefulSet's pod
/// is Ready, the DaemonSet has a pod on the one node, the Job has completed.
const MEMBER_ROWS: &[(&str, &str, &str)] = &[
    ("sts", "db", "db 1/1"),
    (
        "ds",
        "log-agent",
        "log-agent 1 1 1 1 1 kubernetes.io/os=linux",
    ),
    ("jobs", "migrate", "migrate Complete 1/1"),
];

/// Bad objects, one of each kind: (file name, manifest, field the 422 names).
const BAD: &[(&str, &str, &str)] = &[
    (
        "pvc.yaml",
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: bad, namespace: catalog}\nspec:\n  resources: {requests: {storage: 1Gi}}\n",
        "spec.accessModes",
    ),
    (
        "quota.yaml",
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: bad, namespace: catalog}\nspec:\n  hard: {pods: ten}\n",
        "spec.hard[pods]",
    ),
    (
        "limits.yaml",
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: bad, namespace: catalog}\nspec:\n  limits: [{type: Node}]\n",
        "spec.limits[0].type",
    ),
    (
        "sts.yaml",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: bad, namespace: catalog}\nspec:\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: other}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
        "spec.template.metadata.labels",
    ),
    (
        "sts-name.yaml",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: Bad_Name, namespace: catalog}\nspec:\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
        "metadata.name",
    ),
    (
        "ds.yaml",
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: bad, namespace: catalog}\nspec:\n  updateStrategy: {type: Recreate}\n  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n    spec: {containers: [{name: c, image: busybox, ports: [{containerPort: 70000}]}]}\n",
        "spec.updateStrategy.type",
    ),
    (
        "revision.yaml",
        "apiVersion: apps/v1\nkind: ControllerRevision\nmetadata: {name: bad, namespace: catalog}\nrevision: -1\n",
        "revision",
    ),
    (
        "job.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: bad, namespace: catalog}\nspec:\n  template:\n    spec: {restartPolicy: Always, containers: [{name: c, image: busybox}]}\n",
        "spec.template.spec.restartPolicy",
    ),
    (
        "cronjob.yaml",
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: bad, namespace: catalog}\nspec:\n  schedule: every day\n  jobTemplate:\n    spec:\n      template:\n        spec: {restartPolicy: Never, containers: [{name: c, image: busybox}]}\n",
        "spec.schedule",
    ),
    (
        "ingress.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: bad, namespace: catalog}\nspec:\n  rules:\n  - http:\n      paths:\n      - path: /\n        backend: {service: {name: web, port: {number: 80}}}\n",
        "spec.rules[0].http.paths[0].pathType",
    ),
    (
        "ingressclass.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: bad}\nspec: {controller: nginx}\n",
        "spec.controller",
    ),
    (
        "netpol.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: bad, namespace: catalog}\nspec:\n  podSelector: {}\n  ingress: [{ports: [{port: 70000}]}]\n",
        "spec.ingress[0].ports[0].port",
    ),
    (
        "pdb.yaml",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: bad, namespace: catalog}\nspec: {minAvailable: 1, maxUnavailable: 1}\n",
        "spec",
    ),
    (
        "hpa.yaml",
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad, namespace: catalog}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  minReplicas: 5\n  maxReplicas: 2\n",
        "spec.maxReplicas",
    ),
    (
        "pc.yaml",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: bad}\nvalue: 2000000000\n",
        "value",
    ),
    (
        "sc.yaml",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: bad}\nprovisioner: csi.example.com\nreclaimPolicy: Recycle\n",
        "reclaimPolicy",
    ),
];

struct Target<'a> {
    env: &'a Env,
    /// `--context` for a member; `None` for the federation (the current context).
    context: Option<&'a str>,
}

impl Target<'_> {
    fn args<'b>(&'b self, args: &[&'b str]) -> Vec<&'b str> {
        let mut all = Vec::new();
        if let Some(c) = self.context {
            all.extend(["--context", c]);
        }
        all.extend_from_slice(args);
        all
    }

    fn run(&self, args: &[&str]) -> Output {
        self.env.run("kubectl", &self.args(args))
    }

    fn ok(&self, args: &[&str]) -> String {
        self.env.ok("kubectl", &self.args(args))
    }

    fn name(&self) -> &str {
        self.context.unwrap_or("federation")
    }
}

/// Whitespace-normalised lines of kubectl's table output.
fn lines(out: &str) -> Vec<String> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn check(t: &Target<'_>, example: &str) {
    let who = t.name();
    t.ok(&["create", "namespace", NAMESPACE]);
    let applied = t.ok(&["apply", "-f", example]);
    for created in [
        "storageclass.storage.k8s.io/catalog-fast created",
        "priorityclass.scheduling.k8s.io/catalog-high created",
        "ingressclass.networking.k8s.io/catalog-nginx created",
        "persistentvolumeclaim/uploads created",
        "resourcequota/compute created",
        "limitrange/defaults created",
        "statefulset.apps/db created",
        "daemonset.apps/log-agent created",
        "controllerrevision.apps/db-7d9c6b5f4 created",
        "job.batch/migrate created",
        "cronjob.batch/nightly-report created",
        "ingress.networking.k8s.io/web created",
        "networkpolicy.networking.k8s.io/db-from-web created",
        "poddisruptionbudget.policy/db created",
        "horizontalpodautoscaler.autoscaling/web created",
    ] {
        assert!(applied.contains(created), "{who}: {created}\n{applied}");
    }
    // Applying again changes nothing: the defaults the server filled in do not show as
    // differences to the manifest.
    let again = t.ok(&["apply", "-f", example]);
    for unchanged in [
        "job.batch/migrate unchanged",
        "cronjob.batch/nightly-report unchanged",
        "daemonset.apps/log-agent unchanged",
        "horizontalpodautoscaler.autoscaling/web unchanged",
    ] {
        assert!(again.contains(unchanged), "{who}: {unchanged}\n{again}");
    }

    for (resource, name, namespaced, header) in TABLES {
        let mut args = vec!["get", resource, name];
        if *namespaced {
            args.extend(["-n", NAMESPACE]);
        }
        let out = t.ok(&args);
        let l = lines(&out);
        assert_eq!(l[0], *header, "{who}: kubectl get {resource}\n{out}");
        assert!(l[1].starts_with(name), "{who}: {resource}\n{out}");
    }
    if t.context.is_some() {
        for target in ["statefulset/db", "daemonset/log-agent"] {
            t.ok(&[
                "rollout",
                "status",
                target,
                "-n",
                NAMESPACE,
                "--timeout=120s",
            ]);
        }
        t.ok(&[
            "wait",
            "--for=condition=complete",
            "job/migrate",
            "-n",
            NAMESPACE,
            "--timeout=120s",
        ]);
    }
    for (resource, name, row) in ROWS {
        let row = match t.context {
            Some(_) => MEMBER_ROWS
                .iter()
                .find(|(r, n, _)| r == resource && n == name)
                .map_or(*row, |m| m.2),
            None => *row,
        };
        let namespaced = TABLES
            .iter()
            .find(|(r, ..)| r == resource)
            .is_some_and(|(_, _, ns, _)| *ns);
        let mut args = vec!["get", resource, name];
        if namespaced {
            args.extend(["-n", NAMESPACE]);
        }
        let out = t.ok(&args);
        assert!(
            lines(&out)[1].starts_with(row),
            "{who}: kubectl get {resource} {name}: want a row starting {row:?}\n{out}"
        );
    }

    // `get all` shows the workload kinds upstream puts in category `all`.
    let all = t.ok(&["get", "all", "-n", NAMESPACE]);
    for shown in [
        "statefulset.apps/db",
        "daemonset.apps/log-agent",
        "job.batch/migrate",
        "cronjob.batch/nightly-report",
        "horizontalpodautoscaler.autoscaling/web",
    ] {
        assert!(all.contains(shown), "{who}: get all lacks {shown}\n{all}");
    }
    assert!(!all.contains("poddisruptionbudget"), "{who}: {all}");

    // Defaults kubectl and Helm rely on, and the Job's generated selector.
    let sts = t.ok(&[
        "get",
        "sts",
        "db",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.podManagementPolicy} {.spec.updateStrategy.type} {.spec.revisionHistoryLimit}",
    ]);
    assert_eq!(sts, "OrderedReady RollingUpdate 10", "{who}");
    let job = t.ok(&[
        "get",
        "job",
        "migrate",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.metadata.uid} {.spec.selector.matchLabels.batch\\.kubernetes\\.io/controller-uid} {.spec.completions} {.spec.parallelism} {.spec.completionMode}",
    ]);
    let parts: Vec<&str> = job.split(' ').collect();
    assert_eq!(parts.len(), 5, "{who}: {job}");
    assert_eq!(
        parts[0], parts[1],
        "{who}: the selector holds the uid: {job}"
    );
    assert_eq!(&parts[2..], ["1", "1", "NonIndexed"], "{who}: {job}");

    // `kubectl scale` through the scale subresource.
    let scaled = t.ok(&[
        "scale",
        "statefulset",
        "db",
        "-n",
        NAMESPACE,
        "--replicas=3",
    ]);
    assert!(
        scaled.contains("statefulset.apps/db scaled"),
        "{who}: {scaled}"
    );
    let replicas = t.ok(&[
        "get",
        "sts",
        "db",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.replicas}",
    ]);
    assert_eq!(replicas, "3", "{who}");

    // A StatefulSet's identity fields are fixed; its replicas and template are not.
    let serve = t.run(&[
        "patch",
        "sts",
        "db",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        r#"{"spec":{"serviceName":"other"}}"#,
    ]);
    let err = String::from_utf8_lossy(&serve.stderr);
    assert!(
        !serve.status.success() && err.contains("is invalid") && err.contains("spec: Forbidden"),
        "{who}: {err}"
    );
    // A claim grows but never shrinks.
    t.ok(&[
        "patch",
        "pvc",
        "uploads",
        "-n",
        NAMESPACE,
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ]);
    let shrink = t.run(&[
        "patch",
        "pvc",
        "uploads",
        "-n",
        NAMESPACE,
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}"#,
    ]);
    let err = String::from_utf8_lossy(&shrink.stderr);
    assert!(
        !shrink.status.success() && err.contains("spec.resources.requests.storage"),
        "{who}: {err}"
    );

    for (resource, field) in [
        (
            "statefulset.spec.podManagementPolicy",
            "podManagementPolicy",
        ),
        ("daemonset.spec.updateStrategy", "updateStrategy"),
        ("job.spec.backoffLimit", "backoffLimit"),
        ("cronjob.spec.concurrencyPolicy", "concurrencyPolicy"),
        ("pvc.spec.volumeMode", "volumeMode"),
        ("hpa.spec.metrics", "metrics"),
        ("ingress.spec.rules", "rules"),
        ("networkpolicy.spec.podSelector", "podSelector"),
        ("pdb.spec.minAvailable", "minAvailable"),
        ("resourcequota.spec.hard", "hard"),
        ("limitrange.spec.limits", "limits"),
        ("controllerrevision.revision", "revision"),
        ("ingressclass.spec.controller", "controller"),
        ("priorityclass.value", "value"),
        ("storageclass.provisioner", "provisioner"),
    ] {
        let out = t.ok(&["explain", resource]);
        assert!(
            out.contains(&format!("FIELD: {field}")),
            "{who}: kubectl explain {resource}\n{out}"
        );
    }

    let resources = t.ok(&["api-resources"]);
    for row in [
        "persistentvolumeclaims pvc v1 true PersistentVolumeClaim",
        "resourcequotas quota v1 true ResourceQuota",
        "limitranges limits v1 true LimitRange",
        "statefulsets sts apps/v1 true StatefulSet",
        "daemonsets ds apps/v1 true DaemonSet",
        "controllerrevisions apps/v1 true ControllerRevision",
        "jobs batch/v1 true Job",
        "cronjobs cj batch/v1 true CronJob",
        "ingresses ing networking.k8s.io/v1 true Ingress",
        "ingressclasses networking.k8s.io/v1 false IngressClass",
        "networkpolicies netpol networking.k8s.io/v1 true NetworkPolicy",
        "poddisruptionbudgets pdb policy/v1 true PodDisruptionBudget",
        "horizontalpodautoscalers hpa autoscaling/v2 true HorizontalPodAutoscaler",
        "priorityclasses pc scheduling.k8s.io/v1 false PriorityClass",
        "storageclasses sc storage.k8s.io/v1 false StorageClass",
    ] {
        assert!(
            lines(&resources).iter().any(|l| l == row),
            "{who}: api-resources lacks {row:?}\n{resources}"
        );
    }

    // Aggregated discovery: kubectl learns every resource from `/api` and `/apis` alone,
    // with no request per group version.
    let out = t.run(&["api-resources", "-v=6"]);
    assert!(out.status.success(), "{who}: api-resources -v=6 failed");
    let log = String::from_utf8_lossy(&out.stderr);
    let gets: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("verb=\"GET\" url=\""))
        .map(|(_, rest)| rest)
        .collect();
    assert!(
        gets.iter().any(|g| g.contains("/apis?")) && gets.iter().any(|g| g.contains("/api?")),
        "{who}: no discovery requests seen\n{log}"
    );
    assert!(
        !gets
            .iter()
            .any(|g| g.contains("/apis/") || g.contains("/api/v1?")),
        "{who}: kubectl fell back to per-group discovery\n{log}"
    );

    for (file, manifest, field) in BAD {
        let path = t.env.dir.path().join(format!("{who}-bad-{file}"));
        std::fs::write(&path, manifest).unwrap();
        let out = t.run(&["apply", "-v=6", "-f", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{who}: {file} was accepted");
        assert!(
            err.contains("422") && err.contains("is invalid") && err.contains(&format!("{field}:")),
            "{who}: {file}: want a 422 naming {field}\n{err}"
        );
    }

    let deleted = t.ok(&["delete", "-f", example]);
    assert!(
        deleted.contains("statefulset.apps \"db\" deleted"),
        "{who}: {deleted}"
    );
    if t.context.is_some() {
        // A member keeps the StatefulSet's claims (the default retention policy); they go
        // once its pods have.
        meridian_e2e::poll_until(
            Duration::from_secs(60),
            "the StatefulSet's pods gone",
            || {
                t.ok(&["get", "pods", "-l", "app=db", "-n", NAMESPACE, "-o", "name"])
                    .trim()
                    .is_empty()
                    .then_some(())
            },
        );
        let claims = t.ok(&["delete", "pvc", "-l", "app=db", "-n", NAMESPACE]);
        assert!(
            claims.contains("persistentvolumeclaim \"data-db-0\" deleted"),
            "{who}: {claims}"
        );
    }
    let left = t.run(&[
        "get",
        "pvc,quota,limits,sts,ds,controllerrevisions,jobs,cj,ing,netpol,pdb,hpa",
        "-n",
        NAMESPACE,
    ]);
    let said = String::from_utf8_lossy(&left.stderr);
    assert!(
        left.stdout.is_empty() && said.contains("No resources found"),
        "{who}: left behind:\n{}",
        String::from_utf8_lossy(&left.stdout)
    );
    for cluster_scoped in [
        "ingressclass/catalog-nginx",
        "pc/catalog-high",
        "sc/catalog-fast",
    ] {
        let out = t.run(&["get", cluster_scoped]);
        assert!(!out.status.success(), "{who}: {cluster_scoped} left behind");
    }
}

#[test]
fn kubectl_drives_every_builtin_kind_on_the_federation_and_a_member() {
    let env = Env::start_without_controllers(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kinds.yaml");
    check(
        &Target {
            env: &env,
            context: None,
        },
        example,
    );
    check(
        &Target {
            env: &env,
            context: Some("sim-1"),
        },
        example,
    );
}

/// kube-rs's event recorder writes `events.k8s.io/v1` Events (a new one, then a series
/// patch); they are core Events too: `kubectl describe` of the object shows them, and
/// `kubectl get events` counts the series.
#[tokio::test]
async fn events_from_the_kube_rs_recorder_are_core_events() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Resource;
    use kube::api::{Api, ListParams, PostParams};
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    for client in [env.federation().await, env.member("sim-1").await] {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("settings".into());
        let cm = match cms.create(&PostParams::default(), &cm).await {
            Ok(cm) => cm,
            Err(_) => cms.get("settings").await.unwrap(),
        };
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "settings-operator".into(),
                instance: Some("settings-operator-0".into()),
            },
        );
        let event = Event {
            type_: EventType::Normal,
            reason: "Reconciled".into(),
            note: Some("settings are current".into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        let reference = cm.object_ref(&());
        recorder.publish(&event, &reference).await.unwrap();
        recorder.publish(&event, &reference).await.unwrap();

        let v1: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(client.clone(), "default");
        let listed = v1.list(&ListParams::default()).await.unwrap();
        let ours: Vec<_> = listed
            .items
            .iter()
            .filter(|e| e.reporting_controller.as_deref() == Some("settings-operator"))
            .collect();
        assert_eq!(ours.len(), 1, "{:?}", listed.items);
        assert_eq!(ours[0].note.as_deref(), Some("settings are current"));
        assert_eq!(ours[0].series.as_ref().map(|s| s.count), Some(2));
        assert_eq!(
            ours[0].regarding.as_ref().and_then(|r| r.name.as_deref()),
            Some("settings")
        );

        let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
        let about = core
            .list(&ListParams::default().fields("involvedObject.name=settings"))
            .await
            .unwrap();
        let core_ev = about
            .items
            .iter()
            .find(|e| e.reporting_component.as_deref() == Some("settings-operator"))
            .unwrap_or_else(|| panic!("no core Event about settings: {:?}", about.items));
        assert_eq!(core_ev.message.as_deref(), Some("settings are current"));
        assert_eq!(core_ev.reason.as_deref(), Some("Reconciled"));
    }
    for context in [None, Some("sim-1")] {
        let mut args = vec!["describe", "configmap", "settings"];
        if let Some(c) = context {
            args.extend(["--context", c]);
        }
        let out = env.ok("kubectl", &args);
        assert!(
            out.contains("Reconciled") && out.contains("settings are current"),
            "kubectl describe in {context:?}:\n{out}"
        );
    }
}

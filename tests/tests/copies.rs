//! Kinds without replicas end to end. fed-scheduler gives every ServiceAccount, Role and
//! ConfigMap a policy selects a Placement listing every cluster the governing policy
//! selects, shows the governing policy and the ones it overruled, re-places when policies
//! change and removes the Placement when no policy governs the object any more; the copy
//! controller in fed-controllers pushes ServiceAccounts, RBAC, ConfigMaps,
//! NetworkPolicies, Ingresses and PDBs to exactly those members, follows updates, reverts
//! edits made in a member and removes the copies when the object or its policy goes, and
//! brings what the members' copies report back (the federated Ingress's addresses, the
//! federated PDB's counts, each member's on the Placement). A custom kind named before its
//! definition exists is placed as soon as it is defined.

use std::time::Duration;

use fed_api::Placement;
use kube::api::{Api, DeleteParams};
use meridian_e2e::{Env, eventually};

fn dest(p: &Option<Placement>) -> Vec<String> {
    p.iter()
        .flat_map(|p| &p.spec.dest_clusters)
        .map(|t| t.cluster.clone())
        .collect()
}

fn governing(p: &Option<Placement>) -> Option<String> {
    p.as_ref()?
        .status
        .as_ref()?
        .policy
        .as_ref()
        .map(|c| c.governing.name.clone())
}

const POLICIES: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: web-sa, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ServiceAccount, name: web}
  placement:
    clusterAffinity: {regions: [eu]}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: all-sa, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ServiceAccount}
  placement:
    clusterAffinity: {regions: [us]}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: prod-config, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: Role}
  - {apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {federate: "yes"}}}
  placement:
    clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}
"#;

const OBJECTS: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: batch, namespace: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: shop}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop, labels: {federate: "yes"}}
data: {mode: fast}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: local, namespace: shop}
data: {mode: slow}
"#;

#[tokio::test]
async fn copies_are_placed_by_the_governing_policy() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let controller_args = [
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ];
    let controllers = env.controllers(&controller_args);
    let scheduler = env.scheduler(&["--workers=4"]);
    for (c, region, env_label) in [
        ("sim-1", "eu", "prod"),
        ("sim-2", "eu", "dev"),
        ("sim-3", "us", "prod"),
    ] {
        let labels = format!("env={env_label}");
        let out = env.ok(
            "fedctl",
            &[
                "join",
                c,
                "--cluster-context",
                c,
                "--region",
                region,
                "--labels",
                &labels,
                "--wait-seconds",
                "60",
            ],
        );
        assert!(out.contains(&format!("cluster {c} is Ready")), "{out}");
    }
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("policies.yaml", POLICIES);
    env.apply("objects.yaml", OBJECTS);
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), "shop");
    let get = |name: &'static str| {
        let api = placements.clone();
        move || {
            let api = api.clone();
            async move { api.get_opt(name).await.expect("get placement") }
        }
    };
    let within = Duration::from_secs(60);

    // The named selector wins over the kind-only one; the loser is shown.
    let web = eventually(
        "serviceaccount-web placed in eu",
        within,
        get("serviceaccount-web"),
        |p| dest(p) == ["sim-1", "sim-2"] && governing(p).as_deref() == Some("web-sa"),
    )
    .await
    .expect("placement");
    let choice = web
        .status
        .as_ref()
        .and_then(|s| s.policy.clone())
        .expect("policy");
    let overruled: Vec<&str> = choice.overruled.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(overruled, ["all-sa"]);
    assert!(web.spec.dest_clusters.iter().all(|t| t.replicas == 0));
    let owner = &web.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ServiceAccount", "web")
    );
    let scheduled = web
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Scheduled"))
        .expect("Scheduled condition");
    assert_eq!(scheduled.status, "True", "{scheduled:?}");

    eventually(
        "serviceaccount-batch placed in us",
        within,
        get("serviceaccount-batch"),
        |p| dest(p) == ["sim-3"] && governing(p).as_deref() == Some("all-sa"),
    )
    .await;
    // Copied objects' Placements carry the label the copy controller watches by; one an
    // earlier scheduler left unlabelled is labelled by the controllers as they start, even
    // with no scheduler running.
    let label = fed_api::copies::COPY_PLACEMENT_LABEL;
    let labelled = |p: &Option<Placement>| {
        p.as_ref().is_some_and(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(label))
        })
    };
    assert!(labelled(&get("serviceaccount-batch")().await));
    drop(scheduler);
    drop(controllers);
    env.ok(
        "kubectl",
        &[
            "label",
            "placement",
            "serviceaccount-batch",
            "-n",
            "shop",
            &format!("{label}-"),
        ],
    );
    assert!(!labelled(&get("serviceaccount-batch")().await));
    let _controllers = env.controllers(&controller_args);
    eventually(
        "the controllers label an earlier Placement",
        within,
        get("serviceaccount-batch"),
        labelled,
    )
    .await;
    let _scheduler = env.scheduler(&["--workers=4"]);
    eventually(
        "the Role goes to the prod clusters",
        within,
        get("role.rbac.authorization.k8s.io-reader"),
        |p| dest(p) == ["sim-1", "sim-3"],
    )
    .await;
    eventually(
        "the labelled ConfigMap goes to the prod clusters",
        within,
        get("configmap-settings"),
        |p| dest(p) == ["sim-1", "sim-3"],
    )
    .await;
    assert!(
        get("configmap-local")().await.is_none(),
        "a ConfigMap no policy selects gets no Placement"
    );

    // Deleting the winning policy hands the object to the next one.
    env.ok(
        "kubectl",
        &["delete", "propagationpolicy", "web-sa", "-n", "shop"],
    );
    eventually(
        "serviceaccount-web re-placed in us",
        within,
        get("serviceaccount-web"),
        |p| dest(p) == ["sim-3"] && governing(p).as_deref() == Some("all-sa"),
    )
    .await;

    // A label change that leaves the selector: no policy governs it, no Placement.
    env.ok(
        "kubectl",
        &[
            "label",
            "configmap",
            "settings",
            "-n",
            "shop",
            "federate=no",
            "--overwrite",
        ],
    );
    eventually(
        "configmap-settings removed",
        within,
        get("configmap-settings"),
        Option::is_none,
    )
    .await;

    // Deleting the only policy naming a kind removes its objects' Placements.
    let policies: Api<fed_api::PropagationPolicy> = Api::namespaced(fed.clone(), "shop");
    policies
        .delete("prod-config", &DeleteParams::default())
        .await
        .expect("delete policy");
    eventually(
        "the Role's Placement removed",
        within,
        get("role.rbac.authorization.k8s.io-reader"),
        Option::is_none,
    )
    .await;

    // Deleting the object removes its Placement.
    env.ok(
        "kubectl",
        &["delete", "serviceaccount", "batch", "-n", "shop"],
    );
    eventually(
        "serviceaccount-batch removed",
        within,
        get("serviceaccount-batch"),
        Option::is_none,
    )
    .await;
}

const APP: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: app, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: v1, kind: ServiceAccount}
  - {apiVersion: v1, kind: ConfigMap, labelSelector: {matchLabels: {app: web}}}
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: Role}
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding}
  - {apiVersion: networking.k8s.io/v1, kind: NetworkPolicy}
  - {apiVersion: networking.k8s.io/v1, kind: Ingress}
  - {apiVersion: policy/v1, kind: PodDisruptionBudget}
  placement:
    clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: web-settings, namespace: shop, labels: {app: web}}
data: {mode: fast}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: shop}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: web-reads, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects:
- {kind: ServiceAccount, name: web, namespace: shop}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-only, namespace: shop}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  defaultBackend:
    service: {name: web, port: {number: 80}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: shop}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: federation.meridian.dev/v1alpha1
kind: ClusterPropagationPolicy
metadata: {name: platform}
spec:
  resourceSelectors:
  - {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, name: shop-reader}
  - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, labelSelector: {matchLabels: {app.kubernetes.io/part-of: shop}}}
  placement:
    clusterAffinity: {clusterNames: [sim-1, sim-2]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: shop-reader}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get]}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  labels: {app.kubernetes.io/part-of: shop}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
          status:
            type: object
            properties:
              readyReplicas: {type: integer}
              conditions:
                type: array
                items: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// Whether kubectl said the object does not exist.
fn absent(r: &Result<String, String>) -> bool {
    r.as_ref()
        .is_err_and(|e| e.contains("NotFound") || e.contains("not found"))
}

#[tokio::test]
async fn copies_are_pushed_to_the_members_and_removed() {
    let env = Env::start(&["--clusters=3", "--nodes=1", "--ready-delay=0s"]);
    let _controllers = env.controllers(&[
        "--probe-period=1s",
        "--probe-timeout=500ms",
        "--metrics-bind-address=off",
    ]);
    let _scheduler = env.scheduler(&["--workers=4"]);
    // Only sim-1 lets Meridian write the custom group example.com.
    for (c, env_label, custom) in [
        ("sim-1", "prod", "example.com"),
        ("sim-2", "dev", ""),
        ("sim-3", "prod", ""),
    ] {
        let labels = format!("env={env_label}");
        let mut args = vec![
            "join",
            c,
            "--cluster-context",
            c,
            "--labels",
            &labels,
            "--wait-seconds",
            "60",
        ];
        if !custom.is_empty() {
            args.extend(["--custom-resource-group", custom]);
        }
        env.ok("fedctl", &args);
    }
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("app.yaml", APP);
    let within = Duration::from_secs(60);
    let kinds = [
        ("serviceaccount", "web"),
        ("configmap", "web-settings"),
        ("role", "reader"),
        ("rolebinding", "web-reads"),
        ("networkpolicy", "web-only"),
        ("ingress", "web"),
        ("poddisruptionbudget", "web"),
    ];
    // The Placement says every member is in sync (its status says why not, if not).
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), "shop");
    for placement in [
        "serviceaccount-web",
        "configmap-web-settings",
        "role.rbac.authorization.k8s.io-reader",
        "rolebinding.rbac.authorization.k8s.io-web-reads",
        "networkpolicy.networking.k8s.io-web-only",
        "ingress.networking.k8s.io-web",
        "poddisruptionbudget.policy-web",
    ] {
        eventually(
            &format!("{placement}: Propagated True"),
            within,
            || async { placements.get_opt(placement).await.expect("get") },
            |p| {
                p.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Propagated" && c.status == "True")
                        && s.clusters
                            .iter()
                            .map(|c| c.cluster.as_str())
                            .eq(["sim-1", "sim-3"])
                        && s.clusters.iter().all(|c| c.error.is_empty())
                })
            },
        )
        .await;
    }

    let managed = "{.metadata.labels.app\\.kubernetes\\.io/managed-by}";
    for (kind, name) in kinds {
        for member in ["sim-1", "sim-3"] {
            let _seen = eventually(
                &format!("{kind} {name} in {member}"),
                within,
                || async { env.member_get(member, kind, "shop", name, managed) },
                |v| v.as_deref() == Ok("meridian"),
            )
            .await;
        }
        let there = env.member_get("sim-2", kind, "shop", name, managed);
        assert!(
            absent(&there),
            "{kind} {name} must not be in sim-2: {there:?}"
        );
    }
    // Cluster-scoped kinds go through the ClusterPropagationPolicy, to sim-1 and sim-2.
    for (kind, name) in [
        ("clusterrole", "shop-reader"),
        ("customresourcedefinition", "widgets.example.com"),
    ] {
        for member in ["sim-1", "sim-2"] {
            let _seen = eventually(
                &format!("{kind} {name} in {member}"),
                within,
                || async { env.member_get(member, kind, "shop", name, managed) },
                |v| v.as_deref() == Ok("meridian"),
            )
            .await;
        }
        let there = env.member_get("sim-3", kind, "shop", name, managed);
        assert!(
            absent(&there),
            "{kind} {name} must not be in sim-3: {there:?}"
        );
    }
    // What the members' copies report comes back: the federated Ingress lists every
    // member's load-balancer address (cluster-sim's ingress loop gives each member's Ingress
    // its cluster's shared ingress address), the federated PDB sums the members' counts
    // (cluster-sim's disruption loop writes them: no pod matches, so each member wants 1
    // healthy and allows nothing), and the PDB's Placement shows each member's allowed
    // disruptions and its own condition.
    let mut member_ips = Vec::new();
    for member in ["sim-1", "sim-3"] {
        let ip = eventually(
            &format!("the Ingress in {member} addressed by its cluster"),
            within,
            || async {
                env.member_get(
                    member,
                    "ingress",
                    "shop",
                    "web",
                    "{.status.loadBalancer.ingress[*].ip}",
                )
            },
            |v| v.as_ref().is_ok_and(|ip| !ip.trim().is_empty()),
        )
        .await
        .expect("address");
        member_ips.push(ip.trim().to_string());
    }
    assert_ne!(
        member_ips[0], member_ips[1],
        "each cluster has its own address"
    );
    let both = member_ips.join(" ");
    let fed_field = |kind: &str, path: &str| {
        env.run(
            "kubectl",
            &[
                "-n",
                "shop",
                "get",
                kind,
                "web",
                "-o",
                &format!("jsonpath={path}"),
            ],
        )
    };
    let _ingress = eventually(
        "the federated Ingress lists both members' addresses",
        within,
        || async { fed_field("ingress", "{.status.loadBalancer.ingress[*].ip}") },
        |o| String::from_utf8_lossy(&o.stdout).trim() == both,
    )
    .await;
    let _pdb = eventually(
        "the federated PDB sums the members' counts",
        within,
        || async {
            fed_field(
                "poddisruptionbudget",
                "{.status.desiredHealthy} {.status.disruptionsAllowed} {.status.observedGeneration}/{.metadata.generation}",
            )
        },
        |o| {
            let out = String::from_utf8_lossy(&o.stdout);
            let mut parts = out.trim().split(' ');
            let fields: Vec<&str> = parts.by_ref().take(2).collect();
            let generations = parts.next().and_then(|g| g.split_once('/'));
            fields == ["2", "0"] && generations.is_some_and(|(seen, have)| seen == have)
        },
    )
    .await;
    let _pdb_placement = eventually(
        "the PDB's Placement shows each member's allowed disruptions and condition",
        within,
        || async {
            placements
                .get_opt("poddisruptionbudget.policy-web")
                .await
                .expect("get")
        },
        |p| {
            p.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| {
                s.clusters.len() == 2
                    && s.clusters.iter().all(|c| {
                        c.disruptions_allowed == Some(0)
                            && c.conditions
                                .iter()
                                .any(|k| k.type_ == "DisruptionAllowed" && k.status == "False")
                    })
            })
        },
    )
    .await;

    let system: Api<Placement> = Api::namespaced(fed.clone(), "meridian-system");
    let crole = system
        .get("clusterrole.rbac.authorization.k8s.io-shop-reader")
        .await
        .expect("the ClusterRole's Placement");
    let choice = crole.status.and_then(|s| s.policy).expect("status.policy");
    assert_eq!(
        (
            choice.governing.kind.as_str(),
            choice.governing.name.as_str()
        ),
        ("ClusterPropagationPolicy", "platform")
    );

    // A custom resource of that CRD, placed on sim-1 and sim-2 (both got the CRD above, and
    // both members' discovery lists it moments later): sim-1, joined with
    // `--custom-resource-group example.com`, holds its copy; sim-2 refuses it, and the
    // Placement says so.
    env.apply(
        "widgets.yaml",
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: widgets, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: example.com/v1, kind: Widget}
  placement:
    clusterAffinity: {clusterNames: [sim-1, sim-2]}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: small, namespace: shop}
spec: {size: 1}
"#,
    );
    let _widget = eventually(
        "the Widget in sim-1",
        within,
        || async { env.member_get("sim-1", "widget", "shop", "small", "{.spec.size}") },
        |v| v.as_deref() == Ok("1"),
    )
    .await;
    let _widget_status = eventually(
        "the Widget's Placement: sim-1 in sync, sim-2 refused",
        within,
        || async {
            placements
                .get_opt("widget.example.com-small")
                .await
                .expect("get")
        },
        |p| {
            p.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| {
                let entry = |c: &str| s.clusters.iter().find(|e| e.cluster == c);
                entry("sim-1").is_some_and(|e| e.error.is_empty() && e.last_sync_time.is_some())
                    && entry("sim-2").is_some_and(|e| e.error.starts_with("Rejected"))
                    && s.conditions
                        .iter()
                        .any(|c| c.type_ == "Propagated" && c.reason == "Rejected")
            })
        },
    )
    .await;
    let there = env.member_get("sim-2", "widget", "shop", "small", managed);
    assert!(there.is_err(), "no Widget copy in sim-2: {there:?}");

    // A ResourceInterpreter says how Widgets report: sim-1's copy's ready replicas come
    // back summed into the federated Widget, and its Ready condition as its health.
    env.apply(
        "widget-interpreter.yaml",
        r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: ResourceInterpreter
metadata: {name: widgets}
spec:
  target: {apiVersion: example.com/v1, kind: Widget}
  statusAggregation:
  - {path: .status.readyReplicas, op: Sum}
  health: {conditionType: Ready}
"#,
    );
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "-n",
            "shop",
            "patch",
            "widget",
            "small",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"readyReplicas":3,"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ],
    );
    let _ready = eventually(
        "the federated Widget's readyReplicas from sim-1",
        within,
        || async {
            env.run(
                "kubectl",
                &[
                    "-n",
                    "shop",
                    "get",
                    "widget",
                    "small",
                    "-o",
                    "jsonpath={.status.readyReplicas}",
                ],
            )
        },
        |o| String::from_utf8_lossy(&o.stdout).trim() == "3",
    )
    .await;
    let _healthy = eventually(
        "the Widget's Placement says sim-1's copy is healthy",
        within,
        || async {
            placements
                .get_opt("widget.example.com-small")
                .await
                .expect("get")
        },
        |p| {
            p.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| {
                s.clusters
                    .iter()
                    .any(|e| e.cluster == "sim-1" && e.healthy == Some(true))
            })
        },
    )
    .await;

    // What the member owns stays the member's, and no federation bookkeeping is copied.
    let fed_uid = env.ok(
        "kubectl",
        &[
            "get",
            "sa",
            "web",
            "-n",
            "shop",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
    );
    let member_uid = env
        .member_get("sim-1", "sa", "shop", "web", "{.metadata.uid}")
        .expect("copy");
    assert_ne!(fed_uid, member_uid);
    assert_eq!(
        env.member_get("sim-1", "sa", "shop", "web", "{.metadata.finalizers}")
            .as_deref(),
        Ok("")
    );

    // An update in the federation reaches the members; an edit in a member is reverted.
    env.ok(
        "kubectl",
        &[
            "patch",
            "configmap",
            "web-settings",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            r#"{"data":{"mode":"safe"}}"#,
        ],
    );
    for member in ["sim-1", "sim-3"] {
        let _seen = eventually(
            &format!("update in {member}"),
            within,
            || async {
                env.member_get(member, "configmap", "shop", "web-settings", "{.data.mode}")
            },
            |v| v.as_deref() == Ok("safe"),
        )
        .await;
    }
    env.ok(
        "kubectl",
        &[
            "--context",
            "sim-1",
            "patch",
            "configmap",
            "web-settings",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            r#"{"data":{"mode":"hacked"}}"#,
        ],
    );
    let _seen = eventually(
        "drift reverted in sim-1",
        within,
        || async { env.member_get("sim-1", "configmap", "shop", "web-settings", "{.data.mode}") },
        |v| v.as_deref() == Ok("safe"),
    )
    .await;

    // Deleting an object removes its copies (the federation object waits for that).
    env.ok(
        "kubectl",
        &[
            "delete",
            "networkpolicy",
            "web-only",
            "-n",
            "shop",
            "--wait=true",
            "--timeout=60s",
        ],
    );
    for member in ["sim-1", "sim-3"] {
        let there = env.member_get(member, "networkpolicy", "shop", "web-only", managed);
        assert!(absent(&there), "{member}: {there:?}");
    }

    // Deleting the policy removes every copy.
    env.ok(
        "kubectl",
        &["delete", "propagationpolicy", "app", "-n", "shop"],
    );
    for (kind, name) in kinds {
        for member in ["sim-1", "sim-3"] {
            let _seen = eventually(
                &format!("{kind} {name} removed from {member}"),
                within,
                || async { env.member_get(member, kind, "shop", name, managed) },
                absent,
            )
            .await;
        }
    }

    env.ok(
        "kubectl",
        &["delete", "clusterpropagationpolicy", "platform"],
    );
    for member in ["sim-1", "sim-2"] {
        let _seen = eventually(
            &format!("clusterrole removed from {member}"),
            within,
            || async { env.member_get(member, "clusterrole", "shop", "shop-reader", managed) },
            absent,
        )
        .await;
    }
}

const GADGET_POLICY: &str = r#"
apiVersion: federation.meridian.dev/v1alpha1
kind: PropagationPolicy
metadata: {name: gadgets, namespace: shop}
spec:
  resourceSelectors:
  - {apiVersion: example.com/v1, kind: Gadget}
  - {apiVersion: v1, kind: ConfigMap, name: marker}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: marker, namespace: shop}
data: {note: "placed once the scheduler has acted on the policy"}
"#;

const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const GADGET: &str = r#"
apiVersion: example.com/v1
kind: Gadget
metadata: {name: small, namespace: shop}
spec: {size: 1}
"#;

/// A policy may name a custom kind before its CustomResourceDefinition exists. The
/// scheduler runs with an hour of back-off between lookups of a kind it cannot find, so
/// what starts placing the kind's objects once the definition is created can only be the
/// definition's own events, not a timer.
#[tokio::test]
async fn a_kind_named_before_its_definition_is_placed_once_the_definition_exists() {
    let env = Env::start(&["--clusters=1", "--nodes=1", "--ready-delay=0s"]);
    let _scheduler = env.scheduler(&[
        "--workers=2",
        "--kind-retry-initial=1h",
        "--kind-retry-max=1h",
    ]);
    env.ok("kubectl", &["create", "namespace", "shop"]);
    env.apply("gadget-policy.yaml", GADGET_POLICY);
    let fed = env.federation().await;
    let placements: Api<Placement> = Api::namespaced(fed.clone(), "shop");
    let get = |name: &'static str| {
        let api = placements.clone();
        move || {
            let api = api.clone();
            async move { api.get_opt(name).await.expect("get placement") }
        }
    };
    // The loop takes the kinds a change names in order, `example.com/v1` before `v1`: once
    // the ConfigMap is placed, the Gadget kind has been looked up and not found.
    eventually(
        "the marker ConfigMap placed",
        Duration::from_secs(60),
        get("configmap-marker"),
        Option::is_some,
    )
    .await;

    env.apply("gadget-crd.yaml", GADGET_CRD);
    let gadget = env.dir.path().join("gadget.yaml");
    std::fs::write(&gadget, GADGET).expect("write gadget.yaml");
    let gadget = gadget.to_str().expect("utf-8 path");
    // The server serves the new kind a moment after the definition is stored.
    eventually(
        "a Gadget created",
        Duration::from_secs(30),
        || async { env.run("kubectl", &["apply", "-f", gadget]) },
        |out| out.status.success(),
    )
    .await;
    eventually(
        "the Gadget placed without waiting out the back-off",
        Duration::from_secs(30),
        get("gadget.example.com-small"),
        |p| governing(p).as_deref() == Some("gadgets"),
    )
    .await;
}

//! The default ClusterRoles and ClusterRoleBindings of Meridian's own components in the
//! federation: `system:meridian:fed-scheduler` and `system:meridian:fed-controllers`, each
//! holding exactly the requests its binary makes, as kube-apiserver's bootstrap policy has
//! `system:kube-scheduler` and the controller roles.
//!
//! The rules are read off the code (each `Api<...>` and the verbs called on it), not
//! guessed; the comment on each rule names where the requests come from, so a change there
//! is matched here. A kube-rs watcher lists and then watches; a `replace` is an `update`.
//! The objects are reconciled at every start with the rest of the bootstrap policy, so an
//! upgrade that needs a new rule gains it.

use fed_api::names::{
    CONTROLLERS_USER, LB_ADDRESSES_CONFIGMAP, LB_PORTS_CONFIGMAP, SCHEDULER_USER,
};
use meridian_apiserver::bootstrap_policy::{AUTOUPDATE, role};
use serde_json::{Value, json};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const FED_GROUP: &str = "federation.meridian.dev";
const WATCH: [&str; 2] = ["list", "watch"];

/// The ConfigMap in `meridian-system` where the cluster controller publishes the
/// mass-failure verdict (fed-controllers' `cluster::guard::STATUS_CONFIGMAP`, read by the
/// scheduler as `FEDERATION_STATUS_CONFIGMAP`).
const FEDERATION_STATUS_CONFIGMAP: &str = "federation-status";

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

/// Leader election (`meridian_runtime::leader::store`): the Lease is read, created, and
/// renewed with a PUT carrying its resourceVersion, and watched by name; its namespace is
/// created when a fresh federation does not have it yet. The Lease's name and namespace
/// are flags, so the rule names neither.
fn leader_election() -> Vec<Value> {
    vec![
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "list", "watch", "create", "update"],
        ),
        rule("", &["namespaces"], &["create"]),
    ]
}

/// Events (`meridian_runtime::events`): created, and their count patched when repeated.
fn events() -> Value {
    rule("", &["events"], &["create", "patch"])
}

/// fed-scheduler's rules.
pub fn scheduler_rules() -> Vec<Value> {
    let mut rules = vec![
        // runtime/watch.rs `workloads::<Deployment>`, `<ReplicaSet>`, `<StatefulSet>`
        // and `<Job>`.
        rule(
            "apps",
            &["deployments", "replicasets", "statefulsets"],
            &WATCH,
        ),
        rule("batch", &["jobs"], &WATCH),
        // runtime/watch.rs `clusters`, `policies` and `cluster_policies`.
        rule(
            FED_GROUP,
            &[
                "clusters",
                "propagationpolicies",
                "clusterpropagationpolicies",
            ],
            &WATCH,
        ),
        // runtime/copies.rs watches every kind a policy names to place its objects as
        // copies: any resource a user may name, so every one (read only; never `get`),
        // the CustomResourceDefinitions, whose changes make it look up a named kind
        // that was not served yet, and the ResourceInterpreters, which say where a custom
        // kind's replicas are.
        rule("*", &["*"], &WATCH),
        // runtime/watch.rs `placements` (the reflector), runtime/writer.rs `create` and the
        // merge patch that restores a Placement changed by someone else.
        rule(
            FED_GROUP,
            &["placements"],
            &["list", "watch", "create", "patch", "delete"],
        ),
        // runtime/writer.rs: the Scheduled condition, a strategic merge patch of status.
        rule(FED_GROUP, &["placements/status"], &["patch"]),
        // runtime/watch.rs `federation_status`: the mass-failure flag, watched by field
        // selector on its name (a list, which RBAC cannot narrow to one name).
        rule("", &["configmaps"], &WATCH),
        events(),
    ];
    rules.extend(leader_election());
    rules
}

/// fed-controllers' rules. Only its requests to the federation: what it does in member
/// clusters is authorized there, with each member's own credentials.
pub fn controllers_rules() -> Vec<Value> {
    let mut rules = vec![
        // workload/controller.rs watches Deployments, ReplicaSets, StatefulSets and Jobs
        // (and the service controller the labels of the first two); workload/finalize.rs
        // merge-patches finalizers.
        rule(
            "apps",
            &["deployments", "replicasets", "statefulsets"],
            &["list", "watch", "patch"],
        ),
        rule("batch", &["jobs"], &["list", "watch", "patch"]),
        // workload/controller.rs: the federated status, a merge patch of status.
        rule(
            "apps",
            &[
                "deployments/status",
                "replicasets/status",
                "statefulsets/status",
            ],
            &["patch"],
        ),
        rule("batch", &["jobs/status"], &["patch"]),
        // service/controller.rs watches Services; service/fedwrite.rs merge-patches their
        // finalizers; service/controller.rs writes status.loadBalancer.
        rule("", &["services"], &["list", "watch", "patch"]),
        rule("", &["services/status"], &["patch"]),
        // Members' credentials: credentials.rs reads the Secret a Cluster names; the cluster
        // and service controllers watch Secrets (credentials, TLS Secrets of Services); the
        // workload controller watches them as dependencies it copies into members.
        rule("", &["secrets"], &["get", "list", "watch"]),
        // The workload controller watches ConfigMaps as dependencies, the service controller
        // its port and address allocations and client subnets in meridian-system, and the cluster guard
        // and service/fedwrite.rs create the two ConfigMaps they own there.
        rule("", &["configmaps"], &["list", "watch", "create"]),
        // ... and write only those: the cluster guard merge-patches the mass-failure
        // verdict, service/fedwrite.rs replaces the port and dedicated-address allocations
        // (compare-and-swap).
        json!({
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [FEDERATION_STATUS_CONFIGMAP, LB_PORTS_CONFIGMAP, LB_ADDRESSES_CONFIGMAP],
            "verbs": ["patch", "update"],
        }),
        // service/fedwrite.rs reads meridian-system before creating it; cluster/events.rs
        // and cluster/guard.rs create the namespaces their objects go to.
        rule("", &["namespaces"], &["get", "create"]),
        // The cluster, workload and service controllers watch Clusters; cluster/member.rs
        // merge-patches the probed status, service/controller.rs its lbAgent field.
        rule(FED_GROUP, &["clusters"], &WATCH),
        rule(FED_GROUP, &["clusters/status"], &["patch"]),
        // cluster/lease.rs: each member's Lease in meridian-cluster-lease, created and
        // merge-patched at renewals (it creates the namespace, covered above; the garbage
        // collector deletes a Lease with its Cluster).
        rule("coordination.k8s.io", &["leases"], &["create", "patch"]),
        // The workload and service controllers watch Placements; workload/finalize.rs reads
        // one live; service/fedwrite.rs creates and replaces a Service's Placement.
        rule(
            FED_GROUP,
            &["placements"],
            &["get", "list", "watch", "create", "update"],
        ),
        // The Propagated condition and per-member entries: workload/controller.rs patches
        // them, service/fedwrite.rs replaces a Service Placement's status.
        rule(FED_GROUP, &["placements/status"], &["patch", "update"]),
        // service/controller.rs watches PropagationPolicies (a Service follows its
        // workload's policy).
        rule(FED_GROUP, &["propagationpolicies"], &WATCH),
        // fleet/overrides.rs watches both override kinds, once per process: the copy and
        // workload paths change each member's copy by them.
        rule(
            FED_GROUP,
            &["overridepolicies", "clusteroverridepolicies"],
            &WATCH,
        ),
        // copies/controller.rs watches every placed kind (and the ResourceInterpreters)
        // and merge-patches its cleanup finalizer onto the objects it copies, and their
        // `/status` with what the members' copies report: any resource a policy may name.
        // At start it also labels copied objects' Placements an earlier scheduler left
        // unlabelled. No other write: the copies themselves are written in members with
        // members' credentials. The workload controller's watches of the ServiceAccounts
        // and PersistentVolumeClaims workloads use (workload/deps.rs) are covered here too,
        // and so are the service controller's watches of every kind with a pod template
        // (service/workloads.rs, service/custom_kinds.rs).
        rule("*", &["*"], &["list", "watch", "patch"]),
        events(),
    ];
    rules.extend(leader_election());
    rules
}

fn binding(user: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user, "annotations": {AUTOUPDATE: "true"}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user}],
    })
}

/// The components' ClusterRoles and their bindings, each named after the user it binds.
pub fn policy() -> Vec<(&'static str, Value)> {
    vec![
        ("clusterroles", role(SCHEDULER_USER, scheduler_rules())),
        ("clusterrolebindings", binding(SCHEDULER_USER)),
        ("clusterroles", role(CONTROLLERS_USER, controllers_rules())),
        ("clusterrolebindings", binding(CONTROLLERS_USER)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_apiserver::auth::Attributes;
    use meridian_apiserver::rbac::rule_allows;

    fn allows(rules: &[Value], verb: &str, group: &str, resource: &str, name: &str) -> bool {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let a = Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: "team".into(),
            name: name.into(),
            path: String::new(),
        };
        rules.iter().any(|r| rule_allows(r, &a))
    }

    #[test]
    fn the_scheduler_writes_placements_and_only_reads_workloads() {
        let r = scheduler_rules();
        assert!(allows(&r, "create", FED_GROUP, "placements", "web"));
        assert!(allows(&r, "patch", FED_GROUP, "placements/status", "web"));
        assert!(allows(&r, "watch", "apps", "deployments", ""));
        assert!(allows(&r, "update", "coordination.k8s.io", "leases", "x"));
        assert!(!allows(&r, "delete", "apps", "deployments", "web"));
        assert!(!allows(&r, "patch", "apps", "deployments", "web"));
        assert!(allows(&r, "delete", FED_GROUP, "placements", "web"));
        assert!(allows(&r, "watch", "", "serviceaccounts", ""));
        assert!(allows(
            &r,
            "watch",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            ""
        ));
        assert!(!allows(&r, "get", "", "secrets", "creds"));
        assert!(!allows(&r, "patch", "", "serviceaccounts", "web"));
        assert!(!allows(&r, "patch", FED_GROUP, "clusters/status", "a"));
        assert!(!allows(&r, "create", RBAC_GROUP, "clusterrolebindings", ""));
    }

    #[test]
    fn the_controllers_write_only_their_own_configmaps_and_no_rbac() {
        let r = controllers_rules();
        assert!(allows(
            &r,
            "patch",
            "",
            "configmaps",
            FEDERATION_STATUS_CONFIGMAP
        ));
        assert!(allows(&r, "update", "", "configmaps", LB_PORTS_CONFIGMAP));
        assert!(allows(
            &r,
            "update",
            "",
            "configmaps",
            LB_ADDRESSES_CONFIGMAP
        ));
        assert!(!allows(&r, "update", "", "configmaps", "app-config"));
        assert!(!allows(&r, "delete", "", "configmaps", LB_PORTS_CONFIGMAP));
        assert!(allows(&r, "get", "", "secrets", "member-creds"));
        assert!(!allows(&r, "update", "", "secrets", "member-creds"));
        assert!(allows(&r, "patch", "apps", "deployments/status", "web"));
        assert!(allows(
            &r,
            "update",
            FED_GROUP,
            "placements/status",
            "svc-web"
        ));
        assert!(!allows(&r, "delete", "apps", "deployments", "web"));
        // Members' Leases: created, renewed by patch.
        for verb in ["create", "patch"] {
            assert!(
                allows(&r, verb, "coordination.k8s.io", "leases", "sim-1"),
                "{verb}"
            );
        }
        assert!(!allows(&r, "create", RBAC_GROUP, "clusterrolebindings", ""));
        assert!(!allows(&r, "update", RBAC_GROUP, "clusterroles", "edit"));
        assert!(allows(&r, "patch", "networking.k8s.io", "ingresses", "web"));
        assert!(!allows(
            &r,
            "delete",
            "networking.k8s.io",
            "ingresses",
            "web"
        ));
        assert!(allows(&r, "watch", FED_GROUP, "overridepolicies", ""));
        assert!(allows(&r, "list", "", "serviceaccounts", ""));
        assert!(allows(&r, "watch", "", "persistentvolumeclaims", ""));
        assert!(allows(&r, "watch", FED_GROUP, "resourceinterpreters", ""));
        assert!(allows(&r, "patch", "apps", "daemonsets/status", "agent"));
        assert!(allows(&r, "list", FED_GROUP, "clusteroverridepolicies", ""));
        assert!(!allows(&r, "update", FED_GROUP, "overridepolicies", "web"));
        assert!(!allows(&r, "create", FED_GROUP, "clusters", "a"));
        assert!(!allows(&r, "delete", FED_GROUP, "placements", "web"));
    }

    #[test]
    fn each_binding_names_its_user_and_role() {
        for (plural, object) in policy() {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            assert!(name == SCHEDULER_USER || name == CONTROLLERS_USER, "{name}");
            if plural == "clusterrolebindings" {
                assert_eq!(object["subjects"][0]["kind"], "User");
                assert_eq!(object["subjects"][0]["name"], name);
                assert_eq!(object["roleRef"]["name"], name);
            }
        }
    }
}

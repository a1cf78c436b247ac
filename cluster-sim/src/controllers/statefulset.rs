//! The StatefulSet controller: pods `{name}-{ordinal}` for the ordinals
//! `spec.ordinals.start ..` `+ replicas`, each with a stable hostname (`spec.hostname`, and
//! `spec.subdomain` from `serviceName`) and a PersistentVolumeClaim per
//! `volumeClaimTemplates` entry, `{template}-{name}-{ordinal}`, created (and reported
//! `Bound`) before the pod and kept when the set scales down, as upstream's default `Retain`
//! retention policy does.
//!
//! `OrderedReady` creates one pod at a time in ascending order, the next once the previous is
//! Running and Ready, and removes pods from the highest ordinal one at a time; `Parallel`
//! does both at once. A `RollingUpdate` replaces pods whose `controller-revision-hash` is not
//! the current template's, from the highest ordinal down to `partition`, one at a time and
//! only while every pod is Ready; `OnDelete` leaves that to the user.
//!
//! The revision is `{name}-{hash of the pod template}`; no ControllerRevision objects are
//! written, so a pod recreated below the partition gets the new template (upstream would
//! recreate it at the current revision). Memory per set: none.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use meridian_apiserver::cache::Cached;
use meridian_apiserver::engine::{DeleteOptions, Target, WriteOptions};
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use super::replicaset::availability;
use super::util::{self, condition_true, i64_at, str_at};
use super::{Reconciler, Requeue, Sim, SimError, WorkQueue, split_key};

/// The pod label holding a pod's own name (what a per-pod Service selects).
pub(crate) const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod label holding the revision the pod was created from.
pub(crate) const REVISION_LABEL: &str = "controller-revision-hash";
/// The pod label holding the pod's ordinal.
pub(crate) const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// What the decision needs of a StatefulSet's spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SetSpec {
    /// Desired pods.
    pub replicas: i64,
    /// The first ordinal (`spec.ordinals.start`).
    pub start: i64,
    /// `podManagementPolicy: Parallel`.
    pub parallel: bool,
    /// Pods below `start + partition` are not updated.
    pub partition: i64,
    /// `updateStrategy: OnDelete`.
    pub on_delete: bool,
}

/// One existing pod of the set, as the decision sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Member {
    /// Created from the current template.
    pub updated: bool,
    /// Running and Ready.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Succeeded or Failed: to be replaced.
    pub finished: bool,
}

/// One step of the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Create the pod (and its claims) of this ordinal.
    Create(i64),
    /// Delete the pod of this ordinal.
    Delete(i64),
}

/// The next steps for a set whose pods, by ordinal, are `pods`. With `OrderedReady` at most
/// one step, and none while a pod it would build on is not Ready.
pub(crate) fn plan(spec: SetSpec, pods: &BTreeMap<i64, Member>) -> Vec<Action> {
    let ordered = !spec.parallel;
    let valid = spec.start..spec.start + spec.replicas.max(0);
    let mut actions = Vec::new();
    // Missing, finished and unready pods among the wanted ordinals, lowest first.
    for ord in valid.clone() {
        let (step, wait) = match pods.get(&ord) {
            None => (Some(Action::Create(ord)), true),
            Some(m) if m.terminating => (None, true),
            Some(m) if m.finished => (Some(Action::Delete(ord)), true),
            Some(m) => (None, !m.ready),
        };
        actions.extend(step);
        if ordered && wait {
            return actions;
        }
    }
    // Pods past the wanted ordinals, highest first.
    for (&ord, m) in pods.iter().rev().filter(|(o, _)| !valid.contains(*o)) {
        if !m.terminating {
            actions.push(Action::Delete(ord));
        }
        if ordered {
            return actions;
        }
    }
    if !actions.is_empty() || spec.on_delete {
        return actions;
    }
    // Rolling update: only while every wanted pod is there and Ready, one pod at a time.
    let all_ready = valid
        .clone()
        .all(|o| pods.get(&o).is_some_and(|m| m.ready && !m.terminating));
    if !all_ready {
        return actions;
    }
    let floor = spec.start + spec.partition.max(0);
    if let Some(ord) = valid
        .rev()
        .filter(|o| *o >= floor)
        .find(|o| pods.get(o).is_some_and(|m| !m.updated))
    {
        actions.push(Action::Delete(ord));
    }
    actions
}

/// The ordinal of a pod of set `set` from its name (`{set}-{ordinal}`).
fn ordinal_of(set: &str, pod: &str) -> Option<i64> {
    pod.strip_prefix(set)?.strip_prefix('-')?.parse().ok()
}

/// The set's revision name: `{name}-{hash of the pod template}`.
pub(crate) fn revision_of(sts: &Value) -> String {
    let template = sts.pointer("/spec/template").unwrap_or(&Value::Null);
    format!(
        "{}-{}",
        str_at(sts, "/metadata/name").unwrap_or(""),
        util::safe_encode_hash(util::hash_value(template))
    )
}

/// The claim name of a template for one pod: `{template}-{pod}`.
fn claim_name(template: &Value, pod: &str) -> String {
    format!(
        "{}-{pod}",
        str_at(template, "/metadata/name").unwrap_or("data")
    )
}

/// The pod of one ordinal, from the set's template.
pub(crate) fn pod_for(sts: &Value, ordinal: i64, revision: &str) -> Value {
    let set = str_at(sts, "/metadata/name").unwrap_or("");
    let name = format!("{set}-{ordinal}");
    let template = sts
        .pointer("/spec/template")
        .cloned()
        .unwrap_or(Value::Null);
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), Value::from(name.as_str()));
    labels.insert(REVISION_LABEL.into(), Value::from(revision));
    labels.insert(POD_INDEX_LABEL.into(), Value::from(ordinal.to_string()));
    let meta = util::child_metadata(
        sts,
        "apps/v1",
        "StatefulSet",
        name.as_str(),
        &template,
        labels,
    );
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["hostname"] = Value::from(name.as_str());
    if let Some(svc) = str_at(sts, "/spec/serviceName").filter(|s| !s.is_empty()) {
        spec["subdomain"] = Value::from(svc);
    }
    // Each claim template replaces a pod volume of its name, or adds one.
    let claims = sts
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !claims.is_empty() {
        let mut volumes: Vec<Value> = spec
            .get("volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for c in &claims {
            let vol = str_at(c, "/metadata/name").unwrap_or("data");
            volumes.retain(|v| v.get("name").and_then(Value::as_str) != Some(vol));
            volumes.push(json!({
                "name": vol,
                "persistentVolumeClaim": {"claimName": claim_name(c, &name)},
            }));
        }
        spec["volumes"] = Value::Array(volumes);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// The claim of one template for one pod, labelled with the template's and the set's
/// selector labels, as upstream makes it.
fn claim_for(sts: &Value, template: &Value, pod: &str) -> Value {
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(sel) = sts
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
    {
        labels.extend(sel.clone());
    }
    let mut meta = Map::new();
    meta.insert("name".into(), Value::from(claim_name(template, pod)));
    meta.insert("labels".into(), Value::Object(labels));
    if let Some(a) = template.pointer("/metadata/annotations") {
        meta.insert("annotations".into(), a.clone());
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": template.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The status a bound claim reports: its requested size and access modes.
pub(crate) fn bound_status(claim: &Value) -> Value {
    let mut status = json!({"phase": "Bound"});
    if let Some(m) = claim.pointer("/spec/accessModes") {
        status["accessModes"] = m.clone();
    }
    if let Some(s) = claim.pointer("/spec/resources/requests/storage") {
        status["capacity"] = json!({"storage": s});
    }
    status
}

/// The StatefulSet controller of one cluster.
pub(crate) struct StatefulSetController {
    sim: Arc<Sim>,
    queue: Arc<WorkQueue<String>>,
}

impl StatefulSetController {
    fn owned_pods(&self, ns: &str, uid: &str) -> Vec<Arc<Cached>> {
        self.sim.owned(&self.sim.kinds.pods, ns, uid)
    }

    /// Creates (and binds) the claims of one pod that do not exist yet, and binds existing
    /// ones still pending.
    async fn ensure_claims(&self, sts: &Value, ns: &str, pod: &str) -> Result<(), SimError> {
        let def = &self.sim.kinds.pvcs;
        let cache = self.sim.cache(def);
        let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
        let templates = sts
            .pointer("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for t in &templates {
            let name = claim_name(t, pod);
            let claim = match cache.get(&def.key(ns, &name)) {
                Some(c) => c.value(),
                None => match self
                    .sim
                    .engine
                    .create(def, ns, claim_for(sts, t, pod), &opts)
                    .await
                {
                    Ok(w) => w.obj,
                    Err(e) if e.code == 409 => continue,
                    Err(e) => return Err(e.into()),
                },
            };
            if str_at(&claim, "/status/phase") != Some("Bound") {
                // What the volume binder would report once a volume is provisioned.
                super::done_unless_failed(
                    self.sim
                        .merge_patch(
                            def,
                            ns,
                            &name,
                            &json!({"status": bound_status(&claim)}),
                            Target::Status,
                        )
                        .await,
                )?;
            }
        }
        Ok(())
    }
}

impl Reconciler<String> for StatefulSetController {
    const NAME: &'static str = "statefulset";

    async fn reconcile(&self, key: &String) -> Result<Requeue, SimError> {
        let kinds = &self.sim.kinds;
        let (ns, name) = split_key(key);
        let Some(cached) = self
            .sim
            .cache(&kinds.stateful_sets)
            .get(&kinds.stateful_sets.key(ns, name))
        else {
            return Ok(Requeue::No);
        };
        let sts = cached.value();
        let spec = SetSpec {
            replicas: i64_at(&sts, "/spec/replicas").unwrap_or(1),
            start: i64_at(&sts, "/spec/ordinals/start").unwrap_or(0).max(0),
            parallel: str_at(&sts, "/spec/podManagementPolicy") == Some("Parallel"),
            partition: i64_at(&sts, "/spec/updateStrategy/rollingUpdate/partition").unwrap_or(0),
            on_delete: str_at(&sts, "/spec/updateStrategy/type") == Some("OnDelete"),
        };
        let update_revision = revision_of(&sts);
        let pods: Vec<Value> = self
            .owned_pods(ns, &cached.uid)
            .iter()
            .map(|c| c.value())
            .collect();
        let mut members = BTreeMap::new();
        for p in &pods {
            let Some(ord) = str_at(p, "/metadata/name").and_then(|n| ordinal_of(name, n)) else {
                continue;
            };
            members.insert(
                ord,
                Member {
                    updated: str_at(p, &format!("/metadata/labels/{REVISION_LABEL}"))
                        == Some(update_revision.as_str()),
                    ready: str_at(p, "/status/phase") == Some("Running")
                        && condition_true(p, "Ready"),
                    terminating: util::is_deleting(p),
                    finished: matches!(str_at(p, "/status/phase"), Some("Succeeded" | "Failed")),
                },
            );
        }
        if !util::is_deleting(&sts) {
            let opts = WriteOptions::by(super::CONTROLLER_MANAGER);
            for action in plan(spec, &members) {
                match action {
                    Action::Create(ord) => {
                        let pod = pod_for(&sts, ord, &update_revision);
                        self.ensure_claims(&sts, ns, &format!("{name}-{ord}"))
                            .await?;
                        match self.sim.engine.create(&kinds.pods, ns, pod, &opts).await {
                            Ok(_) => {}
                            // The previous pod of this ordinal is still going away.
                            Err(e) if e.code == 409 => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    Action::Delete(ord) => {
                        super::done_unless_failed(
                            self.sim
                                .engine
                                .delete(
                                    &kinds.pods,
                                    ns,
                                    &format!("{name}-{ord}"),
                                    &DeleteOptions::default(),
                                )
                                .await,
                        )?;
                    }
                }
            }
        }

        // Status from the pods as they were at the start of this pass; the writes above
        // come back as pod events and another pass.
        let min_ready = i64_at(&sts, "/spec/minReadySeconds").unwrap_or(0);
        let now = self.sim.now();
        let old_current = str_at(&sts, "/status/currentRevision")
            .map(str::to_string)
            .unwrap_or_else(|| update_revision.clone());
        let (mut replicas, mut ready, mut available, mut current, mut updated) =
            (0i64, 0i64, 0i64, 0i64, 0i64);
        let mut recheck: Option<Duration> = None;
        for p in pods
            .iter()
            .filter(|p| !matches!(str_at(p, "/status/phase"), Some("Succeeded" | "Failed")))
        {
            replicas += 1;
            let running_ready =
                str_at(p, "/status/phase") == Some("Running") && condition_true(p, "Ready");
            if running_ready {
                ready += 1;
                let (ok, wait) = availability(p, min_ready, now);
                available += i64::from(ok);
                if let Some(w) = wait {
                    recheck = Some(recheck.map_or(w, |r| r.min(w)));
                }
            }
            let rev = str_at(p, &format!("/metadata/labels/{REVISION_LABEL}"));
            current += i64::from(rev == Some(old_current.as_str()));
            updated += i64::from(rev == Some(update_revision.as_str()));
        }
        // A finished rolling update makes the update revision current (upstream's
        // completeRollingUpdate).
        let (current_revision, current) =
            if !spec.on_delete && updated == replicas && ready == replicas {
                (update_revision.clone(), updated)
            } else {
                (old_current, current)
            };
        let status = json!({
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": available,
            "currentReplicas": current,
            "updatedReplicas": updated,
            "currentRevision": current_revision,
            "updateRevision": update_revision,
            "observedGeneration": i64_at(&sts, "/metadata/generation").unwrap_or(0),
            "collisionCount": 0,
        });
        self.sim
            .write_status_fields(&kinds.stateful_sets, ns, name, &sts, status)
            .await?;
        Ok(recheck.map_or(Requeue::No, Requeue::After))
    }
}

/// Spawns the StatefulSet controller's watches and worker.
pub(crate) fn spawn(sim: Arc<Sim>) -> Vec<JoinHandle<()>> {
    let c = Arc::new(StatefulSetController {
        sim: sim.clone(),
        queue: Arc::new(WorkQueue::default()),
    });
    let (sets, pods, queue) = (
        sim.kinds.stateful_sets.clone(),
        sim.kinds.pods.clone(),
        c.queue.clone(),
    );
    // Only a set's pods carry the pod-name label: other pods are not parsed at all.
    super::spawn_owner_loop(sim, &sets, &pods, queue, c, |e| {
        super::controlling_owner(e, "StatefulSet", Some(POD_NAME_LABEL))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(replicas: i64) -> SetSpec {
        SetSpec {
            replicas,
            start: 0,
            parallel: false,
            partition: 0,
            on_delete: false,
        }
    }

    const READY: Member = Member {
        updated: true,
        ready: true,
        terminating: false,
        finished: false,
    };
    const STARTING: Member = Member {
        ready: false,
        ..READY
    };
    const OLD: Member = Member {
        updated: false,
        ..READY
    };
    const GOING: Member = Member {
        terminating: true,
        ..READY
    };

    /// Name, spec, pods by ordinal, expected plan.
    type Case = (&'static str, SetSpec, BTreeMap<i64, Member>, Vec<Action>);

    fn pods(list: &[(i64, Member)]) -> BTreeMap<i64, Member> {
        list.iter().copied().collect()
    }

    #[test]
    fn plans() {
        use Action::{Create, Delete};
        let parallel = SetSpec {
            parallel: true,
            ..spec(3)
        };
        let from_five = SetSpec {
            start: 5,
            ..spec(2)
        };
        let partitioned = SetSpec {
            partition: 2,
            ..spec(3)
        };
        let on_delete = SetSpec {
            on_delete: true,
            ..spec(2)
        };
        let failed = Member {
            finished: true,
            ready: false,
            ..READY
        };
        let cases: Vec<Case> = vec![
            ("first pod", spec(3), pods(&[]), vec![Create(0)]),
            ("waits for ready", spec(3), pods(&[(0, STARTING)]), vec![]),
            ("next pod", spec(3), pods(&[(0, READY)]), vec![Create(1)]),
            (
                "parallel",
                parallel,
                pods(&[(1, STARTING)]),
                vec![Create(0), Create(2)],
            ),
            (
                "ordinals start",
                from_five,
                pods(&[(5, READY)]),
                vec![Create(6)],
            ),
            ("stable", spec(2), pods(&[(0, READY), (1, READY)]), vec![]),
            (
                "scale down from the top",
                spec(1),
                pods(&[(0, READY), (1, READY), (2, READY)]),
                vec![Delete(2)],
            ),
            (
                "scale down waits",
                spec(1),
                pods(&[(0, READY), (1, READY), (2, GOING)]),
                vec![],
            ),
            (
                "scale down waits for ready",
                spec(1),
                pods(&[(0, STARTING), (1, READY)]),
                vec![],
            ),
            (
                "parallel scale down",
                SetSpec {
                    replicas: 1,
                    ..parallel
                },
                pods(&[(0, READY), (1, READY), (2, READY)]),
                vec![Delete(2), Delete(1)],
            ),
            (
                "failed pod replaced",
                spec(2),
                pods(&[(0, failed), (1, READY)]),
                vec![Delete(0)],
            ),
            (
                "update from the top",
                spec(3),
                pods(&[(0, OLD), (1, OLD), (2, OLD)]),
                vec![Delete(2)],
            ),
            (
                "update goes down",
                spec(3),
                pods(&[(0, OLD), (1, OLD), (2, READY)]),
                vec![Delete(1)],
            ),
            (
                "update waits for ready",
                spec(3),
                pods(&[(0, OLD), (1, READY), (2, STARTING)]),
                vec![],
            ),
            (
                "partition",
                partitioned,
                pods(&[(0, OLD), (1, OLD), (2, READY)]),
                vec![],
            ),
            (
                "partition top",
                partitioned,
                pods(&[(0, OLD), (1, OLD), (2, OLD)]),
                vec![Delete(2)],
            ),
            ("on delete", on_delete, pods(&[(0, OLD), (1, OLD)]), vec![]),
        ];
        for (name, s, p, want) in cases {
            assert_eq!(plan(s, &p), want, "{name}");
        }
    }

    #[test]
    fn pods_and_claims() {
        let sts = json!({
            "metadata": {"name": "db", "namespace": "ns", "uid": "u1"},
            "spec": {
                "serviceName": "db-headless",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "main", "image": "pg"}],
                             "volumes": [{"name": "data", "emptyDir": {}}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
            },
        });
        let rev = revision_of(&sts);
        assert!(rev.starts_with("db-"));
        let pod = pod_for(&sts, 2, &rev);
        assert_eq!(pod["metadata"]["name"], "db-2");
        assert_eq!(pod["metadata"]["labels"][POD_NAME_LABEL], "db-2");
        assert_eq!(pod["metadata"]["labels"][POD_INDEX_LABEL], "2");
        assert_eq!(pod["metadata"]["labels"][REVISION_LABEL], rev.as_str());
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
        assert_eq!(pod["spec"]["hostname"], "db-2");
        assert_eq!(pod["spec"]["subdomain"], "db-headless");
        assert_eq!(
            pod["spec"]["volumes"],
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-2"}}])
        );
        let t = &sts["spec"]["volumeClaimTemplates"][0];
        let claim = claim_for(&sts, t, "db-2");
        assert_eq!(claim["metadata"]["name"], "data-db-2");
        assert_eq!(claim["metadata"]["labels"]["app"], "db");
        assert!(claim["metadata"].get("ownerReferences").is_none());
        assert_eq!(
            bound_status(&claim),
            json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}})
        );
        assert_eq!(ordinal_of("db", "db-12"), Some(12));
        assert_eq!(ordinal_of("db", "dbx-1"), None);
        // A template change is a new revision.
        let mut changed = sts.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pg:2");
        assert_ne!(revision_of(&changed), rev);
    }
}

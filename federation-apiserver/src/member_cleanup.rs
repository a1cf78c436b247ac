//! The member-cleanup finalizer, given to every federated workload when it is created.
//!
//! The workload controller needs it before the workload can be deleted: it keeps the
//! federated object until the member copies are gone. Added here, as kube-apiserver's
//! admission plugins add the finalizers their controllers remove (a PersistentVolumeClaim's
//! `kubernetes.io/pvc-protection`), a new workload costs no second write to get it. The
//! controller still adds it to a workload that lacks it (one created before, or one whose
//! finalizers a client replaced).

use std::sync::Arc;

use fed_api::names::WORKLOAD_FINALIZER;
use fed_api::workload::WorkloadKind;
use meridian_apiserver::registry::{KindHooks, ResourceDef};
use meridian_apiserver::status::Cause;
use serde_json::Value;

/// Gives the workload kinds among `defs` the finalizer on create.
pub fn for_workloads(defs: &mut [ResourceDef]) {
    for d in defs.iter_mut() {
        let workload = WorkloadKind::ALL
            .iter()
            .any(|k| k.group() == d.group && k.plural() == d.plural);
        if workload && d.custom.is_none() {
            d.hooks = Arc::new(WithFinalizer {
                inner: d.hooks.clone(),
            });
        }
    }
}

/// A kind's own hooks, plus the finalizer on create.
struct WithFinalizer {
    inner: Arc<dyn KindHooks>,
}

impl KindHooks for WithFinalizer {
    fn default(&self, obj: &mut Value) {
        self.inner.default(obj)
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        self.inner.validate(obj, old)
    }

    fn check_types(&self, obj: &Value) -> Result<(), String> {
        self.inner.check_types(obj)
    }

    fn prepare_create(&self, obj: &mut Value) {
        self.inner.prepare_create(obj)
    }

    fn admit_create(&self, obj: &mut Value) {
        self.inner.admit_create(obj);
        add_finalizer(obj);
    }
}

/// Appends [`WORKLOAD_FINALIZER`] to `metadata.finalizers` unless it is there.
fn add_finalizer(obj: &mut Value) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list = meta
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        // Validation reports it; nothing to add to.
        return;
    }
    if let Some(a) = list.as_array_mut()
        && !a.iter().any(|f| f.as_str() == Some(WORKLOAD_FINALIZER))
    {
        a.push(Value::from(WORKLOAD_FINALIZER));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_finalizer_is_added_once_and_others_kept() {
        let cases = [
            (json!({"metadata": {}}), json!([WORKLOAD_FINALIZER])),
            (
                json!({"metadata": {"finalizers": ["example.com/keep"]}}),
                json!(["example.com/keep", WORKLOAD_FINALIZER]),
            ),
            (
                json!({"metadata": {"finalizers": [WORKLOAD_FINALIZER]}}),
                json!([WORKLOAD_FINALIZER]),
            ),
        ];
        for (mut obj, want) in cases {
            add_finalizer(&mut obj);
            assert_eq!(obj["metadata"]["finalizers"], want);
        }
    }

    #[test]
    fn only_workload_kinds_get_it() {
        let mut defs = meridian_apiserver::kinds::builtin();
        for_workloads(&mut defs);
        let mut given = Vec::new();
        for d in &defs {
            let mut obj = json!({"metadata": {"name": "x"}});
            d.hooks.admit_create(&mut obj);
            if obj["metadata"].get("finalizers").is_some() {
                given.push(format!("{}/{}", d.group, d.plural));
            }
        }
        given.sort();
        assert_eq!(
            given,
            [
                "apps/deployments",
                "apps/replicasets",
                "apps/statefulsets",
                "batch/jobs"
            ]
        );
    }
}

//! Storage: `v1` PersistentVolumeClaim and `storage.k8s.io/v1` StorageClass.

use apimachinery::JsonPointer;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use super::validate::{self, NameRule, invalid, not_supported, required};
use super::{FnHooks, age_column, column, default_at, str_column, typed};
use crate::registry::ResourceDef;
use crate::status::Cause;

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

fn default_pvc(o: &mut Value) {
    default_at(o, &["spec", "volumeMode"], json!("Filesystem"));
}

fn storage_request(o: &Value) -> Option<i128> {
    let q = o.at("/spec/resources/requests/storage")?.as_str()?;
    apimachinery::quantity::parse_quantity(q)
        .ok()
        .map(|q| q.as_milli())
}

fn validate_pvc(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, true);
    match o.at("/spec/accessModes").and_then(Value::as_array) {
        None => errs.push(required("spec.accessModes")),
        Some(m) if m.is_empty() => errs.push(Cause {
            message: "Required value: at least 1 access mode is required".into(),
            ..required("spec.accessModes")
        }),
        Some(modes) => {
            for m in modes {
                if !m.as_str().is_some_and(|s| ACCESS_MODES.contains(&s)) {
                    errs.push(not_supported("spec.accessModes", m, ACCESS_MODES));
                }
            }
        }
    }
    match o.at("/spec/resources/requests/storage") {
        None => errs.push(required("spec.resources[storage]")),
        Some(q) => errs.extend(validate::quantity(q, "spec.resources[storage]")),
    }
    if let Some(m) = o.at("/spec/volumeMode")
        && !matches!(m.as_str(), Some("Filesystem" | "Block"))
    {
        errs.push(not_supported(
            "spec.volumeMode",
            m,
            &["Block", "Filesystem"],
        ));
    }
    if let Some(sel) = o.at("/spec/selector") {
        errs.extend(validate::label_selector(sel, "spec.selector"));
    }
    if let Some(old) = old {
        // Only the storage request may change, and only upward (volumes grow, never
        // shrink); a binder fills `volumeName` once.
        let mut mutable = vec!["resources", "volumeAttributesClassName"];
        if old
            .at("/spec/volumeName")
            .is_none_or(|v| v.as_str() == Some(""))
        {
            mutable.push("volumeName");
        }
        if validate::changed_except(o, old, "/spec", &mutable) {
            errs.push(validate::forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
        if let (Some(new), Some(was)) = (storage_request(o), storage_request(old))
            && new < was
        {
            errs.push(validate::forbidden(
                "spec.resources.requests.storage",
                "field can not be less than previous value",
            ));
        }
    }
    errs
}

fn access_modes_cell(o: &Value) -> Value {
    // kubectl's short forms, in its order.
    let modes: Vec<&str> = o
        .at("/status/accessModes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let short: Vec<&str> = [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| modes.contains(long))
    .map(|(_, s)| *s)
    .collect();
    Value::from(short.join(","))
}

/// `v1` PersistentVolumeClaim: `status` subresource; a new claim is `Pending`.
pub fn persistent_volume_claims() -> ResourceDef {
    let mut d = ResourceDef::new(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        true,
        FnHooks {
            default: default_pvc,
            validate: validate_pvc,
            check_types: typed::<PersistentVolumeClaim>,
            prepare_create: |o| o["status"] = json!({"phase": "Pending"}),
        },
    );
    d.short_names = &["pvc"];
    d.definition = "io.k8s.api.core.v1.PersistentVolumeClaim";
    d.status_subresource = true;
    d.columns = vec![
        str_column(
            "Status",
            "Phase represents the current phase of PersistentVolumeClaim.",
            "/status/phase",
        ),
        str_column(
            "Volume",
            "The binding reference to the PersistentVolume backing this claim.",
            "/spec/volumeName",
        ),
        str_column(
            "Capacity",
            "The actual resources of the underlying volume.",
            "/status/capacity/storage",
        ),
        column(
            "Access Modes",
            "string",
            "The actual access modes the volume backing the PVC has.",
            false,
            access_modes_cell,
        ),
        str_column(
            "StorageClass",
            "The name of the StorageClass required by the claim.",
            "/spec/storageClassName",
        ),
        column(
            "VolumeAttributesClass",
            "string",
            "The name of the VolumeAttributesClass the claim uses.",
            false,
            |o| {
                Value::from(
                    o.at("/spec/volumeAttributesClassName")
                        .and_then(Value::as_str)
                        .unwrap_or("<unset>"),
                )
            },
        ),
        age_column(),
        str_column(
            "VolumeMode",
            "Whether the volume is a filesystem or a raw block device.",
            "/spec/volumeMode",
        )
        .wide(),
    ];
    d
}

fn default_storage_class(o: &mut Value) {
    default_at(o, &["reclaimPolicy"], json!("Delete"));
    default_at(o, &["volumeBindingMode"], json!("Immediate"));
}

fn validate_storage_class(o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut errs = validate::metadata(o, NameRule::Subdomain, false);
    match o.get("provisioner").and_then(Value::as_str) {
        None | Some("") => errs.push(required("provisioner")),
        Some(p) if p.len() > 63 || p.contains(' ') => errs.push(invalid(
            "provisioner",
            &Value::from(p),
            "must be a qualified name of at most 63 characters",
        )),
        Some(_) => {}
    }
    if let Some(p) = o.get("reclaimPolicy")
        && !matches!(p.as_str(), Some("Delete" | "Retain"))
    {
        errs.push(not_supported("reclaimPolicy", p, &["Delete", "Retain"]));
    }
    if let Some(m) = o.get("volumeBindingMode")
        && !matches!(m.as_str(), Some("Immediate" | "WaitForFirstConsumer"))
    {
        errs.push(not_supported(
            "volumeBindingMode",
            m,
            &["Immediate", "WaitForFirstConsumer"],
        ));
    }
    errs.extend(validate::unchanged(
        o,
        old,
        &[
            "provisioner",
            "parameters",
            "reclaimPolicy",
            "volumeBindingMode",
        ],
    ));
    errs
}

/// `storage.k8s.io/v1` StorageClass (cluster-scoped).
pub fn storage_classes() -> ResourceDef {
    let mut d = ResourceDef::new(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        "storageclass",
        false,
        FnHooks::typed::<StorageClass>(default_storage_class, validate_storage_class),
    );
    d.short_names = &["sc"];
    d.definition = "io.k8s.api.storage.v1.StorageClass";
    d.columns = vec![
        str_column(
            "Provisioner",
            "Indicates the type of the provisioner.",
            "/provisioner",
        ),
        str_column(
            "ReclaimPolicy",
            "Indicates the type of the reclaim policy.",
            "/reclaimPolicy",
        ),
        str_column(
            "VolumeBindingMode",
            "Indicates how PersistentVolumeClaims should be provisioned and bound.",
            "/volumeBindingMode",
        ),
        column(
            "AllowVolumeExpansion",
            "string",
            "Indicates whether the storage class allow volume expand.",
            false,
            |o| Value::from(o.get("allowVolumeExpansion").and_then(Value::as_bool) == Some(true)),
        ),
    ];
    d
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(errs: &[Cause]) -> Vec<&str> {
        errs.iter().map(|c| c.field.as_str()).collect()
    }

    fn pvc(size: &str) -> Value {
        json!({"metadata": {"name": "data", "namespace": "shop"},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                "resources": {"requests": {"storage": size}}}})
    }

    #[test]
    fn a_claim_grows_but_keeps_the_rest_of_its_spec() {
        let old = pvc("1Gi");
        assert!(validate_pvc(&old, None).is_empty());
        assert!(validate_pvc(&pvc("2Gi"), Some(&old)).is_empty());
        assert_eq!(
            fields(&validate_pvc(&pvc("512Mi"), Some(&old))),
            ["spec.resources.requests.storage"]
        );
        let mut other = pvc("1Gi");
        other["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        assert_eq!(fields(&validate_pvc(&other, Some(&old))), ["spec"]);
        let mut bound = pvc("1Gi");
        bound["spec"]["volumeName"] = json!("pv-1");
        assert!(validate_pvc(&bound, Some(&old)).is_empty());
    }

    #[test]
    fn a_claim_needs_modes_and_a_size() {
        let bad = json!({"metadata": {"name": "data", "namespace": "shop"},
            "spec": {"accessModes": ["ReadWriteSometimes"]}});
        assert_eq!(
            fields(&validate_pvc(&bad, None)),
            ["spec.accessModes", "spec.resources[storage]"]
        );
        let mut o = pvc("1Gi");
        o["status"] = json!({"accessModes": ["ReadWriteMany", "ReadWriteOnce"]});
        assert_eq!(access_modes_cell(&o), "RWO,RWX");
    }

    #[test]
    fn a_storage_class_defaults_and_keeps_its_provisioner() {
        let mut sc = json!({"metadata": {"name": "fast"}, "provisioner": "csi.example.com"});
        default_storage_class(&mut sc);
        assert_eq!(sc["reclaimPolicy"], "Delete");
        assert_eq!(sc["volumeBindingMode"], "Immediate");
        assert!(validate_storage_class(&sc, None).is_empty());
        let mut changed = sc.clone();
        changed["provisioner"] = json!("other.example.com");
        changed["allowVolumeExpansion"] = json!(true);
        assert_eq!(
            fields(&validate_storage_class(&changed, Some(&sc))),
            ["provisioner"]
        );
    }
}

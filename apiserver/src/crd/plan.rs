//! What the stored custom resource definitions ask for, decided purely: the kinds to
//! serve, the status each definition should carry (`NamesAccepted`, `Established`,
//! `acceptedNames`, `storedVersions`), and the definitions being deleted.

use std::sync::Arc;

use apimachinery::JsonPointer;
use serde_json::{Value, json};

use super::columns::ColumnPath;
use super::names::{intern, intern_list};
use super::{CustomHooks, CustomKind, PrinterColumn};
use crate::registry::{Conversion, Registry, ResourceDef};

/// The outcome of [`plan`].
pub struct Plan {
    /// Every kind the accepted definitions serve, each definition's storage version
    /// first (its objects' storage prefix resolves to it).
    pub defs: Vec<Arc<ResourceDef>>,
    /// Changes whenever `defs` would serve something different.
    pub fingerprint: u64,
    /// (definition name, status) for the definitions whose status differs from it.
    pub statuses: Vec<(String, Value)>,
    /// Definitions being deleted, with the kinds whose objects go first.
    pub terminating: Vec<(String, Vec<Arc<ResourceDef>>)>,
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.at(ptr).and_then(Value::as_str).unwrap_or("")
}

fn strings(v: &Value, ptr: &str) -> Vec<String> {
    v.at(ptr)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The OpenAPI definition name kube-apiserver publishes a custom kind under: the
/// group reversed (`com.example.stable.v1.CronTab`).
fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The kinds one definition serves: its served versions, storage version first.
pub fn resource_defs(crd: &Value) -> Vec<Arc<ResourceDef>> {
    let group = s(crd, "/spec/group");
    let kind = s(crd, "/spec/names/kind");
    let plural = s(crd, "/spec/names/plural");
    let singular = match s(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        other => other.to_string(),
    };
    let namespaced = s(crd, "/spec/scope") == "Namespaced";
    let short_names = intern_list(&strings(crd, "/spec/names/shortNames"));
    let categories = intern_list(&strings(crd, "/spec/names/categories"));
    let mut versions: Vec<&Value> = crd
        .at("/spec/versions")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    versions.sort_by_key(|v| v.get("storage").and_then(Value::as_bool) != Some(true));
    let storage_api_version = format!("{group}/{}", versions.first().map_or("", |v| s(v, "/name")));
    versions
        .into_iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .map(|v| {
            let version = s(v, "/name");
            let schema = Arc::new(
                v.at("/schema/openAPIV3Schema")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            );
            let columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .filter_map(|c| {
                            Some(PrinterColumn {
                                name: s(c, "/name").to_string(),
                                type_: s(c, "/type").to_string(),
                                format: s(c, "/format").to_string(),
                                description: s(c, "/description").to_string(),
                                priority: c.get("priority").and_then(Value::as_u64).unwrap_or(0)
                                    as u8,
                                path: ColumnPath::parse(s(c, "/jsonPath")).ok()?,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut d = ResourceDef::new(
                intern(group),
                intern(version),
                intern(kind),
                intern(plural),
                intern(&singular),
                namespaced,
                CustomHooks {
                    schema: schema.clone(),
                    namespaced,
                },
            );
            d.short_names = short_names;
            d.categories = categories;
            d.definition = intern(&definition_name(group, version, kind));
            d.status_subresource = v.at("/subresources/status").is_some();
            let scale = v.at("/subresources/scale").and_then(super::ScalePaths::of);
            d.scale_subresource = scale.is_some();
            d.tracks_generation = true;
            if v.get("storage").and_then(Value::as_bool) != Some(true) {
                d.conversion = Some(Arc::new(Conversion::version_only(
                    intern(group),
                    storage_api_version.clone(),
                )));
            }
            d.custom = Some(Arc::new(CustomKind {
                crd: crate::object::name(crd).to_string(),
                schema,
                columns,
                storage: v.get("storage").and_then(Value::as_bool) == Some(true),
                scale,
            }));
            Arc::new(d)
        })
        .collect()
}

/// The names a definition asks for that another accepted definition, or a compiled-in
/// kind, of the same group already holds: `("PluralConflict", "\"widgets\" is already in use")`.
fn conflict(crd: &Value, accepted: &[&Value], builtin: &Registry) -> Option<(String, String)> {
    let group = s(crd, "/spec/group");
    let plural = s(crd, "/spec/names/plural");
    let kind = s(crd, "/spec/names/kind");
    let plural_taken = builtin
        .all()
        .iter()
        .any(|d| d.custom.is_none() && d.group == group && d.plural == plural)
        || accepted
            .iter()
            .any(|o| s(o, "/spec/group") == group && s(o, "/spec/names/plural") == plural);
    if plural_taken {
        return Some((
            "PluralConflict".into(),
            format!("\"{plural}\" is already in use"),
        ));
    }
    let kind_taken = builtin
        .all()
        .iter()
        .any(|d| d.custom.is_none() && d.group == group && d.kind == kind)
        || accepted
            .iter()
            .any(|o| s(o, "/spec/group") == group && s(o, "/spec/names/kind") == kind);
    if kind_taken {
        return Some((
            "KindConflict".into(),
            format!("\"{kind}\" is already in use"),
        ));
    }
    None
}

fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// `desired` conditions, keeping the transition time of each whose status did not change.
fn merge_conditions(current: &Value, desired: Vec<Value>, now: &str) -> Value {
    let old = current
        .at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for mut c in desired {
        let same = old
            .iter()
            .find(|o| o.get("type") == c.get("type"))
            .filter(|o| o.get("status") == c.get("status"));
        let at = same
            .and_then(|o| o.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| Value::from(now));
        c["lastTransitionTime"] = at;
        out.push(c);
    }
    Value::from(out)
}

/// Whether two condition lists say the same, transition times aside.
fn same_conditions(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| -> Vec<Value> {
        v.as_array()
            .map(|l| {
                l.iter()
                    .map(|c| {
                        let mut c = c.clone();
                        if let Some(m) = c.as_object_mut() {
                            m.remove("lastTransitionTime");
                        }
                        c
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    strip(a) == strip(b)
}

/// Decides what `crds` (every stored definition) ask for, `builtin` being the server's
/// compiled-in kinds; `now` is the time written on changed conditions.
pub fn plan(crds: &[Value], builtin: &Registry, now: &str) -> Plan {
    // Earlier definitions keep their names, as upstream's naming controller does.
    let mut ordered: Vec<&Value> = crds.iter().collect();
    ordered.sort_by(|a, b| {
        (s(a, "/metadata/creationTimestamp"), crate::object::name(a))
            .cmp(&(s(b, "/metadata/creationTimestamp"), crate::object::name(b)))
    });
    let mut accepted: Vec<&Value> = Vec::new();
    let mut defs = Vec::new();
    let mut statuses = Vec::new();
    let mut terminating = Vec::new();
    let mut fingerprint = Vec::new();
    for crd in ordered {
        let name = crate::object::name(crd).to_string();
        let clash = conflict(crd, &accepted, builtin);
        let deleting = crate::object::is_deleting(crd);
        let mut conditions = match &clash {
            None => vec![
                condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
                condition(
                    "Established",
                    true,
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                ),
            ],
            Some((reason, message)) => vec![
                condition("NamesAccepted", false, reason, message),
                condition(
                    "Established",
                    false,
                    "NotAccepted",
                    "not all names are accepted",
                ),
            ],
        };
        if deleting {
            conditions.push(condition(
                "Terminating",
                true,
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            ));
        }
        let merged = merge_conditions(crd, conditions, now);
        let mut status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut changed =
            !same_conditions(&merged, status.get("conditions").unwrap_or(&Value::Null));
        status["conditions"] = merged;
        if clash.is_none() {
            let names = crd.at("/spec/names").cloned().unwrap_or_else(|| json!({}));
            changed |= status.get("acceptedNames") != Some(&names);
            status["acceptedNames"] = names;
            let mut stored = strings(&status, "/storedVersions");
            let storage = crd
                .at("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .and_then(|v| v.get("name"))
                .and_then(Value::as_str);
            if let Some(v) = storage
                && !stored.iter().any(|s| s == v)
            {
                stored.push(v.to_string());
                changed = true;
            }
            status["storedVersions"] = json!(stored);
        } else if status.get("acceptedNames").is_none() {
            status["acceptedNames"] = json!({"plural": "", "kind": ""});
            changed = true;
        }
        if changed {
            statuses.push((name.clone(), status));
        }
        if clash.is_some() {
            continue;
        }
        accepted.push(crd);
        let served = resource_defs(crd);
        fingerprint.push(json!([name, crate::object::uid(crd), crd.get("spec")]));
        if deleting {
            terminating.push((name, served.clone()));
        }
        defs.extend(served);
    }
    let text = serde_json::to_vec(&fingerprint).unwrap_or_default();
    Plan {
        defs,
        fingerprint: crate::openapi::fnv1a64(&text),
        statuses,
        terminating,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

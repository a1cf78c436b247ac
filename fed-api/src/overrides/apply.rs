//! Which override policies select an object, in which order, and the copy one member gets
//! once their rules have run: a pure function of the copy, the cluster and the policies,
//! shared by the controllers and `fedctl plan`.
//!
//! Order (issue 26): every `ClusterOverridePolicy` first, then the `OverridePolicy`s, each
//! group by name; within a policy its rules in order; within a rule the overriders in the
//! order of [`super::Overriders`]' fields (image, command, args, labels, annotations, plaintext),
//! each list in order. A later change sees what an earlier one made, so a namespaced
//! policy has the last word over a cluster-wide one.
//!
//! What fails (an image that cannot be parsed, a part that is not valid, a plaintext path
//! that is missing for `remove`/`replace`) fails the whole copy for that cluster: a half
//! applied override is never pushed. What is simply not there (a container a command
//! overrider names, a kind without a pod template for an image overrider) is no change,
//! so one policy can select many kinds.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::image::{ImageError, ImageRef};
use super::{
    CommandArgsOverrider, ImageOverrider, MapOverrider, OverrideOperator, OverridePolicySpec,
    OverrideRule, PlaintextOverrider,
};
use crate::cluster::ClusterSpec;
use crate::governance::{Subject, selector_matches};

/// An `OverridePolicy` or a `ClusterOverridePolicy`, as the decisions read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    /// The namespace of an `OverridePolicy`; `None` for a `ClusterOverridePolicy`.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// What it selects and changes.
    pub spec: OverridePolicySpec,
}

impl Policy {
    /// The kind's name.
    pub fn kind(&self) -> &'static str {
        if self.namespace.is_some() {
            "OverridePolicy"
        } else {
            "ClusterOverridePolicy"
        }
    }

    /// Whether the policy selects `s`: a namespaced policy only objects of its namespace.
    pub fn selects(&self, s: &Subject<'_>) -> bool {
        if let Some(ns) = &self.namespace
            && s.namespace != Some(ns.as_str())
        {
            return false;
        }
        self.spec
            .resource_selectors
            .iter()
            .any(|sel| selector_matches(sel, s).is_some())
    }

    /// The application order: cluster-wide first, then by name (and namespace).
    fn order(&self) -> (bool, &str, &str) {
        (
            self.namespace.is_some(),
            &self.name,
            self.namespace.as_deref().unwrap_or(""),
        )
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "OverridePolicy {ns}/{}", self.name),
            None => write!(f, "ClusterOverridePolicy {}", self.name),
        }
    }
}

#[cfg(feature = "kube")]
mod from_kube {
    use super::Policy;

    impl From<crate::OverridePolicy> for Policy {
        fn from(p: crate::OverridePolicy) -> Self {
            Policy {
                namespace: Some(p.metadata.namespace.unwrap_or_default()),
                name: p.metadata.name.unwrap_or_default(),
                spec: p.spec,
            }
        }
    }

    impl From<crate::ClusterOverridePolicy> for Policy {
        fn from(p: crate::ClusterOverridePolicy) -> Self {
            Policy {
                namespace: None,
                name: p.metadata.name.unwrap_or_default(),
                spec: p.spec.0,
            }
        }
    }
}

/// A member cluster as rule targets read it.
#[derive(Clone, Copy, Debug)]
pub struct MemberCluster<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// The Cluster's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// `spec.region`.
    pub region: Option<&'a str>,
    /// `spec.zone`.
    pub zone: Option<&'a str>,
}

impl<'a> MemberCluster<'a> {
    /// The cluster `name` with `labels` and `spec`.
    pub fn new(name: &'a str, labels: &'a BTreeMap<String, String>, spec: &'a ClusterSpec) -> Self {
        MemberCluster {
            name,
            labels,
            region: spec.region.as_deref(),
            zone: spec.zone.as_deref(),
        }
    }

    /// The member a kube `Cluster` object describes.
    #[cfg(feature = "kube")]
    pub fn of(c: &'a crate::Cluster) -> Self {
        static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();
        MemberCluster::new(
            c.metadata.name.as_deref().unwrap_or(""),
            c.metadata.labels.as_ref().unwrap_or(&NO_LABELS),
            &c.spec,
        )
    }
}

/// Why a policy's rule could not change a member's copy.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{policy} rule {rule}: {failure}")]
pub struct OverrideError {
    /// The policy, as `OverridePolicy ns/name` or `ClusterOverridePolicy name`.
    pub policy: String,
    /// The rule's index in `overrideRules`.
    pub rule: usize,
    /// What went wrong (part of this error's message, so it is not a separate source).
    pub failure: Failure,
}

/// What went wrong in one overrider.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Failure {
    /// An image could not be taken apart or changed.
    #[error("imageOverrider[{index}]: container {container:?}: {reason}")]
    Image {
        /// The overrider's index.
        index: usize,
        /// The container.
        container: String,
        /// Why.
        reason: ImageError,
    },
    /// `add` and `remove` of commands, args, labels or annotations need values.
    #[error("{overrider}[{index}]: {operator} needs a value")]
    MissingValue {
        /// `argsOverrider`, `labelsOverrider`, ...
        overrider: &'static str,
        /// The overrider's index.
        index: usize,
        /// Its operator.
        operator: &'static str,
    },
    /// The object's labels or annotations are not a map.
    #[error("{overrider}[{index}]: metadata.{field} is not a map")]
    NotAMap {
        /// `labelsOverrider` or `annotationsOverrider`.
        overrider: &'static str,
        /// The overrider's index.
        index: usize,
        /// `labels` or `annotations`.
        field: &'static str,
    },
    /// An RFC 6902 operation failed.
    #[error("plaintext[{index}]: {operator} {path}: {reason}")]
    Plaintext {
        /// The overrider's index.
        index: usize,
        /// Its operator.
        operator: &'static str,
        /// Its path.
        path: String,
        /// Why.
        reason: PlaintextFailure,
    },
}

/// Why an RFC 6902 operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlaintextFailure {
    /// The path is not an RFC 6901 JSON pointer below the root.
    #[error("the path is not a JSON pointer (RFC 6901) below the root")]
    NotAPointer,
    /// `add` and `replace` need a value.
    #[error("the operation needs a value")]
    MissingValue,
    /// `remove` and `replace` need something at the path.
    #[error("the path does not exist in the object")]
    PathNotFound,
    /// The patch refused the operation (e.g. `add` under a parent that does not exist).
    #[error("{0}")]
    Refused(String),
}

impl OverrideOperator {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            OverrideOperator::Add => "add",
            OverrideOperator::Remove => "remove",
            OverrideOperator::Replace => "replace",
        }
    }
}

/// Whether `path` is a JSON pointer below the document's root (`/spec/replicas`).
pub fn is_json_pointer(path: &str) -> bool {
    path.starts_with('/') && PointerBuf::parse(path).is_ok()
}

/// Where a kind keeps its pod spec: Pods at `spec`, CronJobs in their job template, every
/// other kind (the workload kinds, and custom kinds shaped like them) at `spec.template.spec`.
pub fn pod_spec_pointer(kind: &str) -> &'static str {
    match kind {
        "Pod" => "/spec",
        "PodTemplate" => "/template/spec",
        "CronJob" => "/spec/jobTemplate/spec/template/spec",
        _ => "/spec/template/spec",
    }
}

/// An object's labels as a map (non-string values are skipped).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// The policies that select `s`, in the order they apply.
pub fn selecting<'p>(s: &Subject<'_>, policies: &'p [Policy]) -> Vec<&'p Policy> {
    let mut out: Vec<&Policy> = policies.iter().filter(|p| p.selects(s)).collect();
    out.sort_by(|a, b| a.order().cmp(&b.order()));
    out
}

fn targets(rule: &OverrideRule, c: &MemberCluster<'_>) -> bool {
    rule.target_cluster
        .as_ref()
        .is_none_or(|a| a.mismatch(c.name, c.labels, c.region, c.zone).is_none())
}

/// Whether some rule of the `selected` policies applies in cluster `c`: when none does,
/// the member gets the copy as it is.
pub fn changes_in(selected: &[&Policy], c: &MemberCluster<'_>) -> bool {
    selected
        .iter()
        .flat_map(|p| &p.spec.override_rules)
        .any(|r| targets(r, c))
}

/// The copy `object` (of `kind`) as cluster `c` gets it once the rules of the `selected`
/// policies (in order, from [`selecting`]) that target `c` have run.
pub fn apply_selected(
    object: &Value,
    kind: &str,
    c: &MemberCluster<'_>,
    selected: &[&Policy],
) -> Result<Value, OverrideError> {
    let mut out = object.clone();
    for p in selected {
        for (i, rule) in p.spec.override_rules.iter().enumerate() {
            if targets(rule, c) {
                apply_rule(&mut out, kind, rule).map_err(|failure| OverrideError {
                    policy: p.to_string(),
                    rule: i,
                    failure,
                })?;
            }
        }
    }
    Ok(out)
}

/// The copy `object` as cluster `c` gets it under `policies` (any of them; those that
/// select the object by its own apiVersion, kind, namespace, name and labels apply).
pub fn apply(
    object: &Value,
    c: &MemberCluster<'_>,
    policies: &[Policy],
) -> Result<Value, OverrideError> {
    fn str_at<'v>(v: &'v Value, pointer: &str) -> &'v str {
        v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
    }
    let labels = labels_of(object);
    let s = Subject {
        api_version: str_at(object, "/apiVersion"),
        kind: str_at(object, "/kind"),
        namespace: Some(str_at(object, "/metadata/namespace")).filter(|n| !n.is_empty()),
        name: str_at(object, "/metadata/name"),
        labels: &labels,
    };
    apply_selected(object, s.kind, c, &selecting(&s, policies))
}

fn apply_rule(obj: &mut Value, kind: &str, rule: &OverrideRule) -> Result<(), Failure> {
    let o = &rule.overriders;
    for (i, io) in o.image_overrider.iter().enumerate() {
        image(obj, kind, i, io)?;
    }
    for (i, co) in o.command_overrider.iter().enumerate() {
        command_args(obj, kind, ("commandOverrider", "command"), i, co)?;
    }
    for (i, ao) in o.args_overrider.iter().enumerate() {
        command_args(obj, kind, ("argsOverrider", "args"), i, ao)?;
    }
    for (i, mo) in o.labels_overrider.iter().enumerate() {
        map(obj, ("labelsOverrider", "labels"), i, mo)?;
    }
    for (i, mo) in o.annotations_overrider.iter().enumerate() {
        map(obj, ("annotationsOverrider", "annotations"), i, mo)?;
    }
    for (i, p) in o.plaintext.iter().enumerate() {
        plaintext(obj, i, p)?;
    }
    Ok(())
}

/// Runs `f` on every init container and container of the object's pod spec, if it has one.
fn for_each_container(
    obj: &mut Value,
    kind: &str,
    mut f: impl FnMut(&mut Map<String, Value>) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let Some(spec) = obj
        .pointer_mut(pod_spec_pointer(kind))
        .and_then(Value::as_object_mut)
    else {
        return Ok(());
    };
    for list in ["initContainers", "containers"] {
        let containers = spec.get_mut(list).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            if let Some(c) = c.as_object_mut() {
                f(c)?;
            }
        }
    }
    Ok(())
}

fn container_name(c: &Map<String, Value>) -> &str {
    c.get("name").and_then(Value::as_str).unwrap_or("")
}

fn image(obj: &mut Value, kind: &str, index: usize, o: &ImageOverrider) -> Result<(), Failure> {
    for_each_container(obj, kind, |c| {
        let name = container_name(c);
        if o.container_name.as_deref().is_some_and(|n| n != name) {
            return Ok(());
        }
        let Some(image) = c.get("image").and_then(Value::as_str) else {
            return Ok(());
        };
        let fail = |reason| Failure::Image {
            index,
            container: name.to_owned(),
            reason,
        };
        let mut r = ImageRef::parse(image).map_err(fail)?;
        r.change(o.component, o.operator, o.value.as_deref())
            .map_err(fail)?;
        c.insert("image".into(), r.to_string().into());
        Ok(())
    })
}

fn command_args(
    obj: &mut Value,
    kind: &str,
    (overrider, field): (&'static str, &'static str),
    index: usize,
    o: &CommandArgsOverrider,
) -> Result<(), Failure> {
    if o.operator != OverrideOperator::Replace && o.value.is_empty() {
        return Err(Failure::MissingValue {
            overrider,
            index,
            operator: o.operator.as_str(),
        });
    }
    for_each_container(obj, kind, |c| {
        if container_name(c) != o.container_name {
            return Ok(());
        }
        let mut list: Vec<Value> = c
            .get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let given = || o.value.iter().map(|v| Value::from(v.as_str()));
        match o.operator {
            OverrideOperator::Add => list.extend(given()),
            OverrideOperator::Remove => {
                list.retain(|v| !v.as_str().is_some_and(|s| o.value.iter().any(|x| x == s)))
            }
            OverrideOperator::Replace => list = given().collect(),
        }
        if list.is_empty() {
            c.remove(field);
        } else {
            c.insert(field.into(), Value::Array(list));
        }
        Ok(())
    })
}

fn map(
    obj: &mut Value,
    (overrider, field): (&'static str, &'static str),
    index: usize,
    o: &MapOverrider,
) -> Result<(), Failure> {
    if o.value.is_empty() {
        return Err(Failure::MissingValue {
            overrider,
            index,
            operator: o.operator.as_str(),
        });
    }
    let not_a_map = Failure::NotAMap {
        overrider,
        index,
        field,
    };
    let meta = obj
        .as_object_mut()
        .map(|o| {
            o.entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()))
        })
        .and_then(Value::as_object_mut)
        .ok_or(not_a_map.clone())?;
    let m = meta
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if m.is_null() {
        *m = Value::Object(Map::new());
    }
    let m = m.as_object_mut().ok_or(not_a_map)?;
    for (k, v) in &o.value {
        match o.operator {
            OverrideOperator::Add => {
                m.insert(k.clone(), v.as_str().into());
            }
            OverrideOperator::Remove => {
                m.remove(k);
            }
            OverrideOperator::Replace => {
                if let Some(old) = m.get_mut(k) {
                    *old = v.as_str().into();
                }
            }
        }
    }
    if m.is_empty() {
        meta.remove(field);
    }
    Ok(())
}

fn plaintext(obj: &mut Value, index: usize, p: &PlaintextOverrider) -> Result<(), Failure> {
    let fail = |reason| Failure::Plaintext {
        index,
        operator: p.operator.as_str(),
        path: p.path.clone(),
        reason,
    };
    let path = PointerBuf::parse(p.path.as_str())
        .ok()
        .filter(|_| p.path.starts_with('/'))
        .ok_or_else(|| fail(PlaintextFailure::NotAPointer))?;
    if p.operator != OverrideOperator::Add && obj.pointer(&p.path).is_none() {
        return Err(fail(PlaintextFailure::PathNotFound));
    }
    let value = || {
        p.value
            .clone()
            .ok_or_else(|| fail(PlaintextFailure::MissingValue))
    };
    let op = match p.operator {
        OverrideOperator::Add => PatchOperation::Add(AddOperation {
            path,
            value: value()?,
        }),
        OverrideOperator::Remove => PatchOperation::Remove(RemoveOperation { path }),
        OverrideOperator::Replace => PatchOperation::Replace(ReplaceOperation {
            path,
            value: value()?,
        }),
    };
    // One operation, checked first: it fails before it changes anything, so the undo log
    // of `json_patch::patch` is not needed (and a failure drops the whole copy anyway).
    json_patch::patch_unsafe(obj, &[op])
        .map_err(|e| fail(PlaintextFailure::Refused(e.kind.to_string())))
}

#[cfg(test)]
mod tests;

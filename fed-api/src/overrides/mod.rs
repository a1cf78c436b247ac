//! `OverridePolicy` and `ClusterOverridePolicy`: per-cluster changes to the copies pushed
//! into members (image, command, args, labels, annotations, RFC 6902 operations), applied
//! after placement, rule by rule.
//!
//! The types are here; [`apply`] decides what a member gets (which policies select an
//! object, in which order, and what each rule does to the copy for one cluster), and
//! [`image`] takes image references apart. Both are pure, so the controllers and
//! `fedctl plan` compute the very same copy.

pub mod apply;
pub mod image;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

use crate::policy::{ClusterAffinity, ResourceSelector};

/// Which objects to change, and how, per cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(group = "federation.meridian.dev", version = "v1alpha1"),
    kube(kind = "OverridePolicy", namespaced, shortname = "op")
)]
#[serde(rename_all = "camelCase")]
pub struct OverridePolicySpec {
    /// The objects whose member copies change.
    #[serde(default)]
    pub resource_selectors: Vec<ResourceSelector>,
    /// Applied in order; a rule whose target matches no cluster does nothing.
    #[serde(default)]
    pub override_rules: Vec<OverrideRule>,
}

cluster_wide_spec! {
    /// The spec of a `ClusterOverridePolicy`: an [`OverridePolicySpec`] for cluster-scoped
    /// kinds and namespaced kinds in any namespace.
    ClusterOverridePolicySpec(OverridePolicySpec),
    kind = "ClusterOverridePolicy", shortname = "cop"
}

/// The clusters a rule applies to and what it changes there.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverrideRule {
    /// The clusters (by names, labels, regions, zones, exclusions); absent: every cluster.
    pub target_cluster: Option<ClusterAffinity>,
    /// The changes.
    #[serde(default)]
    pub overriders: Overriders,
}

/// The changes one rule makes, applied in the order of the fields here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Overriders {
    /// Container image parts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_overrider: Vec<ImageOverrider>,
    /// Container commands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_overrider: Vec<CommandArgsOverrider>,
    /// Container arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args_overrider: Vec<CommandArgsOverrider>,
    /// Labels of the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels_overrider: Vec<MapOverrider>,
    /// Annotations of the object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations_overrider: Vec<MapOverrider>,
    /// RFC 6902 operations on the member copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plaintext: Vec<PlaintextOverrider>,
}

/// What an overrider does with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OverrideOperator {
    /// Add the value (to a list or map, or where nothing was).
    Add,
    /// Remove what the value names (or the whole part, without a value).
    Remove,
    /// Replace what is there with the value.
    Replace,
}

/// The part of an image reference (`registry/repository:tag@digest`) an [`ImageOverrider`]
/// changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ImageComponent {
    /// `registry.example` in `registry.example/team/web:1.2`.
    Registry,
    /// `team/web`.
    Repository,
    /// `1.2`. A digest, when the image has one, pins it whatever the tag says.
    Tag,
    /// `sha256:…` after the `@`.
    Digest,
}

/// Changes one part of container images: `add` sets a part the image lacks (an image that
/// has it keeps it), `remove` drops it, `replace` sets it.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageOverrider {
    /// Only this container (and init container); absent: every container.
    pub container_name: Option<String>,
    /// Which part of the image.
    pub component: ImageComponent,
    /// `add`, `remove` or `replace`.
    pub operator: OverrideOperator,
    /// The new part (not for `remove`).
    pub value: Option<String>,
}

/// Changes a container's `command` or `args`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommandArgsOverrider {
    /// The container (or init container) by name; a workload without it is left alone.
    pub container_name: String,
    /// `add` appends, `remove` drops these entries, `replace` sets the whole list.
    pub operator: OverrideOperator,
    /// The entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<String>,
}

/// Changes labels or annotations.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MapOverrider {
    /// `add` sets the pairs, `remove` drops these keys, `replace` changes existing keys only.
    pub operator: OverrideOperator,
    /// The pairs (for `remove`, only the keys count).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub value: BTreeMap<String, String>,
}

/// One RFC 6902 operation on the member copy.
#[skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlaintextOverrider {
    /// JSON pointer into the object, e.g. `/spec/template/spec/nodeSelector`.
    pub path: String,
    /// `add`, `remove` or `replace`.
    pub operator: OverrideOperator,
    /// The value for `add` and `replace`: any JSON.
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value: Option<serde_json::Value>,
}

//! `ResourceInterpreter`: teaches Meridian where a custom workload kind keeps its replicas,
//! its pod template and its status (built-in kinds need none).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

/// How to read one custom kind.
#[skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(group = "federation.meridian.dev", version = "v1alpha1"),
    kube(kind = "ResourceInterpreter", shortname = "ri")
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInterpreterSpec {
    /// The kind this interpreter is for.
    pub target: InterpreterTarget,
    /// Where the replica count is; absent: the kind is only ever `Duplicated`.
    pub replicas: Option<FieldRef>,
    /// Where the pod template is: its requests size capacity, its ConfigMaps and Secrets
    /// are pushed with the object.
    pub pod_template: Option<FieldRef>,
    /// Status fields combined over member copies into the federated object's status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub status_aggregation: Vec<StatusAggregation>,
    /// When a member copy counts as healthy.
    pub health: Option<HealthRule>,
}

/// The apiVersion and kind an interpreter is for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterpreterTarget {
    /// e.g. `argoproj.io/v1alpha1`.
    pub api_version: String,
    /// e.g. `Rollout`.
    pub kind: String,
}

/// A field of the object, by path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FieldRef {
    /// Dotted path from the object's root, e.g. `.spec.replicas`.
    pub path: String,
}

/// One status field and how member copies' values combine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StatusAggregation {
    /// Dotted path of the field, e.g. `.status.readyReplicas`.
    pub path: String,
    /// How the values combine.
    pub op: AggregationOp,
}

/// How member copies' values of one status field combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AggregationOp {
    /// The sum (replica counts).
    Sum,
    /// The smallest value (e.g. an observed generation every copy has reached).
    Min,
    /// The largest value.
    Max,
}

/// When a member copy is healthy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// The copy is healthy when its condition of this type is `True`.
    pub condition_type: String,
}

/// Why an object cannot be read as its interpreter says.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InterpretError {
    /// The object has nothing at the path.
    #[error("{path} is missing")]
    Missing {
        /// The interpreter's path.
        path: String,
    },
    /// The value at the path is not a replica count (a non-negative integer that fits).
    #[error("{path} is not a replica count: {value}")]
    NotCount {
        /// The interpreter's path.
        path: String,
        /// What the object has there.
        value: String,
    },
}

impl FieldRef {
    /// The path as JSON object keys (`.spec.replicas` → `["spec", "replicas"]`).
    pub fn segments(&self) -> Vec<&str> {
        self.path
            .trim_start_matches('.')
            .split('.')
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// The value of `obj` at the path, if any (`null` counts as none).
    pub fn get<'a>(&self, obj: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        let mut at = obj;
        for s in self.segments() {
            at = at.get(s)?;
        }
        (!at.is_null()).then_some(at)
    }

    /// Sets `value` at the path of `obj`, making objects on the way (a non-object on the
    /// way is replaced: the path says what the field is).
    pub fn set(&self, obj: &mut serde_json::Value, value: serde_json::Value) {
        let segments = self.segments();
        let Some((last, parents)) = segments.split_last() else {
            return;
        };
        // Every value indexed mutably below is an object (indexing a string would panic).
        if !obj.is_object() {
            *obj = serde_json::Value::Object(serde_json::Map::new());
        }
        let mut at = obj;
        for s in parents {
            if !at[*s].is_object() {
                at[*s] = serde_json::Value::Object(serde_json::Map::new());
            }
            at = &mut at[*s];
        }
        at[*last] = value;
    }
}

impl ResourceInterpreterSpec {
    /// The replica count of `obj`, or `None` when the interpreter names no replicas (the
    /// kind is only ever copied whole). A count that is missing, not an integer or
    /// negative is an error: there is no default to assume for a custom kind.
    pub fn replicas_of(&self, obj: &serde_json::Value) -> Option<Result<u32, InterpretError>> {
        let field = self.replicas.as_ref()?;
        let Some(v) = field.get(obj) else {
            return Some(Err(InterpretError::Missing {
                path: field.path.clone(),
            }));
        };
        Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| InterpretError::NotCount {
                    path: field.path.clone(),
                    value: v.to_string(),
                }),
        )
    }

    /// The pod template of `obj` (`{metadata, spec}` as in a Deployment's
    /// `spec.template`), when the interpreter names one and the object has it.
    pub fn pod_template_of<'a>(&self, obj: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        self.pod_template.as_ref()?.get(obj)
    }

    /// `obj` with `share` written where the interpreter says the replicas are (unchanged
    /// when it names none): the copy one member of a divided object gets.
    pub fn with_share(&self, mut obj: serde_json::Value, share: u32) -> serde_json::Value {
        if let Some(field) = &self.replicas {
            field.set(&mut obj, serde_json::Value::from(share));
        }
        obj
    }
}

/// The interpreter of `(api_version, kind)` among `all` (name, spec): the first by name,
/// so two interpreters of one kind resolve the same way everywhere.
pub fn interpreter_for<'a>(
    all: impl IntoIterator<Item = (&'a str, &'a ResourceInterpreterSpec)>,
    api_version: &str,
    kind: &str,
) -> Option<&'a ResourceInterpreterSpec> {
    all.into_iter()
        .filter(|(_, s)| s.target.api_version == api_version && s.target.kind == kind)
        .min_by_key(|(name, _)| *name)
        .map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(replicas: Option<&str>, template: Option<&str>) -> ResourceInterpreterSpec {
        ResourceInterpreterSpec {
            target: InterpreterTarget {
                api_version: "example.com/v1".into(),
                kind: "Rollout".into(),
            },
            replicas: replicas.map(|p| FieldRef { path: p.into() }),
            pod_template: template.map(|p| FieldRef { path: p.into() }),
            ..Default::default()
        }
    }

    #[test]
    fn replicas_table() {
        let s = spec(Some(".spec.replicas"), None);
        let missing = || {
            Err(InterpretError::Missing {
                path: ".spec.replicas".into(),
            })
        };
        let not = |v: &str| {
            Err(InterpretError::NotCount {
                path: ".spec.replicas".into(),
                value: v.into(),
            })
        };
        let cases: Vec<(serde_json::Value, Result<u32, InterpretError>)> = vec![
            (json!({"spec": {"replicas": 6}}), Ok(6)),
            (json!({"spec": {"replicas": 0}}), Ok(0)),
            (json!({"spec": {}}), missing()),
            (json!({"spec": {"replicas": null}}), missing()),
            (json!({}), missing()),
            (json!({"spec": "x"}), missing()),
            (json!({"spec": {"replicas": "6"}}), not("\"6\"")),
            (json!({"spec": {"replicas": -1}}), not("-1")),
            (json!({"spec": {"replicas": 1.5}}), not("1.5")),
            (
                json!({"spec": {"replicas": 5_000_000_000_u64}}),
                not("5000000000"),
            ),
        ];
        for (i, (obj, want)) in cases.into_iter().enumerate() {
            assert_eq!(s.replicas_of(&obj), Some(want), "case {i}");
        }
        assert_eq!(
            spec(None, None).replicas_of(&json!({"spec": {"replicas": 3}})),
            None
        );
    }

    #[test]
    fn template_and_share() {
        let s = spec(Some("spec.scale.replicas"), Some(".spec.template"));
        let obj =
            json!({"spec": {"scale": {"replicas": 6}, "template": {"spec": {"containers": []}}}});
        assert_eq!(
            s.pod_template_of(&obj),
            Some(&json!({"spec": {"containers": []}}))
        );
        assert_eq!(spec(None, None).pod_template_of(&obj), None);
        // (object, share, expected)
        let cases = [
            (
                obj.clone(),
                2,
                json!({"spec": {"scale": {"replicas": 2}, "template": {"spec": {"containers": []}}}}),
            ),
            (json!({}), 4, json!({"spec": {"scale": {"replicas": 4}}})),
            (
                json!({"spec": {"scale": 3}}),
                1,
                json!({"spec": {"scale": {"replicas": 1}}}),
            ),
        ];
        for (i, (obj, share, want)) in cases.into_iter().enumerate() {
            assert_eq!(s.with_share(obj, share), want, "case {i}");
        }
        // An interpreter without replicas writes nothing.
        assert_eq!(
            spec(None, None).with_share(json!({"a": 1}), 3),
            json!({"a": 1})
        );
    }

    #[test]
    fn first_interpreter_by_name() {
        let a = spec(Some(".spec.a"), None);
        let b = spec(Some(".spec.b"), None);
        let mut other = spec(None, None);
        other.target.kind = "Other".into();
        let all = [("zeta", &a), ("alpha", &b), ("aaa", &other)];
        assert_eq!(interpreter_for(all, "example.com/v1", "Rollout"), Some(&b));
        assert_eq!(interpreter_for(all, "example.com/v2", "Rollout"), None);
    }
}

//! Kubernetes-style label selectors (`matchLabels` + `matchExpressions`) and their matching.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A `metav1.LabelSelector`. An empty selector matches everything, as in Kubernetes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Every pair must be present with the same value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Every requirement must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the key relates to `values`.
    pub operator: SelectorOperator,
    /// Values for `In` / `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Operators of a label selector requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// The label is present and its value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// A selector requiring exactly these labels.
    pub fn from_labels<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            match_labels: pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator {
                    SelectorOperator::In => value.is_some_and(|v| r.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn matches_table() {
        let sel: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"env": "prod"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["gold", "silver"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "provider", "operator": "NotIn", "values": ["aws"]},
            ]
        }))
        .unwrap();
        let cases: &[(&[(&str, &str)], bool)] = &[
            (&[("env", "prod"), ("tier", "gold")], true),
            (
                &[("env", "prod"), ("tier", "gold"), ("provider", "gcp")],
                true,
            ),
            (
                &[("env", "prod"), ("tier", "gold"), ("provider", "aws")],
                false,
            ),
            (&[("env", "prod"), ("tier", "bronze")], false),
            (&[("env", "dev"), ("tier", "gold")], false),
            (&[("env", "prod"), ("tier", "gold"), ("legacy", "")], false),
            (&[("env", "prod")], false),
        ];
        for (l, want) in cases {
            assert_eq!(sel.matches(&labels(l)), *want, "{l:?}");
        }
        assert!(LabelSelector::default().matches(&labels(&[])));
        let exists = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![LabelSelectorRequirement {
                key: "gpu".into(),
                operator: SelectorOperator::Exists,
                values: vec![],
            }],
        };
        assert!(exists.matches(&labels(&[("gpu", "a100")])));
        assert!(!exists.matches(&labels(&[])));
    }
}

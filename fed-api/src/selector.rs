//! `metav1.LabelSelector` as a typed field, validated when read and matched by
//! `apimachinery`'s selector (the one the API server uses for `?labelSelector=`).

use std::collections::BTreeMap;

use apimachinery::selector::{Operator, Requirement, SelectorError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A label selector (`matchLabels` and `matchExpressions`), as in Kubernetes. An empty
/// selector matches everything.
///
/// Keys, values and operators are checked when the selector is read or built, as the
/// Kubernetes API server checks them, so a selector that exists is one that can match;
/// the fields are private for that reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "Fields", into = "Fields")]
pub struct LabelSelector {
    fields: Fields,
    #[schemars(skip)]
    compiled: apimachinery::LabelSelector,
}

/// The wire form of a [`LabelSelector`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "LabelSelector")]
struct Fields {
    /// Labels that must all be present with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    match_labels: BTreeMap<String, String>,
    /// Set-based requirements, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the key relates to `values`.
    pub operator: SelectorOperator,
    /// Values for `In` and `NotIn`; empty for `Exists` and `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Operators of a [`LabelSelectorRequirement`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// A selector from its two parts, checked as the API server checks them.
    pub fn new(
        match_labels: BTreeMap<String, String>,
        match_expressions: Vec<LabelSelectorRequirement>,
    ) -> Result<Self, SelectorError> {
        Self::try_from(Fields {
            match_labels,
            match_expressions,
        })
    }

    /// A selector requiring exactly these labels.
    pub fn from_labels<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, SelectorError> {
        let labels = pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self::new(labels, Vec::new())
    }

    /// `matchLabels`.
    pub fn match_labels(&self) -> &BTreeMap<String, String> {
        &self.fields.match_labels
    }

    /// `matchExpressions`.
    pub fn match_expressions(&self) -> &[LabelSelectorRequirement] {
        &self.fields.match_expressions
    }

    /// Whether `labels` satisfy every requirement (inlined: the scheduler asks per cluster).
    #[inline]
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        // The generic form, so the whole match inlines into the caller's loop.
        self.compiled
            .matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// The selector in `apimachinery`'s form (query-string `Display`, lookups).
    pub fn as_apimachinery(&self) -> &apimachinery::LabelSelector {
        &self.compiled
    }
}

impl TryFrom<Fields> for LabelSelector {
    type Error = SelectorError;

    fn try_from(fields: Fields) -> Result<Self, SelectorError> {
        let mut reqs =
            Vec::with_capacity(fields.match_labels.len() + fields.match_expressions.len());
        for (k, v) in &fields.match_labels {
            reqs.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for e in &fields.match_expressions {
            let op = match e.operator {
                SelectorOperator::In => Operator::In,
                SelectorOperator::NotIn => Operator::NotIn,
                SelectorOperator::Exists => Operator::Exists,
                SelectorOperator::DoesNotExist => Operator::DoesNotExist,
            };
            reqs.push(Requirement::new(&e.key, op, e.values.clone())?);
        }
        Ok(Self {
            compiled: apimachinery::LabelSelector::from_requirements(reqs),
            fields,
        })
    }
}

impl From<LabelSelector> for Fields {
    fn from(s: LabelSelector) -> Self {
        s.fields
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A label map from pairs (shared with the other modules' tests).
    pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
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
        let exists = LabelSelector::new(
            BTreeMap::new(),
            vec![LabelSelectorRequirement {
                key: "gpu".into(),
                operator: SelectorOperator::Exists,
                values: vec![],
            }],
        )
        .unwrap();
        assert!(exists.matches(&labels(&[("gpu", "a100")])));
        assert!(!exists.matches(&labels(&[])));
    }

    #[test]
    fn invalid_selectors_are_rejected_when_read() {
        for bad in [
            serde_json::json!({"matchLabels": {"-bad": "x"}}),
            serde_json::json!({"matchLabels": {"k": "not a value"}}),
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
        ] {
            assert!(
                serde_json::from_value::<LabelSelector>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        assert!(LabelSelector::from_labels([("ok", "-bad")]).is_err());
    }

    #[test]
    fn wire_form_round_trips() {
        let json = serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["b", "a"]}]
        });
        let sel: LabelSelector = serde_json::from_value(json.clone()).unwrap();
        // Values keep the order they were written in; only the matcher sorts them.
        assert_eq!(serde_json::to_value(&sel).unwrap(), json);
        assert_eq!(
            sel.as_apimachinery().to_string(),
            "app=web,tier notin (a,b)"
        );
        assert_eq!(sel.match_labels()["app"], "web");
        assert_eq!(sel.match_expressions()[0].operator, SelectorOperator::NotIn);
        let empty = serde_json::to_value(LabelSelector::default()).unwrap();
        assert_eq!(empty, serde_json::json!({}));
    }
}

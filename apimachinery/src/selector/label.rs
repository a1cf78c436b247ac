//! Label selectors: `k=v,k in (a,b),!k` strings and metav1.LabelSelector objects.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use super::SelectorError;
use crate::validation;

/// A label requirement operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v`
    Equals,
    /// `k==v`
    DoubleEquals,
    /// `k!=v`
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>n` (integer comparison)
    GreaterThan,
    /// `k<n` (integer comparison)
    LessThan,
}

/// One `key op values` term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and deduplicated so that Display is canonical.
    values: Vec<String>,
}

impl Requirement {
    /// Builds a validated requirement, as upstream `NewRequirement` does.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        validation::label_key(key).map_err(|errors| SelectorError::InvalidKey {
            key: key.to_string(),
            errors,
        })?;
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(SelectorError::InvalidValues(
                    "for 'in', 'notin' operators, values set can't be empty".into(),
                ));
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                return Err(SelectorError::InvalidValues(
                    "exact-match compatibility requires one single value".into(),
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(SelectorError::InvalidValues(
                    "values set must be empty for exists and does not exist".into(),
                ));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 || values[0].parse::<i64>().is_err() {
                    return Err(SelectorError::InvalidValues(
                        "for 'Gt', 'Lt' operators, exactly one integer value is required".into(),
                    ));
                }
                // Integers are valid label values, so no further validation is needed.
                return Ok(Requirement {
                    key: key.to_string(),
                    operator,
                    values,
                });
            }
            _ => {}
        }
        for v in &values {
            validation::label_value(v).map_err(|errors| SelectorError::InvalidValue {
                key: key.to_string(),
                value: v.clone(),
                errors,
            })?;
        }
        let mut values = values;
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set (given as a lookup) satisfies this requirement.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        let actual = get(&self.key);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                actual.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotEquals | Operator::NotIn => {
                actual.is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            Operator::Exists => actual.is_some(),
            Operator::DoesNotExist => actual.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(Ok(have)), Ok(want)) = (
                    actual.map(|v| v.parse::<i64>()),
                    self.values[0].parse::<i64>(),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        match self.operator {
            Operator::Exists => write!(f, "{k}"),
            Operator::DoesNotExist => write!(f, "!{k}"),
            Operator::Equals => write!(f, "{k}={}", self.values[0]),
            Operator::DoubleEquals => write!(f, "{k}=={}", self.values[0]),
            Operator::NotEquals => write!(f, "{k}!={}", self.values[0]),
            Operator::GreaterThan => write!(f, "{k}>{}", self.values[0]),
            Operator::LessThan => write!(f, "{k}<{}", self.values[0]),
            Operator::In => write!(f, "{k} in ({})", self.values.join(",")),
            Operator::NotIn => write!(f, "{k} notin ({})", self.values.join(",")),
        }
    }
}

/// A conjunction of label requirements. An empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// Sorted by key (stable) like upstream, so Display is canonical.
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Token::Ident(s) => s.as_str(),
            Token::Eq => "=",
            Token::DoubleEq => "==",
            Token::NotEq => "!=",
            Token::Bang => "!",
            Token::Gt => ">",
            Token::Lt => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        };
        f.write_str(s)
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let tok = match c {
                '=' if chars.peek() == Some(&'=') => {
                    chars.next();
                    Token::DoubleEq
                }
                '=' => Token::Eq,
                '!' if chars.peek() == Some(&'=') => {
                    chars.next();
                    Token::NotEq
                }
                '!' => Token::Bang,
                '(' => Token::Open,
                ')' => Token::Close,
                ',' => Token::Comma,
                '>' => Token::Gt,
                _ => Token::Lt,
            };
            tokens.push(tok);
            continue;
        }
        let mut ident = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || is_special(c) {
                break;
            }
            ident.push(c);
            chars.next();
        }
        tokens.push(Token::Ident(ident));
    }
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn found(t: Option<&Token>) -> String {
        t.map_or_else(|| "end of string".to_string(), |t| format!("'{t}'"))
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next() {
            Some(Token::Ident(k)) => Ok(k),
            other => Err(SelectorError::Syntax(format!(
                "found {}, expected: identifier",
                Self::found(other.as_ref())
            ))),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Bang) {
            self.next();
            let key = self.key()?;
            return Requirement::new(&key, Operator::DoesNotExist, vec![]);
        }
        let key = self.key()?;
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Requirement::new(&key, Operator::Exists, vec![]);
            }
            Some(Token::Eq) => Operator::Equals,
            Some(Token::DoubleEq) => Operator::DoubleEquals,
            Some(Token::NotEq) => Operator::NotEquals,
            Some(Token::Gt) => Operator::GreaterThan,
            Some(Token::Lt) => Operator::LessThan,
            Some(Token::Ident(s)) if s == "in" => Operator::In,
            Some(Token::Ident(s)) if s == "notin" => Operator::NotIn,
            other => {
                return Err(SelectorError::Syntax(format!(
                    "found {}, expected: in, notin, =, ==, !=, gt, lt",
                    Self::found(other)
                )));
            }
        };
        self.next();
        let values = match op {
            Operator::In | Operator::NotIn => self.value_list()?,
            _ => match self.peek() {
                // `k=` selects an empty value, which is a legal label value.
                None | Some(Token::Comma) => vec![String::new()],
                Some(Token::Ident(v)) => {
                    let v = v.clone();
                    self.next();
                    vec![v]
                }
                other => {
                    return Err(SelectorError::Syntax(format!(
                        "found {}, expected: identifier",
                        Self::found(other)
                    )));
                }
            },
        };
        Requirement::new(&key, op, values)
    }

    fn value_list(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(SelectorError::Syntax(format!(
                    "found {}, expected: '('",
                    Self::found(other.as_ref())
                )));
            }
        }
        let mut values = Vec::new();
        if self.peek() == Some(&Token::Close) {
            self.next();
            return Ok(values);
        }
        loop {
            // Empty entries (`(a,,b)`) are empty-string values, as upstream allows.
            match self.peek() {
                Some(Token::Ident(v)) => {
                    values.push(v.clone());
                    self.next();
                }
                Some(Token::Comma) | Some(Token::Close) => values.push(String::new()),
                other => {
                    return Err(SelectorError::Syntax(format!(
                        "found {}, expected: ',', ')' or identifier",
                        Self::found(other)
                    )));
                }
            }
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::Close) => return Ok(values),
                other => {
                    return Err(SelectorError::Syntax(format!(
                        "found {}, expected: ',' or ')'",
                        Self::found(other.as_ref())
                    )));
                }
            }
        }
    }
}

impl LabelSelector {
    /// A selector that matches everything.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// Builds a selector from requirements (sorted by key for canonical output).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements }
    }

    /// Parses the query-string syntax (`app=web,tier in (a,b),!legacy`).
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut p = Parser {
            tokens: lex(input),
            pos: 0,
        };
        let mut reqs = Vec::new();
        if p.peek().is_none() {
            return Ok(LabelSelector::everything());
        }
        loop {
            reqs.push(p.requirement()?);
            match p.next() {
                None => break,
                Some(Token::Comma) => continue,
                Some(other) => {
                    return Err(SelectorError::Syntax(format!(
                        "found '{other}', expected: ',' or 'end of string'"
                    )));
                }
            }
        }
        Ok(LabelSelector::from_requirements(reqs))
    }

    /// Converts a metav1.LabelSelector object (`matchLabels`, `matchExpressions`).
    /// `null` gives an empty selector; callers that must reject empty selectors
    /// (e.g. Deployment) check [`LabelSelector::is_empty`].
    pub fn from_json(value: &Value) -> Result<Self, SelectorError> {
        let obj = match value {
            Value::Null => return Ok(LabelSelector::everything()),
            Value::Object(o) => o,
            _ => return Err(SelectorError::InvalidObject("must be an object".into())),
        };
        let mut reqs = Vec::new();
        match obj.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (k, v) in labels {
                    let v = v.as_str().ok_or_else(|| {
                        SelectorError::InvalidObject(format!("matchLabels.{k} must be a string"))
                    })?;
                    reqs.push(Requirement::new(k, Operator::Equals, vec![v.to_string()])?);
                }
            }
            Some(_) => {
                return Err(SelectorError::InvalidObject(
                    "matchLabels must be an object".into(),
                ));
            }
        }
        match obj.get("matchExpressions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(exprs)) => {
                for (i, e) in exprs.iter().enumerate() {
                    reqs.push(expression(i, e)?);
                }
            }
            Some(_) => {
                return Err(SelectorError::InvalidObject(
                    "matchExpressions must be an array".into(),
                ));
            }
        }
        Ok(LabelSelector::from_requirements(reqs))
    }

    /// Whether there are no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Matches a `metadata.labels` object; non-string values count as absent.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.matches_with(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Matches a typed label map.
    pub fn matches_btree(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Matches an arbitrary label lookup.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches_with(&get))
    }
}

fn expression(i: usize, e: &Value) -> Result<Requirement, SelectorError> {
    let field = |name: &str| format!("matchExpressions[{i}].{name}");
    let key = e
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| SelectorError::InvalidObject(format!("{}: Required value", field("key"))))?;
    let op_str = e.get("operator").and_then(Value::as_str).unwrap_or("");
    let op = match op_str {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(SelectorError::InvalidObject(format!(
                "{}: Unsupported value: {other:?}: supported values: \"DoesNotExist\", \"Exists\", \"In\", \"NotIn\"",
                field("operator")
            )));
        }
    };
    let values = match e.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(vs)) => vs
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    SelectorError::InvalidObject(format!("{} must be strings", field("values")))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(SelectorError::InvalidObject(format!(
                "{} must be an array",
                field("values")
            )));
        }
    };
    Requirement::new(key, op, values)
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn parse_and_display_table() {
        let cases = [
            ("", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("  x = a , y != b ", "x=a,y!=b"),
            ("x in (b,a)", "x in (a,b)"),
            ("x in(a)", "x in (a)"),
            ("x notin ( a , b )", "x notin (a,b)"),
            ("x", "x"),
            ("!x", "!x"),
            ("! x", "!x"),
            ("x=", "x="),
            ("x>1", "x>1"),
            ("x<-1", "x<-1"),
            ("z=a,a=b", "a=b,z=a"),
            (
                "app.kubernetes.io/name=web,tier",
                "app.kubernetes.io/name=web,tier",
            ),
            ("x in (a,,b)", "x in (,a,b)"),
        ];
        for (input, want) in cases {
            let sel = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(sel.to_string(), want, "{input}");
            // Canonical output must parse back to the same selector.
            assert_eq!(LabelSelector::parse(want).unwrap(), sel);
        }
    }

    #[test]
    fn parse_errors_table() {
        let cases = [
            ("x in ()", "values set can't be empty"),
            ("x in a", "expected: '('"),
            ("x in (a", "expected: ',' or ')'"),
            ("x=a b", "expected: ',' or 'end of string'"),
            ("x=a,", "expected: identifier"),
            ("=a", "expected: identifier"),
            ("x foo", "expected: in, notin"),
            ("x>a", "integer"),
            ("Bad Key=a", "expected: in, notin"),
            ("-x=a", "invalid label key"),
            ("x=-a", "invalid label value"),
            ("a/b/c=x", "invalid label key"),
            ("x=(a)", "expected: identifier"),
        ];
        for (input, want) in cases {
            let err = LabelSelector::parse(input).expect_err(input).to_string();
            assert!(err.contains(want), "{input}: {err}");
        }
    }

    #[test]
    fn matching_table() {
        let l = labels(json!({"app": "web", "tier": "frontend", "gen": "3"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (db,web)", true),
            ("app notin (db,web)", false),
            ("missing notin (a)", true),
            ("missing in (a)", false),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("gen>2", true),
            ("gen<3", false),
            ("app>2", false),
            ("app=web,tier=frontend", true),
            ("app=web,tier=backend", false),
        ];
        for (input, want) in cases {
            let sel = LabelSelector::parse(input).unwrap();
            assert_eq!(sel.matches(&l), want, "{input}");
            let b: BTreeMap<String, String> = l
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            assert_eq!(sel.matches_btree(&b), want, "{input}");
        }
    }

    #[test]
    fn from_json_table() {
        let sel = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "env", "operator": "Exists", "values": []},
                {"key": "zone", "operator": "NotIn", "values": ["x"]}
            ]
        }))
        .unwrap();
        assert_eq!(
            sel.to_string(),
            "app=web,env,!legacy,tier in (a,b),zone notin (x)"
        );
        assert!(sel.matches(&labels(json!({"app": "web", "tier": "a", "env": "p"}))));
        assert!(!sel.matches(&labels(json!({"app": "web", "tier": "a"}))));

        assert!(LabelSelector::from_json(&json!({})).unwrap().is_empty());
        assert!(LabelSelector::from_json(&Value::Null).unwrap().is_empty());
        let bad = [
            json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
            json!({"matchExpressions": [{"operator": "Exists"}]}),
            json!({"matchLabels": {"a": 1}}),
            json!({"matchLabels": {"a": "-bad"}}),
            json!([]),
        ];
        for b in bad {
            assert!(LabelSelector::from_json(&b).is_err(), "{b}");
        }
    }

    proptest! {
        #[test]
        fn label_display_roundtrips(
            reqs in proptest::collection::vec(
                ("[a-z]{1,5}", 0usize..7, proptest::collection::vec("[a-z0-9]{1,4}", 1..3)),
                0..4,
            )
        ) {
            let reqs: Vec<Requirement> = reqs.into_iter().map(|(k, op, vals)| {
                let (op, vals) = match op {
                    0 => (Operator::Equals, vec![vals[0].clone()]),
                    1 => (Operator::DoubleEquals, vec![vals[0].clone()]),
                    2 => (Operator::NotEquals, vec![vals[0].clone()]),
                    3 => (Operator::In, vals),
                    4 => (Operator::NotIn, vals),
                    5 => (Operator::Exists, vec![]),
                    _ => (Operator::DoesNotExist, vec![]),
                };
                Requirement::new(&k, op, vals).unwrap()
            }).collect();
            let sel = LabelSelector::from_requirements(reqs);
            let parsed = LabelSelector::parse(&sel.to_string()).unwrap();
            prop_assert_eq!(parsed, sel);
        }

        #[test]
        fn negation_is_complement(key in "[a-z]{1,3}", val in "[a-z]{1,3}", have in proptest::option::of("[a-z]{1,3}")) {
            let mut l = BTreeMap::new();
            if let Some(h) = have { l.insert(key.clone(), h); }
            let eq = LabelSelector::parse(&format!("{key}={val}")).unwrap();
            let ne = LabelSelector::parse(&format!("{key}!={val}")).unwrap();
            prop_assert_ne!(eq.matches_btree(&l), ne.matches_btree(&l));
            let ex = LabelSelector::parse(&key).unwrap();
            let nex = LabelSelector::parse(&format!("!{key}")).unwrap();
            prop_assert_ne!(ex.matches_btree(&l), nex.matches_btree(&l));
        }
    }
}

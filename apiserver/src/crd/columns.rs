//! `additionalPrinterColumns`: the JSONPath subset kube-apiserver accepts for them
//! (`.a.b`, `[n]`, `[*]`, `[?(@.field=="value")]`) and the cells they compute.

use serde_json::Value;

/// One step of a column's path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// `.name` or `['name']`.
    Field(String),
    /// `[n]` (negative counts from the end).
    Index(i64),
    /// `[*]` or `.*`.
    All,
    /// `[?(@.a.b=="v")]`: the elements whose member at the path equals the value.
    Filter(Vec<String>, Value),
}

/// A compiled column path.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnPath(Vec<Step>);

/// A malformed column path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathError(String);

impl ColumnPath {
    /// Parses `.spec.replicas`, `{.spec.replicas}`, `.status.conditions[?(@.type=="Ready")].status`.
    pub fn parse(text: &str) -> Result<ColumnPath, PathError> {
        let t = text.trim();
        let t = t
            .strip_prefix('{')
            .and_then(|r| r.strip_suffix('}'))
            .unwrap_or(t);
        let t = t.strip_prefix('$').unwrap_or(t);
        if !t.starts_with('.') && !t.starts_with('[') {
            return Err(PathError(format!(
                "must be a simple json path starting with .: {text}"
            )));
        }
        let mut steps = Vec::new();
        let b = t.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'.' => {
                    let start = i + 1;
                    let mut j = start;
                    while j < b.len() && b[j] != b'.' && b[j] != b'[' {
                        j += 1;
                    }
                    let name = &t[start..j];
                    if name.is_empty() {
                        return Err(PathError(format!("empty field name in {text}")));
                    }
                    steps.push(if name == "*" {
                        Step::All
                    } else {
                        Step::Field(name.to_string())
                    });
                    i = j;
                }
                b'[' => {
                    let close = find_close(t, i)
                        .ok_or_else(|| PathError(format!("unterminated [ in {text}")))?;
                    steps.push(bracket(&t[i + 1..close], text)?);
                    i = close + 1;
                }
                _ => return Err(PathError(format!("unexpected character in {text}"))),
            }
        }
        Ok(ColumnPath(steps))
    }

    /// The values the path selects in `obj`.
    pub fn find<'a>(&self, obj: &'a Value) -> Vec<&'a Value> {
        let mut cur = vec![obj];
        for step in &self.0 {
            let mut next = Vec::new();
            for v in cur {
                match step {
                    Step::Field(name) => next.extend(v.get(name.as_str())),
                    Step::Index(n) => {
                        if let Some(items) = v.as_array() {
                            let idx = if *n < 0 { items.len() as i64 + n } else { *n };
                            next.extend(usize::try_from(idx).ok().and_then(|i| items.get(i)));
                        }
                    }
                    Step::All => match v {
                        Value::Array(items) => next.extend(items.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    },
                    Step::Filter(path, want) => {
                        if let Some(items) = v.as_array() {
                            next.extend(items.iter().filter(|item| {
                                path.iter()
                                    .try_fold(*item, |acc, seg| acc.get(seg.as_str()))
                                    .is_some_and(|got| got == want)
                            }));
                        }
                    }
                }
            }
            cur = next;
        }
        cur
    }

    /// The cell of a column of `type_`: the first value found, printed as kube-apiserver
    /// prints it (strings as text, a `date` as its age the way kubectl prints AGE, other
    /// types as their JSON value); null when absent.
    pub fn cell(&self, obj: &Value, type_: &str) -> Value {
        let Some(v) = self.find(obj).into_iter().next() else {
            return Value::Null;
        };
        match (type_, v) {
            ("string", Value::String(s)) => Value::from(s.as_str()),
            ("string", other) => Value::from(other.to_string()),
            ("date", Value::String(s)) => Value::from(match s.parse::<jiff::Timestamp>() {
                Ok(_) => crate::object::age(s),
                Err(_) => "<invalid>".to_string(),
            }),
            ("date", _) => Value::Null,
            _ => v.clone(),
        }
    }
}

fn find_close(t: &str, open: usize) -> Option<usize> {
    let mut quote = None;
    for (i, c) in t[open..].char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, ']') => return Some(open + i),
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
}

fn bracket(inner: &str, text: &str) -> Result<Step, PathError> {
    let inner = inner.trim();
    if inner == "*" {
        return Ok(Step::All);
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Ok(Step::Index(n));
    }
    if let Some(name) = unquote(inner) {
        return Ok(Step::Field(name.to_string()));
    }
    if let Some(expr) = inner.strip_prefix("?(").and_then(|r| r.strip_suffix(')')) {
        let (lhs, rhs) = expr
            .split_once("==")
            .ok_or_else(|| PathError(format!("only == filters are supported: {text}")))?;
        let path = lhs
            .trim()
            .strip_prefix("@.")
            .ok_or_else(|| PathError(format!("a filter must start with @.: {text}")))?;
        let rhs = rhs.trim();
        let want = match unquote(rhs) {
            Some(s) => Value::from(s),
            None => serde_json::from_str(rhs)
                .map_err(|_| PathError(format!("bad filter value in {text}")))?,
        };
        return Ok(Step::Filter(
            path.split('.').map(str::to_string).collect(),
            want,
        ));
    }
    Err(PathError(format!(
        "unsupported bracket expression in {text}"
    )))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::ColumnPath;

    #[test]
    fn paths_select_as_kubectl_columns_do() {
        let obj = json!({
            "spec": {"replicas": 3, "image": "nginx", "ports": [{"name": "http"}, {"name": "grpc"}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Synced", "status": "False"}
            ]}
        });
        let cases = [
            (".spec.replicas", "integer", json!(3)),
            ("{.spec.image}", "string", json!("nginx")),
            (".spec.replicas", "string", json!("3")),
            (".spec.ports[1].name", "string", json!("grpc")),
            (".spec.ports[-1].name", "string", json!("grpc")),
            (".spec.ports[*].name", "string", json!("http")),
            (
                ".status.conditions[?(@.type==\"Synced\")].status",
                "string",
                json!("False"),
            ),
            (".spec['image']", "string", json!("nginx")),
            (".spec.missing", "string", json!(null)),
        ];
        for (path, ty, want) in cases {
            let p = ColumnPath::parse(path).unwrap();
            assert_eq!(p.cell(&obj, ty), want, "{path}");
        }
        let dated = json!({"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}, "spec": {"at": "soon"}});
        let age = ColumnPath::parse(".metadata.creationTimestamp")
            .unwrap()
            .cell(&dated, "date");
        assert!(
            age.as_str().is_some_and(|a| a.ends_with('y')),
            "a date prints as its age: {age}"
        );
        let bad = ColumnPath::parse(".spec.at").unwrap().cell(&dated, "date");
        assert_eq!(bad, json!("<invalid>"));
        assert!(ColumnPath::parse("spec.replicas").is_err());
        assert!(ColumnPath::parse(".spec[?(@.a>1)]").is_err());
        assert!(ColumnPath::parse(".spec[0").is_err());
    }
}

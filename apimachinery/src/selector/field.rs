//! Field selectors: `metadata.name=foo,status.phase!=Running` with backslash escaping.

use std::fmt;

use super::SelectorError;

/// One `field=value` / `field!=value` term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    /// Field path such as `metadata.name`.
    pub field: String,
    /// `false` for `=`/`==`, `true` for `!=`.
    pub negated: bool,
    /// Unescaped value.
    pub value: String,
}

/// A conjunction of field terms. An empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    terms: Vec<FieldRequirement>,
}

/// Splits on commas that are not escaped with a backslash.
fn split_unescaped_commas(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
}

fn unescape_field_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                _ => return Err(SelectorError::InvalidEscape(s.to_string())),
            },
            // Unescaped separators would make the term ambiguous, as upstream rejects.
            ',' | '=' => return Err(SelectorError::InvalidEscape(s.to_string())),
            c => out.push(c),
        }
    }
    Ok(out)
}

fn escape_field_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl FieldSelector {
    /// Parses `metadata.name=foo,status.phase!=Running`.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        for term in split_unescaped_commas(input) {
            // The first operator occurrence wins, checking `!=` and `==` before `=`.
            let found = term.char_indices().find_map(|(i, _)| {
                let rest = &term[i..];
                if rest.starts_with("!=") {
                    Some((i, 2, true))
                } else if rest.starts_with("==") {
                    Some((i, 2, false))
                } else if rest.starts_with('=') {
                    Some((i, 1, false))
                } else {
                    None
                }
            });
            let Some((at, len, negated)) = found else {
                return Err(SelectorError::InvalidFieldTerm {
                    selector: input.to_string(),
                    term,
                });
            };
            let field = term[..at].trim().to_string();
            if field.is_empty() {
                return Err(SelectorError::InvalidFieldTerm {
                    selector: input.to_string(),
                    term,
                });
            }
            let value = unescape_field_value(&term[at + len..])?;
            terms.push(FieldRequirement {
                field,
                negated,
                value,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// Whether there are no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms in input order.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.terms
    }

    /// The distinct field names referenced, so callers can reject unsupported ones.
    pub fn fields(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for t in &self.terms {
            if !out.contains(&t.field.as_str()) {
                out.push(&t.field);
            }
        }
        out
    }

    /// Matches using caller-supplied field values. A missing field compares as
    /// the empty string, as upstream does (so `spec.nodeName=` selects unscheduled pods).
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.terms.iter().all(|t| {
            let actual = get(&t.field).unwrap_or_default();
            (actual == t.value) != t.negated
        })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.negated { "!=" } else { "=" };
            write!(f, "{}{op}{}", t.field, escape_field_value(&t.value))?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn field_selector_table() {
        let get = |f: &str| match f {
            "metadata.name" => Some("foo"),
            "status.phase" => Some("Running"),
            "metadata.namespace" => Some("a,b"),
            _ => None,
        };
        let cases = [
            ("", true, ""),
            ("metadata.name=foo", true, "metadata.name=foo"),
            ("metadata.name==foo", true, "metadata.name=foo"),
            ("metadata.name!=foo", false, "metadata.name!=foo"),
            (
                "metadata.name=foo,status.phase!=Pending",
                true,
                "metadata.name=foo,status.phase!=Pending",
            ),
            ("spec.nodeName=", true, "spec.nodeName="),
            ("spec.nodeName!=", false, "spec.nodeName!="),
            ("metadata.namespace=a\\,b", true, "metadata.namespace=a\\,b"),
        ];
        for (input, want, display) in cases {
            let sel = FieldSelector::parse(input).unwrap();
            assert_eq!(sel.matches(get), want, "{input}");
            assert_eq!(sel.to_string(), display);
        }
        let sel =
            FieldSelector::parse("metadata.name=a,spec.nodeName!=b,metadata.name!=c").unwrap();
        assert_eq!(sel.fields(), vec!["metadata.name", "spec.nodeName"]);
        for bad in ["foo", "=x", "a=b,c", "a=b=c", "a=b\\x"] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn field_value_escaping_roundtrips(v in "[a-z,=\\\\]{0,8}") {
            let sel = FieldSelector { terms: vec![FieldRequirement { field: "metadata.name".into(), negated: false, value: v.clone() }] };
            let parsed = FieldSelector::parse(&sel.to_string()).unwrap();
            prop_assert_eq!(parsed, sel);
        }
    }
}

//! Kubernetes name, label and field validation with upstream error wording.

use std::fmt;

use serde_json::Value;

/// Maximum length of a DNS-1123 label (and of a qualified name's name part).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Maximum length of a DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Maximum length of a label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const C_IDENTIFIER_FMT: &str = "[A-Za-z_][A-Za-z0-9_]*";
const C_IDENTIFIER_ERR: &str = "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'";
const ENV_VAR_NAME_FMT: &str = "[-._a-zA-Z][-._a-zA-Z0-9]*";
const ENV_VAR_NAME_ERR: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit";

/// Renders upstream's `RegexError`, including its double space between examples,
/// so messages are byte-identical to what kubectl users already know.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = String::from(msg);
    out.push_str(" (e.g. ");
    for (i, ex) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(ex);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

fn matches_dns_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns_label)
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn into_result(errs: Vec<String>) -> Result<(), Vec<String>> {
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// Validates a DNS-1123 label (e.g. namespace names, container names).
pub fn dns1123_label(value: &str) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns_label(value) {
        // Upstream gives a more helpful message when the only problem is dots.
        if matches_dns_subdomain(value) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    into_result(errs)
}

/// Validates a DNS-1123 subdomain (most object names).
pub fn dns1123_subdomain(value: &str) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    into_result(errs)
}

/// Validates a qualified name: an optional DNS subdomain prefix and `/`, then a name.
/// This is the rule for label and annotation keys.
pub fn qualified_name(value: &str) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if let Err(msgs) = dns1123_subdomain(prefix) {
                errs.extend(msgs.into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            return Err(vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )]);
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(DNS1123_LABEL_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    into_result(errs)
}

/// Validates a label key; label keys are qualified names.
pub fn label_key(value: &str) -> Result<(), Vec<String>> {
    qualified_name(value)
}

/// Validates a label value (may be empty).
pub fn label_value(value: &str) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    into_result(errs)
}

/// Validates a C identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn c_identifier(value: &str) -> Result<(), Vec<String>> {
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_');
    if ok {
        Ok(())
    } else {
        Err(vec![regex_error(
            C_IDENTIFIER_ERR,
            C_IDENTIFIER_FMT,
            &["my_name", "MY_NAME", "MyName"],
        )])
    }
}

/// Validates an environment variable name as Kubernetes does for `env[].name`,
/// which is looser than a C identifier (dots and dashes are allowed).
pub fn env_var_name(value: &str) -> Result<(), Vec<String>> {
    let b = value.as_bytes();
    let allowed = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_');
    let ok = !b.is_empty() && !b[0].is_ascii_digit() && b.iter().all(|&c| allowed(c));
    let mut errs = Vec::new();
    if !ok {
        errs.push(regex_error(
            ENV_VAR_NAME_ERR,
            ENV_VAR_NAME_FMT,
            &["my.env-name", "MY_ENV.NAME", "MyEnvName1"],
        ));
    }
    if value == "." || value == ".." || value.starts_with("..") {
        // Upstream forbids these because they would be path traversal in env files.
        errs.push("must not be '.' or '..' and must not start with '..'".to_string());
    }
    into_result(errs)
}

/// The category of a [`FieldError`], mirroring upstream `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// A required field was not set.
    Required,
    /// The value is malformed or out of range.
    Invalid,
    /// The value is not one of the supported values.
    NotSupported,
    /// The value is longer than allowed.
    TooLong,
    /// The value duplicates another one that must be unique.
    Duplicate,
    /// The field may not be set or changed.
    Forbidden,
}

impl FieldErrorKind {
    /// The upstream wording of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::Forbidden => "Forbidden",
        }
    }

    /// Whether upstream prints the offending value for this kind.
    fn shows_value(self) -> bool {
        matches!(
            self,
            FieldErrorKind::Invalid | FieldErrorKind::NotSupported | FieldErrorKind::Duplicate
        )
    }
}

/// A validation error on one field, displayed like Kubernetes
/// (`spec.replicas: Invalid value: -1: must be greater than or equal to 0`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct FieldError {
    /// Field path such as `spec.template.spec.containers[0].name`.
    pub path: String,
    /// Error category.
    pub kind: FieldErrorKind,
    /// The offending value, shown for Invalid, NotSupported and Duplicate.
    pub value: Option<Value>,
    /// Human-readable detail.
    pub message: String,
}

impl FieldError {
    fn new(path: &str, kind: FieldErrorKind, value: Option<Value>, message: &str) -> Self {
        FieldError {
            path: path.to_string(),
            kind,
            value,
            message: message.to_string(),
        }
    }

    /// A `Required value` error.
    pub fn required(path: &str, message: &str) -> Self {
        Self::new(path, FieldErrorKind::Required, None, message)
    }

    /// An `Invalid value` error.
    pub fn invalid(path: &str, value: impl Into<Value>, message: &str) -> Self {
        Self::new(path, FieldErrorKind::Invalid, Some(value.into()), message)
    }

    /// An `Unsupported value` error listing the supported values.
    pub fn not_supported(path: &str, value: impl Into<Value>, supported: &[&str]) -> Self {
        let message = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(
            path,
            FieldErrorKind::NotSupported,
            Some(value.into()),
            &message,
        )
    }

    /// A `Too long` error for a value longer than `max` bytes.
    pub fn too_long(path: &str, max: usize) -> Self {
        Self::new(
            path,
            FieldErrorKind::TooLong,
            None,
            &format!("may not be more than {max} bytes"),
        )
    }

    /// A `Duplicate value` error.
    pub fn duplicate(path: &str, value: impl Into<Value>) -> Self {
        Self::new(path, FieldErrorKind::Duplicate, Some(value.into()), "")
    }

    /// A `Forbidden` error.
    pub fn forbidden(path: &str, message: &str) -> Self {
        Self::new(path, FieldErrorKind::Forbidden, None, message)
    }

    /// Converts the messages of a name/label validator into `Invalid` errors.
    pub fn from_messages(path: &str, value: &str, messages: Vec<String>) -> Vec<FieldError> {
        messages
            .into_iter()
            .map(|m| FieldError::invalid(path, value, &m))
            .collect()
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.kind.as_str())?;
        if self.kind.shows_value() {
            // Strings are quoted as Go's %q does; everything else prints as JSON.
            match &self.value {
                Some(Value::String(s)) => write!(f, ": {s:?}")?,
                Some(v) => write!(f, ": {v}")?,
                None => write!(f, ": null")?,
            }
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dns1123_label_table() {
        let long = "a".repeat(64);
        let max = "a".repeat(63);
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("my-name", true),
            ("123-abc", true),
            (max.as_str(), true),
            ("", false),
            ("-a", false),
            ("a-", false),
            ("A", false),
            ("a_b", false),
            ("a.b", false),
            (long.as_str(), false),
        ];
        for (input, ok) in cases {
            assert_eq!(dns1123_label(input).is_ok(), *ok, "{input:?}");
        }
        assert_eq!(
            dns1123_label("a.b").unwrap_err(),
            vec!["must not contain dots"]
        );
        assert_eq!(
            dns1123_label("Ab").unwrap_err(),
            vec![
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
    }

    #[test]
    fn dns1123_subdomain_table() {
        let cases: &[(&str, bool)] = &[
            ("example.com", true),
            ("a", true),
            ("a-b.c-d", true),
            ("a..b", false),
            (".a", false),
            ("a.", false),
            ("Example.com", false),
            ("", false),
        ];
        for (input, ok) in cases {
            assert_eq!(dns1123_subdomain(input).is_ok(), *ok, "{input:?}");
        }
        assert_eq!(
            dns1123_subdomain(&"a".repeat(254)).unwrap_err()[0],
            "must be no more than 253 characters"
        );
    }

    #[test]
    fn label_key_table() {
        let cases: &[(&str, bool)] = &[
            ("app", true),
            ("app.kubernetes.io/name", true),
            ("example.com/My_Name.x", true),
            ("a/b/c", false),
            ("/name", false),
            ("Example.com/name", false),
            ("name-", false),
            ("", false),
            ("prefix/", false),
        ];
        for (input, ok) in cases {
            assert_eq!(label_key(input).is_ok(), *ok, "{input:?}");
        }
        assert_eq!(
            label_key("/a").unwrap_err(),
            vec!["prefix part must be non-empty"]
        );
        let errs = label_key("").unwrap_err();
        assert_eq!(errs[0], "name part must be non-empty");
        assert!(errs[1].starts_with("name part must consist of alphanumeric characters"));
    }

    #[test]
    fn label_value_table() {
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("v1", true),
            ("my_value", true),
            ("a.b-c_d", true),
            ("-a", false),
            ("a b", false),
            ("a/b", false),
        ];
        for (input, ok) in cases {
            assert_eq!(label_value(input).is_ok(), *ok, "{input:?}");
        }
        assert_eq!(
            label_value(&"a".repeat(64)).unwrap_err(),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn identifiers() {
        assert!(c_identifier("MY_VAR").is_ok());
        assert!(c_identifier("_x1").is_ok());
        assert!(c_identifier("1x").is_err());
        assert!(c_identifier("a.b").is_err());
        assert!(env_var_name("my.env-name").is_ok());
        assert!(env_var_name("1abc").is_err());
        assert!(env_var_name("..").is_err());
    }

    #[test]
    fn field_error_display() {
        let cases = [
            (
                FieldError::invalid("spec.replicas", -1, "must be greater than or equal to 0"),
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            ),
            (
                FieldError::invalid("metadata.name", "Foo", "bad"),
                "metadata.name: Invalid value: \"Foo\": bad",
            ),
            (
                FieldError::required("spec.selector", ""),
                "spec.selector: Required value",
            ),
            (
                FieldError::not_supported(
                    "spec.strategy.type",
                    "Foo",
                    &["Recreate", "RollingUpdate"],
                ),
                "spec.strategy.type: Unsupported value: \"Foo\": supported values: \"Recreate\", \"RollingUpdate\"",
            ),
            (
                FieldError::too_long("metadata.annotations", 262144),
                "metadata.annotations: Too long: may not be more than 262144 bytes",
            ),
            (
                FieldError::duplicate("spec.containers[1].name", "app"),
                "spec.containers[1].name: Duplicate value: \"app\"",
            ),
            (
                FieldError::forbidden("spec.selector", "field is immutable"),
                "spec.selector: Forbidden: field is immutable",
            ),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }

    proptest! {
        #[test]
        fn valid_labels_are_valid_subdomains(s in "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?") {
            prop_assert!(dns1123_label(&s).is_ok());
            prop_assert!(dns1123_subdomain(&s).is_ok());
            prop_assert!(label_value(&s).is_ok());
            prop_assert!(label_key(&s).is_ok());
        }

        #[test]
        fn uppercase_never_valid_label(s in "[a-z]{0,5}[A-Z][a-z]{0,5}") {
            prop_assert!(dns1123_label(&s).is_err());
        }
    }
}

//! The `fieldManager` and `force` options of a write: the default manager name, and the
//! checks kube-apiserver makes before a write is attempted.

use crate::validation::FieldError;

/// The longest field manager name accepted.
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// The manager recorded for a write that names none: the User-Agent up to its first `/`
/// (`kubectl/v1.34.0 (linux/amd64)` → `kubectl`), unprintable characters dropped, cut to
/// [`FIELD_MANAGER_MAX_LENGTH`] bytes.
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or("");
    let mut out = String::new();
    for c in prefix.chars().filter(|&c| is_print(c)) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// The manager for a write: the `fieldManager` option, else from the User-Agent.
pub fn manager_or_user_agent(field_manager: Option<&str>, user_agent: &str) -> String {
    match field_manager {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => manager_from_user_agent(user_agent),
    }
}

/// Checks a `fieldManager` value (upstream's `ValidateFieldManager`).
pub fn validate_field_manager(field_manager: &str, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if field_manager.len() > FIELD_MANAGER_MAX_LENGTH {
        errs.push(FieldError::too_long(path, FIELD_MANAGER_MAX_LENGTH));
    }
    for (i, c) in field_manager.char_indices() {
        if !is_print(c) {
            errs.push(FieldError::invalid(
                path,
                field_manager,
                &format!("invalid character U+{:04X} (at position {i})", c as u32),
            ));
        }
    }
    errs
}

/// Checks the options of a patch (upstream's `ValidatePatchOptions`): an apply needs a
/// field manager; `force` is for applies only. The errors belong in a 422 for kind
/// `PatchOptions` of group `meta.k8s.io`.
pub fn validate_patch_options(
    is_apply: bool,
    field_manager: Option<&str>,
    force: Option<bool>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let manager = field_manager.unwrap_or("");
    if is_apply {
        if manager.is_empty() {
            errs.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
    } else if force.is_some() {
        errs.push(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        ));
    }
    errs.extend(validate_field_manager(manager, "fieldManager"));
    errs
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the ASCII
/// space; not controls, other spaces, format characters or private use.
fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    let format = matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F);
    let private = matches!(u, 0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD);
    !format && !private
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_manager_from_user_agent() {
        let cases = [
            ("kubectl/v1.34.0 (linux/amd64) kubernetes/abc", "kubectl"),
            ("helm/v4.3.1", "helm"),
            ("Go-http-client/1.1", "Go-http-client"),
            ("my\u{7}tool/1", "mytool"),
            ("", ""),
            ("no-slash at all", "no-slash at all"),
        ];
        for (ua, want) in cases {
            assert_eq!(manager_from_user_agent(ua), want, "{ua:?}");
        }
        let long = "é".repeat(100);
        let cut = manager_from_user_agent(&long);
        assert_eq!(cut.len(), 128);
        assert_eq!(manager_or_user_agent(Some("flux"), "kubectl/1"), "flux");
        assert_eq!(manager_or_user_agent(Some(""), "kubectl/1"), "kubectl");
    }

    #[test]
    fn patch_options_table() {
        let render =
            |errs: Vec<FieldError>| errs.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            render(validate_patch_options(true, None, None)),
            ["fieldManager: Required value: is required for apply patch"]
        );
        assert!(validate_patch_options(true, Some("kubectl"), Some(true)).is_empty());
        assert_eq!(
            render(validate_patch_options(false, None, Some(false))),
            ["force: Forbidden: may not be specified for non-apply patch"]
        );
        assert!(validate_patch_options(false, None, None).is_empty());
        assert_eq!(
            render(validate_patch_options(true, Some(&"x".repeat(129)), None)),
            ["fieldManager: Too long: may not be more than 128 bytes"]
        );
        assert_eq!(
            render(validate_field_manager("a\tb", "fieldManager")),
            ["fieldManager: Invalid value: \"a\\tb\": invalid character U+0009 (at position 1)"]
        );
    }
}

//! Interned names for the kinds custom resource definitions bring at run time.
//!
//! [`ResourceDef`](crate::registry::ResourceDef) names its group, kind, plural and so on
//! as `&'static str`, which every compiled-in kind table relies on. A definition created
//! while the server runs gets its names from here instead of reshaping every table: each
//! distinct string is leaked once and reused by every later definition naming it, so
//! memory grows with the number of distinct names ever served, not with the number of
//! times definitions are created, updated or deleted.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

fn strings() -> &'static Mutex<HashSet<&'static str>> {
    static STRINGS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    STRINGS.get_or_init(Default::default)
}

fn lists() -> &'static Mutex<HashSet<&'static [&'static str]>> {
    static LISTS: OnceLock<Mutex<HashSet<&'static [&'static str]>>> = OnceLock::new();
    LISTS.get_or_init(Default::default)
}

/// The one `'static` copy of `s`.
pub fn intern(s: &str) -> &'static str {
    let mut set = strings().lock().expect("interned names");
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    set.insert(leaked);
    leaked
}

/// The one `'static` copy of a list of names (short names, categories).
pub fn intern_list(items: &[String]) -> &'static [&'static str] {
    if items.is_empty() {
        return &[];
    }
    let interned: Vec<&'static str> = items.iter().map(|s| intern(s)).collect();
    let mut set = lists().lock().expect("interned name lists");
    if let Some(found) = set.get(interned.as_slice()) {
        return found;
    }
    let leaked: &'static [&'static str] = Box::leak(interned.into_boxed_slice());
    set.insert(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::{intern, intern_list};

    #[test]
    fn a_name_is_leaked_once() {
        let a = intern(&format!("widgets{}", 1));
        let b = intern("widgets1");
        assert!(std::ptr::eq(a, b));
        let l1 = intern_list(&["wd".into(), "w".into()]);
        let l2 = intern_list(&["wd".into(), "w".into()]);
        assert!(std::ptr::eq(l1, l2));
        assert_eq!(l1, &["wd", "w"]);
        assert!(intern_list(&[]).is_empty());
    }
}

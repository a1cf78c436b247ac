//! JSON pointer lookups (RFC 6901) that borrow plain tokens: serde_json's own `pointer`
//! copies every token twice, and the API server's defaulting and validation look up dozens
//! of paths per write.

use std::borrow::Cow;

use serde_json::Value;

/// `at`/`at_mut`: the same answers as `Value::pointer`/`pointer_mut`, allocating only for
/// tokens with `~` escapes.
pub trait JsonPointer {
    /// The value at `pointer` (`""` is the whole value; otherwise it starts with `/`).
    fn at(&self, pointer: &str) -> Option<&Value>;
    /// The value at `pointer`, mutably.
    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value>;
}

fn tokens(pointer: &str) -> Option<impl Iterator<Item = Cow<'_, str>>> {
    let rest = if pointer.is_empty() {
        None
    } else {
        Some(pointer.strip_prefix('/')?)
    };
    Some(rest.into_iter().flat_map(|r| r.split('/')).map(|t| {
        if t.contains('~') {
            Cow::Owned(t.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(t)
        }
    }))
}

/// An array index as RFC 6901 writes it: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

impl JsonPointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        tokens(pointer)?.try_fold(self, |target, token| match target {
            Value::Object(map) => map.get(token.as_ref()),
            Value::Array(list) => index(&token).and_then(|i| list.get(i)),
            _ => None,
        })
    }

    fn at_mut(&mut self, pointer: &str) -> Option<&mut Value> {
        tokens(pointer)?.try_fold(self, |target, token| match target {
            Value::Object(map) => map.get_mut(token.as_ref()),
            Value::Array(list) => index(&token).and_then(move |i| list.get_mut(i)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_as_serde_json_does() {
        let mut v = json!({
            "spec": {"template": {"spec": {"containers": [{"name": "web"}, {"name": "side"}]}}},
            "a/b": {"m~n": 1},
            "": {"": 2},
            "list": [[0, 1]],
        });
        let pointers = [
            "",
            "/",
            "//",
            "/spec",
            "/spec/template/spec/containers/1/name",
            "/spec/template/spec/containers/01/name",
            "/spec/template/spec/containers/+1/name",
            "/spec/template/spec/containers/-",
            "/spec/template/spec/containers/2",
            "/a~1b/m~0n",
            "/a/b",
            "/list/0/1",
            "/list/0/1/x",
            "spec",
            "/missing/deeper",
        ];
        for p in pointers {
            assert_eq!(v.at(p), v.pointer(p), "{p}");
            let expected = v.clone().pointer_mut(p).cloned();
            assert_eq!(v.at_mut(p).cloned(), expected, "{p}");
        }
        *v.at_mut("/spec/template/spec/containers/0/name").unwrap() = json!("api");
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][0]["name"],
            "api"
        );
    }
}

//! `GET /api/v1/namespaces/{ns}/pods/{name}/log` for pods the runc runtime runs, so
//! `kubectl logs` works: `container` (required when the pod has several), `tailLines`,
//! `previous`. No `follow`, `sinceSeconds`, `timestamps` or `limitBytes`.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use meridian_apiserver::api::{ApiServer, Body, error_response};
use meridian_apiserver::auth::{Attributes, UserInfo};
use meridian_apiserver::status::ApiError;

use super::Runc;
use crate::controllers::util::lock;

/// The namespace and pod name of a `pods/{name}/log` path.
pub fn log_target(path: &str) -> Option<(&str, &str)> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name, "log"] => Some((ns, name)),
        _ => None,
    }
}

/// One query parameter's (undecoded) value.
fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The last `n` lines of `text`.
fn tail(text: &[u8], n: usize) -> &[u8] {
    let mut seen = 0;
    let end = if text.ends_with(b"\n") {
        text.len() - 1
    } else {
        text.len()
    };
    for i in (0..end).rev() {
        if text[i] == b'\n' {
            seen += 1;
            if seen == n {
                return &text[i + 1..];
            }
        }
    }
    if n == 0 { &[] } else { text }
}

/// The attempt numbers of a container's log files, highest last.
fn attempts(dir: &Path) -> Vec<u32> {
    let mut n: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    n.sort_unstable();
    n
}

fn text(code: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(
        http_body_util::Full::new(Bytes::from(body))
            .map_err(|e| match e {})
            .boxed(),
    );
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

/// Serves one log request, after authenticating and authorizing it as the API would
/// (`get` on `pods/log`).
pub fn serve(
    rt: &Runc,
    api: &ApiServer,
    headers: &http::HeaderMap,
    cert_user: Option<UserInfo>,
    ns: &str,
    name: &str,
    query: &str,
) -> Response<Body> {
    let user = cert_user.or_else(|| {
        let token = meridian_apiserver::auth::bearer(headers)?;
        api.tokens
            .authenticate(token)
            .or_else(|| api.token_sources.iter().find_map(|s| s.authenticate(token)))
    });
    let Some(user) = user else {
        return error_response(&ApiError::unauthorized());
    };
    let attrs = Attributes {
        verb: "get".into(),
        resource: "pods".into(),
        subresource: "log".into(),
        namespace: ns.into(),
        name: name.into(),
        ..Default::default()
    };
    if api.authorizer.authorize(&user, &attrs).is_err() {
        return error_response(&ApiError::forbidden(
            meridian_apiserver::auth::forbidden_message(&user, &attrs),
        ));
    }
    let Some(dir) = lock(&rt.log_dirs).get(&format!("{ns}/{name}")).cloned() else {
        return error_response(&ApiError::not_found("pods", "", name));
    };
    let container = match param(query, "container") {
        Some(c) => c.to_string(),
        None => {
            let names: Vec<PathBuf> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            match names.as_slice() {
                [one] => one
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("")
                    .to_string(),
                _ => {
                    return error_response(&ApiError::bad_request(format!(
                        "a container name must be specified for pod {name}"
                    )));
                }
            }
        }
    };
    let cdir = dir.join(&container);
    let runs = attempts(&cdir);
    let previous = param(query, "previous") == Some("true");
    let attempt = if previous {
        runs.len().checked_sub(2).map(|i| runs[i])
    } else {
        runs.last().copied()
    };
    let Some(attempt) = attempt else {
        return error_response(&ApiError::bad_request(format!(
            "{}container {container:?} in pod {name:?} is not available",
            if previous { "previous terminated " } else { "" }
        )));
    };
    let body = std::fs::read(cdir.join(format!("{attempt}.log"))).unwrap_or_default();
    let body = match param(query, "tailLines").and_then(|n| n.parse::<usize>().ok()) {
        Some(n) => tail(&body, n).to_vec(),
        None => body,
    };
    text(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_tails() {
        assert_eq!(
            log_target("/api/v1/namespaces/ns/pods/p/log"),
            Some(("ns", "p"))
        );
        assert_eq!(log_target("/api/v1/namespaces/ns/pods/p"), None);
        assert_eq!(param("container=a&tailLines=2", "tailLines"), Some("2"));
        assert_eq!(param("previous=true", "container"), None);
        for (input, n, want) in [
            (&b"a\nb\nc\n"[..], 2, &b"b\nc\n"[..]),
            (b"a\nb\nc", 1, b"c"),
            (b"a\nb\n", 5, b"a\nb\n"),
            (b"a\n", 0, b""),
        ] {
            assert_eq!(tail(input, n), want, "{n}");
        }
    }
}

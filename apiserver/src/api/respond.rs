//! Responses: JSON and text bodies, `Status` errors and `Warning` headers.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use serde_json::Value;

use crate::status::ApiError;

/// Response body type of every handler.
pub type Body = BoxBody<Bytes, Infallible>;

/// A response with a JSON body.
pub fn json_response(code: StatusCode, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A response with `v` as its JSON body.
pub fn value_response(code: StatusCode, v: &Value) -> Response<Body> {
    json_response(
        code,
        Bytes::from(serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec())),
    )
}

/// The `Status` response of an error.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = value_response(
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &e.to_status(),
    );
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// A plain-text response.
pub fn text_response(code: StatusCode, text: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(text.into()).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Adds `Warning: 299 - "..."` headers.
pub fn add_warnings(r: &mut Response<Body>, warnings: &[String]) {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
}

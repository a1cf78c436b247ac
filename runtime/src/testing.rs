//! An API server stand-in for unit tests: a kube client whose every request a script
//! answers, and which keeps what it was asked. Compiled for this crate's tests and, with
//! the `testing` feature, for other crates' tests.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

/// One request the API received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method.
    pub method: http::Method,
    /// The path, without the query.
    pub path: String,
    /// The query string, empty when there is none.
    pub query: String,
    /// The body as JSON (`null` when empty or not JSON).
    pub body: serde_json::Value,
}

/// The script's answer to one request.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status code.
    pub code: u16,
    /// The JSON body.
    pub body: serde_json::Value,
}

impl Answer {
    /// `code` with `body`.
    pub fn json(code: u16, body: serde_json::Value) -> Self {
        Self { code, body }
    }

    /// A failure `Status` with `code` and the reason Kubernetes gives it (clients decide on
    /// the reason: kube's `get_opt` reads `NotFound`).
    pub fn failure(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "AlreadyExists",
            422 => "Invalid",
            _ => "InternalError",
        };
        let body = serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                      "code": code, "reason": reason,
                                      "message": format!("answered {code}")});
        Self { code, body }
    }
}

type Script = dyn Fn(&Request) -> Answer + Send + Sync;

/// The stand-in: clone it into a client with [`ScriptedApi::client`], read what it was
/// asked with [`ScriptedApi::requests`].
#[derive(Clone)]
pub struct ScriptedApi {
    script: Arc<Script>,
    seen: Arc<Mutex<Vec<Request>>>,
}

impl ScriptedApi {
    /// An API answering each request with `script`'s answer.
    pub fn new(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> Self {
        Self {
            script: Arc::new(script),
            seen: Arc::default(),
        }
    }

    /// A client sending its requests here.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.clone(), "default")
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        crate::sync::lock(&self.seen).clone()
    }
}

impl tower_service::Service<http::Request<kube::client::Body>> for ScriptedApi {
    type Response = http::Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let api = self.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let request = Request {
                method: parts.method,
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or_default(),
            };
            let answer = (api.script)(&request);
            crate::sync::lock(&api.seen).push(request);
            let mut r = http::Response::new(Full::new(Bytes::from(answer.body.to_string())));
            *r.status_mut() =
                http::StatusCode::from_u16(answer.code).unwrap_or(http::StatusCode::OK);
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Ok(r)
        })
    }
}

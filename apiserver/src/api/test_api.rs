//! The in-process API server the HTTP-level tests drive: built-in kinds over a given store,
//! requests sent as a `system:masters` kubectl user, answers with status and body.

use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use meridian_store::Storage;
use serde_json::Value;

use super::ApiServer;
use crate::auth::{TokenAuthenticator, UserInfo};
use crate::metrics::Metrics;
use crate::registry::Registry;

/// One answer.
pub(super) struct Answer {
    pub code: u16,
    pub body: Value,
    pub raw: Bytes,
}

/// A server with the built-in kinds over `store`.
pub(super) async fn server(store: Arc<dyn Storage>) -> Arc<ApiServer> {
    let registry = Registry::new(crate::kinds::builtin());
    let engine = crate::server::build_engine(registry, store, 100)
        .await
        .expect("engine");
    crate::server::api_server(
        engine,
        TokenAuthenticator::default(),
        "127.0.0.1:6443".into(),
        Arc::new(Metrics::default()),
    )
}

/// Sends `method uri` with content type `ct` and `accept`, as kubectl run by an admin.
pub(super) async fn send(
    api: &Arc<ApiServer>,
    method: &str,
    uri: &str,
    ct: &str,
    accept: &str,
    body: &str,
) -> Answer {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .header("accept", accept)
        .header(
            "user-agent",
            "kubectl/v1.37.0 (linux/amd64) kubernetes/abcdef0",
        )
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let user = UserInfo {
        name: "admin".into(),
        uid: String::new(),
        groups: vec!["system:masters".into()],
    };
    let resp = api.clone().handle(req, Some(user)).await;
    let code = resp.status().as_u16();
    let raw = resp.into_body().collect().await.expect("body").to_bytes();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Answer { code, body, raw }
}

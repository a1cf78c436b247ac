//! Member clients against an in-process TLS server: concurrent requests (a probe and two
//! watches, say) and other clients for the same member share one HTTP/2 connection, the bearer token and the endpoint's path
//! prefix are applied, an HTTP/1.1-only member still works, and a foreign CA is refused.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use fed_api::ClusterSpec;
use fed_controllers::member_client::{Limits, MemberClients, federation_client};
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use meridian_apiserver::pki::Authority;
use meridian_apiserver::server::{handshake, serve_connection, tls_config};
use tokio::sync::{Barrier, watch};

const TOKEN: &str = "t0ken";

/// What the server saw: (connection id, HTTP version, path) of every request.
type Seen = Arc<Mutex<Vec<(u64, Version, String)>>>;

struct Member {
    addr: SocketAddr,
    ca_pem: String,
    seen: Seen,
    _shutdown: watch::Sender<bool>,
}

/// A TLS server offering `alpn`; requests to `/hold` wait until `hold` of them are in
/// flight at once, so answering them proves they were concurrent.
async fn member(alpn: &[&[u8]], hold: usize) -> Member {
    let ca = Authority::generate().expect("CA");
    let serving = ca.serving_cert(&[]).expect("serving cert");
    let mut cfg = (*tls_config(&serving.cert_pem, &serving.key_pem, None).expect("tls")).clone();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Seen = Arc::default();
    let barrier = Arc::new(Barrier::new(hold.max(1)));
    let (shutdown, rx) = watch::channel(false);
    let ids = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, peer)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen, barrier, rx) =
                (acceptor.clone(), seen.clone(), barrier.clone(), rx.clone());
            let id = ids.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let Some((tls, _)) = handshake(&acceptor, tcp, peer).await else {
                    return;
                };
                serve_connection(
                    tls,
                    move |req: Request<hyper::body::Incoming>| {
                        let (seen, barrier) = (seen.clone(), barrier.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            seen.lock().unwrap().push((id, req.version(), path.clone()));
                            let authorized = req
                                .headers()
                                .get(http::header::AUTHORIZATION)
                                .is_some_and(|v| v == format!("Bearer {TOKEN}").as_str());
                            if path.ends_with("/hold") {
                                barrier.wait().await;
                            }
                            let code = if authorized {
                                StatusCode::OK
                            } else {
                                StatusCode::UNAUTHORIZED
                            };
                            http::Response::builder()
                                .status(code)
                                .body(Full::new(Bytes::from_static(b"ok")).boxed())
                                .expect("response")
                        }
                    },
                    rx,
                )
                .await;
            });
        }
    });
    Member {
        addr,
        ca_pem: ca.cert_pem,
        seen: seen2,
        _shutdown: shutdown,
    }
}

fn spec(endpoint: String, ca_pem: &str) -> ClusterSpec {
    ClusterSpec {
        api_endpoint: endpoint,
        ca_bundle: Some(base64::engine::general_purpose::STANDARD.encode(ca_pem)),
        ..Default::default()
    }
}

async fn get(client: &kube::Client, path: &str) -> Result<String, kube::Error> {
    let req = Request::get(path).body(Vec::new()).expect("request");
    tokio::time::timeout(Duration::from_secs(10), client.request_text(req))
        .await
        .expect("request within 10s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_http2_connection() {
    let m = member(&[b"h2", b"http/1.1"], 3).await;
    let clients = MemberClients::new(Limits::default());
    let client = clients
        .client(
            &spec(format!("https://{}/prefix", m.addr), &m.ca_pem),
            TOKEN,
        )
        .expect("client");
    // Three requests that can only complete together, like a probe beside two watches.
    let (c2, c3) = (client.clone(), client.clone());
    let (a, b, c) = tokio::join!(get(&client, "/hold"), get(&c2, "/hold"), get(&c3, "/hold"));
    for r in [a, b, c] {
        assert_eq!(r.expect("request"), "ok");
    }
    assert_eq!(get(&client, "/api").await.expect("later request"), "ok");
    // Another controller asking for the same member gets the same connection.
    let other = clients
        .client(
            &spec(format!("https://{}/prefix", m.addr), &m.ca_pem),
            TOKEN,
        )
        .expect("client");
    assert_eq!(get(&other, "/api").await.expect("other client"), "ok");
    let seen = m.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    let connections: HashSet<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(connections.len(), 1, "one connection carries all: {seen:?}");
    assert!(seen.iter().all(|s| s.1 == Version::HTTP_2), "{seen:?}");
    assert!(
        seen.iter().all(|s| s.2.starts_with("/prefix/")),
        "endpoint path prefix kept: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_only_member_still_works() {
    let m = member(&[b"http/1.1"], 1).await;
    let clients = MemberClients::new(Limits::default());
    let client = clients
        .client(&spec(format!("https://{}", m.addr), &m.ca_pem), TOKEN)
        .expect("client");
    assert_eq!(get(&client, "/readyz").await.expect("request"), "ok");
    let seen = m.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].1, Version::HTTP_11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_and_foreign_ca_are_refused() {
    let m = member(&[b"h2", b"http/1.1"], 1).await;
    let clients = MemberClients::new(Limits::default());
    let wrong_token = clients
        .client(&spec(format!("https://{}", m.addr), &m.ca_pem), "nope")
        .expect("client");
    match get(&wrong_token, "/api").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
    let other_ca = Authority::generate().expect("CA");
    let foreign = clients
        .client(
            &spec(format!("https://{}", m.addr), &other_ca.cert_pem),
            TOKEN,
        )
        .expect("client");
    let err = get(&foreign, "/api").await.expect_err("untrusted server");
    let text = format!("{err:?}");
    assert!(text.contains("InvalidCertificate"), "{text}");
    assert!(
        matches!(
            clients.client(&spec("http://127.0.0.1:1".into(), &m.ca_pem), TOKEN),
            Err(fed_controllers::credentials::CredentialsError::InvalidEndpoint { .. })
        ),
        "plain http is refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federation_client_multiplexes_with_kubeconfig_credentials() {
    let m = member(&[b"h2", b"http/1.1"], 3).await;
    let mut config = kube::Config::new(format!("https://{}", m.addr).parse().expect("uri"));
    let der = meridian_apiserver::server::parse_certs(&m.ca_pem).expect("CA PEM");
    config.root_cert = Some(der.iter().map(|c| c.to_vec()).collect());
    config.auth_info = serde_json::from_value(serde_json::json!({ "token": TOKEN })).expect("auth");
    let client = federation_client(config, Limits::default()).expect("client");
    let (c2, c3) = (client.clone(), client.clone());
    let (a, b, c) = tokio::join!(get(&client, "/hold"), get(&c2, "/hold"), get(&c3, "/hold"));
    for r in [a, b, c] {
        assert_eq!(
            r.expect("request"),
            "ok",
            "token from the configuration is sent"
        );
    }
    let seen = m.seen.lock().unwrap().clone();
    let connections: HashSet<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(connections.len(), 1, "{seen:?}");
    assert!(seen.iter().all(|s| s.1 == Version::HTTP_2), "{seen:?}");
}

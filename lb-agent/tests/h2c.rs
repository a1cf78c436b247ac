//! h2c Service ports: HTTP/2 cleartext from the client, through the agent's listen port and
//! its Host-routed listener, to an h2c backend.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{TcpListener, TcpStream};

/// An h2c-only backend answering `h2:<authority>`.
async fn h2c_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        assert_eq!(req.version(), http::Version::HTTP_2);
                        let authority = req
                            .uri()
                            .authority()
                            .map(|a| a.to_string())
                            .unwrap_or_default();
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(format!("h2:{authority}")),
                        )))
                    },
                );
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    addr
}

async fn h2_get(addr: SocketAddr, authority: &str) -> (u16, String) {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri(format!("http://{authority}/"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_port_end_to_end() {
    let be = h2c_backend().await;
    let a = TestAgent::start("a", "127.0.18.1").await;
    a.feed(
        config(
            "a",
            vec![a.cluster()],
            vec![service(
                "shop",
                "grpc",
                vec![port("grpc", "h2c", 9000, 31900)],
                &[("a", 1)],
            )],
        ),
        local(&[("shop", "grpc", "grpc", vec![be])]),
    )
    .await;
    let listen = SocketAddr::new(a.agent.http_addr.ip(), 31900);
    assert_eq!(
        h2_get(listen, "x.example").await,
        (200, "h2:x.example".into())
    );
    // Host routing works for an h2c client too (authority instead of Host).
    assert_eq!(
        h2_get(a.agent.http_addr, "grpc.shop.global.test").await,
        (200, "h2:grpc.shop.global.test".into())
    );
    // And an HTTP/1.1 client reaches the h2c backend.
    let r = get(a.agent.http_addr, "grpc.shop").await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, "h2:grpc.shop"));
}

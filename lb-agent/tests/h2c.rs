//! h2c Service ports: HTTP/2 cleartext from the client, through the agent's listen port and
//! its Host-routed listener, to an h2c backend; long (gRPC-style) streams outlive the
//! backend's draining.

// Tests fail on the first unexpected error: unwrapping is how they report it.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
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

/// An h2c backend named `name` whose answers stream `<name> <i>` lines, one every 100 ms,
/// ten in all: a long server stream as gRPC's are.
async fn h2c_streaming_backend(name: &'static str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |_req: http::Request<hyper::body::Incoming>| async move {
                        let (mut tx, lines) = futures::channel::mpsc::channel(1);
                        tokio::spawn(async move {
                            use futures::SinkExt;
                            for i in 0..10 {
                                if i > 0 {
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                }
                                let frame =
                                    hyper::body::Frame::data(Bytes::from(format!("{name} {i}\n")));
                                let sent: Result<_, std::convert::Infallible> = Ok(frame);
                                if tx.send(sent).await.is_err() {
                                    return;
                                }
                            }
                        });
                        Ok::<_, std::convert::Infallible>(http::Response::new(StreamBody::new(
                            lines,
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

/// Opens an h2c stream to `addr` and returns its response body.
async fn h2_stream(addr: SocketAddr, authority: &str) -> hyper::body::Incoming {
    let s = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri(format!("http://{authority}/stream"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body()
}

/// The next data frame of `body` as text, within 5 s; `None` at its end.
async fn next_line(body: &mut hyper::body::Incoming) -> Option<String> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a frame within 5 s")?
            .expect("stream not broken");
        if let Ok(data) = frame.into_data() {
            return Some(String::from_utf8_lossy(&data).into_owned());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_h2c_streams_outlive_the_backends_draining() {
    let old = h2c_streaming_backend("old").await;
    let new = h2c_streaming_backend("new").await;
    let a = TestAgent::start_with("a", "127.0.18.2", |s| {
        s.drain_timeout = Duration::from_secs(20);
    })
    .await;
    let svc = service(
        "shop",
        "grpc",
        vec![port("grpc", "h2c", 9000, 31901)],
        &[("a", 1)],
    );
    a.feed(
        config("a", vec![a.cluster()], vec![svc.clone()]),
        local(&[("shop", "grpc", "grpc", vec![old])]),
    )
    .await;
    let listen = SocketAddr::new(a.agent.http_addr.ip(), 31901);
    // One stream through the listen port, one Host-routed.
    let mut streams = vec![
        h2_stream(listen, "x.example").await,
        h2_stream(a.agent.http_addr, "grpc.shop.global.test").await,
    ];
    for s in &mut streams {
        assert_eq!(next_line(s).await.as_deref(), Some("old 0\n"));
    }
    // The endpoint leaves: new streams go to its successor, open ones run to their end.
    a.feed(
        config("a", vec![a.cluster()], vec![svc]),
        local(&[("shop", "grpc", "grpc", vec![new])]),
    )
    .await;
    let mut fresh = h2_stream(listen, "x.example").await;
    assert_eq!(next_line(&mut fresh).await.as_deref(), Some("new 0\n"));
    for s in &mut streams {
        let mut rest = String::new();
        while let Some(text) = next_line(s).await {
            rest.push_str(&text);
        }
        let want: String = (1..10).map(|i| format!("old {i}\n")).collect();
        assert_eq!(rest, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_streams_end_at_the_drain_timeout() {
    let old = h2c_streaming_backend("old").await;
    let a = TestAgent::start_with("a", "127.0.18.3", |s| {
        s.drain_timeout = Duration::from_millis(200);
    })
    .await;
    let svc = service(
        "shop",
        "grpc",
        vec![port("grpc", "h2c", 9000, 31902)],
        &[("a", 1)],
    );
    a.feed(
        config("a", vec![a.cluster()], vec![svc.clone()]),
        local(&[("shop", "grpc", "grpc", vec![old])]),
    )
    .await;
    let mut stream = h2_stream(a.agent.http_addr, "grpc.shop.global.test").await;
    assert_eq!(next_line(&mut stream).await.as_deref(), Some("old 0\n"));
    a.feed(config("a", vec![a.cluster()], vec![svc]), local(&[]))
        .await;
    // The backend's stream would run 900 ms more; the agent ends it after 200 ms.
    let mut text = String::new();
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                }
            }
            Ok(Some(Err(_))) => break true,
            Ok(None) => break false,
            Err(_) => panic!("no end within 5 s"),
        }
    };
    assert!(ended, "the stream was cut, not finished: {text:?}");
    assert!(!text.contains("old 9"), "{text:?}");
}

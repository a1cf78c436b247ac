use super::*;

fn parse(raw: &str) -> (Result<Parsed, HeadError>, RequestHead) {
    let mut head = RequestHead::default();
    let r = parse_request(raw.as_bytes(), &mut head, &HeadLimits::default());
    (r, head)
}

fn upstream(head: &RequestHead, host: Option<&str>, fwd: Option<&str>) -> String {
    let mut out = Vec::new();
    write_upstream_head(
        &mut out,
        head,
        host.map(str::as_bytes),
        fwd.map(str::as_bytes),
    );
    String::from_utf8(out).unwrap()
}

#[test]
fn request_head_is_rewritten_for_the_next_hop() {
    let raw = "GET /a?b=1 HTTP/1.1\r\nHost: web.shop\r\nAccept: */*\r\nConnection: keep-alive, X-Drop\r\n\
         Keep-Alive: 5\r\nX-Drop: 1\r\nTE: trailers\r\nProxy-Connection: x\r\n\
         Proxy-Authenticate: y\r\nX-Keep: 2\r\n\r\nrest";
    let (r, head) = parse(raw);
    assert_eq!(r, Ok(Parsed::Complete));
    assert_eq!(head.host_str(), Some("web.shop"));
    assert_eq!(head.framing, Framing::Empty);
    assert!(head.keep_alive && head.idempotent && !head.is_head && !head.http10);
    assert!(!head.forwarded);
    assert_eq!(head.len, raw.len() - "rest".len());
    assert_eq!(
        upstream(&head, Some("web.shop"), None),
        "GET /a?b=1 HTTP/1.1\r\nAccept: */*\r\nX-Keep: 2\r\nhost: web.shop\r\n\r\n"
    );
    assert_eq!(
        upstream(&head, Some("web.shop.global.test"), Some("a")),
        "GET /a?b=1 HTTP/1.1\r\nAccept: */*\r\nX-Keep: 2\r\nhost: web.shop.global.test\r\n\
         x-meridian-forwarded-by: a\r\n\r\n"
    );
}

#[test]
fn absolute_form_and_forwarded_requests() {
    let (r, head) =
        parse("GET http://x.example:8080?q HTTP/1.1\r\nX-Meridian-Forwarded-By: b\r\n\r\n");
    assert_eq!(r, Ok(Parsed::Complete));
    assert_eq!(
        head.host_str(),
        Some("x.example:8080"),
        "authority stands in for Host"
    );
    assert!(head.forwarded);
    assert_eq!(
        upstream(&head, head.host_str(), None),
        "GET /?q HTTP/1.1\r\nX-Meridian-Forwarded-By: b\r\nhost: x.example:8080\r\n\r\n"
    );
    let (_, head) = parse("GET http://x.example/p HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(head.host_str(), Some("h"), "Host wins over the authority");
    let (_, head) = parse("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(upstream(&head, None, None).starts_with("OPTIONS * HTTP/1.1\r\n"));
}

#[test]
fn keep_alive_by_version_and_connection() {
    let (_, h) = parse("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n");
    assert!(!h.keep_alive);
    let (_, h) = parse("GET / HTTP/1.0\r\n\r\n");
    assert!(h.http10 && !h.keep_alive);
    let (_, h) = parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(h.http10 && h.keep_alive);
    assert!(!h.has_host && h.host_str().is_none());
    assert_eq!(upstream(&h, None, None), "GET / HTTP/1.1\r\n\r\n");
}

#[test]
fn body_framing_of_requests() {
    let (r, h) = parse("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
    assert_eq!(
        (r, h.framing, h.idempotent),
        (Ok(Parsed::Complete), Framing::Length(5), false)
    );
    assert!(upstream(&h, None, None).contains("Content-Length: 5\r\n"));
    let (_, h) = parse("PUT / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(h.framing, Framing::Empty);
    let (_, h) = parse("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked \r\n\r\n");
    assert_eq!(h.framing, Framing::Chunked);
    assert!(
        upstream(&h, None, None).contains("Transfer-Encoding: Chunked\r\n"),
        "the chunked body is relayed as it is, so its framing header stays"
    );
    // Every framing two parsers could read differently is refused (request smuggling).
    for bad in [
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        "PUT / HTTP/1.1\r\ncontent-length: 3\r\nContent-Length: 3\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 3x\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 0x3\r\n\r\n",
    ] {
        assert_eq!(parse(bad).0, Err(HeadError::Framing), "{bad}");
    }
}

#[test]
fn line_ends_folds_and_spaces_that_could_be_read_twice_are_refused() {
    for (bad, want) in [
        ("GET / HTTP/1.1\nHost: a\r\n\r\n", HeadError::BareLf),
        ("GET / HTTP/1.1\r\nHost: a\n\r\n", HeadError::BareLf),
        ("GET / HTTP/1.1\r\nHost: a\n\n", HeadError::BareLf),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n  folded\r\n\r\n",
            HeadError::Malformed,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 3\r\n\r\n",
            HeadError::Malformed,
        ),
        (
            "GET / HTTP/1.1\r\nHost: a\r\n Content-Length: 3\r\n\r\n",
            HeadError::Malformed,
        ),
        ("GET / HTTP/1.1\r\nHo\0st: a\r\n\r\n", HeadError::Malformed),
        ("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", HeadError::Malformed),
    ] {
        let got = parse(bad).0;
        assert_eq!(got, Err(want), "{bad:?}");
        assert_eq!(want.status(), 400);
    }
}

#[test]
fn limits_on_line_count_and_size() {
    let limits = HeadLimits {
        max_head: 2048,
        max_headers: 4,
        max_request_line: 64,
    };
    let mut head = RequestHead::default();
    let mut p = |raw: &str| parse_request(raw.as_bytes(), &mut head, &limits);
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(64));
    assert_eq!(p(&long), Err(HeadError::LineTooLong));
    assert_eq!(HeadError::LineTooLong.status(), 414);
    // Known to be too long before the line even ends.
    assert_eq!(p(&long[..70]), Err(HeadError::LineTooLong));
    let five: String = (0..5).map(|i| format!("x-{i}: v\r\n")).collect();
    assert_eq!(
        p(&format!("GET / HTTP/1.1\r\n{five}\r\n")),
        Err(HeadError::TooLarge)
    );
    assert_eq!(HeadError::TooLarge.status(), 431);
    let four: String = (0..4).map(|i| format!("x-{i}: v\r\n")).collect();
    assert_eq!(
        p(&format!("GET / HTTP/1.1\r\n{four}\r\n")),
        Ok(Parsed::Complete)
    );
    let big = format!("GET / HTTP/1.1\r\nx: {}", "a".repeat(2048));
    assert_eq!(p(&big), Err(HeadError::TooLarge));
}

#[test]
fn upgrade_requests_keep_their_upgrade_upstream() {
    let (r, h) = parse(
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: k\r\n\r\n",
    );
    assert_eq!(r, Ok(Parsed::Complete));
    assert_eq!(h.upgrade.as_deref(), Some(&b"websocket"[..]));
    assert_eq!(
        upstream(&h, Some("a"), None),
        "GET /ws HTTP/1.1\r\nSec-WebSocket-Key: k\r\nhost: a\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n"
    );
    // Without `Connection: upgrade` it is an ordinary hop-by-hop header.
    let (_, h) = parse("GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n");
    assert!(h.upgrade.is_none());
    assert_eq!(upstream(&h, None, None), "GET / HTTP/1.1\r\n\r\n");
    // A 101 answers it; unasked, a 101 is malformed.
    let (r, out) = respond(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n",
        "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    );
    assert!(r.switching && !r.client_keep_alive && !r.upstream_reusable);
    assert_eq!(
        out,
        "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n"
    );
}

#[test]
fn unserved_answers_of_other_agents_are_recognised() {
    let (r, _) = respond(
        "HTTP/1.1 503 Service Unavailable\r\nx-meridian-error: unserved\r\ncontent-length: 0\r\n\r\n",
        GET,
    );
    assert!(r.unserved);
    let (r, _) = respond(
        "HTTP/1.1 502 Bad Gateway\r\nx-meridian-error: failed\r\ncontent-length: 0\r\n\r\n",
        GET,
    );
    assert!(!r.unserved);
}

#[test]
fn malformed_partial_and_handed_off_heads() {
    assert_eq!(
        parse("GET / HTTP/1.1\r\nHost: a\r\n").0,
        Ok(Parsed::Partial)
    );
    assert_eq!(parse("").0, Ok(Parsed::Partial));
    assert_eq!(parse("PRI * HTTP/2").0, Ok(Parsed::Partial));
    assert_eq!(
        parse("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").0,
        Ok(Parsed::Handoff)
    );
    assert_eq!(
        parse("GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n").0,
        Ok(Parsed::Complete)
    );
    assert_eq!(
        parse("CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n").0,
        Ok(Parsed::Handoff)
    );
    assert_eq!(
        parse("PUT / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n").0,
        Ok(Parsed::Handoff)
    );
    assert_eq!(
        parse("GET / HTTP/1.1\r\nBad Header: x\r\n\r\n").0,
        Err(HeadError::Malformed)
    );
    assert_eq!(
        parse("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").0,
        Err(HeadError::DuplicateHost)
    );
    assert_eq!(
        parse("GET nope HTTP/1.1\r\n\r\n").0,
        Err(HeadError::Malformed)
    );
    let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
    assert_eq!(
        parse(&format!("GET / HTTP/1.1\r\n{many}\r\n")).0,
        Err(HeadError::TooLarge)
    );
    let huge = format!("GET / HTTP/1.1\r\nx: {}", "a".repeat(MAX_HEAD));
    assert_eq!(parse(&huge).0, Err(HeadError::TooLarge));
}

fn respond(raw: &str, req: &str) -> (ResponseHead, String) {
    let (_, req) = parse(req);
    let mut out = Vec::new();
    match parse_response(raw.as_bytes(), &req, &mut out).unwrap() {
        ParsedResponse::Final(r) => (r, String::from_utf8(out).unwrap()),
        other => panic!("{other:?}"),
    }
}

const GET: &str = "GET / HTTP/1.1\r\n\r\n";

#[test]
fn response_heads_for_the_client() {
    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: x-hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-A: b\r\n\r\nok",
        GET,
    );
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\n"
    );
    assert_eq!((r.code, r.framing), (200, Framing::Length(2)));
    assert!(r.upstream_reusable && r.client_keep_alive && !r.dechunk);
    assert_eq!(r.len, 98, "the upstream head, without the body");

    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n",
        GET,
    );
    assert_eq!(r.framing, Framing::Chunked);
    assert_eq!(
        out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "TE wins over CL"
    );

    // HTTP/1.0 clients get the payload of a chunked body and a close.
    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    assert!(r.dechunk && !r.client_keep_alive && r.upstream_reusable);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n");
    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n",
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    assert!(r.client_keep_alive);
    assert!(out.ends_with("connection: keep-alive\r\n\r\n"));

    // No length: read to EOF, both connections end.
    let (r, out) = respond("HTTP/1.1 200 OK\r\n\r\n", GET);
    assert_eq!(r.framing, Framing::ToEof);
    assert!(!r.upstream_reusable && !r.client_keep_alive);
    assert!(out.ends_with("connection: close\r\n\r\n"));

    // Upstream close: the upstream connection is not reused; the client's stays.
    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        GET,
    );
    assert!(!r.upstream_reusable && r.client_keep_alive);
    assert_eq!(out, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    let (r, _) = respond("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", GET);
    assert!(
        !r.upstream_reusable,
        "HTTP/1.0 upstreams close unless they say otherwise"
    );

    // Client close.
    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert!(!r.client_keep_alive && r.upstream_reusable);
    assert!(out.ends_with("connection: close\r\n\r\n"));
}

#[test]
fn bodiless_responses() {
    let (r, out) = respond(
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
        "HEAD / HTTP/1.1\r\n\r\n",
    );
    assert_eq!(r.framing, Framing::Empty);
    assert!(
        out.contains("Content-Length: 5\r\n"),
        "HEAD keeps the length of the GET"
    );
    for code in ["204 No Content", "304 Not Modified"] {
        let (r, _) = respond(
            &format!("HTTP/1.1 {code}\r\nContent-Length: 5\r\n\r\n"),
            GET,
        );
        assert_eq!(r.framing, Framing::Empty, "{code}");
    }
    let (_, req) = parse(GET);
    let mut out = Vec::new();
    assert_eq!(
        parse_response(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n",
            &req,
            &mut out
        ),
        Ok(ParsedResponse::Interim(25))
    );
    assert_eq!(
        parse_response(b"HTTP/1.1 101 Switching\r\n\r\n", &req, &mut out),
        Err(HeadError::Malformed)
    );
    assert_eq!(
        parse_response(b"HTTP/1.1 200 OK\r\n", &req, &mut out),
        Ok(ParsedResponse::Partial)
    );
    assert_eq!(
        parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            &req,
            &mut out
        ),
        Err(HeadError::Framing)
    );
    assert_eq!(
        parse_response(b"garbage\r\n\r\n", &req, &mut out),
        Err(HeadError::Malformed)
    );
}

#[test]
fn plain_answers() {
    let (_, req) = parse(GET);
    let mut out = Vec::new();
    write_plain(&mut out, 503, "no\n", &req, false, Some("unserved"));
    assert_eq!(
        String::from_utf8_lossy(&out),
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 3\r\nx-meridian-error: unserved\r\n\r\nno\n"
    );
    let (_, req) = parse("HEAD / HTTP/1.1\r\n\r\n");
    write_plain(&mut out, 404, "no\n", &req, true, None);
    assert!(
        String::from_utf8_lossy(&out).ends_with("content-length: 3\r\nconnection: close\r\n\r\n")
    );
}
